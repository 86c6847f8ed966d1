"""SparseWeightModule: a module that owns one sparse weight as a Parameter plus index buffers.

The kept values are an `nn.Parameter` (an optimizer trains only them, the mask stays fixed) and the
indices are buffers, so `state_dict`, safetensors, `model.to(...)` and `.half()` all see plain
tensors. The format object (CSRMatrix / NMMatrix, with what it derives once: row order, transpose)
is rebuilt only when an index buffer changes (moved, loaded, replaced), and validated then.

Buffers and parameter per format:
- "csr": `row_offsets` (out + 1,), `column_indices` (nnz,), `values` (nnz,);
- "nm":  `indices` uint8 (ceil(out / vector), groups * n / block), `values` (out, groups * n).
"""

from __future__ import annotations

import torch
from torch import nn

from .. import _checks
from .._cache_mode import building, fixed_sizes, wrapped
from ..formats import CSRMatrix, NMMatrix
from ..ops import _weight_copies
from ..ops._identity_cache import version
from ..prune.config import resolve
from . import stepped_values
from ._prepared import PreparedFromBuffers

_INDEX_BUFFERS = {"csr": ("row_offsets", "column_indices"), "nm": ("indices",)}
_CSR_BUFFERS = _INDEX_BUFFERS["csr"]
_FORMAT_CODES = {"csr": 0, "nm": 1}


def _describe(layout) -> str:
    """A get_extra_state layout in words."""
    try:
        code, out, inp, n, m, vector, block = (int(v) for v in layout)
    except (TypeError, ValueError):
        return f"malformed ({layout!r})"
    shape = f"{out} x {inp}"
    if code == _FORMAT_CODES["csr"]:
        return f"CSR {shape}"
    extra = "".join(f",{k}={v}" for k, v in (("v", vector), ("b", block)) if v != 1)
    return f"{n}:{m}{extra} {shape}"


class SparseWeightModule(PreparedFromBuffers, nn.Module):
    """Base of the sparse layers: holds the weight (out_features, in_features) and the bias."""

    # which copies of a CSR weight the routes may keep beside it (set_weight_copies)
    weight_copies = "all"

    def _init_sparse_weight(self, weight: CSRMatrix | NMMatrix, bias: torch.Tensor | None) -> None:
        # Normal tensors even under torch.inference_mode (as nn.Linear's): inference tensors
        # cannot be saved for backward, so a layer built there failed in training.
        with torch.inference_mode(False):
            self._hold_weight(weight, bias)
        self._format_cache: tuple | None = None
        # a SparseLinear's call signatures -> their state and what runs again (nn/_repeat_calls.py)
        self._replays: dict = {}
        self._prepare()

    def _hold_weight(self, weight: CSRMatrix | NMMatrix, bias: torch.Tensor | None) -> None:
        if isinstance(weight, CSRMatrix):
            if weight.batch is not None:
                raise ValueError("weight must be a single matrix, not a batch of values")
            self.format = "csr"
            self.n = self.m = None
            self.vector = self.block = 1
            self.register_buffer("row_offsets", weight.row_offsets.detach().clone())
            self.register_buffer("column_indices", weight.column_indices.detach().clone())
        elif isinstance(weight, NMMatrix):
            self.format = "nm"
            self.n, self.m, self.vector, self.block = (
                weight.n,
                weight.m,
                weight.vector,
                weight.block,
            )
            self.register_buffer("indices", weight.indices.detach().clone())
        else:
            raise TypeError(f"weight must be a CSRMatrix or NMMatrix, got {type(weight).__name__}")
        self.out_features, self.in_features = weight.shape
        self.values = nn.Parameter(weight.values.detach().clone())
        if bias is not None:
            _checks.tensor("bias", bias)
            _checks.float_dtype("bias", bias)
            if tuple(bias.shape) != (self.out_features,):
                raise ValueError(
                    f"bias must have shape ({self.out_features},), got {tuple(bias.shape)}"
                )
            if bias.device != weight.device:
                raise ValueError(f"bias must be on the weight's device {weight.device}")
            self.bias = nn.Parameter(bias.detach().clone().to(weight.dtype))
        else:
            self.register_parameter("bias", None)

    def _build(self) -> None:  # (PreparedFromBuffers)
        self.weight  # noqa: B018 (builds and caches the format)

    def _drop(self) -> None:
        self._format_cache = None
        self._replays = {}

    def release_caches(self) -> None:
        """Drop what the ops derived from this weight and keep beside it (a training step's
        transposed pattern and positions, a decode route's copies): the next call rebuilds
        what it needs. sparsekernels.nn.release_caches(model) does every layer."""
        self._prepare()

    def set_weight_copies(self, which: str) -> None:
        """Which copies of a CSR weight the routes may keep beside it: "all" (the default: the
        fastest routes' line layout and tiled copy), "in_place" (line walks reading the values
        in place; at 70% 1.6 bytes a dense element at most, where "all" reaches 3.4 and dense
        holds 2) or "none" (the CSR alone, 1.2; slower at 1-64 tokens). What was kept is
        dropped now (ops/_weight_copies.py). No change for N:M weights: what their routes
        keep (cuSPARSELt's packing, 2:16's copy as 2:8 at 17-32 tokens) is not chosen here."""
        if which not in _weight_copies.CHOICES:
            raise ValueError(f"which must be one of {_weight_copies.CHOICES}, got {which!r}")
        self.weight_copies = which
        self._prepare()  # (drops the copies; the format, built again, carries the choice)

    def _cache_keys(self) -> tuple[torch.Tensor, ...]:
        return self._current_values(), *self._index_buffers()

    def _prepare(self) -> None:
        super()._prepare()
        self._track_values()

    def _track_values(self) -> None:
        values = self._parameters.get("values")
        if values is not None:  # (fused optimizers bump no version)
            stepped_values.track(values)

    def _drop_weak_references(self) -> None:
        super()._drop_weak_references()
        values = self._parameters.get("values")
        if values is not None:
            stepped_values.untrack(values)

    def _current_values(self) -> torch.Tensor:
        """The values Parameter, or what torch.nn.utils.prune set in its place (values_orig
        times values_mask, made again before each forward)."""
        values = self._parameters.get("values")
        return self.values if values is None else values

    def _index_buffers(self) -> tuple[torch.Tensor, ...]:
        return tuple(self._buffers[name] for name in _INDEX_BUFFERS[self.format])

    # ----------------------------------------------------------------- the weight
    @property
    def weight(self) -> CSRMatrix | NMMatrix:
        """The sparse weight (out_features, in_features) whose values are this layer's Parameter.
        Under torch.compile, the format built last (nn/_prepared.py) with these values: an
        in-place edit of an index buffer is seen by eager calls only (then call
        `release_caches()`, or assign new tensors)."""
        if torch.compiler.is_compiling():
            cache = self._format_cache
            values = self._current_values()
            if cache is None:  # (none built: validated here, at the cost of a graph break)
                return self._build_format(self._index_buffers()).with_values(values)
            return cache[1].with_values(values)
        held = self._buffers  # (not getattr: nn.Module's __getattr__ costs a call each)
        buffers = tuple(held[name] for name in _INDEX_BUFFERS[self.format])
        cache = self._format_cache
        # (inference tensors have no version: never fresh, the format is built each time)
        fresh = cache is not None and len(cache[0]) == len(buffers)
        if fresh:
            for b, (kept, kept_version, kept_device) in zip(buffers, cache[0], strict=True):
                if b is not kept or version(b) != kept_version or b.device != kept_device:
                    fresh = False
                    break
        if not fresh:
            _not_vmapped(buffers, _INDEX_BUFFERS[self.format])
            # (its narrowed buffers become this layer's: normal tensors)
            with building(buffers[0]):
                template = self._build_format(buffers)  # validates the structure
            # (the layer's pattern: sizes fixed for torch.compile, and what derives from it)
            fixed_sizes(*_pattern_arrays(template))
            if self.format == "csr":  # one copy of the indices: the format's (narrowest) own
                # (the row order every product reads, built now: filled by a compiled call,
                # the pattern's cache would change under the graph's guards, a recompile)
                template.row_order  # noqa: B018
                buffers = (template.row_offsets, template.column_indices)
                _weight_copies.choose(template.column_indices, self.weight_copies)
                for name, narrow in zip(_CSR_BUFFERS, buffers, strict=True):
                    if held[name] is not narrow:  # (a wider buffer: loaded with assign=True)
                        held[name] = narrow
            key = tuple((b, version(b), b.device) for b in buffers)
            fresh_key = all(v is not None for _, v, _ in key)
            cache = (key if fresh_key else (), template, None, None)
            self._format_cache = cache
        # (the local tuple, not the attribute: another thread may drop it meanwhile)
        cache_key, template, matrix, facts = cache
        # The matrix of the last call while the values are the very same Parameter, alike in
        # shape, dtype and device (`.data` can swap those): ~10-15 us a call saved.
        values = self._current_values()
        now = (values.shape, values.dtype, values.device)
        if matrix is None or matrix.values is not values or facts != now:
            matrix = template.with_values(values)
            if not wrapped(values):  # (a transform's values: kept, they would outlive it)
                self._format_cache = (cache_key, template, matrix, now)
        return matrix

    def _build_format(self, buffers: tuple[torch.Tensor, ...]) -> CSRMatrix | NMMatrix:
        """The format of these buffers, holding one stand-in value (the layer's values are
        paired with it per call): values it held kept their storage alive after a `.data`
        swap (torch.nn.utils.vector_to_parameters, offloading)."""
        shape = (self.out_features, self.in_features)
        held = self._current_values()
        values = held.new_zeros(()).expand(held.shape)
        if self.format == "csr":
            row_offsets, column_indices = buffers
            return CSRMatrix(row_offsets, column_indices, values, shape)
        (indices,) = buffers
        return NMMatrix(values, indices, shape, self.n, self.m, self.vector, self.block)

    @property
    def pattern_name(self) -> str:
        """The sparsity of a CSR weight ("90.0%") or the N:M pattern ("2:8", "2:8,v=64")."""
        if self.format == "csr":
            return f"{1 - self.density:.1%}"
        extra = "".join(f",{k}={v}" for k, v in (("v", self.vector), ("b", self.block)) if v != 1)
        return f"{self.n}:{self.m}{extra}"

    @property
    def density(self) -> float:
        total = self.out_features * self.in_features
        return self.values.numel() / total if total else 0.0

    @property
    def nbytes(self) -> int:
        """Bytes of the sparse weight as the kernels read it (values plus narrowest indices)."""
        return self.weight.nbytes

    @property
    def dense_nbytes(self) -> int:
        """Bytes of the same weight stored densely in the values' dtype."""
        return self.out_features * self.in_features * self.values.element_size()

    def dense_weight(self) -> torch.Tensor:
        """The (out_features, in_features) dense weight; differentiable in the values."""
        return self.weight.to_dense()

    # ----------------------------------------------------------------- state_dict
    def get_extra_state(self) -> torch.Tensor:
        """The weight's format, shape and pattern (state_dict's `_extra_state`), so that a
        checkpoint of another layout raises on load: its tensors alone may fit (2:8 and 4:16
        indices have one shape; a CSR layer of fewer columns loads into a wider one)."""
        return torch.tensor(self._layout(), dtype=torch.int64)

    def set_extra_state(self, state) -> None:
        """Checked in _load_from_state_dict, before anything is loaded."""

    def _layout(self) -> list[int]:
        facts = (self.out_features, self.in_features, self.n or 0, self.m or 0)
        return [_FORMAT_CODES[self.format], *facts, self.vector, self.block]

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
    ):
        errors_before = len(errors)
        key = prefix + "_extra_state"
        incoming = state_dict.get(key)
        if incoming is not None:  # (checkpoints written before it have none: not checked)
            theirs = incoming.tolist() if isinstance(incoming, torch.Tensor) else incoming
            if list(theirs) != self._layout():
                where = f"{prefix.rstrip('.')}: " if prefix else ""
                errors.append(
                    f"{where}a {_describe(theirs)} checkpoint cannot load into a "
                    f"{_describe(self._layout())} layer"
                )
                return
        if self.format == "csr":
            self._take_incoming_nnz(state_dict, prefix)
        self._drop_weak_references()  # (a load may swap the Parameter: swap_tensors)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
        )
        if incoming is None and key in missing_keys:
            missing_keys.remove(key)
        self._name_a_broken_load(prefix, errors, errors_before)
        self._track_values()

    def _take_incoming_nnz(self, state_dict, prefix) -> None:
        """A CSR checkpoint's nnz may differ from this layer's: resize values and column
        indices to it, only when its row offsets fit this layer's rows and its values and
        columns agree (else the default loader reports the mismatch, the layer unchanged)."""
        offsets, values, columns = (
            state_dict.get(prefix + name) for name in ("row_offsets", "values", "column_indices")
        )
        tensors = (offsets, values, columns)
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            return
        if offsets.shape != self.row_offsets.shape or values.dim() != 1 or columns.dim() != 1:
            return
        if values.numel() != columns.numel():
            return
        if values.shape != self.values.shape:
            self.values.data = self.values.new_empty(values.shape)
        if columns.shape != self.column_indices.shape:
            self._buffers["column_indices"] = self.column_indices.new_empty(columns.shape)

    def _filled(self, dense: nn.Module) -> nn.Module:
        """`dense` (an nn.Linear or nn.Conv2d of this shape) given this layer's weight and bias."""
        with torch.no_grad():
            dense.weight.copy_(self.to_dense())
            if self.bias is not None:
                dense.bias.copy_(self.bias)
        return dense

    def _sparse_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"format={self.format}, pattern={self.pattern_name}, bias={self.bias is not None}"
        )


def _pattern_arrays(W: CSRMatrix | NMMatrix) -> tuple[torch.Tensor, ...]:
    return (W.row_offsets, W.column_indices) if isinstance(W, CSRMatrix) else (W.indices,)


def compress_weight(
    weight: torch.Tensor,
    sparsity=None,
    pattern=None,
    vector: int | None = None,
    block: int | None = None,
    format: str | None = None,
    mask: torch.Tensor | None = None,
) -> CSRMatrix | NMMatrix:
    """A 2-D dense weight pruned as `from_dense` asks: by magnitude, or at `mask` when given.

    With only a mask, the kept positions are stored as CSR.
    """
    if mask is not None and sparsity is None and pattern is None:
        if format not in (None, "csr") or vector is not None or block is not None:
            raise ValueError("with only mask=, the weight is stored as CSR; give pattern= for N:M")
        return CSRMatrix.from_dense(weight.detach(), mask=mask)
    config = resolve(sparsity, pattern, vector, block, format)
    if mask is not None:
        _check_mask_fits(config, weight, mask)
    return config.compress(weight, mask)


def _check_mask_fits(config, weight: torch.Tensor, mask: torch.Tensor) -> None:
    """A mask given with sparsity= or pattern= must be what they ask for: an N:M pattern's
    (NMMatrix.from_dense says where it is not, for format="csr" too), or the sparsity's
    count of kept weights, up to a row's or a column's worth (per-row and per-block choices
    round their counts)."""
    _checks.tensor("mask", mask)
    if tuple(mask.shape) != tuple(weight.shape):
        raise ValueError(f"mask must have the weight's shape {tuple(weight.shape)}, "
                         f"got {tuple(mask.shape)}")  # fmt: skip
    if config.structured:
        if config.format == "csr":  # (stored as N:M, compress itself checks it)
            NMMatrix.from_dense(weight.detach(), config.n, config.m, config.vector, config.block,
                                mask=mask)  # fmt: skip
        return
    if config.sparsity is None:  # ("nonzero": the mask says what is kept)
        return
    kept, total = int(mask.bool().sum()), mask.numel()
    wanted = round((1 - config.sparsity) * total)
    if abs(kept - wanted) > max(1, *weight.shape):
        raise ValueError(
            f"mask keeps {kept} of {total} weights ({1 - kept / max(total, 1):.1%} sparse), "
            f"not the {config.sparsity:.1%} that sparsity= asks for: give one of them"
        )


def _not_vmapped(buffers: tuple[torch.Tensor, ...], names: tuple[str, ...]) -> None:
    """vmap over a layer's pattern (torch.func.stack_module_state stacks buffers too) cannot
    work: each member would need its own kernels' structure. Say so, and what does work."""
    for name, buffer in zip(names, buffers, strict=True):
        if torch._C._functorch.is_batchedtensor(buffer):
            raise ValueError(
                f"the layer's pattern buffer {name} is batched by torch.func.vmap: models vmapped "
                "together must share one pattern; pass the first model's buffers unbatched "
                "(in_dims=None for them) and vmap only the stacked values and biases"
            )
