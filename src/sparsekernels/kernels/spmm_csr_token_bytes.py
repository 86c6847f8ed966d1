"""CSR times one column with one byte a column (Pattern.column_bytes): spmm_csr_token's walk
with the index bytes halved.

At one token the product is bound by the weight's bytes: a bf16 value and an int16 column are
4 bytes an entry, 1.2 a dense weight at 70% sparsity. Here an entry's column is a byte `lo`
above a 16-bit base its row's part of the aligned GROUP-entry group shares: 3 bytes an entry
and a 4-byte word a group, 0.975 a dense weight at 70%. A group's word holds two bases, the low
half for the row owning its first entry, the high half for the next row; a row reads the high
half only in its first group, and only when that group starts before the row does (entries of
the preceding row come first). The values are the CSR's own, untouched.

The walk is spmm_csr_token's (rows_of_program, aligned groups masked group-wise, the next step
loaded before this step's gather of x, the arrays' last partial group entry by entry, bias and
activation fused, fp32 sums or fp64 for fp64). Not routed: ops/spmm.py takes it once timed.

Layout: Triton's coalescing gives the byte, value and gather loads one register layout (the
widest per-thread count among them), so the walk has no layout conversion; the base words are
loaded a word a group and broadcast by a reshape, one load a thread. Compiled for sm_90 (bf16,
one row of 256 entries a step, one warp, unit stride) the loop is 135 SASS instructions against
spmm_csr_token's 127, with no shared memory.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._activation import ACTIVATION_CODES, activate
from .spmm_csr_token import GROUP, rows_of_program


@triton.jit
def _half(word, group, start):
    """The base a row starting at `start` reads from the word of a group starting at `group`:
    the high half where the group starts before the row (the row is the group's second)."""
    return tl.where(group < start, word >> 16, word) & 0xFFFF


@triton.jit
def _bases(column_bases, first_group, start, walk_end, ROWS: tl.constexpr, BLOCK: tl.constexpr,
           GROUP: tl.constexpr):  # fmt: skip
    """The step's entries' 16-bit bases, (ROWS, BLOCK), for groups from `first_group` (ROWS, 1):
    loaded and decoded a word a group (_half), then broadcast to the group's entries: a
    thread's entries share one word, so one load a thread."""
    groups = first_group + tl.arange(0, BLOCK // GROUP)[None, :] * GROUP
    word = tl.load(column_bases + groups // GROUP, mask=groups < walk_end, other=0)
    base = _half(word, groups, start)
    base = tl.broadcast_to(base[:, :, None], (ROWS, BLOCK // GROUP, GROUP))
    return tl.reshape(base, (ROWS, BLOCK))


@triton.jit
def _byte_walk(column_bytes, column_bases, values, x, start, first, end, walk_end, full,
               stride_x, INDEX: tl.constexpr, ACC_DTYPE: tl.constexpr, ROWS: tl.constexpr,
               BLOCK: tl.constexpr, GROUP: tl.constexpr):  # fmt: skip
    """Each row's sum from whole aligned groups, then the arrays' last partial group entry by
    entry (as spmm_csr_token's _aligned_walk)."""
    k = tl.arange(0, BLOCK)[None, :]
    offs = first + k
    groups = first + k // GROUP * GROUP
    mask = groups < walk_end
    lo = tl.load(column_bytes + offs, mask=mask, other=0)
    base = _bases(column_bases, first, start, walk_end, ROWS, BLOCK, GROUP)
    vals = tl.load(values + offs, mask=mask, other=0.0)
    acc = tl.zeros((ROWS, BLOCK), dtype=ACC_DTYPE)
    for step in range(0, tl.max(walk_end - first), BLOCK):
        next_offs = offs + BLOCK
        groups += BLOCK
        next_mask = groups < walk_end
        next_lo = tl.load(column_bytes + next_offs, mask=next_mask, other=0)
        next_base = _bases(
            column_bases, first + (step + BLOCK), start, walk_end, ROWS, BLOCK, GROUP
        )
        next_vals = tl.load(values + next_offs, mask=next_mask, other=0.0)
        live = (offs >= start) & (offs < walk_end)
        cols = (base + lo.to(tl.int32)).to(INDEX)  # uint8: zero-extended
        picked = tl.load(x + cols * stride_x, mask=live, other=0.0)
        acc += tl.where(live, vals.to(ACC_DTYPE), 0.0) * picked.to(ACC_DTYPE)
        offs, lo, base, vals = next_offs, next_lo, next_base, next_vals
    total = tl.sum(acc, axis=1)
    if tl.max(end) > full:  # rows owning some of the last, partial group: entry by entry
        tail = full + tl.arange(0, GROUP)[None, :]
        owned = (tail >= start) & (tail < end)
        word = tl.load(column_bases + full // GROUP + tl.zeros_like(start), mask=end > full)
        tail_base = _half(word, full, start)
        tail_lo = tl.load(column_bytes + tail, mask=owned, other=0).to(tl.int32)
        tail_vals = tl.load(values + tail, mask=owned, other=0.0).to(ACC_DTYPE)
        cols = (tail_base + tail_lo).to(INDEX)
        picked = tl.load(x + cols * stride_x, mask=owned, other=0.0).to(ACC_DTYPE)
        total += tl.sum(tail_vals * picked, axis=1)
    return total


@triton.jit
def _spmm_csr_token_bytes_kernel(
    row_offsets,  # (M + 1,) int32/int64
    column_bytes,  # (nnz,) uint8: column - base
    column_bases,  # (ceil(nnz / GROUP),) int32: a group's two 16-bit bases
    values,  # (nnz,)
    x,  # (K,) with stride stride_x
    bias,  # (M,) when HAS_BIAS
    row_order,  # (M,) int32: rows by length, longest first; a program takes ROWS of them
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
    BLOCK: tl.constexpr,  # entries of a row a step, a multiple of GROUP
    GROUP: tl.constexpr,
):
    row, mask_r, start, first, end, walk_end = rows_of_program(
        row_offsets, row_order, M, full, INDEX, ROWS, GROUP
    )
    total = _byte_walk(column_bytes, column_bases, values, x, start, first, end, walk_end, full,
                       stride_x, INDEX, ACC_DTYPE, ROWS, BLOCK, GROUP)  # fmt: skip
    if HAS_BIAS:
        total += tl.load(bias + row, mask=mask_r, other=0.0).to(ACC_DTYPE)
    total = activate(total, ACTIVATION)
    tl.store(out + row * stride_o, total.to(out.dtype.element_ty), mask=mask_r)


def spmm_csr_token_bytes(
    *,
    row_offsets: torch.Tensor,
    column_bytes: torch.Tensor,
    column_bases: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    bias: torch.Tensor | None,
    row_order: torch.Tensor,
    out: torch.Tensor,
    activation: str,
    rows_per_program: int,
    block: int,
    num_warps: int,
) -> torch.Tensor:
    """out (M,) = A @ x for a CSR A with byte columns (Pattern.column_bytes) and x (K,); x and
    out may be strided."""
    from . import spmm_csr_token as int16  # read at call time: tests lower INT32_LIMIT there

    rows = out.shape[0]
    if rows == 0:
        return out
    acc = tl.float64 if out.dtype == torch.float64 else tl.float32
    nnz, cols = values.numel(), x.shape[0]
    reach = (nnz + 2 * block, cols * x.stride(0), rows * out.stride(0), rows + rows_per_program)
    _spmm_csr_token_bytes_kernel[(triton.cdiv(rows, rows_per_program),)](
        row_offsets,
        column_bytes,
        column_bases,
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
        INDEX=tl.int32 if max(reach) < int16.INT32_LIMIT else tl.int64,
        ROWS=rows_per_program,
        BLOCK=block,
        GROUP=GROUP,
        num_warps=num_warps,
        num_stages=1,
    )
    return out
