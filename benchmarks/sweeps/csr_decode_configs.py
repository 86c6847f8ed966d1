"""CSR SpMM at decode sizes (N = 1 and 16) on the 14336 x 4096 MLP weight at 70% and 90%,
bf16, CUDA-graph medians, over block configurations; a time budget (BUDGET_S) caps the run.
Prints the best few per case and a table last."""

import itertools
import os
import time

import torch
import triton
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import spmm_csr as kernel

torch.manual_seed(0)
BUDGET_S = float(os.environ.get("BUDGET_S", 120))
start = time.time()


def bench(fn):
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3  # us


M, K = 14336, 4096
w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
table = []
for N, sp in itertools.product([1, 16], [0.7, 0.9]):
    x = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    dense = bench(lambda: w @ x)
    A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sp))
    cols = A.pattern.column_indices_int16()
    out = torch.empty(1, M, N, device="cuda", dtype=torch.bfloat16)
    ref = A.to_dense().float() @ x.float()
    bn = triton.next_power_of_2(N)
    res = []
    for br, bnz, nw in itertools.product([1, 2, 4], [128, 256, 512], [1, 2, 4]):
        if br * bnz * bn > 32768 or time.time() - start > BUDGET_S:
            continue

        def f(br=br, bnz=bnz, nw=nw):
            kernel.spmm_csr(row_offsets=A.row_offsets, column_indices=cols, values=A.values,
                            b=x, bias=None, row_order=A.row_order, out=out, activation="none",
                            block_rows=br, block_nnz=bnz, block_n=bn, num_warps=nw)  # fmt: skip

        out.fill_(float("nan"))
        f()
        if ((out[0].float() - ref).norm() / ref.norm()).item() < 1e-2:
            res.append((bench(f), br, bnz, nw))
    res.sort()
    print(
        f"CSR {sp:.0%} N={N} dense {dense:.1f}us top {[(round(r[0], 1),) + r[1:] for r in res[:4]]}"
    )
    table.append((f"{sp:.0%} N={N}", dense, res[0] if res else None))
print(f"\n{'case':<10} {'dense':>7} {'best':>7}  x dense  (rows, nnz a step, warps)")
for case, dense, best in table:
    t = best[0] if best else float("nan")
    print(f"{case:<10} {dense:7.1f} {t:7.1f}  {dense / t:5.2f}x  {best[1:] if best else None}")
