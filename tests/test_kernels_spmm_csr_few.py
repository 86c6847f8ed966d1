"""The CSR few-token kernel (kernels/spmm_csr_few.py): the one-token kernel's aligned walk with a
row of B gathered per entry, for 2-16 columns.

Float64 references on fresh random data, outputs poisoned with NaN. Shapes as for the one-token
kernel (rows starting inside groups, rows shorter than a group, rows across many steps, the
arrays' last partial group shared by rows, fewer entries than a group), in each B layout the
routes pass (linear's strided x^T, row-major, padded to a power-of-two width), N not a power
of two; the rows of B no stored entry reads hold NaN, which must not spread.
"""

import pytest
import torch

import sparsekernels as sk
from _helpers import (
    ALL_DTYPES,
    KERNEL_DEVICES,
    assert_close,
    b_layouts,
    randn,
    random_csr,
    skip_interpreter_on_gpu_machine,
    spmm_bound,
    with_column_dtype,
    xs_with_nan_where_unused,
)
from sparsekernels.ops._layout import padded_rows


def _few(A, B, n, bias=None, activation="none", block=32, rows=1, warps=None, **hints):
    from sparsekernels.kernels import spmm_csr_few as kernel

    out = torch.full((A.shape[0], n + 3), float("nan"), dtype=B.dtype, device=B.device)[:, :n]
    kernel.spmm_csr_few(
        row_offsets=A.row_offsets,
        column_indices=A.column_indices,
        values=A.values,
        b=B,
        bias=bias,
        row_order=A.row_order,
        out=out,
        activation=activation,
        rows_per_program=rows,
        block=block,
        num_warps=warps or rows,
        **hints,
    )
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_cache_hints_change_nothing_but_speed(device, gen):
    """The sweep's cache hints (the weight's streams past L1, B's rows kept) give the product
    bit for bit, poisoned outputs written everywhere."""
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(37, 80, 0.3, gen, torch.float32, device)
    B = padded_rows(randn(5, 80, gen=gen, dtype=torch.float32, device=device).t())
    plain = _few(A, B, 5, block=32, rows=2)
    hinted = _few(A, B, 5, block=32, rows=2, stream_cache=".cg", gather_eviction="evict_last")
    assert torch.equal(plain, hinted)
    want = A.to_dense().double() @ B[:, :5].double()
    assert_close(hinted, want, spmm_bound(A.to_dense(), B[:, :5]), torch.float32)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("n", [2, 5, 16])
@pytest.mark.parametrize("block, rows", [(32, 1), (64, 2)])
def test_matches_float64(device, dtype, n, block, rows, gen):
    skip_interpreter_on_gpu_machine(device)
    for M, K, density in [(37, 300, 0.25), (5, 200, 0.6), (9, 40, 0.1)]:
        A = random_csr(M, K, density, gen, dtype, device)
        x = xs_with_nan_where_unused(A, n, gen, dtype, device)
        clean = torch.nan_to_num(x)
        want = A.to_dense().double() @ clean.t().double()
        bound = spmm_bound(A.to_dense(), clean.t())
        for layout, B in b_layouts(x).items():
            got = _few(A, B, n, block=block, rows=rows)
            assert_close(got, want, bound, dtype), layout


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
@pytest.mark.parametrize("n", [3, 8])
def test_few_rows_config_one_row_on_two_warps(device, dtype, n, gen):
    """The few-row configuration (a row a program, 256 entries a step on two warps: the row's
    sums cross warps) on rows of ~700 entries (steps and a partial one), an empty row, and
    short rows sharing the arrays' last partial group."""
    from sparsekernels.kernels import tuning

    skip_interpreter_on_gpu_machine(device)
    config = tuning.spmm_csr_few_config(n, 1024)
    assert (config.rows_per_program, config.block, config.num_warps) == (1, 256, 2)
    A = random_csr(6, 2000, 0.35, gen, dtype, device)
    x = xs_with_nan_where_unused(A, n, gen, dtype, device)
    clean = torch.nan_to_num(x)
    want = A.to_dense().double() @ clean.t().double()
    got = _few(A, padded_rows(x.t()), n, block=256, rows=1, warps=2)
    assert_close(got, want, spmm_bound(A.to_dense(), clean.t()), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_int64_offsets_and_the_last_partial_group(device, gen, monkeypatch):
    """The arrays end in a partial group owned by several short rows; offsets forced to int64
    (as past 2^31) and int32 give the float64 product."""
    from sparsekernels.kernels import spmm_csr_token

    skip_interpreter_on_gpu_machine(device)
    dense = randn(6, 50, gen=gen)
    mask = torch.zeros(6, 50, dtype=torch.bool)
    mask[0, :20] = True
    mask[1, 3:14] = True
    mask[2, 7:9] = True  # starts in the whole groups, ends in the partial one
    mask[4, 40:43] = True  # row 3 is empty
    mask[5, 0:2] = True
    A = sk.CSRMatrix.from_dense(dense * mask, mask=mask).to(device=device)
    x = randn(3, 50, gen=gen, device=device)
    want = A.to_dense() @ x.t()
    for limit in (2**31, 0):
        monkeypatch.setattr(spmm_csr_token, "INT32_LIMIT", limit)
        for rows in (1, 4):
            for B in b_layouts(x).values():
                got = _few(A, B, 3, rows=rows)
                torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_bias_activation_and_tiny_shapes(device, activation, gen):
    skip_interpreter_on_gpu_machine(device)
    for M, K in [(21, 90), (1, 1), (3, 5)]:
        A = random_csr(M, K, 0.4, gen, torch.float64, device, empty_rows=False)
        x, bias = randn(4, K, gen=gen, device=device), randn(M, gen=gen, device=device)
        got = _few(A, padded_rows(x.t()), 4, bias, activation, rows=2)
        want = sk.spmm(A, x.t(), bias, activation, backend="reference")
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_routes_take_it_up_to_the_tuned_n(device, gen, monkeypatch):
    """linear runs this kernel from 2 tokens up to tuning.CSR_ROW_WALK_MAX_N (16, from the H200
    sweep) with that N's configuration, and the general kernel past it; all agree with float64."""
    from sparsekernels.kernels import spmm_csr_few as kernel
    from sparsekernels.kernels import tuning

    skip_interpreter_on_gpu_machine(device)
    assert tuning.CSR_ROW_WALK_MAX_N == 16
    calls = []
    launch = kernel.spmm_csr_few
    monkeypatch.setattr(kernel, "spmm_csr_few", lambda **kw: calls.append(kw) or launch(**kw))
    A = random_csr(33, 70, 0.3, gen, torch.float32, device)
    bias = randn(33, gen=gen, dtype=torch.float32, device=device)
    for tokens, takes in [(2, True), (5, True), (16, True), (17, False)]:
        calls.clear()
        x = randn(tokens, 70, gen=gen, dtype=torch.float32, device=device)
        got = sk.linear(x, A, bias, backend="triton")
        assert bool(calls) == takes, tokens
        if takes:
            config = tuning.spmm_csr_few_config(tokens, 33)
            assert calls[0]["rows_per_program"] == config.rows_per_program
            assert calls[0]["block"] == config.block
        want = x.double() @ A.to_dense().double().t() + bias.double()
        bound = spmm_bound(A.to_dense(), x.t()).t() + bias.abs()
        assert_close(got, want, bound, torch.float32)


@pytest.mark.parametrize("rows", [0, 1024, 2048, 4096])
@pytest.mark.parametrize("n", range(2, 17))
def test_config_by_tokens_is_a_whole_number_of_groups(n, rows):
    """Every configuration the route may pick walks whole aligned groups and gives each row of a
    program its own warp or shares one: what the kernel's layout assumes."""
    from sparsekernels.kernels import tuning
    from sparsekernels.kernels.spmm_csr_token import GROUP

    config = tuning.spmm_csr_few_config(n, rows)
    assert config.block % GROUP == 0 and config.block >= GROUP
    assert config.rows_per_program in (1, 2, 4)
    assert config.num_warps in (1, 2, 4)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_wider_column_indices_give_the_same_bits(device, index_dtype, gen):
    """int32 / int64 columns (a pattern past 32768 columns) against the matrix's int16."""
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(37, 80, 0.3, gen, torch.float32, device)
    B = padded_rows(randn(5, 80, gen=gen, dtype=torch.float32, device=device).t())
    wide = _few(with_column_dtype(A, index_dtype), B, 5, block=32, rows=2)
    assert torch.equal(wide, _few(A, B, 5, block=32, rows=2))
