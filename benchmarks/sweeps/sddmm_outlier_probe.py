"""Why did bf16 SDDMM 4096 x 64 x 4096 at 2% take 2.6 ms in one sddmm suite run (at-c6174e6)?
Times the op eagerly on the suite's four input copies (do_bench, and a host-bound loop), the
fill estimate the route reads, and a torch.profiler table of one round. It ran 83 us eager
(13 us a kernel): the 2.6 ms was not reproduced, nor in the suite's rerun (15.1 us).
    PYTHONPATH=src python3 benchmarks/sweeps/sddmm_outlier_probe.py
"""

import time

import torch
import triton
from torch.profiler import ProfilerActivity, profile

import sparsekernels as sk
from sparsekernels.bench.cases import sddmm_case
from sparsekernels.ops import _sddmm_plans

for dtype, K, dens in [
    (torch.bfloat16, 64, 0.02),
    (torch.float32, 64, 0.02),
    (torch.bfloat16, 256, 0.02),
    (torch.bfloat16, 64, 0.05),
]:
    case = sddmm_case(4096, K, 4096, dens, dtype, torch.device("cuda"))
    inputs = [case.build(s) for s in range(4)]
    fns = [lambda x=x: sk.sddmm(x["X"], x["Y"], x["P"], backend="triton") for x in inputs]
    for f in fns:
        f()
    torch.cuda.synchronize()
    one = triton.testing.do_bench(fns[0], return_mode="median")
    t0 = time.perf_counter()
    for _ in range(20):
        for f in fns:
            f()
    torch.cuda.synchronize()
    host = (time.perf_counter() - t0) / 80 * 1e3
    P = inputs[0]["P"]
    fill = _sddmm_plans.tile_fill(P.row_offsets, P.column_indices, 4096)
    print(
        f"{dtype} K={K} d={dens}: do_bench one copy {one * 1e3:.1f} us, rotated wall {host * 1e3:.1f} us, fill {fill:.3f}, plans {len(_sddmm_plans._PLANS)}"
    )

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for f in fns:
            f()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8))
