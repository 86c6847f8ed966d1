"""sparse_attention against hazards an audit found: fp16 scores past 65504 in the composed path,
second derivatives through the fused kernel's eager backward, a pattern edited in place after
a call, autocast, and SparseAttention's checks. Against a float64 dense reference."""

import math

import pytest
import torch

import sparsekernels as sk

BACKENDS = ["reference", "triton", "triton_flash"]


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _pattern(keep: torch.Tensor) -> sk.CSRMatrix:
    return sk.CSRMatrix.from_dense(keep.double(), mask=keep)


def _reference(q, k, v, keep, scale=None):
    """Softmax over each query's kept keys (zeros where it keeps none), float64."""
    q, k, v = q.double(), k.double(), v.double()
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-1, -2) * scale).masked_fill(~keep, -math.inf)
    probs = torch.softmax(scores, -1).nan_to_num(0.0)
    return probs @ v


def _causal(length: int) -> torch.Tensor:
    return torch.ones(length, length, dtype=torch.bool).tril()


@pytest.mark.parametrize("backend", [None, *BACKENDS])
def test_fp16_scores_past_65504_before_their_scale(backend):
    """q k = 78400 passes fp16's range; q k * 0.001 does not. The composed path kept the
    unscaled scores in fp16 (NaN rows); it scales q first now."""
    keep = _causal(8)
    q = torch.full((1, 1, 8, 16), 70.0)
    k = torch.full((1, 1, 8, 16), 70.0)
    k[..., 0, :] = 60.0  # (a softmax that is not uniform)
    v = torch.randn(1, 1, 8, 4, generator=torch.Generator().manual_seed(0))
    got = sk.sparse_attention(q.half(), k.half(), v.half(), _pattern(keep), 0.001, backend=backend)
    want = _reference(q.half(), k.half(), v.half(), keep, 0.001)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), want, rtol=0.0, atol=4e-3)


def test_second_derivatives_through_the_fused_kernel_raise():
    """The fused kernel's eager backward runs raw kernels (no graph): a gradient penalty through
    it returned the plain term's gradient alone (once_differentiable would not help:
    autograd.grad prunes its error node). create_graph=True raises now; the composed path
    gives the second derivative."""
    keep = _causal(12)
    q, k, v = (torch.randn(1, 1, 12, 4, dtype=torch.float64, requires_grad=True) for _ in "qkv")

    def penalty_gradient(backend, dtype):
        q_, k_, v_ = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
        out = sk.sparse_attention(q_, k_, v_, _pattern(keep), backend=backend)
        (dq,) = torch.autograd.grad(out.pow(2).sum(), q_, create_graph=True)
        return torch.autograd.grad(dq.pow(2).sum() + out.sum(), v_)[0]

    with pytest.raises(RuntimeError, match="differentiable once.*backend='triton'"):
        penalty_gradient("triton_flash", torch.float32)
    q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
    out = _reference(q_, k_, v_, keep)
    (dq,) = torch.autograd.grad(out.pow(2).sum(), q_, create_graph=True)
    want = torch.autograd.grad(dq.pow(2).sum() + out.sum(), v_)[0]
    torch.testing.assert_close(penalty_gradient("triton", torch.float64), want)
    q_, k_, v_ = (t.detach().float().requires_grad_() for t in (q, k, v))
    sk.sparse_attention(q_, k_, v_, _pattern(keep), backend="triton_flash").sum().backward()
    assert v_.grad is not None  # (a first derivative alone is fine)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_pattern_edited_in_place_after_a_call(backend, gen):
    """The pattern's transpose and block layout were kept by name alone: a column edited in
    place after a training call gave the old pattern's gradients (and the fused kernel's
    forward)."""
    keep = torch.arange(8)[:, None] // 4 == torch.arange(8)[None, :] // 4
    P = _pattern(keep)
    q, k, v = (torch.randn(1, 1, 8, 4, generator=gen, requires_grad=True) for _ in range(3))
    sk.sparse_attention(q, k, v, P, backend=backend).sum().backward()
    with torch.no_grad():
        P.column_indices[3] = 5  # row 0 keeps columns 0, 1, 2 and 5
    edited = keep.clone()
    edited[0, 3], edited[0, 5] = False, True
    for t in (q, k, v):
        t.grad = None
    out = sk.sparse_attention(q, k, v, P, backend=backend)
    out.sum().backward()
    twins = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = _reference(*twins, edited)
    want.sum().backward()
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    for t, twin in zip((q, k, v), twins, strict=True):
        torch.testing.assert_close(t.grad.double(), twin.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", [None, *BACKENDS])
def test_autocast_gives_its_dtype_on_every_backend(backend, gen):
    keep = _causal(16)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=gen) for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = sk.sparse_attention(q, k, v, _pattern(keep), backend=backend)
    assert got.dtype == torch.bfloat16
    want = _reference(*(t.bfloat16() for t in (q, k, v)), keep)
    torch.testing.assert_close(got.double(), want, rtol=0.0, atol=0.05)


def test_layer_checks_its_mask_and_scale():
    additive = torch.zeros(4, 4).masked_fill(~_causal(4), -math.inf)  # (SDPA's float mask)
    with pytest.raises(TypeError, match="mask pattern must be torch.bool"):
        sk.nn.SparseAttention(additive)
    for scale, error in [(True, TypeError), (math.nan, ValueError), (math.inf, ValueError)]:
        with pytest.raises(error, match="scale"):
            sk.nn.SparseAttention(_causal(4), scale=scale)
    assert sk.nn.SparseAttention(_causal(4), scale=2).scale == 2.0
