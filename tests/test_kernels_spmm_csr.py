"""The Triton CSR SpMM kernel: in the interpreter on CPU (small shapes), compiled on CUDA (gpu).

Each check compares with the float64 reference on fresh random data; outputs are poisoned with
NaN first so an element the kernel never writes shows up.
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
)


def _launch_poisoned(A, B, bias=None, activation="none", cols=None):
    from sparsekernels.kernels import spmm_csr as kernel
    from sparsekernels.kernels.tuning import spmm_csr_config

    cols = B.shape[1] if cols is None else cols  # a padded B has more columns than the product
    out = torch.full((1, A.shape[0], cols), float("nan"), dtype=B.dtype, device=B.device)
    config = spmm_csr_config(cols, A.shape[0], A.values.element_size())
    kernel.spmm_csr(
        row_offsets=A.row_offsets,
        column_indices=A.column_indices,
        values=A.values,
        b=B,
        bias=bias,
        row_order=A.row_order,
        out=out,
        activation=activation,
        block_rows=config.block_rows,
        block_nnz=config.block_nnz,
        block_n=config.block_n,
        num_warps=config.num_warps,
    )
    return out[0]


def test_config_rule():
    """DLMC's small matrices: 32-column tiles below N = 256; one row and 64 columns in half
    precision where the LLM tile would leave few programs; the LLM tile otherwise."""
    from sparsekernels.kernels.tuning import SpmmCsrConfig, spmm_csr_config

    llm = SpmmCsrConfig(4, 32, 128, 4)
    assert spmm_csr_config(196, 2304, 2) == SpmmCsrConfig(4, 32, 32, 4)
    assert spmm_csr_config(49, 2048, 4) == SpmmCsrConfig(4, 32, 32, 4)
    assert spmm_csr_config(784, 128, 2) == SpmmCsrConfig(1, 32, 64, 2)
    assert spmm_csr_config(784, 128, 4) == llm  # fp32 keeps it
    assert spmm_csr_config(2048, 512, 2) == llm  # 2048 programs: enough
    assert spmm_csr_config(256, 4096, 2) == llm  # LLM weights
    # below 256 columns LLM weights take one tile up to 128 columns wide: one pass a row
    assert spmm_csr_config(49, 4096, 4) == SpmmCsrConfig(4, 32, 64, 4)
    assert spmm_csr_config(128, 14336, 2) == SpmmCsrConfig(4, 32, 128, 4)
    assert spmm_csr_config(24, 4096, 4) == SpmmCsrConfig(4, 32, 32, 4)
    assert spmm_csr_config(256) == llm  # rows unknown
    assert spmm_csr_config(8) == SpmmCsrConfig(4, 128, 8, 2)


def test_dense_fallback_rule():
    """Half precision densifies past 16 columns, except the smallest products (N <= 256, at
    most 3M multiply-adds and 5% stored), where the CSR kernel's one launch wins; strict fp32
    from 14% stored, or 30% for products of at most 24M multiply-adds."""
    from sparsekernels.kernels.tuning import spmm_csr_prefers_dense as prefers_dense

    assert not prefers_dense(256, 0.02, True, 5243 * 256)  # 512 x 512 at 2%
    assert prefers_dense(256, 0.1, True, 26214 * 256)  # at 10%: 6.7M
    assert not prefers_dense(196, 0.05, True, 13107 * 196)  # 1024 x 256 at 5%: 2.6M
    assert prefers_dense(64, 0.1, True, 14746 * 64)  # 384 x 384 at 10%: 0.9M, yet 10% stored
    assert prefers_dense(112, 0.3, True, 44237 * 112) and prefers_dense(64, 0.3, True, 44237 * 64)
    assert prefers_dense(784, 0.02, True, 5243 * 784)  # wide N
    assert prefers_dense(64, 0.02, True)  # products unknown
    assert not prefers_dense(16, 0.5, True)  # the decode sizes
    assert not prefers_dense(2048, 0.1, False) and prefers_dense(2048, 0.2, False)
    assert not prefers_dense(784, 0.2, False, 13107 * 784)  # fp32, small: 10M
    assert prefers_dense(256, 0.3, False, 314573 * 256)  # 2048 x 512 at 30%: 80M
    assert prefers_dense(256, 0.5, False, 131072 * 256)  # half stored: 34M


@pytest.mark.gpu
@pytest.mark.parametrize(("rows", "density", "want_kernel"), [(512, 0.02, True), (512, 0.2, False)])
def test_route_takes_kernel_for_small_products(rows, density, want_kernel, gen, monkeypatch):
    """bf16 at N = 256: the automatic route runs the CSR kernel on 512 x 512 at 2% and
    densifies at 20%, and both answers are right."""
    from sparsekernels.kernels import spmm_csr as kernel

    calls = []
    launch = kernel.spmm_csr
    monkeypatch.setattr(kernel, "spmm_csr", lambda **kw: calls.append(1) or launch(**kw))
    A = random_csr(rows, 512, density, gen, torch.bfloat16, "cuda")
    B = randn(512, 256, gen=gen, dtype=torch.bfloat16, device="cuda")
    got = sk.spmm(A, B)
    assert bool(calls) == want_kernel
    assert_close(
        got, A.to_dense().double() @ B.double(), spmm_bound(A.to_dense(), B), torch.bfloat16
    )


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_few_program_tile_written(device, dtype, gen):
    """The one-row, 64-column tile (half precision, few programs) at N = 300: a partial column
    tile, empty rows."""
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(9, 40, 0.2, gen, dtype, device)
    B = randn(40, 300, gen=gen, dtype=dtype, device=device)
    got = _launch_poisoned(A, B)
    assert_close(got, A.to_dense().double() @ B.double(), spmm_bound(A.to_dense(), B), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_every_element_written(device, dtype, wide, gen, monkeypatch):
    from sparsekernels.kernels import spmm_csr as kernel

    skip_interpreter_on_gpu_machine(device)
    if wide:  # the int64 offsets of matrices past 2^31 elements, on a small one
        monkeypatch.setattr(kernel, "INT32_LIMIT", 0)
    A = random_csr(19, 40, 0.2, gen, dtype, device)  # empty rows, 19 rows, N not a power of 2
    B = randn(40, 37, gen=gen, dtype=dtype, device=device)
    got = _launch_poisoned(A, B)
    assert_close(got, A.to_dense().double() @ B.double(), spmm_bound(A.to_dense(), B), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("N", [49, 130])
def test_wide_tile_below_256_columns(device, dtype, N, gen, monkeypatch):
    """Below 256 columns, weights of many rows take one tile up to 128 columns wide (one pass
    over a row's entries; forced here on a small weight): a partial tile (49 of 64), two tiles
    with a partial one (130), empty rows; spmm's B as given and linear's aligned x^T."""
    from sparsekernels.kernels import csr_tile_tuning as tiles

    skip_interpreter_on_gpu_machine(device)
    monkeypatch.setattr(tiles, "CSR_WIDE_MIN_PROGRAMS", 0)
    tiles.spmm_csr_config.cache_clear()  # (memoized under the rule's constant)
    try:
        assert tiles.spmm_csr_config(N, 19, 4).block_n == (64 if N == 49 else 128)
        A = random_csr(19, 40, 0.2, gen, dtype, device)
        B = randn(40, N, gen=gen, dtype=dtype, device=device)
        got = _launch_poisoned(A, B)
        assert_close(got, A.to_dense().double() @ B.double(), spmm_bound(A.to_dense(), B), dtype)
        x = randn(N, 40, gen=gen, dtype=dtype, device=device)
        got = sk.linear(x, A, backend="triton")
        want = x.double() @ A.to_dense().double().t()
        assert_close(got, want, spmm_bound(x, A.to_dense().t()), dtype)
    finally:
        tiles.spmm_csr_config.cache_clear()


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_padded_b_columns_are_read_never_stored(device, dtype, gen):
    """A B wider than the product (a copy padded to 16 columns: ResNet-50's N = 49 as 64) is
    read past N, which keeps its rows' loads wide, and never stored, whatever it holds there
    (random here); a B narrower than the product is refused."""
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(19, 40, 0.2, gen, dtype, device)
    B = randn(40, 49, gen=gen, dtype=dtype, device=device)
    wide = torch.cat([B, randn(40, 15, gen=gen, dtype=dtype, device=device)], dim=1)
    got = _launch_poisoned(A, wide, cols=49)
    assert_close(got, A.to_dense().double() @ B.double(), spmm_bound(A.to_dense(), B), dtype)
    with pytest.raises(ValueError, match="b needs at least out's 64 columns, got 49"):
        _launch_poisoned(A, B, cols=64)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("tokens", [17, 49])
def test_linear_copies_x_row_major_past_16_tokens(device, tokens, gen, monkeypatch):
    """linear's x^T reaches the general kernel row-major and 16-column aligned (read strided, a
    gathered row of B was N loads K apart), with bias, against float64; spmm's row-major B is
    not copied."""
    from sparsekernels.kernels import spmm_csr as kernel

    skip_interpreter_on_gpu_machine(device)
    launch, seen = kernel.spmm_csr, []
    monkeypatch.setattr(
        kernel, "spmm_csr", lambda **kw: seen.append(kw["b"].stride()) or launch(**kw)
    )
    A = random_csr(37, 50, 0.1, gen, torch.float32, device)
    x = randn(tokens, 50, gen=gen, dtype=torch.float32, device=device)
    bias = randn(37, gen=gen, dtype=torch.float32, device=device)
    got = sk.linear(x, A, bias, backend="triton")
    width = -(-tokens // 16) * 16
    want = x.double() @ A.to_dense().double().t() + bias.double()
    bound = spmm_bound(x, A.to_dense().t()) + bias.double().abs()
    assert_close(got, want, bound, torch.float32)
    B = x.t().contiguous()
    assert_close(sk.spmm(A, B, backend="triton"), A.to_dense().double() @ B.double(),
                 spmm_bound(A.to_dense(), B), torch.float32)  # fmt: skip
    assert seen == [(width, 1), (tokens, 1)]


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("N", [2, 5, 8, 16])
def test_decode_sizes_in_every_b_layout(device, N, gen):
    """x^T (linear's column-major B), row-major B, and B padded to an aligned power-of-two
    width (the fast load, ops._layout.padded_rows) give the same product."""
    from sparsekernels.ops._layout import padded_rows

    skip_interpreter_on_gpu_machine(device)
    A = random_csr(23, 40, 0.3, gen, torch.float32, device)
    x = randn(N, 40, gen=gen, dtype=torch.float32, device=device)
    want, bound = A.to_dense().double() @ x.t().double(), spmm_bound(A.to_dense(), x.t())
    for B in (x.t(), x.t().contiguous(), padded_rows(x.t())):
        assert_close(_launch_poisoned(A, B, cols=N), want, bound, torch.float32)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_bias_activation(device, activation, gen):
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(13, 21, 0.3, gen, torch.float64, device)
    B, bias = randn(21, 9, gen=gen, device=device), randn(13, gen=gen, device=device)
    got = sk.spmm(A, B, bias, activation, backend="triton")
    want = sk.spmm(A, B, bias, activation, backend="reference")
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_degenerate_shapes(device, gen):
    skip_interpreter_on_gpu_machine(device)
    for M, K, N, density in [
        (1, 1, 1, 1.0),
        (1, 50, 3, 0.5),
        (6, 1, 4, 0.9),
        (4, 7, 1, 0.5),
        (3, 5, 2, 0.0),
    ]:
        A = random_csr(M, K, density, gen, torch.float64, device, empty_rows=False)
        B = randn(K, N, gen=gen, device=device)
        torch.testing.assert_close(sk.spmm(A, B, backend="triton"), A.to_dense() @ B)
    empty = random_csr(0, 5, 0.5, gen, torch.float64, device)
    assert sk.spmm(empty, randn(5, 3, gen=gen, device=device), backend="triton").shape == (0, 3)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_batched_strided_and_nan(device, wide, gen, monkeypatch):
    from sparsekernels.kernels import spmm_csr as kernel

    skip_interpreter_on_gpu_machine(device)
    if wide:
        monkeypatch.setattr(kernel, "INT32_LIMIT", 0)
    A = random_csr(11, 16, 0.3, gen, torch.float64, device)
    values = randn(2, A.nnz, gen=gen, device=device)
    B = randn(2, 9, 16, gen=gen, device=device).transpose(1, 2)  # strided (2, 16, 9)
    Ab = A.with_values(values)
    torch.testing.assert_close(sk.spmm(Ab, B, backend="triton"), torch.bmm(Ab.to_dense(), B))
    B2 = randn(16, 4, gen=gen, device=device)
    unused = ~(A.to_dense() != 0).any(0)
    B2[unused, 0] = float("nan")  # structural zeros must not spread NaN
    got = sk.spmm(A, B2, backend="triton")
    assert not torch.isnan(got[:, 0]).any()


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_backward_through_kernel(device, gen):
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(10, 12, 0.4, gen, torch.float64, device)
    values = A.values.clone().requires_grad_()
    B = randn(12, 5, gen=gen, device=device).requires_grad_()
    grad = randn(10, 5, gen=gen, device=device)
    sk.spmm(A.with_values(values), B, activation="relu", backend="triton").backward(grad)
    dense = A.to_dense().detach().requires_grad_()
    B2 = B.detach().clone().requires_grad_()
    torch.relu(dense @ B2).backward(grad)
    torch.testing.assert_close(
        values.grad, dense.grad[A.pattern.row_indices(), A.column_indices.long()]
    )
    torch.testing.assert_close(B.grad, B2.grad)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_wider_column_indices_give_the_same_bits(device, index_dtype, gen):
    """int32 / int64 columns (a pattern past 32768 columns) against the matrix's int16."""
    skip_interpreter_on_gpu_machine(device)
    A = random_csr(37, 90, 0.3, gen, torch.float32, device)
    B = randn(90, 20, gen=gen, dtype=torch.float32, device=device)
    assert A.column_indices.dtype == torch.int16
    assert torch.equal(
        _launch_poisoned(with_column_dtype(A, index_dtype), B), _launch_poisoned(A, B)
    )
