"""CSRMatrix: construction, validation, conversions, transpose and the derived (cached) arrays."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import scipy.sparse
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsekernels import CSRMatrix

pytestmark = pytest.mark.filterwarnings("ignore:Sparse (CSR tensor support|invariant checks)")

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def sparse_dense(rows, cols, density, seed, dtype=torch.float64):
    """A dense (rows, cols) tensor holding fresh nonzero values where a random mask keeps them."""
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    values = values + values.sign() * 0.1  # never zero, even after a cast to half precision
    keep = torch.rand(rows, cols, generator=g) < density
    return (values * keep).to(dtype)


def seed_of(*args) -> int:
    """A seed fixed by the test's parameters (unlike hash(), stable across processes)."""
    return zlib.crc32(repr(args).encode())


def small():
    """A valid (3, 4) matrix with an empty middle row: the base the error cases perturb."""
    return dict(
        row_offsets=torch.tensor([0, 2, 2, 4]),
        column_indices=torch.tensor([0, 3, 1, 2]),
        values=torch.randn(4, dtype=torch.float64),
        shape=(3, 4),
    )


def build(**kw):
    return CSRMatrix(kw["row_offsets"], kw["column_indices"], kw["values"], kw["shape"])


def python_csr(dense):
    """CSR arrays of a dense matrix's nonzeros, computed with plain Python loops."""
    offsets, cols, vals = [0], [], []
    for row in dense.tolist():
        for c, v in enumerate(row):
            if v != 0:
                cols.append(c)
                vals.append(v)
        offsets.append(len(cols))
    return offsets, cols, vals


# --------------------------------------------------------------------------- construction
def test_constructor_stores_validated_arrays():
    kw = small()
    A = build(**kw)
    assert A.shape == (3, 4) and A.nnz == 4 and A.batch is None
    assert A.dtype == torch.float64 and A.device == torch.device("cpu")
    assert A.row_offsets.tolist() == [0, 2, 2, 4]
    assert A.column_indices.tolist() == [0, 3, 1, 2]
    assert A.row_offsets.dtype == torch.int32 and A.column_indices.dtype == torch.int16
    assert A.values is kw["values"]
    assert A.density == pytest.approx(4 / 12)
    assert "shape=(3, 4)" in repr(A) and "nnz=4" in repr(A)
    expected = torch.zeros(3, 4, dtype=torch.float64)
    expected[0, 0], expected[0, 3], expected[2, 1], expected[2, 2] = kw["values"].tolist()
    assert torch.equal(A.to_dense(), expected)


def test_columns_may_decrease_across_a_row_boundary():
    # Row 0 ends at column 3, row 1 starts at column 0: sorted within rows, which is all we need.
    A = CSRMatrix(torch.tensor([0, 2, 3]), torch.tensor([1, 3, 0]), torch.randn(3), (2, 4))
    assert A.nnz == 3


def _with(**changes):
    kw = small()
    kw.update(changes)
    return kw


ERRORS = [
    # (arguments, exception, message pattern naming the argument)
    (_with(row_offsets=torch.tensor([[0, 2, 2, 4]])), ValueError, r"row_offsets must have 1 dim"),
    (_with(column_indices=torch.tensor([[0, 3, 1, 2]])), ValueError, r"column_indices must have 1"),
    (_with(row_offsets=torch.tensor([0.0, 2, 2, 4])), TypeError, r"row_offsets must be int16"),
    (_with(column_indices=torch.tensor([0.0, 3, 1, 2])), TypeError, r"column_indices must be int"),
    (_with(column_indices=torch.tensor([0, 3, 1, 2], dtype=torch.uint8)), TypeError, "column_ind"),
    (_with(row_offsets=[0, 2, 2, 4]), TypeError, r"row_offsets must be a torch.Tensor"),
    (_with(column_indices=(0, 3, 1, 2)), TypeError, r"column_indices must be a torch.Tensor"),
    (
        _with(row_offsets=torch.tensor([0, 2, 4])),
        ValueError,
        r"row_offsets must have rows \+ 1 = 4",
    ),
    (_with(row_offsets=torch.tensor([0, 2, 2, 2, 4])), ValueError, r"row_offsets must have rows"),
    (_with(row_offsets=torch.tensor([1, 2, 2, 4])), ValueError, r"row_offsets must start at 0"),
    (_with(row_offsets=torch.tensor([0, 3, 2, 4])), ValueError, r"row_offsets must be non-decr"),
    (
        _with(row_offsets=torch.tensor([0, 2, 2, 3])),
        ValueError,
        r"row_offsets must end at nnz = .* 4",
    ),
    (_with(row_offsets=torch.tensor([0, 2, 2, 5])), ValueError, r"row_offsets must end at nnz"),
    (
        _with(column_indices=torch.tensor([0, 4, 1, 2])),
        ValueError,
        r"column_indices must lie in \[0, 4\)",
    ),
    (_with(column_indices=torch.tensor([-1, 3, 1, 2])), ValueError, r"column_indices must lie in"),
    (
        _with(column_indices=torch.tensor([3, 0, 1, 2])),
        ValueError,
        r"column_indices .*increasing.*row 0",
    ),
    (
        _with(column_indices=torch.tensor([0, 3, 2, 1])),
        ValueError,
        r"column_indices .*row 2 .*entry 3",
    ),
    (_with(column_indices=torch.tensor([0, 3, 2, 2])), ValueError, r"no duplicates.*row 2"),
    (
        _with(column_indices=torch.tensor([1, 1, 1, 2])),
        ValueError,
        r"no duplicates.*row 0 .*entry 1",
    ),
    (_with(values=torch.randn(3)), ValueError, r"values must have nnz = 4"),
    (_with(values=torch.randn(2, 5)), ValueError, r"values must have nnz = 4"),
    (_with(values=torch.randn(2, 2, 4)), ValueError, r"values must have 1 or 2 dim"),
    (_with(values=torch.arange(4)), TypeError, r"values must be float16, bfloat16"),
    (_with(values=torch.ones(4, dtype=torch.bool)), TypeError, r"values must be float"),
    (_with(values=[1.0, 2.0, 3.0, 4.0]), TypeError, r"values must be a torch.Tensor"),
    (
        _with(values=torch.randn(4, device="meta")),
        ValueError,
        r"values must be on the indices' dev",
    ),
    (_with(column_indices=torch.tensor([0, 3, 1, 2], device="meta")), ValueError, r"one device"),
    (
        _with(row_offsets=torch.tensor([0, 2, 2, 4]).to_sparse()),
        TypeError,
        r"row_offsets must be a dense",
    ),
    (_with(shape=(-3, 4)), ValueError, r"shape must not be negative"),
    (_with(shape=(3,)), ValueError, r"shape must be a pair"),
    (_with(shape="ab"), ValueError, r"shape must be a pair"),
    (
        dict(
            row_offsets=torch.tensor([0, 3]),
            column_indices=torch.tensor([0, 1, 2]),
            values=torch.randn(3),
            shape=(1, 2),
        ),
        ValueError,
        r"column_indices has 3 entries, more than the 2",
    ),
]


@pytest.mark.parametrize("kw, error, pattern", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_constructor_rejects(kw, error, pattern):
    with pytest.raises(error, match=pattern):
        build(**kw)


def test_with_values_validates_and_shares_the_pattern():
    A = CSRMatrix.from_dense(sparse_dense(9, 7, 0.4, seed=1))
    v = torch.randn(A.nnz, dtype=torch.float64)
    B = A.with_values(v)
    assert B.pattern is A.pattern and B.values is v
    expected = torch.zeros(9, 7, dtype=torch.float64)
    expected[A.to_dense() != 0] = v  # row-major order of A's nonzeros is its CSR order
    assert torch.equal(B.to_dense(), expected)
    with pytest.raises(ValueError, match=r"values must have nnz"):
        A.with_values(torch.randn(A.nnz + 1))
    with pytest.raises(TypeError, match=r"values must be float"):
        A.with_values(torch.arange(A.nnz))
    with pytest.raises(ValueError, match=r"values must be on"):
        A.with_values(torch.randn(A.nnz, device="meta"))


def test_assigned_values_are_checked():
    """`values` is public: a short tensor assigned to it was read past its end by torch's CSR
    matmul (garbage, no error)."""
    A = CSRMatrix.from_dense(sparse_dense(9, 7, 0.4, seed=1))
    A.values = torch.randn(3, A.nnz)  # a batch sharing the pattern: fine
    assert A.batch == 3
    with pytest.raises(ValueError, match=r"values must have nnz"):
        A.values = torch.randn(5)
    with pytest.raises(TypeError, match=r"values must be float"):
        A.values = torch.arange(A.nnz)
    with pytest.raises(ValueError, match=r"values must be on"):
        A.values = torch.randn(A.nnz, device="meta")
    assert A.values.shape == (3, A.nnz)  # unchanged by the refused assignments
    old = CSRMatrix.__new__(CSRMatrix)  # pickled before `values` was a property
    old.__setstate__({"_pattern": A.pattern, "values": A.values})
    assert old.values is A.values


# --------------------------------------------------------------------------- from_dense / to_dense
@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (64, 33), (3, 200), (50, 1)])
@pytest.mark.parametrize("density", [0.05, 0.5, 1.0])
@pytest.mark.parametrize("dtype", FLOATS)
def test_from_dense_round_trip(shape, density, dtype):
    dense = sparse_dense(*shape, density, seed=seed_of(shape, density, dtype), dtype=dtype)
    A = CSRMatrix.from_dense(dense)
    offsets, cols, vals = python_csr(dense.double())
    assert A.row_offsets.tolist() == offsets
    assert A.column_indices.tolist() == cols
    assert A.values.double().tolist() == vals
    assert A.dtype == dtype and A.nnz == int((dense != 0).sum())
    assert A.row_offsets.dtype == torch.int32 and A.column_indices.dtype == torch.int16
    assert torch.equal(A.to_dense(), dense)


def test_from_dense_with_mask_keeps_zeros():
    dense = sparse_dense(12, 10, 0.5, seed=2)
    mask = (dense != 0) | (torch.rand(12, 10, generator=torch.Generator().manual_seed(3)) < 0.3)
    mask[0, :] = True  # a row that is all kept, zeros included
    kept_zeros = int((mask & (dense == 0)).sum())
    assert kept_zeros > 0
    A = CSRMatrix.from_dense(dense, mask=mask)
    assert A.nnz == int(mask.sum())
    assert int((A.values == 0).sum()) == kept_zeros
    rows = torch.repeat_interleave(torch.arange(12), A.row_offsets.diff().long())
    got = torch.zeros(12, 10, dtype=torch.bool)
    got[rows, A.column_indices.long()] = True
    assert torch.equal(got, mask)
    assert torch.equal(A.to_dense(), dense)
    # A mask dropping nonzeros stores only what it keeps, and accepts any dtype as truth values.
    half = torch.zeros(12, 10)
    half[:, :5] = 1.0
    B = CSRMatrix.from_dense(dense, mask=half)
    assert torch.equal(B.to_dense(), dense * (half != 0))
    assert B.nnz == 60


def test_from_dense_keeps_nan_and_inf_as_stored_values():
    dense = sparse_dense(5, 6, 0.5, seed=4)
    dense[1, 2], dense[3, 0], dense[4, 5] = float("nan"), float("inf"), float("-inf")
    A = CSRMatrix.from_dense(dense)
    assert A.nnz == int((dense != 0).sum())  # NaN != 0 is True: a NaN is a stored value
    assert int(A.values.isnan().sum()) == 1 and int(A.values.isinf().sum()) == 2
    torch.testing.assert_close(A.to_dense(), dense, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize(
    "dense, mask, error, pattern",
    [
        (torch.randn(4), None, ValueError, r"dense must have 2 dim"),
        (torch.randn(2, 3, 4), None, ValueError, r"dense must have 2 dim"),
        (torch.arange(6).view(2, 3), None, TypeError, r"dense must be float"),
        ([[1.0, 2.0]], None, TypeError, r"dense must be a torch.Tensor"),
        (
            torch.randn(2, 3),
            torch.ones(3, 2, dtype=torch.bool),
            ValueError,
            r"mask must have dense",
        ),
        (torch.randn(2, 3), [[True] * 3] * 2, TypeError, r"mask must be a torch.Tensor"),
    ],
)
def test_from_dense_rejects(dense, mask, error, pattern):
    with pytest.raises(error, match=pattern):
        CSRMatrix.from_dense(dense, mask=mask)


def test_to_dense_is_differentiable_in_the_values():
    dense = sparse_dense(8, 9, 0.4, seed=5)
    A = CSRMatrix.from_dense(dense)
    values = A.values.clone().requires_grad_(True)
    weight = torch.randn(8, 9, dtype=torch.float64)
    (A.with_values(values).to_dense() * weight).sum().backward()
    assert torch.equal(values.grad, weight[dense != 0])


def test_batched_values():
    A = CSRMatrix.from_dense(sparse_dense(6, 11, 0.3, seed=6))
    values = torch.randn(3, A.nnz, dtype=torch.float64)
    B = A.with_values(values)
    assert B.batch == 3 and A.batch is None
    dense = B.to_dense()
    assert dense.shape == (3, 6, 11)
    for b in range(3):
        assert torch.equal(dense[b], A.with_values(values[b]).to_dense())
    assert torch.equal(B.t().to_dense(), dense.transpose(1, 2))
    with pytest.raises(ValueError, match="batch"):
        B.to_torch()
    with pytest.raises(ValueError, match="batch"):
        B.to_scipy()


# --------------------------------------------------------------------------- empty and tiny
@pytest.mark.parametrize("shape", [(0, 5), (4, 0), (0, 0), (3, 4)])
def test_empty(shape):
    A = CSRMatrix(
        torch.zeros(shape[0] + 1, dtype=torch.int64),
        torch.zeros(0, dtype=torch.int64),
        torch.zeros(0),
        shape,
    )
    assert A.nnz == 0 and A.shape == shape and A.density == 0.0
    assert torch.equal(A.to_dense(), torch.zeros(shape))
    assert A.t().shape == shape[::-1] and torch.equal(A.t().to_dense(), torch.zeros(shape[::-1]))
    assert A.row_order.tolist() == list(range(shape[0]))
    assert A.to_scipy().shape == shape and A.to_scipy().nnz == 0
    assert A.to_torch().to_dense().shape == shape
    B = CSRMatrix.from_dense(torch.zeros(shape))
    assert B.nnz == 0 and torch.equal(B.row_offsets, A.row_offsets)
    assert A.nbytes == (shape[0] + 1) * 4


def test_single_row():
    dense = sparse_dense(1, 17, 0.5, seed=7)
    A = CSRMatrix.from_dense(dense)
    assert A.row_offsets.tolist() == [0, A.nnz]
    assert torch.equal(A.to_dense(), dense)
    T = A.t()
    assert T.shape == (17, 1)
    assert torch.equal(T.to_dense(), dense.t())
    assert T.row_offsets.diff().tolist() == (dense[0] != 0).int().tolist()


# --------------------------------------------------------------------------- torch / scipy
@pytest.mark.parametrize("layout", ["csr", "coo"])
def test_from_torch_and_back(layout):
    dense = sparse_dense(10, 12, 0.3, seed=8)
    t = dense.to_sparse_csr() if layout == "csr" else dense.to_sparse()
    A = CSRMatrix.from_torch(t)
    assert torch.equal(A.to_dense(), dense)
    assert torch.equal(A.row_offsets, CSRMatrix.from_dense(dense).row_offsets)
    back = A.to_torch()
    assert back.layout == torch.sparse_csr
    assert back.crow_indices().dtype == torch.int32 and back.col_indices().dtype == torch.int32
    assert torch.equal(back.to_dense(), dense)


def test_from_torch_uncoalesced_coo_sums_duplicates():
    indices = torch.tensor([[2, 0, 2, 1, 0], [3, 1, 3, 0, 4]])
    values = torch.randn(5, dtype=torch.float64)
    t = torch.sparse_coo_tensor(indices, values, (3, 5))
    A = CSRMatrix.from_torch(t)
    expected = torch.zeros(3, 5, dtype=torch.float64)
    for (r, c), v in zip(indices.t().tolist(), values.tolist(), strict=True):
        expected[r, c] += v
    assert A.nnz == 4
    assert torch.equal(A.to_dense(), expected)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_from_torch_sorts_unsorted_csr_columns(index_dtype):
    crow = torch.tensor([0, 3, 3, 5], dtype=index_dtype)
    col = torch.tensor([4, 0, 2, 3, 1], dtype=index_dtype)
    val = torch.randn(5, dtype=torch.float64)
    t = torch.sparse_csr_tensor(crow, col, val, (3, 6))
    A = CSRMatrix.from_torch(t)
    assert A.column_indices.tolist() == [0, 2, 4, 1, 3]
    assert A.values.tolist() == [val[1], val[2], val[0], val[4], val[3]]
    expected = torch.zeros(3, 6, dtype=torch.float64)
    expected[0, 4], expected[0, 0], expected[0, 2], expected[2, 3], expected[2, 1] = val.tolist()
    assert torch.equal(A.to_dense(), expected)


def test_from_torch_rejects():
    with pytest.raises(TypeError, match="t must be a torch sparse tensor"):
        CSRMatrix.from_torch(torch.randn(3, 3))
    with pytest.raises(TypeError, match="t must be a torch sparse tensor"):
        CSRMatrix.from_torch(np.eye(3))
    with pytest.raises(ValueError, match="t must be 2-D"):
        CSRMatrix.from_torch(torch.randn(2, 3, 3).to_sparse())


def test_from_scipy_sums_duplicates_and_sorts_indices():
    rng = np.random.default_rng(9)
    rows = rng.integers(0, 7, size=40)
    cols = rng.integers(0, 9, size=40)
    data = rng.standard_normal(40) + 3.0  # positive: sums of duplicates never cancel to zero
    coo = scipy.sparse.coo_matrix((data, (rows, cols)), shape=(7, 9))
    expected = coo.toarray()
    for m in (coo, coo.tocsc(), scipy.sparse.csr_matrix((data, (rows, cols)), shape=(7, 9))):
        A = CSRMatrix.from_scipy(m)
        assert A.dtype == torch.float64 and A.shape == (7, 9)
        assert A.nnz == int((expected != 0).sum())
        np.testing.assert_array_equal(A.to_dense().numpy(), expected)
    # A csr_matrix with unsorted columns and explicit duplicates within rows.
    indptr = np.array([0, 3, 3, 6])
    indices = np.array([5, 1, 5, 8, 0, 2])
    data = rng.standard_normal(6)
    m = scipy.sparse.csr_matrix((data, indices, indptr), shape=(3, 9))
    assert not m.has_sorted_indices
    A = CSRMatrix.from_scipy(m)
    assert A.column_indices.tolist() == [1, 5, 0, 2, 8]
    np.testing.assert_array_equal(A.to_dense().numpy(), m.toarray())
    # The caller's matrix is left as it was.
    assert m.indices.tolist() == [5, 1, 5, 8, 0, 2]


@pytest.mark.parametrize("dtype", FLOATS)
def test_to_scipy_round_trip(dtype):
    dense = sparse_dense(13, 8, 0.4, seed=10, dtype=dtype)
    A = CSRMatrix.from_dense(dense)
    m = A.to_scipy()
    assert isinstance(m, scipy.sparse.csr_matrix) and m.shape == (13, 8)
    assert m.dtype == (np.float64 if dtype == torch.float64 else np.float32)
    assert m.indptr.tolist() == A.row_offsets.tolist()
    assert m.indices.tolist() == A.column_indices.tolist()
    np.testing.assert_array_equal(m.toarray(), dense.double().numpy())
    B = CSRMatrix.from_scipy(m).to(dtype=dtype)
    assert torch.equal(B.to_dense(), dense)


# --------------------------------------------------------------------------- transpose
@pytest.mark.parametrize("shape", [(1, 9), (9, 1), (16, 16), (23, 57), (64, 5)])
@pytest.mark.parametrize("density", [0.02, 0.3, 1.0])
def test_transpose(shape, density):
    dense = sparse_dense(*shape, density, seed=seed_of(shape, density))
    A = CSRMatrix.from_dense(dense)
    T = A.t()
    assert T.shape == shape[::-1] and T.nnz == A.nnz
    assert torch.equal(T.to_dense(), dense.t())
    # Built exactly as from_dense would build the transpose.
    direct = CSRMatrix.from_dense(dense.t().contiguous())
    assert torch.equal(T.row_offsets, direct.row_offsets)
    assert torch.equal(T.column_indices, direct.column_indices)
    assert torch.equal(T.values, direct.values)
    assert T.row_offsets.dtype == torch.int32 and T.column_indices.dtype == torch.int16
    TT = T.t()
    assert torch.equal(TT.row_offsets, A.row_offsets)
    assert torch.equal(TT.column_indices, A.column_indices)
    assert torch.equal(TT.values, A.values)
    # The transposed pattern is derived once and shared.
    assert A.t().pattern is T.pattern and TT.pattern is A.pattern


def test_transpose_values_follow_with_values():
    A = CSRMatrix.from_dense(sparse_dense(12, 7, 0.4, seed=11))
    B = A.with_values(torch.randn(A.nnz, dtype=torch.float64))
    assert B.t().pattern is A.t().pattern
    assert torch.equal(B.t().to_dense(), B.to_dense().t())


def test_gradient_flows_through_transpose():
    dense = sparse_dense(10, 6, 0.4, seed=12)
    A = CSRMatrix.from_dense(dense)
    values = A.values.clone().requires_grad_(True)
    weight = torch.randn(6, 10, dtype=torch.float64)
    (A.with_values(values).t().to_dense() * weight).sum().backward()
    assert torch.equal(values.grad, weight.t()[dense != 0])


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(0, 12),
    cols=st.integers(0, 12),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31 - 1),
)
def test_conversions_agree_property(rows, cols, density, seed):
    dense = sparse_dense(rows, cols, density, seed)
    A = CSRMatrix.from_dense(dense)
    # Every conversion path rebuilds a validated matrix equal to the dense one.
    again = CSRMatrix(A.row_offsets, A.column_indices, A.values, A.shape)
    assert torch.equal(again.to_dense(), dense)
    assert torch.equal(A.t().to_dense(), dense.t())
    assert torch.equal(A.t().t().to_dense(), dense)
    np.testing.assert_array_equal(A.to_scipy().toarray(), dense.numpy())
    assert torch.equal(CSRMatrix.from_torch(A.to_torch()).to_dense(), dense)
    lengths = (dense != 0).sum(1).tolist()
    assert A.row_order.tolist() == sorted(range(rows), key=lambda r: -lengths[r])


# --------------------------------------------------------------------------- derived arrays
def test_row_order_longest_first_and_stable():
    lengths = [3, 0, 5, 3, 1, 5, 0, 3, 2]
    dense = torch.zeros(len(lengths), 8, dtype=torch.float64)
    for r, n in enumerate(lengths):
        dense[r, torch.randperm(8, generator=torch.Generator().manual_seed(r))[:n]] = (
            torch.randn(n, dtype=torch.float64).abs() + 1.0
        )
    A = CSRMatrix.from_dense(dense)
    order = A.row_order
    assert order.dtype == torch.int32
    # Longest first; rows of equal length keep their original order.
    assert order.tolist() == [2, 5, 0, 3, 7, 8, 4, 1, 6]
    assert A.row_order is order  # cached
    assert A.to(dtype=torch.float32).row_order is order  # shared with a cast


def test_row_order_stable_with_many_ties():
    lengths = torch.randint(0, 4, (1000,), generator=torch.Generator().manual_seed(15))
    offsets = torch.zeros(1001, dtype=torch.int64)
    offsets[1:] = lengths.cumsum(0)
    cols = torch.cat([torch.arange(int(n)) for n in lengths])
    A = CSRMatrix(offsets, cols, torch.randn(cols.numel(), dtype=torch.float64), (1000, 4))
    ls = lengths.tolist()
    assert A.row_order.tolist() == sorted(range(1000), key=lambda r: -ls[r])
