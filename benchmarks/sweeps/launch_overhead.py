"""Where an eager decode call's host time goes: sk.linear (with its eager plan) against the same
Triton launches replayed with the arguments it passed, through the JIT function
(`fn[grid](...)`: Triton's binder, specialization and cache lookup) and through the compiled
kernel's own launcher (what a plan that kept the compiled kernel would pay), and torch's
matmul. Small weights (512 x 512: the GPU never holds the loop back), one token, bf16.
Host-bound loops of many calls, then one synchronize. sk.linear with the launch plans off (their
default), and on (ops/_launch_plans.py); the launches are recorded on a fresh copy.
    PYTHONPATH=src python3 benchmarks/sweeps/launch_overhead.py
"""

import importlib
import pkgutil
import time

import torch
import triton

import sparsekernels as sk
import sparsekernels.kernels as kernels_pkg
from sparsekernels.ops import _launch_plans

CALLS = 3000


class Recorder:
    """Stands in for a module's JIT function: records each launch, then makes it."""

    def __init__(self, fn, log):
        self.fn, self.log = fn, log

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            compiled = self.fn[grid](*args, **kwargs)
            self.log.append((self.fn, grid, args, kwargs, compiled))
            return compiled

        return launch

    def __getattr__(self, name):
        return getattr(self.fn, name)


def record_launches(call) -> list:
    """The Triton launches one call of `call` makes (every kernels module's `*kernel`s)."""
    log, patched = [], []
    for info in pkgutil.iter_modules(kernels_pkg.__path__):
        module = importlib.import_module(f"sparsekernels.kernels.{info.name}")
        for name, value in list(vars(module).items()):
            # kernels only (Gluon's too): a device function swapped out would change what
            # Triton's check of a kernel's globals sees
            jit = isinstance(value, triton.runtime.jit.JITFunction)
            if jit and name.endswith("kernel"):
                setattr(module, name, Recorder(value, log))
                patched.append((module, name, value))
    try:
        call()
        torch.cuda.synchronize()
    finally:
        for module, name, value in patched:
            setattr(module, name, value)
    return log


def fresh_copy(W):
    """W in new tensors, without the eager and launch plans W's calls made."""
    if isinstance(W, sk.CSRMatrix):
        return sk.CSRMatrix(W.row_offsets.clone(), W.column_indices.clone(), W.values.clone(),
                            W.shape, check=False)  # fmt: skip
    return sk.NMMatrix(W.values.clone(), W.indices.clone(), W.shape, W.n, W.m, W.vector, W.block)


def direct(fn, grid, args, kwargs, compiled):
    """The compiled kernel's launcher with the bound arguments, as JITFunction.run ends."""
    device = torch.cuda.current_device()
    binder = fn.device_caches[device][4]
    bound, _, _ = binder(*args, **kwargs)
    values = list(bound.values())
    g = tuple(grid) + (1,) * (3 - len(grid))
    stream = torch.cuda.current_stream().cuda_stream
    run, function, packed = compiled.run, compiled.function, compiled.packed_metadata

    def launch():
        run(g[0], g[1], g[2], stream, function, packed, None, None, None, *values)

    return launch


def host_us(fn) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / CALLS * 1e6


def main():
    print(f"# {torch.cuda.get_device_name()}, bf16, us of host time a call ({CALLS} calls)")
    torch.manual_seed(0)
    w = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, 512, device="cuda", dtype=torch.bfloat16)
    csr_mask = sk.prune.magnitude_mask(w.float(), 0.7)
    nm_mask = sk.prune.nm_mask(w.float(), 2, 8)
    weights = {
        "csr 70%": sk.CSRMatrix.from_dense(w * csr_mask, mask=csr_mask),
        "2:8": sk.NMMatrix.from_dense(w * nm_mask, 2, 8, mask=nm_mask),
    }
    rows = [("empty loop", host_us(lambda: None))]
    rows.append(("torch matmul", host_us(lambda: x @ w.t())))
    with torch.no_grad():
        for name, W in weights.items():
            want = sk.linear(x, W)
            rows.append((f"{name}: sk.linear", host_us(lambda W=W: sk.linear(x, W))))
            _launch_plans.ENABLED = True  # (a fresh copy: its second call records)
            planned = fresh_copy(W)
            rows.append((f"{name}: + launch plans", host_us(lambda: sk.linear(x, planned))))
            replays = torch.equal(sk.linear(x, planned), want)
            print(f"{name}: launch plans {_launch_plans.stats}, same answer: {replays}")
            _launch_plans.ENABLED = False
            fresh = fresh_copy(W)  # (W's own calls replay their launches: no JIT function runs)
            launches = record_launches(lambda: sk.linear(x, fresh))
            names = ", ".join(f.fn.__name__ if hasattr(f, "fn") else str(f) for f, *_ in launches)
            print(f"{name}: {len(launches)} launch(es): {names}")
            jit_calls = [lambda e=e: e[0][e[1]](*e[2], **e[3]) for e in launches]
            direct_calls = [direct(*e) for e in launches]
            rows.append((f"{name}: fn[grid](...)", host_us(lambda c=jit_calls: [f() for f in c])))
            rows.append((f"{name}: compiled.run", host_us(lambda c=direct_calls: [f() for f in c])))
            got = sk.linear(x, W)
            print(f"{name}: replays leave the answer as it was: {torch.equal(got, want)}")
    print()
    for label, us in rows:
        print(f"{label:<32} {us:7.1f} us")


if __name__ == "__main__":
    main()
