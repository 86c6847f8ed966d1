import itertools

import torch
import triton
from triton.testing import do_bench

import sparsekernels as sk
from sparsekernels.kernels import spmm_nm as kernel

torch.manual_seed(0)


def bench(fn):
    return do_bench(fn, warmup=20, rep=60, return_mode="median")


def run(W, B, out, use_dot, bm, bs, bn, nw, ns):
    return lambda: kernel.spmm_nm(
        values=W.values,
        indices=W.indices,
        b=B,
        bias=None,
        out=out,
        n=W.n,
        m=W.m,
        vector=W.vector,
        block=W.block,
        activation="none",
        use_dot=use_dot,
        block_m=bm,
        block_s=bs,
        block_n=bn,
        num_warps=nw,
        num_stages=ns,
    )


print("== decode (gather path), B contiguous (K, T)")
for M, K in [(4096, 4096), (14336, 4096)]:
    w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    for T in [1, 16]:
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
        B = x.t().contiguous()
        dense = bench(lambda: x @ w.t())
        for n, m, v in [(2, 8, 1), (1, 8, 1), (2, 4, 1)]:
            W = sk.NMMatrix.from_dense(w, n, m, v, mask=sk.prune.nm_mask(w.float(), n, m, vector=v))
            out = torch.empty(M, T, device="cuda", dtype=torch.bfloat16)
            ref = W.to_dense().float() @ B.float()
            best = None
            for bm, bs, nw in itertools.product([1, 2, 4, 8], [64, 128, 256, 512], [2, 4, 8]):
                bn = triton.next_power_of_2(T)
                if bm * bs * bn > 8192:
                    continue
                try:
                    f = run(W, B, out, False, bm, bs, bn, nw, 2)
                    f()
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    if err > 1e-2:
                        print("BAD", bm, bs, nw, err)
                        continue
                    t = bench(f)
                except Exception as e:
                    print("fail", bm, bs, nw, str(e)[:80])
                    continue
                if best is None or t < best[0]:
                    best = (t, bm, bs, nw)
            t = best[0]
            gbs = (W.nbytes + x.numel() * 2 + M * T * 2) / t / 1e6
            print(
                f"{M}x{K} T={T:3d} {n}:{m} dense {dense * 1e3:6.1f}us best {t * 1e3:6.1f}us x{dense / t:4.2f} {gbs:5.0f}GB/s cfg bm={best[1]} bs={best[2]} nw={best[3]}",
                flush=True,
            )
print("== batched vector-wise (dot path), B contiguous")
for M, K in [(4096, 4096), (14336, 4096)]:
    w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    for T in [2048]:
        x = torch.randn(T, K, device="cuda", dtype=torch.bfloat16)
        B = x.t().contiguous()
        dense = bench(lambda: x @ w.t())
        tr = bench(lambda: x.t().contiguous())
        for n, m, v in [(2, 8, 64), (1, 8, 64), (2, 4, 64), (16, 32, 128)]:
            W = sk.NMMatrix.from_dense(w, n, m, v, mask=sk.prune.nm_mask(w.float(), n, m, vector=v))
            out = torch.empty(M, T, device="cuda", dtype=torch.bfloat16)
            ref = W.to_dense().float() @ B.float()
            best = None
            for bm, bs, bn, nw, ns in itertools.product(
                [64, 128], [32, 64, 128], [64, 128, 256], [4, 8], [3, 4]
            ):
                if v % bm:
                    continue
                try:
                    f = run(W, B, out, True, bm, bs, bn, nw, ns)
                    f()
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    if err > 1e-2:
                        print("BAD", bm, bs, bn, err)
                        continue
                    t = bench(f)
                except Exception:
                    continue
                if best is None or t < best[0]:
                    best = (t, bm, bs, bn, nw, ns)
            t = best[0]
            print(
                f"{M}x{K} T={T} {n}:{m} v={v} dense {dense * 1e3:6.1f}us best {t * 1e3:6.1f}us x{dense / t:4.2f} (+transpose {tr * 1e3:.1f}us) cfg {best[1:]}",
                flush=True,
            )
