"""Unstructured weights on tensor cores from bitmap words (kernels/spmm_csr_bitmap.py, Triton, and
kernels/spmm_csr_bitmap_wgmma.py, its Gluon twin with the gather laid out for L1) against
the library's CSR route and dense, cold L2: where the decode of every weight element (about
13-16 SASS instructions an element on sm_90, whatever the density and token count) beats
the CSR kernels' gather of a B row per stored entry.

Each timing rotates weight copies that overflow L2 twice; CUDA-graph medians in us a call,
each configuration checked against float64 first (NaN where wrong). The library's route is
linear (its x^T view and column-major out); the bitmap kernel writes the same out.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_bitmap_cold.py
    SHAPES=4096x14336 SPARSITY=0.7 TOKENS=8,16 CONFIGS=m16w4s8/4,m32w8/4 ...
    SHAPES=512x2048,2048x512 SPARSITY=0.5,0.7,0.9 TOKENS=256 CONFIGS=g64w2n128,m64w2n64/4 ...
(at 64 tokens and more, DLMC's regime, torch's CSR matmul (cuSPARSE) is timed too)
"""

import itertools
import os

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels.spmm_csr_bitmap import bitmap_words, spmm_csr_bitmap
from sparsekernels.kernels.spmm_csr_bitmap_wgmma import spmm_csr_bitmap_wgmma

DEVICE = torch.device("cuda")
SHAPES = [
    tuple(int(d) for d in s.split("x"))
    for s in os.environ.get("SHAPES", "4096x14336,14336x4096,4096x4096").split(",")
]
SPARSITIES = [float(s) for s in os.environ.get("SPARSITY", "0.7,0.9").split(",")]
TOKENS = [int(t) for t in os.environ.get("TOKENS", "1,4,8,16,32").split(",")]
# Triton "mMwW[nN][sS]/warps[/stages]": M rows and W words (32 W columns) a step, N tokens a
# column tile (16), S split-K ranges (none: enough for 4 programs an SM), warps, pipeline
# stages (2); the Gluon kernel "gMwW[nN][sS]" (kernels/spmm_csr_bitmap_wgmma.py: one
# warpgroup; N 8 to 8 tokens, else 16, unless given)
CONFIGS = os.environ.get(
    "CONFIGS", "m16w4/4,m16w8/4,m32w4/4,m64w4/4,m16w4/4/3,g64w2,g64w4,g128w2"
).split(",")


def parse(name: str, rows: int, k: int, tokens: int, sms: int) -> tuple:
    """(the launcher, its tile arguments) for a configuration name."""
    tile, *rest = name.split("/")
    block_m, words = tile[1:].split("w")
    words, _, split = words.partition("s")
    block_w, _, block_n = words.partition("n")
    block_m, block_w = int(block_m), int(block_w)
    gluon = tile.startswith("g")
    block_n = int(block_n) if block_n else 8 if gluon and tokens <= 8 else 16
    tiles = -(-rows // block_m) * -(-tokens // block_n)
    steps = -(-k // (32 * block_w))
    split = int(split) if split else max(1, min(16, 4 * sms // tiles, steps // 2))
    tile_args = dict(block_m=block_m, block_w=block_w, block_n=block_n, split=split)
    if gluon:
        return spmm_csr_bitmap_wgmma, tile_args
    stages = int(rest[1]) if len(rest) > 1 else 2
    return spmm_csr_bitmap, dict(tile_args, num_warps=int(rest[0]), num_stages=stages)


def rotated(fn, copies: list) -> float:
    """us a call of fn over each copy in turn, as one CUDA graph."""
    return do_bench_cudagraph(lambda: [fn(*c) for c in copies], rep=30) * 1e3 / len(copies)


def main():
    sms = torch.cuda.get_device_properties(DEVICE).multi_processor_count
    table = []
    for (M, K), sparsity in itertools.product(SHAPES, SPARSITIES):
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        words = bitmap_words(A.row_offsets, A.column_indices, M, K)
        csr_bytes = A.values.nbytes + A.nnz * 2 + A.row_offsets.nbytes  # int16 columns
        bitmap_bytes = A.values.nbytes + words.nbytes + A.row_offsets.nbytes
        count = max(2, copies_for(max(csr_bytes, bitmap_bytes), DEVICE))
        csr_copies = [
            (sk.CSRMatrix(A.row_offsets.clone(), A.column_indices.clone(), A.values.clone(),
                          A.shape, check=False),)
            for _ in range(count)
        ]  # fmt: skip
        bitmap_copies = [
            (words.clone(), A.row_offsets.clone(), A.values.clone()) for _ in range(count)
        ]
        dense_copies = [(w.clone(),) for _ in range(max(2, copies_for(w.nbytes, DEVICE)))]
        torch_copies = []  # (built at the first case of 64 tokens or more)
        w_sparse = A.to_dense()
        dense_of_a = w_sparse.double()
        for tokens in TOKENS:
            x = torch.randn(tokens, K, device="cuda", dtype=torch.bfloat16)
            want = dense_of_a @ x.t().double()
            out = torch.empty(tokens, M, device="cuda", dtype=torch.bfloat16).t()  # linear's
            timed = {
                "dense": rotated(lambda d: x @ d.t(), dense_copies),
                "csr route": rotated(lambda a: sk.linear(x, a), csr_copies),
            }
            if tokens >= 64:  # DLMC's regime: cuSPARSE (torch's CSR matmul), the peer
                torch_copies = torch_copies or [(w_sparse.to_sparse_csr(),) for _ in range(count)]
                timed["cusparse"] = rotated(lambda t: t @ x.t(), torch_copies)
            for name in CONFIGS:
                launch, config = parse(name, M, K, tokens, sms)

                def run(words, offsets, values, launch=launch, config=config):
                    launch(words=words, row_offsets=offsets, values=values, b=x.t(), bias=None,
                           out=out, activation="none", **config)  # fmt: skip

                out.fill_(float("nan"))
                try:
                    run(*bitmap_copies[0])
                except Exception as error:  # a tile the compiler refuses: say so
                    print(name, type(error).__name__, str(error)[:200], flush=True)
                    timed[name] = float("nan")
                    continue
                err = ((out.double() - want).norm() / want.norm()).item()
                if not err < 1e-2:
                    print(name, "wrong: relative error", err, flush=True)
                timed[name] = rotated(run, bitmap_copies) if err < 1e-2 else float("nan")
            label = f"{M}x{K} {sparsity:.0%} t{tokens}"
            print(label, f"copies {count}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
            table.append((label, timed))
    names = list(table[0][1])
    print(f"\n{'case':<24} " + " ".join(f"{n:>12}" for n in names))
    for label, timed in table:
        print(f"{label:<24} " + " ".join(f"{timed.get(n, float('nan')):12.1f}" for n in names))


if __name__ == "__main__":
    main()
