"""CSRMatrix's types: values moved between dtypes (the pattern shared); int16 columns where
every column fits, int32 past it, int64 where the size needs it; row offsets int32 unless nnz
needs int64; what each costs (nbytes)."""

from __future__ import annotations

import pytest
import torch

from sparsekernels import CSRMatrix
from test_csr import FLOATS, build, small, sparse_dense


@pytest.mark.parametrize("dtype", FLOATS)
def test_to_dtype_shares_the_pattern(dtype):
    dense = sparse_dense(7, 9, 0.5, seed=13)
    A = CSRMatrix.from_dense(dense)
    B = A.to(dtype=dtype)
    assert B.dtype == dtype and B.pattern is A.pattern
    assert torch.equal(B.values, A.values.to(dtype))
    assert torch.equal(B.to_dense(), dense.to(dtype))
    C = A.to(device="cpu")
    assert C.pattern is A.pattern and torch.equal(C.values, A.values)
    assert A.cpu().pattern is A.pattern
    with pytest.raises(TypeError, match="dtype must be a floating dtype"):
        A.to(dtype=torch.int32)


@pytest.mark.parametrize("index_dtype", [torch.int16, torch.int32, torch.int64])
def test_constructor_accepts_every_index_dtype(index_dtype):
    kw = small()
    A = CSRMatrix(
        kw["row_offsets"].to(index_dtype),
        kw["column_indices"].to(index_dtype),
        kw["values"],
        (3, 4),
    )
    assert A.row_offsets.dtype == torch.int32 and A.column_indices.dtype == torch.int16
    assert torch.equal(A.to_dense(), build(**kw).to_dense())


def test_int64_column_indices_when_the_shape_needs_them():
    wide = 2**31  # largest column 2**31 - 1 still fits int32, but the dimension does not
    A = CSRMatrix(
        torch.tensor([0, 1, 3]),
        torch.tensor([5, 7, wide - 1]),
        torch.randn(3, dtype=torch.float64),
        (2, wide),
    )
    assert A.column_indices.dtype == torch.int64
    assert A.row_offsets.dtype == torch.int32
    assert A.column_indices.tolist() == [5, 7, wide - 1]
    assert A.nbytes == 3 * 4 + 3 * 8 + 3 * 8
    t = A.to_torch()
    assert t.crow_indices().dtype == torch.int64 and t.col_indices().dtype == torch.int64
    assert t.col_indices().tolist() == [5, 7, wide - 1]
    with pytest.raises(ValueError, match=r"column_indices must lie in \[0, 2147483648\)"):
        CSRMatrix(torch.tensor([0, 1]), torch.tensor([wide]), torch.randn(1), (1, wide))
    # One below the limit stays int32.
    B = CSRMatrix(torch.tensor([0, 1]), torch.tensor([wide - 2]), torch.randn(1), (1, wide - 1))
    assert B.column_indices.dtype == torch.int32


def test_columns_are_int16_where_every_column_fits():
    """int16 up to 32768 columns (the architecture's "indices as small as the shape allows"),
    int32 past it; the forward kernels' int16 columns are the matrix's own, not a copy beside
    them (a copy held 2 more bytes a stored entry)."""
    for cols, dtype in ((32768, torch.int16), (32769, torch.int32)):
        A = CSRMatrix(torch.tensor([0, 2]), torch.tensor([0, cols - 1]), torch.randn(2), (1, cols))
        assert A.column_indices.dtype == dtype and A.column_indices.tolist() == [0, cols - 1]
        narrow = A.pattern.column_indices_int16()
        if dtype == torch.int16:
            assert narrow is A.column_indices and not A.pattern._cache
        else:
            assert narrow is None
    tall = CSRMatrix(torch.tensor([0, 1, 1]), torch.tensor([3]), torch.randn(1), (2, 40000))
    assert tall.t().column_indices.dtype == torch.int16  # (the transpose: 2 columns)
    assert tall.t().t().column_indices.dtype == torch.int32
    assert torch.equal(tall.t().t().to_dense(), tall.to_dense())
    assert tall.to_scipy().indices.tolist() == [3]


@pytest.mark.parametrize("dtype", FLOATS)
def test_nbytes(dtype):
    dense = sparse_dense(20, 30, 0.3, seed=14, dtype=dtype)
    A = CSRMatrix.from_dense(dense)
    size = torch.tensor([], dtype=dtype).element_size()
    # int32 row offsets, int16 columns (K <= 32768), the values.
    assert A.nbytes == 21 * 4 + A.nnz * 2 + A.nnz * size
    batched = A.with_values(torch.randn(4, A.nnz, dtype=dtype))
    assert batched.nbytes == 21 * 4 + A.nnz * 2 + 4 * A.nnz * size
    for cols, index_bytes in ((32768, 2), (32769, 4)):
        B = CSRMatrix(torch.tensor([0, 2]), torch.tensor([0, cols - 1]), torch.randn(2), (1, cols))
        assert B.nbytes == 2 * 4 + 2 * index_bytes + 2 * 4
