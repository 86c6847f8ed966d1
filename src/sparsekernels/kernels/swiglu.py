"""SwiGLU's gate, silu(gate) * up, in one launch from the fused gate/up projection's output
(gate first, up second along the last dim): for a decode step (models/llama.py).

torch runs it as two small kernels (silu, then the product), each ~2 us at a decode step's
sizes, on the dense and the sparse model alike. Here one program per BLOCK outputs of a row
reads both halves, computes in float32 and rounds once. float32 and bfloat16 only, like
kernels/rms_norm.py. On the H200 (results/nvidia-h200/2026-12-01/at-2f885a8/llama_profile.txt)
1.1 us a layer; with rope_cache.py the Llama step went 1.12x faster (e2e_llama there).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._pdl import decode_pdl, launch_options, pdl_start

DTYPES = (torch.float32, torch.bfloat16)
BLOCK = 1024


@triton.jit
def _swiglu_kernel(gate_up, out, width, stride_in, stride_out, BLOCK: tl.constexpr,
                   PDL: tl.constexpr):  # fmt: skip
    pdl_start(PDL)  # (kernels/_pdl.py: with SPARSEKERNELS_PDL, overlap the launch)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < width
    gate = tl.load(gate_up + row * stride_in + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_up + row * stride_in + width + offs, mask=mask, other=0.0).to(tl.float32)
    result = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out + row * stride_out + offs, result.to(out.dtype.element_ty), mask=mask)


def supports(gate_up: torch.Tensor) -> bool:
    """float32 or bfloat16 with an even last dim."""
    return gate_up.dtype in DTYPES and gate_up.shape[-1] % 2 == 0


def swiglu(gate_up: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(gate) * up for gate_up = cat(gate, up) along the last dim: (..., width), into `out`
    (contiguous, that shape and dtype) when given."""
    if not supports(gate_up):
        raise TypeError(
            f"gate_up must be float32 or bfloat16 with an even last dim, got {gate_up.dtype} "
            f"of shape {tuple(gate_up.shape)}"
        )
    width = gate_up.shape[-1] // 2
    rows = gate_up.reshape(-1, 2 * width)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    shape = (*gate_up.shape[:-1], width)
    if out is None:
        out = rows.new_empty(shape)
    elif out.shape != shape or out.dtype != gate_up.dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {shape} {gate_up.dtype} tensor")
    out = out.view(-1, width)
    if out.numel():
        pdl = min(1, decode_pdl(out.device))
        _swiglu_kernel[(rows.shape[0], triton.cdiv(width, BLOCK))](
            rows, out, width, rows.stride(0), out.stride(0), BLOCK=BLOCK, PDL=pdl, num_warps=4,
            **launch_options(pdl),
        )  # fmt: skip
    return out.view(shape)
