"""CPU linear: torch's sparse CSR matmul against the dense backend (densify, then BLAS), timed
interleaved (this VM's speed drifts), and what the route (kernels/spmm_cpu_tuning.py) picks.

PYTHONPATH=src python benchmarks/results/cpu/2026-12-04-dense-route/dense_route.py
CASES=rowsxcols/pattern/tokens[/dtype],... overrides the list; ms, medians.
"""

import os
import statistics
import time
import warnings

import torch

import sparsekernels as sk
from sparsekernels.ops import _dispatch
from sparsekernels.ops.spmm import csr_problem, nm_problem

warnings.simplefilter("ignore")  # torch's beta warning for sparse CSR
MINILM = ("384x384", "1536x384", "384x1536")
DEFAULT = [
    f"{shape}/{pattern}/{tokens}"
    for shape in MINILM
    for pattern in ("0.5", "0.7", "0.9", "2:4", "2:8", "1:8")
    for tokens in (32, 96, 192, 384)
] + [
    "4096x4096/0.5/256", "4096x4096/0.7/256", "4096x4096/0.7/512", "4096x4096/2:8/256",
    "1536x384/0.7/128/bfloat16", "1536x384/0.7/384/bfloat16", "384x384/0.5/256/bfloat16",
    "1536x384/0.9/384/bfloat16",
]  # fmt: skip


def weight(rows: int, cols: int, pattern: str, dtype: torch.dtype):
    dense = torch.randn(rows, cols)
    if ":" in pattern:
        n, m = map(int, pattern.split(":"))
        W = sk.NMMatrix.from_dense(dense, n, m, mask=sk.prune.nm_mask(dense, n, m))
    else:
        W = sk.CSRMatrix.from_dense(dense * (torch.rand(rows, cols) >= float(pattern)))
    return W.to(dtype=dtype), W.to_dense().to(dtype)


def route(W, x: torch.Tensor) -> str:
    b = x.t()
    if isinstance(W, sk.CSRMatrix):
        return _dispatch.choose(
            "spmm_csr", csr_problem(W.row_offsets, W.column_indices, W.values, b)
        )
    problem = nm_problem(W.values, b, W.n, W.m, W.vector, W.block, False)
    return _dispatch.choose("spmm_nm", problem)


def main() -> None:
    torch.manual_seed(0)
    cases = os.environ.get("CASES", ",".join(DEFAULT)).split(",")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{torch.backends.cpu.get_cpu_capability()}")  # fmt: skip
    print(
        "shape       pattern tokens dtype     sparse   dense    F.linear  route         route/best"
    )
    for case in cases:
        shape, pattern, tokens, *rest = case.split("/")
        dtype = getattr(torch, rest[0]) if rest else torch.float32
        rows, cols = map(int, shape.split("x"))
        W, dense = weight(rows, cols, pattern, dtype)
        x = torch.randn(int(tokens), cols).to(dtype)
        calls = {
            "torch_sparse": lambda: sk.linear(x, W, backend="torch_sparse"),
            "dense": lambda: sk.linear(x, W, backend="dense"),
            "F.linear": lambda: torch.nn.functional.linear(x, dense),
        }
        for call in calls.values():
            call()
        times = {name: [] for name in calls}
        for _ in range(max(10, 1500 // int(tokens))):
            for name, call in calls.items():
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
        ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        chosen = route(W, x)
        best = min(ms["torch_sparse"], ms["dense"])
        print(f"{shape:11s} {pattern:7s} {tokens:>6s} {str(dtype)[6:]:8s} "
              f"{ms['torch_sparse']:8.3f} {ms['dense']:8.3f} {ms['F.linear']:8.3f}  "
              f"{chosen:13s} {ms[chosen] / best:.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
