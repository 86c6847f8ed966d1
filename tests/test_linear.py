"""linear(x, W, bias) = x @ W^T + bias for CSR and N:M weights, forward and backward."""

import pytest
import torch

import sparsekernels as sk
from _helpers import ALL_DTYPES, assert_close, randn, random_csr, random_nm


def _weights(gen, dtype):
    return {
        "csr": random_csr(21, 32, 0.3, gen, dtype),
        "nm-2:8": random_nm(21, 32, 2, 8, gen, dtype=dtype),
        "nm-4:16-v4-b2": random_nm(21, 32, 4, 16, gen, vector=4, block=2, dtype=dtype),
    }


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("x_shape", [(32,), (1, 32), (5, 32), (2, 3, 32)])
def test_forward(dtype, x_shape, gen):
    for name, W in _weights(gen, dtype).items():
        x, bias = randn(*x_shape, gen=gen, dtype=dtype), randn(21, gen=gen, dtype=dtype)
        got = sk.linear(x, W, bias)
        dense = W.to_dense().double()
        want = x.double() @ dense.t() + bias.double()
        bound = x.double().abs() @ dense.abs().t() + bias.double().abs()
        assert got.shape == (*x_shape[:-1], 21), name
        assert_close(got, want, bound, dtype)


@pytest.mark.parametrize("tokens", [1, 3, 16, 40])
def test_output_is_contiguous(tokens, gen):
    """A strided output made attention after it fall back to SDPA's math kernel (16-token
    decode, +137 MiB on the H200): every path returns (tokens, out) contiguous."""
    for name, W in _weights(gen, torch.float32).items():
        x = randn(tokens, 32, gen=gen, dtype=torch.float32)
        for backend in ("reference", "triton", "dense"):
            got = sk.linear(x, W, backend=backend)
            assert got.is_contiguous(), (name, backend)
            torch.testing.assert_close(got, x @ W.to_dense().t(), rtol=1e-5, atol=1e-5)


def test_non_contiguous_x(gen):
    W = random_csr(10, 16, 0.4, gen)
    x = randn(16, 7, gen=gen).t()  # (7, 16), transposed view
    torch.testing.assert_close(sk.linear(x, W), x @ W.to_dense().t())


@pytest.mark.parametrize("kind", ["csr", "nm-2:8", "nm-4:16-v4-b2"])
def test_backward(kind, gen):
    W = _weights(gen, torch.float64)[kind]
    values = W.values.clone().requires_grad_()
    x = randn(4, 3, 32, gen=gen).requires_grad_()
    bias = randn(21, gen=gen).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda v, x, b: sk.linear(x, W.with_values(v), b), (values, x, bias)
    )
