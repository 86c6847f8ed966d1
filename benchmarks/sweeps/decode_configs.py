import itertools

import torch
import triton
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import spmm_csr as kcsr
from sparsekernels.kernels import spmm_nm as knm

torch.manual_seed(0)


def bench(fn):
    return do_bench_cudagraph(fn, rep=20, return_mode="median")


M, K = 14336, 4096
w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
for N in [1, 16]:
    x = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    dense = bench(lambda: w @ x)
    for sp in [0.7, 0.9]:
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sp))
        cols = A.pattern.column_indices_int16()
        out = torch.empty(1, M, N, device="cuda", dtype=torch.bfloat16)
        ref = A.to_dense().float() @ x.float()
        res = []
        bn = triton.next_power_of_2(N)
        for br, bnz, nw in itertools.product([1, 2, 4], [128, 256, 512, 1024, 2048], [1, 2, 4, 8]):
            if br * bnz * bn > 32768:
                continue
            f = lambda: kcsr.spmm_csr(
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
                    continue
                res.append((bench(f), br, bnz, nw))
            except Exception:
                pass
        res.sort()
        print(
            f"CSR sp={sp} N={N} dense {dense * 1e3:.1f}us top:",
            [(round(t * 1e3, 1), br, bnz, nw) for t, br, bnz, nw in res[:4]],
            flush=True,
        )
    for n, m in [(2, 8), (1, 8), (2, 4)]:
        W = sk.NMMatrix.from_dense(w, n, m, mask=sk.prune.nm_mask(w.float(), n, m))
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        ref = W.to_dense().float() @ x.float()
        res = []
        bn = triton.next_power_of_2(N)
        for bm, bs, nw in itertools.product([1, 2, 4, 8], [256, 512, 1024], [1, 2, 4, 8]):
            if bm * bs * bn > 32768:
                continue
            f = lambda: knm.spmm_nm(
                values=W.values,
                indices=W.indices,
                b=x,
                bias=None,
                out=out,
                n=n,
                m=m,
                vector=1,
                block=1,
                activation="none",
                use_dot=False,
                block_m=bm,
                block_s=bs,
                block_n=bn,
                num_warps=nw,
                num_stages=2,
            )
            try:
                f()
                err = ((out.float() - ref).norm() / ref.norm()).item()
                if err > 1e-2:
                    continue
                res.append((bench(f), bm, bs, nw))
            except Exception:
                pass
        res.sort()
        print(
            f"NM {n}:{m} N={N} dense {dense * 1e3:.1f}us top:",
            [(round(t * 1e3, 1), bm, bs, nw) for t, bm, bs, nw in res[:4]],
            flush=True,
        )
