"""Determinism: every op, run again on the same inputs, returns bitwise-identical results,
forward and backward (issue 6, part 5).

The reference backend runs on the CPU at sizes where PyTorch uses several threads; the Triton
kernels run in the interpreter (CPU, tiny shapes) and compiled on CUDA (marked gpu, moderate
sizes, the backends dispatch picks there). Each run rebuilds its leaf tensors from the same
data, so a result that depends on scheduling, atomics or cached state shows up as a bit flip.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import sparsekernels as sk
from _helpers import assert_bitwise_equal, randn, random_csr, random_nm

RUNS = 3

# name -> builder(g, size, dtype, device) -> (leaves, fn(*leaves, backend) -> Tensor)
Case = Callable[..., tuple[list[torch.Tensor], Callable[..., torch.Tensor]]]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


@case
def spmm_csr(g, s, dtype, device):
    A = random_csr(s, s, 0.1, g, dtype, device)
    leaves = [A.values, randn(s, s // 4 + 1, gen=g, dtype=dtype, device=device)]
    leaves.append(randn(s, gen=g, dtype=dtype, device=device))
    return leaves, lambda v, b, c, be: sk.spmm(A.with_values(v), b, c, "gelu", backend=be)


@case
def spmm_csr_batched(g, s, dtype, device):
    A = random_csr(s, s // 2, 0.2, g, dtype, device)
    leaves = [randn(3, A.nnz, gen=g, dtype=dtype, device=device)]
    leaves.append(randn(3, s // 2, 9, gen=g, dtype=dtype, device=device))
    return leaves, lambda v, b, be: sk.spmm(A.with_values(v), b, backend=be)


@case
def spmm_nm(g, s, dtype, device):
    W = random_nm(s, 2 * s, 2, 8, g, vector=4, dtype=dtype, device=device)
    leaves = [W.values, randn(2 * s, s // 4 + 3, gen=g, dtype=dtype, device=device)]
    leaves.append(randn(s, gen=g, dtype=dtype, device=device))
    return leaves, lambda v, b, c, be: sk.spmm(W.with_values(v), b, c, "relu", backend=be)


@case
def linear_csr(g, s, dtype, device):
    W = random_csr(s, 2 * s, 0.15, g, dtype, device)
    leaves = [randn(2, s // 2 + 1, 2 * s, gen=g, dtype=dtype, device=device), W.values]
    leaves.append(randn(s, gen=g, dtype=dtype, device=device))
    return leaves, lambda x, v, c, be: sk.linear(x, W.with_values(v), c, backend=be)


@case
def linear_nm(g, s, dtype, device):
    W = random_nm(s, 2 * s, 4, 16, g, vector=2, block=2, dtype=dtype, device=device)
    leaves = [randn(s // 2 + 1, 2 * s, gen=g, dtype=dtype, device=device), W.values]
    leaves.append(randn(s, gen=g, dtype=dtype, device=device))
    return leaves, lambda x, v, c, be: sk.linear(x, W.with_values(v), c, backend=be)


@case
def sddmm(g, s, dtype, device):
    P = random_csr(s, s + 3, 0.1, g, dtype, device)
    leaves = [randn(2, s, 40, gen=g, dtype=dtype, device=device)]
    leaves.append(randn(s + 3, 40, gen=g, dtype=dtype, device=device))
    return leaves, lambda x, y, be: sk.sddmm(x, y, P, backend=be).values


@case
def sparse_softmax(g, s, dtype, device):
    S = random_csr(s, s, 0.3, g, dtype, device)
    leaves = [randn(2, S.nnz, gen=g, dtype=dtype, device=device)]
    return leaves, lambda v, be: sk.sparse_softmax(S.with_values(v), 0.3, backend=be).values


@case
def sparse_attention(g, s, dtype, device):
    keep = (torch.rand(s, s, generator=g) < 0.2) | torch.eye(s, dtype=torch.bool)
    P = sk.CSRMatrix.from_dense(keep.to(dtype), mask=keep).to(device=device)
    leaves = [randn(2, 2, s, 16, gen=g, dtype=dtype, device=device) for _ in range(3)]
    return leaves, lambda q, k, v, be: sk.sparse_attention(q, k, v, P, backend=be)


def _runs(name, size, dtype, device, backend):
    """RUNS results of (output, gradient of every leaf) for the same inputs and output grad."""
    g = torch.Generator().manual_seed(len(name) * 7919 + size)
    leaves, fn = CASES[name](g, size, dtype, device)
    leaves = [t.detach() for t in leaves]
    grad = None
    results = []
    for _ in range(RUNS):
        inputs = [t.clone().requires_grad_() for t in leaves]
        out = fn(*inputs, backend)
        if grad is None:
            grad = randn(*out.shape, gen=g, dtype=out.dtype, device=device)
        grads = torch.autograd.grad(out, inputs, grad)
        results.append([out.detach(), *grads])
    return results


def _assert_deterministic(results):
    first, *others = results
    assert all(t.isfinite().all() for t in first), "inputs were meant to give finite results"
    for other in others:
        for which, (a, b) in enumerate(zip(first, other, strict=True)):
            try:
                assert_bitwise_equal(a, b)
            except AssertionError as error:
                label = "output" if which == 0 else f"gradient of leaf {which - 1}"
                raise AssertionError(f"{label}: {error}") from None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(CASES))
def test_reference_cpu(name, dtype):
    _assert_deterministic(_runs(name, 96, dtype, "cpu", "reference"))


TRITON_CASES = ["spmm_csr", "spmm_csr_batched", "spmm_nm", "sddmm", "sparse_softmax"]


@pytest.mark.parametrize("name", TRITON_CASES)
def test_triton_interpreter(name):
    if torch.cuda.is_available():
        pytest.skip("the interpreter runs only on machines without CUDA")
    _assert_deterministic(_runs(name, 12, torch.float32, "cpu", "triton"))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(CASES))
def test_cuda(name, dtype):
    """The backends dispatch picks on CUDA (Triton, and whatever a backward falls back to)."""
    _assert_deterministic(_runs(name, 1024, dtype, "cuda", None))


def test_a_changed_bit_is_caught():
    """The comparison sees one flipped bit and a sign-only difference (-0.0 vs 0.0)."""
    x = torch.randn(50, generator=torch.Generator().manual_seed(5))
    y = x.clone()
    y[17] = torch.nextafter(y[17], torch.tensor(float("inf")))
    with pytest.raises(AssertionError, match="1 of 50 elements differ"):
        assert_bitwise_equal(x, y)
    with pytest.raises(AssertionError):
        assert_bitwise_equal(torch.zeros(3), -torch.zeros(3))
