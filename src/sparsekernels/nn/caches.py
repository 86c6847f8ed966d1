"""release_caches(model): what the ops keep beside a model's sparse weights, dropped; and
set_weight_copies(model, which): which of those copies its CSR weights may keep.

The ops derive things once per weight and keep them while the weight lives: a decode route's
line layout or tiled copy, and after a training step the transposed pattern (dX = W^T dY) and
the kept positions (dW). After fine-tuning, a model served in the same process would go on
holding the training ones: a 50% CSR MLP held 0.76x its dense bytes after inference and 3.4x
after one training step (bench/held.py). distill_ calls this when it is done.
"""

from __future__ import annotations

from torch import nn


def release_caches(model: nn.Module) -> None:
    """Drop what the ops keep for every sparse layer of `model` (SparseLinear, SparseConv2d,
    SparseAttention); the next call rebuilds what it needs."""
    from ._weight import SparseWeightModule
    from .attention import SparseAttention

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    for module in model.modules():
        if isinstance(module, (SparseWeightModule, SparseAttention)):
            module.release_caches()


def set_weight_copies(model: nn.Module, which: str) -> None:
    """Which copies of its CSR weights the routes may keep beside them, for every sparse layer
    of `model`: "all" (the default: the fastest decode and small-batch routes, up to 3.4 bytes
    a dense element at 70% in bf16 where dense holds 2), "in_place" (1.6 at most) or "none"
    (the CSR alone, 1.2; the plain CSR walks and densify at 1-64 tokens). At 70% both run
    5-32% slower than "all" at 1-4 tokens and 1.4-2.8x slower at 8-64 (H100, README). See
    SparseLinear.set_weight_copies."""
    from ..ops._weight_copies import CHOICES
    from ._weight import SparseWeightModule

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if which not in CHOICES:
        raise ValueError(f"which must be one of {CHOICES}, got {which!r}")
    for module in model.modules():
        if isinstance(module, SparseWeightModule):
            module.set_weight_copies(which)
