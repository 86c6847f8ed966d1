"""CPU linear through torch's CSR matmul with a CSRMatrix's int16 columns converted to int32
into the thread's buffer (ops/_cpu_columns.py) against into a fresh tensor each call (the way
before), timed interleaved call by call; ms, medians, fp32, 70% sparse.

PYTHONPATH=src python benchmarks/results/cpu/2026-12-04-cpu-columns/columns_ab.py
"""

import statistics
import time
import warnings

import torch

import sparsekernels as sk
from sparsekernels.ops import _torch_sparse

warnings.simplefilter("ignore")  # torch's beta warning for sparse CSR
ways = {"buffer": _torch_sparse.as_int32, "fresh": lambda columns: columns.to(torch.int32)}
torch.manual_seed(0)
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
for rows, cols, tokens in [(4096, 14336, 1), (4096, 14336, 8), (4096, 4096, 1), (1536, 384, 1)]:
    dense = torch.randn(rows, cols) * (torch.rand(rows, cols) >= 0.7)
    W = sk.CSRMatrix.from_dense(dense)
    x = torch.randn(tokens, cols)
    times = {name: [] for name in ways}
    times["F.linear"] = []
    for _ in range(12 if rows * cols > 2**24 else 100):
        for name, way in ways.items():
            _torch_sparse.as_int32 = way
            start = time.perf_counter()
            sk.linear(x, W, backend="torch_sparse")
            times[name].append(time.perf_counter() - start)
        start = time.perf_counter()
        torch.nn.functional.linear(x, dense)
        times["F.linear"].append(time.perf_counter() - start)
    _torch_sparse.as_int32 = ways["buffer"]
    cells = "  ".join(f"{k} {statistics.median(v) * 1e3:8.3f}" for k, v in times.items())
    print(f"{rows:5d} x {cols:5d}  {tokens:2d} tokens  {cells}", flush=True)
