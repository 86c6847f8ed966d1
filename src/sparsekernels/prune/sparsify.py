"""sparsify_: prune a model's nn.Linear and 1x1 nn.Conv2d layers (and Hugging Face's Conv1D, GPT-2's
linears) in place into sparse layers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from .calibrate import Calibration, holding_weight, prune_calibrated
from .config import SparsityConfig
from .hf_conv1d import is_hf_conv1d, linear_shape, linear_twin

FilterFn = Callable[[nn.Module, str], bool]


@dataclass
class SparsifySummary:
    """What sparsify_ did: which layers it swapped, which it skipped and why, and the bytes.

    `weight_bytes_*` count the swapped layers' weights: dense in their dtype before, the sparse
    format as the kernels read it after. `model_bytes_*` count every parameter and buffer as
    stored (a CSR layer's column indices as its CSRMatrix keeps them: int16 up to 32768
    columns).
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
    sequential: bool = False,
) -> SparsifySummary:
    """Replace, in place, every nn.Linear and 1x1 nn.Conv2d of `model` that fits `config` by a
    SparseLinear / SparseConv2d pruned by magnitude, or with `calibration` by Wanda or SparseGPT.
    Hugging Face's Conv1D (GPT-2's linears, weight stored transposed) becomes a SparseLinear.

    config: a SparsityConfig or a shorthand ("2:8", "90%", "0.9", "2:8,v=64", "4:8,v=4,b=4",
    "2:4,method=sparsegpt"). filter_fn(module, fqn) -> bool picks the layers to consider (fqn as
    in named_modules).
    calibration(model): runs the model on calibration data, e.g. `lambda m: m(**batch)`; needed
    by methods "wanda" and "sparsegpt", and a config that names no method then means "wanda".
    sparsify_ hooks the layers it will swap and calls it under torch.no_grad to collect each
    layer's inputs over all tokens (pixels for a convolution): Wanda sums their squares per
    input feature and keeps the largest |W| * input norm per output row or N:M group
    (wanda_mask); SparseGPT sums X^T X and prunes with sparsegpt_prune, its mask's kept
    weights solved exactly to make up for the pruned ones (refit_kept: a Cholesky solve per
    output row, about rows x k^3 / 3 multiply-adds for k kept inputs a row, ~4e13 for a 14336 x
    4096 layer at 2:4, so prune LLM-sized models on a GPU). The summary's config names the
    method used.
    sequential=True collects each layer's inputs after the layers before it are pruned (one
    calibration pass per stage of layers fed the same input; a BERT layer takes four), as the
    SparseGPT paper does block by block, and with SparseGPT fits each later stage to the dense
    model's outputs (dense_output_target: a pass over the dense model first records the
    stage's inputs, so calibration must run the same batches in the same order every time);
    on the demo's MiniLM that lifted the mean cosine 50% 0.950 -> 0.957 and 2:4 0.910 -> 0.920
    at twice one pass's time. By default one pass over the dense model serves every layer; it
    holds every layer's X^T X (in_features^2 floats) at once, a sequential stage only its own
    layers' and, with SparseGPT, its calibration inputs. Run calibration in the mode you want the
    statistics from (eval() switches dropout off); padding tokens count as tokens; if
    calibration fails, nothing is swapped and the model's weights are as they were.
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
        if config.method == "nonzero":
            raise ValueError("method 'nonzero' keeps the nonzeros as they are: no calibration")
        if config.method == "magnitude":
            config = replace(config, method="wanda")
    elif config.needs_calibration:
        raise ValueError(
            f"{config.label} prunes by {config.method}, which needs calibration=, e.g. "
            "lambda m: m(**batch) on a few calibration sentences"
        )
    if not isinstance(sequential, bool):
        raise TypeError(f"sequential must be a bool, got {sequential!r}")
    if sequential and calibration is None:
        raise ValueError("sequential=True applies to calibrated pruning: give calibration= too")
    summary = SparsifySummary(config, model_bytes_before=_model_bytes(model))
    owners = _parameter_owners(model)

    def reason_to_skip(module: nn.Module, fqn: str, parent: nn.Module | None) -> str | None:
        if parent is None:
            return "the root module cannot be replaced in place (wrap it in a container)"
        if isinstance(parent, nn.MultiheadAttention):
            return "inside nn.MultiheadAttention, which reads the weight directly"
        if isinstance(parent, nn.TransformerEncoderLayer):
            return "inside nn.TransformerEncoderLayer, whose fast path reads the weight directly"
        if type(module) not in (nn.Linear, nn.Conv2d) and not is_hf_conv1d(module):
            return f"{type(module).__name__} is a subclass of {_base_name(module)}"
        if filter_fn is not None and not filter_fn(module, fqn):
            return "excluded by filter_fn"
        if len(owners.get(id(module.weight), ())) > 1:
            return "weight is tied to another module's parameter"
        if module.bias is not None and len(owners.get(id(module.bias), ())) > 1:
            return "bias is tied to another module's parameter"
        if not module.weight.is_floating_point():
            return f"weight dtype {module.weight.dtype} is not floating point"
        if isinstance(module, nn.Conv2d):
            conv_reason = conv1x1_unsupported_reason(module)
            if conv_reason is not None:
                return conv_reason
            return config.unsupported_reason((module.out_channels, module.in_channels))
        if is_hf_conv1d(module):
            return config.unsupported_reason(linear_shape(module))
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
    _note_what_stays_dense(model, summary.skipped)
    convs = {}  # fqn -> a Conv1D swapped for its linear twin (put back where a failure stops)

    def put_back_conv1ds(entries) -> None:  # (a twin holds its weight transposed: a checkpoint
        for fqn, module in entries:  # of the model would not load into the original)
            if fqn in convs:
                for place in places[id(module)]:
                    _set(place, convs[fqn])

    for i, (fqn, module) in enumerate(plan):
        if is_hf_conv1d(module):
            twin = linear_twin(module)
            convs[fqn] = module
            plan[i] = (fqn, twin)
            places[id(twin)] = places.pop(id(module))
            for place in places[id(twin)]:
                _set(place, twin)
    pruned = {}
    if calibration is not None:
        try:
            pruned = prune_calibrated(model, plan, config, calibration, sequential)
        except BaseException:
            put_back_conv1ds(plan)
            raise
    for done, (fqn, module) in enumerate(plan):
        layer_type = SparseLinear if isinstance(module, nn.Linear) else SparseConv2d
        try:
            with torch.no_grad():
                if fqn in pruned:
                    weight, mask = pruned[fqn]
                    with holding_weight(module, weight):
                        layer = layer_type.from_dense(module, pattern=config, mask=mask)
                else:
                    layer = layer_type.from_dense(module, pattern=config)
        except BaseException:
            put_back_conv1ds(plan[done:])
            raise
        layer.train(module.training)
        if fqn in convs:  # (what densify_ puts back)
            layer.hf_conv1d_type = type(convs[fqn])
        for place in places[id(module)]:
            _set(place, layer)
        summary.swapped.append(fqn)
        summary.weight_bytes_before += layer.dense_nbytes
        summary.weight_bytes_after += layer.nbytes
    summary.model_bytes_after = _model_bytes(model)
    return summary


# Modules whose matrices are not products sparsify_ would make sparse: looked up, normalised.
_NOT_PRODUCTS = (nn.Embedding, nn.EmbeddingBag, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm,
                 nn.modules.batchnorm._BatchNorm)  # fmt: skip


def _note_what_stays_dense(model: nn.Module, skipped: dict[str, str]) -> None:
    """Layers already sparse, and weight matrices held outside nn.Linear / nn.Conv2d (a
    mixture of experts' stacked expert weights, a router's matrix): reported, not swapped,
    so that a summary with nothing skipped means nothing was left dense."""
    from ..nn._weight import SparseWeightModule

    seen: set[int] = set()
    for fqn, module in model.named_modules():
        if isinstance(module, SparseWeightModule):
            skipped[fqn] = f"already sparse ({module.pattern_name})"
            continue
        if _is_candidate(module) or isinstance(module, _NOT_PRODUCTS):
            continue
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen or not p.is_floating_point() or sum(d > 1 for d in p.shape) < 2:
                continue
            seen.add(id(p))
            where = f"{fqn}.{name}" if fqn else name
            skipped[where] = (
                f"a {tuple(p.shape)} parameter of {type(module).__name__}, not an nn.Linear or "
                "1x1 nn.Conv2d: left dense"
            )


def _is_candidate(module: nn.Module) -> bool:
    return isinstance(module, (nn.Linear, nn.Conv2d)) or is_hf_conv1d(module)


def _base_name(module: nn.Module) -> str:
    return "nn.Linear" if isinstance(module, nn.Linear) else "nn.Conv2d"


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
