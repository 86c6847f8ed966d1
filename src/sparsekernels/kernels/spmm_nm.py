"""N:M SpMM, out = act(W @ B + bias), first kernels: W (M, K) keeps n of every m along K.

Both kernels walk W's compressed values (M, K * n / m) slot by slot and find each slot's column
from its uint8 block offset: slot s lies in group s // n, is the (s % n)-th kept element there,
so its column is group * m + offset[block of the slot] * block + (s % n) % block.

- `_spmm_nm_gather_kernel` (any pattern, CUDA cores): each row gathers its own B rows; a
  (BLOCK_M, BLOCK_S, BLOCK_N) product is reduced over the slots. Decode sizes (N <= 16) and
  element-wise patterns take this path.
- `_spmm_nm_dot_kernel` (vector-wise, VECTOR % BLOCK_M == 0): the BLOCK_M rows of a tile share
  one choice, so one gathered (BLOCK_S, BLOCK_N) tile of B feeds a tensor-core `tl.dot` over the
  condensed K.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._activation import ACTIVATION_CODES, activate
from ._sizes import cdiv


@triton.jit
def _slot_columns(
    slots,
    group_rows,
    indices,
    stride_im,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Columns of `slots` (BLOCK_S,) for row groups `group_rows` (broadcastable)."""
    group = slots // N_KEEP
    within = slots % N_KEEP
    index_col = group * (N_KEEP // BLOCK) + within // BLOCK
    offset = tl.load(indices + group_rows * stride_im + index_col).to(tl.int64)
    return group.to(tl.int64) * M_GROUP + offset * BLOCK + within % BLOCK  # K may pass 2^31


@triton.jit
def _epilogue_store(
    acc,
    offs_m,
    offs_n,
    mask_m,
    mask_n,
    bias,
    out,
    stride_om,
    stride_on,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
):
    if HAS_BIAS:
        acc += tl.load(bias + offs_m, mask=mask_m, other=0.0).to(ACC_DTYPE)[:, None]
    acc = activate(acc, ACTIVATION)
    ptrs = out + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :].to(tl.int64) * stride_on
    tl.store(ptrs, acc.to(out.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _spmm_nm_gather_kernel(
    values,  # (M, S) compressed values, S = K * n / m; strides stride_vm, 1
    indices,  # (ceil(M / VECTOR), S / BLOCK) uint8 block offsets; strides stride_im, 1
    b,  # (K, N): strides stride_bk, stride_bn
    bias,  # (M,) when HAS_BIAS
    out,  # (M, N): strides stride_om, stride_on
    M,
    N,
    S,
    stride_vm,
    stride_im,
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    VECTOR: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    offs_m = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows = offs_m.to(tl.int64)
    group_rows = tl.where(mask_m, rows // VECTOR, 0)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_DTYPE)
    for s0 in range(0, S, BLOCK_S):
        slots = s0 + tl.arange(0, BLOCK_S)
        mask_s = slots < S
        mask_ms = mask_m[:, None] & mask_s[None, :]
        vals = tl.load(values + rows[:, None] * stride_vm + slots[None, :], mask=mask_ms, other=0.0)
        cols = _slot_columns(
            tl.where(mask_s, slots, 0)[None, :],
            group_rows[:, None],
            indices,
            stride_im,
            N_KEEP,
            M_GROUP,
            BLOCK,
        )
        tile = tl.load(
            b + cols[:, :, None] * stride_bk + offs_n[None, None, :].to(tl.int64) * stride_bn,
            mask=mask_ms[:, :, None] & mask_n[None, None, :],
            other=0.0,
        )
        acc += tl.sum(vals.to(ACC_DTYPE)[:, :, None] * tile.to(ACC_DTYPE), axis=1)
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
def _spmm_nm_dot_kernel(
    values,
    indices,
    b,
    bias,
    out,  # as in _spmm_nm_gather_kernel
    M,
    N,
    S,
    stride_vm,
    stride_im,
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    B_COLS,  # B's columns, read past N (never stored): a multiple of 16 keeps B's loads wide
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    VECTOR: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,  # the CPU interpreter miscomputes bf16 tl.dot (triton 3.9): use fp32
    BLOCK_M: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0).to(tl.int64)  # M may come within BLOCK_M of 2^31
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    # B's tile masked on N (33 tokens) loads 2 bytes a thread, unpipelined, the loop 2.2-4.4x
    # longer; on 16 | B_COLS as 16-byte async copies (sm_90 SASS, the sixty-second session)
    mask_bn = offs_n < B_COLS
    rows = offs_m.to(tl.int64)
    group_row = (pid_m * BLOCK_M // VECTOR).to(tl.int64)  # the tile's rows share this choice
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s0 in range(0, S, BLOCK_S):
        slots = s0 + tl.arange(0, BLOCK_S)
        mask_s = slots < S
        vals = tl.load(
            values + rows[:, None] * stride_vm + slots[None, :],
            mask=mask_m[:, None] & mask_s[None, :],
            other=0.0,
        )
        cols = _slot_columns(
            tl.where(mask_s, slots, 0), group_row, indices, stride_im, N_KEEP, M_GROUP, BLOCK
        )
        tile = tl.load(
            b + cols[:, None] * stride_bk + offs_n[None, :].to(tl.int64) * stride_bn,
            mask=mask_s[:, None] & mask_bn[None, :],
            other=0.0,
        )
        if UPCAST:
            vals = vals.to(tl.float32)
            tile = tile.to(tl.float32)
        acc = tl.dot(vals, tile, acc, input_precision=PRECISION)
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
        tl.float32,
    )


def spmm_nm(
    *,
    values: torch.Tensor,
    indices: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    n: int,
    m: int,
    vector: int,
    block: int,
    activation: str,
    use_dot: bool,
    block_m: int,
    block_s: int,
    block_n: int,
    num_warps: int,
    num_stages: int,
) -> torch.Tensor:
    """Launch over out (M, N); values and indices must have unit stride along their last dim.
    b (K, at least N columns) may carry zero columns past N (ops/_layout.py's padded copies):
    the tensor-core tile reads them, which keeps its loads wide, and never stores them."""
    if use_dot and vector % block_m:  # (a tile's rows share one vector's choice of columns)
        raise ValueError(
            f"block_m must divide vector for the tensor-core tile, got {block_m} and {vector}"
        )
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    if b.shape[1] < cols:
        raise ValueError(f"b needs at least out's {cols} columns, got {b.shape[1]}")
    grid = (cdiv(rows, block_m), cdiv(cols, block_n))
    common = dict(
        N_KEEP=n,
        M_GROUP=m,
        VECTOR=vector,
        BLOCK=block,
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        BLOCK_M=block_m,
        BLOCK_S=block_s,
        BLOCK_N=block_n,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    args = (
        values,
        indices,
        b,
        bias if bias is not None else values,
        out,
        rows,
        cols,
        values.shape[1],
        values.stride(0),
        indices.stride(0),
        b.stride(0),
        b.stride(1),
        out.stride(0),
        out.stride(1),
    )
    if use_dot:
        upcast = values.device.type == "cpu" and values.dtype == torch.bfloat16
        precision = "ieee" if values.dtype == torch.float32 or upcast else "tf32"
        _spmm_nm_dot_kernel[grid](*args, b.shape[1], PRECISION=precision, UPCAST=upcast, **common)
    else:
        acc = tl.float64 if values.dtype == torch.float64 else tl.float32
        _spmm_nm_gather_kernel[grid](*args, ACC_DTYPE=acc, **common)
    return out
