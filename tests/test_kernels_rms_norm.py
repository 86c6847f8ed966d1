"""The residual-add RMSNorm kernel (kernels/rms_norm.py): in the interpreter on CPU and compiled
on CUDA (gpu), against float64 with NaN-poisoned outputs; the Llama model through it on CUDA."""

import math

import pytest
import torch

from _helpers import KERNEL_DEVICES, randn, skip_interpreter_on_gpu_machine
from sparsekernels.kernels import rms_norm as kernel

# a single row and one element, rows of a width not a power of two, a 3-D batch of rows
SHAPES = [(1, 1), (1, 96), (5, 100), (2, 3, 64)]
UNIT = {torch.float32: 2.0**-23, torch.bfloat16: 2.0**-7}


def _poisoned_run(monkeypatch, *args, **kw):
    """Outputs allocated NaN: an element the kernel leaves unwritten shows."""
    real = torch.empty_like
    monkeypatch.setattr(torch, "empty_like", lambda t: real(t).fill_(math.nan))
    result = kernel.rms_norm(*args, **kw)
    monkeypatch.setattr(torch, "empty_like", real)
    return result


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", list(UNIT))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_delta", [True, False])
def test_rms_norm_matches_float64(device, dtype, shape, with_delta, monkeypatch):
    """The sum equals x + delta in the dtype (exactly, compiled); the norm matches float64 of it
    within two rounding units of the dtype (one row scaled far up, the eps mattering in a
    row scaled far down)."""
    skip_interpreter_on_gpu_machine(device)
    gen = torch.Generator().manual_seed(sum(shape) + with_delta)
    x = randn(*shape, gen=gen, dtype=dtype, device=device)
    x.view(-1, shape[-1])[0] *= 1000.0
    if x.view(-1, shape[-1]).shape[0] > 2:
        x.view(-1, shape[-1])[2] *= 1e-4
    delta = randn(*shape, gen=gen, dtype=dtype, device=device) if with_delta else None
    weight = randn(shape[-1], gen=gen, dtype=dtype, device=device)
    eps = 1e-5
    total, out = _poisoned_run(monkeypatch, x, weight, eps, delta)
    want_total = x + delta if with_delta else x
    if device == "cuda":
        torch.testing.assert_close(total, want_total, rtol=0, atol=0)
    else:  # the interpreter casts float32 to bfloat16 by truncation: one unit off at most
        exact = x.double() + delta.double() if with_delta else x.double()
        assert ((total.double() - exact).abs() <= UNIT[dtype] * exact.abs()).all()
    t = total.double()  # the kernel's own sum (exact on CUDA, checked above)
    want = t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    assert not out.isnan().any()
    error = (out.double() - want).abs()
    assert (error <= 2 * UNIT[dtype] * want.abs() + 1e-300).all(), error.max()


def test_rms_norm_rejects_bad_input():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="weight must have shape"):
        kernel.rms_norm(x, torch.ones(7), 1e-5)
    with pytest.raises(ValueError, match="delta must match x"):
        kernel.rms_norm(x, torch.ones(8), 1e-5, torch.randn(2, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        kernel.rms_norm(x.double(), torch.ones(8, dtype=torch.float64), 1e-5)
    with pytest.raises(ValueError, match="last dim must be"):
        wide = torch.randn(1, kernel.MAX_COLS + 1)
        kernel.rms_norm(wide, torch.ones(kernel.MAX_COLS + 1), 1e-5)


@pytest.mark.gpu
def test_llama_decode_on_gpu_matches_float64():
    """The Llama stack decoding on CUDA in float32 (its norms through the kernel, no autograd)
    against the same weights in float64 on the CPU (torch's norms)."""
    from sparsekernels.models.llama import LlamaConfig, LlamaStack

    cfg = LlamaConfig(hidden=64, intermediate=96, heads=4, kv_heads=2, layers=2)
    torch.manual_seed(0)
    reference = LlamaStack(cfg).double()
    model = LlamaStack(cfg).cuda()
    model.load_state_dict(reference.state_dict())
    prompt = torch.randn(2, 5, 64, dtype=torch.float64)
    reference.allocate_cache(2, 9)
    model.allocate_cache(2, 9)
    want = reference.generate(prompt, 4)
    got = model.generate(prompt.float().cuda(), 4)
    torch.testing.assert_close(got.double().cpu(), want, rtol=1e-4, atol=1e-5)
