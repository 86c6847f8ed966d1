"""linear, spmm and sddmm under torch.autocast, as F.linear and matmul are: their float32,
float16 and bfloat16 operands cast to the autocast dtype of the inputs' device type, then run with
autocast off (a backend's own torch ops must not cast again: torch's CPU CSR matmul has no
bfloat16). float64 is left alone, as autocast does.

A weight whose values want no gradient keeps its cast copy (per values tensor, version and
dtype): a fresh copy every call would rebuild what the ops keep per weight (the scatter
kernel's copy of a CSR weight, linear's eager plans). Values that want one are cast each call,
so the gradient reaches them."""

from __future__ import annotations

import contextlib
import functools
import weakref

import torch

from .._cache_mode import building
from ..formats import CSRMatrix, NMMatrix
from ._identity_cache import IdentityCache, version

_CASTABLE = (torch.float32, torch.float16, torch.bfloat16)
_AUTOCAST_DEVICES = ("cpu", "cuda", "xpu", "mps", "hpu")  # (others, meta among them, have none)
# W's values -> (version, dtype, weak refs to W's pattern, its versions, W with its values
# cast); the entry holds no reference to the values (IdentityCache's rule)
_CAST = IdentityCache()


def backward_without_autocast(backward):
    """A custom op's backward run with autocast off, as its forward ran (target's callers):
    `loss.backward()` inside an autocast block, which torch allows, cast the backward's own
    torch ops again (torch's CPU CSR matmul has no bfloat16: it raised; a dense product
    would round silently)."""

    @functools.wraps(backward)
    def run(ctx, *grads):
        kinds = [k for k in _AUTOCAST_DEVICES if torch.is_autocast_enabled(k)]
        if not kinds:
            return backward(ctx, *grads)
        with contextlib.ExitStack() as stack:
            for kind in kinds:
                stack.enter_context(torch.autocast(kind, enabled=False))
            return backward(ctx, *grads)

    return run


def target(t) -> torch.dtype | None:
    """The dtype autocast asks of an op on `t`'s device type, else None (off, or not a tensor:
    the op's checks name it)."""
    if not isinstance(t, torch.Tensor):
        return None
    kind = t.device.type
    if kind not in _AUTOCAST_DEVICES or not torch.is_autocast_enabled(kind):
        return None
    return torch.get_autocast_dtype(kind)


def cast(t: torch.Tensor | None, dtype: torch.dtype):
    """t in `dtype` when autocast would cast it (a float32 / 16-bit tensor), else t."""
    if isinstance(t, torch.Tensor) and t.dtype in _CASTABLE and t.dtype != dtype:
        return t.to(dtype)
    return t


def cast_weight(W, dtype: torch.dtype):
    """W with its values in `dtype` where autocast would cast them; kept while they last."""
    if not isinstance(W, (CSRMatrix, NMMatrix)):
        return W  # (the op's checks name it)
    values = W.values
    if values.dtype not in _CASTABLE or values.dtype == dtype:
        return W
    wants_grad = torch.is_grad_enabled() and values.requires_grad
    if wants_grad or torch.compiler.is_compiling():  # (first: version() is not traceable)
        return W.with_values(values.to(dtype))
    seen = version(values)
    if seen is None:  # (an inference tensor: its edits could not be seen)
        return W.with_values(values.to(dtype))
    pattern = _pattern(W)
    pattern_seen = tuple(version(t) for t in pattern)  # (an in-place edit of the pattern too)
    hit = _CAST.get(values)
    if (
        hit is None
        or hit[:2] != (seen, dtype)
        or not _same(hit[2], pattern)
        or hit[3] != pattern_seen
        or None in pattern_seen
    ):
        with building(values):
            cast_W = W.with_values(values.to(dtype))
        hit = (seen, dtype, tuple(weakref.ref(t) for t in pattern), pattern_seen, cast_W)
        _CAST[values] = hit
    return hit[4]


def _pattern(W) -> tuple:
    """The tensors that hold W's pattern (another pattern with the same values: another copy)."""
    return (W.row_offsets, W.column_indices) if isinstance(W, CSRMatrix) else (W.indices,)


def _same(refs: tuple, pattern: tuple) -> bool:
    return len(refs) == len(pattern) and all(r() is t for r, t in zip(refs, pattern, strict=True))
