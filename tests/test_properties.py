"""Property tests (hypothesis): every op and format conversion against float64 dense math.

Shapes include 0 and 1, densities 0, tiny and 1, every dtype, and N:M patterns drawn so that
block | n, block | m and n < m. The reference backend carries these examples; the Triton
kernels' examples (the interpreter on tiny shapes, the GPU across their tiles) are in
test_properties_kernels.py. Strategies, data and checks: _properties.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import sparsekernels as sk
from _helpers import assert_close, dense_attention, dense_sddmm, dense_spmm, stored_mask
from _properties import (
    F64,
    PROPERTY_WARNINGS,
    activations,
    check_attention,
    check_softmax,
    check_spmm,
    densities,
    dims,
    dtypes,
    examples,
    fresh,
    make_csr,
    make_nm,
    nm_patterns,
    seeded,
    seeds,
    small,
)

pytestmark = pytest.mark.filterwarnings(*PROPERTY_WARNINGS)


# --------------------------------------------------------------------------- spmm
@examples(120)
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
    g = seeded(seed)
    A = make_csr(M, K, density, g, dtype)
    bias = fresh(M, g=g, dtype=dtype) if with_bias else None
    check_spmm(A, fresh(K, N, g=g, dtype=dtype), bias, activation)


@examples(40)
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
    g = seeded(seed)
    A = make_csr(M, K, density, g, F64, batch if batched != "B" else None)
    B = fresh(*((batch,) if batched != "values" else ()), K, N, g=g)
    check_spmm(A, B, None, None)


@examples(150)
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
    g = seeded(seed)
    W, _ = make_nm(rows, groups, pattern, g, dtype)
    bias = fresh(rows, g=g, dtype=dtype) if with_bias else None
    check_spmm(W, fresh(W.shape[1], N, g=g, dtype=dtype), bias, activation)


# --------------------------------------------------------------------------- linear
@examples(100)
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
    g = seeded(seed)
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


@examples(50)
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
    g = seeded(seed)
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
@examples(100)
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
    g = seeded(seed)
    P = make_csr(M, N, density, g, dtype)
    lead = () if batch is None else (batch,)
    X, Y = fresh(*lead, M, K, g=g, dtype=dtype), fresh(N, K, g=g, dtype=dtype)
    got = sk.sddmm(X, Y, P)
    assert got.pattern is P.pattern and got.dtype == dtype
    assert_close(got.values, *dense_sddmm(X, Y, P), dtype)


# --------------------------------------------------------------------------- sparse_softmax
@examples(100)
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
    check_softmax(make_csr(M, N, density, seeded(seed), dtype, batch), scale)


# --------------------------------------------------------------------------- attention
@examples(60)
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
    g = seeded(seed)
    P = make_csr(Lq, Lk, density, g)
    q = fresh(batch, heads, Lq, D, g=g, dtype=dtype)
    k = fresh(batch, heads, Lk, D, g=g, dtype=dtype)
    v = fresh(batch, heads, Lk, Dv, g=g, dtype=dtype)
    check_attention(q, k, v, P, scale)


# --------------------------------------------------------------------------- backward
@examples(50)
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
    g = seeded(seed)
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
@examples(70)
@given(rows=dims, cols=dims, density=densities, dtype=dtypes, seed=seeds)
def test_csr_conversions(rows, cols, density, dtype, seed):
    g = seeded(seed)
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


@examples(100)
@given(pattern=nm_patterns(max_m=32), rows=dims, groups=small, dtype=dtypes, seed=seeds)
def test_nm_conversions(pattern, rows, groups, dtype, seed):
    n, m, vector, block = pattern
    g = seeded(seed)
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
