import itertools

import torch
import triton
from triton.testing import do_bench

import sparsekernels as sk
from sparsekernels.kernels import spmm_csr as kernel

torch.manual_seed(0)


def bench(fn):
    return do_bench(fn, warmup=20, rep=60, return_mode="median")


for M, K in [(4096, 4096), (14336, 4096)]:
    w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    for sp in [0.7, 0.9]:
        mask = sk.prune.magnitude_mask(w.float(), sp)
        A = sk.CSRMatrix.from_dense(w, mask=mask)
        cols = A.pattern.column_indices_int16()
        for N in [1, 16, 256]:
            x = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
            dense = bench(lambda: w @ x)
            ref = A.to_dense().float() @ x.float()
            out = torch.empty(1, M, N, device="cuda", dtype=torch.bfloat16)
            best = None
            space = itertools.product(
                [1, 2, 4, 8],
                [16, 32, 64, 128, 256],
                [2, 4, 8],
                [min(N, 16) if N <= 16 else 64, 128] if N > 16 else [triton.next_power_of_2(N)],
            )
            for br, bnz, nw, bn in space:
                if br * bnz * bn > 16384:
                    continue
                f = lambda: kernel.spmm_csr(
                    row_offsets=A.row_offsets,
                    column_indices=cols,
                    values=A.values,
                    b=x,
                    bias=None,
                    row_order=A.row_order,
                    out=out,
                    activation="none",
                    block_rows=br,
                    block_nnz=bnz,
                    block_n=bn,
                    num_warps=nw,
                )
                try:
                    f()
                    err = ((out[0].float() - ref).norm() / ref.norm()).item()
                    if err > 1e-2:
                        print("BAD", br, bnz, nw, bn, err)
                        continue
                    t = bench(f)
                except Exception as e:
                    print("fail", br, bnz, nw, bn, str(e)[:60])
                    continue
                if best is None or t < best[0]:
                    best = (t, br, bnz, nw, bn)
            t = best[0]
            gbs = (A.nnz * 4 + M * 4 + K * N * 2 + M * N * 2) / t / 1e6
            print(
                f"{M}x{K} sp={sp} N={N:4d} dense {dense * 1e3:7.1f}us ours {t * 1e3:7.1f}us x{dense / t:5.2f} {gbs:6.0f}GB/s cfg rows={best[1]} nnz={best[2]} warps={best[3]} bn={best[4]}",
                flush=True,
            )
