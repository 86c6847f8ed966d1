"""Host time of a compiled sparse MLP's call, static shapes, on the CPU: the backend chosen
while tracing (before) against in the op's body at each call (ops/_dispatch.AUTO, after).
Run with PYTHONPATH at either tree's src (WIDTH=64: a model small enough that the host
time is all); prints medians in us a call."""

import os
import statistics
import time

import torch

import sparsekernels as sk

torch.manual_seed(0)
torch.set_num_threads(1)
rows = []
WIDTH = int(os.environ.get("WIDTH", "384"))  # 64: host time alone
for config in ("70%", "2:8"):
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                torch.nn.Linear(4 * WIDTH, WIDTH))
    sk.sparsify_(model, config)
    for tokens in (1, 16, 200):
        x = torch.randn(tokens, WIDTH)
        for dynamic in (False, True):
            torch._dynamo.reset()
            compiled = torch.compile(model, dynamic=dynamic, fullgraph=True)
            with torch.no_grad():
                for _ in range(20):
                    compiled(x)
                times = []
                for _ in range(7):
                    start = time.perf_counter()
                    for _ in range(200):
                        compiled(x)
                    times.append((time.perf_counter() - start) / 200 * 1e6)
            rows.append((config, tokens, dynamic, statistics.median(times)))
            print(f"{config:>4} {tokens:4d} tokens dynamic={dynamic!s:5} "
                  f"{statistics.median(times):9.1f} us", flush=True)
