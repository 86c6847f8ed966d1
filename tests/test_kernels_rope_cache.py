"""The rotary-embedding and KV-cache kernel (kernels/rope_cache.py): in the interpreter on CPU
and compiled on CUDA (gpu), against the rotation written out in float64; q poisoned, the caches
filled with a sentinel that must survive outside the positions written."""

import math

import pytest
import torch

from _helpers import KERNEL_DEVICES, randn, skip_interpreter_on_gpu_machine
from sparsekernels.kernels import rope_cache as kernel

UNIT = {torch.float32: 2.0**-23, torch.bfloat16: 2.0**-8}
SENTINEL = 7.0


def _tables(positions: torch.Tensor, d: int, dtype, device):
    """cos and the sign-folded sine, cat(-sin, sin), for these positions (as LlamaStack)."""
    inv = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv[None, :]
    angles = torch.cat((angles, angles), -1)
    signed = torch.cat((-angles.sin()[:, : d // 2], angles.sin()[:, d // 2 :]), -1)
    return angles.cos().to(device, dtype), signed.to(device, dtype)


def _written_out(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """(x_i, x_{i+d/2}) -> (x_i c - x_{i+d/2} s, x_{i+d/2} c + x_i s), float64; x (B, T, h, d)."""
    d = x.shape[-1]
    a, b = x[..., : d // 2].double(), x[..., d // 2 :].double()
    c = cos.double()[:, None, : d // 2]
    s = signed_sin.double()[:, None, d // 2 :]
    return torch.cat((a * c - b * s, b * c + a * s), -1)


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", list(UNIT))
@pytest.mark.parametrize(
    ("batch", "tokens", "heads", "kv_heads", "d", "start", "cache_batch"),
    [
        (1, 1, 4, 2, 8, 5, 1),  # one decode token mid-cache
        (2, 3, 2, 1, 6, 0, 3),  # a prefill, head_dim not a power of two, a larger cache batch
        (3, 1, 1, 1, 2, 7, 3),  # the cache's last position, head_dim 2
    ],
)
def test_rope_cache_matches_float64(
    device, dtype, batch, tokens, heads, kv_heads, d, start, cache_batch
):
    skip_interpreter_on_gpu_machine(device)
    gen = torch.Generator().manual_seed(batch * 100 + tokens * 10 + d)
    width = (heads + 2 * kv_heads) * d
    qkv = randn(batch, tokens, width, gen=gen, dtype=dtype, device=device)
    cos, sin = _tables(torch.arange(start, start + tokens), d, dtype, device)
    shape = (cache_batch, kv_heads, start + tokens + 2 * (start == 0), d)
    k_cache = torch.full(shape, SENTINEL, dtype=dtype, device=device)
    v_cache = torch.full(shape, SENTINEL, dtype=dtype, device=device)
    out = torch.full((batch, tokens, heads, d), math.nan, dtype=dtype, device=device)
    q = kernel.rope_cache(qkv, cos, sin, k_cache, v_cache, start, heads, kv_heads, out=out)

    x = qkv.view(batch, tokens, heads + 2 * kv_heads, d)
    want_q = _written_out(x[:, :, :heads], cos, sin)
    want_k = _written_out(x[:, :, heads : heads + kv_heads], cos, sin)
    assert q.shape == (batch, heads, tokens, d)
    new_k = k_cache[:batch, :, start : start + tokens].transpose(1, 2)
    for got, want in ((q.transpose(1, 2), want_q), (new_k, want_k)):
        assert not got.isnan().any()
        error = (got.double() - want).abs()
        assert (error <= 2 * UNIT[dtype] * want.abs() + 4 * UNIT[dtype]).all(), error.max()
    got_v = v_cache[:batch, :, start : start + tokens].transpose(1, 2)
    torch.testing.assert_close(got_v, x[:, :, heads + kv_heads :], rtol=0, atol=0)
    for cache in (k_cache, v_cache):  # nothing written outside the new positions
        outside = torch.ones(shape, dtype=torch.bool, device=device)
        outside[:batch, :, start : start + tokens] = False
        assert (cache[outside] == SENTINEL).all()


def test_rope_cache_rejects_bad_input():
    qkv = torch.randn(1, 1, 32)
    cache = torch.zeros(1, 1, 4, 8)  # 2 heads and 1 kv head of 8
    cos = sin = torch.zeros(1, 8)
    with pytest.raises(ValueError, match="last dim must be"):
        kernel.rope_cache(qkv, cos, sin, cache, cache.clone(), 0, 3, 2)
    with pytest.raises(ValueError, match="within the caches"):
        kernel.rope_cache(qkv, cos, sin, cache, cache.clone(), 4, 2, 1)
    with pytest.raises(ValueError, match="within the caches"):
        kernel.rope_cache(qkv, cos, sin, cache, cache.clone(), -1, 2, 1)
    with pytest.raises(ValueError, match="k_cache must be"):
        kernel.rope_cache(qkv, cos, sin, torch.zeros(1, 2, 4, 8), cache, 0, 2, 1)
    with pytest.raises(ValueError, match="cos must be"):
        kernel.rope_cache(qkv, torch.zeros(2, 8), sin, cache, cache.clone(), 0, 2, 1)
    with pytest.raises(ValueError, match="out must be"):
        kernel.rope_cache(qkv, cos, sin, cache, cache.clone(), 0, 2, 1, out=torch.zeros(1, 1, 2, 4))
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        kernel.rope_cache(qkv.double(), cos, sin, cache, cache.clone(), 0, 2, 1)
