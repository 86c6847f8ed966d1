"""The Triton CSR SDDMM kernel: in the interpreter on CPU (small shapes), compiled on CUDA (gpu).

Each check compares with a float64 product on fresh random data; outputs are poisoned with NaN
first so an entry the kernel never writes shows up.
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
    sddmm_want_and_bound,
    skip_interpreter_on_gpu_machine,
    with_column_dtype,
)
from sparsekernels.ops import _dispatch


def _launch_poisoned(P, x, y, block_nnz=None, block_k=None):
    from sparsekernels.kernels import sddmm_csr as kernel
    from sparsekernels.kernels.sddmm_tuning import sddmm_csr_config

    batch = torch.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    out = torch.full((*batch, P.nnz), float("nan"), dtype=x.dtype, device=x.device)
    config = sddmm_csr_config(x.shape[-1], P.nnz, P.shape[0])
    kernel.sddmm_csr(
        row_offsets=P.row_offsets,
        column_indices=P.column_indices,
        x=x,
        y=y,
        row_order=P.row_order,
        out=out.view(-1, P.nnz),
        block_nnz=block_nnz or config.block_nnz,
        block_k=block_k or config.block_k,
        num_warps=config.num_warps,
    )
    return out


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_entry_written(device, dtype, gen):
    skip_interpreter_on_gpu_machine(device)
    P = random_csr(19, 23, 0.3, gen, dtype, device)  # empty rows, 19 rows, K not a power of 2
    x = randn(19, 37, gen=gen, dtype=dtype, device=device)
    y = randn(23, 37, gen=gen, dtype=dtype, device=device)
    assert_close(_launch_poisoned(P, x, y), *sddmm_want_and_bound(P, x, y), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("wide", [False, True], ids=["int32", "int64"])
def test_chunks_along_row_and_k(device, wide, gen, monkeypatch):
    """Rows longer than BLOCK_NNZ and K longer than BLOCK_K, with partial last chunks; offsets
    in int32 and (forced, as past 2^31) int64, with x transposed (a stride along K)."""
    from sparsekernels.kernels import sddmm_csr

    skip_interpreter_on_gpu_machine(device)
    if wide:
        monkeypatch.setattr(sddmm_csr, "INT32_LIMIT", 0)
    P = random_csr(3, 70, 0.9, gen, torch.float64, device, empty_rows=False)
    x, y = randn(3, 45, gen=gen, device=device), randn(70, 45, gen=gen, device=device)
    for xs in (x, x.t().contiguous().t()):  # row-major and transposed (stride_xk = 3)
        got = _launch_poisoned(P, xs, y, block_nnz=16, block_k=16)
        assert_close(got, *sddmm_want_and_bound(P, xs, y), torch.float64)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_degenerate_shapes(device, gen):
    skip_interpreter_on_gpu_machine(device)
    for M, N, K, density in [(1, 1, 1, 1.0), (1, 40, 3, 0.5), (6, 4, 1, 0.9), (4, 7, 200, 0.5)]:
        P = random_csr(M, N, density, gen, torch.float64, device, empty_rows=False)
        x, y = randn(M, K, gen=gen, device=device), randn(N, K, gen=gen, device=device)
        got = sk.sddmm(x, y, P, backend="triton").values
        assert_close(got, *sddmm_want_and_bound(P, x, y), torch.float64)
    empty = random_csr(3, 5, 0.0, gen, torch.float64, device)  # no stored entries
    x, y = randn(3, 2, gen=gen, device=device), randn(5, 2, gen=gen, device=device)
    assert sk.sddmm(x, y, empty, backend="triton").values.shape == (0,)
    no_rows = random_csr(0, 5, 0.5, gen, torch.float64, device)
    assert sk.sddmm(x[:0], y, no_rows, backend="triton").values.shape == (0,)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_batched_strided_and_nan(device, gen):
    skip_interpreter_on_gpu_machine(device)
    P = random_csr(11, 9, 0.4, gen, torch.float64, device)
    x = randn(2, 6, 11, gen=gen, device=device).transpose(1, 2)  # strided (2, 11, 6)
    y = randn(6, 9, gen=gen, device=device).t()  # strided, unbatched (9, 6)
    got = _launch_poisoned(P, x, y)
    assert got.shape == (2, P.nnz)
    assert_close(got, *sddmm_want_and_bound(P, x, y), torch.float64)
    x1 = randn(11, 6, gen=gen, device=device)[:, ::2]  # column stride 2, unbatched
    y3 = randn(3, 9, 3, gen=gen, device=device)
    got = sk.sddmm(x1, y3, P, backend="triton").values
    assert_close(got, *sddmm_want_and_bound(P, x1, y3), torch.float64)

    y2 = randn(9, 4, gen=gen, device=device)
    unused = ~(P.to_dense() != 0).any(0)
    y2[unused] = float("nan")  # rows of y no stored entry reads must not spread NaN
    x2 = randn(11, 4, gen=gen, device=device)
    x2[0] = float("nan")  # row 0 of x reaches row 0's entries only
    got = _launch_poisoned(P, x2, y2)
    want, bound = sddmm_want_and_bound(P, x2, y2)
    assert_close(got, want, bound.nan_to_num(1.0), torch.float64)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_backward_through_kernel(device, gen):
    skip_interpreter_on_gpu_machine(device)
    P = random_csr(10, 8, 0.4, gen, torch.float64, device)
    x = randn(2, 10, 5, gen=gen, device=device).requires_grad_()
    y = randn(8, 5, gen=gen, device=device).requires_grad_()
    grad = randn(2, P.nnz, gen=gen, device=device)
    sk.sddmm(x, y, P, backend="triton").values.backward(grad)
    x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    rows, cols = P.pattern.row_indices().to(device), P.column_indices.long()
    (x2 @ y2.t())[..., rows, cols].backward(grad)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(y.grad, y2.grad)


def test_dispatch_rules():
    cpu = _dispatch.Problem(torch.device("cpu"), torch.float16, {"k": 8, "batch": 1})
    assert _dispatch.choose("sddmm_csr", cpu) == "reference"  # the interpreter only when forced
    # dense first, where the whole product is small and dense enough (tests/test_sddmm.py)
    assert _dispatch.backends("sddmm_csr")[:2] == ["dense", "triton"]
    huge = _dispatch.Problem(torch.device("cuda"), torch.float16, {"k": 8, "batch": 70000})
    assert any("grid limit" in r for r in _dispatch.explain("sddmm_csr", huge)["triton"])
    assert _dispatch.choose("sddmm_csr", huge) == "reference"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape,density", [((2048, 2048, 64), 0.1), ((777, 1500, 300), 0.3)])
def test_large_on_cuda(dtype, shape, density, gen):
    M, N, K = shape
    P = random_csr(M, N, density, gen, dtype, "cuda")
    x = randn(3, M, K, gen=gen, dtype=dtype, device="cuda")
    y = randn(N, K, gen=gen, dtype=dtype, device="cuda")
    for backend in (None, "triton", "dense"):  # the automatic choice, then each path
        got = sk.sddmm(x, y, P, backend=backend).values
        assert_close(got, *sddmm_want_and_bound(P, x, y), dtype)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
def test_opcheck_triton(device, gen):
    skip_interpreter_on_gpu_machine(device)
    P = random_csr(6, 5, 0.5, gen, torch.float64, device)
    t, perm = P.pattern.transpose()
    x = randn(2, 6, 3, gen=gen, device=device).requires_grad_()
    y = randn(5, 3, gen=gen, device=device).requires_grad_()
    args = (P.row_offsets, P.column_indices, x, y, t.row_offsets, t.column_indices, perm, "triton")
    torch.library.opcheck(torch.ops.sparsekernels.sddmm_csr.default, args)


def test_entry_config_rule():
    """K 64 at a time, ~2048 products a step on two warps (the H200 sweep in sddmm_tuning), no
    more entries a step than an average row holds."""
    from sparsekernels.kernels.sddmm_tuning import SddmmCsrConfig, sddmm_csr_config

    assert sddmm_csr_config(64, 4096 * 82, 4096) == SddmmCsrConfig(32, 64, 2)
    assert sddmm_csr_config(256, 4096 * 410, 4096) == SddmmCsrConfig(32, 64, 2)
    assert sddmm_csr_config(16, 4096 * 410, 4096) == SddmmCsrConfig(128, 16, 2)
    assert sddmm_csr_config(64, 4096 * 20, 4096) == SddmmCsrConfig(32, 64, 2)  # rows of 20: 32
    assert sddmm_csr_config(64, 4096 * 9, 4096) == SddmmCsrConfig(16, 64, 2)  # short rows
    assert sddmm_csr_config(8, 4096 * 3, 4096) == SddmmCsrConfig(16, 16, 1)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_wider_column_indices_give_the_same_bits(device, index_dtype, gen):
    """int32 / int64 columns (a pattern past 32768 columns) against the matrix's int16."""
    skip_interpreter_on_gpu_machine(device)
    P = random_csr(19, 23, 0.3, gen, torch.float32, device)
    x = randn(19, 37, gen=gen, dtype=torch.float32, device=device)
    y = randn(23, 37, gen=gen, dtype=torch.float32, device=device)
    wide = _launch_poisoned(with_column_dtype(P, index_dtype), x, y)
    assert torch.equal(wide, _launch_poisoned(P, x, y))
