"""The e2e suite's sparse Transformer training step (L = 8192, 90% weights, forward, backward and
AdamW) eager and captured as a CUDA graph, sparse against dense: whether the step captures at
all (host syncs would fail it) and what the graph takes off the host-bound eager step.
bf16, medians in ms; the e2e suite times the same step the same way.
    PYTHONPATH=src python3 benchmarks/sweeps/train_step_graph.py
"""

import torch
from triton.testing import do_bench, do_bench_cudagraph

from sparsekernels.bench.e2e import _train_step
from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair

cfg = TransformerConfig(vocab=256, dim=512, heads=8, layers=3, seq_len=8192)
sparse, dense = transformer_pair(cfg, "90%", seed=0, dtype=torch.bfloat16, device="cuda")
x = torch.randint(0, cfg.vocab, (1, cfg.seq_len + 1), device="cuda")
times = {}
for name, model in (("sparse", sparse), ("dense", dense)):
    step = _train_step(model, x)
    first = step().item()
    eager = do_bench(step, rep=200, return_mode="median")
    try:
        graph = do_bench_cudagraph(step, rep=100, return_mode="median")
    except Exception as error:  # noqa: BLE001 - report why capture failed
        graph = float("nan")
        print(f"{name}: capture failed: {type(error).__name__}: {str(error)[:300]}")
        torch.cuda.synchronize()
    after = step().item()  # the graph's steps trained the model: the loss moved, still finite
    times[name] = (eager, graph)
    print(
        f"{name:<7} eager {eager:7.3f} ms  graph {graph:7.3f} ms  loss {first:.4f} -> {after:.4f}"
    )

print(f"\n{'':<7} {'eager':>8} {'graph':>8}")
for name, (eager, graph) in times.items():
    print(f"{name:<7} {eager:8.3f} {graph:8.3f}")
print(
    f"sparse / dense throughput: eager {times['dense'][0] / times['sparse'][0]:.2f}x, "
    f"graph {times['dense'][1] / times['sparse'][1]:.2f}x"
)
