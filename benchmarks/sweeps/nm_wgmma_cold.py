"""A few tokens, element-wise N:M with the dense tile built in the wgmma operand's registers
(kernels/spmm_nm_wgmma.py, Gluon), against the library's route (the unpack kernel, whose tile
goes through shared memory) and dense, cold L2.

Each timing rotates weight copies that overflow L2 twice; CUDA-graph medians in us a call,
each configuration checked against float64 first.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_wgmma_cold.py
    SHAPES=4096x14336 PATTERNS=2:8 TOKENS=8,16 CONFIGS=64x32/n16,64x32/n16/k4 ...
"""

import itertools
import os

import torch
from _nm_cases import checked_cold_us, env_cases, nm_case
from nm_decode_tall_cold import dense_cold, linear_cold

from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels.spmm_nm_wgmma import spmm_nm_wgmma

DEVICE = torch.device("cuda")
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}[os.environ.get("DTYPE", "bf16")]
SHAPES, PATTERNS, TOKENS = env_cases("4096x14336,14336x4096", "2:8,1:8,2:4", "1,8,16")
# "RxG/nN[/kK][/two][/rR]": R rows and G groups a step, N tokens a column tile, K split-K
# ranges (summed by the last of a tile, or with /two by a second kernel), R registers a thread
CONFIGS = os.environ.get("CONFIGS", "64x32/n16,64x32/n16/k2,64x32/n16/k4,128x32/n16").split(",")


def parse(name: str) -> dict:
    tile, columns, *flags = name.split("/")
    rows, groups = (int(d) for d in tile.split("x"))
    split = next((int(f[1:]) for f in flags if f.startswith("k")), 1)
    cap = next((int(f[1:]) for f in flags if f.startswith("r")), None)
    config = dict(block_m=rows, block_g=groups, block_n=int(columns[1:]), split=split,
                  fused="two" not in flags)  # fmt: skip
    return config | ({"max_registers": cap} if cap else {})


def main():
    table = []
    for (M, K), (n, m), tokens in itertools.product(SHAPES, PATTERNS, TOKENS):
        case = nm_case(M, K, n, m, tokens, DTYPE)
        W, want, bits, words = (case[k] for k in ("W", "want", "bits", "words"))
        b = case["x"].t()  # (K, tokens), unit stride along K: as linear passes x^T
        copies = max(2, copies_for(W.values.nbytes + words.nbytes, DEVICE))
        weights = [(W.values.clone(), words.clone()) for _ in range(copies)]
        timed = {"dense": dense_cold(case), "linear": linear_cold(case, copies, n, m)}
        out = torch.empty(M, tokens, device="cuda", dtype=DTYPE)
        for name in CONFIGS:
            config = parse(name)
            if config["block_g"] // 4 * n * bits not in (32, 64):
                continue

            def run(values, words, config=config):
                spmm_nm_wgmma(
                    values=values, words=words, bits=bits, b=b, bias=None, out=out, n=n, m=m,
                    vector=1, activation="none", **config,
                )  # fmt: skip

            timed[name] = checked_cold_us(name, run, weights, out, want)
        label = f"{M}x{K} {n}:{m} t{tokens}"
        print(label, f"copies {copies}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((label, timed))
    names = sorted({c for _, timed in table for c in timed}, key=lambda c: (c != "dense", c))
    print(f"\n{'case':<24} " + " ".join(f"{c[:14]:>14}" for c in names))
    for label, timed in table:
        print(f"{label:<24} " + " ".join(f"{timed.get(c, float('nan')):14.1f}" for c in names))


if __name__ == "__main__":
    main()
