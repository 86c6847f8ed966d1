"""The CSR one-token kernel on byte columns (kernels/spmm_csr_token_bytes.py) and the format it
reads (Pattern.column_bytes).

The format: base + lo gives back every column (bases up to 65535, whose word is a negative
int32); None where a group touches three rows, a row's part of a group spans 256 columns or
K > 65536. The kernel: float64 references on fresh random data, outputs poisoned with NaN, x's
unused elements NaN (a wrong base or half reads one). The shapes put rows' starts inside
groups (the high half), empty rows, rows across many steps, the arrays' last partial group
shared by two rows, fewer entries than a group, a single row, K = 1 and K = 65536.
"""

import pytest
import torch

import sparsekernels as sk
from _helpers import (
    ALL_DTYPES,
    KERNEL_DEVICES,
    assert_close,
    randn,
    skip_interpreter_on_gpu_machine,
    spmm_bound,
)


def _csr(mask: torch.Tensor, gen, dtype=torch.float64, device="cpu") -> sk.CSRMatrix:
    dense = randn(*mask.shape, gen=gen) * mask
    dense[mask & (dense == 0)] = 1.0  # stored values are never zero
    return sk.CSRMatrix.from_dense(dense.to(dtype), mask=mask).to(device=device)


def _eligible_mask(M, K, density, gen) -> torch.Tensor:
    """Random rows of at least 16 entries (no group can then touch three rows), every third
    row empty."""
    mask = torch.rand(M, K, generator=gen) < density
    for r in range(M):
        if mask[r].sum() < 16:
            mask[r, torch.randperm(K, generator=gen)[: min(16, K)]] = True
    if M > 2:
        mask[::3] = False
    return mask


def _lengths_mask(lengths, K=64) -> torch.Tensor:
    """Rows of the given lengths, each from column 0."""
    mask = torch.zeros(len(lengths), K, dtype=torch.bool)
    for r, n in enumerate(lengths):
        mask[r, :n] = True
    return mask


def _rebuilt_columns(P) -> torch.Tensor:
    """base + lo for every entry: the low half for the row owning the group's first entry."""
    lo, words = P.column_bytes()
    group = torch.arange(P.nnz, device=lo.device) // 16
    rows = P.row_indices()
    word = words.long()[group] & 0xFFFFFFFF
    base = torch.where(rows == rows[group * 16], word & 0xFFFF, word >> 16)
    return base + lo.long()


def _token(A, x, bias=None, activation="none", block=256, rows=1):
    from sparsekernels.kernels import spmm_csr_token_bytes as kernel

    lo, bases = A.pattern.column_bytes()
    out = torch.full((A.shape[0], 3), float("nan"), dtype=x.dtype, device=x.device)[:, 1]
    kernel.spmm_csr_token_bytes(
        row_offsets=A.row_offsets,
        column_bytes=lo,
        column_bases=bases,
        values=A.values,
        x=x,
        bias=bias,
        row_order=A.row_order,
        out=out,
        activation=activation,
        rows_per_program=rows,
        block=block,
        num_warps=rows,
    )
    return out


def _x_with_nan_where_unused(A, gen, dtype, device):
    """x (K,) with a stride of 2, NaN at the columns no stored entry reads."""
    x = randn(A.shape[1], 2, gen=gen, dtype=dtype, device=device)[:, 0]
    used = torch.zeros(A.shape[1], dtype=torch.bool, device=device)
    used[A.column_indices.long()] = True
    x[~used] = float("nan")
    return x


def _far_columns_mask(gen) -> torch.Tensor:
    """K = 65536: rows alternating between columns near 0 and near 65535 (bases past 32767),
    each part of a group within 255 columns; row 2's entries 17 apart (bytes past 127)."""
    mask = torch.zeros(4, 2**16, dtype=torch.bool)
    mask[0, :200] = torch.rand(200, generator=gen) < 0.4
    mask[1, -250:] = torch.rand(250, generator=gen) < 0.4
    mask[2, 1000 : 1000 + 32 * 17 : 17] = True
    mask[3, -100:] = True
    return mask


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_column_bytes_rebuild_every_column(device, gen):
    cases = [_eligible_mask(M, K, d, gen) for M, K, d in [(37, 300, 0.25), (6, 3000, 0.3)]]
    cases += [_far_columns_mask(gen), _lengths_mask([16, 5, 27, 0, 40]), _lengths_mask([2], 1)]
    for mask in cases:
        P = _csr(mask, gen, device=device).pattern
        lo, bases = P.column_bytes()
        assert lo.dtype == torch.uint8 and lo.shape == (P.nnz,)
        assert bases.dtype == torch.int32 and bases.shape == ((P.nnz + 15) // 16,)
        assert torch.equal(_rebuilt_columns(P), P.column_indices.long())
        assert P.column_bytes()[0] is lo  # cached
    far = _csr(_far_columns_mask(gen), gen, device=device).pattern
    assert (far.column_bytes()[1] < 0).any()  # a high half past 32767
    assert far.column_bytes()[0].max() == 255  # a group's part spanning 255 columns


def test_column_bytes_eligibility(gen):
    def bytes_of(mask):
        return _csr(mask, gen).pattern.column_bytes()

    assert bytes_of(_lengths_mask([20, 5, 20])) is None  # group 16-31 holds rows 0, 1 and 2
    assert bytes_of(_lengths_mask([16, 5, 27])) is not None  # a short row starting a group
    assert bytes_of(_lengths_mask([20, 0, 0, 30])) is not None  # empty rows touch no group
    assert bytes_of(_lengths_mask([1] * 5, K=1)) is None  # K = 1: five one-entry rows
    for span, eligible in [(255, True), (256, False)]:
        mask = torch.zeros(2, 600, dtype=torch.bool)
        mask[0, [3, 3 + span]] = True
        mask[1, 300:340] = True
        assert (bytes_of(mask) is not None) == eligible, span
    wide = torch.zeros(2, 2**16 + 1, dtype=torch.bool)
    wide[:, :20] = True
    assert bytes_of(wide) is None  # K = 65537
    assert bytes_of(wide[:, :-1]) is not None  # K = 65536
    lo, bases = bytes_of(torch.zeros(3, 10, dtype=torch.bool))
    assert lo.numel() == 0 and bases.numel() == 0


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("block, rows", [(32, 1), (256, 1), (32, 2), (256, 2)])
@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_matches_float64(device, dtype, block, rows, wide, gen, monkeypatch):
    from sparsekernels.kernels import spmm_csr_token as int16

    skip_interpreter_on_gpu_machine(device)
    if wide:  # the int64 offsets of matrices past 2^31 entries, on a small one
        monkeypatch.setattr(int16, "INT32_LIMIT", 0)
    masks = [_eligible_mask(M, K, d, gen) for M, K, d in [(37, 300, 0.25), (5, 700, 0.5)]]
    masks += [_eligible_mask(1, 100, 0.5, gen), _lengths_mask([1, 1], K=1)]  # one row; K = 1
    masks += [_far_columns_mask(gen)]
    for mask in masks:
        A = _csr(mask, gen, dtype, device)
        x = _x_with_nan_where_unused(A, gen, dtype, device)
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        assert_close(_token(A, x, block=block, rows=rows), want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_last_partial_group_shared_by_rows(device, gen):
    """The arrays end in a partial group: after row 0's end, row 1 lies in the tail alone (the
    tail's high half); row 2 starts inside a full group (its high half) and ends in the tail
    (the low half there); row 5 starts exactly at the tail."""
    skip_interpreter_on_gpu_machine(device)
    for lengths in ([34, 4], [20, 0, 18], [0, 20, 25, 0, 19, 6]):
        A = _csr(_lengths_mask(lengths, K=50), gen, device=device)
        assert A.nnz % 16 and A.pattern.column_bytes() is not None
        x = randn(50, gen=gen, device=device)
        want = A.to_dense() @ x
        for rows in (1, 2, 4):  # the tail's rows alone in programs, and sharing them
            got = _token(A, x, block=32, rows=rows)
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_fewer_entries_than_a_group(device, gen):
    skip_interpreter_on_gpu_machine(device)
    for lengths, cols in [([1], 1), ([3, 2], 5), ([11], 11), ([0, 7, 0, 4, 0], 9)]:
        A = _csr(_lengths_mask(lengths, K=cols), gen, device=device)
        x = randn(cols, gen=gen, device=device)
        got = _token(A, x, rows=2)
        torch.testing.assert_close(got, A.to_dense() @ x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_bias_activation(device, activation, gen):
    skip_interpreter_on_gpu_machine(device)
    A = _csr(_eligible_mask(21, 90, 0.3, gen), gen, device=device)
    x, bias = randn(90, gen=gen, device=device), randn(21, gen=gen, device=device)
    want = sk.spmm(A, x[:, None], bias, activation, backend="reference")[:, 0]
    for rows in (1, 2):
        got = _token(A, x, bias, activation, block=32, rows=rows)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
