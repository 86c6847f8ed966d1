"""N:M SpMM at a few tokens on the sparse tensor cores: out = act(W @ B + bias), on Hopper
(sm_90) and Ampere's successors, in Gluon, through PTX's warp-level `mma.sp` (m16n8k32).

The sparse MMA takes its A operand compressed: two values of every four columns and, as
metadata, each value's 2-bit column within its four. That is the 2:4 NMMatrix as stored: a
group's two values are the operand's two slots, and its packed offsets (4 bits a group, slot 0
lowest) are the metadata's nibbles. So no tile is built: each thread loads its A registers
and metadata words as they lie in memory, and the tensor cores skip the zeros (the dense
wgmma kernel, spmm_nm_wgmma.py, spends most of its time building the dense tile in
registers).

Gluon has no sparse MMA, so it is inline PTX through `inline_asm_elementwise`, which hands
the asm each thread's registers a `pack` at a time and needs every operand in one layout.
All of them live in one 7-D layout whose axes are the instruction's own register indices:
(WMT, KB, RH, G, NT, Q, RC): the warp's m16 tiles (WMT, warps outermost), the step's k32
blocks (KB), and the accumulator's fragment, row = 16 * wmt + 8 * rh + g, column
8 * nt + 2 * q + rc (g = lane / 4, q = lane % 4). A thread's registers run rc, rh, kb first,
so each pack of 4 * KB holds the KB instructions' four registers of one (m16, n8) tile, and
every operand is indexed by the accumulator register it sits beside:
- A register 2 rh + rc (the fragment's a0-a7 in pairs): row g + 8 rc, slot pair (group)
  q + 4 rh of the k32 block; one int32 load each (a group's two 16-bit values);
- B register 2 rh + rc: B's rows 8 (2 rh + rc) + 2 q + (0, 1) at column g; one int32 of B
  (K contiguous), loaded by every warp (it is small and stays in L1);
- metadata: one register per thread, the instruction reading it from lanes q = 0 and 1
  (sparsity selector 0): lane q = 0 holds rows g and g + 8's first four groups (16 bits
  each, row g low), q = 1 their last four; one `prmt` of the two rows' offset words.
A and B broadcast along the axes they do not depend on (NT for A, WMT for B), so nothing is
loaded twice; the KB partial sums are added after the K walk.

Split-K as the wgmma kernel (split_k.end_piece: the last piece of a tile sums the planes).
"""

from __future__ import annotations

import os

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from . import split_k
from ._activation import ACTIVATION_CODES
from ._sizes import cdiv
from .spmm_nm_wgmma import _along, _clamped_shl

AXES = gl.constexpr(7)  # (WMT, KB, RH, G, NT, Q, RC)
WARPS = 4
GROUPS_A_BLOCK = gl.constexpr(8)  # 2:4 groups in a k32 block: one int32 word of offsets
PAD_META = gl.constexpr(0x44444444)  # columns (0, 1) in every nibble: valid, for padding


def _mma_sp_asm(blocks, type_name, ordered):
    """PTX for `blocks` mma.sp instructions, one per k32 block, on a pack of 4 * blocks
    registers of each operand: $0.. the accumulators (tied to the C inputs), then A, B, C
    and the metadata (each instruction reads the first register of its four)."""
    pack = 4 * blocks
    variant = "sp::ordered_metadata" if ordered else "sp"
    lines = []
    for kb in range(blocks):
        d = ", ".join(f"${4 * kb + i}" for i in range(4))
        a = ", ".join(f"${pack + 4 * kb + i}" for i in range(4))
        b = ", ".join(f"${2 * pack + 4 * kb + i}" for i in range(4))
        meta = f"${4 * pack + 4 * kb}"
        lines.append(
            f"mma.{variant}.sync.aligned.m16n8k32.row.col.f32.{type_name}.{type_name}.f32 "
            f"{{{d}}}, {{{a}}}, {{{b}}}, {{{d}}}, {meta}, 0x0;"
        )
    return "\n".join(lines)


def _mma_sp_constraints(blocks):
    pack = 4 * blocks
    tied = ",".join(str(i) for i in range(pack))
    return ",".join(["=f"] * pack + ["r"] * (2 * pack) + [tied] + ["r"] * pack)


@gluon.jit
def _permute2(a, b, selector):
    """PTX prmt.b32 of (a, b): byte k of the result is byte (selector >> 4k) & 7 of a, b."""
    return gl.inline_asm_elementwise(
        "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", [a, b, selector], dtype=gl.int32,
        is_pure=True, pack=1,
    )  # fmt: skip


@gluon.jit
def _load_step(a_rows, lo_rows, hi_rows, meta_selectors, b_tokens, g0, end, K,
               KB: gl.constexpr, MASKED: gl.constexpr, META_FORM: gl.constexpr,
               A_LAYOUT: gl.constexpr, B_LAYOUT: gl.constexpr,
               META_LAYOUT: gl.constexpr):  # fmt: skip
    """A step's A registers, metadata and B registers (module docstring) for the groups
    g0 .. g0 + 8 KB, each in its own layout, from the pointers of their rows (tokens for B)
    plus constants a register (so one address a row, the rest immediate offsets). MASKED:
    the last step, groups from `end` on not there."""
    a_groups = _along(KB, 1, AXES, A_LAYOUT) * GROUPS_A_BLOCK + 4 * _along(2, 2, AXES, A_LAYOUT)
    a_ptrs = (a_rows + g0) + a_groups
    word = _along(KB, 1, AXES, META_LAYOUT)
    first_word = g0 // GROUPS_A_BLOCK
    lo_ptrs = (lo_rows + first_word) + word
    hi_ptrs = (hi_rows + first_word) + word
    b_words = _along(KB, 1, AXES, B_LAYOUT) * 16 + 4 * (
        2 * _along(2, 2, AXES, B_LAYOUT) + _along(2, 6, AXES, B_LAYOUT)
    )  # fmt: skip
    b_ptrs = (b_tokens + g0 * 2) + b_words
    if MASKED:
        q = _along(4, 5, AXES, A_LAYOUT)
        a = gl.load(a_ptrs, mask=g0 + a_groups + q < end, other=0)
        word = first_word + word
        lo = gl.load(lo_ptrs, mask=word * GROUPS_A_BLOCK < end, other=0)
        hi = gl.load(hi_ptrs, mask=word * GROUPS_A_BLOCK < end, other=0)
        # groups past the end keep a valid pattern (their values load as zeros)
        valid = gl.maximum(end - word * GROUPS_A_BLOCK, 0) * 4
        kept = ~_clamped_shl(gl.full(valid.shape, -1, gl.int32, valid.type.layout), valid)
        lo = (lo & kept) | (PAD_META & ~kept)
        hi = (hi & kept) | (PAD_META & ~kept)
        b_rows = g0 * 2 + b_words + _along(4, 5, AXES, B_LAYOUT)  # B's int32 row (pair)
        bw = gl.load(b_ptrs, mask=b_rows * 2 < K, other=0)
    else:
        a = gl.load(a_ptrs)
        lo = gl.load(lo_ptrs)
        hi = gl.load(hi_ptrs)
        bw = gl.load(b_ptrs)
    if META_FORM == 0:
        meta = _permute2(lo, hi, meta_selectors)
    else:
        meta = gl.where(meta_selectors == 0x5410, lo, hi)
    return a, meta, bw


@gluon.jit
def _mma_step(acc, loaded, ASM: gl.constexpr, CONSTRAINTS: gl.constexpr):
    """acc + the step's products: the operands brought into acc's layout (registers copied
    along the axes they are broadcast on), then one asm a pack of 4 * KB registers."""
    a, meta, bw = loaded
    layout: gl.constexpr = acc.type.layout
    a, acc = gl.broadcast(gl.convert_layout(a, layout), acc)
    bw, acc = gl.broadcast(gl.convert_layout(bw, layout), acc)
    meta, acc = gl.broadcast(gl.convert_layout(meta, layout), acc)
    PACK: gl.constexpr = 4 * acc.shape[1]
    return gl.inline_asm_elementwise(
        ASM, CONSTRAINTS, [a, bw, acc, meta], dtype=gl.float32, is_pure=True, pack=PACK
    )


@gluon.jit
def _nm_mma_sp_kernel(
    values,  # (M, K / 2) 16-bit values read as int32 pairs (a group's two), unit stride
    units,  # (ceil(M / VECTOR), K / 32) the packed offsets, int32 words of 8 groups
    b,  # (N, K / 2) B's columns read as int32 pairs: K contiguous
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
    stride_um,
    stride_bn,  # in int32 words
    stride_om,
    stride_on,
    VECTOR: gl.constexpr,
    HAS_BIAS: gl.constexpr,
    ACTIVATION: gl.constexpr,
    SPLITS: gl.constexpr,
    FUSED: gl.constexpr,
    META_FORM: gl.constexpr,
    M_TILES: gl.constexpr,  # m16 tiles a warp
    KB: gl.constexpr,  # k32 blocks a step
    NT: gl.constexpr,  # n8 tiles a program
    ASM: gl.constexpr,
    CONSTRAINTS: gl.constexpr,
    LAYOUT: gl.constexpr,  # layouts() below
    A_LAYOUT: gl.constexpr,
    B_LAYOUT: gl.constexpr,
    META_LAYOUT: gl.constexpr,
):
    WMT: gl.constexpr = 4 * M_TILES
    BLOCK_M: gl.constexpr = WMT * 16
    BLOCK_N: gl.constexpr = NT * 8
    STEP: gl.constexpr = KB * GROUPS_A_BLOCK  # groups a step
    # A: rows g and g + 8 of each m16 tile (rc), lane q's group q of each four; the step's
    # groups kb * 8 + 4 rh + q (int32 pairs)
    a_rows = gl.program_id(0) * BLOCK_M + _along(WMT, 0, AXES, A_LAYOUT) * 16 + _along(
        8, 3, AXES, A_LAYOUT
    ) + 8 * _along(2, 6, AXES, A_LAYOUT)  # fmt: skip
    a_rows = gl.minimum(a_rows, M - 1).to(gl.int64)  # rows past M repeat the last
    a_rows = values + a_rows * stride_vm + _along(4, 5, AXES, A_LAYOUT)
    # metadata: the offset words of rows g and g + 8; lane q = 0 their low halves
    row0 = gl.program_id(0) * BLOCK_M + _along(WMT, 0, AXES, META_LAYOUT) * 16 + _along(
        8, 3, AXES, META_LAYOUT
    )  # fmt: skip
    lo_rows = units + (gl.minimum(row0, M - 1) // VECTOR).to(gl.int64) * stride_um
    hi_rows = units + (gl.minimum(row0 + 8, M - 1) // VECTOR).to(gl.int64) * stride_um
    meta_selectors = gl.where(_along(4, 5, AXES, META_LAYOUT) % 2 == 0, 0x5410, 0x7632)
    # B: token 8 nt + g (past N the last: not stored), rows 8 (2 rh + rc) + 2 q of each k32
    tokens = gl.program_id(1) * BLOCK_N + _along(NT, 4, AXES, B_LAYOUT) * 8 + _along(
        8, 3, AXES, B_LAYOUT
    )  # fmt: skip
    tokens = gl.minimum(tokens, N - 1).to(gl.int64)
    b_tokens = b + tokens * stride_bn + _along(4, 5, AXES, B_LAYOUT)
    acc = gl.zeros([WMT, KB, 2, 8, NT, 4, 2], gl.float32, LAYOUT)
    groups_total = K // 4
    first = gl.program_id(2) * GROUPS_PER_SPLIT
    end = gl.minimum(first + GROUPS_PER_SPLIT, groups_total)
    full = first + (end - first) // STEP * STEP
    for g0 in range(first, full, STEP):  # the loads of a step all in flight, then its MMAs
        loaded = _load_step(
            a_rows, lo_rows, hi_rows, meta_selectors, b_tokens, g0, end, K, KB, False,
            META_FORM, A_LAYOUT, B_LAYOUT, META_LAYOUT,
        )  # fmt: skip
        acc = _mma_step(acc, loaded, ASM, CONSTRAINTS)
    if full < end:
        loaded = _load_step(
            a_rows, lo_rows, hi_rows, meta_selectors, b_tokens, full, end, K, KB, True,
            META_FORM, A_LAYOUT, B_LAYOUT, META_LAYOUT,
        )  # fmt: skip
        acc = _mma_step(acc, loaded, ASM, CONSTRAINTS)
    tile = gl.reshape(gl.sum(acc, axis=1), [BLOCK_M, BLOCK_N])
    tile_layout: gl.constexpr = tile.type.layout
    offs_m = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, gl.SliceLayout(1, tile_layout))
    offs_n = gl.program_id(1) * BLOCK_N + gl.arange(0, BLOCK_N, gl.SliceLayout(0, tile_layout))
    split_k.end_piece(
        tile, offs_m, offs_n, offs_m < M, offs_n < N, bias, out, partials, counters, N,
        SPLIT_STRIDE, stride_om, stride_on, HAS_BIAS, ACTIVATION, gl.float32, SPLITS, FUSED,
    )  # fmt: skip


def layouts(m_tiles: int, blocks: int, n_tiles: int) -> dict:
    """The kernel's 7-D layouts (module docstring) for 4 warps, each with `m_tiles` m16 tiles,
    `blocks` k32 blocks a step and `n_tiles` n8 tiles: LAYOUT the accumulators' (registers
    rc, rh, kb, nt, wmt); A_LAYOUT, B_LAYOUT and META_LAYOUT the same without registers on
    the axes each operand does not depend on (loaded once, then broadcast)."""

    def blocked(wmt: int, kb: int, rh: int, nt: int, rc: int, order: list[int]):
        return gl.BlockedLayout(
            size_per_thread=[wmt, kb, rh, 1, nt, 1, rc],
            threads_per_warp=[1, 1, 1, 8, 1, 4, 1],
            warps_per_cta=[WARPS, 1, 1, 1, 1, 1, 1],
            order=order,
        )

    order = [6, 2, 1, 4, 0, 5, 3]
    return {
        "LAYOUT": blocked(m_tiles, blocks, 2, n_tiles, 2, order),
        "A_LAYOUT": blocked(m_tiles, blocks, 2, 1, 2, order),
        "B_LAYOUT": blocked(1, blocks, 2, n_tiles, 2, order),
        "META_LAYOUT": blocked(m_tiles, blocks, 1, 1, 1, [1, 0, 2, 4, 6, 5, 3]),
    }


def supports(n: int, m: int, block: int, dtype: torch.dtype, k: int, device: torch.device) -> bool:
    """2:4 element-wise (rows may share their choice in vectors), 16-bit values, K < 2^31, on
    an sm_80+ GPU (Gluon has no interpreter)."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    if torch.cuda.get_device_capability(device) < (8, 0):
        return False
    half = dtype in (torch.float16, torch.bfloat16)
    return (n, m, block) == (2, 4) and half and k < 2**31


def spmm_nm_mma_sp(
    *,
    values: torch.Tensor,
    words: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    vector: int,
    activation: str,
    m_tiles: int = 2,
    blocks: int = 2,
    n_tiles: int = 2,
    split: int = 1,
    fused: bool = True,
    ordered: bool = True,
    meta_form: int = 0,
) -> torch.Tensor:
    """Launch over out (M, N) for B (K, N). values (M, K / 2) 16-bit, words the int32
    `NMMatrix.packed_indices(2)` (8 groups a word). A program covers 64 * m_tiles rows (4
    warps of m_tiles m16 tiles) and 8 * n_tiles tokens, `blocks` k32 blocks a step; `split`
    cuts the K walk into that many ranges (fewer where one would be empty). B is copied K
    contiguous where it is not."""
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    k = b.shape[0]
    if values.stride(-1) != 1 or values.stride(0) % 2 or values.data_ptr() % 4:
        values = values.contiguous()
    if b.stride(0) != 1 or b.stride(1) % 2 or b.data_ptr() % 4:
        b = b.t().contiguous().t()
    step = 8 * blocks
    steps_per_split, splits = split_k.ranges(cdiv(k // 4, step), split)
    partials = split_k.workspace(out, splits, torch.float32)
    grid = (cdiv(rows, 64 * m_tiles), cdiv(cols, 8 * n_tiles), splits)
    fused = fused and splits > 1
    counters = split_k.tile_counters(out.device, grid[0] * grid[1]) if fused else words
    type_name = "bf16" if values.dtype == torch.bfloat16 else "f16"
    _nm_mma_sp_kernel[grid](
        values.view(torch.int32),
        words.view(torch.int32),
        b.t().view(torch.int32),
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
        words.stride(0),
        b.stride(1) // 2,
        out.stride(0),
        out.stride(1),
        VECTOR=vector,
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        SPLITS=splits,
        FUSED=fused,
        META_FORM=meta_form,
        M_TILES=m_tiles,
        KB=blocks,
        NT=n_tiles,
        ASM=_mma_sp_asm(blocks, type_name, ordered),
        CONSTRAINTS=_mma_sp_constraints(blocks),
        **layouts(m_tiles, blocks, n_tiles),
        num_warps=WARPS,
    )
    if splits > 1 and not fused:
        split_k.sum_partials(partials, bias, out, activation)
    return out
