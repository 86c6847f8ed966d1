"""Host time of an eager call (no grad) of the public ops, and where it goes (cProfile):
SDDMM, the row softmax, linear with 2:4, 2:8, 1:8 and 70% / 90% CSR weights at one token and
at 16 (the mma.sp kernel, the few-token and scatter kernels), two of them without linear's
eager plans, and torch's matmul, each in a host-bound loop of 200 calls. Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/host_overhead.py
"""

import cProfile
import os
import pstats
import time

import torch

import sparsekernels as sk
from sparsekernels.ops import _eager_plans

torch.manual_seed(0)

dev, bf = os.environ.get("DEV", "cuda"), torch.bfloat16


def nm_weight(rows, cols, n, m):
    w = torch.randn(rows, cols, device=dev, dtype=bf)
    g = w.view(rows, -1, m)
    keep = torch.zeros_like(g, dtype=torch.bool).scatter_(-1, g.abs().topk(n, -1).indices, True)
    return sk.NMMatrix.from_dense((g * keep).view(rows, cols), n, m)


mask = torch.rand(4096, 4096, device=dev) < 0.02
P = sk.CSRMatrix.from_dense(torch.randn(4096, 4096, device=dev, dtype=bf) * mask)
X = torch.randn(4096, 64, device=dev, dtype=bf)
Y = torch.randn(4096, 64, device=dev, dtype=bf)
W24 = nm_weight(4096, 14336, 2, 4)
W28 = nm_weight(4096, 14336, 2, 8)
W18 = nm_weight(4096, 14336, 1, 8)
x1 = torch.randn(1, 14336, device=dev, dtype=bf)
x16 = torch.randn(16, 14336, device=dev, dtype=bf)
wc = torch.randn(4096, 14336, device=dev, dtype=bf)
Wcsr = sk.CSRMatrix.from_dense(wc * (torch.rand_like(wc, dtype=torch.float32) < 0.3))
Wcsr90 = sk.CSRMatrix.from_dense(wc * (torch.rand_like(wc, dtype=torch.float32) < 0.1))
S = sk.sddmm(X, Y, P)


def _unplanned(op, *args):
    """The whole path every call (linear's eager plans set aside): what the plans save."""
    run, _eager_plans.run = _eager_plans.run, lambda *a: None
    try:
        return op(*args)
    finally:
        _eager_plans.run = run


CALLS = {
    "sddmm bf16 2% K=64": lambda: sk.sddmm(X, Y, P),
    "sparse_softmax": lambda: sk.sparse_softmax(S, 0.125),
    "linear 2:4 1 token": lambda: sk.linear(x1, W24),
    "linear 2:8 1 token": lambda: sk.linear(x1, W28),
    "linear 1:8 1 token": lambda: sk.linear(x1, W18),
    "linear 2:4 16 tokens": lambda: sk.linear(x16, W24),
    "linear 2:8 16 tokens": lambda: sk.linear(x16, W28),
    "linear 1:8 16 tokens": lambda: sk.linear(x16, W18),
    "linear csr 70% 1 token": lambda: sk.linear(x1, Wcsr),
    "linear csr 90% 1 token": lambda: sk.linear(x1, Wcsr90),
    "linear csr 70% 16 tokens": lambda: sk.linear(x16, Wcsr),
    "linear 2:8 1 token, no plan": lambda: _unplanned(sk.linear, x1, W28),
    "linear csr 70% 1 token, no plan": lambda: _unplanned(sk.linear, x1, Wcsr),
    "torch matmul 1 token": lambda: x1 @ wc.t(),
    "torch matmul 16 tokens": lambda: x16 @ wc.t(),
}
rows = []
for name, fn in CALLS.items():
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / 200 * 1e6
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(200):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    print(f"==== {name}: {wall:.1f} us a call (host-bound loop)")
    pstats.Stats(prof).sort_stats("tottime").print_stats(14)
    pstats.Stats(prof).sort_stats("cumulative").print_stats("sparsekernels|triton", 30)
    rows.append((name, wall))
for name, wall in rows:
    print(f"{name:28s} {wall:8.1f} us")
