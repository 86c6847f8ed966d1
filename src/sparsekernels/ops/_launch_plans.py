"""A repeat eager call replays the Triton launches its backend made, through the compiled kernels.

On the H200's host an eager one-token linear on a 512 x 512 weight took 124 us (CSR) and 144
us (2:8) of Python, its one launch 34-40 us of that through Triton's JIT function and 10.5 us
through the compiled kernel's own launcher; torch's matmul 22
(benchmarks/results/nvidia-h200/2026-12-02/at-fe7e976/launch_overhead.txt). So the second call
of an eager plan's signature (ops/_eager_plans.py) records what its backend launched: the
compiled kernel, the grid and every argument, each tensor as a pointer relative to x, to the
bias, to the output it returned, or held (the weight's tensors and caches, and buffers the
launches themselves fill; with DESCRIPTORS, TMA descriptors over held tensors). Later calls
allocate the output like the recorded one and launch the compiled kernels with this call's
pointers, nothing else.

Only a backend whose device work is all Triton launches can be replayed: while recording, any
aten operation but allocations and views (a copy of x, a cuBLAS product, a read of a value on
the host) refuses the plan, and so does a launch that did not go through a JIT function.
A replay needs the recorded Triton (its launcher's arguments are internal), no launch hooks,
the same device and stream (buffers the launches fill are the plan's; each stream records its
own), the weight's very tensors unchanged, and x and the bias at the same 16-byte alignment
(what the kernels were specialized on); otherwise the call takes the backend as before. On unless
SPARSEKERNELS_LAUNCH_PLANS=0 (ENABLED); GPU tests in tests/test_launch_plans.py.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..formats import CSRMatrix
from ._identity_cache import version

# On since its GPU tests passed on the H200 (2026-12-02/at-62be96b): a repeat linear there
# took 97 -> 30 us (CSR 70%, one token). SPARSEKERNELS_LAUNCH_PLANS=0 turns it off.
ENABLED = os.environ.get("SPARSEKERNELS_LAUNCH_PLANS", "1") != "0"
# TMA descriptors over the weight's tensors (the ring kernel's) replayed as recorded: the
# launcher builds their tensor maps each launch. On since its GPU tests passed on the H200
# (2026-12-03/at-11b63d0: the 1:8 ring case); SPARSEKERNELS_LAUNCH_PLAN_DESCRIPTORS=0 turns it off.
DESCRIPTORS = os.environ.get("SPARSEKERNELS_LAUNCH_PLAN_DESCRIPTORS", "1") != "0"
SUPPORTED_TRITON = ("3.6.",)  # launcher arguments as JITFunction.run passes them there
_ALLOCATIONS = {
    torch.ops.aten.empty,
    torch.ops.aten.empty_strided,
    torch.ops.aten.new_empty,
    torch.ops.aten.new_empty_strided,
    torch.ops.aten.empty_like,
}
_RECORDING = threading.Lock()
X, BIAS, OUT = 0, 1, 2  # what a replayed pointer is relative to
stats = {"recorded": 0, "refused": 0, "replayed": 0}  # (the GPU tests check the replays ran)


def _hooks_idle() -> bool:
    """No launch hooks set (Triton 3.6 keeps them in chains, empty by default): a replay passes
    none, so a profiler's would miss its launches."""
    from triton import knobs

    hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
    return all(h is None or not getattr(h, "calls", True) for h in hooks)


class _AllocationsAndViewsOnly(TorchDispatchMode):
    """Notes every aten operation a call makes other than allocations and views."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket not in _ALLOCATIONS and not func.is_view:
            self.refused.append(str(func))
        return func(*args, **(kwargs or {}))


@dataclass
class _Launch:
    run: object  # the compiled kernel's launcher
    function: int
    packed: object
    grid: tuple[int, int, int]
    values: list  # every argument in order, tensors as pointers
    relative: list[tuple[int, int, int]]  # (argument, X / BIAS / OUT, byte offset)


@dataclass
class LaunchPlan:
    launches: list[_Launch]
    weight: tuple  # (id, version) of the weight's tensors when recorded
    x_ptr: int
    bias_ptr: int
    out_shape: tuple
    out_stride: tuple
    out_dtype: torch.dtype
    device: int
    stream: int
    held: list  # storages the launches read or fill, kept for the plan's life

    def replay(self, x: torch.Tensor, bias: torch.Tensor | None, weight: tuple, stream=None):
        """The backend's output for this call, or None where this call cannot replay.
        `stream`: the current stream's key when the caller has it (stream_of(x))."""
        if weight != self.weight or not _hooks_idle():
            return None
        stream = _current_stream() if stream is None else stream
        if stream != (self.stream, self.device) or x.device.index != self.device:
            return None
        base = {X: x.data_ptr(), BIAS: bias.data_ptr() if bias is not None else 0}
        if (base[X] - self.x_ptr) % 16 or (base[BIAS] - self.bias_ptr) % 16:
            return None
        out = torch.empty_strided(
            self.out_shape, self.out_stride, dtype=self.out_dtype, device=x.device
        )
        base[OUT] = out.data_ptr()
        for launch in self.launches:
            values = list(launch.values)
            for index, kind, offset in launch.relative:
                values[index] = base[kind] + offset
            g = launch.grid
            launch.run(
                g[0], g[1], g[2], self.stream, launch.function, launch.packed, None, None, None,
                *values,
            )  # fmt: skip
        stats["replayed"] += 1
        return out


def _current_stream() -> tuple[int, int]:
    """(the current CUDA stream's handle, its device): where launches go. Through the raw
    handle as Triton's own launches read it (torch.cuda.current_stream() builds a Stream
    object: several microseconds of a replay's host time)."""
    device = torch.cuda.current_device()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        return torch.cuda.current_stream().cuda_stream, device
    return raw(device), device


def stream_of(x: torch.Tensor) -> tuple[int, int] | None:
    """The key of the stream a call on x launches on (None off CUDA): a plan replays there only."""
    return _current_stream() if x.is_cuda else None


def _current_device() -> int:
    return torch.cuda.current_device()


def weight_state(W) -> tuple:
    """(id, version) of the tensors that make up W: a replay needs the very same, unchanged
    (an inference tensor has no version: None, and no plan is recorded for it)."""
    values = W.values
    if isinstance(W, CSRMatrix):  # (spelled out: every replay pays for this)
        offsets, columns = W.row_offsets, W.column_indices
        return (
            (id(values), version(values)), (id(offsets), version(offsets)),
            (id(columns), version(columns)),
        )  # fmt: skip
    indices = W.indices
    return (id(values), version(values)), (id(indices), version(indices))


def can_record(x: torch.Tensor) -> bool:
    if not ENABLED or not x.is_cuda:  # (first: this runs on every planned call until recorded)
        return False
    import triton

    from ._dispatch import triton_interpreter_enabled

    return (
        not triton_interpreter_enabled()
        and triton.__version__.startswith(SUPPORTED_TRITON)
        and _hooks_idle()
        and not torch.cuda.is_current_stream_capturing()
    )


def record(backend_call, x: torch.Tensor, bias: torch.Tensor | None, W):
    """(backend_call()'s output, a LaunchPlan for later calls or None)."""
    if any(v is None for _, v in weight_state(W)) or not _RECORDING.acquire(blocking=False):
        return backend_call(), None
    try:
        return _record(backend_call, x, bias, W)
    finally:
        _RECORDING.release()


def _record(backend_call, x, bias, W):
    from triton import knobs
    from triton.runtime.jit import JITFunction

    thread, log, seen = threading.get_ident(), [], [0]
    original = JITFunction.run

    def logged(self, *args, grid, warmup, **kwargs):
        kernel = original(self, *args, grid=grid, warmup=warmup, **kwargs)
        if not warmup and threading.get_ident() == thread:
            log.append((self, grid, args, kwargs, kernel))
        return kernel

    def counted(metadata) -> None:
        seen[0] += 1

    guard, chain = _AllocationsAndViewsOnly(), knobs.runtime.launch_enter_hook
    JITFunction.run = logged
    chain.add(counted)  # every launch, through a JIT function or not
    try:
        with guard:
            out = backend_call()
    finally:
        JITFunction.run = original
        chain.remove(counted)
    plan = None
    if not guard.refused and log and seen[0] == len(log):
        plan = _plan(log, x, bias, out, W)
    stats["recorded" if plan is not None else "refused"] += 1
    return out, plan


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _plan(log, x, bias, out, W) -> LaunchPlan | None:
    span = sum((s - 1) * st for s, st in zip(out.shape, out.stride(), strict=True)) + 1
    whole = out.storage_offset() == 0 and out.untyped_storage().nbytes() == span * out.itemsize
    if not whole or 0 in out.shape:
        return None
    bases = {X: (_storage(x), x.data_ptr()), OUT: (_storage(out), out.data_ptr())}
    if bias is not None:
        bases[BIAS] = (_storage(bias), bias.data_ptr())
    if len({storage for storage, _ in bases.values()}) != len(bases):
        return None  # x, bias and the output share memory: which one a pointer follows is unclear
    held, launches = {}, []
    for fn, grid, args, kwargs, kernel in log:
        binder = fn.device_caches[_current_device()][4]
        bound, _, _ = binder(*args, **kwargs)
        grid = grid(bound) if callable(grid) else tuple(grid)
        values, relative = list(bound.values()), []
        for index, value in enumerate(values):
            if isinstance(value, torch.Tensor):
                kind = next((k for k, (s, _) in bases.items() if s == _storage(value)), None)
                if kind is None:  # the weight's, a cache's, or a buffer the launches fill
                    held[_storage(value)] = value.untyped_storage()
                    values[index] = value.data_ptr()
                else:  # (no reference kept: a densify's output is a dense weight)
                    relative.append((index, kind, value.data_ptr() - bases[kind][1]))
                    values[index] = 0  # (each replay writes this call's pointer)
            elif type(value).__name__ == "TensorDescriptor":
                base = value.base  # the pointer inside it: the weight's may stay, no other
                if not DESCRIPTORS or any(s == _storage(base) for s, _ in bases.values()):
                    return None
                held[_storage(base)] = base.untyped_storage()
        launches.append(
            _Launch(
                kernel.run,
                kernel.function,
                kernel.packed_metadata,
                (*grid, 1, 1)[:3],
                values,
                relative,
            )  # fmt: skip
        )
    stream, device = _current_stream()
    return LaunchPlan(
        launches=launches,
        weight=weight_state(W),
        x_ptr=x.data_ptr(),
        bias_ptr=bias.data_ptr() if bias is not None else 0,
        out_shape=tuple(out.shape),
        out_stride=out.stride(),
        out_dtype=out.dtype,
        device=device,
        stream=stream,
        held=list(held.values()),
    )
