"""CSR times one column with a program's rows walked as one stream (many short rows).

The one-token kernel (spmm_csr_token.py) gives a program its rows at once: it loads their place
in row order, then their offsets, then the first step's entries, then x at their columns, a
chain of dependent loads that every program pays before it streams. Where rows are short that
chain is most of a program: at 90% on 14336 x 4096 a row is ~410 entries, two steps.

Here a program (one warp) walks ROWS rows of row order one after another as one stream of
GROUP-aligned steps (the one-token kernel's vectors and tail), each step's loads issued before
the step before it gathers x, across row ends too: the next row's first step is in flight while
this row finishes. A row's offsets are loaded one row ahead, its place in row order two rows
ahead, so no row waits on its start. One step in flight a warp is fewer bytes than the one-token
kernel keeps in flight on long rows: it wins only where rows are short and many (tuning.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._activation import ACTIVATION_CODES, activate
from ._pdl import launch_options, pdl_before_inputs, pdl_start
from .spmm_csr_token import GROUP, INT32_LIMIT


@triton.jit
def _row_bounds(row_offsets, row, valid, INDEX: tl.constexpr):
    start = tl.load(row_offsets + row, mask=valid, other=0).to(INDEX)
    end = tl.load(row_offsets + row + 1, mask=valid, other=0).to(INDEX)
    return start, end


@triton.jit
def _tail_sum(column_indices, values, x, start, end, full, stride_x, INDEX: tl.constexpr,
              ACC_DTYPE: tl.constexpr, GROUP: tl.constexpr):  # fmt: skip
    """The row's entries in the arrays' last partial group (never loaded as vectors)."""
    tail = full + tl.arange(0, GROUP)
    owned = (tail >= start) & (tail < end)
    tail_cols = tl.load(column_indices + tail, mask=owned, other=0).to(INDEX)
    tail_vals = tl.load(values + tail, mask=owned, other=0.0).to(ACC_DTYPE)
    got = tl.load(x + tail_cols * stride_x, mask=owned, other=0.0).to(ACC_DTYPE)
    return tl.sum(tail_vals * got)


@triton.jit
def _spmm_csr_token_stream_kernel(
    row_offsets,  # (M + 1,) int32/int64
    column_indices,  # (nnz,) int16/int32/int64
    values,  # (nnz,)
    x,  # (K,) with stride stride_x
    bias,  # (M,) when HAS_BIAS
    row_order,  # (M,) int32: rows by length, longest first; a program walks ROWS of them
    out,  # (M,) with stride stride_o
    M,
    full,  # entries in whole groups (a multiple of GROUP): what may be loaded as vectors
    stride_x,
    stride_o,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # 0 none, 1 relu, 2 gelu
    ACC_DTYPE: tl.constexpr,
    INDEX: tl.constexpr,  # int32 when every offset fits, else int64
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,  # entries a step, a multiple of GROUP
    GROUP: tl.constexpr,
    PDL: tl.constexpr,  # programmatic dependent launch (_pdl.py)
):
    pdl_start(PDL)
    i = tl.program_id(0) * ROWS  # the row-order place of the row being walked
    last = tl.minimum(i + ROWS, M)
    k = tl.arange(0, BLOCK).to(INDEX)
    in_group = k // GROUP * GROUP
    row = tl.load(row_order + i).to(INDEX)
    next_row = tl.load(row_order + i + 1, mask=i + 1 < last, other=0).to(INDEX)
    after_next = tl.load(row_order + i + 2, mask=i + 2 < last, other=0).to(INDEX)
    start, end = _row_bounds(row_offsets, row, i < last, INDEX)
    next_start, next_end = _row_bounds(row_offsets, next_row, i + 1 < last, INDEX)
    walk_end = tl.minimum(end, full)
    pos = start // GROUP * GROUP
    mask = pos + in_group < walk_end
    cols = tl.load(column_indices + pos + k, mask=mask, other=0)
    vals = tl.load(values + pos + k, mask=mask, other=0.0)
    acc = tl.zeros((BLOCK,), dtype=ACC_DTYPE)
    pdl_before_inputs(PDL)
    while i < last:
        same_row = pos + BLOCK < walk_end
        next_pos = tl.where(same_row, pos + BLOCK, next_start // GROUP * GROUP)
        next_walk_end = tl.where(same_row, walk_end, tl.minimum(next_end, full))
        next_mask = next_pos + in_group < next_walk_end
        next_cols = tl.load(column_indices + next_pos + k, mask=next_mask, other=0)
        next_vals = tl.load(values + next_pos + k, mask=next_mask, other=0.0)
        live = (pos + k >= start) & (pos + k < walk_end)
        picked = tl.load(x + cols.to(INDEX) * stride_x, mask=live, other=0.0)
        acc += tl.where(live, vals.to(ACC_DTYPE), 0.0) * picked.to(ACC_DTYPE)
        if not same_row:  # the row's last step: its sum, then the next row
            total = tl.sum(acc)
            if end > full:
                total += _tail_sum(column_indices, values, x, start, end, full, stride_x, INDEX,
                                   ACC_DTYPE, GROUP)  # fmt: skip
            if HAS_BIAS:
                total += tl.load(bias + row).to(ACC_DTYPE)
            total = activate(total, ACTIVATION)
            tl.store(out + row * stride_o, total.to(out.dtype.element_ty))
            acc = tl.zeros((BLOCK,), dtype=ACC_DTYPE)
            i += 1
            row, start, end, walk_end = next_row, next_start, next_end, next_walk_end
            next_row = after_next  # loaded a row ago: its offsets' loads wait on nothing
            next_start, next_end = _row_bounds(row_offsets, next_row, i + 1 < last, INDEX)
            after_next = tl.load(row_order + i + 2, mask=i + 2 < last, other=0).to(INDEX)
        pos, cols, vals = next_pos, next_cols, next_vals


def spmm_csr_token_stream(
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
    pdl: int = 0,
) -> torch.Tensor:
    """out (M,) = A @ x for a CSR A (one matrix of values) and x (K,); both may be strided.
    `pdl`: programmatic dependent launch (kernels/_pdl.py; Hopper)."""
    rows = out.shape[0]
    if rows == 0:
        return out
    acc = tl.float64 if out.dtype == torch.float64 else tl.float32
    nnz, cols = values.numel(), x.shape[0]
    reach = (nnz + 2 * block, cols * x.stride(0), rows * out.stride(0), rows + rows_per_program)
    _spmm_csr_token_stream_kernel[(triton.cdiv(rows, rows_per_program),)](
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
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        ACC_DTYPE=acc,
        INDEX=tl.int32 if max(reach) < INT32_LIMIT else tl.int64,
        ROWS=rows_per_program,
        BLOCK=block,
        GROUP=GROUP,
        PDL=pdl,
        num_warps=1,
        num_stages=1,
        **launch_options(pdl),
    )
    return out
