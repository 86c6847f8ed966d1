"""The CSR one-token stream walk (kernels/spmm_csr_token_stream.py): a program's rows walked one
after another, each step's loads issued before the step before it gathers, across row ends.

Float64 references on fresh random data, outputs poisoned with NaN. The shapes put several
steps in one row and several rows in one step's time, empty rows (a row of no step, between
rows of several), programs of one row and of many (37 rows at 4 and 8 a program leave the last
partial), rows owning the arrays' last partial group, fewer entries than one group, and x and
out with strides; x's elements no stored entry uses hold NaN, which must not spread.
"""

import pytest
import torch

import sparsekernels as sk
from _helpers import (
    ALL_DTYPES,
    KERNEL_DEVICES,
    assert_close,
    randn,
    random_csr,
    skip_interpreter_on_gpu_machine,
    spmm_bound,
    x_with_nan_where_unused,
)


def _stream(A, x, bias=None, activation="none", block=32, rows=4):
    from sparsekernels.kernels.spmm_csr_token_stream import spmm_csr_token_stream

    out = torch.full((A.shape[0], 3), float("nan"), dtype=x.dtype, device=x.device)[:, 1]
    spmm_csr_token_stream(
        row_offsets=A.row_offsets,
        column_indices=A.column_indices,
        values=A.values,
        x=x,
        bias=bias,
        row_order=A.row_order,
        out=out,
        activation=activation,
        rows_per_program=rows,
        block=block,
    )
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("block, rows", [(32, 1), (32, 4), (16, 8), (256, 4)])
@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_matches_float64(device, dtype, block, rows, wide, gen, monkeypatch):
    from sparsekernels.kernels import spmm_csr_token_stream as kernel

    skip_interpreter_on_gpu_machine(device)
    if wide:  # the int64 offsets of matrices past 2^31 entries, on a small one
        monkeypatch.setattr(kernel, "INT32_LIMIT", 0)
    # 37 rows x 300: ~15-150 entries a row with empty rows; 5 x 700 rows of many steps
    for M, K, density in [(37, 300, 0.25), (5, 700, 0.5), (9, 40, 0.1), (1, 77, 0.4)]:
        A = random_csr(M, K, density, gen, dtype, device)
        x = x_with_nan_where_unused(A, gen, dtype, device)
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        assert_close(_stream(A, x, block=block, rows=rows), want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_rows_of_mixed_lengths_and_empty_rows(device, gen):
    """Long rows (several steps), short ones (a fraction of a step) and empty ones in one
    program's stream, in every order the row order gives them."""
    skip_interpreter_on_gpu_machine(device)
    dense = randn(12, 200, gen=gen)
    mask = torch.zeros(12, 200, dtype=torch.bool)
    for row, length in enumerate([150, 0, 3, 70, 0, 0, 33, 1, 200, 17, 0, 64]):
        mask[row, torch.randperm(200, generator=gen)[:length]] = True
    A = sk.CSRMatrix.from_dense(dense * mask, mask=mask).to(device=device)
    x = randn(200, gen=gen, device=device)
    want = A.to_dense() @ x
    for rows in (1, 3, 4, 12, 16):
        got = _stream(A, x, block=32, rows=rows)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_last_partial_group_shared_by_rows(device, gen):
    """The arrays end in a partial group owned by three short rows (and an empty one), one
    starting in the last full group: the tail read every owned entry exactly once."""
    skip_interpreter_on_gpu_machine(device)
    dense = randn(6, 50, gen=gen)
    mask = torch.zeros(6, 50, dtype=torch.bool)
    mask[0, :20] = True  # entries 0-19: row 0 ends past the first group
    mask[1, 3:14] = True  # 20-30: crosses into the last full group (16-31)
    mask[2, 7:9] = True  # 31-32: starts in the full groups, ends in the tail
    mask[4, 40:43] = True  # 33-35, tail only (row 3 is empty)
    mask[5, 0:2] = True  # 36-37, tail only
    A = sk.CSRMatrix.from_dense(dense * mask, mask=mask).to(device=device)
    assert A.nnz == 38
    x = randn(50, gen=gen, device=device)
    want = A.to_dense() @ x
    for rows in (1, 2, 4, 8):  # the tail's rows alone in programs, and sharing them
        got = _stream(A, x, block=32, rows=rows)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_fewer_entries_than_a_group(device, gen):
    skip_interpreter_on_gpu_machine(device)
    for rows, cols in [(1, 1), (3, 5), (1, 11)]:
        A = random_csr(rows, cols, 0.6, gen, torch.float64, device, empty_rows=False)
        assert A.nnz < 16
        x = randn(cols, gen=gen, device=device)
        torch.testing.assert_close(_stream(A, x), A.to_dense() @ x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_bias_activation(device, activation, gen):
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(21, 90, 0.3, gen, torch.float64, device)
    x, bias = randn(90, gen=gen, device=device), randn(21, gen=gen, device=device)
    want = sk.spmm(A, x[:, None], bias, activation, backend="reference")[:, 0]
    got = _stream(A, x, bias, activation, rows=4)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_linear_takes_it_on_many_short_rows(device, gen, monkeypatch):
    """sk.linear at one token runs the stream walk where the rule says (here forced onto a
    small weight), with int16 columns, bias fused; the one-token kernel elsewhere."""
    from sparsekernels.kernels import spmm_csr_token, spmm_csr_token_stream, tuning

    skip_interpreter_on_gpu_machine(device)
    calls = []
    launch = spmm_csr_token_stream.spmm_csr_token_stream
    monkeypatch.setattr(
        spmm_csr_token_stream,
        "spmm_csr_token_stream",
        lambda **kw: calls.append(kw) or launch(**kw),
    )
    monkeypatch.setattr(tuning, "CSR_STREAM_MIN_ROWS", 30)
    A = random_csr(33, 70, 0.3, gen, torch.float32, device)
    x = randn(1, 70, gen=gen, dtype=torch.float32, device=device)
    bias = randn(33, gen=gen, dtype=torch.float32, device=device)
    got = sk.linear(x, A, bias, backend="triton")
    assert len(calls) == 1 and calls[0]["column_indices"].dtype == torch.int16
    assert calls[0]["rows_per_program"] == tuning.CSR_STREAM_ROWS
    want = x.double() @ A.to_dense().double().t() + bias.double()
    bound = spmm_bound(A.to_dense(), x.t())[:, 0] + bias.abs()
    assert_close(got[0], want[0], bound, torch.float32)
    token_calls = []
    token = spmm_csr_token.spmm_csr_token
    monkeypatch.setattr(
        spmm_csr_token, "spmm_csr_token", lambda **kw: token_calls.append(kw) or token(**kw)
    )
    monkeypatch.setattr(tuning, "CSR_STREAM_MIN_ROWS", 34)  # one row short of the rule
    sk.linear(x, A, bias, backend="triton")
    assert len(calls) == 1 and len(token_calls) == 1


def test_stream_rule():
    """Many rows (10,000 and more) of at most 640 entries on average: the stream walk; the LLM
    shapes it measured on fall either side."""
    from sparsekernels.kernels import tuning

    rule = tuning.spmm_csr_token_stream_rows
    assert rule(14336, int(14336 * 4096 * 0.1)) == tuning.CSR_STREAM_ROWS  # 90%: 410 a row
    assert rule(16384, int(16384 * 2048 * 0.3)) == tuning.CSR_STREAM_ROWS  # 70%: 614
    assert rule(14336, int(14336 * 4096 * 0.3)) is None  # 70%: 1229 a row
    assert rule(4096, int(4096 * 4096 * 0.1)) is None  # few rows
    assert rule(28672, int(28672 * 8192 * 0.1)) is None  # 819 a row
    assert rule(10_000, 6_400_000) == tuning.CSR_STREAM_ROWS
    assert rule(9_999, 100) is None
    assert rule(10_000, 6_400_001) is None
