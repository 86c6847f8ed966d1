"""release_caches(model): what the ops keep beside a model's sparse weights, dropped.

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
