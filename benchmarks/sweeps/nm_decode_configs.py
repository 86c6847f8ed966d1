"""The N:M decode kernel (kernels/spmm_nm_decode.py) against the first gather kernel
(kernels/spmm_nm.py) and dense, at 1 and 16 tokens (or TOKENS=2,4,8) on the 14336 x 4096
MLP weight (or SHAPES=4096x14336,...: few-row weights fill fewer programs), bf16,
CUDA-graph medians. Prints the best configurations per case; writes every timing to
OUT/nm_decode.json when OUT is set."""

import json
import os
import time

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import spmm_nm as old
from sparsekernels.kernels.spmm_nm_decode import packed_bits, spmm_nm_decode
from sparsekernels.kernels.tuning import spmm_nm_config

torch.manual_seed(0)
BUDGET_S = float(os.environ.get("BUDGET_S", 240))
start = time.time()


def bench(fn):
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3  # us


def checked(fn, out, ref):
    out.fill_(float("nan"))
    fn()
    err = ((out.float() - ref).norm() / ref.norm()).item()
    return bench(fn) if err < 1e-2 else None


SHAPES = [tuple(map(int, s.split("x"))) for s in os.environ.get("SHAPES", "14336x4096").split(",")]
CASES = [(1, (2, 8, 1)), (1, (1, 8, 1)), (1, (2, 4, 1)), (1, (2, 8, 64))]
CASES += [(16, (2, 8, 1)), (16, (2, 8, 64)), (4, (2, 8, 1))]
if os.environ.get("TOKENS"):  # e.g. TOKENS=2,4,8,16: element-wise 2:8, 1:8, 2:4 at those counts
    tokens = [int(t) for t in os.environ["TOKENS"].split(",")]
    CASES = [(N, (n, m, 1)) for N in tokens for n, m in ((2, 8), (1, 8), (2, 4))]
CASES = [(shape, *case) for shape in SHAPES for case in CASES]
rows, table = [], []
weights = {}
for (M, K), N, (n, m, v) in CASES:
    if time.time() - start > BUDGET_S:
        break
    if (M, K) not in weights:
        weights[M, K] = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = weights[M, K]
    x = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    B = x.t().contiguous()  # what the op passes for N > 1
    dense = bench(lambda: x @ w.t())
    W = sk.NMMatrix.from_dense(w, n, m, v, mask=sk.prune.nm_mask(w.float(), n, m, vector=v))
    bits = packed_bits(m, 1)
    words = W.packed_indices(bits)
    spw = 32 // bits
    ref = W.to_dense().float() @ B.float()
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    cfg = spmm_nm_config(N, v, False)
    t_old = checked(
        lambda: old.spmm_nm(values=W.values, indices=W.indices, b=B, bias=None, out=out, n=n,
                            m=m, vector=v, block=1, activation="none", use_dot=cfg.use_dot,
                            block_m=cfg.block_m, block_s=cfg.block_s, block_n=cfg.block_n,
                            num_warps=cfg.num_warps, num_stages=cfg.num_stages), out, ref)  # fmt: skip
    results = []
    grid = [(bm, bs, nw) for bm in (1, 2, 4, 8) for bs in (256, 1024) for nw in (1, 2)]
    grid += [(8, 1024, 4), (16, 256, 2), (4, 512, 1), (1, 2048, 1)]
    for bm, bs, nw in grid:
        if time.time() - start > BUDGET_S or bm * bs * N > 32768:
            continue
        fn = lambda: spmm_nm_decode(values=W.values, words=words, bits=bits, b=B, bias=None,
                                    out=out, n=n, m=m, vector=v, block=1, activation="none",
                                    block_m=bm, block_w=bs // spw, num_warps=nw,
                                    num_stages=2)  # fmt: skip
        try:
            t = checked(fn, out, ref)
        except Exception as error:  # noqa: BLE001 - a config that does not compile
            print(bm, bs, nw, type(error).__name__, str(error)[:80])
            continue
        if t is not None:
            results.append((t, bm, bs, nw))
    results.sort()
    case = f"{M}x{K} {n}:{m} v={v} N={N}"
    rows.append({"case": case, "dense_us": dense, "old_us": t_old, "all": results})
    table.append((case, dense, t_old, results[0] if results else None))
    print(case, f"dense {dense:.1f} old {t_old} top {results[:4]}", flush=True)

if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "nm_decode.json"), "w") as f:
        json.dump(rows, f, indent=1)
print(f"\n{'case':<28} {'dense':>7} {'old':>7} {'new':>7}  new x dense  (block_m, slots, warps)")
for case, dense, t_old, best in table:
    new = best[0] if best else float("nan")
    print(f"{case:<28} {dense:7.1f} {t_old or float('nan'):7.1f} {new:7.1f}  {dense / new:5.2f}x"
          f"  {best[1:] if best else None}")  # fmt: skip
