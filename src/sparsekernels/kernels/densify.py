"""Densify: write the dense (M, K) matrix of a CSR or N:M weight in one pass over it.

The dense backend multiplies this matrix with cuBLAS, so densifying must cost little next to
the GEMM: its floor is writing M x K elements once (117 MB, ~28 us for 14336 x 4096 bf16).
Each program owns whole rows (CSR) or a tile of rows x whole groups (N:M) and writes every
output element of its tile itself, so there is no separate memset and no atomics:

- scatter (both formats): the program stores zeros over its tile, waits at a barrier (all its
  threads' stores are then ordered before what follows), then stores each stored value at its
  column. Kept elements are written twice, the second time into lines the first just put in L2.
  With WRITE_ZEROS=False the program only scatters (into an output zeroed beforehand).
- select (N:M with a power-of-two m, SELECT=True): every output element is written exactly
  once. A tile is (rows, groups, m) with each thread holding whole groups; for each of the
  group's n / block kept offsets the program loads the offset and its value(s) once and puts
  them where the position matches (zeros elsewhere), then stores whole groups (16-byte stores
  for bf16 and m >= 8; no shared memory for element-wise patterns).

Exact: values are copied, never combined, so the result is bitwise what indexing gives.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._sizes import cdiv
from .spmm_nm import _slot_columns


@triton.jit
def _densify_csr_kernel(
    row_offsets,  # (M + 1,) int32/int64
    column_indices,  # (nnz,) int16/int32/int64, distinct within a row (any order)
    values,  # (nnz,) or (batch, nnz): stride_vb between matrices, unit stride along nnz
    out,  # (batch, M, K): strides stride_ob, stride_om, 1
    M,
    K,
    stride_vb,
    stride_ob,
    stride_om,
    WRITE_ZEROS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_NNZ: tl.constexpr,
):
    offs_r = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    mask_r = offs_r < M
    rows = offs_r.to(tl.int64)
    batch = tl.program_id(1).to(tl.int64)
    row_ptrs = out + batch * stride_ob + rows[:, None] * stride_om
    values += batch * stride_vb
    if WRITE_ZEROS:
        zeros = tl.zeros((BLOCK_ROWS, BLOCK_K), dtype=out.dtype.element_ty)
        for k0 in range(0, K, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            tl.store(row_ptrs + cols[None, :], zeros, mask=mask_r[:, None] & (cols < K)[None, :])
        # Every thread's zeros are stored before any thread scatters over them.
        tl.debug_barrier()
    start = tl.load(row_offsets + rows, mask=mask_r, other=0).to(tl.int64)
    end = tl.load(row_offsets + rows + 1, mask=mask_r, other=0).to(tl.int64)
    longest = tl.max(end - start, axis=0)
    for e0 in range(0, longest, BLOCK_NNZ):
        offs = start[:, None] + e0 + tl.arange(0, BLOCK_NNZ)[None, :]
        mask = offs < end[:, None]
        cols = tl.load(column_indices + offs, mask=mask, other=0).to(tl.int64)
        vals = tl.load(values + offs, mask=mask)
        tl.store(row_ptrs + cols, vals, mask=mask)


@triton.jit
def _densify_nm_kernel(
    values,  # (M, S) compressed values, S = K / M_GROUP * N_KEEP: strides stride_vm, 1
    indices,  # (ceil(M / VECTOR), S / BLOCK) uint8 block offsets: strides stride_im, 1
    out,  # (M, K): strides stride_om, 1
    M,
    K,
    stride_vm,
    stride_im,
    stride_om,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    VECTOR: tl.constexpr,
    BLOCK: tl.constexpr,
    WRITE_ZEROS: tl.constexpr,
    SELECT: tl.constexpr,
    PROGRAM_GROUPS: tl.constexpr,  # program (i, j) owns rows i * BLOCK_M.., groups j * this..
    ALIGNED: tl.constexpr,  # a program's columns (groups) divide in whole steps, or reach K
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,  # zeros stored a step (scatter)
    BLOCK_S: tl.constexpr,  # compressed slots a step (scatter)
    BLOCK_G: tl.constexpr,  # groups a step (select)
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < M
    rows = offs_m.to(tl.int64)
    group_rows = tl.where(mask_m, rows // VECTOR, 0)
    # A constant span keeps the alignment of col0 visible to the compiler (vector stores).
    col0 = tl.program_id(1).to(tl.int64) * (PROGRAM_GROUPS * M_GROUP)
    col1 = tl.minimum(col0 + PROGRAM_GROUPS * M_GROUP, K)
    group0 = col0 // M_GROUP
    group1 = col1 // M_GROUP
    row_ptrs = out + rows[:, None] * stride_om
    if SELECT:  # M_GROUP is a power of two: a tile is (BLOCK_M rows, BLOCK_G groups, M_GROUP)
        KEPT: tl.constexpr = N_KEEP // BLOCK
        within = tl.arange(0, M_GROUP)[None, None, :]
        for g0 in range(group0, group1, BLOCK_G):
            groups = g0 + tl.arange(0, BLOCK_G)
            mask = mask_m[:, None, None] & (groups < group1)[None, :, None]  # (BLOCK_M, BLOCK_G, 1)
            offset_ptrs = indices + group_rows[:, None, None] * stride_im
            offset_ptrs += groups[None, :, None] * KEPT
            value_ptrs = values + rows[:, None, None] * stride_vm + groups[None, :, None] * N_KEEP
            tile = tl.zeros((BLOCK_M, BLOCK_G, M_GROUP), dtype=out.dtype.element_ty)
            for j in range(KEPT):
                # A masked group matches no position (offsets are below M_GROUP / BLOCK).
                offset = tl.load(offset_ptrs + j, mask=mask, other=M_GROUP).to(tl.int32)
                if BLOCK == 1:  # one value per kept offset
                    value = tl.load(value_ptrs + j, mask=mask, other=0.0)
                    tile = tl.where(offset == within, value, tile)
                else:  # the kept block's BLOCK values, at their position within the block
                    hit = offset == within // BLOCK
                    value_offs = j * BLOCK + within % BLOCK
                    value = tl.load(value_ptrs + value_offs, mask=mask & hit, other=0.0)
                    tile = tl.where(hit, value, tile)
            out_ptrs = row_ptrs[:, :, None] + groups[None, :, None] * M_GROUP + within
            tl.store(out_ptrs, tile, mask=mask)
    else:
        if WRITE_ZEROS:
            zeros = tl.zeros((BLOCK_M, BLOCK_K), dtype=out.dtype.element_ty)
            for k0 in range(col0, col1, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                mask_k = (cols < K) if ALIGNED else (cols < col1)
                tl.store(row_ptrs + cols[None, :], zeros, mask=mask_m[:, None] & mask_k)
            # Every thread's zeros are stored before any thread scatters over them.
            tl.debug_barrier()
        slot0, slot1 = group0 * N_KEEP, group1 * N_KEEP
        for s0 in range(slot0, slot1, BLOCK_S):
            slots = s0 + tl.arange(0, BLOCK_S)
            mask_s = slots < slot1
            mask = mask_m[:, None] & mask_s[None, :]
            vals = tl.load(values + rows[:, None] * stride_vm + slots[None, :], mask=mask)
            cols = _slot_columns(
                tl.where(mask_s, slots, 0)[None, :],
                group_rows[:, None],
                indices,
                stride_im,
                N_KEEP,
                M_GROUP,
                BLOCK,
            )
            tl.store(row_ptrs + cols, vals, mask=mask)


def densify_csr(
    *,
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    values: torch.Tensor,
    out: torch.Tensor,
    write_zeros: bool,
    block_rows: int,
    block_k: int,
    block_nnz: int,
    num_warps: int,
) -> torch.Tensor:
    """Write out (batch, M, K) (rows contiguous) from CSR; values (nnz,) or (batch, nnz) with
    unit stride along nnz. Without write_zeros, out must hold zeros already."""
    batch, rows, cols = out.shape
    if rows == 0 or cols == 0 or batch == 0:
        return out
    if values.shape[-1] == 0:  # no stored entries to point at
        return out.zero_() if write_zeros else out
    assert out.stride(2) == 1 and values.stride(-1) == 1
    grid = (cdiv(rows, block_rows), batch)
    _densify_csr_kernel[grid](
        row_offsets,
        column_indices,
        values,
        out,
        rows,
        cols,
        values.stride(0) if values.dim() == 2 else 0,
        out.stride(0),
        out.stride(1),
        WRITE_ZEROS=write_zeros,
        BLOCK_ROWS=block_rows,
        BLOCK_K=block_k,
        BLOCK_NNZ=block_nnz,
        num_warps=num_warps,
    )
    return out


def densify_nm(
    *,
    values: torch.Tensor,
    indices: torch.Tensor,
    out: torch.Tensor,
    n: int,
    m: int,
    vector: int,
    block: int,
    write_zeros: bool,
    select: bool,
    block_m: int,
    block_k: int,
    block_s: int,
    program_cols: int,
    num_warps: int,
) -> torch.Tensor:
    """Write out (M, K) (rows contiguous) from an N:M weight; values and indices need unit stride
    along their last dimension. A program covers block_m rows and about program_cols columns
    (whole groups), block_k columns a step. `select` needs a power-of-two m (other m scatter);
    without write_zeros (scatter only), out must hold zeros already."""
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    assert out.stride(1) == 1 and values.stride(1) == 1 and indices.stride(1) == 1
    if select and m & (m - 1):  # select tiles groups of a power-of-two width
        select, write_zeros = False, True
    groups = cols // m
    per_program = min(groups, max(1, program_cols // m, cdiv(groups, 65535)))
    aligned = per_program == groups or (per_program * m) % block_k == 0
    grid = (cdiv(rows, block_m), cdiv(groups, per_program))
    _densify_nm_kernel[grid](
        values,
        indices,
        out,
        rows,
        cols,
        values.stride(0),
        indices.stride(0),
        out.stride(0),
        N_KEEP=n,
        M_GROUP=m,
        VECTOR=vector,
        BLOCK=block,
        WRITE_ZEROS=write_zeros,
        SELECT=select,
        PROGRAM_GROUPS=per_program,
        ALIGNED=aligned,
        BLOCK_M=block_m,
        BLOCK_K=block_k,
        BLOCK_S=block_s,
        BLOCK_G=max(1, block_k // m),
        num_warps=num_warps,
    )
    return out
