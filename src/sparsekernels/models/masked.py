"""Masked-dense twins of sparse models: the reference a sparse model must match.

`masked_dense(model)` copies a model and replaces every SparseLinear / SparseConv2d by a dense
layer computing with weight * mask (so training keeps the mask fixed: pruned entries get zero
gradient) and every SparseAttention by scaled_dot_product_attention with the pattern as a
boolean mask. Same arithmetic, dense kernels: what the sparse kernels are checked against.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ..nn import SparseAttention, SparseConv2d, SparseLinear
from ..ops._attention_library import packed_views
from ._chunked_sdpa import sdpa

_ACTIVATIONS = {None: lambda x: x, "relu": F.relu, "gelu": F.gelu}


class MaskedLinear(nn.Module):
    """y = x @ (weight * mask)^T + bias."""

    def __init__(self, layer: SparseLinear):
        super().__init__()
        dense = layer.to_dense().detach()
        self.weight = nn.Parameter(dense.clone())
        self.register_buffer("mask", _kept(layer))
        self.bias = None if layer.bias is None else nn.Parameter(layer.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight * self.mask, self.bias)


class MaskedConv1x1(nn.Module):
    """act(conv1x1(x, weight * mask) + bias), the twin of SparseConv2d (activation included)."""

    def __init__(self, layer: SparseConv2d):
        super().__init__()
        dense = layer.to_dense().detach()
        self.weight = nn.Parameter(dense.clone())
        self.register_buffer("mask", _kept(layer)[:, :, None, None])
        self.bias = None if layer.bias is None else nn.Parameter(layer.bias.detach().clone())
        self.activation = layer.activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ACTIVATIONS[self.activation](F.conv2d(x, self.weight * self.mask, self.bias))


class MaskedAttention(nn.Module):
    """softmax(q k^T * scale, keys outside the pattern masked out) v, with SDPA."""

    def __init__(self, mask: torch.Tensor, scale: float | None = None):
        super().__init__()
        self.register_buffer("mask", mask.bool())
        self.scale = scale

    def forward(self, q: torch.Tensor, k=None, v=None) -> torch.Tensor:
        """As SparseAttention: q, k, v, or packed projections (B, L, 3, H, D) alone."""
        q, k, v = packed_views(q) if k is None and v is None else (q, k, v)
        return sdpa(q, k, v, mask=self.mask, scale=self.scale)  # query blocks in float64


def _kept(layer: SparseLinear | SparseConv2d) -> torch.Tensor:
    """The layer's kept positions (stored entries, zeros included) as an (out, in) bool mask."""
    W = layer.weight
    ones = W.with_values(torch.ones_like(layer.values.detach()))
    return ones.to_dense() != 0


def attention_mask(layer: SparseAttention) -> torch.Tensor:
    """The (L, L) boolean mask of a SparseAttention's pattern."""
    P = layer.pattern
    return P.with_values(torch.ones(P.nnz, device=P.values.device)).to_dense() != 0


def masked_dense(model: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """A copy of `model` with every sparse layer replaced by its masked-dense twin (in `dtype`)."""
    twin = copy.deepcopy(model)
    _replace(twin)
    return twin.to(dtype) if dtype is not None else twin


def _replace(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, SparseLinear):
            setattr(module, name, MaskedLinear(child))
        elif isinstance(child, SparseConv2d):
            setattr(module, name, MaskedConv1x1(child))
        elif isinstance(child, SparseAttention):
            setattr(module, name, MaskedAttention(attention_mask(child), child.scale))
        else:
            _replace(child)
