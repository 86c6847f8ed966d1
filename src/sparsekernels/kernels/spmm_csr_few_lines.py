"""CSR times a few columns (2-16 tokens) on the line layout: a byte a column instead of two.

The few-token walk (spmm_csr_few.py) reads each stored entry's value and int16 column, then
gathers the entry's row of B; at 2-4 tokens the weight's bytes are most of the traffic. On the
line layout (formats/_line_layout.py: a row's entries in whole lines of 64 slots, each column
a uint8 offset from its line's int32 head) an entry costs ~3.06 bytes at 70% instead of 4.
A step is (ROWS, NL, LINE) slots, as in spmm_csr_token_lines.py: a thread's slots stay in one
line, so the line's head broadcasts along it and the column is one add. B's rows are gathered
as (ROWS, NL, LINE, BLOCK_N) tiles by tl.load, or, with ASM_GATHER (B 16-bit, padded to
BLOCK_N columns and aligned), as 4-16-byte vectors of 32-bit words by inline PTX
(kernels/_gather.py), which keeps the step's layout: tl.load's gather takes one of its own, and
the step's columns and values then cross to it through shared memory every step (sm_90: 4
tokens 221 -> 202 instructions a step, 16 tokens 169 -> 134). Slots past a line's held count
are masked (their value is 0, but B at the base may hold an inf). The next step's weight is
loaded before this step's gather.

Rows are visited in `row_order`; a layout built with a row_sequence lists the rows' slots in
that order (row_slots indexed by place, so neighbouring programs read neighbouring memory).
Bias and activation fused; float32 sums (float64 for float64 values). Slots in int32.

Routed at 2-4 tokens (csr_lines_tuning.CSR_FEW_LINES): 1.3-1.4x the few-token walk cold at 2
tokens (22.1 against 30.2 us on 14336 x 4096, bf16, 70%); from 8 tokens slower than it.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..formats._line_layout import HEAD_BASE, LINE, LINES, LineLayout
from ._activation import ACTIVATION_CODES, activate
from ._gather import gather_words1, gather_words2, gather_words4
from .spmm_csr_token_lines import _rest_at, _step, check_in_place
from .transpose import padded_b


@triton.jit
def _pair(word, DTYPE: tl.constexpr, ACC_DTYPE: tl.constexpr):
    """A 32-bit word of two 16-bit B columns as (..., 2) sums' dtype: low half first."""
    low = word.to(tl.int16).to(DTYPE, bitcast=True).to(ACC_DTYPE)
    high = (word >> 16).to(tl.int16).to(DTYPE, bitcast=True).to(ACC_DTYPE)
    return tl.join(low, high)


@triton.jit
def _finish(total, offs_n, row, mask_r, N, bias, out, stride_om, stride_on,
            HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr, ACC_DTYPE: tl.constexpr):  # fmt: skip
    """Bias, activation and the store of (ROWS, C) sums for out's columns offs_n (C,)."""
    if HAS_BIAS:
        total += tl.load(bias + row, mask=mask_r, other=0.0).to(ACC_DTYPE)[:, None]
    total = activate(total, ACTIVATION)
    out_ptrs = out + row[:, None] * stride_om + offs_n[None, :] * stride_on
    mask = mask_r[:, None] & (offs_n < N)[None, :]
    tl.store(out_ptrs, total.to(out.dtype.element_ty), mask=mask)


@triton.jit
def _pair_sum(acc):
    return tl.sum(tl.sum(acc, axis=2), axis=1)  # (ROWS, 2)


@triton.jit
def _spmm_csr_few_lines_kernel(
    row_slots,  # (M + 1,) int32: the slots of the row at place p: row_slots[p] .. [p + 1]
    offsets,  # (slots,) uint8: each slot's column less its line's base
    heads,  # (slots // LINE,) int32: base column | held slots << 24
    values,  # (slots,) the entries' values, 0 in the padding; IN_PLACE: the CSR's (nnz,)
    rest,  # IN_PLACE: the values of the lines not read in place (LineLayout.pack_rest)
    windows,  # (lines,) int32 with IN_PLACE: LineLayout.windows
    b,  # (K, N): strides stride_bk, stride_bn; or (K, BLOCK_N) padded when PADDED_B
    bias,  # (M,) when HAS_BIAS
    row_order,  # (M,) int32: the rows in visiting order; a program takes ROWS of them
    out,  # (M, N): strides stride_om, stride_on
    M,
    N,
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # 0 none, 1 relu, 2 gelu
    ACC_DTYPE: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,  # slots of a row a step, a multiple of LINE
    BLOCK_N: tl.constexpr,
    PADDED_B: tl.constexpr,
    LINE: tl.constexpr,
    HEAD_BASE: tl.constexpr,
    BY_SEQUENCE: tl.constexpr,  # row_slots listed in row_order's sequence
    ASM_GATHER: tl.constexpr = False,  # B's rows by inline PTX vectors (16-bit, padded B)
    IN_PLACE: tl.constexpr = False,  # values read from the CSR's own (an in-place layout)
    FINITE: tl.constexpr = False,  # IN_PLACE: every value is finite (other rows' unmasked)
):
    NL: tl.constexpr = BLOCK // LINE
    order = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    mask_r = order < M
    row = tl.load(row_order + order, mask=mask_r, other=0)
    place = order if BY_SEQUENCE else row
    first_line = (tl.load(row_slots + place, mask=mask_r, other=0) // LINE)[:, None]
    end_line = (tl.load(row_slots + place + 1, mask=mask_r, other=0) // LINE)[:, None]
    offs_n = tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    if PADDED_B:  # a compile-time row stride, no column mask: one aligned vector a B row
        b_cols = offs_n[None, None, None, :]
        b_row = BLOCK_N
        col_mask = offs_n[None, None, None, :] < BLOCK_N
    else:
        b_cols = offs_n[None, None, None, :] * stride_bn
        b_row = stride_bk
        col_mask = mask_n[None, None, None, :]
    within = tl.arange(0, LINE)[None, None, :]
    lines = first_line + tl.arange(0, NL)[None, :]  # (ROWS, NL)
    rest_at = _rest_at(values, rest)
    vals, cols, held = _step(heads, offsets, values, rest_at, windows, lines, end_line, within,
                             LINE, HEAD_BASE, IN_PLACE, FINITE)  # fmt: skip
    acc = tl.zeros((ROWS, NL, LINE, BLOCK_N), dtype=ACC_DTYPE)
    # With ASM_GATHER, a word (two columns) a pair of sums, each (ROWS, NL, LINE, 2), in the
    # step's layout; the ones past BLOCK_N // 2 words stay unused.
    acc0 = tl.zeros((ROWS, NL, LINE, 2), dtype=ACC_DTYPE)
    acc1, acc2, acc3, acc4, acc5, acc6, acc7 = acc0, acc0, acc0, acc0, acc0, acc0, acc0
    WORDS: tl.constexpr = BLOCK_N // 2
    DTYPE: tl.constexpr = b.dtype.element_ty
    for _ in range(0, tl.max(end_line - first_line), NL):
        lines += NL
        next_vals, next_cols, next_held = _step(heads, offsets, values, rest_at, windows, lines,
                                                end_line, within, LINE, HEAD_BASE, IN_PLACE,
                                                FINITE)  # fmt: skip
        if ASM_GATHER:
            address = (b + cols * BLOCK_N).to(tl.int64, bitcast=True)
            v = vals.to(ACC_DTYPE)[:, :, :, None]
            if WORDS == 1:
                acc0 += v * _pair(gather_words1(address, held), DTYPE, ACC_DTYPE)
            elif WORDS == 2:
                w0, w1 = gather_words2(address, held)
                acc0 += v * _pair(w0, DTYPE, ACC_DTYPE)
                acc1 += v * _pair(w1, DTYPE, ACC_DTYPE)
            else:
                w0, w1, w2, w3 = gather_words4(address, held)
                acc0 += v * _pair(w0, DTYPE, ACC_DTYPE)
                acc1 += v * _pair(w1, DTYPE, ACC_DTYPE)
                acc2 += v * _pair(w2, DTYPE, ACC_DTYPE)
                acc3 += v * _pair(w3, DTYPE, ACC_DTYPE)
                if WORDS == 8:
                    w4, w5, w6, w7 = gather_words4(address + 16, held)
                    acc4 += v * _pair(w4, DTYPE, ACC_DTYPE)
                    acc5 += v * _pair(w5, DTYPE, ACC_DTYPE)
                    acc6 += v * _pair(w6, DTYPE, ACC_DTYPE)
                    acc7 += v * _pair(w7, DTYPE, ACC_DTYPE)
        else:
            tile = tl.load(b + cols[:, :, :, None] * b_row + b_cols,
                           mask=held[:, :, :, None] & col_mask, other=0.0)  # fmt: skip
            acc += vals.to(ACC_DTYPE)[:, :, :, None] * tile.to(ACC_DTYPE)
        vals, cols, held = next_vals, next_cols, next_held
    # fmt: off
    if ASM_GATHER:
        pair_n = tl.arange(0, 2)
        _finish(_pair_sum(acc0), pair_n, row, mask_r, N, bias, out, stride_om, stride_on,
                HAS_BIAS, ACTIVATION, ACC_DTYPE)
        if WORDS >= 2:
            _finish(_pair_sum(acc1), pair_n + 2, row, mask_r, N, bias, out, stride_om,
                    stride_on, HAS_BIAS, ACTIVATION, ACC_DTYPE)
        if WORDS >= 4:
            _finish(_pair_sum(acc2), pair_n + 4, row, mask_r, N, bias, out, stride_om,
                    stride_on, HAS_BIAS, ACTIVATION, ACC_DTYPE)
            _finish(_pair_sum(acc3), pair_n + 6, row, mask_r, N, bias, out, stride_om,
                    stride_on, HAS_BIAS, ACTIVATION, ACC_DTYPE)
        if WORDS == 8:
            _finish(_pair_sum(acc4), pair_n + 8, row, mask_r, N, bias, out, stride_om,
                    stride_on, HAS_BIAS, ACTIVATION, ACC_DTYPE)
            _finish(_pair_sum(acc5), pair_n + 10, row, mask_r, N, bias, out, stride_om,
                    stride_on, HAS_BIAS, ACTIVATION, ACC_DTYPE)
            _finish(_pair_sum(acc6), pair_n + 12, row, mask_r, N, bias, out, stride_om,
                    stride_on, HAS_BIAS, ACTIVATION, ACC_DTYPE)
            _finish(_pair_sum(acc7), pair_n + 14, row, mask_r, N, bias, out, stride_om,
                    stride_on, HAS_BIAS, ACTIVATION, ACC_DTYPE)
    else:
        _finish(tl.sum(tl.sum(acc, axis=2), axis=1), offs_n, row, mask_r, N, bias, out,
                stride_om, stride_on, HAS_BIAS, ACTIVATION, ACC_DTYPE)
    # fmt: on


def vector_rows(b: torch.Tensor, block_n: int) -> bool:
    """Whether b's rows can be read as the PTX gather's vectors: 16-bit, and its start aligned
    to a row's bytes up to 16 (a vector load at a misaligned address is a fault, not a slow
    read)."""
    return b.element_size() == 2 and b.data_ptr() % min(block_n * 2, 16) == 0


def offsets_fit(b: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether the kernel's int32 offsets reach every element of b (K, N) and out (M, N)."""
    n = out.shape[1]
    width = max(triton.next_power_of_2(max(n, 1)), n)
    reach_b = b.shape[0] * max(abs(b.stride(0)), width) + n * abs(b.stride(1))
    reach_out = out.shape[0] * abs(out.stride(0)) + n * abs(out.stride(1))
    return max(reach_b, reach_out) < 2**31


def spmm_csr_few_lines(
    *,
    row_slots: torch.Tensor,
    offsets: torch.Tensor,
    heads: torch.Tensor,
    values: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    row_order: torch.Tensor,
    out: torch.Tensor,
    activation: str,
    rows_per_program: int,
    block: int,
    num_warps: int,
    row_sequence: torch.Tensor | None = None,
    asm_gather: bool = False,
    line: int = LINE,
    in_place: LineLayout | None = None,
    rest: torch.Tensor | None = None,
    finite_values: bool = False,
) -> torch.Tensor:
    """out (M, N) = act(A @ b + bias) for A in the line layout (formats/_line_layout.LineLayout:
    row_slots, offsets, heads, values packed) and b (K, N), any strides; b padded to a
    power-of-two width (transpose.padded_b) loads fastest. A layout built with a row_sequence
    lists its rows in that order: row_order must be that sequence (checked by identity).
    `asm_gather`: B's rows read as vectors by inline PTX where b is 16-bit, padded and aligned
    (vector_rows; not in the interpreter: the caller decides). `line`: the layout's slots a
    line (LINES). `in_place` (the layout, built in_place, whose row_slots, offsets and heads
    these are): `values` are the CSR's own (nnz,) with `rest` (in_place.pack_rest(values)), no
    packed copy; `finite_values`: every value is finite (spmm_csr_token_lines)."""
    if line not in LINES:
        raise ValueError(f"line must be one of {LINES} (the layout's), got {line}")
    if block % line or block & (block - 1):
        raise ValueError(f"block must be a power of two and a multiple of {line}, got {block}")
    if row_sequence is not None and row_order is not row_sequence:
        raise ValueError("row_order must be the layout's row_sequence (its rows' listed order)")
    if not offsets_fit(b, out):
        raise ValueError("b and out must each span under 2**31 elements (int32 offsets)")
    check_in_place(in_place, rest, heads, values)
    rows, n = out.shape
    if rows == 0 or n == 0:
        return out
    block_n = triton.next_power_of_2(n)
    padded = padded_b(b, n) and b.shape[1] == block_n
    _spmm_csr_few_lines_kernel[(triton.cdiv(rows, rows_per_program),)](
        row_slots,
        offsets,
        heads,
        values,
        rest if in_place is not None else values,
        in_place.windows if in_place is not None else heads,
        b,
        bias if bias is not None else values,
        row_order,
        out,
        rows,
        n,
        b.stride(0),
        b.stride(1),
        out.stride(0),
        out.stride(1),
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        ACC_DTYPE=tl.float64 if out.dtype == torch.float64 else tl.float32,
        ROWS=rows_per_program,
        BLOCK=block,
        BLOCK_N=block_n,
        PADDED_B=padded,
        LINE=line,
        HEAD_BASE=HEAD_BASE,
        BY_SEQUENCE=row_sequence is not None,
        ASM_GATHER=asm_gather and vector_rows(b, block_n) and padded,
        IN_PLACE=in_place is not None,
        FINITE=finite_values,
        num_warps=num_warps,
        num_stages=1,
    )
    return out
