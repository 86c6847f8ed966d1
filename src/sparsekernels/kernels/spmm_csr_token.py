"""CSR times one column (one token: a decode step's matrix-vector product), a few rows a program.

At one token the product is bound by the stored entries' bytes (a value and a column each). Two
things keep those loads at full speed:
- Aligned groups. A row's entries start anywhere, so loads masked entry by entry are scalar. The
  walk starts at the GROUP-entry boundary below the row's start and masks whole groups, a mask
  the compiler can see is constant across a 16-byte vector; entries of the neighbouring rows in
  the first and last group are loaded and then zeroed. Groups reaching past the last full group
  of the arrays are never loaded as vectors: the few entries there (fewer than GROUP) are read
  one by one after the walk, by the rows that own them, so no load leaves the arrays.
- A hand-pipelined walk: the next step's values and columns are loaded before this step's
  gather of x, whose addresses depend on loaded columns (Triton's own pipelining cannot overlap
  it). The H200 sweep benchmarks/sweeps/csr_decode_delta.py measured 1.27-1.36x the general
  kernel's one-row form at 70% sparsity (at-84bb050).

Rows are visited in `row_order` (longest first), as in spmm_csr.py; bias and activation are
fused; fp32 sums (fp64 for fp64 inputs). Offsets are int32 unless one could pass 2^31
(INT32_LIMIT): the form with int64 offsets throughout ran 28.7 us at 70% on 4096 x 14336 where
the sweep's int32 prototype ran 21.1 (at-a58e7c0, at-84bb050).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._activation import ACTIVATION_CODES, activate
from ._gather import gather16, gather16_all
from ._pdl import launch_options, pdl_before_inputs, pdl_start

INT32_LIMIT = 2**31  # offsets below it are computed in int32
GROUP = 16  # entries a group: whole 16-byte vectors of int16 columns and half-precision values


@triton.jit
def rows_of_program(row_offsets, row_order, M, full, INDEX: tl.constexpr, ROWS: tl.constexpr,
                    GROUP: tl.constexpr):  # fmt: skip
    """The program's ROWS rows in row order: (row, mask_r) of shape (ROWS,), and as (ROWS, 1)
    columns their first entry, the group boundary at or below it, their end, and where the
    vector walk stops (the end, or the last whole group of the arrays)."""
    order = tl.program_id(0).to(INDEX) * ROWS + tl.arange(0, ROWS)
    mask_r = order < M
    row = tl.load(row_order + order, mask=mask_r, other=0).to(INDEX)
    start = tl.load(row_offsets + row, mask=mask_r, other=0).to(INDEX)
    first = tl.multiple_of(start // GROUP * GROUP, GROUP)[:, None]
    end = tl.load(row_offsets + row + 1, mask=mask_r, other=0).to(INDEX)[:, None]
    return row, mask_r, start[:, None], first, end, tl.minimum(end, full)


@triton.jit
def _walk_step(column_indices, values, x, acc, cols, vals, step, first, k, k_group, start,
               walk_end, stride_x, INDEX: tl.constexpr, ACC_DTYPE: tl.constexpr,
               BLOCK: tl.constexpr, ASM_GATHER: tl.constexpr, MASKED: tl.constexpr):  # fmt: skip
    """Step `step` of the vector walk (entries first + step BLOCK + k): the next step's columns
    and values loaded first, then this step's x gathered and added. MASKED: entries before the
    row's start or past its walk are zeroed; a step wholly inside every row's walk needs no
    mask. (Offsets are rebuilt from the step number, not carried: carried across several
    loops, they took a layout of their own and every step converted them.)"""
    offs = first + k + step * BLOCK
    next_offs = offs + BLOCK
    next_mask = first + k_group + (step + 1) * BLOCK < walk_end  # (constant across a vector)
    next_cols = tl.load(column_indices + next_offs, mask=next_mask, other=0)
    next_vals = tl.load(values + next_offs, mask=next_mask, other=0.0)
    index = cols.to(INDEX) * stride_x
    if MASKED:
        live = (offs >= start) & (offs < walk_end)
        if ASM_GATHER:  # (the gather in the step's layout: _gather.py)
            picked = gather16(x, index, live)
        else:
            picked = tl.load(x + index, mask=live, other=0.0)
        acc += tl.where(live, vals.to(ACC_DTYPE), 0.0) * picked.to(ACC_DTYPE)
    else:
        if ASM_GATHER:  # noqa: SIM108 (a constexpr choice: one branch compiled)
            picked = gather16_all(x, index)
        else:
            picked = tl.load(x + index)
        acc += vals.to(ACC_DTYPE) * picked.to(ACC_DTYPE)
    return acc, next_cols, next_vals


@triton.jit
def _aligned_walk(column_indices, values, x, start, first, end, walk_end, full, stride_x,
                  INDEX: tl.constexpr, ACC_DTYPE: tl.constexpr, ROWS: tl.constexpr,
                  BLOCK: tl.constexpr, GROUP: tl.constexpr, PDL: tl.constexpr = 0,
                  ASM_GATHER: tl.constexpr = False,
                  UNMASKED_MIDDLE: tl.constexpr = False):  # fmt: skip
    """Each row's sum from whole aligned groups loaded as vectors, then the arrays' last partial
    group entry by entry (the module's docstring says why). UNMASKED_MIDDLE: the steps wholly
    inside every row's walk (all but the first and the last one or two) run without masks
    (each entry's two compares and select)."""
    k = tl.arange(0, BLOCK)[None, :]
    k_group = k // GROUP * GROUP  # each entry's group: constant across a vector
    load_mask = first + k_group < walk_end
    cols = tl.load(column_indices + first + k, mask=load_mask, other=0)
    vals = tl.load(values + first + k, mask=load_mask, other=0.0)
    acc = tl.zeros((ROWS, BLOCK), dtype=ACC_DTYPE)
    pdl_before_inputs(PDL)
    # Rows come longest first: a program's rows have similar lengths, so few steps idle.
    if UNMASKED_MIDDLE:
        steps = tl.cdiv(tl.max(walk_end - first), BLOCK)
        # Step s holds entries first + s BLOCK .. + BLOCK: from s = 1 past every row's start
        # (first > start - GROUP), and inside its walk while s < whole.
        whole = tl.min((walk_end - first) // BLOCK)
        for step in range(0, tl.minimum(steps, 1)):
            acc, cols, vals = _walk_step(column_indices, values, x, acc, cols, vals, step, first,
                                         k, k_group, start, walk_end, stride_x, INDEX, ACC_DTYPE,
                                         BLOCK, ASM_GATHER, True)  # fmt: skip
        for step in range(1, whole):
            acc, cols, vals = _walk_step(column_indices, values, x, acc, cols, vals, step, first,
                                         k, k_group, start, walk_end, stride_x, INDEX, ACC_DTYPE,
                                         BLOCK, ASM_GATHER, False)  # fmt: skip
        for step in range(tl.maximum(whole, 1), steps):
            acc, cols, vals = _walk_step(column_indices, values, x, acc, cols, vals, step, first,
                                         k, k_group, start, walk_end, stride_x, INDEX, ACC_DTYPE,
                                         BLOCK, ASM_GATHER, True)  # fmt: skip
    else:  # (offsets carried, as measured before the option: at-84bb050)
        offs = first + k
        groups = first + k_group
        for _ in range(0, tl.max(walk_end - first), BLOCK):
            next_offs = offs + BLOCK
            groups += BLOCK
            next_mask = groups < walk_end
            next_cols = tl.load(column_indices + next_offs, mask=next_mask, other=0)
            next_vals = tl.load(values + next_offs, mask=next_mask, other=0.0)
            live = (offs >= start) & (offs < walk_end)
            if ASM_GATHER:  # (the gather in the step's layout: _gather.py)
                picked = gather16(x, cols.to(INDEX) * stride_x, live)
            else:
                picked = tl.load(x + cols.to(INDEX) * stride_x, mask=live, other=0.0)
            acc += tl.where(live, vals.to(ACC_DTYPE), 0.0) * picked.to(ACC_DTYPE)
            offs, cols, vals = next_offs, next_cols, next_vals
    total = tl.sum(acc, axis=1)
    if tl.max(end) > full:  # rows owning some of the last, partial group: entry by entry
        tail = full + tl.arange(0, GROUP)[None, :]
        owned = (tail >= start) & (tail < end)
        tail_cols = tl.load(column_indices + tail, mask=owned, other=0).to(INDEX)
        tail_vals = tl.load(values + tail, mask=owned, other=0.0).to(ACC_DTYPE)
        picked = tl.load(x + tail_cols * stride_x, mask=owned, other=0.0).to(ACC_DTYPE)
        total += tl.sum(tail_vals * picked, axis=1)

    return total


@triton.jit
def _lane_major_walk(column_indices, values, x, start, end, stride_x, lane_stride,
                     INDEX: tl.constexpr, ACC_DTYPE: tl.constexpr, ROWS: tl.constexpr,
                     BLOCK: tl.constexpr):  # fmt: skip
    """Each row's sum with lane i on entries i, i + 32, ...: the entry offsets are multiplied by
    `lane_stride` (1, never specialized), so the compiler cannot prove them contiguous and lays
    a step out lane-major. Loads are then scalar (64 bytes a warp instruction) and a gather of x
    reaches 32 consecutive entries instead of 32 entries 8 apart. Masked entry by entry: no
    groups, no tail. Hand-pipelined like the vector walk."""
    offs = start + (tl.arange(0, BLOCK) * lane_stride).to(INDEX)[None, :]
    mask = offs < end
    cols = tl.load(column_indices + offs, mask=mask, other=0)
    vals = tl.load(values + offs, mask=mask, other=0.0)
    acc = tl.zeros((ROWS, BLOCK), dtype=ACC_DTYPE)
    for _ in range(0, tl.max(end - start), BLOCK):
        next_offs = offs + BLOCK
        next_mask = next_offs < end
        next_cols = tl.load(column_indices + next_offs, mask=next_mask, other=0)
        next_vals = tl.load(values + next_offs, mask=next_mask, other=0.0)
        picked = tl.load(x + cols.to(INDEX) * stride_x, mask=mask, other=0.0)
        acc += vals.to(ACC_DTYPE) * picked.to(ACC_DTYPE)  # masked values are 0
        offs, mask, cols, vals = next_offs, next_mask, next_cols, next_vals
    return tl.sum(acc, axis=1)


@triton.jit(do_not_specialize=["lane_stride"])
def _spmm_csr_token_kernel(
    row_offsets,  # (M + 1,) int32/int64
    column_indices,  # (nnz,) int16/int32/int64
    values,  # (nnz,)
    x,  # (K,) with stride stride_x
    bias,  # (M,) when HAS_BIAS
    row_order,  # (M,) int32: rows by length, longest first; a program takes ROWS of them
    out,  # (M,) with stride stride_o
    M,
    full,  # entries in whole groups (a multiple of GROUP): what may be loaded as vectors
    stride_x,
    stride_o,
    lane_stride,  # 1: see _lane_major_walk
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # 0 none, 1 relu, 2 gelu
    ACC_DTYPE: tl.constexpr,
    INDEX: tl.constexpr,  # int32 when every offset fits (fewer instructions a step), else int64
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,  # entries of a row a step, a multiple of GROUP
    GROUP: tl.constexpr,
    LANE_MAJOR: tl.constexpr,  # the lane-major walk instead of aligned vectors (an experiment)
    PDL: tl.constexpr,  # programmatic dependent launch (_pdl.py)
    ASM_GATHER: tl.constexpr,  # x gathered by inline PTX (16-bit x, compiled: _gather.py)
    UNMASKED_MIDDLE: tl.constexpr,  # the steps inside every row's walk without masks
):
    pdl_start(PDL)
    row, mask_r, start, first, end, walk_end = rows_of_program(
        row_offsets, row_order, M, full, INDEX, ROWS, GROUP
    )
    if LANE_MAJOR:
        total = _lane_major_walk(column_indices, values, x, start, end, stride_x, lane_stride,
                                 INDEX, ACC_DTYPE, ROWS, BLOCK)  # fmt: skip
    else:
        total = _aligned_walk(column_indices, values, x, start, first, end, walk_end, full,
                              stride_x, INDEX, ACC_DTYPE, ROWS, BLOCK, GROUP, PDL,
                              ASM_GATHER, UNMASKED_MIDDLE)  # fmt: skip

    if HAS_BIAS:
        total += tl.load(bias + row, mask=mask_r, other=0.0).to(ACC_DTYPE)
    total = activate(total, ACTIVATION)
    tl.store(out + row * stride_o, total.to(out.dtype.element_ty), mask=mask_r)


def spmm_csr_token(
    *,
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    bias: torch.Tensor | None,
    row_order: torch.Tensor,
    out: torch.Tensor,
    activation: str,
    rows_per_program: int,
    block: int,
    num_warps: int,
    lane_major: bool = False,
    maxnreg: int | None = None,
    pdl: int = 0,
    asm_gather: bool = False,
    unmasked_middle: bool = False,
) -> torch.Tensor:
    """out (M,) = A @ x for a CSR A (one matrix of values) and x (K,); both may be strided.
    `lane_major` takes _lane_major_walk instead of the aligned vectors (for the sweep
    benchmarks/sweeps/csr_token_lanes.py; not routed). `maxnreg` caps the registers a thread
    (more warps an SM: 59 registers allow 32; the sweep csr_token_cold.py). `pdl`:
    programmatic dependent launch (kernels/_pdl.py; Hopper; the lane-major walk waits first).
    `asm_gather`: the vector walk reads a 16-bit x by inline PTX (kernels/_gather.py; not in
    the interpreter: the caller decides). `unmasked_middle`: the vector walk's steps inside every
    row's walk without masks."""
    if lane_major and pdl == 2:
        pdl = 1
    launch = {"maxnreg": maxnreg} if maxnreg else {}
    launch.update(launch_options(pdl))
    rows = out.shape[0]
    if rows == 0:
        return out
    acc = tl.float64 if out.dtype == torch.float64 else tl.float32
    nnz, cols = values.numel(), x.shape[0]
    reach = (nnz + 2 * block, cols * x.stride(0), rows * out.stride(0), rows + rows_per_program)
    _spmm_csr_token_kernel[(triton.cdiv(rows, rows_per_program),)](
        row_offsets,
        column_indices,
        values,
        x,
        bias if bias is not None else values,
        row_order,
        out,
        rows,
        nnz // GROUP * GROUP,
        x.stride(0),
        out.stride(0),
        1,
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        ACC_DTYPE=acc,
        INDEX=tl.int32 if max(reach) < INT32_LIMIT else tl.int64,
        ROWS=rows_per_program,
        BLOCK=block,
        GROUP=GROUP,
        LANE_MAJOR=lane_major,
        PDL=pdl,
        ASM_GATHER=asm_gather and x.element_size() == 2,
        UNMASKED_MIDDLE=unmasked_middle,
        num_warps=num_warps,
        num_stages=1,
        **launch,
    )
    return out
