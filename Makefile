# The README's two commands. Each sets up its own virtual environment on first use.
# TORCH picks the PyTorch build: the default is the release this project's machines keep on
# local disk (a CPU build); on a CUDA machine use e.g. `make demo TORCH=torch`.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-gpu sanitize sanitize-suite sanitize-workers lint bench dlmc-subset

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test,bench,hf]"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/sparsekernels demo

# CPU tests: Triton kernels run in its interpreter; GPU tests (marker gpu) run on the H200.
test: setup
	TRITON_INTERPRET=1 $(PY) -m pytest -q -m "not gpu and not slow"

test-gpu:
	PYTHONPATH=src python3 -m pytest -q -m gpu

# On the H200: the kernel tests under compute-sanitizer (memcheck; racecheck needs no explicit
# shared memory in our kernels yet). The caching allocator would hide out-of-bounds accesses.
sanitize:
	PYTORCH_NO_CUDA_MEMORY_CACHING=1 PYTHONPATH=src compute-sanitizer --tool memcheck \
		--error-exitcode 1 python3 -m pytest -q -m gpu -x tests/test_kernels_spmm_csr.py \
		tests/test_kernels_spmm_nm.py tests/test_kernels_sddmm_csr.py \
		tests/test_kernels_softmax_csr.py tests/test_kernels_transpose.py \
		tests/test_kernels_densify.py tests/test_depthwise.py tests/test_kernels_spmm_nm_decode.py \
		tests/test_kernels_spmm_nm_expand.py tests/test_properties_kernels.py \
		tests/test_attention_block.py

# The whole GPU suite under memcheck, six pytest workers (compute-sanitizer follows child
# processes): issue 6 asks for the suite, not only the kernel tests above.
sanitize-suite:
	PYTORCH_NO_CUDA_MEMORY_CACHING=1 PYTHONPATH=src compute-sanitizer --tool memcheck \
		--target-processes all --error-exitcode 1 python3 -m pytest -q -m "gpu and not slow" \
		-p no:cacheprovider -n 6 tests/

# The same suite with each of six pytest workers under its own compute-sanitizer, logging to
# $(SANITIZE_LOGS)/memcheck.<pid>.log: each worker's ERROR SUMMARY is written as that worker
# exits, so a limit on the whole run cannot cut every summary off (it did twice with
# sanitize-suite, whose single summary comes after a slow exit).
SANITIZE_LOGS ?= sanitize-logs
# the interpreter running make's python3, by path: a worker that cannot start is respawned forever
SANITIZED_PYTHON = compute-sanitizer --tool memcheck \
	--log-file $(abspath $(SANITIZE_LOGS))/memcheck.%p.log $(shell command -v python3)
sanitize-workers:
	mkdir -p $(SANITIZE_LOGS)
	PYTORCH_NO_CUDA_MEMORY_CACHING=1 PYTHONPATH=src python3 -m pytest -q -m "gpu and not slow" \
		-p no:cacheprovider --dist load --tx "6*popen//python=$(SANITIZED_PYTHON)" tests/

lint: setup
	$(PY) -m pip install -q ruff
	$(VENV)/bin/ruff check src tests && $(VENV)/bin/ruff format --check src tests

bench: setup
	$(VENV)/bin/sparsekernels bench --quick

# 24 DLMC matrices a model from ../shared/data/dlmc into .dlmc (18 MB, git-ignored), the folder
# `run_h200.sh OUT dlmc` and the csrdlmc sweep read (the device run carries it: carry [".dlmc"]).
dlmc-subset: setup
	$(PY) -c "from sparsekernels.bench import dlmc; dlmc.write_subset('.dlmc', 24)"
