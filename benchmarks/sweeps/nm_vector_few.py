"""Vector-wise N:M at a few tokens: the route before (tuning.MMA_SP_VECTORS off) against the
sparse-tensor-core kernel's windows (spmm_nm_mma_sp.py, MMA_SP_VECTORS on: the vector's
choice expanded into per-row metadata; MMA_SP_ALIASES: 1:2 and 1:4 read as 2:4 and 2:8,
off in the route before) and dense, cold L2, through linear; at one token also with every
window from one token (mma.sp@1); past 16 tokens also with the wgmma and unpack kernels'
windows open to vectors (+tiles: WGMMA_VECTORS, UNPACK_VECTORS). The nm suite had 2:4 v=64
at 16 tokens at 0.33x dense (H100, warm L2; 0.81x cold on 14336 x 4096) where element-wise
2:4 ran 1.3x.

CUDA-graph medians in us a call over weight copies that overflow L2; each form checked
against float64 first (NaN where wrong).
    PYTHONPATH=src python3 benchmarks/sweeps/nm_vector_few.py
    SHAPES=4096x4096 PATTERNS=2:4 VECTORS=64 TOKENS=16 ...
    TOKENS=17,24,32 PATTERNS=2:8,1:8 ... (the +tiles form)
    TOKENS=33,48,64 VECTOR_TOKENS=17,64 ... (+tiles with both kernels' vector windows widened,
    v >= 16 included)
    DTYPE=fp32 PATTERNS=64:128 VECTORS=64 BLOCK=64 TOKENS=8 [DECODE_WORD_MAX_SLOTS=65536] ...
    (block-wise through the decode kernel, with its words capped at 256 slots or not)
"""

import dataclasses
import itertools
import os

import torch
from _nm_cases import env_cases
from nm_decode_tall_cold import dense_cold
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels import (
    nm_decode_tuning,
    nm_mma_sp_tuning,
    nm_unpack_tuning,
    nm_wgmma_tuning,
)

DEVICE = torch.device("cuda")
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[
    os.environ.get("DTYPE", "bf16")
]
SHAPES, PATTERNS, TOKENS = env_cases("4096x4096,14336x4096,4096x14336", "2:4,2:8,1:8", "1,8,16")
VECTORS = [int(v) for v in os.environ.get("VECTORS", "4,64").split(",")]
BLOCK = int(os.environ.get("BLOCK", "1"))  # block-wise patterns: BLOCK=4 VECTORS=4 PATTERNS=4:16
# the decode kernel's word span for the whole run (65536: a word as its offsets' bits give it,
# the walk before the fifty-eighth session); unset: the library's
if "DECODE_WORD_MAX_SLOTS" in os.environ:
    nm_decode_tuning.DECODE_WORD_MAX_SLOTS = int(os.environ["DECODE_WORD_MAX_SLOTS"])
# +tiles' vector windows (fewest, most tokens); unset: the library's own
WIDENED = os.environ.get("VECTOR_TOKENS") and tuple(
    map(int, os.environ["VECTOR_TOKENS"].split(","))
)


def linear_cold(
    W,
    copies: int,
    x: torch.Tensor,
    want: torch.Tensor,
    vectors: bool,
    one_token: bool = False,
    tiles: bool = False,
) -> float:
    """Fresh copies per form: a weight's first calls fix its route (eager and launch plans)."""
    n, m, vector, block = W.n, W.m, W.vector, W.block
    Ws = [
        sk.NMMatrix(W.values.clone(), W.indices.clone(), W.shape, n, m, vector, block, check=False)
        for _ in range(copies)
    ]
    routed, aliases = nm_mma_sp_tuning.MMA_SP_VECTORS, nm_mma_sp_tuning.MMA_SP_ALIASES
    tiled = nm_wgmma_tuning.WGMMA_VECTORS, nm_unpack_tuning.UNPACK_VECTORS
    windows_before = _vector_windows()
    nm_mma_sp_tuning.MMA_SP_VECTORS = vectors
    nm_mma_sp_tuning.MMA_SP_ALIASES = aliases if vectors else {}
    nm_wgmma_tuning.WGMMA_VECTORS = nm_unpack_tuning.UNPACK_VECTORS = tiles
    if tiles and WIDENED:
        _set_vector_windows(WIDENED, WIDENED, WIDENED[1])
    windows = dict(nm_mma_sp_tuning.MMA_SP_WINDOWS)
    if one_token:  # every window from one token
        for pattern, window in windows.items():
            nm_mma_sp_tuning.MMA_SP_WINDOWS[pattern] = dataclasses.replace(
                window, fewest=1, fewest_wide=0
            )
    try:
        got = [sk.linear(x, W) for W in Ws][0]  # builds each copy's kept forms before capture
        if not ((got.t().double() - want).norm() / want.norm()).item() < 1e-2:
            return float("nan")
        return do_bench_cudagraph(lambda: [sk.linear(x, W) for W in Ws], rep=30) * 1e3 / len(Ws)
    finally:
        nm_mma_sp_tuning.MMA_SP_VECTORS, nm_mma_sp_tuning.MMA_SP_ALIASES = routed, aliases
        nm_wgmma_tuning.WGMMA_VECTORS, nm_unpack_tuning.UNPACK_VECTORS = tiled
        nm_mma_sp_tuning.MMA_SP_WINDOWS.update(windows)
        _set_vector_windows(*windows_before)


def _vector_windows() -> tuple:
    return (
        nm_wgmma_tuning.WGMMA_VECTOR_TOKENS,
        nm_unpack_tuning.UNPACK_VECTOR_TOKENS,
        nm_unpack_tuning.UNPACK_WIDE_VECTOR_MOST,
    )


def _set_vector_windows(wgmma: tuple, unpack: tuple, wide_most: int) -> None:
    nm_wgmma_tuning.WGMMA_VECTOR_TOKENS = wgmma
    nm_unpack_tuning.UNPACK_VECTOR_TOKENS = unpack
    nm_unpack_tuning.UNPACK_WIDE_VECTOR_MOST = wide_most


def main():
    table = []
    for (M, K), (n, m), vector, tokens in itertools.product(SHAPES, PATTERNS, VECTORS, TOKENS):
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=DTYPE)
        mask = sk.prune.nm_mask(w.float(), n, m, vector, block=BLOCK)
        W = sk.NMMatrix.from_dense(w, n, m, vector, block=BLOCK, mask=mask)
        x = torch.randn(tokens, K, device="cuda", dtype=DTYPE)
        want = W.to_dense().double() @ x.t().double()
        copies = max(2, copies_for(W.values.nbytes, DEVICE))
        timed = {
            "dense": dense_cold({"w": W.to_dense(), "x": x}),
            "route": linear_cold(W, copies, x, want, False),
            "mma.sp": linear_cold(W, copies, x, want, True),
        }
        if tokens == 1:
            timed["mma.sp@1"] = linear_cold(W, copies, x, want, True, one_token=True)
        if tokens > 16:
            timed["+tiles"] = linear_cold(W, copies, x, want, True, tiles=True)
        label = f"{M}x{K} {n}:{m} v{vector}{f' b{BLOCK}' if BLOCK > 1 else ''} t{tokens}"
        print(label, {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((label, timed))
    print(f"\n{torch.cuda.get_device_name()}, {DTYPE}, us a call, cold L2")
    head = f"{'dense':>7} {'route':>7} {'mma.sp':>7} {'mma.sp@1':>8} {'+tiles':>7} {'x dense':>8}"
    print(f"{'case':<28} {head}")
    for label, t in table:
        best = min(v for name, v in t.items() if name != "dense")
        print(
            f"{label:<28} {t['dense']:7.1f} {t['route']:7.1f} {t['mma.sp']:7.1f}"
            f" {t.get('mma.sp@1', float('nan')):8.1f} {t.get('+tiles', float('nan')):7.1f}"
            f" {t['dense'] / best:8.2f}"
        )


if __name__ == "__main__":
    main()
