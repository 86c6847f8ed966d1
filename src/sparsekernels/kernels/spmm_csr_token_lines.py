"""CSR times one token on the line layout: a byte a column instead of two or four.

The one-token walk (spmm_csr_token.py) moves ~3.3 TB/s of stored entries on the H200, 4 bytes
an entry with int16 columns: the bytes are the time. In the line layout (formats/_line_layout.py)
a row's entries lie in whole lines of 64 slots, each entry's column a uint8 offset from its
line's base column, the base and the line's held slots in one int32 head: ~3.06 bytes an entry
at 70% sparsity (1-3% padding slots). The walk is the one-token kernel's, simpler: rows start
on whole lines, so every load is an aligned vector with a mask constant across a line (no
groups, no tail read entry by entry); a step loads the next step's values, offsets and heads
before this step's gather of x. A column is the head's base plus the offset; slots past a
line's held count are masked (their value is 0, but x at the base may be inf).

Rows are visited in `row_order` (longest first); bias and activation fused; float32 sums
(float64 for float64 values). Offsets in int32: the caller keeps slots under 2^31.

With tl.load's gather it measured slower than the plain walk (H200, 70%, cold: 27.8 against
21.6 us on 4096 x 14336; results/nvidia-h200/2026-12-03/at-7e15d89): every step's x pointers
crossed layouts through shared memory. With `asm_gather` (kernels/_gather.py) they do not
(sm_90 loop 165 -> 140 instructions a step) and it is faster: 20.6 us there, 21.4 against 24.1
on 14336 x 4096 (2026-12-04/at-d8b7176/csr_lines_cold_configs.txt). Routed where
csr_lines_tuning.spmm_csr_token_lines_config says.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..formats._line_layout import ALIGN, HEAD_BASE, LINE, LINES, LineLayout
from ._activation import ACTIVATION_CODES, activate
from ._gather import gather16, gather16_below
from ._pdl import launch_options, pdl_before_inputs, pdl_start

assert ALIGN == 8  # (_step_in_place tells the compiler its windows are multiples of 8)


@triton.jit
def _step_counted(heads, offsets, values, lines, end_line, within, LINE: tl.constexpr,
                  HEAD_BASE: tl.constexpr):  # fmt: skip
    """A step's (ROWS, NL, LINE) values and columns and each line's held count (ROWS, NL, 1;
    0 past the row's lines, whose heads load as 0) from its (ROWS, NL) lines: a line's head
    is loaded once (a 3-D step keeps a thread's slots in one line, so the head broadcasts
    along the line and the slots stay whole vectors: a flat step's head load per slot took a
    layout of its own and shared-memory conversions every step)."""
    live = lines < end_line
    head = tl.load(heads + lines, mask=live, other=0)[:, :, None]
    slots = lines[:, :, None] * LINE + within
    mask = live[:, :, None]
    offset = tl.load(offsets + slots, mask=mask, other=0)
    vals = tl.load(values + slots, mask=mask, other=0.0)
    return vals, (head & HEAD_BASE) + offset.to(tl.int32), head >> 24


@triton.jit
def _rest_at(values, rest):
    """How many elements `rest` lies past `values` (an in-place layout's two sources: one
    base pointer and a select of offsets per line took fewer instructions than a select of
    pointers)."""
    gap = rest.to(tl.int64, bitcast=True) - values.to(tl.int64, bitcast=True)
    return gap // (values.dtype.element_ty.primitive_bitwidth // 8)


@triton.jit
def _step_in_place(heads, offsets, values, rest_at, windows, lines, end_line, within,
                   LINE: tl.constexpr, HEAD_BASE: tl.constexpr, FINITE: tl.constexpr):  # fmt: skip
    """_step_counted on an in-place layout (formats/_line_layout.py): a line's values are the
    CSR's own from its window on (an aligned start: whole vectors) or, for the lines `windows`
    numbers below 0, the small packed copy `rest`'s (`rest_at` elements past `values`). An
    in-place line's slots past its held ones hold the next row's values: the gather masked
    by the count gives 0 there, which leaves the sum alone where the values are FINITE; else
    they are masked too."""
    live = lines < end_line
    head = tl.load(heads + lines, mask=live, other=0)[:, :, None]
    mask = live[:, :, None]
    offset = tl.load(offsets + lines[:, :, None] * LINE + within, mask=mask, other=0)
    window = tl.load(windows + lines, mask=live, other=0)[:, :, None]
    # One base: `rest` lies rest_at elements from `values` (both 16-byte aligned, checked by
    # the launcher), so a select of offsets, not of pointers; each a multiple of 8 entries,
    # which keeps the vectors aligned.
    at = tl.where(window < 0, rest_at + (-1 - window) * LINE, window)
    vals = tl.load(values + tl.multiple_of(at, [8, 8, 8]) + within, mask=mask, other=0.0)
    count = head >> 24
    if not FINITE:
        vals = tl.where(within < count, vals, 0.0)
    return vals, (head & HEAD_BASE) + offset.to(tl.int32), count


@triton.jit
def _step(heads, offsets, values, rest_at, windows, lines, end_line, within, LINE: tl.constexpr,
          HEAD_BASE: tl.constexpr, IN_PLACE: tl.constexpr, FINITE: tl.constexpr):  # fmt: skip
    """A step's values, columns and the slots' held mask: packed values, or IN_PLACE the
    CSR's own (_step_in_place; `rest_at`, `windows` and FINITE serve only it)."""
    if IN_PLACE:
        vals, cols, count = _step_in_place(heads, offsets, values, rest_at, windows, lines,
                                           end_line, within, LINE, HEAD_BASE, FINITE)  # fmt: skip
    else:
        vals, cols, count = _step_counted(heads, offsets, values, lines, end_line, within, LINE,
                                          HEAD_BASE)  # fmt: skip
    return vals, cols, (lines < end_line)[:, :, None] & (within < count)


@triton.jit
def _spmm_csr_token_lines_kernel(
    row_slots,  # (M + 1,) int32: row r's slots row_slots[r] .. [r + 1], multiples of LINE
    offsets,  # (slots,) uint8: each slot's column less its line's base
    heads,  # (slots // LINE,) int32: base column | held slots << 24
    values,  # (slots,) the entries' values, 0 in the padding; IN_PLACE: the CSR's (nnz,)
    rest,  # IN_PLACE: the values of the lines not read in place (LineLayout.pack_rest)
    windows,  # (lines,) int32 with IN_PLACE: LineLayout.windows
    x,  # (K,) with stride stride_x
    bias,  # (M,) when HAS_BIAS
    row_order,  # (M,) int32: rows by length, longest first; a program takes ROWS of them
    out,  # (M,) with stride stride_o
    M,
    stride_x,
    stride_o,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # 0 none, 1 relu, 2 gelu
    ACC_DTYPE: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,  # slots of a row a step, a multiple of LINE
    LINE: tl.constexpr,
    HEAD_BASE: tl.constexpr,
    PDL: tl.constexpr,  # programmatic dependent launch (_pdl.py)
    ASM_GATHER: tl.constexpr,  # x gathered by inline PTX (16-bit x, compiled: _gather.py)
    BY_SEQUENCE: tl.constexpr = False,  # row_slots listed in row_order's sequence (row_sequence)
    AHEAD: tl.constexpr = 1,  # steps loaded ahead of the gather: 1 or 2
    HELD_IN_ASM: tl.constexpr = False,  # the PTX gather compares slot and held count (AHEAD 1)
    IN_PLACE: tl.constexpr = False,  # values read from the CSR's own (an in-place layout)
    FINITE: tl.constexpr = False,  # IN_PLACE: every value is finite (other rows' unmasked)
):
    NL: tl.constexpr = BLOCK // LINE
    pdl_start(PDL)
    order = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    mask_r = order < M
    row = tl.load(row_order + order, mask=mask_r, other=0)
    place = order if BY_SEQUENCE else row  # where the row's slots are listed
    first_line = (tl.load(row_slots + place, mask=mask_r, other=0) // LINE)[:, None]
    end_line = (tl.load(row_slots + place + 1, mask=mask_r, other=0) // LINE)[:, None]
    within = tl.arange(0, LINE)[None, None, :]
    lines = first_line + tl.arange(0, NL)[None, :]  # (ROWS, NL)
    # `held`: the slots' mask, or with HELD_IN_ASM each line's held count
    rest_at = _rest_at(values, rest)
    if HELD_IN_ASM and IN_PLACE:
        vals, cols, held = _step_in_place(heads, offsets, values, rest_at, windows, lines, end_line,
                                          within, LINE, HEAD_BASE, FINITE)  # fmt: skip
    elif HELD_IN_ASM:
        vals, cols, held = _step_counted(heads, offsets, values, lines, end_line, within, LINE,
                                         HEAD_BASE)  # fmt: skip
    else:
        vals, cols, held = _step(heads, offsets, values, rest_at, windows, lines, end_line, within,
                                 LINE, HEAD_BASE, IN_PLACE, FINITE)  # fmt: skip
    vals2, cols2, held2 = vals, cols, held  # (the step after, when AHEAD is 2)
    if AHEAD == 2:
        lines += NL
        vals2, cols2, held2 = _step(heads, offsets, values, rest_at, windows, lines, end_line,
                                    within, LINE, HEAD_BASE, IN_PLACE, FINITE)  # fmt: skip
    acc = tl.zeros((ROWS, NL, LINE), dtype=ACC_DTYPE)
    pdl_before_inputs(PDL)
    for _ in range(0, tl.max(end_line - first_line), NL):
        lines += NL
        if HELD_IN_ASM and IN_PLACE:
            step = _step_in_place(heads, offsets, values, rest_at, windows, lines, end_line, within,
                                  LINE, HEAD_BASE, FINITE)  # fmt: skip
            next_vals, next_cols, next_held = step
        elif HELD_IN_ASM:
            step = _step_counted(heads, offsets, values, lines, end_line, within, LINE,
                                 HEAD_BASE)  # fmt: skip
            next_vals, next_cols, next_held = step
        else:
            next_vals, next_cols, next_held = _step(heads, offsets, values, rest_at, windows, lines,
                                                    end_line, within, LINE, HEAD_BASE, IN_PLACE,
                                                    FINITE)  # fmt: skip
        if HELD_IN_ASM:
            picked = gather16_below(x, cols * stride_x, within, held)
        elif ASM_GATHER:
            picked = gather16(x, cols * stride_x, held)
        else:
            picked = tl.load(x + cols * stride_x, mask=held, other=0.0)
        acc += vals.to(ACC_DTYPE) * picked.to(ACC_DTYPE)
        if AHEAD == 2:
            vals, cols, held = vals2, cols2, held2
            vals2, cols2, held2 = next_vals, next_cols, next_held
        else:
            vals, cols, held = next_vals, next_cols, next_held
    total = tl.sum(tl.sum(acc, axis=2), axis=1)
    if HAS_BIAS:
        total += tl.load(bias + row, mask=mask_r, other=0.0).to(ACC_DTYPE)
    total = activate(total, ACTIVATION)
    tl.store(out + row * stride_o, total.to(out.dtype.element_ty), mask=mask_r)


def check_in_place(layout: LineLayout | None, rest, heads: torch.Tensor, values: torch.Tensor):
    """Raise unless `layout` is None or an in-place layout whose heads these are, `values`
    its CSR's own (the windows read up to its last entry) and `rest` its pack_rest(values)."""
    if layout is None:
        return
    if not layout.in_place or layout.heads is not heads:
        raise ValueError("in_place must be the in-place layout (build(in_place=True)) of heads")
    if values.dim() != 1 or values.numel() != layout.entries or not values.is_contiguous():
        raise ValueError(
            f"values must be the layout's CSR values, contiguous ({layout.entries},), got "
            f"{tuple(values.shape)}"
        )
    lines = layout.rest_lines * layout.line
    if rest is None or rest.shape != (lines,) or rest.dtype != values.dtype:
        got = None if rest is None else (tuple(rest.shape), rest.dtype)
        raise ValueError(
            f"rest must be the layout's pack_rest(values): ({lines},) {values.dtype}, got {got}"
        )
    # (the walks read both from one base a multiple of 8 entries apart: _rest_at)
    for name, tensor in (("values", values), ("rest", rest)):
        if tensor.data_ptr() % 16:
            raise ValueError(f"{name} must start 16-byte aligned to be read in place")


def spmm_csr_token_lines(
    *,
    row_slots: torch.Tensor,
    offsets: torch.Tensor,
    heads: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    bias: torch.Tensor | None,
    row_order: torch.Tensor,
    out: torch.Tensor,
    activation: str,
    rows_per_program: int,
    block: int,
    num_warps: int,
    pdl: int = 0,
    asm_gather: bool = False,
    row_sequence: torch.Tensor | None = None,
    ahead: int = 1,
    held_in_asm: bool = False,
    in_place: LineLayout | None = None,
    rest: torch.Tensor | None = None,
    line: int = LINE,
    finite_values: bool = False,
) -> torch.Tensor:
    """out (M,) = act(A @ x + bias) for A in the line layout (row_slots int32, offsets uint8,
    heads int32, values packed: formats/_line_layout.LineLayout) and x (K,); x and out may
    be strided. `block`: slots of a row a step (a multiple of LINE). `asm_gather`: x read
    by inline PTX where x is 16-bit (not in the interpreter: the caller decides). A layout
    built with a row_sequence lists its rows in that order: row_order must be that sequence
    (checked by identity). `ahead`: steps of the weight loaded before a step's gather (1, 2).
    `held_in_asm`: the PTX gather compares each slot with its line's held count itself (with
    `asm_gather` and one step ahead; sm_90 loop 138 -> 121 instructions a step). `in_place`
    (the layout, built in_place, whose row_slots, offsets and heads these are): `values` are
    the CSR's own (nnz,), read in place at the lines' aligned windows, the other lines' from
    `rest` (in_place.pack_rest(values)), instead of a packed copy (2 bytes an entry less
    held). `finite_values` (with `in_place`): the caller knows every value is finite, so the
    next rows' values past an in-place line's entries need no masking (their gathered x is
    0). `line`: the layout's slots a line (LINES)."""
    if line not in LINES:
        raise ValueError(f"line must be one of {LINES} (the layout's), got {line}")
    if block % line or block & (block - 1):
        raise ValueError(f"block must be a power of two and a multiple of {line}, got {block}")
    if ahead not in (1, 2):
        raise ValueError(f"ahead must be 1 or 2, got {ahead}")
    if row_sequence is not None and row_order is not row_sequence:
        raise ValueError("row_order must be the layout's row_sequence (its rows' listed order)")
    check_in_place(in_place, rest, heads, values)
    rows = out.shape[0]
    if rows == 0:
        return out
    acc = tl.float64 if out.dtype == torch.float64 else tl.float32
    _spmm_csr_token_lines_kernel[(triton.cdiv(rows, rows_per_program),)](
        row_slots,
        offsets,
        heads,
        values,
        rest if in_place is not None else values,
        in_place.windows if in_place is not None else heads,
        x,
        bias if bias is not None else values,
        row_order,
        out,
        rows,
        x.stride(0),
        out.stride(0),
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        ACC_DTYPE=acc,
        ROWS=rows_per_program,
        BLOCK=block,
        LINE=line,
        HEAD_BASE=HEAD_BASE,
        PDL=pdl,
        ASM_GATHER=asm_gather and x.element_size() == 2,
        BY_SEQUENCE=row_sequence is not None,
        AHEAD=ahead,
        HELD_IN_ASM=held_in_asm and asm_gather and x.element_size() == 2 and ahead == 1,
        IN_PLACE=in_place is not None,
        FINITE=finite_values,
        num_warps=num_warps,
        num_stages=1,
        **launch_options(pdl),
    )
    return out
