"""CSRMatrix: an unstructured sparse matrix in compressed sparse row form.

Validated once on construction; the pattern (and what is derived from it: row order, transpose)
is shared with every matrix made by `with_values` or `to(dtype=...)`. Values may be one matrix
(nnz,) or a batch of matrices sharing the pattern (batch, nnz), as attention scores are.
"""

from __future__ import annotations

import torch

from .. import _checks
from .._cache_mode import version
from . import _values_state
from ._pattern import Pattern, column_dtype_for, index_dtype_for


class CSRMatrix:
    """Sparse (rows, cols) matrix: `row_offsets` (rows+1,), `column_indices` (nnz,), `values`.

    Column indices are strictly increasing within each row. They are stored as int16 where every
    column fits (at most 32768 columns), else int32 unless int64 is needed; row offsets as int32
    unless nnz needs int64.

    Example:
        >>> A = CSRMatrix.from_dense(torch.tensor([[0.0, 2.0], [3.0, 0.0]]))
        >>> A.nnz, A.column_indices.tolist()
        (2, [1, 0])
    """

    def __init__(
        self,
        row_offsets: torch.Tensor,
        column_indices: torch.Tensor,
        values: torch.Tensor,
        shape: tuple[int, int],
        *,
        check: bool = True,
    ):
        shape = _checks.shape2d("shape", shape)
        if check:
            _validate_structure(row_offsets, column_indices, shape)
        nnz = column_indices.numel()
        pattern = Pattern(
            row_offsets.to(index_dtype_for(nnz)),
            column_indices.to(column_dtype_for(shape[1])),
            shape,
        )
        if check:
            _validate_values(pattern, values)
        self._pattern = pattern
        self._values = values

    @classmethod
    def _from_pattern(cls, pattern: Pattern, values: torch.Tensor, check: bool) -> CSRMatrix:
        """A matrix sharing an existing (already validated) pattern."""
        if check:
            _validate_values(pattern, values)
        matrix = cls.__new__(cls)
        matrix._pattern = pattern
        matrix._values = values
        return matrix

    __setstate__ = _values_state.set_state

    @property
    def values(self) -> torch.Tensor:
        """(nnz,) or (batch, nnz). Assigning checks the new tensor against the pattern, as the
        constructor does: a wrong size would be read past its end by the kernels."""
        return self._values

    @values.setter
    def values(self, values: torch.Tensor) -> None:
        _validate_values(self._pattern, values)
        self._values = values

    # ----------------------------------------------------------------- properties
    @property
    def row_offsets(self) -> torch.Tensor:
        return self._pattern.row_offsets

    @property
    def column_indices(self) -> torch.Tensor:
        return self._pattern.column_indices

    @property
    def shape(self) -> tuple[int, int]:
        return self._pattern.shape

    @property
    def nnz(self) -> int:
        return self._pattern.nnz

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def batch(self) -> int | None:
        """Number of matrices sharing the pattern, or None for a single matrix."""
        return self.values.shape[0] if self.values.dim() == 2 else None

    @property
    def density(self) -> float:
        rows, cols = self.shape
        return self.nnz / (rows * cols) if rows * cols else 0.0

    @property
    def pattern(self) -> Pattern:
        return self._pattern

    @property
    def row_order(self) -> torch.Tensor:
        """Rows sorted by length, longest first (Sputnik's row swizzle); cached."""
        return self._pattern.row_order()

    @property
    def nbytes(self) -> int:
        """Bytes of the format with the narrowest column index type a kernel can use."""
        cols = self._pattern.column_indices_int16()
        cols = self.column_indices if cols is None else cols
        return sum(t.numel() * t.element_size() for t in (self.row_offsets, cols, self.values))

    def __repr__(self) -> str:
        batch = "" if self.batch is None else f", batch={self.batch}"
        return (
            f"CSRMatrix(shape={self.shape}, nnz={self.nnz}, density={self.density:.4f}, "
            f"dtype={self.dtype}, device={self.device}{batch})"
        )

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_dense(cls, dense: torch.Tensor, mask: torch.Tensor | None = None) -> CSRMatrix:
        """Store the nonzeros of a 2-D tensor (or the positions `mask` keeps, zeros included)."""
        _checks.tensor("dense", dense)
        _checks.ndim("dense", dense, [2])
        _checks.float_dtype("dense", dense)
        _checks.has_data("dense", dense)
        if mask is None:
            keep = dense != 0
        else:
            _checks.tensor("mask", mask)
            _checks.has_data("mask", mask)
            if mask.shape != dense.shape:
                raise ValueError(
                    f"mask must have dense's shape {tuple(dense.shape)}, got {tuple(mask.shape)}"
                )
            keep = mask.to(device=dense.device, dtype=torch.bool)
        rows, cols = keep.nonzero(as_tuple=True)
        counts = torch.bincount(rows, minlength=dense.shape[0])
        offsets = torch.zeros(dense.shape[0] + 1, dtype=torch.int64, device=dense.device)
        offsets[1:] = torch.cumsum(counts, 0)
        return cls(offsets, cols, dense[rows, cols], tuple(dense.shape), check=False)

    @classmethod
    def from_torch(cls, t: torch.Tensor) -> CSRMatrix:
        """From a 2-D torch sparse tensor (CSR or COO layout)."""
        _checks_sparse_torch(t)
        _checks.has_data("t", t)
        if t.layout == torch.sparse_coo:
            t = t.coalesce().to_sparse_csr()
        crow, col, val = t.crow_indices(), t.col_indices(), t.values()
        # torch does not check its invariants by default (check_invariants=False): the arrays'
        # lengths and the offsets must be sound to sort by.
        if crow.numel() != t.shape[0] + 1:
            raise ValueError(
                f"t's crow_indices must have rows + 1 = {t.shape[0] + 1} entries, got "
                f"{crow.numel()}"
            )
        if val.numel() != col.numel():
            raise ValueError(
                f"t's values must have one entry a column index ({col.numel()}), got {val.numel()}"
            )
        _check_row_offsets(crow, col.numel())
        # torch allows unsorted columns within a row; sort them so the pattern is canonical.
        rows = torch.repeat_interleave(torch.arange(t.shape[0], device=t.device), crow.diff())
        order = torch.argsort(rows * max(t.shape[1], 1) + col, stable=True)
        return cls(crow, col[order], val[order], tuple(t.shape))

    @classmethod
    def from_scipy(cls, m) -> CSRMatrix:
        """From any scipy.sparse matrix; duplicates are summed, columns sorted."""
        import scipy.sparse

        if not scipy.sparse.issparse(m):
            raise TypeError(f"m must be a scipy.sparse matrix or array, got {type(m).__name__}")
        csr = m.tocsr(copy=True)
        try:  # scipy's own structure check: its C++ routines trust indptr and indices
            csr.check_format(full_check=True)
        except ValueError as error:
            raise ValueError(f"m is not a valid scipy.sparse matrix: {error}") from None
        csr.sum_duplicates()
        csr.sort_indices()
        return cls(
            torch.from_numpy(csr.indptr.astype("int64")),
            torch.from_numpy(csr.indices.astype("int64")),
            torch.from_numpy(csr.data),
            csr.shape,
        )

    def with_values(self, values: torch.Tensor) -> CSRMatrix:
        """The same pattern with other values (nnz,) or (batch, nnz)."""
        return CSRMatrix._from_pattern(self._pattern, values, check=True)

    # ----------------------------------------------------------------- conversion
    def to_dense(self) -> torch.Tensor:
        """Dense (rows, cols), or (batch, rows, cols); differentiable in the values."""
        rows = self._pattern.row_indices()
        cols = self.column_indices.long()
        lead = () if self.batch is None else (self.batch,)
        out = self.values.new_zeros(*lead, *self.shape)
        out[..., rows, cols] = self.values
        return out

    def to_torch(self) -> torch.Tensor:
        """A torch sparse CSR tensor (single matrices only)."""
        if self.batch is not None:
            raise ValueError("to_torch supports a single matrix; this CSRMatrix holds a batch")
        index = (
            torch.int64
            if torch.int64 in (self.row_offsets.dtype, self.column_indices.dtype)
            else torch.int32
        )
        return torch.sparse_csr_tensor(
            self.row_offsets.to(index), self.column_indices.to(index), self.values, self.shape
        )

    def to_scipy(self):
        """A scipy.sparse.csr_matrix (float32 for half-precision values)."""
        import scipy.sparse

        if self.batch is not None:
            raise ValueError("to_scipy supports a single matrix; this CSRMatrix holds a batch")
        values = self.values.detach().cpu()
        if values.dtype in (torch.float16, torch.bfloat16):
            values = values.float()
        columns = self.column_indices.cpu()
        columns = columns.int() if columns.dtype == torch.int16 else columns  # (scipy's types)
        return scipy.sparse.csr_matrix(
            (values.numpy(), columns.numpy(), self.row_offsets.cpu().numpy()),
            shape=self.shape,
        )

    def t(self) -> CSRMatrix:
        """The transpose as a CSRMatrix; its pattern is cached, its values follow this one's."""
        _checks.has_data("the matrix's column_indices", self.column_indices)  # (a sort by them)
        pattern, perm = self._pattern.transpose()
        return CSRMatrix._from_pattern(pattern, self.values[..., perm], check=False)

    def to(self, device=None, dtype: torch.dtype | None = None) -> CSRMatrix:
        """Move to a device and/or cast the values to a floating dtype."""
        if isinstance(device, torch.dtype):  # (.to(torch.float16), as tensors and modules take)
            if dtype is not None:
                raise TypeError(f"dtype given twice: {device} and {dtype}")
            device, dtype = None, device
        if device is not None:
            device = _checks.device("device", device)
        if dtype is not None and dtype not in _checks.FLOAT_DTYPES:
            raise TypeError(f"dtype must be a floating dtype, got {dtype}")
        values = self.values.to(device=device, dtype=dtype)
        if values.device == self.device:
            return CSRMatrix._from_pattern(self._pattern, values, check=False)
        return CSRMatrix(
            self.row_offsets.to(values.device),
            self.column_indices.to(values.device),
            values,
            self.shape,
            check=False,
        )

    def cuda(self) -> CSRMatrix:
        return self.to(device="cuda")

    def cpu(self) -> CSRMatrix:
        return self.to(device="cpu")


def check_current(A: CSRMatrix, name: str = "A", values: bool = True) -> None:
    """Raise a ValueError naming `name` where A no longer holds what was validated when it was
    built: values of another size set behind the `values` setter (`.data`, `resize_`; not
    looked at with values=False, for a pattern whose values are ignored), or its index arrays
    edited in place since (they may be the caller's own tensors: checked again, once an edit).
    The kernels would read past the arrays' ends, or past B's rows."""
    pattern = A._pattern
    if values and (A._values.dim() not in (1, 2) or A._values.shape[-1] != pattern.nnz):
        raise ValueError(
            f"{name}.values must have nnz = {pattern.nnz} entries in its last dimension, got "
            f"shape {tuple(A._values.shape)} (set behind the values setter?)"
        )
    if torch.compiler.is_compiling():
        return
    now = (version(pattern.row_offsets), version(pattern.column_indices))
    if None in now or now == getattr(pattern, "checked_at", None):
        return
    try:
        _validate_structure(pattern.row_offsets, pattern.column_indices, pattern.shape)
    except ValueError as error:
        raise ValueError(f"{name}'s arrays changed after it was built: {error}") from None
    pattern.checked_at = now


def _checks_sparse_torch(t: object) -> None:
    if not isinstance(t, torch.Tensor) or t.layout not in (torch.sparse_csr, torch.sparse_coo):
        raise TypeError("t must be a torch sparse tensor in CSR or COO layout")
    if t.dim() != 2:
        raise ValueError(f"t must be 2-D, got shape {tuple(t.shape)}")
    if t.layout == torch.sparse_coo and (t.sparse_dim() != 2 or t.dense_dim() != 0):
        raise ValueError(
            f"t must have 2 sparse dimensions and no dense ones (a hybrid COO tensor has "
            f"{t.sparse_dim()} sparse and {t.dense_dim()} dense)"
        )


def _check_row_offsets(row_offsets: torch.Tensor, nnz: int) -> None:
    """Offsets that start at 0, never decrease and end at nnz (what indexing by them needs)."""
    offsets = row_offsets.long()
    first, last, decreasing = torch.stack(
        [offsets[0], offsets[-1], (offsets.diff() < 0).sum()]
    ).tolist()
    if first != 0:
        raise ValueError(f"row_offsets must start at 0, got {first}")
    if decreasing:
        raise ValueError(f"row_offsets must be non-decreasing; it decreases {decreasing} time(s)")
    if last != nnz:
        raise ValueError(f"row_offsets must end at nnz = len(column_indices) = {nnz}, got {last}")


def _validate_structure(row_offsets, column_indices, shape) -> None:
    _checks.tensor("row_offsets", row_offsets)
    _checks.tensor("column_indices", column_indices)
    _checks.ndim("row_offsets", row_offsets, [1])
    _checks.ndim("column_indices", column_indices, [1])
    _checks.index_dtype("row_offsets", row_offsets)
    _checks.index_dtype("column_indices", column_indices)
    _checks.same_device({"row_offsets": row_offsets, "column_indices": column_indices})
    _checks.has_data("row_offsets", row_offsets)
    rows, cols = shape
    if row_offsets.numel() != rows + 1:
        raise ValueError(
            f"row_offsets must have rows + 1 = {rows + 1} entries for shape {shape}, "
            f"got {row_offsets.numel()}"
        )
    nnz = column_indices.numel()
    if nnz > rows * cols:
        raise ValueError(
            f"column_indices has {nnz} entries, more than the {rows * cols} of shape {shape}"
        )
    offsets = row_offsets.long()
    # One host sync for every data-dependent check.
    first, last, decreasing = offsets[0], offsets[-1], (offsets.diff() < 0).sum()
    cols64 = column_indices.long()
    out_of_range = ((cols64 < 0) | (cols64 >= cols)).sum()
    row_start = torch.zeros(nnz, dtype=torch.bool, device=cols64.device)
    if nnz and rows:
        starts = offsets[:-1].clamp(0, max(nnz - 1, 0))
        row_start[starts[offsets.diff() > 0]] = True
    not_increasing = (
        ((cols64.diff() <= 0) & ~row_start[1:]).nonzero()[:1] if nnz > 1 else cols64[:0]
    )
    first, last, decreasing, out_of_range = torch.stack(
        [first, last, decreasing, out_of_range]
    ).tolist()
    if first != 0:
        raise ValueError(f"row_offsets must start at 0, got {first}")
    if decreasing:
        raise ValueError(f"row_offsets must be non-decreasing; it decreases {decreasing} time(s)")
    if last != nnz:
        raise ValueError(f"row_offsets must end at nnz = len(column_indices) = {nnz}, got {last}")
    if out_of_range:
        raise ValueError(
            f"column_indices must lie in [0, {cols}) for shape {shape}; {out_of_range} do not"
        )
    if not_increasing.numel():
        pos = int(not_increasing[0]) + 1
        row = (
            int(torch.searchsorted(offsets, torch.tensor(pos, device=offsets.device), right=True))
            - 1
        )
        raise ValueError(
            f"column_indices must be strictly increasing within each row (sorted, no duplicates); "
            f"row {row} breaks this at entry {pos}"
        )


def _validate_values(pattern: Pattern, values) -> None:
    _checks.tensor("values", values)
    _checks.ndim("values", values, [1, 2])
    _checks.float_dtype("values", values)
    if values.shape[-1] != pattern.nnz:
        raise ValueError(
            f"values must have nnz = {pattern.nnz} entries in its last dimension, "
            f"got shape {tuple(values.shape)}"
        )
    if values.device != pattern.device:
        raise ValueError(
            f"values must be on the indices' device {pattern.device}, got {values.device}"
        )
