"""Where the e2e suite's sparse Transformer (L = 8192, 90% weights, local + strided attention)
spends its GPU time: inference as CUDA-graph medians with the fused attention chosen
automatically and with it turned off (the composed path), against the dense model, then the
top CUDA kernels of one eager call of each under torch.profiler."""

import torch
from triton.testing import do_bench_cudagraph

from sparsekernels.kernels import tuning
from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair

cfg = TransformerConfig(vocab=256, dim=512, heads=8, layers=3, seq_len=8192)
sparse, dense = transformer_pair(cfg, "90%", seed=0, dtype=torch.bfloat16, device="cuda")
sparse.eval(), dense.eval()
x = torch.randint(0, cfg.vocab, (1, cfg.seq_len), device="cuda")


def top_kernels(fn, label, count=8):
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    table = prof.key_averages().table(
        sort_by="cuda_time_total", row_limit=count, max_name_column_width=60
    )
    print(f"\n### {label}\n{table}", flush=True)


with torch.no_grad():
    times = {}
    for auto in (True, False):
        tuning.BLOCK_ATTENTION_AUTO = auto
        times[f"sparse fused={auto}"] = do_bench_cudagraph(lambda: sparse(x), rep=50) * 1e3
    times["dense"] = do_bench_cudagraph(lambda: dense(x), rep=50) * 1e3
    for label, t in times.items():
        print(f"{label:<22} {t:8.1f} us  ({times['dense'] / t:.2f}x dense)", flush=True)
    for auto in (True, False):
        tuning.BLOCK_ATTENTION_AUTO = auto
        top_kernels(lambda: sparse(x), f"sparse, fused attention {auto}")
    top_kernels(lambda: dense(x), "dense")
tuning.BLOCK_ATTENTION_AUTO = True

# One training step (forward + backward), eager: GPU kernels and host time side by side.
sparse.train()
xt = torch.randint(0, cfg.vocab, (1, cfg.seq_len + 1), device="cuda")
step = lambda: sparse.loss(xt).backward()  # noqa: E731
step()
torch.cuda.synchronize()
acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=acts) as prof:
    step()
    torch.cuda.synchronize()
averages = prof.key_averages()
print("\n### training step, by GPU time")
print(averages.table(sort_by="cuda_time_total", row_limit=10, max_name_column_width=60))
print("\n### training step, by host time")
print(averages.table(sort_by="cpu_time_total", row_limit=12, max_name_column_width=60))
