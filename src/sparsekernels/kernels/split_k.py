"""Split-K's second pass: out = act(sum of the partial products + bias), in a fixed order.

A weight with few rows fills few programs; cutting its K range into `splits` pieces, one
program each, fills the GPU. Each piece writes its partial product (the kernels' accumulator
type) to plane `split` of a (splits, M, N) workspace, and this kernel adds the planes in order
and applies the epilogue: the same sum every run, no atomics (kernels/spmm_nm_expand.py,
kernels/spmm_nm_decode.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._activation import ACTIVATION_CODES
from ._sizes import cdiv
from .spmm_nm import _epilogue_store


def ranges(steps: int, split: int) -> tuple[int, int]:
    """(steps a piece, pieces) for a K walk of `steps` loop steps cut into at most `split`
    pieces: no piece is empty, and a walk of no steps is one piece."""
    if split < 1:
        raise ValueError(f"split must be at least 1, got {split}")
    per_piece = max(1, cdiv(steps, split))
    return per_piece, max(1, cdiv(steps, per_piece))


def workspace(out: torch.Tensor, splits: int, accumulator: torch.dtype) -> torch.Tensor:
    """The (splits, M, N) planes the pieces write, contiguous; `out` itself for one piece."""
    if splits == 1:
        return out
    return out.new_empty((splits, *out.shape), dtype=accumulator)


@triton.jit
def store(
    acc,
    offs_m,
    offs_n,
    mask_m,
    mask_n,
    bias,
    out,  # the (M, N) output, or with PARTIAL the (splits, M, N) workspace
    N,
    SPLIT_STRIDE,  # M * N
    stride_om,
    stride_on,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    PARTIAL: tl.constexpr,
    SPLIT_AXIS: tl.constexpr,  # the grid axis that numbers the pieces
):
    """A piece's end: with PARTIAL its sum (in ACC_DTYPE) into its workspace plane, no
    epilogue; else act(acc + bias) into out."""
    if PARTIAL:
        plane = out + tl.program_id(SPLIT_AXIS).to(tl.int64) * SPLIT_STRIDE
        ptrs = plane + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
        tl.store(ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])
    else:
        _epilogue_store(
            acc,
            offs_m,
            offs_n,
            mask_m,
            mask_n,
            bias,
            out,
            stride_om,
            stride_on,
            HAS_BIAS,
            ACTIVATION,
            ACC_DTYPE,
        )


@triton.jit
def _sum_partials_kernel(
    partials,  # (SPLITS, M, N), contiguous, in the accumulator's type
    bias,
    out,  # (M, N): strides stride_om, stride_on
    M,
    N,
    SPLITS,
    SPLIT_STRIDE,  # M * N
    stride_om,
    stride_on,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    mask = mask_m[:, None] & mask_n[None, :]
    ptrs = partials + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=partials.dtype.element_ty)
    for split in range(SPLITS):  # in order: the same sum every run
        acc += tl.load(ptrs + split * SPLIT_STRIDE, mask=mask, other=0.0)
    _epilogue_store(
        acc,
        offs_m,
        offs_n,
        mask_m,
        mask_n,
        bias,
        out,
        stride_om,
        stride_on,
        HAS_BIAS,
        ACTIVATION,
        partials.dtype.element_ty,
    )


def sum_partials(
    partials: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor, activation: str
) -> torch.Tensor:
    """out = act(partials.sum(0) + bias[:, None]), summing the planes in order."""
    splits, rows, cols = partials.shape
    block_n = min(64, triton.next_power_of_2(cols))
    _sum_partials_kernel[(cdiv(rows, 64), cdiv(cols, block_n))](
        partials,
        bias if bias is not None else partials,
        out,
        rows,
        cols,
        splits,
        rows * cols,
        out.stride(0),
        out.stride(1),
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        BLOCK_M=64,
        BLOCK_N=block_n,
    )
    return out
