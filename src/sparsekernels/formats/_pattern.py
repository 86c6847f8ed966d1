"""A CSR sparsity pattern (row offsets + column indices) and what is derived from it once.

Values live in the formats; the pattern is shared by every matrix with the same structure
(`with_values`, dtype changes, the values a backward pass produces), so the derived arrays
(row order for load balance, the transpose, COO row indices, the block layouts of fused
attention) are computed at most once.
"""

from __future__ import annotations

import weakref

import torch

from .._cache_mode import derived, seed, untraced_version

INT16_MAX = 2**15 - 1
INT32_MAX = 2**31 - 1


def index_dtype_for(largest: int) -> torch.dtype:
    """The narrowest of int32/int64 that holds `largest` (int32 unless it must be int64)."""
    return torch.int32 if largest <= INT32_MAX else torch.int64


def column_dtype_for(columns: int) -> torch.dtype:
    """A CSR pattern's column index type for `columns` columns: int16 where every column fits
    (at most 32768), else int32 or int64. A one-token product moves a column index beside each
    16-bit value, so int32 would be half its bytes."""
    return torch.int16 if columns <= INT16_MAX + 1 else index_dtype_for(columns)


class Pattern:
    """Row offsets (M+1,) and column indices (nnz,) of an (M, K) CSR matrix, validated elsewhere."""

    def __init__(
        self, row_offsets: torch.Tensor, column_indices: torch.Tensor, shape: tuple[int, int]
    ):
        self.row_offsets = row_offsets
        self.column_indices = column_indices
        self.shape = shape
        self._cache: dict[str, object] = {}
        # the arrays' versions when made valid: an in-place edit since is checked again
        # (formats.csr.check_current)
        self.checked_at = (untraced_version(row_offsets), untraced_version(column_indices))

    def __getstate__(self) -> dict:
        """Pickled without what is derived (a transpose, block layouts): remade on use; its
        arrays are checked again at their first use (checked_at None)."""
        return {**self.__dict__, "_cache": {}, "checked_at": None}

    @property
    def nnz(self) -> int:
        return self.column_indices.numel()

    @property
    def device(self) -> torch.device:
        return self.column_indices.device

    def _cached(self, key: str, build):
        return derived(self._cache, key, build, self.row_offsets, self.column_indices)

    def row_lengths(self) -> torch.Tensor:
        return self._cached("row_lengths", lambda: self.row_offsets.diff())

    def row_indices(self) -> torch.Tensor:
        """The row of every stored entry (nnz,), the COO form: int32 (int64 past 2^31 rows).
        Made for each call, not kept: 4 bytes an entry held beside a 2-byte value, for what
        only builders and conversions read once."""
        rows = torch.arange(self.shape[0], device=self.device, dtype=index_dtype_for(self.shape[0]))
        return torch.repeat_interleave(rows, self.row_lengths().long(), output_size=self.nnz)

    def row_order(self) -> torch.Tensor:
        """Rows sorted by length, longest first (Sputnik's row swizzle), int32."""

        def build():
            order = torch.argsort(self.row_lengths(), descending=True, stable=True)
            return order.to(torch.int32)

        return self._cached("row_order", build)

    def column_indices_int16(self) -> torch.Tensor | None:
        """Column indices as int16 when every column fits (K <= 32768), else None: the pattern's
        own where they are int16 already (a CSRMatrix's are), else a copy kept beside them."""
        if self.shape[1] > INT16_MAX + 1:
            return None
        if self.column_indices.dtype == torch.int16:
            return self.column_indices
        return self._cached("cols16", lambda: self.column_indices.to(torch.int16))

    def transpose(self) -> tuple[Pattern, torch.Tensor]:
        """The pattern of A^T and the permutation taking A's values to A^T's order (int32
        below 2^31 entries: a training step keeps it for every weight)."""
        # A transpose knows its source weakly: a strong reference both ways would keep both
        # patterns, and all they derived, until a full garbage collection. The way back's
        # permutation (the inverse) is made only if asked for: a backward never does.
        back = self._cached("transposed from", lambda: None)
        source, perm = (None, None) if back is None else (back[0](), back[1]())
        if source is not None and perm is not None:
            inverse = self._cached("transposed from: permutation", lambda: _inverse(perm))
            return source, inverse

        def build():
            rows = self.row_indices()
            cols = self.column_indices.long()
            # Sorting by (column, row) lists A's entries in A^T's row-major order.
            perm = torch.argsort(cols * max(self.shape[0], 1) + rows, stable=True)
            counts = torch.bincount(cols, minlength=self.shape[1])
            offsets = torch.zeros(self.shape[1] + 1, dtype=torch.int64, device=self.device)
            offsets[1:] = torch.cumsum(counts, 0)
            offset_dtype = index_dtype_for(self.nnz)
            col_dtype = column_dtype_for(self.shape[0])
            t = Pattern(
                offsets.to(offset_dtype),
                rows[perm].to(col_dtype),
                (self.shape[1], self.shape[0]),
            )
            perm = perm.to(index_dtype_for(self.nnz))
            back = (weakref.ref(self), weakref.ref(perm))
            seed(t._cache, "transposed from", back, t.row_offsets, t.column_indices)
            return t, perm

        return self._cached("transpose", build)

    def block_layout(self, block_m: int, block_n: int, split_fill: float):
        """The tiles a fused attention kernel visits (formats/_block_layout.py), per tile shape."""
        from . import _block_layout

        def build():
            return _block_layout.build(
                self.row_indices(), self.column_indices, self.shape, block_m, block_n, split_fill
            )

        return self._cached(f"block_layout:{block_m}x{block_n}:{split_fill}", build)


def _inverse(perm: torch.Tensor) -> torch.Tensor:
    """The permutation undoing `perm`, in its dtype."""
    inverse = torch.empty_like(perm)
    inverse[perm.long()] = torch.arange(perm.numel(), device=perm.device, dtype=perm.dtype)
    return inverse
