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

The general form (record_call, LaunchPlan.replay_call) takes any inputs and outputs: a call of
several inputs (the fused attention's backward: qkv, its output, the LSE and the output's
gradient) and several outputs (its training forward: the output and the LSE). Pointers follow
each input and output; the `state` tensors (ids and versions) must be the recorded ones.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .._env import flag
from ..formats import CSRMatrix
from ._identity_cache import version

# On since its GPU tests passed on the H200 (2026-12-02/at-62be96b): a repeat linear there
# took 97 -> 30 us (CSR 70%, one token). SPARSEKERNELS_LAUNCH_PLANS=0 turns it off.
ENABLED = flag("SPARSEKERNELS_LAUNCH_PLANS", True)
# TMA descriptors over the weight's tensors (the ring kernel's) replayed as recorded: the
# launcher builds their tensor maps each launch. On since its GPU tests passed on the H200
# (2026-12-03/at-11b63d0: the 1:8 ring case); SPARSEKERNELS_LAUNCH_PLAN_DESCRIPTORS=0 turns it off.
DESCRIPTORS = flag("SPARSEKERNELS_LAUNCH_PLAN_DESCRIPTORS", True)
# Calls recording a gradient replayed too (the fused attention's forward and backward, the
# densified linear's densify). On since their GPU tests passed on an H100 (2026-12-07/at-3680ac2:
# the attention core's forward + backward 1193-1404 -> 335-457 us of host time);
# SPARSEKERNELS_TRAINING_LAUNCH_PLANS=0 turns it off.
TRAINING = flag("SPARSEKERNELS_TRAINING_LAUNCH_PLANS", True)
SUPPORTED_TRITON = ("3.6.",)  # launcher arguments as JITFunction.run passes them there
_ALLOCATIONS = {
    torch.ops.aten.empty,
    torch.ops.aten.empty_strided,
    torch.ops.aten.new_empty,
    torch.ops.aten.new_empty_strided,
    torch.ops.aten.empty_like,
}
_RECORDING = threading.Lock()
X, BIAS, OUT = 0, 1, 2  # what a linear's replayed pointer is relative to (inputs, then outputs)
stats = {"recorded": 0, "refused": 0, "replayed": 0}  # (the GPU tests check the replays ran)
_SCRATCH = threading.local()  # .marked: the recording thread's scratch tensors, while it records
empty_strided = torch.empty_strided
# A replayer's answer (ops/_eager_plans.py, ops/_attention_plans.py) where a signature's calls
# will not replay: a layer keeps it so as not to ask again (nn/_repeat_calls.py)
NEVER = "never"


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
    relative: list[tuple[int, int, int]]  # (argument, its tensor: inputs, outputs, scratch; offset)


@dataclass
class LaunchPlan:
    launches: list[_Launch]
    state: tuple  # (id, version) of the tensors that must be unchanged (a linear's weight)
    input_ptrs: tuple[int, ...]  # each input's address when recorded (0 for None)
    # each input's (shape, strides, dtype) when recorded, where the caller's signature does not
    # already fix them (record_call's check_inputs); else None
    input_layouts: tuple | None
    outputs: tuple[tuple[tuple, tuple, torch.dtype], ...]  # (shape, strides, dtype) each
    scratch: tuple[tuple[tuple, tuple, torch.dtype], ...]  # allocated anew by each replay
    single: bool  # the call returned one tensor, not a tuple
    device: int
    stream: int
    held: list  # storages the launches read or fill, kept for the plan's life

    def replay(self, x: torch.Tensor, bias: torch.Tensor | None, weight: tuple, stream=None):
        """A linear's output for this call (x, bias, the weight's state), or None where this
        call cannot replay. `stream`: the current stream's key when the caller has it. (The
        general replay_call's checks spelled out for linear's plan: one output, no scratch, no
        input layouts; a replay is on every eager call's path.)"""
        if not self.lean:
            return self.replay_call((x, bias), weight, stream)
        return self.replay_linear(x, bias, stream) if weight == self.state else None

    def replay_linear(self, x: torch.Tensor, bias: torch.Tensor | None, stream=None):
        """replay's launches where the caller has checked the weight's state itself (a
        SparseLinear's repeat call, nn/_repeat_calls.py); for a plan that `lean` is True."""
        if not _hooks_idle():
            return None
        stream = _current_stream() if stream is None else stream
        if stream != (self.stream, self.device) or x.device.index != self.device:
            return None
        x_ptr, bias_ptr = x.data_ptr(), 0 if bias is None else bias.data_ptr()
        x_was, bias_was = self.input_ptrs
        if (x_ptr - x_was) % 16 or (bias_ptr - bias_was) % 16:
            return None
        shape, stride, dtype = self.outputs[0]
        out = empty_strided(shape, stride, dtype=dtype, device=x.device)
        self._launch((x_ptr, bias_ptr, out.data_ptr()))
        return out

    @property
    def lean(self) -> bool:
        """Whether replay_linear can run this plan: one output, no scratch, no input layouts."""
        return not self.scratch and self.single and self.input_layouts is None

    def replay_call(self, inputs: tuple, state: tuple, stream=None):
        """The recorded call's output(s) for these inputs, or None where this call cannot
        replay (another state, stream or device, an input at another 16-byte alignment or,
        with input_layouts, of another shape, strides or dtype)."""
        if state != self.state or not _hooks_idle():
            return None
        stream = _current_stream() if stream is None else stream
        device = inputs[0].device
        if stream != (self.stream, self.device) or device.index != self.device:
            return None
        if self.input_layouts is not None and self.input_layouts != _layouts(inputs):
            return None
        bases = []
        for t, recorded in zip(inputs, self.input_ptrs, strict=True):
            base = 0 if t is None else t.data_ptr()
            if (base - recorded) % 16:
                return None
            bases.append(base)
        outs = [empty_strided(s, st, dtype=dt, device=device) for s, st, dt in self.outputs]
        # (the scratch dies on return, as the call's own would: later work on this stream,
        # which may reuse its memory, runs after these launches)
        scratch = [empty_strided(s, st, dtype=dt, device=device) for s, st, dt in self.scratch]
        self._launch([*bases, *(t.data_ptr() for t in (*outs, *scratch))])
        return outs[0] if self.single else tuple(outs)

    def _launch(self, bases) -> None:
        """Every recorded launch, its pointers into the inputs, outputs and scratch at `bases`."""
        for launch in self.launches:
            values = list(launch.values)
            for index, kind, offset in launch.relative:
                values[index] = bases[kind] + offset
            g = launch.grid
            launch.run(
                g[0], g[1], g[2], self.stream, launch.function, launch.packed, None, None, None,
                *values,
            )  # fmt: skip
        stats["replayed"] += 1


def scratch(t: torch.Tensor) -> torch.Tensor:
    """t, a buffer a call allocates for its own launches and drops on return: while that call
    is recorded, marked so that each replay allocates its own (else the plan would hold it for
    its life, as it holds a weight's tensors)."""
    marked = getattr(_SCRATCH, "marked", None)
    if marked is not None:
        marked.append(t)
    return t


def _layouts(inputs: tuple) -> tuple:
    return tuple(None if t is None else (t.shape, t.stride(), t.dtype) for t in inputs)


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


def replayed(store: dict, inputs: tuple, state: tuple, run, most_streams: int, check_inputs=False):
    """run()'s result, by the launches this stream recorded in `store` (the stream's key -> a
    LaunchPlan, or None where recording gave none) where they replay; recorded on a stream's
    first call, on at most `most_streams` streams. record_call has the arguments."""
    stream = stream_of(inputs[0])
    launches = store.get(stream)
    if launches is not None:
        out = launches.replay_call(inputs, state, stream)
        if out is not None:
            return out
    if stream in store or len(store) >= most_streams or not can_record(inputs[0]):
        return run()
    out, store[stream] = record_call(run, inputs, state, check_inputs)
    return out


def record(backend_call, x: torch.Tensor, bias: torch.Tensor | None, W):
    """(backend_call()'s output, a LaunchPlan for later calls or None): a linear's, whose
    pointers follow x, the bias and the output, the weight W held unchanged."""
    return record_call(backend_call, (x, bias), weight_state(W))


def record_call(call, inputs: tuple, state: tuple, check_inputs: bool = False):
    """(call()'s output(s), a LaunchPlan for later calls or None). `inputs`: the tensors (or
    None) the call's pointers may follow, first a CUDA one; `state`: (id, version) pairs a
    replay must find unchanged; `check_inputs`: a replay also checks the inputs' shapes,
    strides and dtypes (where the caller's own signature does not fix them)."""
    if any(v is None for _, v in state) or not _RECORDING.acquire(blocking=False):
        return call(), None
    try:
        return _record(call, inputs, state, check_inputs)
    finally:
        _RECORDING.release()


def _record(call, inputs, state, check_inputs):
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
    _SCRATCH.marked = marked = []
    try:
        with guard:
            result = call()
    finally:
        JITFunction.run = original
        chain.remove(counted)
        _SCRATCH.marked = None
    plan = None
    if not guard.refused and log and seen[0] == len(log):
        plan = _plan(log, inputs, result, state, check_inputs, marked)
    stats["recorded" if plan is not None else "refused"] += 1
    return result, plan


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _whole(out: torch.Tensor) -> bool:
    """Whether out is all of its storage, from its start (a replay allocates it alike)."""
    span = sum((s - 1) * st for s, st in zip(out.shape, out.stride(), strict=True)) + 1
    return out.storage_offset() == 0 and out.untyped_storage().nbytes() == span * out.itemsize


def _plan(log, inputs, result, state, check_inputs=False, marked=()) -> LaunchPlan | None:
    single = isinstance(result, torch.Tensor)
    outputs = (result,) if single else tuple(result)
    if not all(isinstance(o, torch.Tensor) and _whole(o) and 0 not in o.shape for o in outputs):
        return None
    # Marked scratch another replay can allocate alike (whole, not an input's or an output's
    # memory, once each); any other is held as the launches' buffers are.
    taken = {_storage(t) for t in (*inputs, *outputs) if t is not None}
    scratch = []
    for t in marked:
        if _whole(t) and t.numel() and _storage(t) not in taken:
            taken.add(_storage(t))
            scratch.append(t)
    tensors = [*inputs, *outputs, *scratch]
    bases = {i: (_storage(t), t.data_ptr()) for i, t in enumerate(tensors) if t is not None}
    if len({storage for storage, _ in bases.values()}) != len(bases):
        return None  # inputs and outputs share memory: which one a pointer follows is unclear
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
        state=state,
        input_ptrs=tuple(0 if t is None else t.data_ptr() for t in inputs),
        input_layouts=_layouts(inputs) if check_inputs else None,
        outputs=tuple((tuple(o.shape), o.stride(), o.dtype) for o in outputs),
        scratch=tuple((tuple(t.shape), t.stride(), t.dtype) for t in scratch),
        single=single,
        device=device,
        stream=stream,
        held=list(held.values()),
    )
