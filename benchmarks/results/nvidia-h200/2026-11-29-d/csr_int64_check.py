"""Does int64 index arithmetic slow the CSR SpMM kernel? Times the kernel before the 64-bit edits,
with int64 everywhere, and with int64 only when an offset can pass 2^31 (the current one), on
the llm suite's 2048-token shapes, B contiguous and B = x^T. Run from benchmarks/sweeps/ with
_variants/csr_before_int64.py = `git show b6363ea:src/sparsekernels/kernels/spmm_csr.py` and
_variants/csr_all_int64.py = `git show 7ac916f:src/sparsekernels/kernels/spmm_csr.py`; "now" was
a WIDE-flag variant (int64 only past 2^31), dropped since the three time the same
(csr_int64_check.txt): the llm suite's apparent 0.20x was its comparison pairing densities.
Command: PYTHONPATH=src python3 benchmarks/sweeps/csr_int64_check.py"""

import importlib.util
import sys
from pathlib import Path

import torch
from triton.testing import do_bench

import sparsekernels as sk
from sparsekernels.kernels import spmm_csr as current
from sparsekernels.kernels.tuning import spmm_csr_config

HERE = Path(__file__).parent


def load(name):
    spec = importlib.util.spec_from_file_location(name, HERE / "_variants" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


variants = {"before": load("csr_before_int64"), "all_int64": load("csr_all_int64"), "now": current}
torch.manual_seed(0)
print(f"# {torch.cuda.get_device_name()} bf16, times in us (do_bench medians)")
for m, k, n, density in [(14336, 4096, 2048, 0.3), (4096, 4096, 2048, 0.3), (14336, 4096, 16, 0.3)]:
    dense = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    dense *= torch.rand(m, k, device="cuda") < density
    W = sk.CSRMatrix.from_dense(dense)
    order = W.pattern.row_order()
    x = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for layout, b in [("B", x.t().contiguous()), ("x^T", x.t())]:
        config = spmm_csr_config(n)
        row, results = f"{m}x{k}x{n} {layout:4}", {}
        for name, module in variants.items():
            out = torch.full((1, m, n), float("nan"), device="cuda", dtype=torch.bfloat16)

            def run(module=module, out=out):
                module.spmm_csr(
                    row_offsets=W.row_offsets, column_indices=W.column_indices, values=W.values,
                    b=b, bias=None, row_order=order, out=out, activation="none",
                    block_rows=config.block_rows, block_nnz=config.block_nnz,
                    block_n=config.block_n, num_warps=config.num_warps,
                )  # fmt: skip

            run()
            results[name] = (do_bench(run, warmup=5, rep=30, return_mode="median"), out.clone())
        want = results["before"][1].float()
        errs = {k: (v[1].float() - want).abs().max().item() for k, v in results.items()}
        row += "  " + "  ".join(f"{k} {v[0] * 1e3:8.1f}" for k, v in results.items())
        print(row + f"  max diff vs before {max(errs.values()):.3g}", flush=True)
sys.exit(0)
