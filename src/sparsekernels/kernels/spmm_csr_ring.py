"""CSR times one token with the stored entries streamed through a TMA ring (Gluon, Hopper).

At one token a CSR product is bound by its entries' bytes (a 16-bit value and a 16-bit column
each). The one-token kernels (spmm_csr_token.py, spmm_csr_token_stream.py) read them with plain
loads a step ahead from one-warp programs of one to four rows and move ~3 TB/s on the H200; the
N:M select kernel gained 25-35% when a TMA ring fed it instead (spmm_nm_select_ring.py). A
CSR row block's entries are one contiguous stretch of the values and columns, so here each
persistent program owns a run of whole rows holding about 1/P of the entries (`row_splits`,
balanced by entries, not rows: no program waits on a long row) and streams that stretch as
steps of BR lines of LINE entries (the arrays viewed as (nnz // LINE, LINE): one 2-D TMA box an
array a step, where 1-D boxes of at most 256 entries took every thread ~15 instructions a box
in barriers), copied into a ring of STAGES buffers; the entries past the last whole line are
read directly by the step holding them. A step's entries may cross row ends: a step inside one
row adds its products as they come; where rows end, each is summed there (a masked reduction
over the step) and stored, its next row's end loaded a row ahead. Every column read is one of
x's (TMA fills zeros past the arrays), so the gather of x needs no mask.

bf16 or fp16 values, int16 or int32 columns (`supports`); float32 sums in a fixed order
(deterministic). Compiled for sm_90 (Triton 3.6) a step inside a row is ~200 SASS instructions
a thread for 8 entries (16 x 64 entries on four warps), ~60 of them the two TMA issues. Not yet
run on the GPU (written after the forty-first session's device time): its GPU tests are
tests/test_kernels_spmm_csr_ring.py, its sweep benchmarks/sweeps/csr_ring_cold.py; not routed."""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ._activation import ACTIVATION_CODES
from ._gluon_bits import cta_barrier, pdl_launch_dependents, pdl_start, pdl_wait
from .spmm_nm_select_ring import _activate, _multiprocessors

# TMA's global-to-shared copy (renamed after Triton 3.6, the H200's)
tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared

LINE = 64  # entries a line: the arrays are viewed as (nnz // LINE, LINE) for 2-D boxes


@gluon.jit
def _copy_step(v_desc, c_desc, b_desc, v_ring, c_ring, b_ring, bars, live, line, stage,
               NBYTES: gl.constexpr, LINES: gl.constexpr):  # fmt: skip
    """The step of boxes from `line` (of LINE entries) into `stage`, if `live` (in the line
    form, its lines' base columns too)."""
    bar = bars.index(stage)
    mbarrier.expect(bar, NBYTES, pred=live)
    tma_load(v_desc, [line, 0], bar, v_ring.index(stage), pred=live)
    tma_load(c_desc, [line, 0], bar, c_ring.index(stage), pred=live)
    if LINES:
        tma_load(b_desc, [line, 0], bar, b_ring.index(stage), pred=live)


@gluon.jit
def _store_row(total, row, bias, out, stride_om, HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr):
    if HAS_BIAS:
        total += gl.load(bias + row).to(gl.float32)
    total = _activate(total, ACTIVATION)
    gl.store(out + row * stride_om, total.to(out.dtype.element_ty))


@gluon.jit
def _sum(tile):
    return gl.sum(gl.sum(tile, axis=1), axis=0)


@gluon.jit
def _read(v_ring, c_ring, b_ring, ready, stage, phase, STEP: gl.constexpr, LINES: gl.constexpr):
    """A step's values and columns from the ring once TMA has filled `stage` (in the line form
    each line's base column plus the entries' byte offsets)."""
    mbarrier.wait(ready.index(stage), phase)
    vals = v_ring.index(stage).load(STEP)
    if LINES:
        # (a line's base is the first of its row of four int32; the max ignores replicas)
        four = b_ring.index(stage).load(STEP)
        first = gl.expand_dims(gl.arange(0, 4, layout=gl.SliceLayout(0, STEP)), 0) == 0
        bases = gl.max(gl.where(first, four, -1), axis=1)
        cols = gl.expand_dims(bases, 1) + c_ring.index(stage).load(STEP).to(gl.int32)
    else:
        cols = c_ring.index(stage).load(STEP).to(gl.int32)
    return vals, cols


@gluon.jit
def _gather(vals, cols, base, entry, values, columns, x, full, nnz, U: gl.constexpr,
            LINES: gl.constexpr):  # fmt: skip
    """The step's values as float32 and x at their columns; the entries past the arrays' last
    whole line (TMA's zero fill there; the line form has none) read directly first. Every
    column is one of x's: no mask on the gather."""
    if not LINES:  # noqa: SIM102 (a constexpr test apart from the runtime one)
        if base + U > full:  # (`base` the step's first entry: the arrays' last partial line)
            tail = (entry >= full) & (entry < nnz)
            vals = gl.where(tail, gl.load(values + entry, mask=tail, other=0.0), vals)
            cols = gl.where(tail, gl.load(columns + entry, mask=tail, other=0).to(gl.int32), cols)
    return vals.to(gl.float32), gl.load(x + cols).to(gl.float32)


@gluon.jit
def _csr_ring_kernel(
    v_desc,  # (nnz // LINE, LINE) 16-bit values, boxes of (BR, LINE)
    c_desc,  # (nnz // LINE, LINE) int16 or int32 columns, boxes of (BR, LINE); in the line
    # form uint8 offsets from each line's base column
    b_desc,  # the line form: (nnz // LINE, 4) int32, each line's base column first (a 1-D
    # box starts at any line and TMA's 1-D starts must be 16-byte aligned), boxes of (BR, 4)
    values,  # (nnz,) the same values: the last partial line's are read directly
    columns,  # (nnz,) the same columns
    row_offsets,  # (M + 1,) int32
    row_splits,  # (programs + 1, 2) int32: program p owns rows row_splits[p, 0] .. [p + 1, 0],
    # entries row_splits[p, 1] .. [p + 1, 1] (each row's first entry beside it: no load waits)
    x,  # (K,) contiguous
    bias,  # (M,) when HAS_BIAS
    out,  # (M,) at stride stride_om
    nnz,
    stride_om,
    HAS_BIAS: gl.constexpr,
    ACTIVATION: gl.constexpr,  # 0 none, 1 relu, 2 gelu
    BR: gl.constexpr,  # lines a step (BR x LINE entries)
    PER: gl.constexpr,  # adjacent entries a thread reads at once (a vector of the ring)
    STAGES: gl.constexpr,  # the ring's buffers
    PREFETCH: gl.constexpr,  # the next step's values and x loaded a step ahead
    PDL: gl.constexpr,
    LINES: gl.constexpr,  # the line form (formats/_line_layout.py): nnz a multiple of LINE
):
    LN: gl.constexpr = v_desc.block_type.shape[1]
    U: gl.constexpr = BR * LN
    if LINES:
        NBYTES: gl.constexpr = (
            v_desc.block_type.nbytes + c_desc.block_type.nbytes + b_desc.block_type.nbytes
        )
    else:
        NBYTES: gl.constexpr = v_desc.block_type.nbytes + c_desc.block_type.nbytes
    STEP: gl.constexpr = gl.BlockedLayout(
        [1, PER], [32 * PER // LN, LN // PER], [gl.num_warps(), 1], [1, 0]
    )
    if PDL == 2:  # the weight's first steps are copied before the wait (x and out after it)
        pdl_launch_dependents()
    else:
        pdl_start(PDL)
    v_ring = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BR, LN], v_desc.layout)
    c_ring = gl.allocate_shared_memory(c_desc.dtype, [STAGES, BR, LN], c_desc.layout)
    if LINES:
        b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BR, 4], b_desc.layout)
    else:
        b_ring = v_ring  # (unused)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for first in gl.static_range(STAGES):
        mbarrier.init(ready.index(first), count=1)
    pid = gl.program_id(0)
    row = gl.load(row_splits + 2 * pid)
    begin = gl.load(row_splits + 2 * pid + 1)
    last_row = gl.load(row_splits + 2 * pid + 2)
    end = gl.load(row_splits + 2 * pid + 3)
    line = begin // LN  # the stream starts on the line holding the first entry
    steps = (end - line * LN + U - 1) // U
    steps = gl.where(begin < end, steps, 0)
    for first in gl.static_range(STAGES):
        _copy_step(v_desc, c_desc, b_desc, v_ring, c_ring, b_ring, ready, first < steps,
                   line + first * BR, first, NBYTES, LINES)  # fmt: skip
    row_end = gl.load(row_offsets + row + 1, mask=row < last_row, other=end)
    next_end = gl.load(row_offsets + row + 2, mask=row + 1 < last_row, other=end)
    full = nnz // LN * LN  # entries past it are in no box: loaded directly
    if PDL == 2:
        pdl_wait()
    lines = gl.arange(0, BR, layout=gl.SliceLayout(1, STEP))
    across = gl.arange(0, LN, layout=gl.SliceLayout(0, STEP))
    within = gl.expand_dims(lines, 1) * LN + gl.expand_dims(across, 0)  # (BR, LN)
    acc = gl.zeros([BR, LN], gl.float32, STEP)
    if PREFETCH:  # the first step's values and x, then each step's next in the step before
        ahead_vals = gl.zeros([BR, LN], gl.float32, STEP)
        ahead_picked = gl.zeros([BR, LN], gl.float32, STEP)
        if steps > 0:
            vals, cols = _read(v_ring, c_ring, b_ring, ready, 0, 0, STEP, LINES)
            ahead_vals, ahead_picked = _gather(vals, cols, line * LN, line * LN + within, values,
                                               columns, x, full, nnz, U, LINES)  # fmt: skip
    for t in range(steps):
        stage = t % STAGES
        base = (line + t * BR) * LN
        entry = base + within
        if PREFETCH:
            vals, picked = ahead_vals, ahead_picked
            cta_barrier()  # every warp has read the buffer (a step ago) before TMA refills it
            fence_async_shared()
            _copy_step(v_desc, c_desc, b_desc, v_ring, c_ring, b_ring, ready, t + STAGES < steps,
                       line + (t + STAGES) * BR, stage, NBYTES, LINES)  # fmt: skip
            if t + 1 < steps:  # the next step's x loads run under this step's sums
                following = t + 1
                vals_next, cols_next = _read(v_ring, c_ring, b_ring, ready, following % STAGES,
                                             following // STAGES & 1, STEP, LINES)  # fmt: skip
                ahead_vals, ahead_picked = _gather(vals_next, cols_next, base + U, entry + U,
                                                   values, columns, x, full, nnz, U,
                                                   LINES)  # fmt: skip
        else:
            vals, cols = _read(v_ring, c_ring, b_ring, ready, stage, t // STAGES & 1, STEP, LINES)
            cta_barrier()  # every warp has read the buffer before TMA refills it
            fence_async_shared()
            _copy_step(v_desc, c_desc, b_desc, v_ring, c_ring, b_ring, ready, t + STAGES < steps,
                       line + (t + STAGES) * BR, stage, NBYTES, LINES)  # fmt: skip
            vals, picked = _gather(vals, cols, base, entry, values, columns, x, full, nnz, U,
                                   LINES)  # fmt: skip
        if (row_end > base + U) & (base >= begin):  # the step is inside one row: no row ends
            acc += vals * picked
        else:
            product = vals * picked
            below = gl.maximum(base, begin)  # entries under it are other rows'
            while (row < last_row) & (row_end <= base + U):  # rows ending in this step
                mine = (entry >= below) & (entry < row_end)
                _store_row(_sum(acc + gl.where(mine, product, 0.0)), row, bias, out, stride_om,
                           HAS_BIAS, ACTIVATION)  # fmt: skip
                acc = gl.zeros([BR, LN], gl.float32, STEP)
                below = row_end
                row += 1
                row_end = next_end  # loaded a row ago
                next_end = gl.load(row_offsets + row + 2, mask=row + 1 < last_row, other=end)
            acc += gl.where(entry >= below, product, 0.0)  # past `end`: no row's, never stored
    while row < last_row:  # rows of no entry after the last step (or a program of empty rows)
        _store_row(_sum(acc), row, bias, out, stride_om, HAS_BIAS, ACTIVATION)
        acc = gl.zeros([BR, LN], gl.float32, STEP)
        row += 1
    for last in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(last))


def supports(row_offsets: torch.Tensor, column_indices: torch.Tensor, values: torch.Tensor,
             x: torch.Tensor, bases: torch.Tensor | None = None) -> bool:  # fmt: skip
    """bf16 or fp16 values and x, int16 or int32 columns, int32 offsets, a line of entries at
    least (LINE), both arrays contiguous from 16-byte aligned bases (TMA). The line form
    (`bases` given): uint8 offsets, (lines, 4) int32 bases, whole lines."""
    if values.dtype not in (torch.bfloat16, torch.float16) or x.dtype != values.dtype:
        return False
    if bases is None:
        if column_indices.dtype not in (torch.int16, torch.int32):
            return False
    elif not _line_form_fits(column_indices, values, bases):
        return False
    if row_offsets.dtype != torch.int32:
        return False
    if values.dim() != 1 or values.numel() < LINE or values.numel() != column_indices.numel():
        return False
    if values.numel() >= 2**31 - 2**16:  # entry numbers (and a step past them) in int32
        return False
    if not (values.is_contiguous() and column_indices.is_contiguous()):
        return False
    return values.data_ptr() % 16 == 0 and column_indices.data_ptr() % 16 == 0


def _line_form_fits(offsets: torch.Tensor, values: torch.Tensor, bases: torch.Tensor) -> bool:
    if offsets.dtype != torch.uint8 or bases.dtype != torch.int32 or not bases.is_contiguous():
        return False
    if bases.dim() != 2 or bases.shape[1] != 4:
        return False
    return values.numel() == bases.shape[0] * LINE and bases.data_ptr() % 16 == 0


def row_splits(row_offsets: torch.Tensor, programs: int) -> torch.Tensor:
    """(programs + 1, 2) int32: program p owns rows [splits[p, 0], splits[p + 1, 0]), the first
    row whose entries start at or past p / programs of them (the last split is every row), and
    splits[:, 1] is each split row's first entry (a program's bounds in one 16-byte read, not
    a second dependent load). Cached per weight by the caller (a searchsorted a call is a
    launch of its own)."""
    rows = row_offsets.numel() - 1
    nnz = row_offsets[-1].to(torch.int64)
    targets = torch.arange(programs + 1, device=row_offsets.device, dtype=torch.int64)
    targets = (targets * nnz + programs - 1) // programs
    splits = torch.searchsorted(row_offsets.to(torch.int64), targets).clamp_(max=rows)
    splits[-1] = rows
    return torch.stack([splits, row_offsets.to(torch.int64)[splits]], dim=1).to(torch.int32)


def programs_for(device: torch.device, programs_per_sm: int) -> int:
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _multiprocessors(index) * programs_per_sm


def spmm_csr_ring(
    *,
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    activation: str,
    splits: torch.Tensor,
    lines: int = 16,
    warps: int = 4,
    stages: int = 4,
    vector: int = 8,
    prefetch: bool = False,
    pdl: int = 0,
    bases: torch.Tensor | None = None,
) -> torch.Tensor:
    """out (M,) = act(A @ x + bias) for a CSR A and x (K,); the caller checks `supports`.
    With `bases` the line form (formats/_line_layout.py): row_offsets are the rows' slots,
    column_indices the uint8 offsets, values packed, bases (lines, 4) each line's first column
    in its first place.
    `splits` from row_splits (a program a split); a step is `lines` x LINE entries, `stages`
    steps in flight a program, `vector` adjacent entries a thread reads at once (2-64);
    `prefetch`: each step's values and x read in the step before (x's loads run under that
    step's sums); `pdl`: programmatic dependent launch (kernels/_pdl.py; at 2 the first steps
    are copied before the wait)."""
    from ._pdl import launch_options

    rows = out.shape[0]
    if rows == 0:
        return out
    if vector not in (2, 4, 8, 16, 32, 64):  # a line's 64 entries over at most a warp's lanes
        raise ValueError(f"vector must be a power of two from 2 to 64, got {vector}")
    covered = 32 * vector // LINE * warps  # lines a pass of the warps reads
    if lines < covered or lines > 256 or lines & (lines - 1):
        raise ValueError(f"lines must be a power of two from {covered} to 256, got {lines}")
    if bases is not None and lines < 8:  # a stage's bases: 128 bytes at least (TMA)
        raise ValueError(f"lines must be at least 8 in the line form, got {lines}")
    x = x.reshape(-1)
    if not x.is_contiguous():
        x = x.contiguous()
    nnz = values.numel()
    v_desc = TensorDescriptor(
        values, [nnz // LINE, LINE], [LINE, 1], [lines, LINE], gl.NVMMASharedLayout(0, 16)
    )
    width = column_indices.element_size() * 8
    c_desc = TensorDescriptor(
        column_indices, [nnz // LINE, LINE], [LINE, 1], [lines, LINE],
        gl.NVMMASharedLayout(0, width),
    )  # fmt: skip
    b_desc = v_desc  # (unused outside the line form)
    if bases is not None:
        b_desc = TensorDescriptor(
            bases, [bases.shape[0], 4], [4, 1], [lines, 4], gl.NVMMASharedLayout(0, 32)
        )
    _csr_ring_kernel[(splits.shape[0] - 1,)](
        v_desc,
        c_desc,
        b_desc,
        values,
        column_indices,
        row_offsets,
        splits,
        x,
        bias if bias is not None else x,
        out,
        nnz,
        out.stride(0),
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        BR=lines,
        PER=vector,
        STAGES=stages,
        PREFETCH=prefetch,
        PDL=pdl,
        LINES=bases is not None,
        num_warps=warps,
        **launch_options(pdl),
    )
    return out
