"""Calibrated pruning for sparsify_: run calibration data through the model, collect each layer's
input statistics with forward pre-hooks, and prune by Wanda (per-feature input norms) or
SparseGPT (the inputs' Gram matrix X^T X).

In one pass (sequential=False) every layer's statistics come from the dense model. Sequentially,
layers are pruned in stages, in the order the forward pass reaches them: each stage's statistics
come from a fresh calibration pass through the model whose earlier stages are already pruned
(their pruned weights stand in for the dense ones during the pass), so every layer learns to make
up for the errors before it, as SparseGPT does transformer block by block. A stage is the first
not-yet-pruned layer the pass reaches plus every other one fed the very same input tensor (a
transformer's query, key and value): a BERT layer takes four passes. This needs nothing but
forward pre-hooks, so it works on any module; the model's own weights are restored afterwards
(sparsify_ builds the sparse layers from the pruned weights returned here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ..ops._identity_cache import version
from .config import SparsityConfig

Calibration = Callable[[nn.Module], object]
Plan = list[tuple[str, nn.Module]]


def prune_calibrated(
    model: nn.Module,
    plan: Plan,
    config: SparsityConfig,
    calibration: Calibration,
    sequential: bool,
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """fqn -> (pruned weight in the module's weight shape and dtype, mask as (out, in)) for
    every layer of `plan`, pruned by config.method ("wanda" or "sparsegpt") from statistics of
    the inputs `calibration(model)` runs through it (see the module docstring)."""
    pending = list(plan)
    pruned: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    first = True
    with _restoring_weights([module for _, module in plan]):
        while pending:
            stats = _collect(model, pending, calibration, config.method, sequential, first)
            first = False
            for fqn, module in pending:
                if fqn not in stats:
                    continue
                shape = module.weight.shape
                weight = module.weight.detach().reshape(shape[0], shape[1:].numel())
                if config.method == "sparsegpt":
                    weight, mask = config.prune(weight, hessian=stats[fqn].to(weight.device))
                else:  # (norms in float32, or float64 for a float64 weight: masks exact there)
                    dtype = torch.promote_types(weight.dtype, torch.float32)
                    norm = stats[fqn].sqrt().to(device=weight.device, dtype=dtype)
                    weight, mask = config.prune(weight, input_norm=norm)
                weight = weight.reshape(module.weight.shape)
                pruned[fqn] = weight, mask
                if sequential:  # later passes see this layer pruned
                    _set_weight(module, weight)
            pending = [(fqn, module) for fqn, module in pending if fqn not in stats]
    return pruned


def _collect(
    model: nn.Module,
    pending: Plan,
    calibration: Calibration,
    method: str,
    sequential: bool,
    check_reach: bool,
) -> dict[str, torch.Tensor]:
    """One calibration pass: fqn -> statistics (see _statistic) of the layers in this pass's
    stage (all of `pending` when not sequential). With check_reach, every pending layer must see
    some input."""
    stats: dict[str, torch.Tensor] = {}
    tokens: dict[str, int] = {}
    in_stage: dict[str, bool] = {}
    anchor: list[torch.Tensor] = []  # the stage's input: the first one any pending layer gets
    # the latest input, its version and its statistic (query, key and value share one input;
    # the version tells an input refilled in place since, which must be read again)
    last: list = [None, None, None]

    def hook_for(fqn: str, module: nn.Module):
        features = module.weight.shape[1]
        conv = isinstance(module, nn.Conv2d)

        def hook(_module, args, kwargs):
            x = args[0] if args else kwargs.get("input")
            if not isinstance(x, torch.Tensor):
                raise TypeError(
                    f"{fqn} was called without an input tensor (positional or input=) during "
                    "calibration"
                )
            tokens[fqn] = tokens.get(fqn, 0) + (x.numel() // features if features else 1)
            if fqn not in in_stage:
                if not anchor:
                    anchor.append(x)
                in_stage[fqn] = not sequential or x is anchor[0]
            if not in_stage[fqn]:
                return
            seen = version(x)
            if last[0] is x and seen is not None and last[1] == seen:
                stat = last[2]
            else:
                stat = _statistic(x.detach(), features, conv, method)
                last[:] = x, seen, stat
            if fqn in stats:
                stats[fqn].add_(stat)
            else:
                stats[fqn] = stat.clone()

        return hook

    handles = [
        m.register_forward_pre_hook(hook_for(fqn, m), with_kwargs=True) for fqn, m in pending
    ]
    try:
        with torch.no_grad():
            calibration(model)
    finally:
        for handle in handles:
            handle.remove()
        anchor.clear()
        last.clear()
    stage = [fqn for fqn, _ in pending if in_stage.get(fqn)]
    missed = [fqn for fqn, _ in pending if (fqn in stage or check_reach) and not tokens.get(fqn)]
    if missed or not stage:
        missed = missed or [fqn for fqn, _ in pending]
        shown = ", ".join(missed[:5]) + (f" and {len(missed) - 5} more" if len(missed) > 5 else "")
        raise ValueError(
            f"calibration ran no tokens through {shown}; run the model on calibration data "
            "that reaches every layer to prune (or leave them out with filter_fn)"
        )
    return stats


def _statistic(x: torch.Tensor, features: int, conv: bool, method: str) -> torch.Tensor:
    """One call's input statistic: X^T X for SparseGPT (float32, float64 for float64 inputs),
    per-feature sums of squares in float64 for Wanda."""
    x = x.movedim(-3, -1) if conv else x  # channels last: every pixel is a token
    x = x.reshape(-1, features) if features else x.new_zeros((0, 0))  # (no input features)
    if method == "sparsegpt":
        x = x.to(torch.promote_types(x.dtype, torch.float32))
        return x.t() @ x
    return x.double().square().sum(0)


def _set_weight(module: nn.Module, weight: torch.Tensor) -> None:
    old = module.weight
    module._parameters["weight"] = nn.Parameter(weight, requires_grad=old.requires_grad)


@contextmanager
def _restoring_weights(modules: list[nn.Module]) -> Iterator[None]:
    """Put every module's own weight Parameter back on the way out, whatever happened."""
    originals = [(module, module._parameters["weight"]) for module in modules]
    try:
        yield
    finally:
        for module, weight in originals:
            module._parameters["weight"] = weight


@contextmanager
def holding_weight(module: nn.Module, weight: torch.Tensor) -> Iterator[nn.Module]:
    """The module with `weight` in place of its own for the duration (to build a sparse layer
    from a pruned weight with from_dense)."""
    with _restoring_weights([module]):
        _set_weight(module, weight)
        yield module
