"""sparsify_: prune a model's nn.Linear and 1x1 nn.Conv2d layers in place into sparse layers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from .config import SparsityConfig

FilterFn = Callable[[nn.Module, str], bool]
Calibration = Callable[[nn.Module], object]


@dataclass
class SparsifySummary:
    """What sparsify_ did: which layers it swapped, which it skipped and why, and the bytes.

    `weight_bytes_*` count the swapped layers' weights: dense in their dtype before, the sparse
    format as the kernels read it after. `model_bytes_*` count every parameter and buffer as
    stored (a CSR layer keeps int32 column indices there).
    """

    config: SparsityConfig
    swapped: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    weight_bytes_before: int = 0
    weight_bytes_after: int = 0
    model_bytes_before: int = 0
    model_bytes_after: int = 0

    @property
    def weight_ratio(self) -> float:
        """Sparse weight bytes over dense weight bytes of the swapped layers."""
        return (
            self.weight_bytes_after / self.weight_bytes_before if self.weight_bytes_before else 1.0
        )

    def __str__(self) -> str:
        lines = [
            f"sparsify_ {self.config.label}: swapped {len(self.swapped)} layer(s), "
            f"skipped {len(self.skipped)}; weights {self.weight_bytes_before / 1e6:.2f} MB -> "
            f"{self.weight_bytes_after / 1e6:.2f} MB ({self.weight_ratio:.2f}x); model "
            f"{self.model_bytes_before / 1e6:.2f} MB -> {self.model_bytes_after / 1e6:.2f} MB"
        ]
        lines += [f"  skipped {name}: {reason}" for name, reason in self.skipped.items()]
        return "\n".join(lines)


def sparsify_(
    model: nn.Module,
    config: SparsityConfig | str | float,
    filter_fn: FilterFn | None = None,
    calibration: Calibration | None = None,
) -> SparsifySummary:
    """Replace, in place, every nn.Linear and 1x1 nn.Conv2d of `model` that fits `config` by a
    SparseLinear / SparseConv2d pruned by magnitude, or by Wanda when `calibration` is given.

    config: a SparsityConfig or a shorthand ("2:8", "90%", "0.9", "2:8,v=64", "4:8,v=4,b=4").
    filter_fn(module, fqn) -> bool picks the layers to consider (fqn as in named_modules).
    calibration(model): runs the model on calibration data, e.g. `lambda m: m(**batch)`. Then
    sparsify_ hooks the layers it will swap, calls it once under torch.no_grad, sums each layer's
    squared inputs per input feature over all tokens (pixels for a convolution), removes the
    hooks and prunes with wanda_mask (|W| * input norm, per output row or per N:M group); the
    summary's config says method="wanda". A config with method="wanda" needs calibration. All
    layers are pruned one-shot from the dense model's activations (no sequential re-calibration
    after earlier layers are pruned). Run it in the mode you want the statistics from (eval()
    switches dropout off); padding tokens count as tokens.
    Skipped, with the reason recorded in the summary: layers filter_fn rejects, N:M layers whose
    in_features is not a multiple of m, convolutions that are not 1x1 / stride 1 / ungrouped,
    subclasses of nn.Linear / nn.Conv2d (they may read .weight themselves), layers inside
    nn.MultiheadAttention, and weights tied to another module (e.g. an LM head tied to the
    embeddings). A module reachable under several names is replaced everywhere by one layer.

    Example:
        >>> model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
        >>> print(sparsify_(model, "2:8").swapped)
        ['0', '2']
    """
    from ..nn import SparseConv2d, SparseLinear
    from ..nn.conv import conv1x1_unsupported_reason

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    config = SparsityConfig.coerce(config)
    if filter_fn is not None and not callable(filter_fn):
        raise TypeError(f"filter_fn must be callable (module, fqn) -> bool, got {filter_fn!r}")
    if calibration is not None:
        if not callable(calibration):
            raise TypeError(f"calibration must be callable (model) -> Any, got {calibration!r}")
        config = replace(config, method="wanda")
    elif config.method == "wanda":
        raise ValueError(
            f"{config.label} prunes by Wanda, which needs calibration=, e.g. "
            "lambda m: m(**batch) on a few calibration sentences"
        )
    summary = SparsifySummary(config, model_bytes_before=_model_bytes(model))
    owners = _parameter_owners(model)

    def reason_to_skip(module: nn.Module, fqn: str, parent: nn.Module | None) -> str | None:
        if parent is None:
            return "the root module cannot be replaced in place (wrap it in a container)"
        if isinstance(parent, nn.MultiheadAttention):
            return "inside nn.MultiheadAttention, which reads the weight directly"
        if type(module) not in (nn.Linear, nn.Conv2d):
            return f"{type(module).__name__} is a subclass of nn.{_base_name(module)}"
        if filter_fn is not None and not filter_fn(module, fqn):
            return "excluded by filter_fn"
        if len(owners.get(id(module.weight), ())) > 1:
            return "weight is tied to another module's parameter"
        if not module.weight.is_floating_point():
            return f"weight dtype {module.weight.dtype} is not floating point"
        if isinstance(module, nn.Conv2d):
            conv_reason = conv1x1_unsupported_reason(module)
            if conv_reason is not None:
                return conv_reason
            return config.unsupported_reason((module.out_channels, module.in_channels))
        return config.unsupported_reason(tuple(module.weight.shape))

    plan: list[tuple[str, nn.Module]] = []  # the layers to swap, in order
    places: dict[int, list[tuple[nn.Module, str]]] = {}  # every name each is reachable under
    seen: set[int] = set()
    candidates = [(name, m, None) for name, m in [("", model)] if _is_candidate(m)]
    for parent_name, parent in model.named_modules(remove_duplicate=False):
        for child_name, child in parent._modules.items():
            if child is not None and _is_candidate(child):
                fqn = f"{parent_name}.{child_name}" if parent_name else child_name
                candidates.append((fqn, child, (parent, child_name)))
    for fqn, module, place in candidates:
        if id(module) in places:  # the same module under another name
            places[id(module)].append(place)
            continue
        if id(module) in seen:
            continue
        seen.add(id(module))
        reason = reason_to_skip(module, fqn, None if place is None else place[0])
        if reason is not None:
            summary.skipped[fqn] = reason
            continue
        plan.append((fqn, module))
        places[id(module)] = [place]
    norms = _input_norms(model, plan, calibration) if calibration is not None else {}
    for fqn, module in plan:
        layer_type = SparseLinear if isinstance(module, nn.Linear) else SparseConv2d
        weight = module.weight.reshape(module.weight.shape[0], -1)  # a 1x1 conv's as (out, in)
        with torch.no_grad():
            mask = config.mask(weight, norms[fqn]) if calibration is not None else None
            layer = layer_type.from_dense(module, pattern=config, mask=mask)
        layer.train(module.training)
        for place in places[id(module)]:
            _set(place, layer)
        summary.swapped.append(fqn)
        summary.weight_bytes_before += layer.dense_nbytes
        summary.weight_bytes_after += layer.nbytes
    summary.model_bytes_after = _model_bytes(model)
    return summary


def _input_norms(
    model: nn.Module, plan: list[tuple[str, nn.Module]], calibration: Calibration
) -> dict[str, torch.Tensor]:
    """fqn -> the L2 norm of each input feature of that layer over every token `calibration`
    ran through it (float32, on the weight's device)."""
    sums: dict[str, torch.Tensor] = {}
    tokens: dict[str, int] = {}

    def hook_for(fqn: str, module: nn.Module):
        features = module.weight.shape[1]
        conv = isinstance(module, nn.Conv2d)

        def hook(_module, args):
            x = args[0].detach()
            x = x.movedim(-3, -1) if conv else x  # channels last: every pixel is a token
            x = x.reshape(-1, features).double()
            sums[fqn] = sums.get(fqn, 0) + x.square().sum(0)
            tokens[fqn] = tokens.get(fqn, 0) + x.shape[0]

        return hook

    handles = [m.register_forward_pre_hook(hook_for(fqn, m)) for fqn, m in plan]
    try:
        with torch.no_grad():
            calibration(model)
    finally:
        for handle in handles:
            handle.remove()
    missed = [fqn for fqn, _ in plan if not tokens.get(fqn)]
    if missed:
        shown = ", ".join(missed[:5]) + (f" and {len(missed) - 5} more" if len(missed) > 5 else "")
        raise ValueError(
            f"calibration ran no tokens through {shown}; run the model on calibration data "
            "that reaches every layer to prune (or leave them out with filter_fn)"
        )
    return {
        fqn: sums[fqn].sqrt().to(device=m.weight.device, dtype=torch.float32) for fqn, m in plan
    }


def _is_candidate(module: nn.Module) -> bool:
    return isinstance(module, (nn.Linear, nn.Conv2d))


def _base_name(module: nn.Module) -> str:
    return "Linear" if isinstance(module, nn.Linear) else "Conv2d"


def _set(place: tuple[nn.Module, str] | None, layer: nn.Module) -> None:
    parent, name = place
    setattr(parent, name, layer)


def _parameter_owners(model: nn.Module) -> dict[int, set[int]]:
    """id(parameter) -> ids of the distinct modules that hold it directly."""
    owners: dict[int, set[int]] = {}
    for module in model.modules():
        for p in module._parameters.values():
            if p is not None:
                owners.setdefault(id(p), set()).add(id(module))
    return owners


def _model_bytes(model: nn.Module) -> int:
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return sum(t.numel() * t.element_size() for t in tensors.values())
