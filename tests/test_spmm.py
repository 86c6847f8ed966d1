"""spmm (reference backend) against float64 dense math: CSR and N:M, forward and backward."""

import itertools

import pytest
import torch

import sparsekernels as sk
from _helpers import ALL_DTYPES, assert_close, randn, random_csr, random_nm, spmm_bound

# (M, K, N): not multiples of any block, a single row, K = 1, large K, N = 1.
SHAPES = [(37, 29, 45), (1, 64, 7), (50, 1, 9), (6, 3000, 5), (33, 70, 1)]
NM_PATTERNS = [
    (1, 2, 1, 1),
    (2, 4, 1, 1),
    (1, 4, 4, 1),
    (2, 8, 1, 2),
    (1, 8, 1, 1),
    (4, 8, 8, 2),
    (4, 16, 1, 4),
    (8, 16, 4, 1),
    (16, 32, 1, 8),
    (8, 32, 16, 1),
    (4, 32, 1, 1),
    (3, 32, 4, 1),
    (1, 32, 32, 1),
]


def _dense_ref(A_dense, B, bias=None, activation=None):
    out = A_dense.double() @ B.double()
    if bias is not None:
        out = out + bias.double()[:, None]
    return sk.reference.apply_activation(out, activation or "none")


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("density", [0.05, 0.6])
def test_csr_forward(dtype, shape, density, gen):
    M, K, N = shape
    A = random_csr(M, K, density, gen, dtype)
    B = randn(K, N, gen=gen, dtype=dtype)
    got = sk.spmm(A, B)
    assert got.dtype == dtype and got.shape == (M, N)
    assert_close(got, _dense_ref(A.to_dense(), B), spmm_bound(A.to_dense(), B), dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_csr_bias_activation(dtype, activation, gen):
    A = random_csr(41, 23, 0.3, gen, dtype)
    B, bias = randn(23, 19, gen=gen, dtype=dtype), randn(41, gen=gen, dtype=dtype)
    got = sk.spmm(A, B, bias=bias, activation=activation)
    bound = spmm_bound(A.to_dense(), B) + bias.double().abs()[:, None]
    assert_close(got, _dense_ref(A.to_dense(), B, bias, activation), bound, dtype)


def test_csr_batched(gen):
    A = random_csr(20, 15, 0.3, gen)
    values = randn(3, A.nnz, gen=gen)
    Ab = A.with_values(values)
    B = randn(3, 15, 8, gen=gen)
    want = torch.bmm(Ab.to_dense(), B)
    assert_close(sk.spmm(Ab, B), want, torch.bmm(Ab.to_dense().abs(), B.abs()), torch.float64)
    # shared values, batched B; batched values, shared B
    assert_close(sk.spmm(A, B), A.to_dense() @ B, A.to_dense().abs() @ B.abs(), torch.float64)
    B2 = B[0]
    assert_close(sk.spmm(Ab, B2), Ab.to_dense() @ B2, Ab.to_dense().abs() @ B2.abs(), torch.float64)


@pytest.mark.parametrize("n,m,vector,block", NM_PATTERNS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_nm_forward(n, m, vector, block, dtype, gen):
    rows, cols = 2 * vector + 3, 3 * m
    W = random_nm(rows, cols, n, m, gen, vector, block, dtype)
    B, bias = randn(cols, 11, gen=gen, dtype=dtype), randn(rows, gen=gen, dtype=dtype)
    got = sk.spmm(W, B, bias=bias, activation="relu")
    bound = spmm_bound(W.to_dense(), B) + bias.double().abs()[:, None]
    assert_close(got, _dense_ref(W.to_dense(), B, bias, "relu"), bound, dtype)


def test_structural_zeros_do_not_spread_nan(gen):
    A = random_csr(10, 12, 0.3, gen)
    B = randn(12, 4, gen=gen)
    unused = (A.to_dense() != 0).any(0).logical_not().nonzero()
    used_col = int(A.column_indices[0])
    B[unused[:, 0], 0] = float("nan")
    assert not torch.isnan(sk.spmm(A, B)[:, 0]).any()
    B[used_col, 1] = float("nan")
    out = sk.spmm(A, B)
    touched = A.to_dense()[:, used_col] != 0
    assert torch.isnan(out[:, 1]).eq(touched).all()


def test_stored_nan_and_inf_propagate(gen):
    A = random_csr(8, 9, 0.5, gen, empty_rows=False)
    values = A.values.clone()
    values[0] = float("nan")
    values[-1] = float("inf")
    B = randn(9, 3, gen=gen).abs() + 0.1
    got = sk.spmm(A.with_values(values), B)
    want = A.with_values(values).to_dense() @ B
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got), torch.isinf(want))


@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_csr_backward_matches_masked_dense(activation, gen):
    A = random_csr(17, 13, 0.4, gen)
    values = A.values.clone().requires_grad_()
    B = randn(13, 6, gen=gen).requires_grad_()
    bias = randn(17, gen=gen).requires_grad_()
    grad = randn(17, 6, gen=gen)
    sk.spmm(A.with_values(values), B, bias, activation).backward(grad)

    dense = A.to_dense().detach().requires_grad_()
    B2, bias2 = B.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
    _dense_ref(dense, B2, bias2, activation).backward(grad)
    rows = A.pattern.row_indices()
    torch.testing.assert_close(values.grad, dense.grad[rows, A.column_indices.long()])
    torch.testing.assert_close(B.grad, B2.grad)
    torch.testing.assert_close(bias.grad, bias2.grad)


def test_csr_gradcheck(gen):
    A = random_csr(7, 6, 0.5, gen)
    values = A.values.clone().requires_grad_()
    B = randn(6, 4, gen=gen).requires_grad_()
    bias = randn(7, gen=gen).requires_grad_()
    f = lambda v, b, c: sk.spmm(A.with_values(v), b, c, "gelu")  # noqa: E731
    assert torch.autograd.gradcheck(f, (values, B, bias))
    assert torch.autograd.gradgradcheck(f, (values, B, bias))  # dW's own gradient too


def test_csr_batched_backward(gen):
    A = random_csr(9, 8, 0.5, gen)
    values = randn(2, A.nnz, gen=gen).requires_grad_()
    B = randn(8, 5, gen=gen).requires_grad_()
    assert torch.autograd.gradcheck(lambda v, b: sk.spmm(A.with_values(v), b), (values, B))


@pytest.mark.parametrize("n,m,vector,block", [(2, 4, 1, 1), (2, 8, 4, 2), (3, 32, 1, 1)])
def test_nm_gradcheck(n, m, vector, block, gen):
    W = random_nm(9, 2 * m, n, m, gen, vector, block)
    values = W.values.clone().requires_grad_()
    B = randn(2 * m, 3, gen=gen).requires_grad_()
    bias = randn(9, gen=gen).requires_grad_()
    f = lambda v, b, c: sk.spmm(W.with_values(v), b, c, "relu")  # noqa: E731
    assert torch.autograd.gradcheck(f, (values, B, bias))
    assert torch.autograd.gradgradcheck(f, (values, B, bias))  # through sddmm_nm's backward


def test_dense_backend_matches_reference(gen):
    A = random_csr(23, 31, 0.3, gen)
    B, bias = randn(31, 9, gen=gen), randn(23, gen=gen)
    for act in (None, "relu", "gelu"):
        torch.testing.assert_close(
            sk.spmm(A, B, bias, act, backend="dense"), sk.spmm(A, B, bias, act, backend="reference")
        )
    Ab = A.with_values(randn(2, A.nnz, gen=gen))
    Bb = randn(2, 31, 4, gen=gen)
    torch.testing.assert_close(sk.spmm(Ab, Bb, backend="dense"), torch.bmm(Ab.to_dense(), Bb))
    W = random_nm(12, 32, 2, 8, gen, vector=4, block=2)
    values = W.values.clone().requires_grad_()
    x = randn(5, 32, gen=gen).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda v, x: sk.linear(x, W.with_values(v), backend="dense"), (values, x)
    )


def test_dense_fallback_is_chosen_only_where_tuning_says():
    from sparsekernels.ops import _dispatch

    def problem(device, dtype, **facts):
        return _dispatch.Problem(torch.device(device), dtype, {"batch": 1, **facts})

    big_half = dict(n=2048, density=0.1)
    assert (
        _dispatch.choose("spmm_csr", problem("cpu", torch.bfloat16, **big_half)) == "torch_sparse"
    )
    assert _dispatch.choose("spmm_csr", problem("cuda", torch.bfloat16, **big_half)) == "dense"
    decode = problem("cuda", torch.bfloat16, n=16, density=0.1)
    assert _dispatch.choose("spmm_csr", decode) == "triton"
    sparse_fp32 = problem("cuda", torch.float32, n=2048, density=0.02)
    assert _dispatch.choose("spmm_csr", sparse_fp32) == "triton"
    # the scatter kernel: prepared (tiled) half-precision weights at 9-64 tokens, one matrix
    tiled = lambda dtype, n, density=0.3, rows=4096, **more: _dispatch.choose(  # noqa: E731
        "spmm_csr",
        problem("cuda", dtype, n=n, density=density, rows=rows, k=14336, b_dim=2, tiled=True,
                **more),
    )  # fmt: skip
    assert tiled(torch.bfloat16, 9, 0.1) == tiled(torch.float16, 64) == "scatter"
    # past 32 tokens only on weights of 2^25 elements or more (4096 x 14336, not 1024 x 14336)
    assert tiled(torch.bfloat16, 32, rows=1024) == "scatter"
    assert tiled(torch.bfloat16, 33, rows=1024) == "dense"
    # 8 tokens: at 70% sparsity, or at 90% on weights of 2^24 elements or more
    assert tiled(torch.bfloat16, 8) == tiled(torch.bfloat16, 8, 0.1) == "scatter"
    assert tiled(torch.bfloat16, 8, 0.1, rows=1024) == "triton"
    assert tiled(torch.bfloat16, 7) == "triton"
    assert tiled(torch.bfloat16, 65) == "dense"
    assert tiled(torch.float32, 16) == "triton" and tiled(torch.bfloat16, 16, batch=2) != "scatter"
    assert _dispatch.choose("spmm_csr", problem("cuda", torch.bfloat16, n=16, density=0.3)) == (
        "triton"
    )  # not prepared: a transposed product's values
    on_cpu = _dispatch.explain("spmm_csr", problem("cpu", torch.bfloat16, n=16, tiled=True))
    assert "needs CUDA" in on_cpu["scatter"][0]
    nm = dict(n=2048, transpose=False)
    pick = lambda v, n, m: _dispatch.choose(  # noqa: E731
        "spmm_nm", problem("cuda", torch.bfloat16, pattern=(n, m, v, 1), density=n / m, **nm)
    )
    assert pick(64, 1, 8) == "triton" and pick(32, 1, 8) == "triton"
    assert pick(64, 2, 4) == "dense" and pick(32, 1, 4) == "dense" and pick(1, 1, 8) == "dense"
    # 2:8 at v = 64 on weights of 1024 rows or fewer densifies (few 64-row tiles), 1:8 does not
    # (unless the small tiles take it: K <= 1536 and few programs)
    sized = lambda rows, n, m, tokens=2048, dtype=torch.bfloat16, k=4096: _dispatch.choose(  # noqa: E731
        "spmm_nm", problem("cuda", dtype, pattern=(n, m, 64, 1), density=n / m,
                           n=tokens, transpose=False, shape=(rows, k)),
    )  # fmt: skip
    assert sized(1024, 2, 8) == "dense" and sized(1025, 2, 8) == sized(4096, 2, 8) == "triton"
    assert sized(768, 1, 8) == "triton" and sized(768, 2, 8, tokens=127) == "triton"
    assert sized(768, 2, 8, dtype=torch.float32) == "triton"
    assert sized(768, 2, 8, tokens=512, k=768) == sized(384, 2, 8, tokens=256, k=1536) == "triton"
    assert sized(768, 2, 8, tokens=1024, k=768) == sized(384, 2, 8, tokens=256, k=1537) == "dense"
    assert sized(384, 2, 4, tokens=256, k=1536) == "dense"  # (2:4 at v = 64: denser than wins)


def test_gather_kernels_give_way_to_dense_past_decode_sizes():
    """On CUDA in half precision, past the decode kernels' token counts the CUDA-core gather
    kernels (CSR, element-wise N:M) lost 4-50x to densify + cuBLAS (H200, 32 tokens); the
    vector-wise tensor-core N:M kernel keeps its sizes below 128 tokens, and the one-hot one
    1:8 and sparser to 128, and 2:4, 2:8 and 4:8 to 64."""
    from sparsekernels.ops import _dispatch

    def pick(op, tokens, dtype=torch.bfloat16, **facts):
        facts = {"batch": 1, "n": tokens, **facts}
        return _dispatch.choose(op, _dispatch.Problem(torch.device("cuda"), dtype, facts))

    for density in (0.1, 0.3):
        assert pick("spmm_csr", 16, density=density) == "triton"
        assert pick("spmm_csr", 17, density=density) == "dense"
        assert pick("spmm_csr", 127, density=density) == "dense"
    assert pick("spmm_csr", 64, torch.float32, density=0.05) == "triton"  # strict fp32, 95%
    assert pick("spmm_csr", 64, torch.float32, density=0.3) == "dense"
    # 90% sparse in fp32 stays on the kernel whichever way its kept count rounds; 80% densifies
    for density in (0.0999, 0.10000038, 0.1001):
        assert pick("spmm_csr", 2048, torch.float32, density=density) == "triton"
    assert pick("spmm_csr", 2048, torch.float32, density=0.2) == "dense"

    def nm(tokens, n, m, vector=1, transpose=False):
        facts = {"pattern": (n, m, vector, 1), "density": n / m, "transpose": transpose}
        return pick("spmm_nm", tokens, **facts)

    # 2:4, 2:8, 4:8: the one-hot kernel to 64 tokens; 4:16 densifies past decode's 16
    assert nm(64, 2, 4) == "triton" and nm(65, 2, 4) == "dense"
    assert nm(64, 2, 8) == "triton" and nm(65, 2, 8) == "dense"
    assert nm(64, 4, 8) == "triton" and nm(65, 4, 8) == "dense"
    assert nm(16, 4, 16) == "triton" and nm(17, 4, 16) == "dense"
    # 1:8 and sparser: the one-hot tensor-core kernel to 128 tokens in half precision; strict
    # fp32 keeps the decode kernel to 32
    assert nm(128, 1, 8) == "triton" and nm(129, 1, 8) == "dense"
    assert nm(128, 1, 16, vector=4) == "triton" and nm(129, 1, 16, vector=4) == "dense"
    assert pick("spmm_nm", 32, torch.float32, pattern=(1, 8, 1, 1), density=1 / 8) == "triton"
    assert pick("spmm_nm", 33, torch.float32, pattern=(1, 8, 1, 1), density=1 / 8) == "dense"
    assert nm(17, 4, 16, vector=8) == "dense"  # v < 16 takes the gather kernel
    assert nm(64, 2, 8, vector=16) == "triton" and nm(127, 2, 8, vector=64) == "triton"
    assert nm(16, 2, 8, transpose=True) == "triton" and nm(17, 2, 8, transpose=True) == "dense"


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_torch_sparse_backend_matches_reference(dtype, gen):
    A = random_csr(29, 33, 0.3, gen, dtype)
    bias = randn(29, gen=gen, dtype=dtype)
    wide = randn(33, 6, gen=gen, dtype=dtype)
    # six tokens, one (the matrix-vector kernel), and one as a strided column
    for B, act in itertools.product((wide, wide[:, 2:3].contiguous(), wide[:, 4:5]),
                                    (None, "relu", "gelu")):  # fmt: skip
        torch.testing.assert_close(
            sk.spmm(A, B, bias, act, backend="torch_sparse"),
            sk.spmm(A, B, bias, act, backend="reference"),
            rtol=0,
            atol=1e-12 if dtype == torch.float64 else 1e-5 if dtype == torch.float32 else 1e-2,
        )
    W = random_nm(12, 32, 2, 8, gen, vector=4, block=2)
    values = W.values.clone().requires_grad_()
    x = randn(5, 32, gen=gen).requires_grad_()
    assert torch.autograd.gradcheck(  # the backward runs W^T @ g through the same backend
        lambda v, x: sk.linear(x, W.with_values(v), backend="torch_sparse"), (values, x)
    )


def test_cpu_nm_pattern_is_built_once_per_weight(gen):
    """On CPU an N:M weight's CSR pattern for torch's matmul is kept per offsets tensor (int32
    columns), rebuilt after an in-place edit of the offsets, and the product follows the edit."""
    from sparsekernels.ops import _torch_sparse

    W = random_nm(9, 32, 2, 8, gen, vector=2)
    x = randn(3, 32, gen=gen)
    for _ in range(2):
        got = sk.linear(x, W, backend="torch_sparse")
        torch.testing.assert_close(got, x @ W.to_dense().t(), rtol=0, atol=1e-12)
    offsets, columns = _torch_sparse._nm_pattern(W.indices, 9, 2, 8, 2, 1)
    assert columns.dtype == torch.int32 and offsets.dtype == torch.int32
    assert _torch_sparse._nm_pattern(W.indices, 9, 2, 8, 2, 1)[1] is columns
    first = W.indices[0, :2].tolist()
    W.indices[0, :2] = torch.tensor([0, 1] if first != [0, 1] else [6, 7])  # rows 0 and 1
    assert _torch_sparse._nm_pattern(W.indices, 9, 2, 8, 2, 1)[1] is not columns
    got = sk.linear(x, W, backend="torch_sparse")
    edited = sk.NMMatrix(W.values, W.indices.clone(), W.shape, 2, 8, vector=2)  # a fresh object
    torch.testing.assert_close(got, x @ edited.to_dense().t(), rtol=0, atol=1e-12)


def test_nm_backward_of_x_densifies_on_cuda_at_batched_sizes():
    """W^T @ B: on CUDA at training sizes dense (densify + cuBLAS) takes it for every pattern,
    the vector-wise ones too; below, the CSR kernel on W^T's cached pattern (triton)."""
    from sparsekernels.ops import _dispatch

    def problem(n):
        facts = {"n": n, "pattern": (2, 8, 64, 1), "transpose": True, "batch": 1}
        return _dispatch.Problem(torch.device("cuda"), torch.bfloat16, facts)

    assert _dispatch.choose("spmm_nm", problem(2048)) == "dense"
    assert _dispatch.choose("spmm_nm", problem(16)) == "triton"


@pytest.mark.parametrize("twin", [True, False])
def test_product_is_saved_for_backward_only_for_relu(twin, gen, monkeypatch):
    """nn.Linear frees its product once the next op has used it; ours must not keep it alive
    until backward (the sparse Transformer's training peak was 1.3x dense's) unless ReLU's
    gradient needs it. Both the eager twin and the registered op."""
    from sparsekernels.ops import _library

    if not twin:
        monkeypatch.setattr(_library, "eager", lambda *tensors: False)
    A, W = random_csr(5, 7, 0.5, gen), random_nm(5, 8, 2, 4, gen)
    for M, K in ((A, 7), (W, 8)):
        B = randn(K, 3, gen=gen).requires_grad_()
        for activation, saved in ((None, False), ("gelu", False), ("relu", True)):
            out = sk.spmm(M, B, activation=activation)
            kept = [t for t in out.grad_fn.saved_tensors if t is not None]
            assert any(t.shape == out.shape for t in kept) == saved, (type(M), activation)
            out.sum().backward()  # the gradient still flows
            assert B.grad is not None and torch.isfinite(B.grad).all()
            B.grad = None
