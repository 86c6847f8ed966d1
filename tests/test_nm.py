"""NMMatrix: n:m (element-, vector- and block-wise) compression, validation and conversions."""

from __future__ import annotations

import math
import zlib

import pytest
import torch

import sparsekernels as sk
from sparsekernels import CSRMatrix, NMMatrix
from sparsekernels.prune import nm_mask

RATIOS = [
    (1, 2), (2, 4), (1, 4), (2, 8), (1, 8), (4, 8), (4, 16), (8, 16),
    (16, 32), (8, 32), (4, 32), (3, 32), (1, 32),
]  # fmt: skip
BLOCKED = [  # (n, m, vector, block): block-wise patterns, nmSPARSE's BW4x4 = vector 4, block 4
    (2, 8, 1, 2),
    (4, 16, 1, 4),
    (16, 32, 1, 8),
    (4, 8, 4, 4),
    (4, 16, 4, 4),
    (8, 32, 4, 4),
    (8, 16, 2, 8),
    (2, 4, 3, 2),
]
CONFIGS = [(n, m, v, 1) for n, m in RATIOS for v in (1, 4)] + BLOCKED


def seed_of(*args) -> int:
    return zlib.crc32(repr(args).encode())


def weight(rows, cols, seed, dtype=torch.float64):
    """Fresh random weights, never zero (so pruned positions are the only zeros)."""
    w = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (w + w.sign() * 0.1).to(dtype)


def pruned(n, m, vector, block, rows, groups=3, dtype=torch.float64):
    w = weight(rows, groups * m, seed_of(n, m, vector, block, rows), dtype)
    mask = nm_mask(w, n, m, vector, block)
    return w * mask, mask


def decode(packed: torch.Tensor, bits: int, slots: int) -> torch.Tensor:
    """Unpack `bits`-wide fields, little end first, from int32 words (the test's own decoder)."""
    per_word = 32 // bits
    out = torch.empty(packed.shape[0], slots, dtype=torch.int64)
    for r, words in enumerate(packed.tolist()):
        for j in range(slots):
            word = words[j // per_word] & 0xFFFFFFFF  # the int32 word's 32 bits, unsigned
            out[r, j] = (word >> (j % per_word) * bits) & ((1 << bits) - 1)
    return out


# --------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("n, m, vector, block", CONFIGS)
def test_round_trip_from_pruned_weight(n, m, vector, block):
    rows = 10  # not a multiple of vector 3 or 4: the last row group is partial
    dense, mask = pruned(n, m, vector, block, rows)
    W = NMMatrix.from_dense(dense, n=n, m=m, vector=vector, block=block, mask=mask)
    groups, row_groups = 3, -(-rows // vector)
    assert W.shape == (rows, groups * m) and W.groups == groups
    assert W.values.shape == (rows, groups * n) and W.values.dtype == torch.float64
    assert W.indices.dtype == torch.uint8 and W.indices.shape == (row_groups, groups * n // block)
    assert W.nnz == rows * groups * n and W.density == n / m
    assert torch.equal(W.to_dense(), dense)
    # The columns of the stored values are exactly the mask's, row by row, in order.
    cols = W.column_indices()
    assert cols.dtype == torch.int64 and cols.shape == (rows, groups * n)
    expected_cols = torch.stack([row.nonzero().flatten() for row in mask])
    assert torch.equal(cols, expected_cols)
    assert torch.equal(W.values, dense.gather(1, expected_cols))
    # Indices: block offsets within the group, strictly increasing, consistent with the columns.
    idx = W.indices.long().view(row_groups, groups, n // block)
    assert int(idx.max()) < m // block
    assert bool((idx.diff(dim=-1) > 0).all())
    first_of_block = cols[:, ::block].view(rows, groups, n // block)
    from_indices = idx.repeat_interleave(vector, 0)[:rows] * block + (
        torch.arange(groups) * m
    ).view(1, groups, 1)
    assert torch.equal(first_of_block, from_indices)
    # The nonzeros alone give the same matrix (every kept weight is nonzero here).
    again = NMMatrix.from_dense(dense, n=n, m=m, vector=vector, block=block)
    assert torch.equal(again.indices, W.indices) and torch.equal(again.values, W.values)
    # Validated construction from the stored arrays accepts them.
    rebuilt = NMMatrix(W.values, W.indices, W.shape, n, m, vector, block)
    assert torch.equal(rebuilt.to_dense(), dense)
    # CSR view: same matrix, a valid CSR pattern.
    A = W.to_csr()
    assert isinstance(A, CSRMatrix) and A.nnz == W.nnz
    assert torch.equal(A.to_dense(), dense)
    checked = CSRMatrix(A.row_offsets, A.column_indices, A.values, A.shape)
    assert torch.equal(checked.to_dense(), dense)


@pytest.mark.parametrize("n, m, vector, block", CONFIGS)
def test_nm_columns_name_the_kept_positions(n, m, vector, block):
    """nm_columns (what to_dense, the CPU backend and the dense paths index with) gives each
    stored value its column: the mask's kept positions in order, rows a partial vector group
    included, the same in int32 and int64."""
    from sparsekernels.formats.nm import nm_columns

    rows = 2 * vector + 1  # the last vector group partial
    dense, mask = pruned(n, m, vector, block, rows=rows, groups=5)
    W = NMMatrix.from_dense(dense, n=n, m=m, vector=vector, block=block, mask=mask)
    columns = nm_columns(W.indices, rows, n, m, vector, block)
    assert columns.dtype == torch.int64 and columns.shape == W.values.shape
    for r in range(rows):
        assert columns[r].tolist() == mask[r].nonzero().flatten().tolist()
    assert torch.equal(dense.gather(1, columns), W.values)
    narrow = nm_columns(W.indices, rows, n, m, vector, block, torch.int32)
    assert narrow.dtype == torch.int32 and torch.equal(narrow.long(), columns)
    wide = W.indices.long()  # offsets already of the columns' dtype are not written to
    assert torch.equal(nm_columns(wide, rows, n, m, vector, block), columns)
    assert torch.equal(wide, W.indices.long())


@pytest.mark.parametrize("n, m, vector, block", CONFIGS)
def test_packed_indices_decode(n, m, vector, block):
    dense, mask = pruned(n, m, vector, block, rows=6, groups=5)
    W = NMMatrix.from_dense(dense, n=n, m=m, vector=vector, block=block, mask=mask)
    bits = max(1, math.ceil(math.log2(m // block)))
    assert W.index_bits == bits
    packed = W.packed_indices()
    slots = W.indices.shape[1]
    assert packed.dtype == torch.int32
    assert packed.shape == (W.indices.shape[0], -(-slots // (32 // bits)))
    assert torch.equal(decode(packed, bits, slots), W.indices.long())
    assert W.packed_indices() is packed  # cached


def test_packed_indices_use_the_sign_bit():
    # 1:2 gives 1-bit offsets, 32 to a word: choosing the second of every pair sets all 32 bits.
    dense = torch.zeros(2, 64, dtype=torch.float64)
    dense[0, 1::2] = torch.rand(32, dtype=torch.float64) + 1.0
    dense[1, 0::2] = torch.rand(32, dtype=torch.float64) + 1.0
    W = NMMatrix.from_dense(dense, n=1, m=2)
    assert W.packed_indices().tolist() == [[-1], [0]]
    # 1:256 gives 8-bit offsets up to 255, four to a word.
    dense = torch.zeros(1, 4 * 256, dtype=torch.float64)
    dense[0, [255, 256 + 7, 512 + 128, 768 + 254]] = torch.rand(4, dtype=torch.float64) + 1.0
    W = NMMatrix.from_dense(dense, n=1, m=256)
    assert W.indices.tolist() == [[255, 7, 128, 254]]
    assert W.packed_indices().tolist() == [[255 | 7 << 8 | 128 << 16 | (254 << 24) - 2**32]]
    assert torch.equal(W.to_dense(), dense)


def test_nm_docstring_example():
    w = torch.tensor([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 0.0, 4.0]])
    W = NMMatrix.from_dense(w, n=2, m=4)
    assert W.indices.tolist() == [[1, 3], [0, 3]]
    assert W.values.tolist() == [[1.0, 2.0], [3.0, 4.0]]


# --------------------------------------------------------------------------- kept zeros
def test_groups_with_fewer_nonzeros_keep_the_first_inactive_positions():
    dense = torch.zeros(3, 8, dtype=torch.float64)
    dense[0, 2] = 1.5  # group 0 of row 0 holds one nonzero; group 1 none
    dense[1, 4], dense[1, 7] = -2.0, 0.5
    dense[2, 3] = 0.25
    W = NMMatrix.from_dense(dense, n=2, m=4)
    assert W.indices.tolist() == [[0, 2, 0, 1], [0, 1, 0, 3], [0, 3, 0, 1]]
    assert W.column_indices().tolist() == [[0, 2, 4, 5], [0, 1, 4, 7], [0, 3, 4, 5]]
    assert W.values.tolist() == [[0.0, 1.5, 0.0, 0.0], [0.0, 0.0, -2.0, 0.5], [0.0, 0.25, 0.0, 0.0]]
    assert torch.equal(W.to_dense(), dense)


@pytest.mark.parametrize("n, m, vector, block", [(2, 8, 1, 1), (4, 16, 4, 4), (2, 4, 1, 2)])
def test_mask_keeps_zero_weights_in_place(n, m, vector, block):
    dense, mask = pruned(n, m, vector, block, rows=9)
    g = torch.Generator().manual_seed(seed_of("zeros", n, m, vector, block))
    zeroed = mask & (torch.rand(dense.shape, generator=g) < 0.4)
    dense = dense.masked_fill(zeroed, 0.0)
    assert bool(zeroed.any())
    W = NMMatrix.from_dense(dense, n=n, m=m, vector=vector, block=block, mask=mask)
    assert torch.equal(W.column_indices(), torch.stack([row.nonzero().flatten() for row in mask]))
    assert int((W.values == 0).sum()) == int(zeroed.sum())
    assert torch.equal(W.to_dense(), dense)


@pytest.mark.parametrize("n, m, vector, block", [(2, 4, 1, 1), (2, 8, 4, 1), (4, 8, 1, 2)])
def test_a_mask_of_fewer_positions_stores_dense_times_mask(n, m, vector, block):
    """A mask that keeps fewer than the pattern allows (a group short of n, a vector's rows
    apart, part of a block): the slots past it hold zeros, not dense's values there."""
    g = torch.Generator().manual_seed(seed_of("fewer", n, m, vector, block))
    _, full = pruned(n, m, vector, block, rows=9)
    dense = torch.randn(full.shape, generator=g, dtype=torch.float64)
    mask = full & (torch.rand(full.shape, generator=g) < 0.6)
    assert bool((full & ~mask).any())
    W = NMMatrix.from_dense(dense, n=n, m=m, vector=vector, block=block, mask=mask)
    assert torch.equal(W.to_dense(), dense * mask)
    x = torch.randn(3, full.shape[1], generator=g, dtype=torch.float64)
    torch.testing.assert_close(sk.linear(x, W), x @ (dense * mask).t())


def test_nan_and_inf_are_stored_values():
    dense, mask = pruned(2, 8, 1, 1, rows=4)
    nan_at = mask.nonzero()[[0, 5]]
    dense[nan_at[0, 0], nan_at[0, 1]] = float("nan")
    dense[nan_at[1, 0], nan_at[1, 1]] = float("inf")
    W = NMMatrix.from_dense(dense, n=2, m=8)
    assert torch.equal(W.column_indices(), torch.stack([row.nonzero().flatten() for row in mask]))
    torch.testing.assert_close(W.to_dense(), dense, rtol=0, atol=0, equal_nan=True)


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "n, m, vector, block, rows, bad_row, bad_cols, message",
    [
        (2, 4, 1, 1, 5, 1, [4, 5, 7], r"rows 1\.\.1, columns 4\.\.7 hold 3 nonzero positions"),
        (2, 8, 4, 1, 6, 5, [8, 9, 10], r"rows 4\.\.5, columns 8\.\.15 hold 3 nonzero positions"),
        (2, 8, 1, 2, 3, 2, [0, 2, 4], r"rows 2\.\.2, columns 0\.\.7 hold 3 nonzero blocks of 2"),
    ],
)
def test_pattern_violation_names_rows_and_columns(
    n, m, vector, block, rows, bad_row, bad_cols, message
):
    dense, mask = pruned(n, m, vector, block, rows=rows, groups=2)
    # Clear the group (all rows of its row group), then give it three nonzeros (blocks).
    g, k = bad_row // vector, bad_cols[0] // m
    group = (slice(g * vector, (g + 1) * vector), slice(k * m, (k + 1) * m))
    dense[group] = 0.0
    dense[bad_row, bad_cols] = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64)
    with pytest.raises(ValueError, match=rf"dense breaks the {n}:{m} pattern.*{message}"):
        NMMatrix.from_dense(dense, n=n, m=m, vector=vector, block=block)
    bad = mask.clone()
    bad[group] = False
    bad[bad_row, bad_cols] = True
    kept = message.replace("nonzero", "kept")  # (the mask's positions, not dense's)
    with pytest.raises(ValueError, match=rf"mask breaks the {n}:{m} pattern.*{kept}"):
        NMMatrix.from_dense(dense * bad, n=n, m=m, vector=vector, block=block, mask=bad)


def test_vector_rows_must_share_one_choice():
    dense = torch.zeros(4, 4, dtype=torch.float64)
    dense[0, [0, 1]] = 1.0
    dense[1, [2, 3]] = 2.0  # each row is 2:4, but rows 0-1 together use all four columns
    NMMatrix.from_dense(dense, n=2, m=4, vector=1)
    with pytest.raises(ValueError, match=r"rows 0\.\.1, columns 0\.\.3 hold 4"):
        NMMatrix.from_dense(dense, n=2, m=4, vector=2)


@pytest.mark.parametrize(
    "shape, n, m, vector, block, error, pattern",
    [
        ((4, 8), 4, 4, 1, 1, ValueError, r"n must be smaller than m, got n=4, m=4"),
        ((4, 8), 6, 4, 1, 1, ValueError, r"n must be smaller than m"),
        ((4, 8), 2, 8, 1, 4, ValueError, r"block must divide both n and m, got block=4 for 2:8"),
        ((4, 8), 4, 8, 1, 3, ValueError, r"block must divide"),
        ((4, 12), 2, 8, 1, 1, ValueError, r"\(columns, in_features\) 12 must be a multiple of m=8"),
        ((4, 4), 2, 8, 1, 1, ValueError, r"multiple of m=8"),
        ((4, 512), 2, 512, 1, 1, ValueError, r"m must be at most 256, got 512"),
        ((4, 8), 0, 8, 1, 1, ValueError, r"n must be >= 1"),
        ((4, 8), 1, 1, 1, 1, ValueError, r"m must be >= 2"),
        ((4, 8), 2, 8, 0, 1, ValueError, r"vector must be >= 1"),
        ((4, 8), 2, 8, 1, 0, ValueError, r"block must be >= 1"),
        ((4, 8), 2.0, 8, 1, 1, TypeError, r"n must be an int"),
        ((4, 8), 2, "8", 1, 1, TypeError, r"m must be an int"),
        ((4, 8), 2, 8, True, 1, TypeError, r"vector must be an int"),
    ],
)
def test_bad_pattern_arguments(shape, n, m, vector, block, error, pattern):
    dense = weight(*shape, seed=0)
    with pytest.raises(error, match=pattern):
        NMMatrix.from_dense(dense, n=n, m=m, vector=vector, block=block)
    with pytest.raises(error, match=pattern):
        nm_mask(dense, n=n, m=m, vector=vector, block=block)


def test_from_dense_rejects_bad_tensors():
    with pytest.raises(ValueError, match=r"dense must have 2 dim"):
        NMMatrix.from_dense(torch.randn(8), n=2, m=4)
    with pytest.raises(TypeError, match=r"dense must be float"):
        NMMatrix.from_dense(torch.ones(2, 8, dtype=torch.int32), n=2, m=4)
    with pytest.raises(TypeError, match=r"dense must be a torch.Tensor"):
        NMMatrix.from_dense([[1.0, 0.0]], n=1, m=2)
    with pytest.raises(ValueError, match=r"mask must have dense's shape"):
        NMMatrix.from_dense(torch.randn(2, 8), n=2, m=4, mask=torch.ones(2, 4, dtype=torch.bool))


def test_constructor_validates():
    dense, mask = pruned(2, 8, 2, 1, rows=4)
    W = NMMatrix.from_dense(dense, n=2, m=8, vector=2, mask=mask)
    v, i = W.values, W.indices
    with pytest.raises(TypeError, match=r"indices must be uint8, got torch.int64"):
        NMMatrix(v, i.long(), W.shape, 2, 8, 2)
    with pytest.raises(ValueError, match=r"indices must have shape \(2, 6\)"):
        NMMatrix(v, i[:1], W.shape, 2, 8, 2)
    with pytest.raises(ValueError, match=r"values must have shape \(4, 6\)"):
        NMMatrix(v[:, :5], i, W.shape, 2, 8, 2)
    with pytest.raises(TypeError, match=r"values must be float"):
        NMMatrix(v.long(), i, W.shape, 2, 8, 2)
    over = i.clone()
    over[1, 1] = 8
    with pytest.raises(ValueError, match=r"indices must be block offsets below m / block = 8"):
        NMMatrix(v, over, W.shape, 2, 8, 2)
    dup = i.clone()
    dup[0, 3] = dup[0, 2]
    with pytest.raises(ValueError, match=r"indices must be strictly increasing"):
        NMMatrix(v, dup, W.shape, 2, 8, 2)
    swapped = i.clone()
    swapped[0, 0], swapped[0, 1] = i[0, 1], i[0, 0]
    with pytest.raises(ValueError, match=r"strictly increasing"):
        NMMatrix(v, swapped, W.shape, 2, 8, 2)
    with pytest.raises(ValueError, match=r"indices must be on values' device"):
        NMMatrix(v, i.to("meta"), W.shape, 2, 8, 2)
    with pytest.raises(ValueError, match=r"multiple of m=8"):
        NMMatrix(v, i, (4, 20), 2, 8, 2)
    # Offsets may decrease across a group boundary: [.., 7 | 0, ..] is fine.
    ok = torch.tensor([[3, 7, 0, 1, 2, 6]], dtype=torch.uint8)
    NMMatrix(torch.randn(1, 6), ok, (1, 24), 2, 8)


# --------------------------------------------------------------------------- values, dtype, bytes
def test_assigned_values_are_checked():
    dense, mask = pruned(4, 16, 4, 4, rows=6)
    W = NMMatrix.from_dense(dense, n=4, m=16, vector=4, block=4, mask=mask)
    W.values = torch.randn(6, 12, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"values must have shape \(6, 12\)"):
        W.values = torch.randn(6, 13)
    with pytest.raises(TypeError, match=r"values must be float"):
        W.values = torch.zeros(6, 12, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"values must be on"):
        W.values = torch.randn(6, 12, device="meta")


def test_with_values():
    dense, mask = pruned(4, 16, 4, 4, rows=6)
    W = NMMatrix.from_dense(dense, n=4, m=16, vector=4, block=4, mask=mask)
    values = torch.randn(W.values.shape, dtype=torch.float64)
    V = W.with_values(values)
    assert V.values is values and V.indices is W.indices
    assert V.csr_pattern() is W.csr_pattern()  # the derived forms are shared
    expected = torch.zeros_like(dense)
    expected[mask] = values.flatten()
    assert torch.equal(V.to_dense(), expected)
    with pytest.raises(ValueError, match=r"values must have shape \(6, 12\)"):
        W.with_values(torch.randn(6, 13))
    with pytest.raises(ValueError, match=r"values must have shape \(6, 12\)"):
        W.with_values(torch.randn(2, 6, 12))
    with pytest.raises(ValueError, match=r"values must have shape"):
        W.with_values(torch.randn(72))
    with pytest.raises(TypeError, match=r"values must be float"):
        W.with_values(torch.ones(6, 12, dtype=torch.int64))
    with pytest.raises(TypeError, match=r"values must be a torch.Tensor"):
        W.with_values(values.tolist())
    with pytest.raises(ValueError, match=r"values must be on"):
        W.with_values(values.to("meta"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_to_dtype(dtype):
    dense, mask = pruned(2, 8, 1, 1, rows=5)
    W = NMMatrix.from_dense(dense, n=2, m=8, mask=mask)
    V = W.to(dtype=dtype)
    assert V.dtype == dtype and V.indices is W.indices
    assert torch.equal(V.values, W.values.to(dtype))
    assert torch.equal(V.to_dense(), dense.to(dtype))
    assert V.csr_pattern() is W.csr_pattern()  # (the pattern's derived forms are shared)
    assert torch.equal(V.to_csr().to_dense(), dense.to(dtype))
    assert W.cpu().csr_pattern() is W.csr_pattern()
    with pytest.raises(TypeError, match=r"dtype must be a floating dtype"):
        W.to(dtype=torch.int8)


@pytest.mark.parametrize("n, m, vector, block", CONFIGS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_nbytes(n, m, vector, block, dtype):
    rows = 8
    dense, mask = pruned(n, m, vector, block, rows=rows, groups=4, dtype=dtype)
    W = NMMatrix.from_dense(dense, n=n, m=m, vector=vector, block=block, mask=mask)
    value_bytes = rows * 4 * n * torch.tensor([], dtype=dtype).element_size()
    slots = -(-rows // vector) * 4 * n // block
    index_bytes = math.ceil(slots * max(1, math.ceil(math.log2(m // block))) / 8)
    assert W.nbytes == value_bytes + index_bytes
    assert W.nbytes < dense.numel() * dense.element_size()


def test_holds_its_values_and_indices_only():
    """Nothing the size of the weight is kept beside it once built and used (the int64 column
    of every value was kept by from_dense: 2.75 bytes a dense element at 2:8, bf16, not 0.75)."""
    dense, mask = pruned(2, 8, 1, 1, rows=16, groups=8)
    W = NMMatrix.from_dense(dense, n=2, m=8, mask=mask)
    assert torch.equal(W.to_dense(), dense)
    assert torch.equal(W.column_indices(), W.column_indices())  # (built again, the same)
    sk.linear(torch.randn(3, dense.shape[1], dtype=dense.dtype), W)
    kept = [v[1] for k, v in W._cache.items() if k != "sources seen"]  # ((versions), value)
    assert all(isinstance(v, torch.Tensor) for v in kept)
    assert sum(v.numel() * v.element_size() for v in kept) < W.indices.numel()


def test_gradients_flow_to_values():
    dense, mask = pruned(2, 8, 1, 1, rows=5)
    W = NMMatrix.from_dense(dense, n=2, m=8, mask=mask)
    values = W.values.clone().requires_grad_(True)
    g = torch.randn(dense.shape, dtype=torch.float64)
    (W.with_values(values).to_dense() * g).sum().backward()
    assert torch.equal(values.grad, g[mask].view(values.shape))
    values.grad = None
    (W.with_values(values).to_csr().to_dense() * g).sum().backward()
    assert torch.equal(values.grad, g[mask].view(values.shape))


def test_pattern_name_and_repr():
    dense, mask = pruned(8, 16, 2, 8, rows=4)
    W = NMMatrix.from_dense(dense, n=8, m=16, vector=2, block=8, mask=mask)
    assert W.pattern_name == "8:16,v=2,b=8"
    assert NMMatrix.from_dense(dense, n=8, m=16, vector=2, block=8).pattern_name in repr(W)
    assert NMMatrix.from_dense(torch.zeros(2, 8), n=2, m=8).pattern_name == "2:8"


@pytest.mark.parametrize("shape", [(0, 16), (5, 0), (0, 0)])
def test_empty(shape):
    W = NMMatrix.from_dense(torch.zeros(shape), n=2, m=8, vector=4)
    rows, cols = shape
    assert W.values.shape == (rows, cols // 8 * 2)
    assert W.indices.shape == (-(-rows // 4), cols // 8 * 2)
    assert W.packed_indices().numel() == 0 and W.nbytes == 0
    assert torch.equal(W.to_dense(), torch.zeros(shape))
    assert W.to_csr().nnz == 0 and W.to_csr().shape == shape
    assert nm_mask(torch.randn(shape), n=2, m=8, vector=4).shape == shape


def test_what_is_derived_follows_indices_edited_in_place():
    """An N:M matrix's CSR pattern and packed offsets (and a CSR pattern's transpose) were
    kept by name alone: an in-place edit of the indices after a call left them stale."""
    gen = torch.Generator().manual_seed(3)
    dense = torch.randn(4, 16, generator=gen)
    W = NMMatrix.from_dense(dense, 2, 8, mask=nm_mask(dense, 2, 8))
    x = torch.randn(16, 3, generator=gen)
    W.csr_pattern().row_order()  # (kept: the CSR pattern and its row order)
    W.packed_indices(4)
    with torch.no_grad():
        W.indices[0, 0], W.indices[0, 1] = 0, 3  # row 0 first group: 0 and 3 (it was 6 and 7)
    fresh = NMMatrix(W.values, W.indices.clone(), W.shape, 2, 8)
    assert torch.equal(W.csr_pattern().column_indices, fresh.csr_pattern().column_indices)
    assert torch.equal(W.packed_indices(4), fresh.packed_indices(4))
    torch.testing.assert_close(sk.spmm(W.to_csr(), x), W.to_dense() @ x)
    P = sk.CSRMatrix.from_dense(torch.eye(4) + torch.eye(4).roll(1, 1))
    P.pattern.transpose()
    with torch.no_grad():
        P.column_indices[1] = 2  # row 0 keeps columns 0 and 2
    twin = sk.CSRMatrix(P.row_offsets.clone(), P.column_indices.clone(), P.values, P.shape)
    got, want = P.pattern.transpose(), twin.pattern.transpose()
    assert torch.equal(got[0].column_indices, want[0].column_indices)
    assert torch.equal(got[1], want[1])


def test_to_takes_a_dtype_as_its_first_argument():
    """.to(torch.float16), as tensors and modules take it (it was read as a device)."""
    A = CSRMatrix.from_dense(torch.eye(3))
    W = NMMatrix.from_dense(torch.tensor([[1.0, 0.0, 0.0, 2.0]]), 2, 4)
    for matrix in (A, W):
        assert matrix.to(torch.float16).values.dtype == torch.float16
        assert matrix.to("cpu", torch.bfloat16).values.dtype == torch.bfloat16
        with pytest.raises(TypeError, match="dtype given twice"):
            matrix.to(torch.float16, torch.float32)
