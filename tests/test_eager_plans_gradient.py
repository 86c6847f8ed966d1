"""linear's eager plans for calls that record a gradient (ops/_eager_plans.py): a training step's
repeat call applies the autograd twin with the backend the first call chose, across optimizer
steps (the values' version changes), and its product and gradients are the whole path's."""

import importlib

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_close, randn, random_csr, random_nm, spmm_bound, twin_weight
from sparsekernels.ops import _eager_plans


def _weight(kind: str, gen, dtype):
    if kind == "csr":
        return random_csr(37, 50, 0.3, gen, dtype)
    return random_nm(37, 48, 2, 8, gen, dtype=dtype)


def _step(x, W, bias, g):
    """linear's product and the gradients of x, W's values and the bias for output gradient g."""
    out = sk.linear(x, W, bias)
    wanted = [t for t in (x, W.values, bias) if t is not None and t.requires_grad]
    grads = torch.autograd.grad(out, wanted, g)
    return out.detach(), grads


@pytest.mark.parametrize("kind", ["csr", "nm"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("with_bias", [False, True])
def test_training_steps_take_the_plan_with_the_whole_paths_gradients(kind, dtype, with_bias, gen,
                                                                     whole_path_calls):  # fmt: skip
    """Fresh x and output gradients each step (never zeros), values changed in place between
    steps as an optimizer does: one whole call, then planned ones whose product and gradients
    are a fresh weight's whole path's bit for bit, and the product matches float64."""
    W = _weight(kind, gen, dtype)
    W.values.requires_grad_()
    bias = randn(37, gen=gen, dtype=dtype).requires_grad_() if with_bias else None
    for _ in range(4):
        x = randn(2, 3, W.shape[1], gen=gen, dtype=dtype).requires_grad_()
        g = randn(2, 3, 37, gen=gen, dtype=dtype)
        out, grads = _step(x, W, bias, g)
        twin = twin_weight(W).values.requires_grad_()
        twin_bias = None if bias is None else bias.detach().clone().requires_grad_()
        twin_x = x.detach().clone().requires_grad_()
        calls = len(whole_path_calls)
        twin_out, twin_grads = _step(twin_x, _twin_of(W, twin), twin_bias, g)
        assert len(whole_path_calls) == calls + 1  # (the twin's: the check that it took it)
        assert torch.equal(out, twin_out)
        for got, want in zip(grads, twin_grads, strict=True):
            assert torch.equal(got, want)
        dense = W.to_dense().double()
        want = x.detach().double() @ dense.t() + (0 if bias is None else bias.detach().double())
        bound = spmm_bound(dense, x.detach().reshape(-1, W.shape[1]).t()).t().reshape(want.shape)
        assert_close(out, want, bound, dtype)
        with torch.no_grad():
            W.values.add_(0.125)  # an optimizer step
    assert len(whole_path_calls) == 1 + 4  # W's first call, and every twin's


def _twin_of(W, values):
    """W's twin built around `values` (which want a gradient)."""
    if isinstance(W, sk.CSRMatrix):
        return sk.CSRMatrix(W.row_offsets.clone(), W.column_indices.clone(), values, W.shape,
                            check=False)  # fmt: skip
    return sk.NMMatrix(values, W.indices.clone(), W.shape, W.n, W.m, W.vector, W.block)


def test_x_gradient_matches_the_reference(gen, whole_path_calls):
    """A planned call's x gradient against float64 g @ W (a frozen weight: values want none)."""
    W = random_csr(37, 50, 0.3, gen, torch.float32)
    for _ in range(3):
        x = randn(5, 50, gen=gen, dtype=torch.float32).requires_grad_()
        g = randn(5, 37, gen=gen, dtype=torch.float32)
        sk.linear(x, W).backward(g)
        dense = W.to_dense().double()
        bound = g.double().abs() @ dense.abs() + 1e-6
        assert_close(x.grad, g.double() @ dense, bound, torch.float32)
    assert len(whole_path_calls) == 1


def test_which_operands_want_a_gradient_is_part_of_the_signature(gen, whole_path_calls):
    """x alone, the values alone, both: each its own first call; the backward computes exactly
    what is wanted."""
    W = random_nm(37, 48, 2, 8, gen, dtype=torch.float64)
    x = randn(4, 48, gen=gen)
    for wants in [(True, False), (False, True), (True, True)]:
        for _ in range(2):
            W.values.requires_grad_(wants[1])
            W.values.grad = None
            xi = x.clone().requires_grad_(wants[0])
            sk.linear(xi, W).sum().backward()
            assert (xi.grad is not None) == wants[0]
            assert (W.values.grad is not None) == wants[1]
            if wants[0]:
                torch.testing.assert_close(xi.grad, torch.ones(4, 37).double() @ W.to_dense())
    assert len(whole_path_calls) == 3


def test_a_frozen_weight_changed_in_place_takes_the_whole_path(gen, whole_path_calls):
    """Values that want no gradient keep their version in the signature (the scatter backend's
    copy of them is per version)."""
    W = random_csr(37, 50, 0.3, gen, torch.float32)
    x = randn(4, 50, gen=gen, dtype=torch.float32).requires_grad_()
    sk.linear(x, W)
    sk.linear(x, W)
    assert len(whole_path_calls) == 1
    with torch.no_grad():
        W.values.mul_(-2)
    got = sk.linear(x, W)
    assert len(whole_path_calls) == 2
    torch.testing.assert_close(got, x @ W.to_dense().t())


def test_evaluation_between_training_steps_keeps_both_plans(gen, whole_path_calls):
    """A no_grad evaluation after each step plans its own signature (that version's); the
    training signature stays planned throughout."""
    W = random_csr(37, 50, 0.3, gen, torch.float32)
    W.values.requires_grad_()
    x = randn(4, 50, gen=gen, dtype=torch.float32)
    for _ in range(3):
        sk.linear(x, W).sum().backward()
        with torch.no_grad():
            W.values.sub_(0.01 * W.values.grad)
            W.values.grad = None
            got = sk.linear(x, W)
        torch.testing.assert_close(got, x @ W.to_dense().t())
    assert len(whole_path_calls) == 1 + 3  # training's first call; each version's evaluation
    assert len(_eager_plans._PLANS.get(W.values)) == 2


def test_the_plan_keeps_the_whole_paths_transposes_decision(gen):
    """Whether backward wants A^T's pattern is the whole path's decision, remembered."""
    spmm_module = importlib.import_module("sparsekernels.ops.spmm")
    W = random_csr(37, 50, 0.3, gen, torch.float32)
    W.values.requires_grad_()
    x = randn(4, 50, gen=gen, dtype=torch.float32).requires_grad_()
    sk.linear(x, W).sum().backward()
    (plan,) = _eager_plans._PLANS.get(W.values).values()
    b = x.reshape(4, 50).t()
    backend, transposes = spmm_module._backward_transposes(W, W.column_indices, b, None)
    assert (plan.backend, plan.transposes) == (backend, transposes)
    grad = W.values.grad.clone()
    W.values.grad = None
    sk.linear(x, W).sum().backward()  # planned
    assert torch.equal(W.values.grad, grad)
