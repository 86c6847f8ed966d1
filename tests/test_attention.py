"""sparse_attention against scaled_dot_product_attention with the same mask, in float64."""

import pytest
import torch

import sparsekernels as sk
from _helpers import randn


def _patterns(L):
    i = torch.arange(L)
    return {
        "causal": i[:, None] >= i[None, :],
        "window+stride": ((i[:, None] - i[None, :]).abs() < 3) | (i[None, :] % 4 == 3),
        "with-empty-rows": (i[:, None] >= i[None, :]) & (i[:, None] % 5 != 2),
    }


@pytest.mark.parametrize("name", ["causal", "window+stride", "with-empty-rows"])
def test_matches_sdpa(name, gen):
    L = 13
    keep = _patterns(L)[name]
    pattern = sk.CSRMatrix.from_dense(keep.double())
    q, k, v = (randn(2, 3, L, 8, gen=gen) for _ in range(3))
    got = sk.sparse_attention(q, k, v, pattern, scale=0.3)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.3)
    empty = ~keep.any(-1)
    want[..., empty, :] = 0.0  # sdpa gives NaN for a query with no keys; we give zeros
    torch.testing.assert_close(got, want)


def test_rectangular_and_backward(gen):
    keep = torch.rand(5, 7, generator=gen) < 0.6
    keep[:, 0] = True
    pattern = sk.CSRMatrix.from_dense(keep.double())
    q = randn(1, 2, 5, 4, gen=gen).requires_grad_()
    k = randn(1, 2, 7, 4, gen=gen).requires_grad_()
    v = randn(1, 2, 7, 3, gen=gen).requires_grad_()
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    torch.testing.assert_close(sk.sparse_attention(q, k, v, pattern), want)
    assert torch.autograd.gradcheck(
        lambda q, k, v: sk.sparse_attention(q, k, v, pattern), (q, k, v)
    )
