"""CSR times one token with x gathered from shared memory (Gluon): an experiment against the
one-token walk (spmm_csr_token.py), which gathers x[col] through L1.

Nsight Compute on that walk (results/nvidia-h200/2026-12-03/at-4aeba33/ncu.txt, 70% 14336 x
4096) saw it stall mostly on x's gathers: a warp's 32 scattered 2-byte reads touch ~25-32 L1
lines, each a wavefront of the L1 pipe. From shared memory the same 32 reads cost one wavefront
per distinct 4-byte word in the most-hit bank, ~3-4 for random columns. So here a program (a
CTA of ROWS warps) first copies x into shared memory, then walks groups of ROWS rows in row
order, one row a warp, as the one-token walk does (whole aligned 16-entry groups loaded as
16-byte vectors, the arrays' last partial group entry by entry), and reads x[col] with
`ld.shared` (PTX through inline_asm_elementwise: Gluon on Triton 3.6 has no shared-memory
gather). Programs are persistent (a few a multiprocessor, each copying x once) and walk their
groups as one stream of steps, each step's loads issued before the step before it gathers,
across group ends (the first form, a group at a time, waited on each group's first loads:
results/nvidia-h200/2026-12-03/at-742944e).

The copy of x is the kernel's only shared memory and sits at offset 0 of the dynamic window
(`global_smem`); the launcher checks the compiled kernel's shared bytes. A group runs as many
steps as its first row needs: rows come longest first (Pattern.row_order), so the first row's
length bounds every row's aligned span. bf16 or fp16 values and x, int16 columns (K <=
32768), fp32 sums.
"""

from __future__ import annotations

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ._activation import ACTIVATION_CODES
from ._gluon_bits import cta_barrier, pdl_start
from ._pdl import launch_options
from ._sizes import cdiv

GROUP = gl.constexpr(16)  # entries a group: 16-byte vectors of int16 columns, 16-bit values
MAX_COLUMNS = 32768  # int16 columns
_CHECKED: set = set()


@gluon.jit
def _x_at(cols, IS_BF16: gl.constexpr):
    """x[col] as float32 from x's copy at offset 0 of the shared window; cols int16 read
    unsigned."""
    if IS_BF16:
        bits = gl.inline_asm_elementwise(
            "{ .reg .u32 a, b; .reg .b16 h; cvt.u32.u16 a, $1; shl.b32 a, a, 1; "
            "mov.u32 b, global_smem; add.u32 a, a, b; ld.shared.b16 h, [a]; "
            "cvt.u32.u16 a, h; shl.b32 $0, a, 16; }",
            "=r,h", [cols], dtype=gl.int32, is_pure=True, pack=1,
        )  # fmt: skip
    else:
        bits = gl.inline_asm_elementwise(
            "{ .reg .u32 a, b; .reg .b16 h; .reg .f32 f; cvt.u32.u16 a, $1; shl.b32 a, a, 1; "
            "mov.u32 b, global_smem; add.u32 a, a, b; ld.shared.b16 h, [a]; "
            "cvt.f32.f16 f, h; mov.b32 $0, f; }",
            "=r,h", [cols], dtype=gl.int32, is_pure=True, pack=1,
        )  # fmt: skip
    return bits.to(gl.float32, bitcast=True)


@gluon.jit
def _copy_x(x, K, XSIZE: gl.constexpr, CHUNK: gl.constexpr, XLOAD: gl.constexpr,
            XSHARED: gl.constexpr):  # fmt: skip
    """x (K,) into a shared buffer of XSIZE (a power of two >= K), every warp's part stored
    before any is read; past K the buffer is never read."""
    xs = gl.allocate_shared_memory(x.dtype.element_ty, [XSIZE], XSHARED)
    offs = gl.arange(0, CHUNK, layout=XLOAD)
    for i in gl.static_range(XSIZE // CHUNK):  # a slice's start must be a constant
        at = i * CHUNK + offs
        xs.slice(i * CHUNK, CHUNK).store(gl.load(x + at, mask=at < K, other=0.0))
    cta_barrier()
    return xs


@gluon.jit
def _group_rows(row_offsets, row_order, M, full, g, ROWS: gl.constexpr, ROW: gl.constexpr):
    """Group g's rows (one a warp) and as (ROWS, 1) their start, the aligned group at or below
    it, their end, where the vector walk stops; and the steps of BLOCK its first row bounds."""
    order = g * ROWS + gl.arange(0, ROWS, layout=ROW)
    mask_r = order < M
    row = gl.load(row_order + order, mask=mask_r, other=0)
    start = gl.load(row_offsets + row, mask=mask_r, other=0)
    end = gl.load(row_offsets + row + 1, mask=mask_r, other=0)
    first = gl.multiple_of(start // 16 * 16, 16)
    return row, mask_r, start, first, end, gl.minimum(end, full)


@gluon.jit
def _activate(acc, ACTIVATION: gl.constexpr):
    """_activation.activate for Gluon: relu keeps NaN; gelu is the exact erf form."""
    if ACTIVATION == 1:
        acc = gl.where(acc < 0, 0.0, acc)
    elif ACTIVATION == 2:
        acc = 0.5 * acc * (1.0 + gl.erf(acc * 0.7071067811865476))
    return acc


@gluon.jit
def _group_steps(row_offsets, row_order, g, groups, ROWS: gl.constexpr, BLOCK: gl.constexpr):
    """Steps of BLOCK group g walks: its first (longest) row's entries plus the 15 an aligned
    start may add, which bounds every row's span (1 for a group of empty rows)."""
    live = g < groups
    longest = gl.load(row_order + g * ROWS, mask=live, other=0)
    length = gl.load(row_offsets + longest + 1, mask=live, other=0) - gl.load(
        row_offsets + longest, mask=live, other=0
    )
    return (length + GROUP - 1 + BLOCK - 1) // BLOCK


@gluon.jit
def _finish_group(acc, column_indices, values, bias, out, row, mask_r, start, end, full,
                  stride_o, HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr,
                  IS_BF16: gl.constexpr, COL: gl.constexpr):  # fmt: skip
    """The group's rows' sums, plus the arrays' last partial group entry by entry (by the rows
    owning its entries), with bias and activation, stored."""
    tail = gl.expand_dims(full + gl.arange(0, GROUP, layout=COL), 0)
    owned = (tail >= gl.expand_dims(start, 1)) & (tail < gl.expand_dims(end, 1))
    tail_cols = gl.load(column_indices + tail, mask=owned, other=0)
    tail_vals = gl.load(values + tail, mask=owned, other=0.0).to(gl.float32)
    acc_tail = gl.where(owned, tail_vals * _x_at(tail_cols, IS_BF16), 0.0)
    total = gl.sum(acc, axis=1) + gl.sum(acc_tail, axis=1)
    if HAS_BIAS:
        total += gl.load(bias + row, mask=mask_r, other=0.0).to(gl.float32)
    total = _activate(total, ACTIVATION)
    gl.store(out + row * stride_o, total.to(out.dtype.element_ty), mask=mask_r)


@gluon.jit
def _step(column_indices, values, base, walk_end, k):
    """A step's columns and values at each row's aligned `base`: whole groups before the
    row's walk end (a mask constant across each 16-byte vector)."""
    offs = gl.expand_dims(base, 1) + k
    mask = gl.expand_dims(base, 1) + k // GROUP * GROUP < gl.expand_dims(walk_end, 1)
    cols = gl.load(column_indices + offs, mask=mask, other=0)
    vals = gl.load(values + offs, mask=mask, other=0.0)
    return offs, cols, vals


@gluon.jit
def _spmm_csr_token_shared_kernel(
    row_offsets,  # (M + 1,) int32
    column_indices,  # (nnz,) int16
    values,  # (nnz,) bf16 or fp16
    x,  # (K,) contiguous, the values' dtype
    bias,  # (M,) when HAS_BIAS
    row_order,  # (M,) int32: rows by length, longest first
    out,  # (M,) with stride stride_o
    M,
    K,
    full,  # entries in whole groups: what may be loaded as vectors
    stride_o,
    groups,  # cdiv(M, ROWS)
    HAS_BIAS: gl.constexpr,
    ACTIVATION: gl.constexpr,  # 0 none, 1 relu, 2 gelu
    IS_BF16: gl.constexpr,
    ROWS: gl.constexpr,  # rows a group: the CTA's warps
    BLOCK: gl.constexpr,  # entries of a row a step
    XSIZE: gl.constexpr,  # x's shared copy: a power of two >= K
    CHUNK: gl.constexpr,  # x's elements a copy step: 8 a thread
    WALK: gl.constexpr,  # (ROWS, BLOCK): a warp a row, 8 consecutive entries a thread
    XLOAD: gl.constexpr,
    XSHARED: gl.constexpr,
    PDL: gl.constexpr,  # programmatic dependent launch: any level waits first (Gluon)
):
    """A program's groups g, g + programs, ... as one stream of steps: each step's loads (this
    group's next step, or the next group's first) are issued before this step gathers x, so a
    group's start waits on nothing; the group after next's rows load as a group ends."""
    pdl_start(PDL)
    ROW: gl.constexpr = gl.SliceLayout(1, WALK)
    COL: gl.constexpr = gl.SliceLayout(0, WALK)
    programs = gl.num_programs(0)
    g = gl.program_id(0)
    row, mask_r, start, first, end, walk_end = _group_rows(
        row_offsets, row_order, M, full, g, ROWS, ROW
    )
    steps = _group_steps(row_offsets, row_order, g, groups, ROWS, BLOCK)
    k = gl.expand_dims(gl.arange(0, BLOCK, layout=COL), 0)
    base = first
    offs, cols, vals = _step(column_indices, values, base, walk_end, k)
    nxt = _group_rows(row_offsets, row_order, M, full, g + programs, ROWS, ROW)
    next_steps = _group_steps(row_offsets, row_order, g + programs, groups, ROWS, BLOCK)
    _copy_x(x, K, XSIZE, CHUNK, XLOAD, XSHARED)
    acc = gl.zeros([ROWS, BLOCK], gl.float32, WALK)
    step = 1
    while g < groups:
        last = step >= steps
        # the next step's loads: this group's next step, or the next group's first
        next_base = gl.where(last, nxt[3], base + BLOCK)
        next_walk_end = gl.where(last, nxt[5], walk_end)
        next_offs, next_cols, next_vals = _step(column_indices, values, next_base,
                                                next_walk_end, k)  # fmt: skip
        live = (offs >= gl.expand_dims(start, 1)) & (offs < gl.expand_dims(walk_end, 1))
        # selected after the product: a masked entry's x may be NaN (column 0's)
        acc += gl.where(live, vals.to(gl.float32) * _x_at(cols, IS_BF16), 0.0)
        if last:
            _finish_group(acc, column_indices, values, bias, out, row, mask_r, start, end,
                          full, stride_o, HAS_BIAS, ACTIVATION, IS_BF16, COL)  # fmt: skip
            acc = gl.zeros([ROWS, BLOCK], gl.float32, WALK)
            g += programs
            row, mask_r, start, first, end, walk_end = nxt
            steps = next_steps
            nxt = _group_rows(row_offsets, row_order, M, full, g + programs, ROWS, ROW)
            next_steps = _group_steps(row_offsets, row_order, g + programs, groups, ROWS,
                                      BLOCK)  # fmt: skip
            step = 1
        else:
            step += 1
        base, offs, cols, vals = next_base, next_offs, next_cols, next_vals


def layouts(rows: int, block: int, chunk: int) -> dict:
    """The kernel's WALK, XLOAD and XSHARED for ROWS warps."""
    return {
        "WALK": gl.BlockedLayout([1, 8], [1, 32], [rows, 1], [1, 0]),
        "XLOAD": gl.BlockedLayout([chunk // (32 * rows)], [32], [rows], [0]),
        "XSHARED": gl.SwizzledSharedLayout(1, 1, 1, [0]),
    }


def x_size(k: int, rows: int) -> int:
    """x's shared copy in elements: a power of two, at least K and one copy step."""
    return max(triton.next_power_of_2(k), 8 * 32 * rows)


def shared_bytes(k: int, rows: int) -> int:
    """The kernel's shared memory: x's copy (16-bit), nothing else."""
    return 2 * x_size(k, rows)


def spmm_csr_token_shared(
    *,
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    bias: torch.Tensor | None,
    row_order: torch.Tensor,
    out: torch.Tensor,
    activation: str,
    rows: int = 4,
    block: int = 256,
    programs_per_sm: int = 4,
    pdl: int = 0,
) -> torch.Tensor:
    """out (M,) = act(A @ x + bias) for a CSR A with int32 offsets, int16 columns and 16-bit
    values, x (K,) contiguous of the values' dtype. `rows`: warps a program (a row each);
    `block`: entries a row a step (256 or 512); `programs_per_sm`: persistent programs a
    multiprocessor (each copies x once)."""
    m = out.shape[0]
    k = x.shape[0]
    if column_indices.dtype != torch.int16 or row_offsets.dtype != torch.int32:
        raise TypeError(f"column_indices must be int16 and row_offsets int32, got "
                        f"{column_indices.dtype}, {row_offsets.dtype}")  # fmt: skip
    if values.dtype not in (torch.bfloat16, torch.float16) or x.dtype != values.dtype:
        raise TypeError(f"values and x must share bf16 or fp16, got {values.dtype}, {x.dtype}")
    if x.dim() != 1 or x.stride(0) != 1 or k > MAX_COLUMNS:
        raise ValueError(f"x must be contiguous (K,) with K <= {MAX_COLUMNS}, got shape "
                         f"{tuple(x.shape)} stride {x.stride()}")  # fmt: skip
    if rows not in (1, 2, 4, 8) or block not in (256, 512):
        raise ValueError(f"rows must be 1, 2, 4 or 8 and block 256 or 512, got {rows}, {block}")
    if m == 0:
        return out
    chunk = 8 * 32 * rows
    sms = torch.cuda.get_device_properties(out.device).multi_processor_count
    groups = cdiv(m, rows)
    grid = (min(groups, sms * programs_per_sm),)
    compiled = _spmm_csr_token_shared_kernel[grid](
        row_offsets, column_indices, values, x, bias if bias is not None else values,
        row_order, out, m, k, values.numel() // 16 * 16, out.stride(0), groups,
        HAS_BIAS=bias is not None, ACTIVATION=ACTIVATION_CODES[activation],
        IS_BF16=values.dtype == torch.bfloat16, ROWS=rows, BLOCK=block,
        XSIZE=x_size(k, rows), CHUNK=chunk, **layouts(rows, block, chunk), PDL=pdl,
        num_warps=rows, **launch_options(pdl),
    )  # fmt: skip
    if id(compiled) not in _CHECKED:  # once per compiled kernel, after its first launch
        want = shared_bytes(k, rows)
        if compiled.metadata.shared != want:
            raise RuntimeError(
                f"spmm_csr_token_shared: the kernel holds {compiled.metadata.shared} bytes of "
                f"shared memory, not x's copy's {want} alone: the copy's offset is unknown"
            )
        _CHECKED.add(id(compiled))
    return out
