"""A^T @ G in the CSR backward passes (spmm's dB, sddmm's dY) on the dense route: A densified
as stored and read transposed, with no permuted copy of its values and no transposed pattern;
the same gradients as float64 dense math, and the permuting path where a graph is recorded."""

import importlib

import pytest
import torch

import sparsekernels as sk
from _helpers import randn, random_csr
from sparsekernels.ops import _dense

spmm_module = importlib.import_module("sparsekernels.ops.spmm")  # (ops.spmm is the function)


@pytest.fixture
def watched(monkeypatch):
    """Counts the dense transposed products; transposing a pattern fails the test."""
    calls = []
    real = _dense.spmm_csr_transposed

    def counting(*args):
        calls.append(args)
        return real(*args)

    def no_transpose(*args):
        raise AssertionError("the dense route transposed the pattern")

    monkeypatch.setattr(_dense, "spmm_csr_transposed", counting)
    monkeypatch.setattr(spmm_module, "transpose_pattern", no_transpose)
    return calls


def test_spmm_db(watched, gen):
    A = random_csr(37, 29, 0.3, gen)  # (empty rows too)
    values = A.values.clone().requires_grad_()
    B = randn(29, 11, gen=gen).requires_grad_()
    grad = randn(37, 11, gen=gen)
    sk.spmm(A.with_values(values), B, backend="dense").backward(grad)
    assert len(watched) == 1
    dense = A.to_dense()
    torch.testing.assert_close(B.grad, dense.t() @ grad, rtol=1e-12, atol=1e-12)
    want_dw = (grad @ B.detach().t())[A.pattern.row_indices(), A.column_indices.long()]
    torch.testing.assert_close(values.grad, want_dw, rtol=1e-12, atol=1e-12)


def test_linear_dx_keeps_its_layout(watched, gen):
    W = random_csr(23, 40, 0.4, gen)
    x = randn(3, 7, 40, gen=gen).requires_grad_()
    grad = randn(3, 7, 23, gen=gen)
    sk.linear(x, W, backend="dense").backward(grad)
    assert len(watched) == 1
    torch.testing.assert_close(x.grad, grad @ W.to_dense(), rtol=1e-12, atol=1e-12)
    assert x.grad.is_contiguous()


def test_batched_values(watched, gen):
    A = random_csr(9, 8, 0.5, gen)
    values = randn(2, A.nnz, gen=gen)
    B = randn(2, 8, 5, gen=gen).requires_grad_()
    grad = randn(2, 9, 5, gen=gen)
    sk.spmm(A.with_values(values), B, backend="dense").backward(grad)
    assert len(watched) == 1
    dense = A.with_values(values).to_dense()
    torch.testing.assert_close(B.grad, dense.mT @ grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_half_and_single_precision(watched, dtype, gen):
    A = random_csr(33, 70, 0.2, gen, dtype)
    B = randn(70, 9, gen=gen, dtype=dtype).requires_grad_()
    grad = randn(33, 9, gen=gen, dtype=dtype)
    sk.spmm(A, B, backend="dense").backward(grad)
    assert watched and B.grad.dtype == dtype  # (bf16 widens: the route calls itself in fp32)
    want = A.to_dense().double().t() @ grad.double()
    bound = A.to_dense().double().abs().t() @ grad.double().abs()
    tol = 1e-5 if dtype == torch.float32 else 2e-2  # (one rounding of the result, fp32 sums)
    assert ((B.grad.double() - want).abs() <= tol * bound + 1e-6).all()


def test_sddmm_dy(watched, gen):
    """dY = G^T @ X chosen automatically (the SDDMM's dense backend passes no hint): float32 at
    200 features, where the CPU's rule densifies."""
    P = random_csr(40, 30, 0.6, gen, torch.float32)
    X = randn(40, 200, gen=gen, dtype=torch.float32).requires_grad_()
    Y = randn(30, 200, gen=gen, dtype=torch.float32).requires_grad_()
    grad = randn(P.nnz, gen=gen, dtype=torch.float32)
    sk.sddmm(X, Y, P, backend="dense").values.backward(grad)
    assert len(watched) == 1  # (dY's product; dX = G @ Y needs no transpose)
    G = P.with_values(grad).to_dense().double()
    want, bound = G.t() @ X.detach().double(), G.abs().t() @ X.detach().double().abs()
    assert ((Y.grad.double() - want).abs() <= 1e-5 * bound + 1e-6).all()


def test_recorded_graph_permutes_the_values(monkeypatch, gen):
    """create_graph: the product stays an op of A's values (their gradient flows through it),
    so the dense shortcut, a raw densify, is not taken; second derivatives still right."""
    calls = []
    real = _dense.spmm_csr_transposed
    monkeypatch.setattr(_dense, "spmm_csr_transposed", lambda *a: calls.append(a) or real(*a))
    A = random_csr(7, 6, 0.5, gen)
    values = A.values.clone().requires_grad_()
    B = randn(6, 4, gen=gen).requires_grad_()
    out = sk.spmm(A.with_values(values), B, backend="dense")
    (d_b,) = torch.autograd.grad(out.sum(), B, create_graph=True)
    assert not calls
    (d_v,) = torch.autograd.grad(d_b.pow(2).sum(), values)  # d_b = A^T @ ones, in A's values
    A64 = A.to_dense().requires_grad_()
    (d_a,) = torch.autograd.grad(
        (A64.t() @ torch.ones(7, 4, dtype=torch.float64)).pow(2).sum(), A64
    )
    want = d_a[A.pattern.row_indices(), A.column_indices.long()]
    torch.testing.assert_close(d_v, want, rtol=1e-12, atol=1e-12)
    f = lambda v, b: sk.spmm(A.with_values(v), b, backend="dense")  # noqa: E731
    assert torch.autograd.gradgradcheck(f, (values, B))


def test_forward_keeps_no_transpose_for_the_dense_route(monkeypatch, gen):
    """The forward builds A^T's pattern (kept beside the weight: 6-8 bytes a stored entry)
    only where B's gradient will take a sparse route; the dense route reads A transposed."""
    from sparsekernels.formats._pattern import Pattern

    built = []
    real = Pattern.transpose
    monkeypatch.setattr(Pattern, "transpose", lambda self: built.append(self) or real(self))
    A = random_csr(37, 29, 0.3, gen)
    B = randn(29, 11, gen=gen).requires_grad_()
    sk.spmm(A, B, backend="dense").sum().backward()
    assert not built
    torch.testing.assert_close(B.grad, A.to_dense().t() @ torch.ones(37, 11, dtype=torch.float64))
    B.grad = None
    sk.spmm(A, B, backend="reference").sum().backward()  # (a sparse route: built, and cached)
    assert len(built) == 1
    torch.testing.assert_close(B.grad, A.to_dense().t() @ torch.ones(37, 11, dtype=torch.float64))


def test_backward_builds_the_transpose_it_was_not_given(gen):
    """A forward on the dense route saved no transpose; a create_graph backward permutes, so it
    builds one then: the same gradient, and its own gradient too."""
    A = random_csr(7, 6, 0.5, gen)
    values = A.values.clone().requires_grad_()
    B = randn(6, 4, gen=gen).requires_grad_()
    grad = randn(7, 4, gen=gen)
    out = sk.spmm(A.with_values(values), B, backend="dense")
    (d_b,) = torch.autograd.grad(out, B, grad, create_graph=True)
    torch.testing.assert_close(d_b, A.to_dense().t() @ grad, rtol=1e-12, atol=1e-12)
    (d_v,) = torch.autograd.grad(d_b.sum(), values)  # d(sum(A^T G))/dA[i, j] = sum_n G[i, n]
    want = grad.sum(1)[A.pattern.row_indices()]
    torch.testing.assert_close(d_v, want, rtol=1e-12, atol=1e-12)


def test_sddmm_forward_keeps_no_transpose_for_the_dense_route(monkeypatch, gen):
    """sddmm builds the pattern's transpose for Y's gradient only where G^T @ X will take a
    sparse route; on the dense route (float32 at 200 features on the CPU) none is built."""
    from sparsekernels.formats._pattern import Pattern

    built = []
    real = Pattern.transpose
    monkeypatch.setattr(Pattern, "transpose", lambda self: built.append(self) or real(self))
    P = random_csr(40, 30, 0.6, gen, torch.float32)
    X = randn(40, 200, gen=gen, dtype=torch.float32).requires_grad_()
    Y = randn(30, 200, gen=gen, dtype=torch.float32).requires_grad_()
    grad = randn(P.nnz, gen=gen, dtype=torch.float32)
    G = P.with_values(grad).to_dense().double()
    want, bound = G.t() @ X.detach().double(), G.abs().t() @ X.detach().double().abs()
    for backend, transposes in (("dense", 0), (None, 0), ("reference", 1)):
        Y.grad = None
        sk.sddmm(X, Y, P, backend=backend).values.backward(grad)
        assert len(built) == transposes, backend
        assert ((Y.grad.double() - want).abs() <= 1e-5 * bound + 1e-6).all()
    built.clear()  # batched X, and 16 features (the CPU's sparse route): built
    Xb = randn(3, 40, 16, gen=gen, dtype=torch.float32)
    Yb = randn(30, 16, gen=gen, dtype=torch.float32).requires_grad_()
    gb = randn(3, P.nnz, gen=gen, dtype=torch.float32)
    sk.sddmm(Xb, Yb, P).values.backward(gb)
    Gb = torch.stack([P.with_values(g).to_dense() for g in gb]).double()
    want_b = (Gb.transpose(1, 2) @ Xb.double()).sum(0)
    torch.testing.assert_close(Yb.grad.double(), want_b, rtol=1e-5, atol=1e-5)
    assert len(built) == 1
