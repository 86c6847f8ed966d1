"""N:M SpMM at a few tokens on tensor cores: out = act(W @ B + bias), each step's groups unpacked
into one dense tile in registers for one tl.dot.

At 4-16 tokens the weight's bytes still set the floor (2:8 on 14336 x 4096: 37 MB, ~10 us),
but per-value work grows with the tokens on CUDA cores: the select kernel's picks and the
decode kernel's gathers cost a token's worth of instructions each. Tensor cores do the tokens
for free if the weight arrives as a dense tile: a step loads (BLOCK_M rows x BLOCK_G groups)
of compressed values and their bit-packed offsets (the only bytes of W that travel), writes
each value into its group's m positions by a compare-select per position (a group's kept
slots are distinct, so the max over a position's candidates, on the 16 bits, is exact), and
makes one tl.dot of the (BLOCK_M, BLOCK_G * m) tile with B's contiguous rows. The expand
kernel (spmm_nm_expand.py) made m dots of (rows, groups) tiles instead, one per position.

Element-wise patterns (block 1; rows may share their choice in vectors), 16-bit values, K a
multiple of m. Split-K (`split`) for weights with few rows, summed in a fixed order by
split_k.py: deterministic, no atomics.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import split_k
from ._activation import ACTIVATION_CODES
from ._sizes import cdiv


@triton.jit
def _offset_unit(words, index_rows, groups, mask, stride_wm, J: tl.constexpr,
                 N_KEEP: tl.constexpr, BITS: tl.constexpr):  # fmt: skip
    """(unit, shift): the narrowest unsigned integer (8, 16 or 32 bits) holding slot J's offset
    and the offset's place in it, (rows, groups). Where a group's offsets fit in one unit, J
    does not change the read (one read a group; neighbouring groups' reads are contiguous)."""
    UNIT: tl.constexpr = min(32, max(8, N_KEEP * BITS))
    if UNIT == 8:
        base = words.to(tl.pointer_type(tl.uint8))
    elif UNIT == 16:
        base = words.to(tl.pointer_type(tl.uint16))
    else:
        base = words
    if N_KEEP * BITS <= 32:
        bit = groups * (N_KEEP * BITS)
        shift = (bit % UNIT) + J * BITS
    else:
        bit = (groups * N_KEEP + J) * BITS
        shift = bit % UNIT
    row = base + index_rows[:, None] * (stride_wm * (32 // UNIT))
    unit = tl.load(row + (bit // UNIT)[None, :], mask=mask, other=0).to(tl.int32)
    return unit, shift[None, :]


@triton.jit
def _slot_values(values, rows, groups, mask, stride_vm, J: tl.constexpr, N_KEEP: tl.constexpr,
                 PAIRS: tl.constexpr):  # fmt: skip
    """Slot J's value of each group as its 16 bits (in an int32), (rows, groups). PAIRS: n even,
    read two slots as one int32 (contiguous across groups: vector loads)."""
    if PAIRS:
        base = values.to(tl.pointer_type(tl.int32)) + rows[:, None] * (stride_vm // 2)
        pair = tl.load(base + (groups * (N_KEEP // 2) + J // 2)[None, :], mask=mask, other=0)
        return (pair >> 16) & 0xFFFF if J % 2 else pair & 0xFFFF
    base = values + rows[:, None] * stride_vm
    val = tl.load(base + (groups * N_KEEP + J)[None, :], mask=mask, other=0.0)
    return val.to(tl.uint16, bitcast=True).to(tl.int32)


@triton.jit
def _position(vals, offs, P: tl.constexpr, N_KEEP: tl.constexpr):
    """Position P of each group: the value of the slot whose offset is P, else 0."""
    d = tl.where(offs[0] == P, vals[0], 0)
    for j in tl.static_range(1, N_KEEP):
        d = tl.where(offs[j] == P, vals[j], d)
    return d


@triton.jit
def _dense_tile(
    values, words, rows, index_rows, g0, groups_total, stride_vm, stride_wm,
    N_KEEP: tl.constexpr, M_GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr, PAIRS: tl.constexpr, LOG_M: tl.constexpr,
):  # fmt: skip
    """The (BLOCK_M, BLOCK_G * m) dense tile of groups g0 .. g0 + BLOCK_G of `rows`, 16 bits
    each: every position of a group is a compare-select over the group's slots, on (rows,
    groups) tiles, and the positions are joined in-thread (a thread holds whole groups)."""
    groups = tl.multiple_of(g0, BLOCK_G) + tl.arange(0, BLOCK_G)  # (g0: vector loads)
    mask = (groups < groups_total)[None, :]
    vals = ()
    offs = ()
    for j in tl.static_range(N_KEEP):
        vals = vals + (_slot_values(values, rows, groups, mask, stride_vm, j, N_KEEP, PAIRS),)
        if j == 0 or N_KEEP * BITS > 32:
            unit, shift = _offset_unit(words, index_rows, groups, mask, stride_wm, j, N_KEEP, BITS)
        else:
            shift = shift + BITS
        offs = offs + ((unit >> shift) & ((1 << BITS) - 1),)
    # the m positions, joined pairwise in-thread: the first joins pair p with p + m / 2 (the
    # slowest new dimension), the last pairs neighbours, so the trailing dimensions flatten to p
    tiles = ()
    for p in tl.static_range(M_GROUP):
        tiles = tiles + (_position(vals, offs, p, N_KEEP),)
    for level in tl.static_range(LOG_M):
        joined = ()
        for i in tl.static_range(M_GROUP >> (level + 1)):
            joined = joined + (tl.join(tiles[i], tiles[i + (M_GROUP >> (level + 1))]),)
        tiles = joined
    dense = tiles[0]
    return tl.reshape(dense, (BLOCK_M, BLOCK_G * M_GROUP)).to(tl.uint16)


@triton.jit
def _nm_unpack_kernel(
    values,  # (M, S) compressed 16-bit values, S = groups * n, unit stride along S
    words,  # (ceil(M / VECTOR), ceil(S / (32 // BITS))) int32 packed offsets, unit stride
    b,  # (K, N): strides stride_bk, stride_bn
    bias,
    out,  # (M, N), or with PARTIAL the (splits, M, N) float32 workspace
    M,
    N,
    K,
    GROUPS_PER_SPLIT,  # a multiple of BLOCK_G: program_id(2) takes its range of groups
    SPLIT_STRIDE,  # M * N
    stride_vm,
    stride_wm,
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    BITS: tl.constexpr,
    VECTOR: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr,  # groups a step: the dot is BLOCK_G * m deep
    BLOCK_N: tl.constexpr,
    PARTIAL: tl.constexpr,
    PAIRS: tl.constexpr,  # n even: values read two to an int32
    LOG_M: tl.constexpr,  # m a power of two
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows = tl.minimum(offs_m, M - 1).to(tl.int64)  # rows past M repeat the last, not stored
    index_rows = rows // VECTOR
    b_cols = offs_n[None, :].to(tl.int64) * stride_bn
    dtype = values.dtype.element_ty
    groups_total = K // M_GROUP
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    first = tl.program_id(2) * GROUPS_PER_SPLIT
    for g0 in range(first, tl.minimum(first + GROUPS_PER_SPLIT, groups_total), BLOCK_G):
        a = _dense_tile(
            values, words, rows, index_rows, g0, groups_total, stride_vm, stride_wm,
            N_KEEP, M_GROUP, BITS, BLOCK_M, BLOCK_G, PAIRS, LOG_M,
        )  # fmt: skip
        ks = tl.multiple_of(g0 * M_GROUP, BLOCK_G * M_GROUP) + tl.arange(0, BLOCK_G * M_GROUP)
        b_tile = tl.load(
            b + ks[:, None].to(tl.int64) * stride_bk + b_cols,
            mask=(ks < K)[:, None] & mask_n[None, :],
            other=0.0,
        )
        acc = tl.dot(a.to(dtype, bitcast=True), b_tile, acc)
    split_k.store(
        acc, offs_m, offs_n, mask_m, mask_n, bias, out, N, SPLIT_STRIDE, stride_om, stride_on,
        HAS_BIAS, ACTIVATION, tl.float32, PARTIAL, 2,
    )  # fmt: skip


def supports(n: int, m: int, block: int, dtype: torch.dtype, k: int) -> bool:
    """Element-wise patterns in 16 bits whose packed words hold whole slots of a step."""
    return block == 1 and dtype in (torch.float16, torch.bfloat16) and k < 2**31 and n < m


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
) -> torch.Tensor:
    """Launch over out (M, N) for B (K, N) (any strides). values (M, S) and words
    (`NMMatrix.packed_indices(bits)`) need unit stride along their last dim; block_m and
    block_n powers of two of at least 16 (tl.dot's smallest tile); block_g * n a multiple of
    the offsets a word holds and block_g * m at least 16. `split` > 1 cuts the groups into
    that many ranges (fewer where one would be empty), summed by a second kernel."""
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    if min(block_m, block_n, block_g * m) < 16:
        raise ValueError(f"tiles must be at least 16 wide, got {block_m}, {block_g * m}, {block_n}")
    if (block_g * n) % (32 // bits):
        raise ValueError(f"block_g * n must be a multiple of {32 // bits}, got {block_g * n}")
    k = b.shape[0]
    steps_per_split, splits = split_k.ranges(cdiv(k // m, block_g), split)
    partials = split_k.workspace(out, splits, torch.float32)
    grid = (cdiv(rows, block_m), cdiv(cols, block_n), splits)
    _nm_unpack_kernel[grid](
        values,
        words,
        b,
        bias if bias is not None else values,
        partials,
        rows,
        cols,
        k,
        steps_per_split * block_g,
        rows * cols,
        values.stride(0),
        words.stride(0),
        b.stride(0),
        b.stride(1),
        out.stride(0),
        out.stride(1),
        N_KEEP=n,
        M_GROUP=m,
        BITS=bits,
        VECTOR=vector,
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        BLOCK_M=block_m,
        BLOCK_G=block_g,
        BLOCK_N=block_n,
        PARTIAL=splits > 1,
        LOG_M=m.bit_length() - 1,
        PAIRS=n % 2 == 0 and values.stride(0) % 2 == 0 and values.data_ptr() % 4 == 0,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    if splits > 1:
        split_k.sum_partials(partials, bias, out, activation)
    return out
