"""The decode attention kernel (one query a sequence over a KV cache, grouped-query): in the
interpreter on CPU and compiled on CUDA (gpu), against float64 with NaN-poisoned outputs."""

import math

import pytest
import torch

from _helpers import KERNEL_DEVICES, randn, skip_interpreter_on_gpu_machine
from sparsekernels.kernels import decode_attention as kernel

# relative to the output's scale: float32 sums in any order; 16-bit inputs round once on the way
# out (bf16 one whole unit: the interpreter casts by truncation)
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}


def _reference(q, k, v):
    group = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(group, 1)
    v = v.double().repeat_interleave(group, 1)
    scores = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, -1) @ v


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize(
    "batch, heads, kv_heads, keys, d",
    [(1, 4, 1, 1, 64), (2, 4, 2, 45, 64), (1, 2, 2, 32, 80), (3, 8, 2, 70, 128)],
)
def test_decode_attention_matches_float64(
    device, dtype, batch, heads, kv_heads, keys, d, monkeypatch
):
    """One key, keys not a multiple of the block (and exactly one block), a head dim not a power
    of two, groups of 1 to 4 query heads; k and v as views into longer caches (as the model
    passes them), q as the rotation kernel lays it out; one key scaled far up so the softmax
    must rescale."""
    skip_interpreter_on_gpu_machine(device)
    gen = torch.Generator().manual_seed(batch * 100 + keys)
    q = randn(batch, 1, heads, d, gen=gen, dtype=dtype, device=device).transpose(1, 2)
    k_cache = randn(batch, kv_heads, keys + 7, d, gen=gen, dtype=dtype, device=device)
    v_cache = randn(batch, kv_heads, keys + 7, d, gen=gen, dtype=dtype, device=device)
    k_cache[:, :, keys // 2] *= 8.0
    k, v = k_cache[:, :, :keys], v_cache[:, :, :keys]
    real = torch.Tensor.new_empty  # outputs allocated NaN: an unwritten element shows
    monkeypatch.setattr(
        torch.Tensor, "new_empty", lambda t, *a, **kw: real(t, *a, **kw).fill_(math.nan)
    )
    got = kernel.decode_attention(q, k, v)
    monkeypatch.undo()
    want = _reference(q, k, v)
    assert got.shape == (batch, heads, 1, d) and not got.isnan().any()
    error = (got.double() - want).abs().max().item()
    assert error <= TOLERANCE[dtype] * want.abs().max().item(), error


def test_decode_attention_rejects_bad_input():
    q = torch.randn(1, 4, 1, 64)
    k = torch.randn(1, 2, 5, 64)
    with pytest.raises(ValueError, match="q must be"):
        kernel.decode_attention(torch.randn(1, 4, 2, 64), k, k)  # two queries
    with pytest.raises(ValueError, match="q must be"):
        kernel.decode_attention(q, torch.randn(1, 3, 5, 64), torch.randn(1, 3, 5, 64))
    with pytest.raises(ValueError, match="q must be"):
        kernel.decode_attention(q.double(), k.double(), k.double())
    with pytest.raises(ValueError, match="k and v must be"):
        kernel.decode_attention(q, k, torch.randn(1, 2, 4, 64))
