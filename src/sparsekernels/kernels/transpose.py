"""A row-major copy of a strided 2-D tensor (e.g. x^T for a token-major x), tile by tile.

Kernels that gather whole rows of B want each row contiguous; torch's generic strided copy
runs far below copy bandwidth for a transposed bf16 operand, this tiled copy near it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _row_major_copy_kernel(
    src,  # (R, C) with strides stride_r, stride_c (typically stride_r == 1: a transposed view)
    dst,  # (R, C) row-major
    R,
    C,
    stride_r,
    stride_c,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    rows = offs_r.to(tl.int64)[:, None]
    cols = offs_c.to(tl.int64)[None, :]
    tile = tl.load(src + rows * stride_r + cols * stride_c, mask=mask)
    tl.store(dst + rows * C + cols, tile, mask=mask)


def row_major_copy(*, src: torch.Tensor, block_r: int = 64, block_c: int = 64) -> torch.Tensor:
    rows, cols = src.shape
    dst = torch.empty((rows, cols), dtype=src.dtype, device=src.device)
    if src.numel():
        grid = (triton.cdiv(rows, block_r), triton.cdiv(cols, block_c))
        _row_major_copy_kernel[grid](
            src, dst, rows, cols, src.stride(0), src.stride(1), BLOCK_R=block_r, BLOCK_C=block_c
        )
    return dst
