"""N:M SpMM at a few tokens on tensor cores: out = act(W @ B + bias), each step's groups unpacked
into one dense tile in registers for one tl.dot.

At 4-64 tokens the weight's bytes still set the floor (2:8 on 14336 x 4096: 33 MB, ~9 us), but
per-value work grows with the tokens on CUDA cores: the select kernel's picks and the decode
kernel's gathers cost a token's worth of instructions each. Tensor cores do the tokens for free
if the weight arrives as a dense tile: a step loads (BLOCK_M rows x BLOCK_G groups) of
compressed values and their bit-packed offsets (the only bytes of W that travel), builds the
dense (BLOCK_M, BLOCK_G * m) tile and makes one tl.dot with B's contiguous rows. Two ways to
build it, on (rows, groups) tiles whose positions are joined in-thread (a thread holds whole
groups, so the tile reaches shared memory in 16-byte stores):
- n <= 2, m <= 8: byte permutes. A group's values are one int32 and each pair of positions one
  `prmt` of it with zeros, steered by a selector built once a group (2:8: 435 instructions a
  64 x 32 step);
- otherwise a compare-select per position and slot (795 for the same step in 2:8).

On the H200 (results/nvidia-h200/2026-12-01/at-9bb60c3, at-48a0785; nm_unpack_tuning.py), cold,
bf16, 14336 x 4096: 2:8 at 16 tokens 30 us against the route's 46 (dense 30), 2:4 33 against
55, 1:8 22 against 26; to 64 tokens 1.3-2.0x faster than the expand kernel at 2:8 and 2:4
and 1.0-1.4x at 1:8 (spmm_nm_expand.py, m dots a step on (rows, groups) tiles, one per
position). Its floor is the dense tile: staged through shared memory for the MMA every step,
as much as dense does (benchmarks/NOTES.md).

Element-wise and block-wise patterns (rows may share their choice in vectors), n and m powers
of two (m <= 32), 16-bit values, K a multiple of m. Block-wise, an offset names a kept run of
`block` columns whose values are consecutive slots; even blocks build the tile from int32 pairs
of values (_dense_tile's PAIRS). 4:8 and 4:16 with v = b = 4 at 4-16 tokens: 1.1-3.7x faster
than the decode kernel, 1.2-1.9x cuBLAS on the dense weight (H100, nm_unpack_tuning.py). Split-K
(`split`) for weights with few rows, summed in plane order by the last range of each tile to
finish (split_k.store_last_sums): deterministic; an atomic counter only orders the ranges.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from . import split_k
from ._activation import ACTIVATION_CODES
from ._sizes import cdiv


@triton.jit
def _slot_values(values, rows, g0, groups_total, stride_vm, N_KEEP: tl.constexpr,
                 LOG_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr,
                 MASKED: tl.constexpr, WIDE: tl.constexpr):  # fmt: skip
    """The step's values as n (rows, groups) tiles of their 16 bits (in int32), slot order:
    one contiguous (rows, groups * n) read (vector loads), split in halves by the slot's bits
    (each level's even tiles first, so the order stays the slots'). WIDE: `values` are int32
    pairs of 16-bit values, n of them a group, kept whole."""
    slots = g0 * N_KEEP + tl.arange(0, BLOCK_G * N_KEEP)
    ptrs = values + rows[:, None] * stride_vm + slots[None, :]
    if MASKED:
        vals = tl.load(ptrs, mask=(slots < groups_total * N_KEEP)[None, :], other=0)
    else:
        vals = tl.load(ptrs)
    if not WIDE:
        vals = vals.to(tl.uint16, bitcast=True).to(tl.int32)
    tiles = (tl.reshape(vals, (BLOCK_M, BLOCK_G, N_KEEP)),)
    for level in tl.static_range(LOG_N):
        evens = ()
        odds = ()
        for i in tl.static_range(1 << level):
            pairs = tl.reshape(tiles[i], (BLOCK_M, BLOCK_G, N_KEEP >> (level + 1), 2))
            even, odd = tl.split(pairs)
            evens = evens + (even,)
            odds = odds + (odd,)
        tiles = evens + odds
    out = ()
    for i in tl.static_range(N_KEEP):
        out = out + (tl.reshape(tiles[i], (BLOCK_M, BLOCK_G)),)
    return out


@triton.jit
def _group_offsets(units, index_rows, g0, groups_total, stride_um, J: tl.constexpr,
                   N_OFFS: tl.constexpr, BITS: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_G: tl.constexpr, MASKED: tl.constexpr):  # fmt: skip
    """Offset J of each group, (rows, groups), of its N_OFFS (n, or n / block block-wise).
    `units` are the packed words viewed as the
    integers that hold one group's offsets (N_OFFS * BITS of 8, 16 or 32 bits), or bytes holding
    several groups (fewer bits: unpacked in-thread by joins), or int32 words where a group
    needs several. Reads are contiguous across groups, with no division in their index (it
    would hide that from the compiler and keep the loads scalar)."""
    GROUP_BITS: tl.constexpr = N_OFFS * BITS
    PER_BYTE: tl.constexpr = 8 // GROUP_BITS if GROUP_BITS < 8 else 1
    if GROUP_BITS > 32:
        idx = (g0 + tl.arange(0, BLOCK_G)) * (GROUP_BITS // 32) + (J * BITS) // 32
        in_range = g0 + tl.arange(0, BLOCK_G) < groups_total
    else:
        idx = g0 // PER_BYTE + tl.arange(0, BLOCK_G // PER_BYTE)
        in_range = idx * PER_BYTE < groups_total
    ptrs = units + index_rows[:, None] * stride_um + idx[None, :]
    unit = tl.load(ptrs, mask=in_range[None, :], other=0) if MASKED else tl.load(ptrs)
    unit = unit.to(tl.int32)
    # (if / else, no early return: the compiler traced the shift after one, J * BITS up to 56
    # on an int32 for 8:32, and warned of undefined behaviour)
    if GROUP_BITS > 32:
        offset = (unit >> ((J * BITS) % 32)) & ((1 << BITS) - 1)
    else:
        LEVELS: tl.constexpr = (PER_BYTE >= 2) + (PER_BYTE >= 4) + (PER_BYTE >= 8)
        for level in tl.static_range(LEVELS):  # a byte's groups in order: low bits first
            unit = tl.reshape(tl.join(unit, unit >> (4 >> level)), (BLOCK_M, unit.shape[1] * 2))
        offset = (unit >> (J * BITS)) & ((1 << BITS) - 1)
    return offset


@triton.jit
def _position(vals, offs, P: tl.constexpr, N_BLOCKS: tl.constexpr, BLOCK: tl.constexpr):
    """Position P of each group: the value of the slot whose offset is P, else 0. Block-wise
    (BLOCK > 1), offset j names the group's block P // BLOCK, whose value P % BLOCK is slot
    j * BLOCK + P % BLOCK."""
    d = tl.where(offs[0] == P // BLOCK, vals[P % BLOCK], 0)
    for j in tl.static_range(1, N_BLOCKS):
        d = tl.where(offs[j] == P // BLOCK, vals[j * BLOCK + P % BLOCK], d)
    return d


@triton.jit
def _permute(a, selector, ASM: tl.constexpr):
    """PTX prmt.b32 of (a, 0): byte k of the result is byte (selector >> 4k) & 7 of a's four
    bytes followed by four zero bytes (selector nibbles below 8). The interpreter (no inline
    assembly) computes the same by shifts."""
    if ASM:
        return tl.inline_asm_elementwise(
            "prmt.b32 $0, $1, 0, $2;", "=r,r,r", [a, selector], dtype=tl.int32, is_pure=True,
            pack=1,
        )  # fmt: skip
    out = tl.zeros_like(a)
    for k in tl.static_range(4):
        nib = (selector >> (4 * k)) & 7
        byte = tl.where(nib < 4, (a >> (8 * (nib & 3))) & 0xFF, 0)
        out = out | (byte << (8 * k))
    return out


@triton.jit
def _permuted_tile(
    values, units, rows, index_rows, g0, groups_total, stride_vm, stride_um,
    N_KEEP: tl.constexpr, M_GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr, LOG_M: tl.constexpr, MASKED: tl.constexpr, ASM: tl.constexpr,
):  # fmt: skip
    """The dense tile as _dense_tile's, for n <= 2 and m <= 8 in 16 bits, by byte permutes: a
    group's values are one int32 (v0 in bytes 0-1, v1 in 2-3; `values` viewed as int32 for
    n = 2), and each pair of positions (one int32 word of the dense group) is one prmt of it
    with zeros, steered by a selector built once a group: 2 bytes a position, 0x44 (zeros)
    where nothing is kept, xor-ed with each slot's own code at 8 * offset bits."""
    groups = tl.multiple_of(g0, BLOCK_G) + tl.arange(0, BLOCK_G)
    ptrs = values + rows[:, None] * stride_vm + groups[None, :]
    if MASKED:
        group = tl.load(ptrs, mask=(groups < groups_total)[None, :], other=0)
    else:
        group = tl.load(ptrs)
    if N_KEEP == 1:
        group = group.to(tl.uint16, bitcast=True).to(tl.int32)
    SEL_TYPE: tl.constexpr = tl.int64 if M_GROUP == 8 else tl.int32
    selector = tl.full((BLOCK_M, BLOCK_G), 0x4444444444444444 if M_GROUP == 8 else 0x44444444,
                       SEL_TYPE)  # fmt: skip
    for j in tl.static_range(N_KEEP):
        offset = _group_offsets(
            units, index_rows, g0, groups_total, stride_um, j, N_KEEP, BITS, BLOCK_M,
            BLOCK_G, MASKED,
        )  # fmt: skip
        code = 0x54 if j == 0 else 0x76  # 0x44 ^ (bytes 0, 1) or 0x44 ^ (bytes 2, 3)
        selector = selector ^ (
            tl.full((BLOCK_M, BLOCK_G), code, SEL_TYPE) << (offset * 8).to(SEL_TYPE)
        )
    words = ()
    for i in tl.static_range(M_GROUP // 2):
        words = words + (_permute(group, (selector >> (16 * i)).to(tl.int32), ASM),)
    for level in tl.static_range(LOG_M - 1):
        joined = ()
        for i in tl.static_range(M_GROUP >> (level + 2)):
            joined = joined + (tl.join(words[i], words[i + (M_GROUP >> (level + 2))]),)
        words = joined
    dense = tl.reshape(words[0], (BLOCK_M, BLOCK_G * M_GROUP // 2))
    dense = tl.join(dense & 0xFFFF, (dense >> 16) & 0xFFFF)
    return tl.reshape(dense, (BLOCK_M, BLOCK_G * M_GROUP)).to(tl.uint16)


@triton.jit
def _dense_tile(
    values, units, rows, index_rows, g0, groups_total, stride_vm, stride_um,
    N_KEEP: tl.constexpr, M_GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr, LOG_N: tl.constexpr, LOG_M: tl.constexpr, MASKED: tl.constexpr,
    BLOCK: tl.constexpr, PAIRS: tl.constexpr,
):  # fmt: skip
    """The (BLOCK_M, BLOCK_G * m) dense tile of groups g0 .. g0 + BLOCK_G of `rows`, 16 bits
    each: every position of a group is a compare-select over the group's kept blocks (of
    BLOCK columns; slots element-wise), on (rows, groups) tiles, and the positions are joined
    in-thread (a thread holds whole groups). PAIRS (even blocks, `values` as int32 pairs):
    positions two at a time, a block's neighbours being a pair of slots, split into 16-bit
    halves at the end (the low half the even position): half the selects and no 16-bit
    repacking (sm_90 compile: ~16 build instructions a 4:8 b=4 group without, ~5 with)."""
    g0 = tl.multiple_of(g0, BLOCK_G)  # (vector loads)
    LOG_W: tl.constexpr = 1 if PAIRS else 0  # 16-bit values a unit: 2 ** LOG_W
    N_BLOCKS: tl.constexpr = N_KEEP // BLOCK  # offsets a group
    vals = _slot_values(
        values, rows, g0, groups_total, stride_vm, N_KEEP >> LOG_W, LOG_N - LOG_W, BLOCK_M,
        BLOCK_G, MASKED, PAIRS,
    )  # fmt: skip
    offs = ()
    for j in tl.static_range(N_BLOCKS):
        offs = offs + (
            _group_offsets(
                units, index_rows, g0, groups_total, stride_um, j, N_BLOCKS, BITS, BLOCK_M,
                BLOCK_G, MASKED,
            ),
        )  # fmt: skip
    # the m positions (units), joined pairwise in-thread: the first joins pair p with p + m / 2
    # (the slowest new dimension), the last pairs neighbours, so the trailing dimensions
    # flatten to p
    UNITS: tl.constexpr = M_GROUP >> LOG_W
    tiles = ()
    for p in tl.static_range(UNITS):
        tiles = tiles + (_position(vals, offs, p, N_BLOCKS, BLOCK >> LOG_W),)
    for level in tl.static_range(LOG_M - LOG_W):
        joined = ()
        for i in tl.static_range(UNITS >> (level + 1)):
            joined = joined + (tl.join(tiles[i], tiles[i + (UNITS >> (level + 1))]),)
        tiles = joined
    dense = tl.reshape(tiles[0], (BLOCK_M, BLOCK_G * UNITS))
    if PAIRS:
        dense = tl.join(dense & 0xFFFF, (dense >> 16) & 0xFFFF)
    return tl.reshape(dense, (BLOCK_M, BLOCK_G * M_GROUP)).to(tl.uint16)


@triton.jit
def _step(
    acc, values, units, b, rows, index_rows, b_cols, mask_bn, g0, end, K, stride_vm, stride_um,
    stride_bk, N_KEEP: tl.constexpr, M_GROUP: tl.constexpr, BITS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr, LOG_N: tl.constexpr, LOG_M: tl.constexpr,
    MASKED: tl.constexpr, PERMUTE: tl.constexpr, ASM: tl.constexpr, BLOCK: tl.constexpr,
    PAIRS: tl.constexpr,
):  # fmt: skip
    """acc + (the dense tile of groups g0 .. g0 + BLOCK_G) @ (B's rows under them); MASKED: the
    last step, groups from `end` on are not there."""
    if PERMUTE:
        a = _permuted_tile(
            values, units, rows, index_rows, g0, end, stride_vm, stride_um, N_KEEP, M_GROUP,
            BITS, BLOCK_M, BLOCK_G, LOG_M, MASKED, ASM,
        )  # fmt: skip
    else:
        a = _dense_tile(
            values, units, rows, index_rows, g0, end, stride_vm, stride_um, N_KEEP, M_GROUP,
            BITS, BLOCK_M, BLOCK_G, LOG_N, LOG_M, MASKED, BLOCK, PAIRS,
        )  # fmt: skip
    ks = tl.multiple_of(g0 * M_GROUP, BLOCK_G * M_GROUP) + tl.arange(0, BLOCK_G * M_GROUP)
    b_ptrs = b + ks[:, None].to(tl.int64) * stride_bk + b_cols
    if MASKED:
        b_tile = tl.load(b_ptrs, mask=(ks < K)[:, None] & mask_bn[None, :], other=0.0)
    else:
        b_tile = tl.load(b_ptrs, mask=mask_bn[None, :], other=0.0)
    a = a.to(b.dtype.element_ty, bitcast=True)
    if not ASM:  # the interpreter's bfloat16 tl.dot is wrong: float32 holds the same products
        return tl.dot(a.to(tl.float32), b_tile.to(tl.float32), acc)
    return tl.dot(a, b_tile, acc)


@triton.jit
def _nm_unpack_kernel(
    values,  # (M, S) compressed 16-bit values, S = groups * n, unit stride along S
    units,  # (ceil(M / VECTOR), ...) the packed offsets as 8, 16 or 32-bit integers, unit stride
    b,  # (K, B_COLS): strides stride_bk, stride_bn
    bias,
    out,  # (M, N)
    partials,  # with SPLITS > 1 the (SPLITS, M, N) float32 workspace
    counters,  # with FUSED an int32 a tile, zero (split_k.tile_counters)
    M,
    N,
    B_COLS,  # B's columns, read past N (never stored): a multiple of 16 keeps B's loads wide
    K,
    GROUPS_PER_SPLIT,  # a multiple of BLOCK_G: program_id(2) takes its range of groups
    SPLIT_STRIDE,  # M * N
    stride_vm,
    stride_um,
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    BITS: tl.constexpr,
    VECTOR: tl.constexpr,
    BLOCK: tl.constexpr,  # block-wise: kept runs of BLOCK columns, one offset each
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr,  # groups a step: the dot is BLOCK_G * m deep
    BLOCK_N: tl.constexpr,
    SPLITS: tl.constexpr,  # pieces of the K range, program_id(2)
    FUSED: tl.constexpr,  # the last piece of a tile sums the pieces (else a second kernel)
    LOG_N: tl.constexpr,  # n a power of two
    LOG_M: tl.constexpr,  # m a power of two
    PERMUTE: tl.constexpr,  # n <= 2, m <= 8: the tile by byte permutes (_permuted_tile)
    PAIRS: tl.constexpr,  # even blocks: the tile from int32 pairs of values (_dense_tile)
    ASM: tl.constexpr,  # compiled, not the interpreter: prmt as inline assembly, 16-bit dots
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    # (a row-major B of N % 16 != 0 columns, masked on N, loaded 2 bytes at a time: the loop
    # 324 -> 392 SASS instructions at 4:8 b4, 628 -> 740 at 2:8, sm_90; 16 | B_COLS and B's
    # row stride keep the aligned code)
    mask_bn = offs_n < B_COLS
    rows = tl.minimum(offs_m, M - 1).to(tl.int64)  # rows past M repeat the last, not stored
    index_rows = rows // VECTOR
    b_cols = offs_n[None, :].to(tl.int64) * stride_bn
    groups_total = K // M_GROUP
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    first = tl.program_id(2) * GROUPS_PER_SPLIT
    end = tl.minimum(first + GROUPS_PER_SPLIT, groups_total)
    full = first + (end - first) // BLOCK_G * BLOCK_G
    for g0 in range(first, full, BLOCK_G):
        acc = _step(
            acc, values, units, b, rows, index_rows, b_cols, mask_bn, g0, end, K, stride_vm,
            stride_um, stride_bk, N_KEEP, M_GROUP, BITS, BLOCK_M, BLOCK_G, LOG_N, LOG_M, False,
            PERMUTE, ASM, BLOCK, PAIRS,
        )  # fmt: skip
    if full < end:
        acc = _step(
            acc, values, units, b, rows, index_rows, b_cols, mask_bn, full, end, K, stride_vm,
            stride_um, stride_bk, N_KEEP, M_GROUP, BITS, BLOCK_M, BLOCK_G, LOG_N, LOG_M, True,
            PERMUTE, ASM, BLOCK, PAIRS,
        )  # fmt: skip
    split_k.end_piece(
        acc, offs_m, offs_n, mask_m, mask_n, bias, out, partials, counters, N, SPLIT_STRIDE,
        stride_om, stride_on, HAS_BIAS, ACTIVATION, tl.float32, SPLITS, FUSED,
    )  # fmt: skip


def supports(n: int, m: int, block: int, dtype: torch.dtype, k: int) -> bool:
    """Element-wise and block-wise patterns in 16 bits, n and m powers of two (m <= 32: a
    group's offsets split into whole bytes or int32 words), K < 2^31."""
    powers = n & (n - 1) == 0 and m & (m - 1) == 0
    half = dtype in (torch.float16, torch.bfloat16)
    return half and powers and 1 <= n < m <= 32 and n % block == 0 and k < 2**31


def spmm_nm_unpack(
    *,
    values: torch.Tensor,
    words: torch.Tensor,
    bits: int,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    n: int,
    m: int,
    vector: int,
    activation: str,
    block_m: int,
    block_g: int,
    block_n: int,
    num_warps: int,
    num_stages: int,
    split: int = 1,
    fused: bool = True,
    block: int = 1,
    pairs: bool | None = None,
) -> torch.Tensor:
    """Launch over out (M, N) for B (K, N') (any strides, N' >= N columns: those past N are
    read, never stored; row-major with 16 | N' keeps B's loads wide), W of pattern n:m with
    `vector` rows sharing a choice and kept runs of `block` columns (`supports`). values (M, S)
    and words (`NMMatrix.packed_indices(bits)`) need unit stride along their last dim; block_m
    and block_n powers of two of at least 16 (tl.dot's smallest tile); block_g a power of two
    holding whole bytes of offsets, block_g * m at least 16. `split` > 1 cuts the groups into
    that many ranges (fewer where one would be empty), summed in plane order by the last of a
    tile's ranges to finish (`fused`) or by a second kernel. `pairs` (even blocks, values 4-byte
    aligned; by default where they allow it) builds block-wise tiles from int32 pairs of values."""
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    if min(block_m, block_n, block_g * m) < 16:
        raise ValueError(f"tiles must be at least 16 wide, got {block_m}, {block_g * m}, {block_n}")
    if b.shape[1] < cols:
        raise ValueError(f"b needs at least out's {cols} columns, got {b.shape[1]}")
    k = b.shape[0]
    if not supports(n, m, block, b.dtype, k):
        raise ValueError(f"the unpack kernel does not take {n}:{m} block {block} in {b.dtype}")
    # a group's offsets (n / block of them) read as the narrowest integer that holds them (a
    # byte for 2:8)
    group_bits = n // block * bits
    unit = min(32, max(8, group_bits))
    units = words.view({8: torch.uint8, 16: torch.int16, 32: torch.int32}[unit])
    # a step reads whole bytes of offsets, and at least two: a one-byte step (1:2 with 8
    # groups) compiled to wrong products on the H200 (Triton 3.6), right in the interpreter
    if unit == 8 and group_bits < 8 and ((block_g * group_bits) % 8 or block_g * group_bits < 16):
        raise ValueError(
            f"block_g must hold whole bytes of offsets, two at least, got {block_g} for {n}:{m}"
            f"{f' block {block}' if block > 1 else ''}"
        )
    steps_per_split, splits = split_k.ranges(cdiv(k // m, block_g), split)
    partials = split_k.workspace(out, splits, torch.float32)
    grid = (cdiv(rows, block_m), cdiv(cols, block_n), splits)
    pairs_aligned = values.stride(0) % 2 == 0 and values.data_ptr() % 4 == 0
    # (element-wise only: its selectors place one value an offset)
    permute = block == 1 and n <= 2 and m <= 8 and (n == 1 or pairs_aligned)
    if pairs is None:
        pairs = block % 2 == 0 and pairs_aligned
    if pairs and not (block % 2 == 0 and pairs_aligned):
        raise ValueError(
            f"pairs need an even block and values 4-byte aligned rows, got block {block}, "
            f"row stride {values.stride(0)}"
        )
    as_words = (permute and n == 2) or pairs  # values read as int32 pairs
    fused = fused and splits > 1
    counters = split_k.tile_counters(out.device, grid[0] * grid[1]) if fused else words
    _nm_unpack_kernel[grid](
        values.view(torch.int32) if as_words else values,
        units,
        b,
        bias if bias is not None else values,
        out,
        partials,
        counters,
        rows,
        cols,
        b.shape[1],
        k,
        steps_per_split * block_g,
        rows * cols,
        values.stride(0) // 2 if as_words else values.stride(0),
        words.stride(0) * (32 // unit),
        b.stride(0),
        b.stride(1),
        out.stride(0),
        out.stride(1),
        N_KEEP=n,
        M_GROUP=m,
        BITS=bits,
        VECTOR=vector,
        BLOCK=block,
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        BLOCK_M=block_m,
        BLOCK_G=block_g,
        BLOCK_N=block_n,
        SPLITS=splits,
        FUSED=fused,
        LOG_M=m.bit_length() - 1,
        PERMUTE=permute,
        PAIRS=pairs,
        ASM=os.environ.get("TRITON_INTERPRET") != "1",
        LOG_N=n.bit_length() - 1,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    if splits > 1 and not fused:
        split_k.sum_partials(partials, bias, out, activation)
    return out
