"""The per-entry CSR SDDMM kernel (kernels/sddmm_csr.py) over entries a step, K a step and warps,
against its configuration (sddmm_tuning.sddmm_csr_config, set from this sweep), the
library's route (sk.sddmm) and the dense product (X @ Y^T, then nothing: the dense peer).

Uniform random patterns at 2-10% stored on 4096 x 4096, K = 64 and 256, bf16 and fp32, one
matrix: the sddmm suite's cases where the route takes this kernel. Issue 3 wants bf16 faster
than the dense product from 95% sparsity; the suite has 2% at 0.99x (K = 64) and 0.72x
(K = 256). A row of ~82 entries at 2% is two steps of 64 entries, the second mostly masked,
each a dependent load of columns then a gather of Y's rows: latency, not bytes. CUDA-graph
medians in us, X, Y and the pattern warm in L2 as they are when a product precedes the op;
each configuration checked against float64 first. Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/sddmm_entry_configs.py
"""

import itertools
import os
import time

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.cases import _pattern_from_mask
from sparsekernels.kernels import sddmm_tuning
from sparsekernels.kernels.sddmm_csr import sddmm_csr

BUDGET_S = float(os.environ.get("BUDGET_S", 150))
DENSITIES = [0.02, 0.05, 0.1]
KS = [64, 256]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
# (entries a step, K a step, warps)
CONFIGS = [(16, 64, 1), (32, 64, 2), (64, 64, 4), (128, 64, 4), (128, 64, 8), (32, 128, 4),
           (64, 128, 4), (128, 128, 8), (128, 32, 4), (256, 64, 8)]  # fmt: skip


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def main():
    started, table = time.time(), []
    g = torch.Generator(device="cuda").manual_seed(0)
    for (name, dtype), density, K in itertools.product(DTYPES.items(), DENSITIES, KS):
        if time.time() - started > BUDGET_S:
            break
        mask = torch.rand(4096, 4096, generator=g, device="cuda") < density
        P = _pattern_from_mask(mask, dtype)
        X = torch.randn(4096, K, generator=g, device="cuda").to(dtype)
        Y = torch.randn(4096, K, generator=g, device="cuda").to(dtype)
        rows, cols = P.pattern.row_indices().long(), P.column_indices.long()
        want = (X.double() @ Y.double().t())[rows, cols]
        order = P.row_order
        lib = sddmm_tuning.sddmm_csr_config(K, P.nnz, 4096)
        timed = {
            "dense": bench(lambda: X @ Y.t()),
            "route": bench(lambda: sk.sddmm(X, Y, P)),
        }
        out = torch.empty(1, P.nnz, device="cuda", dtype=dtype)
        configs = [("library", (lib.block_nnz, lib.block_k, lib.num_warps))]
        configs += [(f"{e}x{k}/{w}w", (e, k, w)) for e, k, w in CONFIGS if k <= max(K, 32)]
        for label, (block_nnz, block_k, warps) in configs:

            def run(block_nnz=block_nnz, block_k=block_k, warps=warps):
                sddmm_csr(row_offsets=P.row_offsets, column_indices=P.column_indices, x=X, y=Y,
                          row_order=order, out=out, block_nnz=block_nnz, block_k=block_k,
                          num_warps=warps)  # fmt: skip

            out.fill_(float("nan"))
            run()
            err = ((out[0].double() - want).norm() / want.norm()).item()
            timed[label] = bench(run) if err < 1e-2 else float("nan")
        case = f"{name} {density:.0%} K={K}"
        best = sorted((t, k) for k, t in timed.items() if k not in ("dense", "route"))[:3]
        print(case, f"library {lib}", {k: round(v, 1) for k, v in timed.items()}, "best", best,
              flush=True)  # fmt: skip
        table.append((case, timed))
    names = ["dense", "route", "library"] + [f"{e}x{k}/{w}w" for e, k, w in CONFIGS]
    print(f"\n{'case':<18} " + " ".join(f"{c:>12}" for c in names))
    for case, timed in table:
        print(f"{case:<18} " + " ".join(f"{timed.get(c, float('nan')):12.1f}" for c in names))


if __name__ == "__main__":
    main()
