"""Host time of a SparseLinear call at MiniLM's sizes (the demo's eager column): the layer,
sk.linear with the layer's weight built once, F.linear, each in a host-bound loop of 200
calls under no_grad on a (8, 20, 384) or (8, 20, 1536) batch; the eager and launch plans'
counts and the backend each chose; the layer's cProfile. Then the densify replay off and on
(_eager_plans.DENSIFY_PLANS) on fresh layers, alternated ROUNDS times in this one process (the
host's noise between processes hid it), the best of each. Prints the tables last.
    PYTHONPATH=src python3 benchmarks/sweeps/layer_host_time.py
"""

import cProfile
import os
import pstats
import time

import torch

import sparsekernels as sk
from sparsekernels.ops import _eager_plans, _launch_plans

torch.manual_seed(0)
dev, bf = os.environ.get("DEV", "cuda"), torch.bfloat16
PATTERNS = {"50%": dict(sparsity=0.5), "70%": dict(sparsity=0.7), "90%": dict(sparsity=0.9),
            "2:4": dict(pattern="2:4"), "2:8": dict(pattern="2:8"),
            "2:8 v64": dict(pattern="2:8", vector=64)}  # fmt: skip
CALLS = int(os.environ.get("CALLS", "200"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))


def host_us(fn) -> float:
    for _ in range(10):
        fn()
    if dev == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    if dev == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / CALLS * 1e6


def backends(W) -> str:
    plans = _eager_plans._PLANS.get(W.values) or {}
    return ",".join(sorted({p.backend + ("/L" if p.launches else "") for p in plans.values()}))


rows = []
with torch.no_grad():
    for out_f, in_f in ((1536, 384), (384, 1536)):
        dense = torch.nn.Linear(in_f, out_f, device=dev, dtype=bf)
        x = torch.randn(8, 20, in_f, device=dev, dtype=bf)
        rows.append((f"{out_f}x{in_f} F.linear", host_us(lambda: dense(x)), ""))
        for name, kwargs in PATTERNS.items():
            layer = sk.nn.SparseLinear.from_dense(dense, **kwargs)
            before = dict(_launch_plans.stats)
            layer_us = host_us(lambda: layer(x))
            W = layer.weight
            op_us = host_us(lambda: sk.linear(x, W, layer.bias))
            counts = {k: v - before.get(k, 0) for k, v in _launch_plans.stats.items()}
            label = f"{out_f}x{in_f} {name}"
            rows.append((label + " layer", layer_us, f"{backends(W)} {counts}"))
            rows.append((label + " sk.linear", op_us, ""))
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(CALLS):
                layer(x)
            prof.disable()
            print(f"==== {label} layer: {layer_us:.1f} us a call")
            pstats.Stats(prof).sort_stats("cumulative").print_stats("sparsekernels|triton", 25)

    densify_replay = []  # (label, best us with the replay off, on)
    for out_f, in_f in ((1536, 384), (384, 1536)):
        dense = torch.nn.Linear(in_f, out_f, device=dev, dtype=bf)
        x = torch.randn(8, 20, in_f, device=dev, dtype=bf)
        for name in ("70%", "2:4", "2:8"):
            best = {False: float("inf"), True: float("inf")}
            for _ in range(ROUNDS):
                for replay in (False, True):
                    _eager_plans.DENSIFY_PLANS = replay
                    layer = sk.nn.SparseLinear.from_dense(dense, **PATTERNS[name])
                    best[replay] = min(best[replay], host_us(lambda: layer(x)))
            densify_replay.append((f"{out_f}x{in_f} {name}", best[False], best[True]))
for label, us, extra in rows:
    print(f"{label:32s} {us:8.1f} us  {extra}")
print(f"\n{'layer (densify replay)':32s}      off       on")
for label, off, on in densify_replay:
    print(f"{label:32s} {off:8.1f} {on:8.1f} us")
