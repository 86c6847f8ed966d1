"""One token, element-wise N:M: the select kernel with its weight bytes brought by TMA
(kernels/spmm_nm_select_tma.py) against the select kernel, the library's route and dense,
cold L2.

Every N:M kernel of ours stops near 3.2-3.3 TB/s of weight where cuBLAS's GEMV (a TMA
kernel) reads 3.8: too few bytes in flight. Each timing rotates weight copies that overflow L2
twice; CUDA-graph medians in us a call, each configuration checked against float64 first
(NaN where wrong or refused). "GB/s" columns: the weight's bytes (values + offsets) over the
time of the row's fastest TMA configuration.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_select_tma_cold.py
    SHAPES=14336x4096 PATTERNS=2:8 TMA=2x128/1w/s3,4x256/2w/s4 SELECT=2x128/1w ...
"""

import itertools
import os

import torch
from _nm_cases import checked_cold_us, env_cases, nm_case
from nm_decode_tall_cold import dense_cold, linear_cold

from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels.spmm_nm_select import spmm_nm_select
from sparsekernels.kernels.spmm_nm_select_tma import spmm_nm_select_tma, supports

DEVICE = torch.device("cuda")
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}[os.environ.get("DTYPE", "bf16")]
SHAPES, PATTERNS, _ = env_cases("14336x4096,4096x14336,4096x4096", "2:8,1:8,2:4", "1")
# "RxG/Ww/sS": R rows a program (1, 2 or 4), G groups of a row a step, W warps, S stages
TMA = os.environ.get(
    "TMA",
    "2x128/1w/s2,2x128/1w/s3,2x128/1w/s4,4x128/1w/s3,1x256/1w/s3,2x256/1w/s3,"
    "4x256/2w/s3,4x256/2w/s4,2x256/2w/s4,4x128/2w/s3,1x128/1w/s4",
).split(",")
SELECT = os.environ.get("SELECT", "4x256/2w,2x128/1w").split(",")  # the select kernel's routes


def parse(name: str) -> tuple[int, int, int, int]:
    tile, warps, *stages = name.split("/")
    rows, groups = (int(d) for d in tile.split("x"))
    return rows, groups, int(warps.rstrip("w")), int(stages[0][1:]) if stages else 1


def main():
    table = []
    for (M, K), (n, m) in itertools.product(SHAPES, PATTERNS):
        case = nm_case(M, K, n, m, 1, DTYPE)
        W, want, bits, words = (case[k] for k in ("W", "want", "bits", "words"))
        x = case["x"].reshape(-1)
        weight_bytes = W.values.nbytes + words.nbytes
        copies = max(2, copies_for(weight_bytes, DEVICE))
        weights = [(W.values.clone(), words.clone()) for _ in range(copies)]
        timed = {"dense": dense_cold(case), "linear": linear_cold(case, copies, n, m)}
        out = torch.empty(M, 1, device="cuda", dtype=DTYPE)
        common = dict(bits=bits, x=x, bias=None, out=out, n=n, m=m, activation="none")
        for name in SELECT:
            block_m, block_g, warps, _ = parse(name)

            def run(values, words, block_m=block_m, block_g=block_g, warps=warps):
                spmm_nm_select(values=values, words=words, block_m=block_m, block_g=block_g,
                               num_warps=warps, **common)  # fmt: skip

            timed[f"sel {name}"] = checked_cold_us(name, run, weights, out, want)
        for name in TMA:
            block_m, block_g, warps, stages = parse(name)
            if not supports(W.values, words, n, m, bits) or block_g < 16 * 8 // (n * bits):
                timed[name] = float("nan")
                continue

            def run(values, words, block_m=block_m, block_g=block_g, warps=warps, stages=stages):
                spmm_nm_select_tma(values=values, words=words, block_m=block_m, block_g=block_g,
                                   num_warps=warps, stages=stages, **common)  # fmt: skip

            timed[name] = checked_cold_us(name, run, weights, out, want)
        best = min((v for k, v in timed.items() if k in TMA and v == v), default=float("nan"))
        timed["GB/s"] = weight_bytes / best / 1e3
        label = f"{M}x{K} {n}:{m} {DTYPE}".replace("torch.", "")
        print(label, f"copies {copies}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((label, timed))
    names = list(table[0][1])
    print(f"\n{'case':<24} " + " ".join(f"{c[-12:]:>12}" for c in names))
    for label, timed in table:
        print(f"{label:<24} " + " ".join(f"{timed[c]:12.1f}" for c in names))


if __name__ == "__main__":
    main()
