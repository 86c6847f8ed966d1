"""Where the fused attention's forward + backward spends its time: attention_sweep.py found it
flat at 1.6-1.9 ms from L = 2048 to 16384 (eager), which says host, not GPU. One warm step at
L = 2048 (local + strided 128/128, bf16, 8 heads, D = 64) under torch.profiler with CPU and CUDA
activity: tables by host time and by GPU time, then the same step's wall time with and without
a synchronize, and causal SDPA's for scale.
    PYTHONPATH=src python3 benchmarks/sweeps/attention_profile.py
"""

import time

import torch
import torch.nn.functional as F

import sparsekernels as sk

L, HEADS, D = 2048, 8, 64
torch.manual_seed(0)
pattern = sk.nn.SparseAttention.local_strided(L, 128, 128, device="cuda").pattern
q, k, v, g = (torch.randn(1, HEADS, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
leaves = [t.requires_grad_() for t in (q, k, v)]


def fused_step():
    sk.sparse_attention(*leaves, pattern).backward(g)


def sdpa_step():
    F.scaled_dot_product_attention(*leaves, is_causal=True).backward(g)


def wall(fn, reps=50) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e6


for name, fn in (("fused", fused_step), ("sdpa", sdpa_step)):
    print(f"{name}: {wall(fn):.0f} us a step (wall, synchronized at the end)", flush=True)

fused_step()
torch.cuda.synchronize()
acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=acts, with_stack=True) as prof:
    fused_step()
    torch.cuda.synchronize()
averages = prof.key_averages()
print("\n### by host time")
print(averages.table(sort_by="cpu_time_total", row_limit=20, max_name_column_width=70))
print("\n### by GPU time")
print(averages.table(sort_by="cuda_time_total", row_limit=10, max_name_column_width=70))
print("\n### host stacks of the slowest host calls")
stacks = prof.key_averages(group_by_stack_n=6)
print(stacks.table(sort_by="self_cpu_time_total", row_limit=8, max_name_column_width=70))
