"""The kernels linear launches for N:M cases, each with its time (torch.profiler, warm L2), and
the direct mma.sp launch with the route's own config into a row-major and a column-major out:
where the route's time differs from its kernel's in the sweeps, this says which launch costs.
    PYTHONPATH=src python3 benchmarks/sweeps/route_kernels.py
    SHAPES=4096x14336 PATTERNS=2:8,1:8 TOKENS=16 ...
"""

import dataclasses
import itertools

import torch
from _nm_cases import env_cases, nm_case
from torch.profiler import ProfilerActivity, profile

import sparsekernels as sk
from sparsekernels.kernels.nm_mma_sp_tuning import spmm_nm_mma_sp_config
from sparsekernels.kernels.spmm_nm_mma_sp import spmm_nm_mma_sp
from sparsekernels.ops._triton_nm import class_words, metadata_words

SHAPES, PATTERNS, TOKENS = env_cases("4096x14336,14336x4096", "2:8,1:8,2:4", "16")


def kernel_times(fn, repeats: int = 20) -> list[tuple[str, float]]:
    """(kernel name, mean us a call) of each kernel fn launches."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    return [
        (e.key[:70], e.device_time_total / repeats)
        for e in prof.key_averages()
        if e.device_time_total > 0
    ]


def main():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for (M, K), (n, m), tokens in itertools.product(SHAPES, PATTERNS, TOKENS):
        case = nm_case(M, K, n, m, tokens)
        W, x = case["W"], case["x"]
        config = spmm_nm_mma_sp_config(tokens, n, m, 1, 1, x.dtype, M, K, sms)
        print(f"\n{M}x{K} {n}:{m} t{tokens} route config {config}")
        for name, us in kernel_times(lambda: sk.linear(x, W)):
            print(f"  linear   {us:7.1f} us  {name}")
        if config is None:
            continue
        meta = metadata_words(W.indices, M, 1, n, m)
        classes = class_words(W.indices, M, 1, n) if m == 8 else None
        for layout in ("row", "column"):
            out = torch.empty(M, tokens, device="cuda", dtype=x.dtype)
            if layout == "column":
                out = torch.empty(tokens, M, device="cuda", dtype=x.dtype).t()

            tile = dataclasses.asdict(config)
            by_rows = tile.pop("out_by_rows") and layout == "column"

            def direct(out=out, tile=tile, by_rows=by_rows):
                spmm_nm_mma_sp(values=W.values, metadata=meta, classes=classes, b=x.t(), n=n,
                               m=m, bias=None, out=out, activation="none",
                               out_m_fastest=by_rows, **tile)  # fmt: skip

            for name, us in kernel_times(direct):
                print(f"  {layout:<8} {us:7.1f} us  {name}")


if __name__ == "__main__":
    main()
