"""The activations the kernels fuse into their epilogues, chosen at compile time by code."""

import triton
import triton.language as tl

ACTIVATION_CODES = {"none": 0, "relu": 1, "gelu": 2}


@triton.jit
def activate(acc, ACTIVATION: tl.constexpr):
    """acc through ACTIVATION (a code of ACTIVATION_CODES): relu keeps NaN, as torch.relu;
    gelu is the exact erf form, torch's default."""
    if ACTIVATION == 1:
        acc = tl.where(acc < 0, 0.0, acc)
    elif ACTIVATION == 2:
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    return acc
