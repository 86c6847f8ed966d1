"""The N:M decode kernel at one token with tall, narrow tiles: many rows a program, few slots a
step, split-K for enough programs. Can the gather of x stop being the bound?

At one token the decode kernel and the CSR one-token kernel both take ~850G stored entries a
second (2:8 on 4096 x 14336: 14.7M slots in 16.6 us, 2 TB/s of weight; CSR 70%: 17.6M
entries in 21.6 us), ~6.4 a clock per multiprocessor, where cuBLAS's GEMV reads 3.7 TB/s. A
warp's gather of x touches one 32-byte sector per group its lanes cover, and with 1-8 rows a
program and 256-1024 slots a step the lanes of one gather span ~16 groups. All rows of an
N:M weight share its group structure, so a tile of 16-128 rows and 16-64 slots a step puts
lanes of different rows on the same groups: a gather then touches ~2 sectors (B's rows in
one 16-byte window a group). The price: one packed word and one 32-byte run of values a row
per step (scattered across rows), and few programs (split-K makes up the count). The
configurations swept before (nm_decode_configs.py) had at most 16 rows a program.
bf16 magnitude-pruned weights, x as linear passes it; CUDA-graph medians in us, each output
checked against float64 first. TOKENS=8,16 runs those token counts too (B padded as the
route pads it; tiles over 16K sums a program skipped): at 8 tokens a group's B rows fill one
128-byte line. Prints the best few per case and a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_decode_tall.py
    TOKENS=1,8 BUDGET_S=200 ...
"""

import itertools
import os
import time

import torch
from _nm_cases import nm_case
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels._sizes import cdiv
from sparsekernels.kernels.spmm_nm_decode import spmm_nm_decode

BUDGET_S = float(os.environ.get("BUDGET_S", 150))
SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096)]
PATTERNS = [(2, 8), (1, 8), (2, 4)]
TOKENS = [int(t) for t in os.environ.get("TOKENS", "1").split(",")]
TARGET_PROGRAMS = 2048  # split-K until the grid reaches this many programs
# (rows a program, slots a step, warps)
TILES = [(16, 16, 1), (16, 32, 1), (16, 64, 1), (32, 16, 1), (32, 32, 1), (32, 64, 2), (64, 16, 2), (64, 32, 2),
         (64, 64, 4), (128, 16, 4), (128, 32, 4)]  # fmt: skip


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def main():
    started, table = time.time(), []
    for tokens, (M, K), (n, m) in itertools.product(TOKENS, SHAPES, PATTERNS):
        if time.time() - started > BUDGET_S:
            break
        case = nm_case(M, K, n, m, tokens)
        w, W, x, want, B, bits, words = (
            case[k] for k in ("w", "W", "x", "want", "B", "bits", "words")
        )
        spw = 32 // bits
        out = torch.empty(tokens, M, device="cuda", dtype=torch.bfloat16).t()  # linear's order
        timed = {"dense": bench(lambda: x @ w.t()), "route": bench(lambda: sk.linear(x, W))}
        splits = {}
        for block_m, slots, warps in TILES:
            if block_m * slots * B.shape[1] > 16384:
                continue
            block_w = max(1, slots // spw)
            steps = cdiv(W.values.shape[1], block_w * spw)
            split = max(1, min(steps // 4, TARGET_PROGRAMS // cdiv(M, block_m)))

            def run(block_m=block_m, block_w=block_w, warps=warps, split=split):
                spmm_nm_decode(
                    values=W.values, words=words, bits=bits, b=B, bias=None, out=out, n=n,
                    m=m, vector=1, block=1, activation="none", block_m=block_m,
                    block_w=block_w, num_warps=warps, num_stages=2, split=split,
                )  # fmt: skip

            out.fill_(float("nan"))
            run()
            err = ((out.double() - want).norm() / want.norm()).item()
            name = f"{block_m}x{slots}/{warps}w"
            timed[name], splits[name] = (bench(run) if err < 1e-2 else float("nan")), split
        case = f"{M}x{K} {n}:{m} x{tokens}"
        best = sorted((t, k) for k, t in timed.items() if k not in ("dense", "route"))[:3]
        print(case, f"dense {timed['dense']:.1f} route {timed['route']:.1f} best", best,
              "splits", splits, flush=True)  # fmt: skip
        table.append((case, timed))
    names = ["dense", "route"] + [f"{r}x{s}/{w}w" for r, s, w in TILES]
    print(f"\n{'case':<22} " + " ".join(f"{c[:12]:>12}" for c in names))
    for case, timed in table:
        print(f"{case:<22} " + " ".join(f"{timed.get(c, float('nan')):12.1f}" for c in names))


if __name__ == "__main__":
    main()
