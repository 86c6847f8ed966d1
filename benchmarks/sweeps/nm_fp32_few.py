"""Strict fp32 vector-wise N:M at 1-16 tokens: the route (the decode kernel: its 8-row x
256-slot one-warp step spills 2.4 KB a thread in fp32, benchmarks/NOTES.md fifty-ninth
session; 64:128 b=64 at 8 tokens 0.20-0.26x dense on an H100) against the same call with fp32
given the size-picked tiles (_triton_nm.SIZED_TILE_DTYPES: the tensor-core kernel's few-token
tiles, ieee fp32 dots) and cuBLAS on the dense weight, TF32 off. Cold L2 (weight copies that
overflow it), CUDA-graph medians in us a call through linear, each form checked against
float64 first (NaN where wrong).
    PYTHONPATH=src python3 benchmarks/sweeps/nm_fp32_few.py
    SHAPES=14336x4096 PATTERNS=64:128/64/64,4:8/64/1 TOKENS=8 ...
"""

import itertools
import os

import torch
from _nm_cases import env_cases
from nm_decode_tall_cold import dense_cold
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.ops import _triton_nm

DEVICE = torch.device("cuda")
SHAPES, _, TOKENS = env_cases("4096x4096,14336x4096,4096x14336", "1:2", "1,4,8,16")
# "n:m/vector/block"
PATTERNS = [
    tuple(int(d) for d in p.replace(":", "/").split("/"))
    for p in os.environ.get("PATTERNS", "64:128/64/64,4:8/64/1,8:32/64/1,16:32/64/1").split(",")
]


def linear_cold(W, copies: int, x: torch.Tensor, want: torch.Tensor, sized: bool) -> float:
    """linear over fresh weight copies (a weight's first calls fix its route), fp32 given the
    size-picked tiles or not."""
    Ws = [
        sk.NMMatrix(W.values.clone(), W.indices.clone(), W.shape, W.n, W.m, W.vector, W.block,
                    check=False)
        for _ in range(copies)
    ]  # fmt: skip
    before = _triton_nm.SIZED_TILE_DTYPES
    if sized:
        _triton_nm.SIZED_TILE_DTYPES = before + (torch.float32,)
    try:
        got = [sk.linear(x, Wc) for Wc in Ws][0]
        if not ((got.t().double() - want).norm() / want.norm()).item() < 1e-4:
            return float("nan")
        return do_bench_cudagraph(lambda: [sk.linear(x, Wc) for Wc in Ws], rep=30) * 1e3 / copies
    finally:
        _triton_nm.SIZED_TILE_DTYPES = before


def main():
    torch.backends.cuda.matmul.allow_tf32 = False  # strict fp32 dense, as the target
    table = []
    for (M, K), (n, m, vector, block), tokens in itertools.product(SHAPES, PATTERNS, TOKENS):
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda")
        mask = sk.prune.nm_mask(w, n, m, vector, block=block)
        W = sk.NMMatrix.from_dense(w, n, m, vector, block=block, mask=mask)
        x = torch.randn(tokens, K, device="cuda")
        want = W.to_dense().double() @ x.t().double()
        copies = max(2, copies_for(W.values.nbytes, DEVICE))
        timed = {
            "dense": dense_cold({"w": W.to_dense(), "x": x}),
            "route": linear_cold(W, copies, x, want, False),
            "sized": linear_cold(W, copies, x, want, True),
        }
        label = f"{M}x{K} {n}:{m} v{vector}{f' b{block}' if block > 1 else ''} t{tokens}"
        print(label, {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((label, timed))
    print(f"\n{torch.cuda.get_device_name()}, fp32 (TF32 off), us a call, cold L2")
    print(f"{'case':<30} {'dense':>7} {'route':>7} {'sized':>7} {'x dense':>8}")
    for label, t in table:
        best = min(t["route"], t["sized"])
        print(f"{label:<30} {t['dense']:7.1f} {t['route']:7.1f} {t['sized']:7.1f}"
              f" {t['dense'] / best:8.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
