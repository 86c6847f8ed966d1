"""Element-wise N:M times one token, out = act(W @ x + bias), picking x by selection, not gathers.

The decode kernel (spmm_nm_decode.py) gathers x[col] from L1 for every stored value: a warp's 32
gathers touch up to 16 cache lines, and Nsight Compute saw its L1 71% busy at 2.0 TB/s of weight
where cuBLAS's GEMV reads 3.8 (at-02f1e78/ncu.txt). Here each step loads the x of its groups
whole and contiguous (16-byte vectors: one group of m = 8 in bf16), and each stored value takes
its x by a binary tree of selects on its offset's bits, in registers: log2(m) levels, m - 1
selects, no memory access. A tile's rows share each group's x vector; 16-bit values are read
two to an int32 and a group's offsets as one byte where they fit in one (narrow reads: without
them 2:8 on 4096 x 14336 took 40 us, with them 14.3). The route takes it at one token where
it measured faster than the decode kernel (nm_decode_tuning.SELECT_TILES: 2:8, 1:8, 2:4, 1:4
and 4:8 in bf16, some in fp16 and fp32): cold, on the H200, 2:8 18.5 -> 14.3 us on 4096 x
14336 (2.2x dense), 1:8 12.7 -> 12.2, 2:4 28.8 -> 23.6, 4:8 36.0 -> 25.7
(results/nvidia-h200/2026-12-01/). With m = 16 (fifteen selects a value) and 1:2 it lost.

Element-wise only (block 1, rows with their own choice), n and m powers of two with m <= 16
(at most 15 selects a value), any rows, columns and dtype; sums in float32 (float64 for
float64 weights). Optional split-K (`split`: ranges of each row's walk, the tile's last range
adding their planes in order, split_k.end_piece) for few-row weights, whose programs fill
under one wave (1:8 on 4096 x 14336: 1024 programs, 0.65 waves, latency-bound at 1.4 TB/s in
Nsight Compute, at-3d62f47); written without device time, not yet timed or routed.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import split_k
from ._activation import ACTIVATION_CODES
from ._pdl import launch_options, pdl_start
from ._sizes import cdiv


@triton.jit
def _pick(x, offs, LOG_M: tl.constexpr, PAIRS: tl.constexpr, BF16: tl.constexpr):
    """x[g, offs[g]] for candidates x (G, m) and offsets offs (G,) (their low LOG_M bits), by
    halving the candidates on each bit: m - 1 selects in registers. PAIRS: x holds 16-bit
    values two to an int32 (G, m / 2); the pair is picked first, then its half by bit 0,
    returned as float32 (BF16: a bfloat16 is the high half of a float32's bits) or as the
    16 bits."""
    c = x
    for level in tl.static_range(1 if PAIRS else 0, LOG_M):
        lo, hi = tl.split(tl.reshape(c, (c.shape[0], c.shape[1] // 2, 2)))
        c = tl.where((((offs >> level) & 1) != 0)[:, None], hi, lo)
    c = tl.reshape(c, (offs.shape[0],))
    if PAIRS:
        if BF16:
            c = tl.where((offs & 1) != 0, c & -65536, c << 16).to(tl.float32, bitcast=True)
        else:
            c = ((c >> ((offs & 1) * 16)) & 0xFFFF).to(tl.uint16)
    return c


@triton.jit
def _prmt(a, b, selector):
    """PTX prmt.b32 of (a, b): byte k of the result is byte (selector >> 4k) & 7 of {b, a}
    (selector bit 4k + 3 set: that byte's sign, replicated)."""
    return tl.inline_asm_elementwise(
        "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", [a, b, selector], dtype=tl.int32, is_pure=True,
        pack=1,
    )  # fmt: skip


@triton.jit
def _selectors(offs):
    """Byte k of the result: the permute selector (bytes 2h, 2h + 1: 0x10 + 0x22 h) of the
    offset in bits 4k .. 4k + 2 of `offs`, h its low two bits; one permute of the table
    0x76543210 (twice). Bit 4k + 3 of `offs` must be zero (else a sign is replicated)."""
    return tl.inline_asm_elementwise(
        "{ .reg .b32 t; mov.b32 t, 0x76543210; prmt.b32 $0, t, t, $1; }", "=r,r", [offs],
        dtype=tl.int32, is_pure=True, pack=1,
    )  # fmt: skip


@triton.jit
def _pick_permuted(x, selector, upper, BF16: tl.constexpr):
    """_pick for m = 8 and 16-bit x in int32 pairs (G, 4) by byte permutes: the offset's half
    of each word pair in one permute (`selector`'s byte 0, from `_selectors`), the pair by the
    offset's bit 2 (`upper`). On sm_90 the routed tiles' steps compile to 163 instructions
    against 186 by selects (2:8, 2 x 128), 306 against 356 (2:8, 4 x 256), 613 against 799
    (4:8), 293 against 345 (1:8, fp16); m = 4 gains nothing (one select level: 384 against 375
    on 2:4)."""
    # words 2i + j at (i, j): even words c0, c2, odd c1, c3
    even, odd = tl.split(tl.reshape(x, (x.shape[0], 2, 2)))
    c0, c2 = tl.split(even)
    c1, c3 = tl.split(odd)
    half = tl.where(upper, _prmt(c2, c3, selector), _prmt(c0, c1, selector))
    # one return: Triton wants the same type on every path (the half as float32 or 16 bits)
    return (half << 16).to(tl.float32, bitcast=True) if BF16 else (half & 0xFFFF).to(tl.uint16)


@triton.jit
def _half(pair, HIGH: tl.constexpr, dtype: tl.constexpr, BF16: tl.constexpr):
    """One of the two 16-bit values of an int32 as float32."""
    if BF16:
        bits = pair & -65536 if HIGH else pair << 16
        return bits.to(tl.float32, bitcast=True)
    half = ((pair >> 16) if HIGH else pair) & 0xFFFF
    return half.to(tl.uint16).to(dtype, bitcast=True).to(tl.float32)


@triton.jit
def _row_step(
    acc, row, values, words, xs, groups, mask, stride_vm, stride_wm, slot_stride,
    MASKED: tl.constexpr, N_KEEP: tl.constexpr, LOG_M: tl.constexpr, BITS: tl.constexpr,
    PAIRS: tl.constexpr, VALUE_PAIRS: tl.constexpr, OFFSET_BYTES: tl.constexpr,
    ACC_DTYPE: tl.constexpr, WIDE: tl.constexpr, PERMUTE: tl.constexpr,
):  # fmt: skip
    """One row's share of a step: its groups' values times the x they pick. VALUE_PAIRS: n even
    and 16-bit values, read two to an int32; OFFSET_BYTES: a group's offsets in one byte (n *
    BITS divides 8), read as that byte, not as the word (no shift by the slot's place);
    PERMUTE: picked by byte permutes (_pick_permuted)."""
    SPW: tl.constexpr = 32 // BITS  # slots a word
    BF16: tl.constexpr = values.dtype.element_ty == tl.bfloat16
    first = groups.to(tl.int32) * N_KEEP  # the group's first slot; a word holds whole groups
    # a group's offsets in adjacent 4-bit fields (m = 8: n <= 4 of them): one table permute
    # gives all its selectors, a byte each
    SHARED_SELECTORS: tl.constexpr = PERMUTE and BITS == 4
    if OFFSET_BYTES:
        bit = groups * (N_KEEP * BITS)
        row_bytes = words.to(tl.pointer_type(tl.uint8)) + row * stride_wm * 4
        if MASKED:
            word = tl.load(row_bytes + bit // 8, mask=mask, other=0)
        else:
            word = tl.load(row_bytes + bit // 8)
        word = word.to(tl.int32) >> (bit % 8)  # the group's offsets from bit 0
    elif MASKED:
        word = tl.load(words + row * stride_wm + first // SPW, mask=mask, other=0)
    else:
        word = tl.load(words + row * stride_wm + first // SPW)
    if SHARED_SELECTORS:  # the group's offsets from bit 0 (their fields' bit 3 is zero)
        base = word if OFFSET_BYTES else word >> ((first % SPW) * BITS)
        selectors = _selectors(base)
    # Values at a stride the compiler sees as non-unit, so it cannot vectorize their load into a
    # layout other than x's (1:8's contiguous values did, through shared memory): the runtime
    # slot_stride (n); with WIDE, n as a constant (pairs addressed in 16-bit units, then read as
    # int32), so a thread's groups fold into immediate offsets.
    if VALUE_PAIRS and WIDE:
        row_pairs = (values + row * stride_vm + groups * N_KEEP).to(tl.pointer_type(tl.int32))
    elif VALUE_PAIRS:
        row_pairs = values.to(tl.pointer_type(tl.int32)) + (row * stride_vm) // 2
        row_pairs += groups * (slot_stride // 2)
    elif WIDE:
        row_values = values + row * stride_vm + groups * N_KEEP
    else:
        row_values = values + row * stride_vm + groups * slot_stride
    for j in tl.static_range(N_KEEP):
        if VALUE_PAIRS:
            if j % 2 == 0:
                if MASKED:
                    pair = tl.load(row_pairs + j // 2, mask=mask, other=0)
                else:
                    pair = tl.load(row_pairs + j // 2)
            val = _half(pair, j % 2 == 1, values.dtype.element_ty, BF16)
        elif MASKED:
            val = tl.load(row_values + j, mask=mask, other=0.0)
        else:
            val = tl.load(row_values + j)
        place = j if OFFSET_BYTES else (first + j) % SPW  # the offset's place in `word`
        offs = word >> (place * BITS)
        if SHARED_SELECTORS:
            upper = (base & (4 << (4 * j))) != 0
            picked = _pick_permuted(xs, selectors >> (8 * j), upper, BF16)
        elif PERMUTE:  # bit 3 of a field of 2 or 3 bits is the next offset's: masked
            selector = _selectors(offs if BITS >= 4 else offs & 7)
            picked = _pick_permuted(xs, selector, (offs & 4) != 0, BF16)
        else:
            picked = _pick(xs, offs, LOG_M, PAIRS, BF16)
        if PAIRS and not BF16:
            picked = picked.to(values.dtype.element_ty, bitcast=True)
        acc += val.to(ACC_DTYPE) * picked.to(ACC_DTYPE)
    return acc


@triton.jit
def _tile_step(
    acc0, acc1, acc2, acc3, r0, r1, r2, r3, values, words, xv, g0, groups_total, stride_vm,
    stride_wm, slot_stride, MASKED: tl.constexpr, N_KEEP: tl.constexpr, LOG_M: tl.constexpr,
    BITS: tl.constexpr, PAIRS: tl.constexpr, VALUE_PAIRS: tl.constexpr,
    OFFSET_BYTES: tl.constexpr, ACC_DTYPE: tl.constexpr, WIDTH: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr, WIDE: tl.constexpr, PERMUTE: tl.constexpr,
):  # fmt: skip
    """A step of the tile's rows (BLOCK_M of r0..r3) over groups g0 .. g0 + BLOCK_G."""
    # WIDE: int64 from the start, so the offsets of a thread's groups differ by constants the
    # compiler folds into the loads (in int32 each sign-extends on its own): 2:8's step on
    # 2 x 128 groups compiled to 186 instructions instead of 237
    idx = tl.arange(0, BLOCK_G)
    groups = (idx.to(tl.int64) if WIDE else idx) + g0
    mask = groups < groups_total
    # a group's x is aligned and contiguous: one vector load (told: `groups` hides it)
    cols = tl.multiple_of(groups * WIDTH, WIDTH)[:, None] + tl.arange(0, WIDTH)[None, :]
    xs = tl.load(xv + cols, mask=mask[:, None], other=0) if MASKED else tl.load(xv + cols)
    acc0 = _row_step(
        acc0, r0, values, words, xs, groups, mask, stride_vm, stride_wm, slot_stride,
        MASKED, N_KEEP, LOG_M, BITS, PAIRS, VALUE_PAIRS, OFFSET_BYTES, ACC_DTYPE, WIDE, PERMUTE,
    )  # fmt: skip
    if BLOCK_M > 1:
        acc1 = _row_step(
            acc1, r1, values, words, xs, groups, mask, stride_vm, stride_wm, slot_stride,
            MASKED, N_KEEP, LOG_M, BITS, PAIRS, VALUE_PAIRS, OFFSET_BYTES, ACC_DTYPE, WIDE,
            PERMUTE,
        )  # fmt: skip
    if BLOCK_M > 2:
        acc2 = _row_step(
            acc2, r2, values, words, xs, groups, mask, stride_vm, stride_wm, slot_stride,
            MASKED, N_KEEP, LOG_M, BITS, PAIRS, VALUE_PAIRS, OFFSET_BYTES, ACC_DTYPE, WIDE,
            PERMUTE,
        )  # fmt: skip
        acc3 = _row_step(
            acc3, r3, values, words, xs, groups, mask, stride_vm, stride_wm, slot_stride,
            MASKED, N_KEEP, LOG_M, BITS, PAIRS, VALUE_PAIRS, OFFSET_BYTES, ACC_DTYPE, WIDE,
            PERMUTE,
        )  # fmt: skip
    return acc0, acc1, acc2, acc3


@triton.jit(do_not_specialize=["slot_stride"])
def _nm_select_kernel(
    values,  # (M, S) compressed values, unit stride along S
    words,  # (M, ceil(S / (32 // BITS))) int32 packed offsets, unit stride along the words
    x,  # (K,) contiguous; with PAIRS 4-byte aligned
    bias,
    out,  # (M, 1)
    partials,  # with SPLITS > 1 the (SPLITS, M, 1) workspace in ACC_DTYPE
    counters,  # with FUSED an int32 a row tile, zero (split_k.tile_counters)
    M,
    S,
    GROUPS_PER_SPLIT,  # a multiple of BLOCK_G: program_id(2) takes its range of groups
    stride_vm,
    stride_wm,
    stride_om,
    slot_stride,  # n, at run time (see _row_step)
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    LOG_M: tl.constexpr,
    BITS: tl.constexpr,
    PAIRS: tl.constexpr,  # 16-bit x read as int32 pairs (m even)
    VALUE_PAIRS: tl.constexpr,  # 16-bit values read as int32 pairs (n even)
    OFFSET_BYTES: tl.constexpr,  # a group's offsets read as one byte (n * BITS divides 8)
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr,  # 1, 2 or 4 rows, each its own accumulator
    BLOCK_G: tl.constexpr,  # groups of a row a step
    WIDE: tl.constexpr,  # int64 group indices (see _tile_step)
    PERMUTE: tl.constexpr,  # x picked by byte permutes (16-bit x pairs, m = 8)
    STAGES: tl.constexpr,  # the walk's software pipelining (1: none)
    SPLITS: tl.constexpr,  # ranges of a row's groups, one program each
    FUSED: tl.constexpr,  # (SPLITS > 1) the last range of a tile sums the planes
    PDL: tl.constexpr,  # programmatic dependent launch (_pdl.py): 0 or 1 (waits first)
):
    pdl_start(PDL)
    # Every tensor is (BLOCK_G,) or (BLOCK_G, m): a thread holds the same groups of every row of
    # the tile, so a group's x is one vector load shared by the rows, picked in registers. Rows
    # past M read row M - 1 and are not stored; only the walk's last step is masked.
    WIDTH: tl.constexpr = M_GROUP // 2 if PAIRS else M_GROUP  # x's elements a group
    pid = tl.program_id(0)
    row0 = pid * BLOCK_M
    r0 = tl.minimum(row0, M - 1).to(tl.int64)
    r1 = tl.minimum(row0 + 1, M - 1).to(tl.int64)
    r2 = tl.minimum(row0 + 2, M - 1).to(tl.int64)
    r3 = tl.minimum(row0 + 3, M - 1).to(tl.int64)
    xv = x.to(tl.pointer_type(tl.int32)) if PAIRS else x
    acc0 = tl.zeros((BLOCK_G,), dtype=ACC_DTYPE)
    acc1 = tl.zeros((BLOCK_G,), dtype=ACC_DTYPE)
    acc2 = tl.zeros((BLOCK_G,), dtype=ACC_DTYPE)
    acc3 = tl.zeros((BLOCK_G,), dtype=ACC_DTYPE)
    groups_total = tl.cdiv(S, N_KEEP)
    if SPLITS == 1:
        first = 0
        end = groups_total
        full = groups_total // BLOCK_G * BLOCK_G
    else:  # only the last range ends in a partial step
        first = tl.multiple_of(tl.program_id(2) * GROUPS_PER_SPLIT, BLOCK_G)
        end = tl.minimum(first + GROUPS_PER_SPLIT, groups_total)
        full = first + (end - first) // BLOCK_G * BLOCK_G
    for g0 in tl.range(first, full, BLOCK_G, num_stages=STAGES):
        acc0, acc1, acc2, acc3 = _tile_step(
            acc0, acc1, acc2, acc3, r0, r1, r2, r3, values, words, xv, g0, groups_total,
            stride_vm, stride_wm, slot_stride, False, N_KEEP, LOG_M, BITS, PAIRS, VALUE_PAIRS,
            OFFSET_BYTES, ACC_DTYPE, WIDTH, BLOCK_M, BLOCK_G, WIDE, PERMUTE,
        )  # fmt: skip
    if full < end:
        acc0, acc1, acc2, acc3 = _tile_step(
            acc0, acc1, acc2, acc3, r0, r1, r2, r3, values, words, xv, full, groups_total,
            stride_vm, stride_wm, slot_stride, True, N_KEEP, LOG_M, BITS, PAIRS, VALUE_PAIRS,
            OFFSET_BYTES, ACC_DTYPE, WIDTH, BLOCK_M, BLOCK_G, WIDE, PERMUTE,
        )  # fmt: skip
    offs_m = row0 + tl.arange(0, BLOCK_M)
    lane = tl.arange(0, BLOCK_M)
    total = tl.where(lane == 0, tl.sum(acc0), 0.0)
    if BLOCK_M > 1:
        total = tl.where(lane == 1, tl.sum(acc1), total)
    if BLOCK_M > 2:
        total = tl.where(lane == 2, tl.sum(acc2), total)
        total = tl.where(lane == 3, tl.sum(acc3), total)
    offs_n = tl.arange(0, 1)
    if SPLITS == 1:
        split_k.store(
            total[:, None], offs_m, offs_n, offs_m < M, offs_n < 1, bias, out, 1, 0, stride_om,
            1, HAS_BIAS, ACTIVATION, ACC_DTYPE, False, 1,
        )  # fmt: skip
    else:
        split_k.end_piece(
            total[:, None], offs_m, offs_n, offs_m < M, offs_n < 1, bias, out, partials,
            counters, 1, M, stride_om, 1, HAS_BIAS, ACTIVATION, ACC_DTYPE, SPLITS, FUSED,
        )  # fmt: skip


def supports(n: int, m: int, block: int, vector: int, cols: int) -> bool:
    """One token, element-wise rows with their own choice, n and m powers of two, m <= 16."""
    powers = n & (n - 1) == 0 and m & (m - 1) == 0
    return cols == 1 and block == 1 and vector == 1 and powers and 2 <= m <= 16 and n < m


def spmm_nm_select(
    *,
    values: torch.Tensor,
    words: torch.Tensor,
    bits: int,
    x: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    n: int,
    m: int,
    activation: str,
    block_m: int,
    block_g: int,
    num_warps: int,
    narrow_reads: bool = True,
    wide_index: bool | None = None,
    stages: int = 1,
    split: int = 1,
    fused: bool = True,
    permute: bool = False,
    pdl: int = 0,
) -> torch.Tensor:
    """Launch over out (M, 1) for x (K, 1) (any strides); values (M, S) and words
    (`NMMatrix.packed_indices(bits)`, bits from spmm_nm_decode.packed_bits) with unit stride along
    their last dim. The caller checks `supports`. `wide_index` (int64 group indices; default
    where they measured faster) and `stages` (Triton's pipelining of the walk): for sweeps.
    `split` cuts each row's walk into that many ranges of whole steps (fewer where one would be
    empty), one program each, for few-row weights that leave the GPU half idle; the last range
    of a tile adds them in order (fused), or a second kernel does. `permute`: x picked by byte
    permutes where x is 16-bit and m is 8 (compiled only: the interpreter has no PTX).
    `pdl`: programmatic dependent launch (kernels/_pdl.py; Hopper; 2 acts as 1: the walk's loads
    are not split out)."""
    pdl = 1 if pdl == 2 else pdl
    if block_m not in (1, 2, 4):
        raise ValueError(f"block_m must be 1, 2 or 4 (one accumulator a row), got {block_m}")
    rows = out.shape[0]
    if rows == 0:
        return out
    x = x.reshape(-1)
    pairs = x.element_size() == 2 and m % 2 == 0
    if not x.is_contiguous() or (pairs and x.data_ptr() % 4):
        x = x.clone(memory_format=torch.contiguous_format)
    value_pairs = (
        narrow_reads
        and values.element_size() == 2
        and n % 2 == 0
        and values.stride(0) % 2 == 0
        and values.data_ptr() % 4 == 0
    )
    offset_bytes = narrow_reads and 8 % (n * bits) == 0
    # int64 group indices measured faster with a byte of offsets a group and 16-bit values only
    # (2:8: 13.5 -> 12.8 us on 14336 x 4096); 2:4 (two groups a byte) ran 26.5 -> 56.3 with them
    # (results/nvidia-h200/2026-12-01/at-b1194df/nm_select_idx.txt)
    wide_bytes = offset_bytes and n * bits == 8 and values.element_size() == 2
    accumulator = torch.float64 if values.dtype == torch.float64 else torch.float32
    steps_per_split, splits = split_k.ranges(cdiv(cdiv(values.shape[1], n), block_g), split)
    partials = split_k.workspace(out, splits, accumulator)
    tiles = cdiv(rows, block_m)
    fused = fused and splits > 1
    counters = split_k.tile_counters(out.device, tiles) if fused else words
    _nm_select_kernel[(tiles, 1, splits)](
        values,
        words,
        x,
        bias if bias is not None else values,
        out,
        partials,
        counters,
        rows,
        values.shape[1],
        steps_per_split * block_g,
        values.stride(0),
        words.stride(0),
        out.stride(0),
        n,
        N_KEEP=n,
        M_GROUP=m,
        LOG_M=m.bit_length() - 1,
        BITS=bits,
        PAIRS=pairs,
        VALUE_PAIRS=value_pairs,
        OFFSET_BYTES=offset_bytes,
        HAS_BIAS=bias is not None,
        ACTIVATION=ACTIVATION_CODES[activation],
        ACC_DTYPE=tl.float64 if values.dtype == torch.float64 else tl.float32,
        BLOCK_M=block_m,
        BLOCK_G=block_g,
        WIDE=wide_bytes if wide_index is None else wide_index,
        PERMUTE=permute and pairs and m == 8,
        STAGES=stages,
        SPLITS=splits,
        FUSED=fused,
        PDL=pdl,
        num_warps=num_warps,
        **launch_options(pdl),
    )
    if splits > 1 and not fused:
        split_k.sum_partials(partials, bias, out, activation)
    return out
