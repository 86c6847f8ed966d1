"""The vector-wise N:M tensor-core kernel's tiles (tuning.spmm_nm_config: 64 x 256, 32 slots a
step, 8 warps, 3 stages, chosen at 2048 tokens on 4096-column weights in the first sessions) at
2048 and 4096 tokens on nmSPARSE's large shapes, bf16.

Issue 4's batched targets (vector-wise v = 64 against dense bf16 at 2048-8192 tokens): 2:8
>= 2.4x, 1:8 >= 4x, 16:32 >= 1.15x. The first nmsparse run (results/nvidia-h200/2026-11-30/
at-3cf23ad/nmsparse) had 2:8 1.75x on 8192^2, 1:8 3.11x on 4096^2 and 16:32 1.01x on
5120 x 20480 at 4096 tokens: the kernel ran 2:8 at ~44% of dense's tensor-core rate on the
work it keeps. Each configuration "RxSxC/Ww/sN" (R rows, S compressed slots a step, C columns
of B, W warps, N pipeline stages) is checked against float64 on a slice first; CUDA-graph
medians in us (the operands are 32-160 MB, past L2). Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_vector_configs.py
    SHAPES=8192x8192 PATTERNS=2:8 TOKENS=4096 CONFIGS=64x32x256/8w/s3,64x64x128/4w/s4 ...
"""

import itertools
import os
import time

import torch
from _nm_cases import env_cases
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import spmm_nm as kernel
from sparsekernels.kernels import tuning

DEVICE = torch.device("cuda")
BUDGET_S = float(os.environ.get("BUDGET_S", 200))
SHAPES, PATTERNS, TOKENS = env_cases("8192x8192,4096x4096,20480x5120", "2:8,1:8,16:32", "4096,2048")
VECTOR = int(os.environ.get("VECTOR", 64))
CONFIGS = os.environ.get(
    "CONFIGS",
    "64x32x256/8w/s3,64x32x256/8w/s4,64x64x256/8w/s3,64x32x128/4w/s4,64x64x128/4w/s4,"
    "64x64x128/8w/s3,64x128x128/8w/s3,64x16x256/8w/s4,32x64x256/8w/s3",
).split(",")


def parse(name: str) -> tuple[int, int, int, int, int]:
    tile, warps, stages = name.split("/")
    rows, slots, cols = (int(d) for d in tile.split("x"))
    return rows, slots, cols, int(warps.rstrip("w")), int(stages.lstrip("s"))


def main():
    start = time.time()
    table = []
    for (M, K), (n, m), tokens in itertools.product(SHAPES, PATTERNS, TOKENS):
        if time.time() - start > BUDGET_S:
            break
        torch.manual_seed(0)
        w = torch.randn(M, K, device=DEVICE, dtype=torch.bfloat16)
        W = sk.NMMatrix.from_dense(
            w, n, m, VECTOR, mask=sk.prune.nm_mask(w.float(), n, m, vector=VECTOR)
        )
        B = torch.randn(K, tokens, device=DEVICE, dtype=torch.bfloat16)
        x = B.t().contiguous()
        rows = slice(0, 256)  # the check: 256 output rows against float64
        want = W.to_dense()[rows].double() @ B.double()
        out = torch.empty(M, tokens, device=DEVICE, dtype=torch.bfloat16)
        lib = tuning.spmm_nm_config(tokens, VECTOR, False)
        configs = {"library": (lib.block_m, lib.block_s, lib.block_n, lib.num_warps,
                               lib.num_stages)}  # fmt: skip
        configs.update({c: parse(c) for c in CONFIGS})
        timed = {"dense": do_bench_cudagraph(lambda: x @ w.t(), rep=50) * 1e3}
        for label, (bm, bs, bn, warps, stages) in configs.items():
            if VECTOR % bm:
                timed[label] = float("nan")
                continue

            def run(bm=bm, bs=bs, bn=bn, warps=warps, stages=stages):
                kernel.spmm_nm(
                    values=W.values, indices=W.indices, b=B, bias=None, out=out, n=n, m=m,
                    vector=VECTOR, block=1, activation="none", use_dot=True, block_m=bm,
                    block_s=bs, block_n=bn, num_warps=warps, num_stages=stages,
                )  # fmt: skip

            try:
                out.fill_(float("nan"))
                run()
                err = ((out[rows].double() - want).norm() / want.norm()).item()
                timed[label] = do_bench_cudagraph(run, rep=50) * 1e3 if err < 1e-2 else float("nan")
            except Exception as error:  # a tile past shared memory fails to launch
                print(label, type(error).__name__, str(error)[:120], flush=True)
                timed[label] = float("nan")
        case = f"{M}x{K} {n}:{m} v={VECTOR} x{tokens}"
        best = min((t, c) for c, t in timed.items() if c != "dense" and t == t)
        print(case, {k: round(v, 1) for k, v in timed.items()}, "best", best,
              f"{timed['dense'] / best[0]:.2f}x dense", flush=True)  # fmt: skip
        table.append((case, timed))
    names = ["dense", "library", *CONFIGS]
    print(f"\n{'case':<28} " + " ".join(f"{c:>16}" for c in names))
    for case, timed in table:
        print(f"{case:<28} " + " ".join(f"{timed.get(c, float('nan')):16.1f}" for c in names))


if __name__ == "__main__":
    main()
