"""Property tests (hypothesis): every op and format conversion against float64 dense math.

Shapes include 0 and 1, densities 0, tiny and 1, every dtype, and N:M patterns drawn so that
block | n, block | m and n < m. The reference backend carries most examples; a small test runs
the Triton kernels in the interpreter on tiny shapes. Examples are derandomized (the same on
every run, so CI is stable); each example draws fresh random data from its own seed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sparsekernels as sk
from _helpers import (
    ALL_DTYPES,
    assert_close,
    dense_attention,
    dense_sddmm,
    dense_softmax,
    dense_spmm,
    spmm_bound,
    stored_mask,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore:Sparse (CSR tensor support|invariant checks)",
    "ignore:(invalid value|divide by zero) encountered:RuntimeWarning",
)


def _settings(examples: int):
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


F64 = torch.float64
dims = st.one_of(st.sampled_from([0, 1]), st.integers(2, 12))
small = st.integers(0, 4)
densities = st.one_of(st.sampled_from([0.0, 0.02, 1.0]), st.floats(0.0, 1.0))
dtypes = st.sampled_from(ALL_DTYPES)
seeds = st.integers(0, 2**32 - 1)
activations = st.sampled_from([None, "relu", "gelu"])


@st.composite
def nm_patterns(draw, max_m: int = 32):
    """(n, m, vector, block) with block | m, block | n and 1 <= n < m."""
    m = draw(st.sampled_from([v for v in (2, 4, 8, 16, 32) if v <= max_m]))
    block = draw(st.sampled_from([b for b in (1, 2, 4, 8) if m % b == 0 and m // b >= 2]))
    n = block * draw(st.integers(1, m // block - 1))
    vector = draw(st.sampled_from([1, 2, 3, 4, 8]))
    return n, m, vector, block


# --------------------------------------------------------------------------- data
def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def fresh(*shape, g, dtype=F64) -> torch.Tensor:
    """Standard normal values pushed away from zero: never zero, even in half precision."""
    x = torch.randn(*shape, generator=g, dtype=F64)
    return (x + 0.1 * x.sign()).to(dtype)


def make_csr(rows, cols, density, g, dtype=F64, batch=None) -> sk.CSRMatrix:
    mask = torch.rand(rows, cols, generator=g) < density
    A = sk.CSRMatrix.from_dense(fresh(rows, cols, g=g, dtype=dtype), mask=mask)
    return A if batch is None else A.with_values(fresh(batch, A.nnz, g=g, dtype=dtype))


def make_nm(rows, groups, pattern, g, dtype=F64) -> tuple[sk.NMMatrix, torch.Tensor]:
    """An N:M matrix and its dense float64 twin (pruned with the library's magnitude mask)."""
    n, m, vector, block = pattern
    w = fresh(rows, groups * m, g=g)
    mask = sk.prune.nm_mask(w, n, m, vector=vector, block=block)
    W = sk.NMMatrix.from_dense((w * mask).to(dtype), n, m, vector, block, mask=mask)
    return W, mask


def act_bound(bound: torch.Tensor, activation) -> torch.Tensor:
    """GELU's slope reaches 1.13: errors before it grow by at most that (x2 for its rounding)."""
    return bound * 2 if activation == "gelu" else bound


def _check_spmm(A, B, bias, activation, backend=None):
    got = sk.spmm(A, B, bias, activation, backend=backend)
    A_dense = A.to_dense()
    if A_dense.dim() == 3 or B.dim() == 3:
        want = sk.reference.apply_activation(A_dense.double() @ B.double(), activation or "none")
        bound = A_dense.double().abs() @ B.double().abs()
    else:
        want = dense_spmm(A_dense, B, bias, activation)
        bound = spmm_bound(A_dense, B)
        if bias is not None:
            bound = bound + bias.double().abs()[:, None]
    assert got.dtype == B.dtype and got.shape == want.shape
    assert_close(got, want, act_bound(bound, activation), B.dtype)


# --------------------------------------------------------------------------- spmm
@_settings(120)
@given(
    M=dims,
    K=dims,
    N=dims,
    density=densities,
    dtype=dtypes,
    with_bias=st.booleans(),
    activation=activations,
    seed=seeds,
)
def test_spmm_csr(M, K, N, density, dtype, with_bias, activation, seed):
    g = _gen(seed)
    A = make_csr(M, K, density, g, dtype)
    bias = fresh(M, g=g, dtype=dtype) if with_bias else None
    _check_spmm(A, fresh(K, N, g=g, dtype=dtype), bias, activation)


@_settings(40)
@given(
    M=dims,
    K=dims,
    N=small,
    density=densities,
    batch=st.integers(0, 3),
    batched=st.sampled_from(["values", "B", "both"]),
    seed=seeds,
)
def test_spmm_csr_batched(M, K, N, density, batch, batched, seed):
    g = _gen(seed)
    A = make_csr(M, K, density, g, F64, batch if batched != "B" else None)
    B = fresh(*((batch,) if batched != "values" else ()), K, N, g=g)
    _check_spmm(A, B, None, None)


@_settings(150)
@given(
    pattern=nm_patterns(),
    rows=dims,
    groups=small,
    N=dims,
    dtype=dtypes,
    with_bias=st.booleans(),
    activation=activations,
    seed=seeds,
)
def test_spmm_nm(pattern, rows, groups, N, dtype, with_bias, activation, seed):
    g = _gen(seed)
    W, _ = make_nm(rows, groups, pattern, g, dtype)
    bias = fresh(rows, g=g, dtype=dtype) if with_bias else None
    _check_spmm(W, fresh(W.shape[1], N, g=g, dtype=dtype), bias, activation)


# --------------------------------------------------------------------------- linear
@_settings(100)
@given(
    fmt=st.sampled_from(["csr", "nm"]),
    pattern=nm_patterns(max_m=8),
    out_features=dims,
    groups=small,
    lead=st.lists(small, max_size=2),
    density=densities,
    dtype=dtypes,
    with_bias=st.booleans(),
    backend=st.sampled_from([None, "dense"]),
    seed=seeds,
)
def test_linear(fmt, pattern, out_features, groups, lead, density, dtype, with_bias, backend, seed):
    g = _gen(seed)
    in_features = groups * pattern[1]
    if fmt == "nm":
        W, _ = make_nm(out_features, groups, pattern, g, dtype)
    else:
        W = make_csr(out_features, in_features, density, g, dtype)
    x = fresh(*lead, in_features, g=g, dtype=dtype)
    bias = fresh(out_features, g=g, dtype=dtype) if with_bias else None
    got = sk.linear(x, W, bias, backend=backend)
    dense = W.to_dense().double()
    want = x.double() @ dense.t()
    bound = x.double().abs() @ dense.abs().t()
    if bias is not None:
        want, bound = want + bias.double(), bound + bias.double().abs()
    assert got.shape == (*lead, out_features) and got.dtype == dtype
    assert got.is_contiguous()  # what follows a linear (attention above all) expects
    assert_close(got, want, bound, dtype)


@_settings(50)
@given(
    fmt=st.sampled_from(["csr", "nm"]),
    pattern=nm_patterns(max_m=8),
    out_features=dims,
    groups=small,
    tokens=small,
    density=densities,
    backend=st.sampled_from([None, "dense"]),
    seed=seeds,
)
def test_linear_backward_float64(fmt, pattern, out_features, groups, tokens, density, backend,
                                 seed):  # fmt: skip
    """linear's gradients (x, the kept values, bias) equal float64 autograd through the masked
    dense weight, on each backend's eager path (the autograd.Function twins)."""
    g = _gen(seed)
    in_features = groups * pattern[1]
    if fmt == "nm":
        W, keep = make_nm(out_features, groups, pattern, g)
    else:
        W = make_csr(out_features, in_features, density, g)
        keep = stored_mask(W)
    values = W.values.detach().clone().requires_grad_()
    x = fresh(tokens, in_features, g=g).requires_grad_()
    bias = fresh(out_features, g=g).requires_grad_()
    grad = fresh(tokens, out_features, g=g)
    sk.linear(x, W.with_values(values), bias, backend=backend).backward(grad)
    got = (x.grad, W.with_values(values.grad).to_dense(), bias.grad)
    x2, b2 = x.detach().clone().requires_grad_(), bias.detach().clone().requires_grad_()
    dense = W.to_dense().detach().clone().requires_grad_()
    (x2 @ dense.t() + b2).backward(grad)
    want = (x2.grad, dense.grad * keep, b2.grad)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


# --------------------------------------------------------------------------- sddmm
@_settings(100)
@given(
    M=dims,
    N=dims,
    K=dims,
    density=densities,
    dtype=dtypes,
    batch=st.sampled_from([None, 0, 1, 3]),
    seed=seeds,
)
def test_sddmm(M, N, K, density, dtype, batch, seed):
    g = _gen(seed)
    P = make_csr(M, N, density, g, dtype)
    lead = () if batch is None else (batch,)
    X, Y = fresh(*lead, M, K, g=g, dtype=dtype), fresh(N, K, g=g, dtype=dtype)
    got = sk.sddmm(X, Y, P)
    assert got.pattern is P.pattern and got.dtype == dtype
    assert_close(got.values, *dense_sddmm(X, Y, P), dtype)


# --------------------------------------------------------------------------- sparse_softmax
def _check_softmax(S, scale, backend=None):
    got = sk.sparse_softmax(S, scale, backend=backend)
    want = dense_softmax(S, scale)
    floor = torch.finfo(S.dtype).smallest_normal  # half-precision subnormals round coarsely
    assert got.pattern is S.pattern and got.dtype == S.dtype
    assert_close(got.values, want, want + floor, S.dtype)


@_settings(100)
@given(
    M=dims,
    N=dims,
    density=densities,
    dtype=dtypes,
    batch=st.sampled_from([None, 0, 2]),
    scale=st.one_of(st.sampled_from([1.0, 0.0, -1.0]), st.floats(0.01, 3.0)),
    seed=seeds,
)
def test_sparse_softmax(M, N, density, dtype, batch, scale, seed):
    _check_softmax(make_csr(M, N, density, _gen(seed), dtype, batch), scale)


# --------------------------------------------------------------------------- attention
def _check_attention(q, k, v, P, scale, backend=None):
    got = sk.sparse_attention(q, k, v, P, scale, backend=backend)
    d = q.shape[-1]
    s = scale if scale is not None else (1 / math.sqrt(d) if d else 1.0)
    keep = stored_mask(P)
    want = dense_attention(q, k, v, keep, s)
    # Rounding the scores moves each probability by ~ u * |s| * sum_d |q_d k_d|, the
    # probabilities and the output by ~ u each: bound = sum_j p_j |v_j| * (3 + 2 z_max).
    zmax = (abs(s) * q.double().abs() @ k.double().abs().transpose(-1, -2)).masked_fill(~keep, 0)
    zmax = zmax.amax(-1, keepdim=True) if zmax.shape[-1] else zmax.sum(-1, keepdim=True)
    probs = dense_attention(q, k, torch.eye(k.shape[-2], dtype=F64, device=k.device), keep, s)
    bound = (probs @ v.double().abs()) * (3 + 2 * zmax)
    assert got.shape == want.shape and got.dtype == q.dtype
    assert_close(got, want, bound, q.dtype)


@_settings(60)
@given(
    batch=st.integers(0, 2),
    heads=st.integers(1, 2),
    Lq=dims,
    Lk=dims,
    D=st.integers(0, 8),
    Dv=st.integers(0, 5),
    density=densities,
    dtype=dtypes,
    scale=st.one_of(st.none(), st.floats(0.05, 2.0)),
    seed=seeds,
)
def test_sparse_attention(batch, heads, Lq, Lk, D, Dv, density, dtype, scale, seed):
    g = _gen(seed)
    P = make_csr(Lq, Lk, density, g)
    q = fresh(batch, heads, Lq, D, g=g, dtype=dtype)
    k = fresh(batch, heads, Lk, D, g=g, dtype=dtype)
    v = fresh(batch, heads, Lk, Dv, g=g, dtype=dtype)
    _check_attention(q, k, v, P, scale)


# --------------------------------------------------------------------------- backward
@_settings(50)
@given(
    op=st.sampled_from(["spmm_csr", "spmm_nm", "sddmm", "softmax", "attention"]),
    M=dims,
    K=dims,
    N=small,
    density=densities,
    pattern=nm_patterns(max_m=8),
    activation=activations,
    seed=seeds,
)
def test_backward_float64(op, M, K, N, density, pattern, activation, seed):
    """Gradients of every op equal autograd through float64 dense math on the same pattern."""
    g = _gen(seed)
    if op in ("spmm_csr", "spmm_nm"):
        if op == "spmm_csr":
            A = make_csr(M, K, density, g)
            keep = stored_mask(A)
        else:
            A, keep = make_nm(M, K % 3, pattern, g)
        values = A.values.detach().clone().requires_grad_()
        B = fresh(A.shape[1], N, g=g).requires_grad_()
        bias = fresh(M, g=g).requires_grad_()
        dense = A.to_dense().detach().requires_grad_()
        inputs, dense_inputs = (values, B, bias), (dense, B, bias)

        def sparse_fn(v, b, c):
            return sk.spmm(A.with_values(v), b, c, activation)

        def dense_fn(a, b, c):
            return dense_spmm(a, b, c, activation)

    elif op == "sddmm":
        P = make_csr(M, N, density, g)
        X, Y = fresh(M, K, g=g).requires_grad_(), fresh(N, K, g=g).requires_grad_()
        inputs = dense_inputs = (X, Y)
        keep = stored_mask(P)

        def sparse_fn(x, y):
            return sk.sddmm(x, y, P).to_dense()

        def dense_fn(x, y):
            return (x @ y.t()) * keep

    elif op == "softmax":
        S = make_csr(M, K, density, g)
        values = S.values.detach().clone().requires_grad_()
        dense = S.to_dense().detach().requires_grad_()
        inputs, dense_inputs, keep = (values,), (dense,), stored_mask(S)

        def sparse_fn(v):
            return sk.sparse_softmax(S.with_values(v), 0.7).to_dense()

        def dense_fn(a):
            probs = (a * 0.7).masked_fill(~keep, float("-inf")).softmax(-1)
            return torch.where(keep, probs, torch.zeros_like(probs))

    else:
        P = make_csr(M, K, density, g)
        q = fresh(1, 2, M, N, g=g).requires_grad_()
        k, v = fresh(1, 2, K, N, g=g).requires_grad_(), fresh(1, 2, K, 3, g=g).requires_grad_()
        inputs = dense_inputs = (q, k, v)

        def sparse_fn(q, k, v):
            return sk.sparse_attention(q, k, v, P, 0.5)

        def dense_fn(q, k, v):
            return dense_attention(q, k, v, stored_mask(P), 0.5)

    out = sparse_fn(*inputs)
    grad = fresh(*out.shape, g=g)
    got = torch.autograd.grad(out, inputs, grad, allow_unused=True)
    want = torch.autograd.grad(dense_fn(*dense_inputs), dense_inputs, grad, allow_unused=True)
    if op in ("spmm_csr", "spmm_nm", "softmax"):  # values: the dense gradient at stored entries
        want = (want[0][keep].reshape(inputs[0].shape), *want[1:])
    for got_grad, want_grad, x in zip(got, want, inputs, strict=True):
        got_grad = torch.zeros_like(x) if got_grad is None else got_grad
        want_grad = torch.zeros_like(x) if want_grad is None else want_grad
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-10, atol=1e-10)


# --------------------------------------------------------------------------- conversions
@_settings(70)
@given(rows=dims, cols=dims, density=densities, dtype=dtypes, seed=seeds)
def test_csr_conversions(rows, cols, density, dtype, seed):
    g = _gen(seed)
    dense = fresh(rows, cols, g=g, dtype=dtype) * (torch.rand(rows, cols, generator=g) < density)
    A = sk.CSRMatrix.from_dense(dense)
    assert A.shape == (rows, cols) and A.nnz == int((dense != 0).sum()) and A.dtype == dtype
    assert torch.equal(A.to_dense(), dense)
    assert torch.equal(A.t().to_dense(), dense.t()) and torch.equal(A.t().t().to_dense(), dense)
    assert torch.equal(A.to_torch().to_dense(), dense)
    assert torch.equal(sk.CSRMatrix.from_torch(A.to_torch()).to_dense(), dense)
    assert torch.equal(sk.CSRMatrix.from_torch(dense.to_sparse()).to_dense(), dense)
    scipy_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    np.testing.assert_array_equal(A.to_scipy().toarray(), dense.to(scipy_dtype).numpy())
    B = sk.CSRMatrix.from_scipy(A.to_scipy())
    assert torch.equal(B.to_dense(), dense.to(scipy_dtype))
    assert torch.equal(B.row_offsets.long(), A.row_offsets.long())
    assert torch.equal(B.column_indices.long(), A.column_indices.long())
    batch = A.with_values(fresh(2, A.nnz, g=g, dtype=dtype))  # t() of a batch of values
    assert torch.equal(batch.t().to_dense(), batch.to_dense().transpose(1, 2))
    for other in (torch.float32, torch.bfloat16):
        assert torch.equal(A.to(dtype=other).to_dense(), dense.to(other))


@_settings(100)
@given(pattern=nm_patterns(max_m=32), rows=dims, groups=small, dtype=dtypes, seed=seeds)
def test_nm_conversions(pattern, rows, groups, dtype, seed):
    n, m, vector, block = pattern
    g = _gen(seed)
    W, mask = make_nm(rows, groups, pattern, g, dtype)
    dense = W.to_dense()
    assert torch.equal(dense != 0, mask)  # stored values are never zero
    # The structure is an n:m pattern: n kept per group, rows of a vector share them, blocks.
    groups_of = mask.view(rows, groups, m)
    assert bool((groups_of.sum(-1) == n).all())
    shared = mask[: rows - rows % vector].view(rows // vector, vector, groups * m)
    assert bool((shared == shared[:, :1]).all())
    blocks = mask.view(rows, groups * m // block, block)
    assert bool((blocks == blocks[..., :1]).all())
    # Conversions: to CSR (and its transpose), back through from_dense, and to another dtype.
    C = W.to_csr()
    assert C.nnz == rows * groups * n and torch.equal(C.to_dense(), dense)
    assert torch.equal(C.t().to_dense(), dense.t())
    again = sk.NMMatrix.from_dense(dense, n, m, vector, block)
    assert torch.equal(again.indices, W.indices) and torch.equal(again.values, W.values)
    assert torch.equal(W.to(dtype=F64).to_dense(), dense.double())


# --------------------------------------------------------------------------- triton
TRITON_OPS = [
    "spmm_csr",
    "spmm_nm",
    "spmm_nm_expand",
    "spmm_nm_unpack",
    "spmm_nm_transposed",
    "sddmm",
    "softmax",
    "attention",
    "attention_flash",
    "depthwise",
]


@pytest.mark.parametrize("op", TRITON_OPS)
@_settings(10)
@given(
    M=st.integers(0, 6),
    K=st.integers(0, 6),
    N=st.integers(0, 5),
    density=densities,
    dtype=dtypes,
    pattern=nm_patterns(max_m=8),
    activation=activations,
    seed=seeds,
)
def test_triton_interpreter(op, M, K, N, density, dtype, pattern, activation, seed):
    """The Triton kernels in the interpreter (tiny shapes) against float64 dense math."""
    if torch.cuda.is_available():
        pytest.skip("the interpreter runs only on machines without CUDA")
    _triton_example(op, M, K % 3, K, N, density, dtype, pattern, activation, seed, "cpu")


GPU_SHAPES = dict(
    M=st.one_of(st.sampled_from([0, 1, 127, 129]), st.integers(2, 300)),
    K=st.one_of(st.sampled_from([0, 1, 255, 257]), st.integers(2, 300)),
    N=st.one_of(st.sampled_from([1, 4, 5, 16, 17]), st.integers(0, 70)),
    groups=st.integers(0, 40),
    density=densities,
    dtype=dtypes,
    activation=activations,
    seed=seeds,
)


@pytest.mark.gpu
@pytest.mark.parametrize("op", [op for op in TRITON_OPS if op != "spmm_nm_expand"])
@_settings(25)
@given(pattern=nm_patterns(max_m=32), **GPU_SHAPES)
def test_triton_gpu(op, M, K, N, groups, density, dtype, pattern, activation, seed):
    """The compiled kernels on the GPU, shapes across their tiles (decode and batched N), against
    float64 dense math."""
    _triton_example(op, M, groups, K, N, density, dtype, pattern, activation, seed, "cuda")


@pytest.mark.gpu
@_settings(12)
@given(pattern=nm_patterns(max_m=16), **GPU_SHAPES)
def test_triton_gpu_expand(M, K, N, groups, density, dtype, pattern, activation, seed):
    """The one-hot kernel compiles anew for each pattern, dtype and epilogue, twice where few
    rows split K (seconds each, 10-15 s at m = 32-64): fewer examples, m to 16 (the kernel
    tests cover m = 32 and 64), so the GPU suite stays in its time limit."""
    args = (M, groups, K, N, density, dtype, pattern, activation, seed, "cuda")
    _triton_example("spmm_nm_expand", *args)


def _triton_example(op, M, groups, K, N, density, dtype, pattern, activation, seed, device):
    """One example of `op` by the triton backend on `device` (data drawn on the CPU first, so
    an example is the same on either)."""
    g = _gen(seed)
    backend = "triton"
    if op == "spmm_csr":
        A = make_csr(M, K, density, g, dtype).to(device)
        bias = fresh(M, g=g, dtype=dtype).to(device)
        _check_spmm(A, fresh(K, N, g=g, dtype=dtype).to(device), bias, activation, backend)
    elif op == "spmm_nm":
        W, _ = make_nm(M, groups, pattern, g, dtype)
        W = W.to(device)
        bias = fresh(M, g=g, dtype=dtype).to(device)
        _check_spmm(W, fresh(W.shape[1], N, g=g, dtype=dtype).to(device), bias, activation, backend)
    elif op == "spmm_nm_expand":  # the one-hot tensor-core kernel, for every pattern and size
        from sparsekernels.kernels import tuning

        if device == "cpu" and dtype == torch.bfloat16:  # the interpreter's bf16 tl.dot is broken
            dtype = torch.float16
        W, _ = make_nm(M, groups, pattern, g, dtype)
        W = W.to(device)
        bias = fresh(M, g=g, dtype=dtype).to(device)
        B = fresh(W.shape[1], N, g=g, dtype=dtype).to(device)
        saved, tuning.spmm_nm_expand_takes = tuning.spmm_nm_expand_takes, lambda *_: True
        try:
            _check_spmm(W, B, bias, activation, backend)
        finally:
            tuning.spmm_nm_expand_takes = saved
    elif op == "spmm_nm_unpack":  # the dense-tile kernel, wherever it supports the pattern
        from sparsekernels.kernels import nm_unpack_tuning

        if device == "cpu" and dtype == torch.bfloat16:  # the interpreter's bf16 tl.dot is broken
            dtype = torch.float16
        W, _ = make_nm(M, groups, pattern, g, dtype)
        W = W.to(device)
        bias = fresh(M, g=g, dtype=dtype).to(device)
        B = fresh(W.shape[1], N, g=g, dtype=dtype).to(device)
        saved = nm_unpack_tuning.spmm_nm_unpack_config
        tiles = nm_unpack_tuning.SpmmNmUnpackConfig(16, 16, 4, 2, 2, 16)
        nm_unpack_tuning.spmm_nm_unpack_config = lambda *_: tiles
        try:
            _check_spmm(W, B, bias, activation, backend)
        finally:
            nm_unpack_tuning.spmm_nm_unpack_config = saved
    elif op == "spmm_nm_transposed":  # W^T @ B, the backward of x: the CSR kernel on W^T
        from sparsekernels.ops.spmm import spmm_nm_raw

        W, _ = make_nm(M, groups, pattern, g, dtype)
        W = W.to(device)
        B = fresh(M, N, g=g, dtype=dtype).to(device)
        n, m, vector, block = pattern
        args = (W.values, W.indices, B, None, "none", n, m, vector, block, True)
        got = spmm_nm_raw(*args, backend=backend)
        dense_t = W.to_dense().t().double()
        assert_close(got, dense_t @ B.double(), dense_t.abs() @ B.double().abs(), dtype)
    elif op == "sddmm":
        P = make_csr(M, N, density, g, dtype).to(device)
        X, Y = fresh(M, K, g=g, dtype=dtype).to(device), fresh(N, K, g=g, dtype=dtype).to(device)
        assert_close(sk.sddmm(X, Y, P, backend=backend).values, *dense_sddmm(X, Y, P), dtype)
    elif op == "softmax":
        _check_softmax(make_csr(M, K, density, g, dtype).to(device), 0.6, backend)
    elif op == "depthwise":  # (batch, channels, height, width) from (N, M, K + 1, K + 2)
        N, K = min(N, 3), min(K, 60)  # images: a few, not N x M x K^2 (the GPU draws K to 300)
        x = fresh(N, M, K + 1, K + 2, g=g, dtype=dtype).to(device)
        w, bias = (
            fresh(M, 1, 3, 3, g=g, dtype=dtype).to(device),
            fresh(M, g=g, dtype=dtype).to(device),
        )
        stride = 1 + seed % 2
        got = sk.ops.depthwise_conv2d(x, w, bias, stride, activation, backend=backend)
        out_hw = ((K + 1 - 1) // stride + 1, (K + 2 - 1) // stride + 1)
        assert got.shape == (N, M, *out_hw)
        if M == 0:  # torch's conv2d refuses zero groups: nothing more to compare
            return
        conv = torch.nn.functional.conv2d(x.double(), w.double(), bias.double(), stride, 1, 1, M)
        want = sk.reference.apply_activation(conv, activation or "none")
        bound = torch.nn.functional.conv2d(
            x.double().abs(), w.double().abs(), None, stride, 1, 1, M
        )
        assert_close(got, want, bound + bias.double().abs()[:, None, None], dtype)
    else:  # the fused kernel has no float64; it takes float32 there
        backend = "triton_flash" if op == "attention_flash" else backend
        if backend == "triton_flash" and dtype == F64:
            dtype = torch.float32
        P = make_csr(M, K, density, g).to(device)
        q, k = (
            fresh(1, 2, M, N, g=g, dtype=dtype).to(device),
            fresh(1, 2, K, N, g=g, dtype=dtype).to(device),
        )
        _check_attention(q, k, fresh(1, 2, K, 3, g=g, dtype=dtype).to(device), P, None, backend)
