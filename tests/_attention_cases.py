"""Masks, patterns and checks shared by the fused block-sparse attention tests."""

import torch

import sparsekernels as sk
from _helpers import randn


def mask_of(kind: str, lq: int, lk: int, gen=None) -> torch.Tensor:
    i, j = torch.arange(lq)[:, None], torch.arange(lk)[None, :]
    d = i - j
    if kind == "causal":
        return d >= 0
    if kind == "local_strided":  # SparseAttention.local_strided(window=6, stride=16)
        return (d >= 0) & ((d < 6) | (d % 16 == 0))
    if kind == "summary":  # the bench's strided: band plus every 16th column
        return (d >= 0) & ((d < 6) | (j % 16 == 15))
    if kind == "block":
        return i // 16 == j // 16
    if kind == "empty_rows":
        return (d >= 0) & (d < 20) & (i % 5 != 2)
    if kind == "random":
        return torch.rand(lq, lk, generator=gen) < 0.3
    raise ValueError(kind)


def pattern_of(keep: torch.Tensor) -> sk.CSRMatrix:
    return sk.CSRMatrix.from_dense(keep.double(), mask=keep)


def own_attention(q, k, v, keep, scale):
    """The same dense math in the inputs' dtype: PyTorch's own error in that dtype."""
    scores = (q @ k.transpose(-1, -2)) * scale
    probs = scores.masked_fill(~keep, float("-inf")).softmax(-1)
    probs = torch.where(keep.any(-1, keepdim=True), probs, torch.zeros_like(probs))
    return probs @ v


def assert_attention_close(got, want, own, mult=4.0):
    """|got - want| within mult x PyTorch's own error in the dtype (or a few fp32 units)."""
    got, want, own = got.double().cpu(), want.double().cpu(), own.double().cpu()
    assert torch.isfinite(got).all(), "non-finite values"
    floor = 4e-6 * want.abs().max().clamp_min(1.0)
    allowed = mult * (own - want).abs().max() + floor
    err = (got - want).abs()
    assert err.max() <= allowed, f"max error {err.max():.3g} > {allowed:.3g} at {err.argmax()}"


def local_strided_gpu(L, heads, dtype, gen):
    attn = sk.nn.SparseAttention.local_strided(L, window=128, stride=128, device="cuda")
    q, k, v, g = (randn(1, heads, L, 64, gen=gen, dtype=dtype, device="cuda") for _ in range(4))
    return attn, q, k, v, g
