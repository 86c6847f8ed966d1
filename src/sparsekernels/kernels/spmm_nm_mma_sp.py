"""2:4, 2:8 and 1:8 SpMM at a few tokens on the sparse tensor cores: out = act(W @ B + bias),
in Gluon, through PTX's warp-level `mma.sp` (m16n8k32, bf16 or fp16, sm_80+; on the H200).

The sparse MMA takes its A operand compressed, two values of every four columns, with each
value's 2-bit column as metadata: the 2:4 NMMatrix as stored. So no tile is built (the wgmma
kernel, spmm_nm_wgmma.py, spends most of its time building the dense tile in registers): a
lane loads its A registers as they lie, 16 bytes at a time, the metadata comes prepared in
register order once per weight and B's registers are permuted to match (the K order:
nm_mma_sp_operands.py), and the tensor cores skip the zeros.

Gluon has no sparse MMA, so it is inline PTX through `inline_asm_elementwise`, which hands
the asm a thread's registers `pack` at a time and needs every operand in one layout. The
accumulators are (WMT, RH, G, NT, Q, RC): a warp's m16 tiles (WMT, warps outermost) and the
fragment, row 16 wmt + 8 rh + g, column 8 nt + 2 q + rc (g = lane / 4, q = lane % 4), with a
thread's registers rc, rh first, so each pack of four is one instruction's accumulator. Every
operand is loaded in its own layout (a lane's 16-byte vector innermost), reshaped to name the
registers it sits beside (A register 2 rh + rc: row g + 8 rc, slot pair q + 4 rh; B register
2 rh + rc: B's rows 8 (2 rh + rc) + 2 q, + 1 at column g), split into its k32 blocks (a
register renaming) and brought into the accumulators' layout, broadcast along the axes it
does not depend on. The metadata's place, found on the H200 (at-f79ad6d; PTX's manual shows
it only in a figure): lane q = 0 of a quad holds rows g and g + 8's first four groups (16 bits
each, row g low, a nibble a group), q = 1 their last four (sparsity selector 0).

B goes through shared memory once a program (every warp reads all of it): read as it lies and
permuted on the way (natural_b; with wide_b_stores loaded so that a thread's shared stores are
16 bytes, not 4), or permuted by a launch before (permuted_b). A step is 8 k32 blocks (k256);
a warp one m16 tile. Split-K as the wgmma kernel (split_k.end_piece: the last piece of a tile
sums the planes in order). prefetch issues each step's loads a step ahead, the steps in pairs:
no faster at 1-16 tokens (at-8e676ab: 96 registers, not 80; slower at 1-8 tokens), not routed.

2:8 and 1:8: a group is two of the MMA's chunks of four (its halves); the lane loads the
group's values once and makes both halves' registers from them by the group's class (shifts
and masks: nm_mma_sp_operands), the classes loaded a word a lane a step. Plain `mma.sp` (a
padding slot's index may sit below its value's).

On the H200 (results/nvidia-h200/2026-12-01, cold, bf16; nm_mma_sp_tuning.py has the tables
and the route): 2:4 on 4096 x 14336 19.9 us at one token and 20.8 at 8 (dense 31.7-33.0),
3.2-3.3 TB/s on the weight's bytes against cuBLAS's 3.7 on the dense weight; 2:8 14.4-15.3
us at 1-8 tokens, 1:8 12.7-13.4, short of their bytes (too few in flight: NOTES).
"""

from __future__ import annotations

import os

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from . import split_k
from ._activation import ACTIVATION_CODES
from ._gluon_bits import _along, pdl_start
from ._gluon_bits import cta_barrier as _cta_barrier
from ._pdl import launch_options
from ._sizes import cdiv
from .nm_mma_sp_layouts import WARPS, launch_layouts
from .nm_mma_sp_operands import SPAN_BLOCKS, permuted_b
from .nm_mma_sp_registers import half_registers, split_blocks

AXES = gl.constexpr(7)  # (WMT, KB, RH, G, NT, Q, RC)


def _mma_sp_asm(type_name: str, ordered: bool) -> str:
    """PTX for one mma.sp on a pack of four registers of each operand: $0-$3 the accumulators
    (tied to the C inputs $12-$15), A $4-$7, B $8-$11, the metadata $16 (of $16-$19, copies).
    ::ordered_metadata: each group's two offsets rise (they do: the format keeps them so)."""
    variant = "sp::ordered_metadata" if ordered else "sp"
    return (
        f"mma.{variant}.sync.aligned.m16n8k32.row.col.f32.{type_name}.{type_name}.f32 "
        "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9, $10, $11}, {$0, $1, $2, $3}, $16, 0x0;"
    )


MMA_SP_CONSTRAINTS = "=f,=f,=f,=f,r,r,r,r,r,r,r,r,0,1,2,3,r,r,r,r"


@gluon.jit
def _load_step(a_rows, meta_tiles, class_tiles, b_tiles, g0, end, K, KB: gl.constexpr,
               N_KEEP: gl.constexpr, M_GROUP: gl.constexpr, MASKED: gl.constexpr,
               A_LOAD: gl.constexpr, META_LOAD: gl.constexpr, B_COPY: gl.constexpr,
               B_NATURAL: gl.constexpr):  # fmt: skip
    """A step's global loads for the groups g0 on (8 KB of 2:4, 4 KB of m = 8), a vector a
    lane (module docstring): A (WMT, SP, 4, G, 1, Q, RC), lane q's words 4 q .. 4 q + 3 of
    each span (a 2:4 or 2:8 group each, two 1:8 groups); the metadata (WMT, KB / 4, 4, G,
    1, Q, 1), four k32 blocks a lane; m = 8's classes, one word a lane (else the metadata
    again, unused); B's (NT, KB * 128) words, the program's share of the copy to shared
    memory. MASKED: the last step, groups from `end` on not there (their metadata, classes
    and B are padding)."""
    SPAN: gl.constexpr = 2 if M_GROUP == 4 else 8 // N_KEEP
    block0 = g0 // (32 // M_GROUP)  # the step's first k32 block: a multiple of KB
    word0 = g0 * N_KEEP // 2  # (g0 is even)
    span = _along(KB // SPAN, 1, AXES, A_LOAD) * 16 + _along(4, 2, AXES, A_LOAD)
    a_ptrs = (a_rows + word0) + span
    if MASKED:  # a word's groups from its first on (end is even for 1:8)
        words = word0 + span + 4 * _along(4, 5, AXES, A_LOAD)
        a = gl.load(a_ptrs, mask=words * (2 // N_KEEP) < end, other=0)
    else:
        a = gl.load(a_ptrs)
    blocks = _along(KB // 4, 1, AXES, META_LOAD) * 64 + _along(4, 2, AXES, META_LOAD)
    meta = gl.load((meta_tiles + block0 * 16) + blocks)  # 64 words a 4 blocks
    if M_GROUP == 8:  # noqa: SIM108 (the other branch's types differ)
        classes = gl.load(class_tiles + block0 // 8 * 32)  # a step of 8 blocks: 32 words
    else:
        classes = meta
    if B_NATURAL == 2:  # (tokens, span, j % 2, the span's 8 SPAN places): 16-byte stores
        pairs = _along(KB // SPAN, 1, 4, B_COPY) * (16 * SPAN) + _along(2, 2, 4, B_COPY) * (
            8 * SPAN
        ) + _along(8 * SPAN, 3, 4, B_COPY)  # fmt: skip
        b_ptrs = (b_tiles + block0 * 16) + pairs
        if MASKED:
            b_copy = gl.load(b_ptrs, mask=block0 * 16 + pairs < K // 2, other=0)
        else:
            b_copy = gl.load(b_ptrs)
    elif B_NATURAL:  # B's rows as they lie (int32 pairs), permuted on the way to shared memory
        pairs = gl.arange(0, KB * 16, gl.SliceLayout(0, B_COPY))
        b_ptrs = (b_tiles + block0 * 16) + gl.expand_dims(pairs, 0)
        if MASKED:
            b_mask = gl.expand_dims(block0 * 16 + pairs < K // 2, 0)
            b_copy = gl.load(b_ptrs, mask=b_mask, other=0)
        else:
            b_copy = gl.load(b_ptrs)
    else:
        words = gl.arange(0, KB * 128, gl.SliceLayout(0, B_COPY))
        b_copy = gl.load((b_tiles + block0 * 128) + gl.expand_dims(words, 0))  # 128 a block
    return a, meta, classes, b_copy


@gluon.jit
def _mma_step(acc, loaded, b_shared, ASM: gl.constexpr, CONSTRAINTS: gl.constexpr,
              KB: gl.constexpr, N_KEEP: gl.constexpr, M_GROUP: gl.constexpr,
              A_LOAD: gl.constexpr, B_LOAD: gl.constexpr,
              B_NATURAL: gl.constexpr):  # fmt: skip
    """acc + the step's products: B's words to shared memory (every warp reads all of them),
    the operands split into k32 blocks in acc's layout (registers copied along the axes they
    are broadcast on), then one mma.sp a block and (m16, n8) tile, chained on acc."""
    a, meta, classes, b_copy = loaded
    NT: gl.constexpr = b_shared.shape[0]
    SPAN: gl.constexpr = 2 if M_GROUP == 4 else 8 // N_KEEP
    if B_NATURAL:  # a pair's place in its span: (j % 2, q // 2, kl, j // 2, q % 2), permuted_b
        b_copy = gl.reshape(b_copy, [NT, 8, KB // SPAN, 2, 2, SPAN, 2, 2])
        b_copy = gl.permute(b_copy, (0, 2, 5, 1, 4, 7, 6, 3))
        b_shared.reshape([NT, KB, 8, 4, 4]).store(gl.reshape(b_copy, [NT, KB, 8, 4, 4]))
    else:
        b_shared.store(b_copy)
    _cta_barrier()
    bw = b_shared.reshape([NT, KB, 8, 4, 4]).load(B_LOAD)  # (NT, KB, G, Q, J)
    _cta_barrier()  # read before the next step's copy
    bw = gl.permute(gl.reshape(bw, [1, NT, KB, 8, 4, 2, 2]), (0, 2, 5, 3, 1, 4, 6))
    layout: gl.constexpr = acc.type.layout
    if M_GROUP == 8:
        a = half_registers(a, gl.convert_layout(classes, A_LOAD), N_KEEP)
    a = split_blocks(gl.reshape(a, [a.shape[0], KB, 2, 8, 1, 4, 2]), KB, layout)
    meta = split_blocks(gl.reshape(meta, [meta.shape[0], KB, 1, 8, 1, 4, 1]), KB, layout)
    bw = split_blocks(bw, KB, layout)
    for kb in gl.static_range(KB):
        a_kb, acc = gl.broadcast(a[kb], acc)
        b_kb, acc = gl.broadcast(bw[kb], acc)
        meta_kb, acc = gl.broadcast(meta[kb], acc)
        acc = gl.inline_asm_elementwise(
            ASM, CONSTRAINTS, [a_kb, b_kb, acc, meta_kb], dtype=gl.float32, is_pure=True,
            pack=4,
        )  # fmt: skip
    return acc


@gluon.jit
def _nm_mma_sp_kernel(
    values,  # (M, K / 2) 16-bit values read as int32 pairs (a group's two), unit stride
    meta,  # metadata_words(): (ceil(M / 16), K blocks / 4, 8, 2, 4) int32
    classes,  # 2:8: class_words(): (ceil(M / 16), K steps, 8, 4) int32
    b,  # permuted_b(): (ceil(N / 8), K blocks, 8, 4, 4) int32 pairs of B (or B_NATURAL)
    bias,
    out,  # (M, N)
    partials,  # with SPLITS > 1 the (SPLITS, M, N) float32 workspace
    counters,  # with FUSED an int32 a tile, zero (split_k.tile_counters)
    M,
    N,
    K,
    GROUPS_PER_SPLIT,  # a multiple of 8 KB: program_id(2) takes its range of groups
    SPLIT_STRIDE,  # M * N
    stride_vm,  # in int32 words
    stride_meta,  # int32 words an m16 tile
    stride_class,
    stride_b,  # int32 words an n8 tile (a token with B_NATURAL)
    stride_om,
    stride_on,
    HAS_BIAS: gl.constexpr,
    ACTIVATION: gl.constexpr,
    SPLITS: gl.constexpr,
    FUSED: gl.constexpr,
    N_KEEP: gl.constexpr,  # 2:4, 2:8 or 1:8
    M_GROUP: gl.constexpr,
    M_TILES: gl.constexpr,  # m16 tiles a warp
    KB: gl.constexpr,  # k32 blocks a step: 4 or 8
    NT: gl.constexpr,  # n8 tiles a program
    B_NATURAL: gl.constexpr,  # b is B's (N, K / 2) int32 pairs, permuted in the kernel (2:
    # loaded for 16-byte shared stores)
    PREFETCH: gl.constexpr,  # a step's loads issued a step ahead (two steps' registers)
    ASM: gl.constexpr,
    CONSTRAINTS: gl.constexpr,
    LAYOUT: gl.constexpr,  # nm_mma_sp_layouts.layouts()
    A_LOAD: gl.constexpr,
    META_LOAD: gl.constexpr,
    CLASS_LOAD: gl.constexpr,
    B_COPY: gl.constexpr,
    B_LOAD: gl.constexpr,
    B_SHARED: gl.constexpr,
    OUT_M_FASTEST: gl.constexpr,  # the tile stored from OUT_LAYOUT, planes (N, M) (out (M, N)
    OUT_LAYOUT: gl.constexpr,  # with unit stride along M: linear's W x^T)
    PDL: gl.constexpr = 0,  # programmatic dependent launch (_pdl.py; waits first)
):
    pdl_start(PDL)
    WMT: gl.constexpr = 4 * M_TILES
    BLOCK_M: gl.constexpr = WMT * 16
    BLOCK_N: gl.constexpr = NT * 8
    STEP: gl.constexpr = KB * (32 // M_GROUP)  # groups a step
    # A: rows g and g + 8 of each m16 tile (rc), past M the last (not stored)
    a_rows = gl.program_id(0) * BLOCK_M + _along(WMT, 0, AXES, A_LOAD) * 16 + _along(
        8, 3, AXES, A_LOAD
    ) + 8 * _along(2, 6, AXES, A_LOAD)  # fmt: skip
    a_rows = gl.minimum(a_rows, M - 1).to(gl.int64)
    a_rows = values + a_rows * stride_vm + 4 * _along(4, 5, AXES, A_LOAD)
    # metadata: the m16 tile's words of lane (g, q % 2)
    tiles = gl.program_id(0) * WMT + _along(WMT, 0, AXES, META_LOAD)
    tiles = gl.minimum(tiles, (M + 15) // 16 - 1).to(gl.int64)
    meta_tiles = meta + tiles * stride_meta + (
        _along(8, 3, AXES, META_LOAD) * 8 + _along(4, 5, AXES, META_LOAD) % 2 * 4
    )  # fmt: skip
    # 2:8's classes: the m16 tile's word of lane (g, q)
    tiles = gl.program_id(0) * WMT + _along(WMT, 0, AXES, CLASS_LOAD)
    tiles = gl.minimum(tiles, (M + 15) // 16 - 1).to(gl.int64)
    class_tiles = classes + tiles * stride_class + (
        _along(8, 3, AXES, CLASS_LOAD) * 4 + _along(4, 5, AXES, CLASS_LOAD)
    )  # fmt: skip
    # B: the program's n8 tiles (past N's last, the last), copied to shared memory a step
    if B_NATURAL == 2:  # B's tokens (past N the last: not stored)
        tokens = gl.program_id(1) * BLOCK_N + _along(BLOCK_N, 0, 4, B_COPY)
        b_tiles = b + gl.minimum(tokens, N - 1).to(gl.int64) * stride_b
    elif B_NATURAL:  # B's tokens (past N the last: not stored)
        tokens = gl.program_id(1) * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(1, B_COPY))
        tokens = gl.minimum(tokens, N - 1).to(gl.int64)
        b_tiles = b + gl.expand_dims(tokens * stride_b, 1)
    else:
        nts = gl.program_id(1) * NT + gl.arange(0, NT, gl.SliceLayout(1, B_COPY))
        nts = gl.minimum(nts, (N + 7) // 8 - 1).to(gl.int64)
        b_tiles = b + gl.expand_dims(nts * stride_b, 1)
    b_shared = gl.allocate_shared_memory(gl.int32, [NT, KB * 128], B_SHARED)
    acc = gl.zeros([WMT, 2, 8, NT, 4, 2], gl.float32, LAYOUT)
    groups_total = K // M_GROUP
    first = gl.program_id(2) * GROUPS_PER_SPLIT
    end = gl.minimum(first + GROUPS_PER_SPLIT, groups_total)
    full = first + (end - first) // STEP * STEP
    if PREFETCH:  # two steps' registers (la, lb), each step's loads issued into the set
        # its step of the pair before freed. Rotating one set through another (the first
        # form, at 7e0b151) made the compiler copy them each step, a copy waiting for its
        # load: that form prefetched nothing.
        pairs_end = first + (full - first) // (2 * STEP) * (2 * STEP)
        if pairs_end > first:
            la = _load_step(a_rows, meta_tiles, class_tiles, b_tiles, first, end, K, KB, N_KEEP,
                            M_GROUP, False, A_LOAD, META_LOAD, B_COPY, B_NATURAL)  # fmt: skip
            lb = _load_step(a_rows, meta_tiles, class_tiles, b_tiles, first + STEP, end, K, KB,
                            N_KEEP, M_GROUP, False, A_LOAD, META_LOAD, B_COPY,
                            B_NATURAL)  # fmt: skip
            for g0 in range(first, pairs_end - 2 * STEP, 2 * STEP):
                acc = _mma_step(acc, la, b_shared, ASM, CONSTRAINTS, KB, N_KEEP, M_GROUP,
                                A_LOAD, B_LOAD, B_NATURAL)  # fmt: skip
                la = _load_step(a_rows, meta_tiles, class_tiles, b_tiles, g0 + 2 * STEP, end, K,
                                KB, N_KEEP, M_GROUP, False, A_LOAD, META_LOAD, B_COPY,
                                B_NATURAL)  # fmt: skip
                acc = _mma_step(acc, lb, b_shared, ASM, CONSTRAINTS, KB, N_KEEP, M_GROUP,
                                A_LOAD, B_LOAD, B_NATURAL)  # fmt: skip
                lb = _load_step(a_rows, meta_tiles, class_tiles, b_tiles, g0 + 3 * STEP, end, K,
                                KB, N_KEEP, M_GROUP, False, A_LOAD, META_LOAD, B_COPY,
                                B_NATURAL)  # fmt: skip
            acc = _mma_step(acc, la, b_shared, ASM, CONSTRAINTS, KB, N_KEEP, M_GROUP, A_LOAD,
                            B_LOAD, B_NATURAL)  # fmt: skip
            acc = _mma_step(acc, lb, b_shared, ASM, CONSTRAINTS, KB, N_KEEP, M_GROUP, A_LOAD,
                            B_LOAD, B_NATURAL)  # fmt: skip
        if pairs_end < full:  # an odd step
            loaded = _load_step(a_rows, meta_tiles, class_tiles, b_tiles, pairs_end, end, K, KB,
                                N_KEEP, M_GROUP, False, A_LOAD, META_LOAD, B_COPY,
                                B_NATURAL)  # fmt: skip
            acc = _mma_step(acc, loaded, b_shared, ASM, CONSTRAINTS, KB, N_KEEP, M_GROUP,
                            A_LOAD, B_LOAD, B_NATURAL)  # fmt: skip
    else:
        for g0 in range(first, full, STEP):  # a step's loads all in flight, then its MMAs
            loaded = _load_step(a_rows, meta_tiles, class_tiles, b_tiles, g0, end, K, KB,
                                N_KEEP, M_GROUP, False, A_LOAD, META_LOAD, B_COPY,
                                B_NATURAL)  # fmt: skip
            acc = _mma_step(acc, loaded, b_shared, ASM, CONSTRAINTS, KB, N_KEEP, M_GROUP,
                            A_LOAD, B_LOAD, B_NATURAL)  # fmt: skip
    if full < end:
        loaded = _load_step(a_rows, meta_tiles, class_tiles, b_tiles, full, end, K, KB,
                            N_KEEP, M_GROUP, True, A_LOAD, META_LOAD, B_COPY,
                            B_NATURAL)  # fmt: skip
        acc = _mma_step(acc, loaded, b_shared, ASM, CONSTRAINTS, KB, N_KEEP, M_GROUP, A_LOAD,
                        B_LOAD, B_NATURAL)  # fmt: skip
    tile = gl.reshape(acc, [BLOCK_M, BLOCK_N])
    if OUT_M_FASTEST:  # a thread's runs of rows: 16-byte stores into a column-major out
        tile = gl.convert_layout(tile, OUT_LAYOUT)
    tile_layout: gl.constexpr = tile.type.layout
    offs_m = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, gl.SliceLayout(1, tile_layout))
    offs_n = gl.program_id(1) * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(0, tile_layout))
    plane_ld = M if OUT_M_FASTEST else N
    split_k.end_piece(
        tile, offs_m, offs_n, offs_m < M, offs_n < N, bias, out, partials, counters, plane_ld,
        SPLIT_STRIDE, stride_om, stride_on, HAS_BIAS, ACTIVATION, gl.float32, SPLITS, FUSED,
        OUT_M_FASTEST,
    )  # fmt: skip


def supports(n: int, m: int, block: int, dtype: torch.dtype, k: int, device: torch.device) -> bool:
    """2:4, 2:8 and 1:8 element-wise (rows may share their choice in vectors), 16-bit values,
    K < 2^31 (1:8: a multiple of 16, the values read as pairs), on an sm_80+ GPU (Gluon has
    no interpreter)."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    if torch.cuda.get_device_capability(device) < (8, 0):
        return False
    half = dtype in (torch.float16, torch.bfloat16)
    pattern = (n, m) in ((2, 4), (2, 8)) or ((n, m) == (1, 8) and k % 16 == 0)
    return pattern and block == 1 and half and k < 2**31


def spmm_nm_mma_sp(
    *,
    values: torch.Tensor,
    metadata: torch.Tensor,
    b: torch.Tensor,
    n: int = 2,
    m: int = 4,
    classes: torch.Tensor | None = None,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    activation: str,
    m_tiles: int = 1,
    blocks: int = 8,
    n_tiles: int = 2,
    split: int = 1,
    fused: bool = True,
    ordered: bool = True,
    natural_b: bool = False,
    wide_b_stores: bool = False,
    prefetch: bool = False,
    out_m_fastest: bool = False,
    pdl: int = 0,
) -> torch.Tensor:
    """Launch over out (M, N) for B (K, N) and an n:m weight (2:4, 2:8, 1:8): values
    (M, K / m * n) 16-bit, metadata its `metadata_words` (and for m = 8 classes its
    `class_words`). A program covers 64 * m_tiles rows (4 warps of m_tiles m16 tiles) and
    8 * n_tiles tokens, `blocks` k32 blocks a step (4 or 8; m = 8: 8); `split` cuts the K
    walk into that many ranges (fewer where one would be empty). B is permuted into the MMA's
    register order once before the launch (permuted_b), or with natural_b in the kernel
    (wide_b_stores: loaded so that its shared stores are 16 bytes, not 4). prefetch: each
    step's loads issued a step ahead. out_m_fastest: the tile stored by runs of rows (and the
    split-K planes laid out so), for an out with unit stride along M (linear's); not with an
    unfused split (sum_partials reads row-major planes). `pdl`: programmatic dependent launch
    (kernels/_pdl.py; waits at the start).
    m = 8 takes plain `mma.sp` (its padding slots' indices need not rise)."""
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    if blocks not in (4, 8) or (m == 8 and blocks != 8):
        raise ValueError(f"blocks must be 4 or 8 (8 for 2:8), got {blocks} for 2:{m}")
    if (n, m) not in SPAN_BLOCKS:
        raise ValueError(f"n:m must be 2:4, 2:8 or 1:8, got {n}:{m}")
    if wide_b_stores and not natural_b:
        raise ValueError("wide_b_stores is a form of natural_b (B permuted in the kernel)")
    if m == 8 and classes is None:
        raise ValueError(f"{n}:8 needs its classes (nm_mma_sp_operands.class_words)")
    if values.shape[1] * values.element_size() % 4:
        raise ValueError(
            f"values must fill whole 4-byte words a row (1:8: K a multiple of 16), got "
            f"{tuple(values.shape)}"
        )
    k = b.shape[0]
    # (a copy, not contiguous(): that keeps a contiguous tensor whose address is off)
    if values.stride(-1) != 1 or values.stride(0) % 2 or values.data_ptr() % 4:
        values = values.clone(memory_format=torch.contiguous_format)
    if natural_b:
        if b.stride(0) != 1 or b.stride(1) % 2 or b.data_ptr() % 16:
            b = b.t().clone(memory_format=torch.contiguous_format).t()
        b_words = b.t().view(torch.int32)  # (N, K / 2) pairs
    else:
        b_words = permuted_b(b, n, m)
    step = 32 // m * blocks  # groups a step
    steps_per_split, splits = split_k.ranges(cdiv(k // m, step), split)
    partials = split_k.workspace(out, splits, torch.float32)
    grid = (cdiv(rows, 64 * m_tiles), cdiv(cols, 8 * n_tiles), splits)
    fused = fused and splits > 1
    out_m_fastest = out_m_fastest and (splits == 1 or fused)
    counters = split_k.tile_counters(out.device, grid[0] * grid[1]) if fused else metadata
    type_name = "bf16" if values.dtype == torch.bfloat16 else "f16"
    _nm_mma_sp_kernel[grid](
        values.view(torch.int32),
        metadata,
        classes if classes is not None else metadata,
        b_words,
        bias if bias is not None else values,
        out,
        partials,
        counters,
        rows,
        cols,
        k,
        steps_per_split * step,
        rows * cols,
        values.stride(0) // 2,
        metadata.stride(0),
        classes.stride(0) if classes is not None else 0,
        b_words.stride(0),
        out.stride(0),
        out.stride(1),
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        SPLITS=splits,
        FUSED=fused,
        N_KEEP=n,
        M_GROUP=m,
        M_TILES=m_tiles,
        KB=blocks,
        NT=n_tiles,
        B_NATURAL=natural_b * (1 + wide_b_stores),
        PREFETCH=prefetch,
        OUT_M_FASTEST=out_m_fastest,
        ASM=_mma_sp_asm(type_name, ordered and m == 4),
        CONSTRAINTS=MMA_SP_CONSTRAINTS,
        PDL=pdl,
        num_warps=WARPS,
        **launch_layouts(m_tiles, blocks, n_tiles, natural_b * (1 + wide_b_stores), n, m),
        **launch_options(pdl),
    )
    if splits > 1 and not fused:
        split_k.sum_partials(partials, bias, out, activation)
    return out
