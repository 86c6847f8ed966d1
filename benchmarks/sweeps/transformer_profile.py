"""Where the e2e suite's sparse Transformer (L = 8192, 90% weights, local + strided attention)
spends its GPU time: inference as CUDA-graph medians with the fused attention chosen
automatically and with it turned off (the composed path), against the dense model, then the
top CUDA kernels (own time) of one eager call of each under torch.profiler, and of one
training step of each; last, the sparse training step's host time."""

import torch
from torch.autograd import DeviceType
from triton.testing import do_bench_cudagraph

from sparsekernels.kernels import attention_tuning
from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair

cfg = TransformerConfig(vocab=256, dim=512, heads=8, layers=3, seq_len=8192)
sparse, dense = transformer_pair(cfg, "90%", seed=0, dtype=torch.bfloat16, device="cuda")
sparse.eval(), dense.eval()
x = torch.randint(0, cfg.vocab, (1, cfg.seq_len), device="cuda")


def top_kernels(fn, label, count=16):
    """The GPU kernels of one call of fn by their own time, and their sum (no host time)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = sorted(
        (
            (event.self_device_time_total, event.count, event.key)
            for event in prof.key_averages()
            if event.device_type == DeviceType.CUDA and event.self_device_time_total > 0
        ),
        reverse=True,
    )
    print(f"\n### {label}: {sum(k[0] for k in kernels):.1f} us of GPU kernels", flush=True)
    for us, calls, key in kernels[:count]:
        print(f"  {us:8.1f} us {calls:4d} calls  {key[:90]}")


with torch.no_grad():
    times = {}
    for auto in (True, False):
        attention_tuning.BLOCK_ATTENTION_AUTO = auto
        times[f"sparse fused={auto}"] = do_bench_cudagraph(lambda: sparse(x), rep=50) * 1e3
    times["dense"] = do_bench_cudagraph(lambda: dense(x), rep=50) * 1e3
    for label, t in times.items():
        print(f"{label:<22} {t:8.1f} us  ({times['dense'] / t:.2f}x dense)", flush=True)
    for auto in (True, False):
        attention_tuning.BLOCK_ATTENTION_AUTO = auto
        top_kernels(lambda: sparse(x), f"sparse, fused attention {auto}")
    top_kernels(lambda: dense(x), "dense")
attention_tuning.BLOCK_ATTENTION_AUTO = True

# One training step (forward + backward), eager: GPU kernels and host time side by side.
sparse.train()
xt = torch.randint(0, cfg.vocab, (1, cfg.seq_len + 1), device="cuda")
dense.train()
top_kernels(lambda: dense.loss(xt).backward(), "dense training step")
top_kernels(lambda: sparse.loss(xt).backward(), "sparse training step")
step = lambda: sparse.loss(xt).backward()  # noqa: E731
step()
torch.cuda.synchronize()
acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=acts) as prof:
    step()
    torch.cuda.synchronize()
averages = prof.key_averages()
print("\n### training step, by host time")
print(averages.table(sort_by="cpu_time_total", row_limit=12, max_name_column_width=60))
