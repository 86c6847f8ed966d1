"""sddmm(X, Y, pattern) = (X @ Y^T) at pattern's positions, forward and backward."""

import pytest
import torch

import sparsekernels as sk
from _helpers import ALL_DTYPES, assert_close, randn, random_csr


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("shape", [(37, 29, 45), (1, 9, 1), (20, 1, 30), (5, 700, 6)])
def test_forward(dtype, shape, gen):
    M, K, N = shape
    P = random_csr(M, N, 0.3, gen, dtype)
    X, Y = randn(M, K, gen=gen, dtype=dtype), randn(N, K, gen=gen, dtype=dtype)
    S = sk.sddmm(X, Y, P)
    assert isinstance(S, sk.CSRMatrix) and S.dtype == dtype and S.nnz == P.nnz
    rows, cols = P.pattern.row_indices(), P.column_indices.long()
    want = (X.double() @ Y.double().t())[rows, cols]
    bound = (X.double().abs() @ Y.double().abs().t())[rows, cols]
    assert_close(S.values, want, bound, dtype)


def test_batched(gen):
    P = random_csr(12, 10, 0.4, gen)
    X, Y = randn(3, 12, 8, gen=gen), randn(3, 10, 8, gen=gen)
    S = sk.sddmm(X, Y, P)
    assert S.batch == 3
    torch.testing.assert_close(S.to_dense(), (X @ Y.transpose(1, 2)) * (P.to_dense() != 0))


def test_backward(gen):
    P = random_csr(9, 7, 0.4, gen)
    X, Y = randn(9, 5, gen=gen).requires_grad_(), randn(7, 5, gen=gen).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, y: sk.sddmm(x, y, P).values, (X, Y))
    Xb, Yb = randn(2, 9, 5, gen=gen).requires_grad_(), randn(7, 5, gen=gen).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, y: sk.sddmm(x, y, P).values, (Xb, Yb))
