"""A row-major copy of a strided 2-D tensor (e.g. x^T for a token-major x), tile by tile,
optionally padded with zero columns to an aligned width.

Kernels that gather whole rows of B want each row contiguous; torch's generic strided copy
runs far below copy bandwidth for a transposed bf16 operand, this tiled copy near it.

The grid is one-dimensional (tile rows vary fastest), so neither dimension meets CUDA's 65535
limit on grid axes 1 and 2; offsets are int64, so the tensor may pass 2^31 elements.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._sizes import cdiv, next_power_of_2


@triton.jit
def _row_major_copy_kernel(
    src,  # (R, C) with strides stride_r, stride_c (typically stride_r == 1: a transposed view)
    dst,  # (R, WIDTH) row-major, WIDTH >= C: columns C.. are written as zeros
    R,
    C,
    WIDTH,
    stride_r,
    stride_c,
    tiles_r,  # cdiv(R, BLOCK_R): program p copies tile (p % tiles_r, p // tiles_r)
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    pid = tl.program_id(0)
    # int64 from the tile index on: R or C may come within a tile of 2^31.
    offs_r = (pid % tiles_r).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_c = (pid // tiles_r).to(tl.int64) * BLOCK_C + tl.arange(0, BLOCK_C)
    rows = offs_r[:, None]
    cols = offs_c[None, :]
    inside = rows < R
    tile = tl.load(src + rows * stride_r + cols * stride_c, mask=inside & (cols < C), other=0)
    tl.store(dst + rows * WIDTH + cols, tile, mask=inside & (cols < WIDTH))


def row_major_copy(
    *, src: torch.Tensor, width: int | None = None, block_r: int = 64, block_c: int = 64
) -> torch.Tensor:
    """src (R, C) copied row-major into (R, width) (width >= C, default C), zero past column C."""
    rows, cols = src.shape
    width = cols if width is None else width
    if width < cols:
        raise ValueError(f"width must be at least src's {cols} columns, got {width}")
    dst = torch.empty((rows, width), dtype=src.dtype, device=src.device)
    if dst.numel():
        # One axis of at most 2^31 - 1 programs: (2^31 - 1) * 4096 elements, past any memory.
        tiles_r = cdiv(rows, block_r)
        _row_major_copy_kernel[(tiles_r * cdiv(width, block_c),)](
            src=src,
            dst=dst,
            R=rows,
            C=cols,
            WIDTH=width,
            stride_r=src.stride(0),
            stride_c=src.stride(1),
            tiles_r=tiles_r,
            BLOCK_R=block_r,
            BLOCK_C=block_c,
        )
    return dst


def padded_b(b: torch.Tensor, n_cols: int) -> bool:
    """Whether B (K, N) is laid out for the decode kernels' fastest load: (K, next power of two
    of N) row-major with more than one column, as row_major_copy(width=...) leaves it (the
    columns past N must be zero). Its row stride then becomes a compile-time constant."""
    width = next_power_of_2(n_cols)
    return b.dim() == 2 and n_cols > 1 and b.shape[1] == width and b.stride() == (width, 1)
