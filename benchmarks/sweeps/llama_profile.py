"""Where a Llama-shaped decode step (4 layers, hidden 4096, MLP 14336, bf16, batch 1) spends its
GPU time, dense against 2:8 and 70%: each model's decode of 8 tokens as a CUDA-graph median,
then the top CUDA kernels of one eager decode step under torch.profiler. The e2e suite found
2:8 at 1.30x and 70% at 1.06x dense, far below the weight-byte ratios: this shows how much of
a step is the linears and how much the parts both models share (norms, rope, attention).
    PYTHONPATH=src python3 benchmarks/sweeps/llama_profile.py
"""

import copy

import torch
from triton.testing import do_bench_cudagraph

from sparsekernels.models.llama import LlamaConfig, LlamaStack
from sparsekernels.prune.config import SparsityConfig
from sparsekernels.prune.sparsify import sparsify_

PROMPT, STEPS = 128, 8
torch.manual_seed(0)
cfg = LlamaConfig(layers=4)
dense = LlamaStack(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
models = {"dense": dense}
for pattern in ("2:8", "70%"):
    models[pattern] = copy.deepcopy(dense)
    sparsify_(models[pattern], SparsityConfig.coerce(pattern))
x = torch.randn(1, PROMPT, cfg.hidden, device="cuda", dtype=torch.bfloat16)

with torch.no_grad():
    first = {}
    for name, model in models.items():
        model.allocate_cache(1, PROMPT + STEPS + 1)
        first[name] = model(x, 0)[:, -1:]
    times = {}
    for name, model in models.items():
        times[name] = do_bench_cudagraph(lambda: model.decode(first[name], PROMPT, STEPS)) * 1e3
    for name, t in times.items():
        print(f"{name:6} {t / STEPS:8.1f} us a token ({times['dense'] / t:.2f}x dense)", flush=True)
    for name, model in models.items():
        model(first[name], PROMPT)  # warm
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            model(first[name], PROMPT)
            torch.cuda.synchronize()
        table = prof.key_averages().table(
            sort_by="cuda_time_total", row_limit=14, max_name_column_width=60
        )
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        print(
            f"\n### {name}: one decode step (4 layers), eager, {len(kernels)} kernels", flush=True
        )
        print(table, flush=True)
