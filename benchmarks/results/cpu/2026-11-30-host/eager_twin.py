"""Host time of a training-style call (forward + backward) with the eager autograd.Function
twins against the custom ops, in one process: SparseLinear (CSR 90% and 2:8) at 8 tokens on the
dense and reference backends, CPU, one thread, tiny shapes so that the Python path dominates.
    PYTHONPATH=src python eager_twin.py
"""

import time

import torch

import sparsekernels as sk
from sparsekernels.ops import _library

torch.manual_seed(0)
torch.set_num_threads(1)
dense = torch.nn.Linear(64, 64)
x = torch.randn(8, 64)


def timed(fn, reps=400) -> float:
    for _ in range(50):
        fn()
    best = float("inf")
    for _ in range(5):  # best of five: the box runs other work
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - start) / reps * 1e6)
    return best


def step(layer, backend):
    def run():
        xx = x.clone().requires_grad_()
        sk.linear(xx, layer.weight, layer.bias, backend=backend).sum().backward()

    return run


twins = _library.spmm_csr_eager, _library.spmm_nm_eager


def use_twins(on: bool) -> None:
    """Off: the outer call goes through the custom op, as before the twins (inner calls in the
    backward run their backends directly either way)."""
    if on:
        _library.spmm_csr_eager, _library.spmm_nm_eager = twins
    else:
        _library.spmm_csr_eager, _library.spmm_nm_eager = _library.spmm_csr, _library.spmm_nm


print(f"torch {torch.__version__}, us per forward + backward (best of 5 x 400)")
for label, kwargs in (("csr 90%", {"sparsity": 0.9}), ("2:8", {"pattern": "2:8"})):
    layer = sk.nn.SparseLinear.from_dense(dense, **kwargs)
    for backend in ("reference", "dense"):
        twin = op = float("inf")
        for _ in range(3):  # interleaved, best of each: the box may run other work
            use_twins(True)
            twin = min(twin, timed(step(layer, backend)))
            use_twins(False)
            op = min(op, timed(step(layer, backend)))
        use_twins(True)
        saved = op - twin
        print(f"{label:8} {backend:10} custom op {op:7.1f}  twin {twin:7.1f}  saved {saved:6.1f}")
plain = timed(lambda: dense(x.clone().requires_grad_()).sum().backward())
print(f"nn.Linear             {plain:7.1f}")
