"""The CUDA kernels one sk.linear call launches, with their times under torch.profiler, next to
the call's CUDA-graph median: where the route spends time beyond its main kernel.

The N:M decode route at 8 tokens ran 45.1 us on 4096 x 14336 2:8 where its kernel alone, same
configuration, ran 34.8 (nm_decode_keep_sums.txt, at-17e714a); at 2 and 4 tokens the gap was
2 us. Cases: PATTERN:MxK:TOKENS, bf16, comma-separated in CASES.
    PYTHONPATH=src python3 benchmarks/sweeps/route_kernels.py
    CASES=2:8:4096x14336:8,70%:4096x14336:16 ...
"""

import os

import torch
from torch.profiler import ProfilerActivity, profile
from triton.testing import do_bench_cudagraph

import sparsekernels as sk

CASES = os.environ.get(
    "CASES", "2:8:4096x14336:8,2:8:4096x14336:4,1:8:4096x14336:8,70%:4096x14336:8"
).split(",")


def weight(pattern: str, w: torch.Tensor):
    if pattern.endswith("%"):
        mask = sk.prune.magnitude_mask(w.float(), float(pattern[:-1]) / 100)
        return sk.CSRMatrix.from_dense(w, mask=mask)
    n, m = map(int, pattern.split(":"))
    return sk.NMMatrix.from_dense(w, n, m, mask=sk.prune.nm_mask(w.float(), n, m))


def main():
    for case in CASES:
        *pattern, shape, tokens = case.split(":")
        M, K = map(int, shape.split("x"))
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        W = weight(":".join(pattern), w)
        x = torch.randn(int(tokens), K, device="cuda", dtype=torch.bfloat16)
        sk.linear(x, W)  # compile and cache
        graphed = do_bench_cudagraph(lambda W=W, x=x: sk.linear(x, W), rep=20) * 1e3
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                sk.linear(x, W)
            torch.cuda.synchronize()
        print(f"\n{case}: graphed median {graphed:.1f} us; kernels over 20 calls:")
        print(
            prof.key_averages().table(
                sort_by="cuda_time_total", row_limit=8, max_name_column_width=70
            )
        )


if __name__ == "__main__":
    main()
