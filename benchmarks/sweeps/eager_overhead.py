"""Why the e2e suite's sparse Transformer runs 3-4x slower eagerly than as a CUDA graph (H100,
results/nvidia-h100/2026-12-07/at-1233355/e2e_transformer: inference at L = 8192 2.75 ms eager
against 0.71 as a graph, 5.47 against 1.36 at 16384; the training step 12-23 ms against 3.19,
while the dense model's differ by 0-55%). For inference and the training step (AdamW, as the
suite's) of the sparse and dense models, bf16, at L = 8192 and 16384 (LS):
- graph: the CUDA-graph median (what the suite reports);
- eager: synchronized wall time a call, median of REPS;
- host: the time until the eager call returns, the GPU kept busy by a long sleep queued
  first (a call that returns late waits on the GPU: a host sync);
- syncs: host synchronizations in one call (torch.cuda.set_sync_debug_mode), where they are;
- gc off: eager with Python's garbage collector disabled, and the collections (by
  generation) that REPS eager calls set off with it on (a full collection of a process
  holding torch and Triton takes milliseconds).
Then cProfile of the sparse model's eager calls at the first L, by own time.
    PYTHONPATH=src python3 benchmarks/sweeps/eager_overhead.py
    LS=8192 REPS=10 TOP=25 ...
"""

import cProfile
import gc
import io
import os
import pstats
import statistics
import time
import warnings

import torch
from triton.testing import do_bench_cudagraph

from sparsekernels.bench.e2e import _train_step as training_step  # (the suite's: AdamW)
from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair

LS = [int(v) for v in os.environ.get("LS", "8192,16384").split(",")]
REPS, TOP = int(os.environ.get("REPS", 10)), int(os.environ.get("TOP", 25))


def eager_ms(fn) -> float:
    runs = []
    for _ in range(REPS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - start) * 1e3)
    return statistics.median(runs)


def host_ms(fn) -> float:
    """The call's host time with the GPU busy for 200 ms first: work the host queues returns at
    once, a sync waits for the sleep (the time then reads ~200 ms or more)."""
    runs = []
    for _ in range(3):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(200e-3 * 1.5e9))  # ~200 ms at ~1.5-2 GHz
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) * 1e3)
        torch.cuda.synchronize()
    return statistics.median(runs)


def syncs(fn) -> list[str]:
    """Where one call synchronizes with the GPU (the warning's origin, as file:line)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [f"{w.filename.split('/src/')[-1]}:{w.lineno}" for w in caught
            if "synchroniz" in str(w.message)]  # fmt: skip


def eager_ms_gc_off(fn) -> float:
    gc.collect()
    gc.disable()
    try:
        return eager_ms(fn)
    finally:
        gc.enable()


def gc_counts(fn) -> str:
    """Garbage collections by generation over REPS calls, as "gen0/gen1/gen2"."""
    counts = [0, 0, 0]

    def count(phase, info):
        if phase == "start":
            counts[info["generation"]] += 1

    gc.callbacks.append(count)
    try:
        for _ in range(REPS):
            fn()
        torch.cuda.synchronize()
    finally:
        gc.callbacks.remove(count)
    return "/".join(map(str, counts))


def profile(fn, label: str) -> None:
    fn()
    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(5):
        fn()
    profiler.disable()
    torch.cuda.synchronize()
    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(TOP)
        print(f"\n### {label}, 5 calls, by {order}\n{text.getvalue()}", flush=True)


print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
table = []
for length in LS:
    cfg = TransformerConfig(vocab=256, dim=512, heads=8, layers=3, seq_len=length)
    sparse, dense = transformer_pair(cfg, "90%", seed=0, dtype=torch.bfloat16, device="cuda")
    x = torch.randint(0, cfg.vocab, (1, length), device="cuda")
    xt = torch.randint(0, cfg.vocab, (1, length + 1), device="cuda")
    calls = {}
    for name, model in (("sparse", sparse), ("dense", dense)):
        calls[f"{name} train step"] = training_step(model, xt)  # (a copy, in training mode)
        inference = model.eval()

        def infer(model=inference):
            with torch.no_grad():
                return model(x)

        calls[f"{name} inference"] = infer
    for label, fn in calls.items():
        fn()  # caches, compiles
        found = syncs(fn)
        graph = do_bench_cudagraph(fn, rep=100) if "inference" in label else float("nan")
        row = (f"L={length} {label}", graph, eager_ms(fn), host_ms(fn), len(found),
               eager_ms_gc_off(fn), gc_counts(fn))  # fmt: skip
        table.append(row)
        print(row, sorted(set(found))[:8], flush=True)
    if length == LS[0]:
        profile(calls["sparse inference"], f"L={length} sparse inference")
        profile(calls["sparse train step"], f"L={length} sparse train step")

print(f"\n{'call':<30} {'graph ms':>9} {'eager ms':>9} {'host ms':>9} {'syncs':>6} "
      f"{'gc off ms':>9} {'gc 0/1/2':>10}")  # fmt: skip
for label, graph, eager, host, count, gc_off, gcs in table:
    print(f"{label:<30} {graph:9.3f} {eager:9.3f} {host:9.3f} {count:6d} {gc_off:9.3f} {gcs:>10}")
