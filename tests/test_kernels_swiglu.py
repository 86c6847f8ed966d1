"""The SwiGLU gate kernel (kernels/swiglu.py): in the interpreter on CPU and compiled on CUDA
(gpu), against float64 with a NaN-poisoned output."""

import math

import pytest
import torch

from _helpers import KERNEL_DEVICES, randn, skip_interpreter_on_gpu_machine
from sparsekernels.kernels import swiglu as kernel

# relative error allowed: float32's exp and division approximate on the GPU; bfloat16 one
# whole unit, as the interpreter casts by truncation. Scaled by 1 + |gate| below: the GPU's exp
# is 2^(gate * log2 e), and rounding that product costs |gate| units (silu's own condition
# number for negative gates), 1.8e-6 relative at a gate of -30 on the H200
UNITS = {torch.float32: 16 * 2.0**-24, torch.bfloat16: 2.0**-7 + 16 * 2.0**-24}


@pytest.mark.parametrize("device", KERNEL_DEVICES)
@pytest.mark.parametrize("dtype", list(UNITS))
@pytest.mark.parametrize("shape", [(1, 2), (3, 2 * 100), (2, 1, 2 * 1500)])
def test_swiglu_matches_float64(device, dtype, shape):
    """One element a half, a width not a multiple of the block and one past it (two programs
    a row), a 3-D batch; gates up to +-30, where silu saturates."""
    skip_interpreter_on_gpu_machine(device)
    gen = torch.Generator().manual_seed(sum(shape))
    gate_up = (randn(*shape, gen=gen) * 6).to(device=device, dtype=dtype)
    gate_up.view(-1)[0] = 30.0
    gate_up.view(-1)[-1 - shape[-1] // 2] = -30.0
    width = shape[-1] // 2
    out = torch.full((*shape[:-1], width), math.nan, dtype=dtype, device=device)
    got = kernel.swiglu(gate_up, out=out)
    g, u = gate_up.double()[..., :width], gate_up.double()[..., width:]
    want = g * torch.sigmoid(g) * u
    assert got.data_ptr() == out.data_ptr() and not got.isnan().any()
    error = (got.double() - want).abs()
    assert (error <= UNITS[dtype] * (1 + g.abs()) * want.abs() + 1e-30).all(), error.max()


def test_swiglu_rejects_bad_input():
    with pytest.raises(TypeError, match="float32 or bfloat16 with an even last dim"):
        kernel.swiglu(torch.randn(2, 5))
    with pytest.raises(TypeError, match="float32 or bfloat16"):
        kernel.swiglu(torch.randn(2, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="out must be"):
        kernel.swiglu(torch.randn(2, 4), out=torch.empty(2, 3))
