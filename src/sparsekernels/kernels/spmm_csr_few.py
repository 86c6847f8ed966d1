"""CSR times a few columns (2-16 tokens: decode of a small batch), a few rows a program.

The one-token kernel's walk (spmm_csr_token.py: 16-entry aligned groups loaded as vectors,
hand-pipelined, the arrays' last partial group read entry by entry) with a row of B gathered
per stored entry: BLOCK_N columns, one aligned vector when B is padded to BLOCK_N columns
(transpose.padded_b). Each entry keeps its own BLOCK_N sums until the walk ends, so a step adds
without a reduction across lanes; the general kernel (spmm_csr.py) sums over its entries at
every step. Bias and activation are fused; fp32 sums (fp64 for fp64 inputs).

tuning.CSR_ROW_WALK_MAX_N says up to which N the routes take it; the H200 sweep
benchmarks/sweeps/csr_few_tokens.py decides.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import spmm_csr_token
from ._activation import ACTIVATION_CODES, activate
from .spmm_csr_token import GROUP, rows_of_program
from .transpose import padded_b


@triton.jit
def _spmm_csr_few_kernel(
    row_offsets,  # (M + 1,) int32/int64
    column_indices,  # (nnz,) int16/int32/int64
    values,  # (nnz,)
    b,  # (K, N): strides stride_bk, stride_bn; or (K, BLOCK_N) padded when PADDED_B
    bias,  # (M,) when HAS_BIAS
    row_order,  # (M,) int32: rows by length, longest first; a program takes ROWS of them
    out,  # (M, N): strides stride_om, stride_on
    M,
    N,
    full,  # entries in whole groups (a multiple of GROUP): what may be loaded as vectors
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # 0 none, 1 relu, 2 gelu
    ACC_DTYPE: tl.constexpr,
    INDEX: tl.constexpr,  # int32 when every offset fits, else int64
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,  # entries of a row a step, a multiple of GROUP
    BLOCK_N: tl.constexpr,
    PADDED_B: tl.constexpr,
    GROUP: tl.constexpr,
    STREAM_CACHE: tl.constexpr = "",  # ".cg": the weight's streams skip L1 (an experiment)
    GATHER_EVICTION: tl.constexpr = "",  # "evict_last": B's rows stay cached (an experiment)
):
    row, mask_r, start, first, end, walk_end = rows_of_program(
        row_offsets, row_order, M, full, INDEX, ROWS, GROUP
    )
    offs_n = tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    if PADDED_B:  # a compile-time row stride, no column mask: one aligned vector a B row
        b_cols = offs_n[None, None, :]
        b_row = BLOCK_N
        col_mask = offs_n[None, None, :] < BLOCK_N
    else:
        b_cols = offs_n.to(INDEX)[None, None, :] * stride_bn
        b_row = stride_bk
        col_mask = mask_n[None, None, :]
    k = tl.arange(0, BLOCK)[None, :]
    offs = first + k
    groups = first + k // GROUP * GROUP  # each entry's group: constant across a vector
    load_mask = groups < walk_end
    cols = tl.load(column_indices + offs, mask=load_mask, other=0, cache_modifier=STREAM_CACHE)
    vals = tl.load(values + offs, mask=load_mask, other=0.0, cache_modifier=STREAM_CACHE)
    acc = tl.zeros((ROWS, BLOCK, BLOCK_N), dtype=ACC_DTYPE)
    for _ in range(0, tl.max(walk_end - first), BLOCK):
        next_offs = offs + BLOCK
        groups += BLOCK
        next_mask = groups < walk_end
        next_cols = tl.load(
            column_indices + next_offs, mask=next_mask, other=0, cache_modifier=STREAM_CACHE
        )
        next_vals = tl.load(
            values + next_offs, mask=next_mask, other=0.0, cache_modifier=STREAM_CACHE
        )
        live = (offs >= start) & (offs < walk_end)
        tile = tl.load(
            b + cols.to(INDEX)[:, :, None] * b_row + b_cols,
            mask=live[:, :, None] & col_mask,
            other=0.0,
            eviction_policy=GATHER_EVICTION,
        )
        live_vals = tl.where(live, vals.to(ACC_DTYPE), 0.0)
        acc += live_vals[:, :, None] * tile.to(ACC_DTYPE)
        offs, load_mask, cols, vals = next_offs, next_mask, next_cols, next_vals
    total = tl.sum(acc, axis=1)  # (ROWS, BLOCK_N)
    if tl.max(end) > full:  # rows owning some of the last, partial group: entry by entry
        tail = full + tl.arange(0, GROUP)[None, :]
        owned = (tail >= start) & (tail < end)
        tail_cols = tl.load(column_indices + tail, mask=owned, other=0).to(INDEX)
        tail_vals = tl.load(values + tail, mask=owned, other=0.0).to(ACC_DTYPE)
        tile = tl.load(
            b + tail_cols[:, :, None] * b_row + b_cols,
            mask=owned[:, :, None] & col_mask,
            other=0.0,
        ).to(ACC_DTYPE)
        total += tl.sum(tail_vals[:, :, None] * tile, axis=1)

    if HAS_BIAS:
        total += tl.load(bias + row, mask=mask_r, other=0.0).to(ACC_DTYPE)[:, None]
    total = activate(total, ACTIVATION)
    out_ptrs = out + row[:, None] * stride_om + offs_n.to(INDEX)[None, :] * stride_on
    tl.store(out_ptrs, total.to(out.dtype.element_ty), mask=mask_r[:, None] & mask_n[None, :])


def spmm_csr_few(
    *,
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    values: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    row_order: torch.Tensor,
    out: torch.Tensor,
    activation: str,
    rows_per_program: int,
    block: int,
    num_warps: int,
    stream_cache: str = "",
    gather_eviction: str = "",
) -> torch.Tensor:
    """out (M, N) = A @ b for a CSR A (one matrix of values) and b (K, N), any strides; b padded
    to a power-of-two width (transpose.padded_b) with out's N columns loads fastest.
    `stream_cache` (a load cache modifier for the values and columns) and `gather_eviction`
    (an eviction policy for B's rows) are for benchmarks/sweeps/csr_few_cache_hints.py: can
    the weight's one-pass streams be kept from evicting B's rows from L1?"""
    rows, n = out.shape
    if rows == 0 or n == 0:
        return out
    block_n = triton.next_power_of_2(n)
    padded = padded_b(b, n) and b.shape[1] == block_n
    nnz, k = values.numel(), b.shape[0]
    reach = (
        nnz + 2 * block,
        k * block_n if padded else k * abs(b.stride(0)) + n * abs(b.stride(1)),
        rows * abs(out.stride(0)) + n * abs(out.stride(1)),
        rows + rows_per_program,
    )
    _spmm_csr_few_kernel[(triton.cdiv(rows, rows_per_program),)](
        row_offsets,
        column_indices,
        values,
        b,
        bias if bias is not None else values,
        row_order,
        out,
        rows,
        n,
        nnz // GROUP * GROUP,
        b.stride(0),
        b.stride(1),
        out.stride(0),
        out.stride(1),
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        ACC_DTYPE=tl.float64 if out.dtype == torch.float64 else tl.float32,
        INDEX=tl.int32 if max(reach) < spmm_csr_token.INT32_LIMIT else tl.int64,
        ROWS=rows_per_program,
        BLOCK=block,
        BLOCK_N=block_n,
        PADDED_B=padded,
        GROUP=GROUP,
        STREAM_CACHE=stream_cache,
        GATHER_EVICTION=gather_eviction,
        num_warps=num_warps,
        num_stages=1,
    )
    return out
