"""The CSR one-token kernel (kernels/spmm_csr_token.py): aligned groups, a hand-pipelined walk
and the entries of the arrays' last partial group read one by one.

Float64 references on fresh random data, outputs poisoned with NaN. The shapes put rows'
starts inside groups, rows shorter than a group, rows across many steps (a 32-entry step is
tested beside the tuned 256), programs of one row and of several (21 and 37 rows leave the
last program partial), several rows owning the last partial group, fewer entries than one
group, and x with a stride; x's elements no stored entry uses hold NaN, which must not spread.
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
    with_column_dtype,
    x_with_nan_where_unused,
)


def _token(A, x, bias=None, activation="none", block=256, rows=1, lane_major=False, warps=None,
           asm=False, unmasked=False):  # fmt: skip
    from sparsekernels.kernels import spmm_csr_token as kernel

    out = torch.full((A.shape[0], 3), float("nan"), dtype=x.dtype, device=x.device)[:, 1]
    kernel.spmm_csr_token(
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
        num_warps=warps or rows,
        lane_major=lane_major,
        asm_gather=asm,
        unmasked_middle=unmasked,
    )
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("block, rows", [(32, 1), (256, 1), (32, 4)])
@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
@pytest.mark.parametrize("lane_major", [False, True], ids=["vectors", "lane-major"])
def test_matches_float64(device, dtype, block, rows, wide, lane_major, gen, monkeypatch):
    from sparsekernels.kernels import spmm_csr_token as kernel

    skip_interpreter_on_gpu_machine(device)
    if wide:  # the int64 offsets of matrices past 2^31 entries, on a small one
        monkeypatch.setattr(kernel, "INT32_LIMIT", 0)
    # 37 rows x 300: ~15-150 entries a row, empty rows, nnz not a multiple of 16
    for M, K, density in [(37, 300, 0.25), (5, 700, 0.5), (9, 40, 0.1)]:
        A = random_csr(M, K, density, gen, dtype, device)
        x = x_with_nan_where_unused(A, gen, dtype, device)
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        got = _token(A, x, block=block, rows=rows, lane_major=lane_major)
        assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("block, rows", [(32, 1), (32, 4), (64, 2)])
def test_unmasked_middle_matches_float64(device, dtype, block, rows, gen):
    """The middle steps unmasked: rows of many steps beside rows of one or none in a program
    (no step is whole for every row there), rows starting mid-group, the arrays' tail."""
    skip_interpreter_on_gpu_machine(device)
    for M, K, density in [(23, 600, 0.4), (37, 300, 0.25), (5, 2000, 0.5), (9, 40, 0.1)]:
        A = random_csr(M, K, density, gen, dtype, device)
        x = x_with_nan_where_unused(A, gen, dtype, device)
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        for asm in (False, True) if device == "cuda" and dtype.itemsize == 2 else (False,):
            got = _token(A, x, block=block, rows=rows, asm=asm, unmasked=True)
            assert_close(got, want, bound, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("block, rows, warps", [(32, 1, 1), (256, 1, 1), (256, 2, 1), (512, 1, 2)])
def test_asm_gather_matches_float64(dtype, block, rows, warps, gen):
    """x gathered by inline PTX (kernels/_gather.py): rows in and across groups, the tail,
    empty rows, x strided and NaN where unused."""
    for M, K, density in [(37, 300, 0.25), (5, 700, 0.5), (9, 40, 0.1), (3, 5000, 0.3)]:
        A = random_csr(M, K, density, gen, dtype, "cuda")
        x = x_with_nan_where_unused(A, gen, dtype, "cuda")
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        got = _token(A, x, block=block, rows=rows, warps=warps, asm=True)
        assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("warps", [1, 2])
def test_few_rows_configs(device, dtype, warps, gen):
    """The few-row configurations (tuning.spmm_csr_token_config): one row a program, 512
    entries a step on one warp or across two (the row's sum then crosses warps); rows of
    several steps, of less than one, and empty."""
    skip_interpreter_on_gpu_machine(device)
    for M, K, density in [(9, 2000, 0.6), (37, 300, 0.25), (3, 5000, 0.3)]:
        A = random_csr(M, K, density, gen, dtype, device)
        x = x_with_nan_where_unused(A, gen, dtype, device)
        want = A.to_dense().double() @ torch.nan_to_num(x.double())
        bound = spmm_bound(A.to_dense(), torch.nan_to_num(x)[:, None])[:, 0]
        assert_close(_token(A, x, block=512, rows=1, warps=warps), want, bound, dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_last_partial_group_shared_by_rows(device, gen):
    """The arrays end in a partial group owned by three short rows (and an empty one), one
    starting in the last full group: the walk must stop at the full groups and the tail read
    every owned entry exactly once."""
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
    for rows in (1, 2, 4):  # the tail's rows alone in programs, and sharing them
        got = _token(A, x, block=32, rows=rows)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_fewer_entries_than_a_group(device, gen):
    skip_interpreter_on_gpu_machine(device)
    for rows, cols in [(1, 1), (3, 5), (1, 11)]:
        A = random_csr(rows, cols, 0.6, gen, torch.float64, device, empty_rows=False)
        assert A.nnz < 16
        x = randn(cols, gen=gen, device=device)
        for lane_major in (False, True):
            got = _token(A, x, lane_major=lane_major)
            torch.testing.assert_close(got, A.to_dense() @ x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_bias_activation(device, activation, gen):
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(21, 90, 0.3, gen, torch.float64, device)
    x, bias = randn(90, gen=gen, device=device), randn(21, gen=gen, device=device)
    want = sk.spmm(A, x[:, None], bias, activation, backend="reference")[:, 0]
    for lane_major in (False, True):
        got = _token(A, x, bias, activation, block=32, rows=2, lane_major=lane_major)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_linear_at_one_token_takes_it(device, gen, monkeypatch):
    """sk.linear and sk.spmm at one token run this kernel, with int16 columns; the bias and
    the gradient path agree with float64."""
    from sparsekernels.kernels import spmm_csr_token as kernel

    skip_interpreter_on_gpu_machine(device)
    calls = []
    launch = kernel.spmm_csr_token
    monkeypatch.setattr(kernel, "spmm_csr_token", lambda **kw: calls.append(kw) or launch(**kw))
    A = random_csr(33, 70, 0.3, gen, torch.float32, device)
    x = randn(1, 70, gen=gen, dtype=torch.float32, device=device)
    bias = randn(33, gen=gen, dtype=torch.float32, device=device)
    got = sk.linear(x, A, bias, backend="triton")
    assert len(calls) == 1 and calls[0]["column_indices"].dtype == torch.int16
    # 33 short rows: few rows, one a program, 256-entry steps on one warp (the few-row rule)
    assert (calls[0]["rows_per_program"], calls[0]["block"], calls[0]["num_warps"]) == (1, 256, 1)
    want = x.double() @ A.to_dense().double().t() + bias.double()
    bound = spmm_bound(A.to_dense(), x.t())[:, 0] + bias.abs()
    assert_close(got[0], want[0], bound, torch.float32)


def test_config_rule():
    """Past 2048 rows: two rows a program below CSR_TOKEN_TWO_ROWS_BELOW_NNZ entries, one from
    it (the sweep's 90% and 70% LLM weights fall either side). Few rows: one row a program,
    512-entry steps on up to 1024 rows of 256+ entries, two warps on rows of 1024+."""
    from sparsekernels.kernels import tuning

    def config(nnz, rows):
        c = tuning.spmm_csr_token_config(nnz, rows)
        return c.rows_per_program, c.block, c.num_warps

    limit = tuning.CSR_TOKEN_TWO_ROWS_BELOW_NNZ
    assert config(5_900_000, 14336) == (2, 256, 1)
    assert config(17_600_000, 4096) == (1, 256, 1)
    assert config(limit - 1, 4096)[0] == 2
    assert config(limit, 4096)[0] == 1
    assert config(1024 * 1229, 1024) == (1, 512, 2)  # 1024 x 4096 at 70%
    assert config(1024 * 410, 1024) == (1, 512, 1)  # at 90%
    assert config(768 * 230, 768) == (1, 256, 1)  # 768 x 768 at 70%
    assert config(2048 * 1229, 2048) == (1, 256, 1)  # 2048 x 4096 at 70%
    assert config(0, 1) == (1, 256, 1)


@pytest.mark.gpu
def test_linear_gathers_by_asm_where_tuned(gen, monkeypatch):
    from sparsekernels.kernels import spmm_csr_token as kernel
    from sparsekernels.kernels import tuning
    from sparsekernels.ops import _launch_plans

    monkeypatch.setattr(_launch_plans, "ENABLED", False)  # each call through the route
    calls = []
    launch = kernel.spmm_csr_token
    monkeypatch.setattr(kernel, "spmm_csr_token", lambda **kw: calls.append(kw) or launch(**kw))
    A = random_csr(300, 2000, 0.3, gen, torch.bfloat16, "cuda")
    x = randn(1, 2000, gen=gen, dtype=torch.bfloat16, device="cuda")
    want = x.double() @ A.to_dense().double().t()
    bound = spmm_bound(x, A.to_dense().t())
    for flag in (False, True):
        monkeypatch.setattr(tuning, "CSR_TOKEN_ASM_GATHER", flag)
        assert_close(sk.linear(x, A), want, bound, torch.bfloat16)
        assert calls[-1]["asm_gather"] is flag


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_wider_column_indices_give_the_same_bits(device, index_dtype, gen):
    """int32 / int64 columns (a pattern past 32768 columns) against the matrix's int16."""
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(37, 600, 0.3, gen, torch.float32, device)
    x = randn(600, gen=gen, dtype=torch.float32, device=device)
    wide = _token(with_column_dtype(A, index_dtype), x, block=64, rows=2)
    assert torch.equal(wide, _token(A, x, block=64, rows=2))
