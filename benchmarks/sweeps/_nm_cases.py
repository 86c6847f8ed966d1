"""One N:M decode case for the sweeps that time spmm_nm_decode directly: a magnitude-pruned n:m
weight (bf16 unless given) on the GPU, fresh x, the float64 product, B as the route pads it,
the packed offsets; and the SHAPES / PATTERNS / TOKENS environment lists those sweeps take.
"""

import os

import torch

import sparsekernels as sk
from sparsekernels.kernels.spmm_nm_decode import packed_bits
from sparsekernels.ops._layout import padded_rows
from sparsekernels.ops._triton_nm import packed_words


def nm_case(
    M: int, K: int, n: int, m: int, tokens: int, dtype: torch.dtype = torch.bfloat16,
    vector: int = 1, block: int = 1,
) -> dict:  # fmt: skip
    """w (dense, its pattern's), W, x, want = W x^T in float64, B, bits and words (packed
    offsets)."""
    torch.manual_seed(0)
    w = torch.randn(M, K, device="cuda", dtype=dtype)
    mask = sk.prune.nm_mask(w.float(), n, m, vector, block=block)
    W = sk.NMMatrix.from_dense(w, n, m, vector, block=block, mask=mask)
    x = torch.randn(tokens, K, device="cuda", dtype=dtype)
    bits = packed_bits(m, block)
    return {
        "w": w,
        "W": W,
        "x": x,
        "want": W.to_dense().double() @ x.t().double(),
        "B": padded_rows(x.t()),
        "bits": bits,
        "words": packed_words(W.indices, bits),
    }


def env_cases(shapes: str, patterns: str, tokens: str) -> tuple[list, list, list]:
    """SHAPES ("4096x14336,..."), PATTERNS ("2:8,...") and TOKENS ("1,8") from the environment,
    else the defaults given."""
    return (
        [tuple(int(d) for d in s.split("x")) for s in os.environ.get("SHAPES", shapes).split(",")],
        [
            tuple(int(d) for d in p.split(":"))
            for p in os.environ.get("PATTERNS", patterns).split(",")
        ],
        [int(t) for t in os.environ.get("TOKENS", tokens).split(",")],
    )


def checked_cold_us(name: str, run, weights: list, out: torch.Tensor, want: torch.Tensor) -> float:
    """us a call of run(*weight), rotating the weight copies (cold L2) as one CUDA graph, after
    a poisoned-output run checked against float64 (NaN where wrong, or where the compiler
    refuses the tile: both said)."""
    from triton.testing import do_bench_cudagraph

    out.fill_(float("nan"))
    try:
        run(*weights[0])
    except Exception as e:  # a tile the compiler refuses: say so
        print(name, type(e).__name__, str(e)[:300], flush=True)
        return float("nan")
    err = ((out.double() - want).norm() / want.norm()).item()
    if not err < 1e-2:
        print(name, "wrong: relative error", err, flush=True)
        return float("nan")
    return do_bench_cudagraph(lambda: [run(*w) for w in weights], rep=30) * 1e3 / len(weights)
