"""bias_grad: the product's gradient summed over tokens and batch, against float64 sums; on
the GPU the 16-bit GEMV against torch's sums in the same dtype."""

import pytest
import torch

from _helpers import randn
from sparsekernels.ops._bias_grad import bias_grad


@pytest.mark.parametrize("shape", [(7, 5), (1, 1), (4, 0), (3, 7, 5), (2, 3, 7, 5)])
def test_sums_over_tokens_and_batch(shape, gen):
    g = randn(*shape, gen=gen)
    want = g.sum(dim=-1).reshape(-1, shape[-2]).sum(0) if g.numel() else g.new_zeros(shape[-2])
    torch.testing.assert_close(bias_grad(g), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(bias_grad(g.mT.contiguous().mT), want, rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens,cols", [(8192, 1536), (1000, 77), (1, 64), (0, 64)])
def test_gpu_gemv_matches_the_sums(tokens, cols, dtype, gen):
    """A linear's (cols, tokens) gradient view of a (tokens, cols) tensor, as spmm sees it."""
    grad = randn(tokens, cols, gen=gen, dtype=dtype, device="cuda")
    got = bias_grad(grad.t())
    want = grad.double().sum(0)
    assert got.dtype == dtype and got.shape == (cols,)
    scale = grad.double().abs().sum(0).max().clamp_min(1.0)
    assert ((got.double() - want).abs().max() / scale) < 1e-2
