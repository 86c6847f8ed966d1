"""SparseAttention: softmax(Q K^T) V at a fixed pattern, built once and reused by every call.

Patterns: the Sparse Transformer's local window plus strided positions (`local_strided`),
block-diagonal (`block`), or any CSRMatrix / boolean (L, L) mask a user gives. The pattern's
row offsets and column indices are buffers: they move with `model.to(...)` and are saved in the
state_dict; the CSRMatrix built from them (with its cached row order and transpose) is rebuilt
only when they change.
"""

from __future__ import annotations

import torch
from torch import nn

from .. import _checks
from .._cache_mode import building, fixed_sizes
from ..formats import CSRMatrix
from ..ops import _attention_plans, sparse_attention, sparse_attention_packed
from ..ops._identity_cache import version
from . import _repeat_calls
from ._fx_leaf import traced_call
from ._prepared import PreparedFromBuffers

_ROWS_PER_CHUNK = 512  # rows of the (L, L) boolean mask built at once


class SparseAttention(PreparedFromBuffers, nn.Module):
    """o = softmax(scale * q k^T at the pattern) v for q, k, v of shape (B, H, L, D).

    Example:
        >>> attn = SparseAttention.local_strided(1024, window=64, stride=64)
        >>> q = k = v = torch.randn(1, 4, 1024, 32)
        >>> attn(q, k, v).shape
        torch.Size([1, 4, 1024, 32])
    """

    def __init__(self, pattern: CSRMatrix | torch.Tensor, scale: float | None = None):
        super().__init__()
        if isinstance(pattern, torch.Tensor):
            if pattern.dtype != torch.bool:  # (an additive float mask means the opposite)
                raise TypeError(f"a mask pattern must be torch.bool, got {pattern.dtype}")
            if pattern.dim() != 2:
                raise ValueError(f"a mask pattern must be 2-D (L, L), got {tuple(pattern.shape)}")
            pattern = CSRMatrix.from_dense(pattern.to(torch.float32), mask=pattern.bool())
        if not isinstance(pattern, CSRMatrix):
            raise TypeError(
                f"pattern must be a CSRMatrix or a boolean mask, got {type(pattern).__name__}"
            )
        if pattern.batch is not None:
            raise ValueError("pattern must be a single matrix, not a batch")
        if scale is not None:
            scale = _checks.softmax_scale("scale", scale)
        self.shape = pattern.shape
        self.scale = scale
        self.register_buffer("row_offsets", pattern.row_offsets.clone())
        self.register_buffer("column_indices", pattern.column_indices.clone())
        self._cache: tuple | None = None
        self._replays: dict = {}  # call signatures -> state, what runs again (nn/_repeat_calls.py)
        self._prepare()

    _FORMAT_ATTRIBUTE = "_cache"  # (PreparedFromBuffers)

    def _build(self) -> None:  # (PreparedFromBuffers)
        # (and the row order the composed ops read: filled by a first eager call after a
        # compiled one, it changed the pattern's cache under the graph's guards)
        self.pattern.pattern.row_order()

    def _drop(self) -> None:
        self._cache = None
        self._replays = {}

    def _index_buffers(self) -> tuple[torch.Tensor, ...]:
        return self.row_offsets, self.column_indices

    def release_caches(self) -> None:
        """Drop what the ops derived from the pattern (its transpose, plans): rebuilt when
        needed."""
        self._prepare()

    # ----------------------------------------------------------------- pattern builders
    @classmethod
    def local_strided(
        cls,
        seq_len: int,
        window: int,
        stride: int,
        causal: bool = True,
        scale: float | None = None,
        device=None,
    ) -> SparseAttention:
        """The Sparse Transformer's strided pattern: query i sees keys j with |i - j| < window
        and keys with (i - j) % stride == 0; with `causal`, only j <= i."""
        seq_len, window, stride = _positive(seq_len=seq_len, window=window, stride=stride)
        _flag("causal", causal)

        def rows(i, j):
            near = (i - j).abs() < window
            strided = (i - j) % stride == 0
            keep = near | strided
            return keep & (j <= i) if causal else keep

        return cls(_pattern_from_rule(seq_len, rows, device), scale)

    @classmethod
    def block(
        cls,
        seq_len: int,
        block: int,
        causal: bool = False,
        scale: float | None = None,
        device=None,
    ) -> SparseAttention:
        """Block-diagonal: query i sees the keys of its own block of `block` positions."""
        seq_len, block = _positive(seq_len=seq_len, block=block)
        _flag("causal", causal)

        def rows(i, j):
            keep = (i // block) == (j // block)
            return keep & (j <= i) if causal else keep

        return cls(_pattern_from_rule(seq_len, rows, device), scale)

    # ----------------------------------------------------------------- use
    @property
    def pattern(self) -> CSRMatrix:
        """The pattern as a CSRMatrix (values unused), built once per index buffers; under
        torch.compile, the one built last (nn/_prepared.py)."""
        if torch.compiler.is_compiling() and self._cache is not None:
            return self._cache[1]
        key = tuple((b, version(b), b.device) for b in (self.row_offsets, self.column_indices))
        cache = self._cache
        # (inference tensors have no version: never fresh, the pattern is built each time)
        fresh = (
            cache is not None
            and all(v is not None for _, v, _ in key)
            and all(
                a is b and va == vb and da == db
                for (a, va, da), (b, vb, db) in zip(cache[0], key, strict=True)
            )
        )
        if not fresh:
            nnz = self.column_indices.numel()
            # (its narrowed buffers become this module's: normal tensors)
            with building(self.column_indices):
                values = torch.ones(1, device=self.column_indices.device).expand(nnz)
                matrix = CSRMatrix(self.row_offsets, self.column_indices, values, self.shape)
            fixed_sizes(matrix.row_offsets, matrix.column_indices)  # (for torch.compile)
            narrow = {"row_offsets": matrix.row_offsets, "column_indices": matrix.column_indices}
            for name, tensor in narrow.items():  # one copy of the indices: the pattern's
                if self._buffers[name] is not tensor:  # (a wider buffer: loaded with assign=True)
                    self._buffers[name] = tensor
            key = tuple((b, version(b), b.device) for b in narrow.values())
            cache = (key, matrix)
            self._cache = cache  # (returned from the local: another thread may drop it)
        return cache[1]

    @property
    def density(self) -> float:
        rows, cols = self.shape
        return self.column_indices.numel() / (rows * cols) if rows * cols else 0.0

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
    ):
        # Another pattern of the same shape may hold another nnz: take the incoming size.
        incoming = state_dict.get(prefix + "column_indices")
        held, offsets = self._buffers["column_indices"], self._buffers["row_offsets"].clone()
        if isinstance(incoming, torch.Tensor) and incoming.dim() == 1:
            self._buffers["column_indices"] = held.new_empty(incoming.shape)
        errors_before = len(errors)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
        )
        if len(errors) > errors_before:  # refused (another length): the module stays as it was
            self._buffers["column_indices"] = held
            self._buffers["row_offsets"].copy_(offsets)  # (copied in if only it fitted)
        self._name_a_broken_load(prefix, errors, errors_before)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor | None = None, v: torch.Tensor | None = None
    ) -> torch.Tensor:
        """attn(q, k, v), or attn(qkv) on packed projections (B, L, 3, H, D): see
        sparse_attention_packed (in training, no stack or copy of q's, k's, v's gradients)."""
        if (k is None) != (v is None):
            raise TypeError("pass q, k and v, or packed qkv alone")
        args = (q,) if k is None else (q, k, v)
        traced = traced_call(self, *args)  # (torch.fx records the layer whole)
        if traced is not None:
            return traced
        if k is None:  # (a repeat call on packed qkv: its plan at once, nn/_repeat_calls.py)
            call_key = _repeat_calls.attention_key(self, q)
            out = _repeat_calls.replay(self, call_key, q)
            if out is not None:
                return out
            pattern, scale = self.pattern, self.scale
            out = sparse_attention_packed(q, pattern, scale)
            _repeat_calls.remember(
                self, call_key, lambda: _attention_plans.replayer(q, pattern, scale)
            )
            return out
        return sparse_attention(q, k, v, self.pattern, self.scale)

    def extra_repr(self) -> str:
        scale = "" if self.scale is None else f", scale={self.scale}"
        return (
            f"shape={self.shape}, nnz={self.column_indices.numel()}, "
            f"density={self.density:.4f}{scale}"
        )


def _flag(name: str, value: object) -> None:
    """A bool: any other truthy value ("no") would have been taken as True."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")


def _positive(**values: int) -> tuple[int, ...]:
    """The values as Python ints (NumPy integers converted), each checked to be >= 1."""
    for name, value in values.items():
        if not _checks.is_int(value) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return tuple(int(value) for value in values.values())


def _pattern_from_rule(seq_len: int, rule, device) -> CSRMatrix:
    """A CSR pattern (seq_len, seq_len) from rule(i, j) -> bool, built a chunk of rows at a time."""
    if device is not None:
        device = _checks.device("device", device)
    cols = torch.arange(seq_len, device=device)
    counts, columns = [], []
    for start in range(0, seq_len, _ROWS_PER_CHUNK):
        i = torch.arange(start, min(seq_len, start + _ROWS_PER_CHUNK), device=device)
        keep = rule(i[:, None], cols[None, :])
        counts.append(keep.sum(1))
        columns.append(keep.nonzero()[:, 1])
    offsets = torch.zeros(seq_len + 1, dtype=torch.int64, device=device)
    offsets[1:] = torch.cat(counts).cumsum(0)
    column_indices = torch.cat(columns)
    values = torch.ones(1, device=device).expand(column_indices.numel())
    return CSRMatrix(offsets, column_indices, values, (seq_len, seq_len), check=False)
