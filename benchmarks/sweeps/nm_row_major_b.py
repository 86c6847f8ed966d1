"""spmm(W, B) with a row-major B whose width is no multiple of 16 (a user's B, SparseConv2d's
pixels at batch 1: 49 at 7 x 7, 196 at 14 x 14) on the N:M tensor-core tiles: B read in place
(its row stride N: 2-byte loads, the sm_90 loop 1.2-3.3x longer) against B copied 16-column
aligned first (_layout.ALIGN_ROW_MAJOR_B, the copy included), and cuBLAS on the dense weight.
bf16 (DTYPE=float16 for fp16), cold L2, CUDA-graph medians, us a call; each form checked against
float64 first (NaN where wrong).
    PYTHONPATH=src python3 benchmarks/sweeps/nm_row_major_b.py
    SHAPES=4096x4096 PATTERNS=2:8 VECTORS=1,64 TOKENS=24,49 ...
Turn ALIGN_ROW_MAJOR_B on where "aligned" wins.
"""

import itertools
import os

import torch
from _nm_cases import env_cases
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.ops import _layout

DEVICE = torch.device("cuda")
DTYPE = getattr(torch, os.environ.get("DTYPE", "bfloat16"))
VECTORS = [int(v) for v in os.environ.get("VECTORS", "1,64").split(",")]


def cold(fn, weights) -> float:
    return do_bench_cudagraph(lambda: [fn(w) for w in weights], rep=30) * 1e3 / len(weights)


def timed_form(align: bool, Ws, B, want) -> float:
    """us a call of spmm(W, B) with ALIGN_ROW_MAJOR_B as given (NaN where the product is off)."""
    _layout.ALIGN_ROW_MAJOR_B = align
    try:
        got = sk.spmm(Ws[0], B)
        if not ((got.double() - want).norm() / want.norm()).item() < 1e-2:
            return float("nan")
        return cold(lambda Wc: sk.spmm(Wc, B), Ws)
    finally:
        _layout.ALIGN_ROW_MAJOR_B = False


def main():
    shapes, patterns, token_counts = env_cases(
        "4096x4096,14336x4096,1024x1024", "2:8,4:8", "9,24,49,196"
    )
    table = []
    for (M, K), (n, m), vector in itertools.product(shapes, patterns, VECTORS):
        if M % vector:
            continue
        torch.manual_seed(0)
        w = torch.randn(M, K, device=DEVICE, dtype=DTYPE)
        mask = sk.prune.nm_mask(w.float(), n, m, vector, block=1)
        W = sk.NMMatrix.from_dense(w, n, m, vector, block=1, mask=mask)
        dense = W.to_dense()
        copies = max(2, copies_for(W.values.nbytes, DEVICE))
        Ws = [W.with_values(W.values.clone()) for _ in range(copies)]
        dense_copies = [dense.clone() for _ in range(max(2, copies_for(dense.nbytes, DEVICE)))]
        for tokens in token_counts:
            B = torch.randn(K, tokens, device=DEVICE, dtype=DTYPE)  # row-major, stride N
            want = dense.double() @ B.double()
            timed = {
                "dense": cold(lambda d: d @ B, dense_copies),
                "in place": timed_form(False, Ws, B, want),
                "aligned": timed_form(True, Ws, B, want),
            }
            label = f"{M}x{K} {n}:{m} v{vector} t{tokens}"
            print(label, {f: round(t, 1) for f, t in timed.items()}, flush=True)
            table.append((label, timed))
    names = ["dense", "in place", "aligned"]
    print(f"\n# {torch.cuda.get_device_name()}, {DTYPE}, us a call, cold L2")
    print(f"{'case':<30}" + "".join(f"{f:>10}" for f in names) + f"{'gain':>7}")
    for label, t in table:
        cells = "".join(f"{t[f]:10.1f}" for f in names)
        print(f"{label:<30}{cells}{t['in place'] / t['aligned']:7.2f}")


if __name__ == "__main__":
    main()
