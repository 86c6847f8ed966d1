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

Sequential SparseGPT fits each later stage to the dense model's outputs, not to its own dense
weight on the drifted inputs (prune/dense_target.py): before the stage's pass over the partly
pruned model, a pass over the dense one records the stage's inputs, call by call, and the
second pass sums X_s^T X_d beside X_s^T X_s by pairing its calls with them. That holds one
stage's calibration inputs (tokens x in_features) at a time, and needs `calibration` to run the
same batches in the same order on every pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ..ops._identity_cache import version
from . import dense_target
from .config import SparsityConfig
from .dense_target import TARGET_DAMP

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
    dense_weights = {fqn: module._parameters["weight"] for fqn, module in plan}
    fit_dense = sequential and config.method == "sparsegpt"
    first = True
    with _restoring_weights([module for _, module in plan]):
        while pending:
            dense_inputs = None
            if fit_dense and pruned:  # (before any is pruned, the inputs are the dense ones)
                done = [module for fqn, module in plan if fqn in pruned]
                with _restoring_weights(done):
                    for fqn, module in plan:
                        if fqn in pruned:
                            module._parameters["weight"] = dense_weights[fqn]
                    dense_inputs = _collect(model, pending, calibration, "record", True, False)
            stats = _collect(
                model, pending, calibration, config.method, sequential, first, dense_inputs
            )
            first = False
            for fqn, module in pending:
                if fqn not in stats:
                    continue
                shape = module.weight.shape
                weight = module.weight.detach().reshape(shape[0], shape[1:].numel())
                if config.method == "sparsegpt":
                    hessian, *cross = (part.to(weight.device) for part in stats[fqn])
                    if cross:  # fit the dense model's outputs (see the module docstring)
                        weight = dense_target.target(weight, hessian, cross[0], TARGET_DAMP)
                    weight, mask = config.prune(weight, hessian=hessian)
                else:  # (norms in float32, or float64 for a float64 weight: masks exact there)
                    dtype = torch.promote_types(weight.dtype, torch.float32)
                    norm = stats[fqn][0].sqrt().to(device=weight.device, dtype=dtype)
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
    dense_inputs: dict[str, list[torch.Tensor]] | None = None,
) -> dict:
    """One calibration pass: fqn -> statistics of the layers in this pass's stage (all of
    `pending` when not sequential). With check_reach, every pending layer must see some input.
    By method: "wanda" [the inputs' per-feature sums of squares]; "sparsegpt" [X^T X], or
    [X^T X, X^T X_d] with X_d the `dense_inputs` recorded for the same calls; "record" the
    list of each call's inputs as (tokens, in_features)."""
    stats: dict = {}
    calls: dict[str, int] = {}
    tokens: dict[str, int] = {}
    in_stage: dict[str, bool] = {}
    anchor: list[torch.Tensor] = []  # the stage's input: the first one any pending layer gets
    # the latest input, its version, the call it was and its statistic (query, key and value
    # share one input; the version tells an input refilled in place since, read again then)
    last: list = [None, None, None, None]

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
            call = calls.get(fqn, 0)
            calls[fqn] = call + 1
            seen = version(x)
            if last[0] is x and seen is not None and last[1] == seen and last[2] == call:
                stat = last[3]
            else:
                rows = _token_rows(x.detach(), features, conv)
                paired = None if dense_inputs is None else _paired(dense_inputs, fqn, call, rows)
                stat = _statistic(rows, method, paired)
                last[:] = x, seen, call, stat
            if method == "record":
                stats.setdefault(fqn, []).append(stat)
            elif fqn in stats:
                for total, part in zip(stats[fqn], stat, strict=True):
                    total.add_(part)
            else:
                stats[fqn] = [part.clone() for part in stat]

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
    if dense_inputs is not None:
        for fqn in dict.fromkeys([*stage, *dense_inputs]):
            if calls.get(fqn, 0) != len(dense_inputs.get(fqn, ())):
                raise _unpaired(fqn, "a different number of calls")
    return stats


def _paired(dense_inputs: dict, fqn: str, call: int, rows: torch.Tensor) -> torch.Tensor:
    """The dense model's inputs to the same call of `fqn` as `rows`."""
    recorded = dense_inputs.get(fqn, ())
    if call >= len(recorded):
        raise _unpaired(fqn, "more calls")
    if recorded[call].shape != rows.shape:
        raise _unpaired(
            fqn, f"{tuple(rows.shape)} inputs where it had {tuple(recorded[call].shape)}"
        )
    return recorded[call]


def _unpaired(fqn: str, what: str) -> ValueError:
    return ValueError(
        f"calibration gave {fqn} {what} over the partly pruned model than over the dense one: "
        "sequential SparseGPT pairs every call's inputs with the dense model's, so calibration "
        "must run the same batches in the same order on every pass"
    )


def _token_rows(x: torch.Tensor, features: int, conv: bool) -> torch.Tensor:
    """A layer's input as (tokens, features): every pixel of a convolution's is a token."""
    x = x.movedim(-3, -1) if conv else x  # channels last
    return x.reshape(-1, features) if features else x.new_zeros((0, 0))  # (no input features)


def _statistic(rows: torch.Tensor, method: str, paired: torch.Tensor | None):
    """One call's statistic (see _collect): SparseGPT's in float32 (float64 for float64
    inputs), Wanda's sums of squares in float64; a recorded input is a copy in its dtype."""
    if method == "record":
        return rows.clone()
    if method == "sparsegpt":
        rows = rows.to(torch.promote_types(rows.dtype, torch.float32))
        gram = rows.t() @ rows
        return [gram] if paired is None else [gram, rows.t() @ paired.to(rows.dtype)]
    return [rows.double().square().sum(0)]


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
