"""Element-wise 1:8 and 2:8 N:M times one token with the weight streamed through a TMA ring (Gluon,
Hopper): the select kernel's picks (spmm_nm_select.py) fed the way cuBLAS's GEMV is fed.

The select kernel reads its weight with plain loads from many small programs and moves 1.4-2.6
TB/s on the H200; Nsight Compute saw it latency-bound, short of bytes in flight, while cuBLAS's
GEMV (one 384-thread CTA a multiprocessor, a 226 KB TMA ring) moves 3.8 (NOTES, eighteenth
session). Here persistent programs (a few a multiprocessor) walk their row blocks as one stream
of steps: each step is an (R rows x U units) box of values and one of offset bytes, copied by TMA
into a ring of STAGES buffers, so STAGES steps of weight are in flight while the warps compute.

A unit is what a thread takes per row and step: an int32 of two 16-bit values and the byte of
their two 4-bit offsets (NMMatrix.packed_indices(4)). For 2:8 a unit is one group (its x: 16
bytes, four int32 candidates); for 1:8 two groups (32 bytes). Each value takes its x from the
candidates by a tree of selects on its offset's bits, in registers, as in the select kernel; x
is read by 16-byte vector loads (PTX, one per group: x stays in L1, shared by every row block).

bf16 or fp16 values and x, m = 8, n of 1 or 2; the weight's rows 16-byte aligned for TMA
(`supports`). Sums in float32 a thread, then across the row's threads at the end of each row
block (transposed through shared memory first, so a thread sums a row's stretch), in a fixed
order: deterministic. Routed for bf16 and fp16 1:8 weights of 4096+ rows and columns at one
token (nm_decode_tuning.SELECT_RING; benchmarks/sweeps/nm_select_ring.py): cold on the H200,
4096 x 14336 12.2 -> 8.4 us (3.8x dense), 28672 x 4096 19.6 -> 13.6 (4.1x); 2:8 ties the
select kernel. A TMA warp of its own (`producer`, warp-specialized) ran slower than the
computing warps refilling the ring themselves."""

from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from ._activation import ACTIVATION_CODES
from ._gluon_bits import _permute_pair, cta_barrier, pdl_launch_dependents, pdl_start, pdl_wait
from ._pdl import launch_options
from ._sizes import cdiv

# TMA's global-to-shared copy (renamed after Triton 3.6, the H200's)
tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared


@gluon.jit
def _x_vector(address):
    """Four int32 of x at a 16-byte aligned address, one vector load a thread (not marked
    pure: it must stay after the launch's dependency wait)."""
    return gl.inline_asm_elementwise(
        "ld.global.nc.v4.b32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,l", [address],
        dtype=(gl.int32, gl.int32, gl.int32, gl.int32), is_pure=False, pack=1,
    )  # fmt: skip


@gluon.jit
def _value(pair, HIGH: gl.constexpr, BF16: gl.constexpr):
    """One of the two 16-bit values of an int32 as float32."""
    if BF16:
        bits = pair & -65536 if HIGH else pair << 16
        return bits.to(gl.float32, bitcast=True)
    half = (pair >> 16) if HIGH else pair
    return (half & 0xFFFF).to(gl.int16).to(gl.float16, bitcast=True).to(gl.float32)


@gluon.jit
def _pick(c0, c1, c2, c3, offset, BF16: gl.constexpr):
    """x at `offset` (0-7) of a group held as four int32 c0..c3, as float32: the int32 by bits
    1 and 2, its half by bit 0."""
    low = gl.where((offset & 2) != 0, c1, c0)
    high = gl.where((offset & 2) != 0, c3, c2)
    word = gl.where((offset & 4) != 0, high, low)
    if BF16:
        bits = gl.where((offset & 1) != 0, word & -65536, word << 16)
        return bits.to(gl.float32, bitcast=True)
    half = gl.where((offset & 1) != 0, word >> 16, word)
    return (half & 0xFFFF).to(gl.int16).to(gl.float16, bitcast=True).to(gl.float32)


@gluon.jit
def _selectors(offsets):
    """The byte permutes' selectors of a unit's two offsets (bits 0-2 and 4-6 of `offsets`):
    byte 0 selects the first value's half of a word pair (bytes 2h, 2h + 1 with h its offset's
    low two bits), byte 1 the second's, by one permute of a table (0x76543210 twice: entry o
    is 0x10 + 0x22 (o & 3))."""
    return gl.inline_asm_elementwise(
        "{ .reg .b32 t; mov.b32 t, 0x76543210; prmt.b32 $0, t, t, $1; }", "=r,r", [offsets],
        dtype=gl.int32, is_pure=True, pack=1,
    )  # fmt: skip


@gluon.jit
def _pick_permuted(c0, c1, c2, c3, selector, upper, BF16: gl.constexpr):
    """x at an offset of a group held as four int32 c0..c3, as float32: its half of each
    word pair by one byte permute (`selector`'s byte 0, from `_selectors`), the pair by the
    offset's bit 2 (`upper`); 6 instructions against `_pick`'s 9."""
    low = _permute_pair(c0, c1, selector)
    high = _permute_pair(c2, c3, selector)
    half = gl.where(upper, high, low)
    if BF16:
        return (half << 16).to(gl.float32, bitcast=True)
    return (half & 0xFFFF).to(gl.int16).to(gl.float16, bitcast=True).to(gl.float32)


@gluon.jit
def _candidates(x, units, valid, XB: gl.constexpr, AT: gl.constexpr, MASKED: gl.constexpr):
    """A group's four int32 of x for each unit, AT bytes into the unit's XB, (1, U); MASKED,
    zero past the weight's columns (their values are TMA's zero fill, x past K is not
    memory)."""
    address = (x + units * (XB // 2)).to(gl.int64) + AT
    c0, c1, c2, c3 = _x_vector(address)
    if MASKED:
        c0 = gl.where(valid, c0, 0)
        c1 = gl.where(valid, c1, 0)
        c2 = gl.where(valid, c2, 0)
        c3 = gl.where(valid, c3, 0)
    return (gl.expand_dims(c0, 0), gl.expand_dims(c1, 0), gl.expand_dims(c2, 0),
            gl.expand_dims(c3, 0))  # fmt: skip


@gluon.jit
def _unit_candidates(x, chunk, lanes, UNITS, U: gl.constexpr, N_KEEP: gl.constexpr,
                     MASKED: gl.constexpr):  # fmt: skip
    """x's candidates for a step's units: a group's four int32 for each of the unit's two
    values (for 2:8 both values are of the one group: the same four, loaded once). Not
    MASKED (every row's units whole steps): no lane is past the row."""
    XB: gl.constexpr = 32 // N_KEEP  # bytes of x a unit
    units = chunk * U + lanes
    valid = units < UNITS
    if MASKED:
        units = gl.minimum(units, UNITS - 1)
    a0, a1, a2, a3 = _candidates(x, units, valid, XB, 0, MASKED)
    if N_KEEP == 1:  # the unit's second group: its own candidates
        b0, b1, b2, b3 = _candidates(x, units, valid, XB, 16, MASKED)
    else:
        b0, b1, b2, b3 = a0, a1, a2, a3
    return a0, a1, a2, a3, b0, b1, b2, b3


@gluon.jit
def _issue(v_desc, o_desc, v_ring, o_ring, bars, t, stage, pid, programs, chunks, total,
           R: gl.constexpr, U: gl.constexpr, NBYTES: gl.constexpr):  # fmt: skip
    """Step t's boxes (row block pid + t // chunks * programs, chunk t % chunks) into `stage`,
    if the program has a step t."""
    block = pid + t // chunks * programs
    _copy_step(v_desc, o_desc, v_ring, o_ring, bars, t < total, block * R, t % chunks * U, stage,
               NBYTES)  # fmt: skip


@gluon.jit
def _copy_step(v_desc, o_desc, v_ring, o_ring, bars, live, row, col, stage,
               NBYTES: gl.constexpr):  # fmt: skip
    """The boxes at (row, col) into `stage`, if `live`."""
    bar = bars.index(stage)
    mbarrier.expect(bar, NBYTES, pred=live)
    tma_load(v_desc, [row, col], bar, v_ring.index(stage), pred=live)
    tma_load(o_desc, [row, col], bar, o_ring.index(stage), pred=live)


@gluon.jit
def _activate(acc, ACTIVATION: gl.constexpr):
    """_activation.activate for Gluon: relu keeps NaN; gelu is the exact erf form."""
    if ACTIVATION == 1:
        acc = gl.where(acc < 0, 0.0, acc)
    elif ACTIVATION == 2:
        acc = 0.5 * acc * (1.0 + gl.erf(acc * 0.7071067811865476))
    return acc


@gluon.jit
def _finish(acc, block, bias, out, M, stride_om, R: gl.constexpr, HAS_BIAS: gl.constexpr,
            ACTIVATION: gl.constexpr, ROW: gl.constexpr):  # fmt: skip
    """The row block's sums, bias and activation, stored. Where the warps divide the rows, the
    (R, U) sums are first transposed through shared memory to a row a few lanes (R units a
    thread): R - 1 adds a thread and a few shuffles, and a row a thread to store, instead of
    a five-level shuffle tree a row, a cross-warp pass and every row from one thread (the
    finish was ~330 instructions against a step's ~400)."""
    W: gl.constexpr = gl.num_warps()
    if R % W == 0 and R // W <= 32:
        SUMS: gl.constexpr = gl.BlockedLayout([1, R], [R // W, 32 * W // R], [W, 1], [1, 0])
        _store_rows(gl.sum(gl.convert_layout(acc, SUMS), axis=1), block, bias, out, M,
                    stride_om, R, HAS_BIAS, ACTIVATION, gl.SliceLayout(1, SUMS))  # fmt: skip
    else:
        _store_rows(gl.sum(acc, axis=1), block, bias, out, M, stride_om, R, HAS_BIAS,
                    ACTIVATION, ROW)  # fmt: skip


@gluon.jit
def _store_rows(total, block, bias, out, M, stride_om, R: gl.constexpr, HAS_BIAS: gl.constexpr,
                ACTIVATION: gl.constexpr, ROW: gl.constexpr):  # fmt: skip
    """A row block's sums (R,) in layout ROW, with bias and activation, into out."""
    rows = block * R + gl.arange(0, R, layout=ROW)
    if HAS_BIAS:
        total += gl.load(bias + rows, mask=rows < M, other=0.0).to(gl.float32)
    total = _activate(total, ACTIVATION)
    gl.store(out + rows * stride_om, total.to(out.dtype.element_ty), mask=rows < M)


@gluon.jit
def _producer(v_desc, o_desc, v_ring, o_ring, ready, empty, chunks, row_blocks,
              R: gl.constexpr, U: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    """The TMA warp: each step's boxes into the ring as soon as the consumers have released
    the buffer's last step."""
    NBYTES: gl.constexpr = v_desc.block_type.nbytes + o_desc.block_type.nbytes
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    total = (row_blocks - pid + programs - 1) // programs * chunks
    chunk = pid * 0
    block = pid
    for t in range(total):
        stage = t % STAGES
        mbarrier.wait(empty.index(stage), (t // STAGES & 1) ^ 1)  # a fresh barrier passes
        bar = ready.index(stage)
        mbarrier.expect(bar, NBYTES)
        tma_load(v_desc, [block * R, chunk * U], bar, v_ring.index(stage))
        tma_load(o_desc, [block * R, chunk * U], bar, o_ring.index(stage))
        chunk += 1
        if chunk == chunks:
            chunk = pid * 0
            block += programs


@gluon.jit
def _consumer(v_desc, o_desc, v_ring, o_ring, ready, empty, x, bias, out, M, UNITS, chunks,
              row_blocks, stride_om, N_KEEP: gl.constexpr, BF16: gl.constexpr,
              HAS_BIAS: gl.constexpr, ACTIVATION: gl.constexpr, R: gl.constexpr,
              U: gl.constexpr, STAGES: gl.constexpr, ISSUE: gl.constexpr,
              PREFETCH: gl.constexpr, COUNTED: gl.constexpr, MASKED: gl.constexpr,
              PERMUTE: gl.constexpr, PDL: gl.constexpr):  # fmt: skip
    """The computing warps: each step's values and offsets from the ring, x's candidates from
    L1, the picks and sums; a row block's sums stored after its last step. ISSUE: no TMA warp,
    these warps refill the buffer they have just read (after a barrier)."""
    # (R, U): a thread a unit, every row of it
    TILE: gl.constexpr = gl.BlockedLayout([R, 1], [1, 32], [1, gl.num_warps()], [1, 0])
    ROW: gl.constexpr = gl.SliceLayout(1, TILE)
    UNIT: gl.constexpr = gl.SliceLayout(0, TILE)
    NBYTES: gl.constexpr = v_desc.block_type.nbytes + o_desc.block_type.nbytes
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    total = (row_blocks - pid + programs - 1) // programs * chunks
    if ISSUE:
        for first in gl.static_range(STAGES):
            _issue(v_desc, o_desc, v_ring, o_ring, ready, first, first, pid, programs, chunks,
                   total, R, U, NBYTES)  # fmt: skip
    if PDL == 2:  # x and out may be the kernel before's: wait for it (the weight is not)
        pdl_wait()
    ahead_block = pid + STAGES // chunks * programs  # the step STAGES ahead's coordinates
    ahead_chunk = STAGES % chunks
    lanes = gl.arange(0, U, layout=UNIT)
    acc = gl.zeros([R, U], gl.float32, TILE)
    chunk = pid * 0
    block = pid
    if PREFETCH:
        a0, a1, a2, a3, b0, b1, b2, b3 = _unit_candidates(x, chunk, lanes, UNITS, U, N_KEEP,
                                                          MASKED)  # fmt: skip
    for t in range(total):
        stage = t % STAGES
        if PREFETCH:  # the next step's x first: its loads run under this step's wait and picks
            following = chunk + 1
            if following == chunks:
                following = pid * 0
            n0, n1, n2, n3, n4, n5, n6, n7 = _unit_candidates(x, following, lanes, UNITS, U,
                                                              N_KEEP, MASKED)  # fmt: skip
        else:
            a0, a1, a2, a3, b0, b1, b2, b3 = _unit_candidates(x, chunk, lanes, UNITS, U,
                                                              N_KEEP, MASKED)  # fmt: skip
        mbarrier.wait(ready.index(stage), t // STAGES & 1)
        pairs = v_ring.index(stage).load(TILE)
        offsets = o_ring.index(stage).load(TILE).to(gl.int32)
        if ISSUE:
            cta_barrier()  # every warp has read the buffer before TMA refills it
            fence_async_shared()
            if COUNTED:  # the step STAGES ahead by counters, not t's division by chunks
                _copy_step(v_desc, o_desc, v_ring, o_ring, ready, t + STAGES < total,
                           ahead_block * R, ahead_chunk * U, stage, NBYTES)  # fmt: skip
                ahead_chunk += 1
                if ahead_chunk == chunks:
                    ahead_chunk = pid * 0
                    ahead_block += programs
            else:
                _issue(v_desc, o_desc, v_ring, o_ring, ready, t + STAGES, stage, pid, programs,
                       chunks, total, R, U, NBYTES)  # fmt: skip
        else:
            mbarrier.arrive(empty.index(stage), count=1)
        if PERMUTE:
            selectors = _selectors(offsets)
            xa = _pick_permuted(a0, a1, a2, a3, selectors, (offsets & 4) != 0, BF16)
            acc += _value(pairs, False, BF16) * xa  # one FFMA
            xb = _pick_permuted(b0, b1, b2, b3, selectors >> 8, (offsets & 64) != 0, BF16)
            acc += _value(pairs, True, BF16) * xb
        else:
            acc += _value(pairs, False, BF16) * _pick(a0, a1, a2, a3, offsets, BF16)
            acc += _value(pairs, True, BF16) * _pick(b0, b1, b2, b3, offsets >> 4, BF16)
        if PREFETCH:
            a0, a1, a2, a3, b0, b1, b2, b3 = n0, n1, n2, n3, n4, n5, n6, n7
        chunk += 1
        if chunk == chunks:
            _finish(acc, block, bias, out, M, stride_om, R, HAS_BIAS, ACTIVATION, ROW)
            acc = gl.zeros([R, U], gl.float32, TILE)
            chunk = pid * 0
            block += programs


@gluon.jit
def _nm_select_ring_kernel(
    v_desc,  # (M, UNITS) int32: the values, two a unit
    o_desc,  # (M, UNITS) uint8: the offsets, two 4-bit ones a unit
    x,  # (K,) contiguous, 16-byte aligned
    bias,  # (M,) when HAS_BIAS
    out,  # (M,) at stride stride_om
    M,
    UNITS,
    chunks,  # cdiv(UNITS, U): steps a row block
    row_blocks,  # cdiv(M, R)
    stride_om,
    N_KEEP: gl.constexpr,  # 1 or 2 of 8
    BF16: gl.constexpr,  # else fp16
    HAS_BIAS: gl.constexpr,
    ACTIVATION: gl.constexpr,  # 0 none, 1 relu, 2 gelu
    R: gl.constexpr,  # rows a step
    U: gl.constexpr,  # units a step: a thread's one
    STAGES: gl.constexpr,  # the ring's buffers
    PRODUCER: gl.constexpr,  # a TMA warp of its own (warp-specialized), else the warps refill
    PREFETCH: gl.constexpr,  # the next step's x loaded a step ahead
    COUNTED: gl.constexpr,  # the refill's coordinates counted (no division a step)
    MASKED: gl.constexpr,  # x's candidates masked past the row (not: whole steps a row)
    PERMUTE: gl.constexpr,  # x's halves picked by byte permutes (_pick_permuted)
    PDL: gl.constexpr,
):
    if PDL == 2:  # the weight's first boxes are copied before the wait (in _consumer)
        pdl_launch_dependents()
    else:
        pdl_start(PDL)
    v_ring = gl.allocate_shared_memory(v_desc.dtype, [STAGES, R, U], v_desc.layout)
    o_ring = gl.allocate_shared_memory(o_desc.dtype, [STAGES, R, U], o_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for first in gl.static_range(STAGES):
        mbarrier.init(ready.index(first), count=1)
        mbarrier.init(empty.index(first), count=1)
    if PRODUCER:
        gl.warp_specialize(
            [
                (_consumer, (v_desc, o_desc, v_ring, o_ring, ready, empty, x, bias, out, M,
                             UNITS, chunks, row_blocks, stride_om, N_KEEP, BF16, HAS_BIAS,
                             ACTIVATION, R, U, STAGES, False, PREFETCH, False, MASKED, PERMUTE,
                             PDL)),
                (_producer, (v_desc, o_desc, v_ring, o_ring, ready, empty, chunks, row_blocks,
                             R, U, STAGES)),
            ],
            [1],
            [40],
        )  # fmt: skip
    else:
        _consumer(
            v_desc, o_desc, v_ring, o_ring, ready, empty, x, bias, out, M, UNITS, chunks,
            row_blocks, stride_om, N_KEEP, BF16, HAS_BIAS, ACTIVATION, R, U, STAGES, True,
            PREFETCH, COUNTED, MASKED, PERMUTE, PDL,
        )  # fmt: skip
    for last in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(last))
        mbarrier.invalidate(empty.index(last))


def supports(values: torch.Tensor, words: torch.Tensor, n: int, m: int, bits: int) -> bool:
    """bf16/fp16 1:8 or 2:8 with 4-bit offsets, rows of values and offset bytes at 16-byte
    strides and bases (TMA), whole units (an even number of values a row)."""
    if values.dtype not in (torch.bfloat16, torch.float16) or m != 8 or n not in (1, 2):
        return False
    if bits != 4 or values.dim() != 2 or values.shape[1] % 2 or values.stride(1) != 1:
        return False
    if words.dtype != torch.int32 or words.stride(1) != 1:
        return False
    aligned = values.data_ptr() % 16 == 0 and words.data_ptr() % 16 == 0
    return aligned and (values.stride(0) * 2) % 16 == 0 and (words.stride(0) * 4) % 16 == 0


@functools.cache
def _multiprocessors(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def spmm_nm_select_ring(
    *,
    values: torch.Tensor,
    words: torch.Tensor,
    x: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    n: int,
    activation: str,
    rows: int = 16,
    warps: int = 4,
    stages: int = 4,
    programs_per_sm: int = 2,
    producer: bool = False,
    prefetch: bool = True,
    counted: bool = False,
    unmasked: bool = False,
    permute: bool = False,
    max_programs: int | None = None,
    pdl: int = 0,
) -> torch.Tensor:
    """out (M, 1) = act(W @ x + bias) for the N:M weight's values (M, S) and packed offsets
    words (`NMMatrix.packed_indices(4)`), x (K, 1); the caller checks `supports`. A step is
    `rows` rows x 32 * `warps` units; `stages` steps in flight a program; `programs_per_sm`
    persistent programs a multiprocessor; `producer`: a TMA warp of its own, else the
    computing warps refill the ring; `prefetch`: x's candidates loaded a step ahead;
    `counted`: the refill's coordinates kept by counters instead of a division a step;
    `unmasked`: x's candidates not masked where every row's units are whole steps (no lane
    past a row); `permute`: x's halves picked by byte permutes, 6 instructions a value
    against 9 (`max_programs` caps the programs: tests walk many row blocks a program, the ring's
    buffers reused in both phases); `pdl`: programmatic dependent launch (kernels/_pdl.py; at
    2 the weight's first steps are copied before the wait)."""
    M, slots = values.shape
    if M == 0:
        return out
    units = slots // 2
    x = x.reshape(-1)
    if not x.is_contiguous() or x.data_ptr() % 16:
        x = x.clone(memory_format=torch.contiguous_format)
    span = 32 * warps
    pairs = values.view(torch.int32)
    offset_bytes = words.view(torch.uint8)
    v_desc = TensorDescriptor(
        pairs, [M, units], [pairs.stride(0), 1], [rows, span], gl.NVMMASharedLayout(0, 32)
    )
    o_desc = TensorDescriptor(
        offset_bytes, [M, units], [offset_bytes.stride(0), 1], [rows, span],
        gl.NVMMASharedLayout(0, 8),
    )  # fmt: skip
    row_blocks = cdiv(M, rows)
    index = values.device.index if values.device.index is not None else torch.cuda.current_device()
    grid = min(row_blocks, _multiprocessors(index) * programs_per_sm)
    grid = min(grid, max_programs or grid)
    _nm_select_ring_kernel[(grid,)](
        v_desc,
        o_desc,
        x,
        bias if bias is not None else x,
        out,
        M,
        units,
        cdiv(units, span),
        row_blocks,
        out.stride(0),
        N_KEEP=n,
        BF16=values.dtype == torch.bfloat16,
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        R=rows,
        U=span,
        STAGES=stages,
        PRODUCER=producer,
        PREFETCH=prefetch,
        COUNTED=counted,
        MASKED=not (unmasked and units % span == 0),
        PERMUTE=permute,
        PDL=pdl,
        num_warps=warps,
        **launch_options(pdl),
    )
    return out
