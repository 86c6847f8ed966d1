"""sparse_attention against scaled_dot_product_attention with the same mask, in float64."""

import pytest
import torch

import sparsekernels as sk
from _helpers import randn
from sparsekernels.ops import _dispatch


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
    composed = lambda q, k, v: sk.sparse_attention(q, k, v, pattern, backend="reference")  # noqa: E731
    assert torch.autograd.gradgradcheck(composed, (q, k, v))  # sddmm, softmax, spmm composed


def test_backends_agree_and_say_why(gen, monkeypatch):
    """Forced backends: the fused kernel and the composed Triton path (interpreter) match the
    reference; the fused one names what it cannot run."""
    keep = _patterns(16)["window+stride"]
    pattern = sk.CSRMatrix.from_dense(keep.double())
    q, k, v = (randn(1, 2, 16, 16, gen=gen, dtype=torch.float32) for _ in range(3))
    want = sk.sparse_attention(q, k, v, pattern, backend="reference")
    for backend in ("triton", "triton_flash"):
        got = sk.sparse_attention(q, k, v, pattern, backend=backend)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="'triton_flash' cannot run sparse_attention: dtype"):
        sk.sparse_attention(q.double(), k.double(), v.double(), pattern, backend="triton_flash")
    wide = randn(1, 2, 16, 256, gen=gen, dtype=torch.float32)
    with pytest.raises(ValueError, match="head dimensions 256, 256 exceed 128"):
        sk.sparse_attention(wide, wide, wide, pattern, backend="triton_flash")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="Triton needs CUDA"):
        sk.sparse_attention(q, k, v, pattern, backend="triton_flash")
    # set after the import: the kernels were defined compiled (Triton crashed inside its launch)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(_dispatch, "_INTERPRETER_AT_IMPORT", False)
    with pytest.raises(ValueError, match="set it before the import"):
        sk.sparse_attention(q, k, v, pattern, backend="triton_flash")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_on_the_cpu_is_as_accurate_as_sdpa(dtype, gen):
    """Large scores (q scaled 12x): scores rounded to 16 bits before the softmax lost twice
    SDPA's accuracy; kept in fp32, as SDPA's are, the error is SDPA's own (its inputs')."""
    L = 128
    keep = torch.ones(L, L, dtype=torch.bool).tril()
    pattern = sk.CSRMatrix.from_dense(keep.double())
    q, k, v = (randn(2, 3, L, 32, gen=gen) for _ in range(3))
    q = q * 12
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    half = [t.to(dtype) for t in (q, k, v)]
    ours = sk.sparse_attention(*half, pattern)
    sdpa = torch.nn.functional.scaled_dot_product_attention(*half, attn_mask=keep)
    assert ours.dtype == dtype
    ours_err = (ours.double() - want).abs().max()
    sdpa_err = (sdpa.double() - want).abs().max()
    assert ours_err <= 1.2 * sdpa_err, (ours_err, sdpa_err)
