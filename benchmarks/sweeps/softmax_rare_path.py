"""The row softmax before and after its rare path (rows whose scores pass fp32's max / log2(e),
written again in base e after the common path): the common path's instructions are unchanged,
its registers moved (sm_90 compile: 46 -> 40, 71 -> 70, aligned 256+8 48 -> 56), so time it.
Result (H100, benchmarks/results/nvidia-h100/2026-12-05/softmax-rare-path): causal bf16 1.26x
the time, random:0.1 bf16 1.07x; the rare path (636ef1a) was taken out again. To rerun, give
AFTER's kernel the same way (BEFORE and the library's module are the two forms).

"before" is kernels/softmax_csr.py at a commit given by BEFORE (a file path; on the device:
`git show dc1e667:src/sparsekernels/kernels/softmax_csr.py > /tmp/softmax_before.py`), swapped
in for the library's module; both run through the op's tuned launch (ops/softmax.py). 16 heads
at L = 4096 (causal rows are walked; local:256 and random:0.1 read once), bf16 and fp32,
CUDA-graph medians of one launch per copy of the values (copies past L2), the forms alternated
over ROUNDS. Prints a table last.
    BEFORE=/tmp/softmax_before.py PYTHONPATH=src python3 benchmarks/sweeps/softmax_rare_path.py
"""

import importlib.util
import os
import statistics

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels.kernels as kernels
from sparsekernels.bench.cases import _pattern_from_mask, attention_mask
from sparsekernels.kernels import softmax_csr
from sparsekernels.ops import softmax as softmax_op

ROUNDS = int(os.environ.get("ROUNDS", 3))


def _module(path: str):
    spec = importlib.util.spec_from_file_location("softmax_csr_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    forms = {"before": _module(os.environ["BEFORE"]), "after": softmax_csr}
    L, heads, table = 4096, 16, []
    g = torch.Generator(device="cuda").manual_seed(0)
    print(f"# {torch.cuda.get_device_name()}, L = {L}, {heads} heads")
    for kind in ("causal", "local:256", "random:0.1"):
        P = _pattern_from_mask(attention_mask(kind, L, torch.device("cuda"), g), torch.float32)
        for dtype in (torch.bfloat16, torch.float32):
            copies = max(2, -(-(200 << 20) // (heads * P.nnz * dtype.itemsize)))
            values = [torch.randn(heads, P.nnz, device="cuda", dtype=dtype) for _ in range(copies)]
            results = {name: [] for name in forms}
            outputs = {}
            for _ in range(ROUNDS):
                for name, module in forms.items():
                    kernels.softmax_csr = module  # the op imports it from the package per call

                    def run():
                        return [softmax_op._triton_softmax(P.row_offsets, v, 0.5) for v in values]

                    outputs[name] = run()[0]
                    results[name].append(do_bench_cudagraph(run, rep=20) * 1e3 / copies)
            kernels.softmax_csr = softmax_csr
            same = torch.equal(outputs["before"], outputs["after"])
            times = {name: statistics.median(t) for name, t in results.items()}
            case = f"{kind} {str(dtype)[6:]}"
            print(case, {k: round(t, 1) for k, t in times.items()}, "bitwise", same, flush=True)
            table.append((case, times, same))
    print(f"{'case':<22} {'before us':>10} {'after us':>10} {'after/before':>13} bitwise")
    for case, times, same in table:
        ratio = times["after"] / times["before"]
        print(f"{case:<22} {times['before']:10.1f} {times['after']:10.1f} {ratio:13.3f} {same}")


if __name__ == "__main__":
    main()
