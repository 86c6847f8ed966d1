"""One token, element-wise N:M: x picked by selects in registers (kernels/spmm_nm_select.py)
against the library's route (the decode kernel's L1 gathers) and dense, cold L2.

The decode kernel moves the weight at ~2 TB/s where cuBLAS's GEMV reads 3.8; Nsight Compute saw
its L1 71% busy with scattered gathers (at-02f1e78/ncu.txt). The select kernel loads each
group's x as one vector shared by a tile's rows and picks by the offset's bits. Each timing
rotates weight copies that overflow L2 twice; CUDA-graph medians in us a call, each
configuration checked against float64 first.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_select_cold.py
    SHAPES=4096x14336 PATTERNS=2:8 CONFIGS=4x256/2w,2x256/2w,4x256/2w/k4 DTYPE=fp32 ...
"""

import itertools
import os

import torch
from _nm_cases import env_cases, nm_case
from nm_decode_tall_cold import dense_cold, linear_cold
from triton.testing import do_bench_cudagraph

from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels.spmm_nm_select import spmm_nm_select

DEVICE = torch.device("cuda")
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[
    os.environ.get("DTYPE", "bf16")
]
SHAPES, PATTERNS, _ = env_cases("4096x14336,14336x4096,4096x4096,28672x4096", "2:8,1:8,2:4", "1")
# "RxG/Ww[/o][/i][/sN][/kS]": R rows a program (1, 2 or 4), G groups of a row a step, W warps;
# /o: values and offsets read as the words they were before narrow reads (int32 value pairs,
# offset bytes); /i: int32 group indices (the form before int64 ones); /sN: the walk pipelined
# by Triton in N stages; /kS: each row's walk in S ranges (split-K, summed by the last); /b: x
# picked by byte permutes (m = 8)
CONFIGS = os.environ.get(
    "CONFIGS",
    "4x128/2w,4x128/2w/o,4x256/2w,2x256/2w,2x256/2w/o,2x128/1w,4x64/1w,1x256/1w,2x512/4w",
).split(",")


def parse(name: str) -> tuple[int, int, int, dict]:
    tile, warps, *flags = name.split("/")
    rows, groups = (int(d) for d in tile.split("x"))
    options = {"narrow_reads": "o" not in flags}
    if "i" in flags:
        options["wide_index"] = False
    options["stages"] = next((int(f[1:]) for f in flags if f.startswith("s")), 1)
    options["split"] = next((int(f[1:]) for f in flags if f.startswith("k")), 1)
    options["permute"] = "b" in flags
    return rows, groups, int(warps.rstrip("w")), options


def main():
    table = []
    for (M, K), (n, m) in itertools.product(SHAPES, PATTERNS):
        case = nm_case(M, K, n, m, 1, DTYPE)
        W, want, bits, words = (case[k] for k in ("W", "want", "bits", "words"))
        x = case["x"].reshape(-1)
        copies = max(2, copies_for(W.values.nbytes + words.nbytes, DEVICE))
        weights = [(W.values.clone(), words.clone()) for _ in range(copies)]
        timed = {"dense": dense_cold(case), "linear": linear_cold(case, copies, n, m)}
        out = torch.empty(M, 1, device="cuda", dtype=DTYPE)
        for name in CONFIGS:
            block_m, block_g, warps, options = parse(name)

            def run(values, words, block_m=block_m, block_g=block_g, warps=warps, options=options):
                spmm_nm_select(
                    values=values, words=words, bits=bits, x=x, bias=None, out=out, n=n, m=m,
                    activation="none", block_m=block_m, block_g=block_g, num_warps=warps,
                    **options,
                )  # fmt: skip

            out.fill_(float("nan"))
            run(*weights[0])
            err = ((out.double() - want).norm() / want.norm()).item()
            total = do_bench_cudagraph(lambda: [run(*w) for w in weights], rep=30) * 1e3
            timed[name] = total / copies if err < 1e-2 else float("nan")
        label = f"{M}x{K} {n}:{m} {DTYPE}".replace("torch.", "")
        print(label, f"copies {copies}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((label, timed))
    names = list(table[0][1])
    print(f"\n{'case':<28} " + " ".join(f"{c:>10}" for c in names))
    for label, timed in table:
        print(f"{label:<28} " + " ".join(f"{timed[c]:10.1f}" for c in names))


if __name__ == "__main__":
    main()
