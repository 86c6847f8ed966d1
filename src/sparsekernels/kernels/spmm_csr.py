"""CSR SpMM: one program computes BLOCK_ROWS rows x BLOCK_N columns of the output.

Rows are visited in `row_order` (longest first, Sputnik's row swizzle): the rows a program
shares have similar lengths, long rows start early and short ones fill the tail. Each step
gathers BLOCK_NNZ rows of B per output row, picked by its column indices, and accumulates in
fp32 (fp64 for fp64 inputs); bias and activation are fused. Several rows per program (decode
sizes) keep enough loads in flight when N is small.

Index arithmetic is INDEX (int64 wherever a product can pass 2^31, else int32: the one-token
kernel ran 1.33x faster in int32, spmm_csr_token.py): rows, entry offsets and column indices
are converted once they are loaded, and the column-tile offsets of B and out are INDEX
products computed once per program (a transposed B, x^T in `linear`, has stride_bn = K).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._activation import ACTIVATION_CODES, activate
from ._sizes import cdiv, matrix_span
from .transpose import padded_b


@triton.jit
def _spmm_csr_kernel(
    row_offsets,  # (M + 1,) int32/int64
    column_indices,  # (nnz,) int16/int32/int64
    values,  # (nnz,) or (batch, nnz): stride_vb between matrices, unit stride along nnz
    b,  # (K, N) or (batch, K, N): strides stride_bb, stride_bk, stride_bn
    bias,  # (M,) when HAS_BIAS
    row_order,  # (M,) int32: rows by length, longest first; program p takes BLOCK_ROWS of them
    out,  # (batch, M, N): strides stride_ob, stride_om, stride_on
    M,
    N,
    stride_vb,
    stride_bb,
    stride_bk,
    stride_bn,
    stride_ob,
    stride_om,
    stride_on,
    B_COLS,  # B's columns, read past N (never stored): with 16 | B_COLS B's rows load wide
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # 0 none, 1 relu, 2 gelu
    ACC_DTYPE: tl.constexpr,
    INDEX: tl.constexpr,  # int32 when every offset within a matrix fits, else int64
    BLOCK_ROWS: tl.constexpr,
    BLOCK_NNZ: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PADDED_B: tl.constexpr,  # b is (K, BLOCK_N) row-major, zero past column N (transpose.padded_b)
):
    # INDEX from the program id on: M may come within BLOCK_ROWS of 2^31.
    offs_r = tl.program_id(0).to(INDEX) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    mask_r = offs_r < M
    rows = tl.load(row_order + offs_r, mask=mask_r, other=0).to(INDEX)
    pid_n = tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)
    start = tl.load(row_offsets + rows, mask=mask_r, other=0).to(INDEX)
    end = tl.load(row_offsets + rows + 1, mask=mask_r, other=0).to(INDEX)
    # Rows come longest first, so the block's first row bounds the loop.
    longest = tl.max(end - start, axis=0)

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # < 65535 * BLOCK_N (grid): fits int32
    mask_n = offs_n < N
    # masked on N (ResNet-50's 49 or 196) a row-major B's rows load 2-4 bytes a thread (sm_90
    # SASS, the sixty-second session's audit); on a padded width as 16-byte vectors
    mask_bn = offs_n < B_COLS
    # Column offsets times a stride can pass 2^31 (stride_bn = K for x^T): INDEX, once.
    b_cols = offs_n.to(INDEX) * stride_bn
    out_cols = offs_n.to(INDEX) * stride_on
    values += batch * stride_vb
    b += batch * stride_bb
    acc = tl.zeros((BLOCK_ROWS, BLOCK_N), dtype=ACC_DTYPE)
    for k in range(0, longest, BLOCK_NNZ):
        offs = start[:, None] + k + tl.arange(0, BLOCK_NNZ)[None, :]
        mask = offs < end[:, None]
        cols = tl.load(column_indices + offs, mask=mask, other=0).to(INDEX)
        vals = tl.load(values + offs, mask=mask, other=0.0).to(ACC_DTYPE)
        if PADDED_B:  # a compile-time row stride, no column mask: one aligned vector a row
            tile = tl.load(
                b + cols[:, :, None] * BLOCK_N + offs_n[None, None, :],
                mask=mask[:, :, None],
                other=0.0,
            ).to(ACC_DTYPE)
        else:
            tile = tl.load(
                b + cols[:, :, None] * stride_bk + b_cols[None, None, :],
                mask=mask[:, :, None] & mask_bn[None, None, :],
                other=0.0,
            ).to(ACC_DTYPE)
        acc += tl.sum(vals[:, :, None] * tile, axis=1)

    if HAS_BIAS:
        acc += tl.load(bias + rows, mask=mask_r, other=0.0).to(ACC_DTYPE)[:, None]
    acc = activate(acc, ACTIVATION)
    out_ptrs = out + batch * stride_ob + rows[:, None] * stride_om + out_cols[None, :]
    tl.store(out_ptrs, acc.to(out.dtype.element_ty), mask=mask_r[:, None] & mask_n[None, :])


INT32_LIMIT = 2**31  # offsets within one matrix below it are computed in int32


def _reach(values, b, out, block_rows: int, block_nnz: int) -> int:
    """A bound on the element offsets the kernel forms within one matrix of the batch (the
    batch offsets are added to the pointers separately, in int64)."""
    rows = out.shape[1]
    return max(values.shape[-1] + block_nnz, matrix_span(b), matrix_span(out), rows + block_rows)


def spmm_csr(
    *,
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    values: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    row_order: torch.Tensor,
    out: torch.Tensor,
    activation: str,
    block_rows: int,
    block_nnz: int,
    block_n: int,
    num_warps: int,
) -> torch.Tensor:
    """Launch over out (batch, M, N); values/b may be unbatched (their batch stride is 0). A 2-D
    b padded to block_n columns (transpose.padded_b) takes the fastest load; b may carry
    columns past N (a padded copy: read, never stored)."""
    batch, rows, n = out.shape
    if rows == 0 or n == 0 or batch == 0:
        return out
    if b.shape[-1] < n:
        raise ValueError(f"b needs at least out's {n} columns, got {b.shape[-1]}")
    grid = (cdiv(rows, block_rows), cdiv(n, block_n), batch)
    acc = tl.float64 if out.dtype == torch.float64 else tl.float32
    _spmm_csr_kernel[grid](
        row_offsets,
        column_indices,
        values,
        b,
        bias if bias is not None else values,
        row_order,
        out,
        rows,
        n,
        values.stride(0) if values.dim() == 2 else 0,
        b.stride(0) if b.dim() == 3 else 0,
        b.stride(-2),
        b.stride(-1),
        out.stride(0),
        out.stride(1),
        out.stride(2),
        b.shape[-1],
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        ACC_DTYPE=acc,
        INDEX=tl.int32 if _reach(values, b, out, block_rows, block_nnz) < INT32_LIMIT else tl.int64,
        BLOCK_ROWS=block_rows,
        BLOCK_NNZ=block_nnz,
        BLOCK_N=block_n,
        PADDED_B=padded_b(b, n) and b.shape[1] == block_n,
        num_warps=num_warps,
    )
    return out
