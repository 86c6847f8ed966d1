"""What is kept across calls: built outside torch.inference_mode, and keyed by `version`.

A tensor made under inference_mode is an inference tensor: autograd cannot save it and it takes
no in-place update outside that mode. So a pattern's row order, transpose or flat positions (or
a layer's narrowed index buffers, or a scratch buffer) built by a first call under
inference_mode, an evaluation pass, and kept would break a later training step on the same
weight ("Inference tensors cannot be saved for backward") or a later call outside the mode.
Cache fills run in `building()`: their tensors are normal ones whatever mode the call came in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch._dynamo  # (mark_static)
from torch._subclasses.fake_tensor import is_fake

from . import _fill_streams

_builds = 0  # cache fills begun (builds()): what a launch with PDL 2 must not follow


class _Fill:
    """A cache fill: out of inference mode (and torch.func's transforms), and marked on its
    stream when done."""

    __slots__ = ("device", "mode", "transforms_off")

    def __init__(self, device: torch.device, mode, transforms_off=None) -> None:
        self.device, self.mode, self.transforms_off = device, mode, transforms_off

    def __enter__(self) -> None:
        if self.mode is not None:
            self.mode.__enter__()
        if self.transforms_off is not None:
            self.transforms_off.__enter__()
        if self.device.type == "cuda":
            _fill_streams.begin()

    def __exit__(self, *failure) -> None:
        try:
            if self.transforms_off is not None:
                self.transforms_off.__exit__(*failure)
            if self.mode is not None:
                self.mode.__exit__(*failure)
        finally:
            if self.device.type == "cuda":
                _fill_streams.end(self.device, failure[0] is None)


def building(like: torch.Tensor) -> contextlib.AbstractContextManager:
    """Around a fill of what is kept for `like` (on its device): inference_mode(False) where
    inference mode is on, and the fill marked on its stream (_fill_streams.py); nothing while
    torch.compile traces, which cannot read the mode. Counts the fill (builds()). A `like`
    that wants a gradient (a weight's values) is tracked by nn/stepped_values.py."""
    if torch.compiler.is_compiling():
        return contextlib.nullcontext()
    global _builds
    _builds += 1
    if like.requires_grad:  # a parameter's values: what is kept must see each optimizer step
        from .nn import stepped_values  # (fused optimizers bump no version)

        stepped_values.track(like)
    mode = torch.inference_mode(False) if torch.is_inference_mode_enabled() else None
    if torch._C._are_functorch_transforms_active() and not wrapped(like):
        # (under them every tensor an op makes is wrapped, with no storage to key a cache by:
        # what is derived from a plain weight is built outside them)
        return _Fill(like.device, mode, torch._C._DisableFuncTorch())
    if mode is None and like.device.type != "cuda":
        return contextlib.nullcontext()
    return _Fill(like.device, mode)


def builds() -> int:
    """How many cache fills have begun: a change tells that kernels writing kept arrays may
    have run since the last look (ops/_weight_pdl.py)."""
    return _builds


def version(tensor: torch.Tensor) -> tuple[int, int] | None:
    """What tells a tensor's contents changed: its version counter (in-place changes bump it)
    and its storage's address (`.data = ...` swaps the storage without a bump, as
    torch.nn.utils.vector_to_parameters does); None for an inference tensor, which has no
    counter, and for a traced one or one torch.func's transforms wrap, which have no storage:
    what is derived from these cannot be kept (reading `_version`, or `data_ptr()`, there
    raises)."""
    if tensor.is_inference() or _fake(tensor):
        return None
    try:
        return tensor._version, tensor.data_ptr()
    except RuntimeError:  # (wrapped by torch.func's transforms, or by a vjp's saved call)
        return None


def untraced_version(tensor: torch.Tensor) -> tuple[int, int] | None:
    """version(tensor), or None while torch.compile traces (Dynamo would trace the reads)."""
    return None if torch.compiler.is_compiling() else version(tensor)


def wrapped(tensor: torch.Tensor) -> bool:
    """Whether torch.func's transforms (grad, vmap, ...) wrap `tensor`: it has no storage."""
    return torch._C._are_functorch_transforms_active() and (
        torch._C._functorch.is_functorch_wrapped_tensor(tensor)
    )


def traced(tensor: torch.Tensor) -> bool:
    """Whether `tensor` only stands for one while torch.compile traces: under dynamo, and
    also in AOT autograd's trace of a backward, where is_compiling() is False but tensors are
    FakeTensors (possibly inside FunctionalTensors) with no data to read."""
    return torch.compiler.is_compiling() or _fake(tensor)


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _fake(tensor: torch.Tensor) -> bool:
    # is_fake costs ~1.3 us a call (version() runs several times a call): others only
    return type(tensor) not in _PLAIN and is_fake(tensor)


_SOURCES_SEEN = "sources seen"  # (a key of the dicts derived_from keeps)


def derived_from(cache: dict, *sources: torch.Tensor) -> dict:
    """`cache`, a dict of what was derived from `sources` (a pattern's index arrays), emptied
    first if any of them changed since (an in-place edit, a `.data` swap: `version`); as kept
    while torch.compile traces (the layers' formats are built before it)."""
    if torch.compiler.is_compiling():
        return cache
    _seen(cache, tuple(version(t) for t in sources))
    return cache


def _seen(cache: dict, now: tuple) -> None:
    if cache.get(_SOURCES_SEEN, now) != now:
        cache.clear()  # (frees what older versions left)
    cache[_SOURCES_SEEN] = now


def fixed_sizes(*values: object) -> None:
    """Mark the tensors of a layer's pattern (tensors, tuples of them, objects holding them)
    static for torch.compile; what is derived from them is marked as it is built. Under
    dynamic=True Dynamo gave such attributes' tensors symbolic sizes, and a first call's token
    count equal to one of them was tied to it (duck sizing): a graph fixed to that count, or a
    recompile at the next one. Only the layers' own patterns, fixed while they live: a user's
    patterns may change size from call to call (one graph for all, not one each)."""
    if torch.compiler.is_compiling():
        return
    for value in values:
        _mark_static(value, depth=2)


def _static(sources: tuple[torch.Tensor, ...]) -> bool:
    return any(hasattr(t, "_dynamo_static_indices") for t in sources)


def _mark_static(value: object, depth: int) -> None:
    if isinstance(value, torch.Tensor):
        torch._dynamo.mark_static(value)
    elif depth and isinstance(value, (tuple, list)):
        for item in value:
            _mark_static(item, depth - 1)
    elif depth and hasattr(value, "__dict__") and not isinstance(value, type):
        for item in vars(value).values():
            if isinstance(item, (torch.Tensor, tuple, list)):
                _mark_static(item, depth - 1)


def derived(cache: dict, key: str, build: Callable[[], object], *sources: torch.Tensor):
    """cache[key] if it was built from the current versions of `sources`, else build() kept
    there. Each entry carries the versions it was built from and the caller gets its own
    value, so a thread editing the sources or emptying the cache meanwhile costs a rebuild,
    never a KeyError or a stale entry kept for good. While torch.compile traces: the entry as
    kept (the layers' formats are built before it), else build() kept nowhere."""
    if torch.compiler.is_compiling():
        hit = cache.get(key)
        return hit[1] if hit is not None else build()
    now = tuple(version(t) for t in sources)
    _seen(cache, now)
    hit = cache.get(key)
    if hit is not None and hit[0] == now:
        return hit[1]
    with building(sources[-1]):  # (normal tensors under inference_mode too)
        value = build()
    if _static(sources):  # (derived from a layer's pattern: fixed as it is)
        fixed_sizes(value)
    cache[key] = (now, value)
    return value


def seed(cache: dict, key: str, value: object, *sources: torch.Tensor) -> None:
    """Keep `value` as cache[key], derived from the current versions of `sources` (what a
    build of another entry found on the way)."""
    if not torch.compiler.is_compiling():
        now = tuple(version(t) for t in sources)
        _seen(cache, now)
        if _static(sources):
            fixed_sizes(value)
        cache[key] = (now, value)
