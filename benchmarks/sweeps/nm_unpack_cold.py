"""A few tokens, element-wise N:M on tensor cores: each step's groups unpacked into one dense
tile for one tl.dot (kernels/spmm_nm_unpack.py), against the library's route and dense, cold L2.

At 4-16 tokens the route's kernels (select, decode, the expand kernel's m dots a step) lose to
cuBLAS on the dense weight (2:8 at 16 tokens: 48 against 30 us). Each timing rotates weight
copies that overflow L2 twice; CUDA-graph medians in us a call, each configuration checked
against float64 first.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_unpack_cold.py
    SHAPES=4096x14336 PATTERNS=2:8 TOKENS=8,16 CONFIGS=64x32/4w/s2,64x32/4w/s2/k4 ...
Vector- and block-wise weights with VECTOR and BLOCK (PATTERNS=4:8,4:16 VECTOR=4 BLOCK=4: the
block-wise windows the decode kernel takes at 0.38-0.79x dense, benchmarks/NOTES.md).
"""

import itertools
import os

import torch
from _nm_cases import checked_cold_us, env_cases, nm_case
from nm_decode_tall_cold import dense_cold, linear_cold

from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels.spmm_nm_unpack import spmm_nm_unpack

DEVICE = torch.device("cuda")
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}[os.environ.get("DTYPE", "bf16")]
SHAPES, PATTERNS, TOKENS = env_cases("4096x14336,14336x4096", "2:8,1:8,2:4", "1,4,8,16")
VECTOR = int(os.environ.get("VECTOR", "1"))
BLOCK = int(os.environ.get("BLOCK", "1"))
# "RxG/Ww/sS[/kK][/nN][/two][/h]": R rows and G groups a step, W warps, S stages, K split-K
# ranges (summed by the last of a tile, or with /two by a second kernel), N tokens a column
# tile (16 unless given); /h: block-wise tiles from 16-bit values, not int32 pairs
CONFIGS = os.environ.get(
    "CONFIGS",
    "64x32/4w/s1,64x32/4w/s3,64x64/4w/s2,128x32/8w/s2,64x32/4w/s2/k2,64x32/4w/s2/k4,32x64/4w/s2",
).split(",")


def parse(name: str) -> dict:
    tile, warps, stages, *flags = name.split("/")
    rows, groups = (int(d) for d in tile.split("x"))
    split = next((int(f[1:]) for f in flags if f.startswith("k")), 1)
    block_n = next((int(f[1:]) for f in flags if f.startswith("n")), 16)
    return dict(
        block_n=block_n,
        block_m=rows,
        block_g=groups,
        num_warps=int(warps.rstrip("w")),
        num_stages=int(stages.lstrip("s")),
        split=split,
        fused="two" not in flags,
        pairs=False if "h" in flags else None,
    )


def main():
    table = []
    for (M, K), (n, m), tokens in itertools.product(SHAPES, PATTERNS, TOKENS):
        case = nm_case(M, K, n, m, tokens, DTYPE, VECTOR, BLOCK)
        W, want, bits, words = (case[k] for k in ("W", "want", "bits", "words"))
        b = case["x"].t()  # (K, tokens), unit stride along K: as linear passes x^T
        copies = max(2, copies_for(W.values.nbytes + words.nbytes, DEVICE))
        weights = [(W.values.clone(), words.clone()) for _ in range(copies)]
        timed = {"dense": dense_cold(case), "linear": linear_cold(case, copies, n, m)}
        out = torch.empty(M, tokens, device="cuda", dtype=DTYPE)
        for name in CONFIGS:
            config = parse(name)

            def run(values, words, config=config):
                spmm_nm_unpack(
                    values=values, words=words, bits=bits, b=b, bias=None, out=out, n=n, m=m,
                    vector=VECTOR, activation="none", block=BLOCK, **config,
                )  # fmt: skip

            timed[name] = checked_cold_us(name, run, weights, out, want)
        label = f"{M}x{K} {n}:{m}{f' v{VECTOR}' if VECTOR > 1 else ''}" + (
            f"{f' b{BLOCK}' if BLOCK > 1 else ''} t{tokens}"
        )
        print(label, f"copies {copies}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((label, timed))
    names = list(table[0][1])
    print(f"\n{'case':<24} " + " ".join(f"{c[:14]:>14}" for c in names))
    for label, timed in table:
        print(f"{label:<24} " + " ".join(f"{timed[c]:14.1f}" for c in names))


if __name__ == "__main__":
    main()
