"""The N:M decode kernel's tall tiles against its 2-row tiles at 5 and 8 tokens, cold L2, into a
row-major output (spmm of a row-major B) and a column-major one (linear's).

nm_decode_tall.py timed with the weight warm in L2 (36 MB for 2:8 on 4096 x 14336 fits the
H200's 50 MB): there the tall tiles won 1.2-1.5x at 8 tokens, yet in the llm suite (cold L2,
row-major output) they lost on two of three shapes (4096^2 1:8 9.5 -> 13.8 us). Here each
timing rotates independent weight copies that together overflow L2 twice, as the harness does;
CUDA-graph medians in us a call, each configuration checked against float64 first; "linear"
is the library's whole route (at 12-16 tokens not the decode kernel: TOKENS=12,16 compares).
    PYTHONPATH=src python3 benchmarks/sweeps/nm_decode_tall_cold.py
    SHAPES=28672x8192,8192x28672 TOKENS=1 CONFIGS=4x1024/2w,4x1024/2w/p,4x256/1w/p ...
    PATTERNS=2:4 TOKENS=1 ...   (patterns n:m, default 2:8,1:8)
"""

import itertools
import os

import torch
from _nm_cases import env_cases, nm_case
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels import nm_decode_tuning
from sparsekernels.kernels._sizes import cdiv
from sparsekernels.kernels.spmm_nm_decode import spmm_nm_decode

DEVICE = torch.device("cuda")
SHAPES, PATTERNS, TOKENS = env_cases("4096x14336,14336x4096,4096x4096", "2:8,1:8", "8,5")
# "RxS/Ww[/p][/c][/sN]": R rows a program, S slots a step, W warps, p: the next step's loads
# before this step's gather (prefetch), c: the weight's loads past L1 (".cg") and the gather
# kept ("evict_last"), g: at one token x's span of a step gathered from shared memory
# (gather_shared), sN: N split-K ranges; without sN tiles of 16 rows or more split toward 2048
# programs as nm_decode_tuning.DECODE_TALL does, smaller ones by the library's split rule.
# ORDERS: the output orders timed (row-major; column-major as linear writes it)
CONFIGS = os.environ.get("CONFIGS", "2x256/1w,32x16/1w,16x32/1w,32x32/1w").split(",")
ORDERS = os.environ.get("ORDERS", "row,col").split(",")


def parse(name: str) -> tuple[int, int, int, int, bool, int, tuple[str, str], bool]:
    """A configuration's name: RxS/Ww, then /p for the walk prefetching its next step, /c for
    the cache hints, /g for the shared-memory gather and /sN for N split-K ranges (else the
    split rule above)."""
    tile, warps, *flags = name.split("/")
    rows, slots = (int(d) for d in tile.split("x"))
    ranges = [int(f[1:]) for f in flags if f.startswith("s")]
    target = 2048 if rows >= 16 else 0
    hints = (".cg", "evict_last") if "c" in flags else ("", "")
    split = ranges[0] if ranges else 0
    return rows, slots, int(warps.rstrip("w")), target, "p" in flags, split, hints, "g" in flags


def dense_cold(case: dict) -> float:
    """cuBLAS on the dense weight (x @ w^T), rotated copies as for the sparse forms."""
    ws = [case["w"].clone() for _ in range(max(2, copies_for(case["w"].nbytes, DEVICE)))]
    x = case["x"]
    return do_bench_cudagraph(lambda: [x @ w.t() for w in ws], rep=30) * 1e3 / len(ws)


def linear_cold(case: dict, copies: int, n: int, m: int) -> float:
    """The library's own route (linear, column-major output) over rotated weight copies."""
    W, x, want = case["W"], case["x"], case["want"]
    Ws = [
        sk.NMMatrix(
            W.values.clone(), W.indices.clone(), W.shape, n, m, W.vector, W.block, check=False
        )
        for _ in range(copies)
    ]
    got = [sk.linear(x, Wc) for Wc in Ws][0]  # packs each copy's offsets before the capture
    if ((got.t().double() - want).norm() / want.norm()).item() > 1e-2:
        return float("nan")
    return do_bench_cudagraph(lambda: [sk.linear(x, Wc) for Wc in Ws], rep=30) * 1e3 / copies


def main():
    table = []
    for (M, K), (n, m), tokens in itertools.product(SHAPES, PATTERNS, TOKENS):
        case = nm_case(M, K, n, m, tokens)
        W, want, B, bits, words = (case[k] for k in ("W", "want", "B", "bits", "words"))
        weight_bytes = W.values.nbytes + words.nbytes
        copies = max(2, copies_for(weight_bytes, DEVICE))
        weights = [(W.values.clone(), words.clone()) for _ in range(copies)]
        spw = 32 // bits
        timed = {"dense": dense_cold(case), "linear": linear_cold(case, copies, n, m)}
        for order, name in itertools.product(ORDERS, CONFIGS):
            block_m, slots, warps, target, prefetch, ranges, hints, shared = parse(name)
            if order == "row":
                out = torch.empty(M, tokens, device="cuda", dtype=torch.bfloat16)
            else:
                out = torch.empty(tokens, M, device="cuda", dtype=torch.bfloat16).t()
            block_w = max(1, slots // spw)
            steps = cdiv(W.values.shape[1], block_w * spw)
            split = ranges or nm_decode_tuning.spmm_nm_decode_split(M, block_m, steps, target)

            def run(values, words, out=out, block_m=block_m, block_w=block_w, warps=warps,
                    split=split, prefetch=prefetch, hints=hints, shared=shared):  # fmt: skip
                spmm_nm_decode(
                    values=values, words=words, bits=bits, b=B, bias=None, out=out, n=n, m=m,
                    vector=1, block=1, activation="none", block_m=block_m, block_w=block_w,
                    num_warps=warps, num_stages=2, split=split, prefetch=prefetch,
                    stream_cache=hints[0], gather_eviction=hints[1], gather_shared=shared,
                )  # fmt: skip

            out.fill_(float("nan"))
            run(*weights[0])
            err = ((out.double() - want).norm() / want.norm()).item()
            total = do_bench_cudagraph(lambda: [run(*w) for w in weights], rep=30) * 1e3
            timed[f"{order} {name}"] = total / copies if err < 1e-2 else float("nan")
        label = f"{M}x{K} {n}:{m} x{tokens}"
        print(label, f"copies {copies}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((label, timed))
    names = list(table[0][1])
    print(f"\n{'case':<22} " + " ".join(f"{c:>13}" for c in names))
    for label, timed in table:
        print(f"{label:<22} " + " ".join(f"{timed[c]:13.1f}" for c in names))


if __name__ == "__main__":
    main()
