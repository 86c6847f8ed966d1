"""densify_: sparsify_'s inverse. Every sparse layer back to the dense layer it replaced, its
weight holding zeros where entries were pruned: a checkpoint that any tool reads (Hugging
Face's `save_pretrained`, whose sparse layers' tensors a plain model would not load), or a
model to train densely again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

FilterFn = Callable[[nn.Module, str], bool]


@dataclass
class DensifySummary:
    """What densify_ did: the layers it swapped back and those it left sparse, with why."""

    swapped: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"densify_: swapped {len(self.swapped)} layer(s), skipped {len(self.skipped)}"]
        lines += [f"  skipped {name}: {reason}" for name, reason in self.skipped.items()]
        return "\n".join(lines)


def densify_(model: nn.Module, filter_fn: FilterFn | None = None) -> DensifySummary:
    """Replace, in place, every SparseLinear by an nn.Linear (by a Hugging Face Conv1D where
    sparsify_ swapped one: GPT-2's layout) and every SparseConv2d by a 1x1 nn.Conv2d, with the
    same pruned weight stored densely, bias, device, dtype, training mode and requires_grad.
    filter_fn(module, fqn) -> bool picks the layers (fqn as in named_modules). A layer
    reachable under several names becomes one dense layer under all of them.

    Left sparse, with the reason in the summary: a SparseConv2d with a fused activation (a
    plain nn.Conv2d would drop it: use `layer.to_conv()` and add the activation), layers
    filter_fn rejects, and the root module (wrap it in a container).

    Example:
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        >>> _ = sk.sparsify_(model, "2:8")
        >>> print(sk.densify_(model).swapped, type(model[0]).__name__)
        ['0', '2'] Linear
    """
    from ..nn import SparseConv2d, SparseLinear

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if filter_fn is not None and not callable(filter_fn):
        raise TypeError(f"filter_fn must be callable (module, fqn) -> bool, got {filter_fn!r}")
    summary = DensifySummary()
    sparse = (SparseLinear, SparseConv2d)
    if isinstance(model, sparse):
        summary.skipped[""] = "the root module cannot be replaced in place (wrap it in a container)"
        return summary
    dense_of: dict[int, nn.Module | None] = {}  # id(sparse layer) -> its dense layer (None: kept)
    for parent_name, parent in list(model.named_modules(remove_duplicate=False)):
        for child_name, child in list(parent._modules.items()):
            if not isinstance(child, sparse):
                continue
            if id(child) not in dense_of:
                fqn = f"{parent_name}.{child_name}" if parent_name else child_name
                reason = _reason_to_keep(child, fqn, filter_fn)
                if reason is not None:
                    summary.skipped[fqn] = reason
                    dense_of[id(child)] = None
                    continue
                dense_of[id(child)] = _dense_layer(child)
                summary.swapped.append(fqn)
            dense = dense_of[id(child)]
            if dense is not None:
                setattr(parent, child_name, dense)
    return summary


def _reason_to_keep(layer: nn.Module, fqn: str, filter_fn: FilterFn | None) -> str | None:
    from ..nn import SparseConv2d

    if filter_fn is not None and not filter_fn(layer, fqn):
        return "excluded by filter_fn"
    if isinstance(layer, SparseConv2d) and layer.activation is not None:
        return (
            f"fuses a {layer.activation} an nn.Conv2d would drop (use layer.to_conv() and add "
            "the activation)"
        )
    return None


def _dense_layer(layer: nn.Module) -> nn.Module:
    from ..nn import SparseConv2d

    if isinstance(layer, SparseConv2d):
        dense = layer.to_conv()
    elif getattr(layer, "hf_conv1d_type", None) is not None:
        dense = _conv1d(layer)
    else:
        dense = layer.to_linear()
    dense.weight.requires_grad_(layer.values.requires_grad)
    if layer.bias is not None:
        dense.bias.requires_grad_(layer.bias.requires_grad)
    return dense.train(layer.training)


def _conv1d(layer: nn.Module) -> nn.Module:
    """The Hugging Face Conv1D sparsify_ replaced: weight (in_features, out_features)."""
    conv = layer.hf_conv1d_type(layer.out_features, layer.in_features)
    conv = conv.to(device=layer.values.device, dtype=layer.values.dtype)
    with torch.no_grad():
        conv.weight.copy_(layer.to_dense().t())
        if layer.bias is not None:
            conv.bias.copy_(layer.bias)
        else:  # (Conv1D always adds one)
            conv.bias.zero_()
    return conv
