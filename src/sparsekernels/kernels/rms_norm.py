"""RMSNorm with an optional residual add before it, one program a row: for the few rows of a
decode step (models/llama.py).

A Llama decode step at batch 1 normalizes one row of 4096 twice a layer, each time right after
a residual add. torch's fused RMSNorm took 5.9 us a row on the H200 (one block walking the row):
53 of a 2:8 step's 392 us of GPU time, the adds a launch each besides, on the dense and the
sparse model alike (results/nvidia-h200/2026-11-30/at-7438ce3/llama_profile.txt). Fused here, a
step went dense 651 -> 595 us, 2:8 416 -> 369 (at-fcce5dd/llama_profile.txt, CUDA graphs).
Here one program holds its whole
row in registers, adds the residual, writes the sum (rounded to x's dtype, as x + delta is) and
normalizes that sum in float32, the weight's product too, rounded once. float32 and bfloat16
only, the dtypes checked on the H200: compiled, the float64 form came out within ~1e-9 of
float64, not its rounding (Triton's sqrt and division approximate), so float64 takes torch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._pdl import decode_pdl, launch_options, pdl_start
from ._sizes import next_power_of_2

MAX_COLS = 16384  # a row in one program's registers; longer rows take torch's path
DTYPES = (torch.float32, torch.bfloat16)


@triton.jit
def _rms_norm_kernel(
    x, delta, weight, sum_out, out, cols, eps,
    stride_x, stride_d, stride_s, stride_o,
    HAS_DELTA: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pdl_start(PDL)  # (kernels/_pdl.py: with SPARSEKERNELS_PDL, overlap the launch)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    value = tl.load(x + row * stride_x + offs, mask=mask, other=0.0)
    if HAS_DELTA:
        d = tl.load(delta + row * stride_d + offs, mask=mask, other=0.0)
        value = (value.to(tl.float32) + d.to(tl.float32)).to(sum_out.dtype.element_ty)
        tl.store(sum_out + row * stride_s + offs, value, mask=mask)
    v = value.to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(v * v, axis=0) / cols + eps)
    w = tl.load(weight + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out + row * stride_o + offs, (v * inv * w).to(out.dtype.element_ty), mask=mask)


def supports(x: torch.Tensor) -> bool:
    """Rows this kernel takes: float32 or bfloat16, a last dim of 1 to MAX_COLS."""
    return x.dtype in DTYPES and 0 < x.shape[-1] <= MAX_COLS


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, delta: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + delta, rms_norm(x + delta) * weight) over the last dim; without `delta`, (x, rms_norm(x)
    * weight). x and delta alike in shape and dtype; weight (cols,)."""
    cols = x.shape[-1]
    if weight.shape != (cols,):
        raise ValueError(f"weight must have shape ({cols},), got {tuple(weight.shape)}")
    if delta is not None and (delta.shape != x.shape or delta.dtype != x.dtype):
        raise ValueError(
            f"delta must match x ({tuple(x.shape)}, {x.dtype}), "
            f"got {tuple(delta.shape)}, {delta.dtype}"
        )
    if x.dtype not in DTYPES:
        raise TypeError(f"x must be float32 or bfloat16, got {x.dtype}")
    if not supports(x):
        raise ValueError(f"x's last dim must be 1 to {MAX_COLS}, got {cols}")
    rows_x = x.reshape(-1, cols)
    rows_d = delta.reshape(-1, cols) if delta is not None else rows_x
    if rows_x.stride(-1) != 1 or rows_d.stride(-1) != 1:
        rows_x, rows_d = rows_x.contiguous(), rows_d.contiguous()
    total = torch.empty_like(rows_x) if delta is not None else rows_x
    out = torch.empty_like(rows_x)
    if rows_x.shape[0]:
        block = next_power_of_2(cols)
        pdl = min(1, decode_pdl(x.device))
        _rms_norm_kernel[(rows_x.shape[0],)](
            rows_x, rows_d, weight.contiguous(), total, out, cols, eps,
            rows_x.stride(0), rows_d.stride(0), total.stride(0), out.stride(0),
            HAS_DELTA=delta is not None,
            BLOCK=block,
            PDL=pdl,
            num_warps=min(16, max(1, block // 512)),
            **launch_options(pdl),
        )  # fmt: skip
    return total.view(x.shape), out.view(x.shape)
