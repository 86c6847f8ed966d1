"""N:M SpMM at a few tokens with the dense tile built straight in the tensor cores' registers:
out = act(W @ B + bias), on Hopper (sm_90), in Gluon.

The unpack kernel (spmm_nm_unpack.py) builds each step's dense tile in registers in its own
layout, and Triton stages it through shared memory for the MMA: 32 KB a 64 x 256 step, as
much as dense moves, so its time follows the dense weight's size. Here the tile is built in
the layout the wgmma instruction reads its A operand from registers (Gluon names layouts):
for each 16 columns of a row, lane t of a quad holds the bf16 pairs at columns 2t and 8 + 2t.
W's tile never touches shared memory; only B's few rows do (8 KB a step at 16 tokens).

Which columns of the tile a lane holds is the hardware's; which of W's groups they are is
ours. The step's K order is permuted so that a lane holds whole groups: lane t of a quad
holds groups t * GL .. t * GL + GL - 1 of the step (GL = groups / 4), contiguous in memory
(vector loads), and B's rows are permuted the same way in registers on their way to shared
memory (B is the few tokens: 8 KB a step, against W's 32 KB of dense tile).

Building a group (n <= 2 kept of m in {4, 8}; 16-bit values, a group's values one int32):
each pair of positions is one `prmt` of the group's values with zeros, steered by 16 bits of
a selector; a 32-bit selector covers four positions and is built from the offsets by two
clamped shifts (`shl` past 31 bits gives 0): 0x44 (a zero byte) per position, xor-ed with
0x54 or 0x76 (the slot's two bytes) at 8 * offset bits.

Element-wise patterns (block 1; rows may share their choice in vectors), 16-bit values, K a
multiple of m. Split-K (`split`) for weights with few rows, summed in plane order by the last
range of each tile to finish (split_k.store_last_sums): deterministic; an atomic counter only
orders the ranges. Gluon kernels compile only for the GPU (no interpreter): on the CPU the
unpack kernel takes the same products.

On the H200 (results/nvidia-h200/2026-12-01/at-4700dd4, cold, bf16, 16 tokens, 64 x 32
tiles, split 4): 2:8 22.3 us on 14336 x 4096 and 22.8 on 4096 x 14336, against the unpack
kernel's 30.3 and 29.7 (dense 31-33). That is still 2.5x its bytes' time, and its time follows
its instructions, not its bytes: Nsight Compute (at-58e3bf2) finds a third of the issue slots
used with 6.4 warps an SM; three programs an SM (split 3, at-f819c08) raised that only to 42%
(24.3 -> 22.7 us), the ALU pipe at 54%. Where the time goes (at-f819c08/wgmma_diagnostics.txt,
2:8 at 16 tokens on 14336 x 4096, 22.5 us): the offsets' decode ~7 us (constant selectors:
15.6), B's staging ~2 us, the rest (loads, byte permutes, wgmma) 13.7. The column tile is
the wgmma's N: 8-token tiles take 4-8 tokens 5-20% faster than 16 (the tensor cores' work
halves), and the route (nm_wgmma_tuning.py) splits K until one wave of programs is full.
Forms that measured no faster: B held in shared memory for the whole K range, W loaded two
steps ahead, a cp.async ring for W and B, L2 prefetches 1-6 steps ahead; the wgmma left
running while the next tile is built gave wrong products (ptxas reuses the operand's
registers before the wait; it protects only the accumulator) (benchmarks/NOTES.md).
"""

from __future__ import annotations

import functools
import os

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

from . import split_k
from ._activation import ACTIVATION_CODES
from ._gluon_bits import _along, _clamped_shl, _permute, wgmma_b_layouts
from ._sizes import cdiv

QUAD = gl.constexpr(4)  # lanes sharing a row of the MMA's A operand, each with its own columns


@gluon.jit
def _load_step(values, units, b, rows, index_rows, g0, end, K, offs_bn, mask_bn, stride_vm,
               stride_um, stride_bk, stride_bn, N_KEEP: gl.constexpr, M_GROUP: gl.constexpr,
               BITS: gl.constexpr, BLOCK_G: gl.constexpr, MASKED: gl.constexpr,
               WORDS: gl.constexpr, B_LOAD: gl.constexpr):  # fmt: skip
    """A step's loads, issued a step ahead of their use: the groups' values (rows, GL,
    QUAD), lane t's groups along GL (contiguous: vector loads); their offsets as the one or
    two int32 words (rows, 1, QUAD) a lane's groups fill (low, high); B's rows under the
    step (BLOCK_G * m, BLOCK_N). MASKED: the last step, groups from `end` on not there."""
    GL: gl.constexpr = BLOCK_G // QUAD
    group_layout: gl.constexpr = gl.SliceLayout(2, gl.SliceLayout(3, WORDS))
    groups = g0 + _along(QUAD, 2, 3, group_layout) * GL + _along(GL, 1, 3, group_layout)
    group_ptrs = values + gl.expand_dims(gl.expand_dims(rows * stride_vm, 1), 2) + groups
    group = gl.load(group_ptrs, mask=groups < end, other=0) if MASKED else gl.load(group_ptrs)
    PER_WORD: gl.constexpr = 32 // (N_KEEP * BITS)
    LANE_WORDS: gl.constexpr = GL // PER_WORD
    first = g0 // PER_WORD + _along(QUAD, 2, 3, group_layout) * LANE_WORDS  # the lane's first
    ptrs = units + gl.expand_dims(gl.expand_dims(index_rows * stride_um, 1), 2) + first
    low = gl.load(ptrs, mask=first * PER_WORD < end, other=0) if MASKED else gl.load(ptrs)
    high = low
    if LANE_WORDS == 2:
        if MASKED:
            high = gl.load(ptrs + 1, mask=(first + 1) * PER_WORD < end, other=0)
        else:
            high = gl.load(ptrs + 1)
    ks = g0 * M_GROUP + gl.arange(0, BLOCK_G * M_GROUP, layout=gl.SliceLayout(1, B_LOAD))
    b_ptrs = b + gl.expand_dims(ks.to(gl.int64) * stride_bk, 1) + gl.expand_dims(
        offs_bn.to(gl.int64) * stride_bn, 0
    )  # fmt: skip
    b_mask = gl.expand_dims(mask_bn, 0)
    if MASKED:
        b_mask = b_mask & gl.expand_dims(ks < K, 1)
    b_tile = gl.load(b_ptrs, mask=b_mask, other=0.0)
    return group, low, high, b_tile


@gluon.jit
def _operand(group, low, high, N_KEEP: gl.constexpr, M_GROUP: gl.constexpr,
             BITS: gl.constexpr, BLOCK_G: gl.constexpr, DTYPE: gl.constexpr,
             WORDS: gl.constexpr, A_LAYOUT: gl.constexpr):  # fmt: skip
    """The step's dense tile (BLOCK_M, BLOCK_G * m) in A_LAYOUT, columns in the permuted
    order (module docstring), from _load_step's values and offset words. WORDS lays out its
    int32 words (pairs of positions) as (rows, GL, HQ, PL, QUAD): a group's PL pairs of each
    HQ selector, QUAD the quad's lanes; in row-major order that is the operand's columns."""
    GL: gl.constexpr = BLOCK_G // QUAD
    group_layout: gl.constexpr = gl.SliceLayout(2, gl.SliceLayout(3, WORDS))
    if N_KEEP == 1:
        group = group.to(gl.uint16, bitcast=True).to(gl.int32)
    # each group's n * BITS bits of offsets (slot 0 lowest), shifted out of its lane's words
    # by its place there (known per register)
    GROUP_BITS: gl.constexpr = N_KEEP * BITS
    PER_WORD: gl.constexpr = 32 // GROUP_BITS
    place = _along(GL, 1, 3, group_layout)
    word = gl.where(place < PER_WORD, low, high)
    offsets = word >> ((place % PER_WORD) * GROUP_BITS)
    # selectors: (rows, GL, HQ, 1, QUAD), four positions each; HQ = m / 4
    HQ: gl.constexpr = M_GROUP // 4
    hq_shift = _along(HQ, 2, 4, gl.SliceLayout(3, WORDS)) * 32
    selector = gl.full([1, 1, 1, 1], 0x44444444, gl.int32, gl.SliceLayout(3, WORDS))
    for j in gl.static_range(N_KEEP):
        amount = ((offsets >> (j * BITS)) & ((1 << BITS) - 1)) * 8
        amount = gl.expand_dims(amount, 2) - hq_shift
        code = 0x54 if j == 0 else 0x76  # 0x44 ^ (bytes 0, 1) or 0x44 ^ (bytes 2, 3)
        selector = selector ^ _clamped_shl(gl.full(amount.shape, code, gl.int32,
                                                   amount.type.layout), amount)  # fmt: skip
    selector = gl.expand_dims(selector, 3)
    pl_shift = _along(2, 3, 5, WORDS) * 16
    words = _permute(gl.expand_dims(gl.expand_dims(group, 2), 3), selector >> pl_shift)
    BLOCK_M: gl.constexpr = words.shape[0]
    BLOCK_K: gl.constexpr = BLOCK_G * M_GROUP
    words = gl.reshape(words, [BLOCK_M, BLOCK_K // 2])
    low_half = (words & 0xFFFF).to(gl.int16)
    high_half = (words >> 16).to(gl.int16)
    tile = gl.reshape(gl.join(low_half, high_half), [BLOCK_M, BLOCK_K]).to(DTYPE, bitcast=True)
    return gl.convert_layout(tile, A_LAYOUT, assert_trivial=True)


@gluon.jit
def _mma_step(acc, loaded, b_shared, N_KEEP: gl.constexpr, M_GROUP: gl.constexpr,
              BITS: gl.constexpr, BLOCK_G: gl.constexpr, WORDS: gl.constexpr,
              A_LAYOUT: gl.constexpr):  # fmt: skip
    """acc + the step's dense tile @ B's rows under it. B's row ((t * GL + gl) * m + 2p + e)
    goes to shared memory as row ((gl * m / 2 + p) * QUAD + t) * 2 + e, the operand's order."""
    group, low, high, b_tile = loaded
    a = _operand(group, low, high, N_KEEP, M_GROUP, BITS, BLOCK_G, b_tile.dtype, WORDS, A_LAYOUT)
    BLOCK_N: gl.constexpr = b_tile.shape[1]
    b_tile = gl.reshape(b_tile, [QUAD, BLOCK_G // QUAD, M_GROUP // 2, 2, BLOCK_N])
    b_tile = gl.reshape(gl.permute(b_tile, (1, 2, 0, 3, 4)), [BLOCK_G * M_GROUP, BLOCK_N])
    b_shared.store(b_tile)
    fence_async_shared()
    return warpgroup_mma(a, b_shared, acc)


@gluon.jit
def _nm_wgmma_kernel(
    values,  # (M, S) compressed 16-bit values (int32 pairs for n = 2), unit stride along S
    units,  # (ceil(M / VECTOR), ...) the packed offsets as int32 words, unit stride
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
    N_KEEP: gl.constexpr,
    M_GROUP: gl.constexpr,
    BITS: gl.constexpr,
    VECTOR: gl.constexpr,
    HAS_BIAS: gl.constexpr,
    ACTIVATION: gl.constexpr,
    BLOCK_G: gl.constexpr,
    SPLITS: gl.constexpr,  # pieces of the K range, program_id(2)
    FUSED: gl.constexpr,  # the last piece of a tile sums the pieces (else a second kernel)
    WORDS: gl.constexpr,  # the layouts: layouts() below
    A_LAYOUT: gl.constexpr,
    ACC_LAYOUT: gl.constexpr,
    B_LOAD: gl.constexpr,
    B_SHARED: gl.constexpr,
):
    BLOCK_M: gl.constexpr = WORDS.shape[0]
    BLOCK_N: gl.constexpr = ACC_LAYOUT.instr_shape[1]
    BLOCK_K: gl.constexpr = BLOCK_G * M_GROUP
    group_layout: gl.constexpr = gl.SliceLayout(2, gl.SliceLayout(3, WORDS))  # (rows, GL, QUAD)
    row_layout: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, group_layout))
    offs_m = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, layout=row_layout)
    rows = gl.minimum(offs_m, M - 1).to(gl.int64)  # rows past M repeat the last, not stored
    index_rows = rows // VECTOR
    offs_bn = gl.program_id(1) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, B_LOAD))
    # (a row-major B of N % 16 != 0 columns, masked on N, loaded 2 bytes at a time: the loop
    # 286 -> 342 SASS instructions at 2:4, sm_90; 16 | B_COLS and B's row stride keep 16)
    mask_bn = offs_bn < B_COLS
    dtype: gl.constexpr = b.dtype.element_ty
    b_shared = gl.allocate_shared_memory(dtype, [BLOCK_K, BLOCK_N], B_SHARED)
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, ACC_LAYOUT)
    groups_total = K // M_GROUP
    first = gl.program_id(2) * GROUPS_PER_SPLIT
    end = gl.minimum(first + GROUPS_PER_SPLIT, groups_total)
    full = first + (end - first) // BLOCK_G * BLOCK_G
    if full > first:  # full steps, each one's loads issued during the step before
        loaded = _load_step(
            values, units, b, rows, index_rows, first, end, K, offs_bn, mask_bn, stride_vm,
            stride_um, stride_bk, stride_bn, N_KEEP, M_GROUP, BITS, BLOCK_G, False, WORDS,
            B_LOAD,
        )  # fmt: skip
        for g0 in range(first + BLOCK_G, full, BLOCK_G):
            ahead = _load_step(
                values, units, b, rows, index_rows, g0, end, K, offs_bn, mask_bn, stride_vm,
                stride_um, stride_bk, stride_bn, N_KEEP, M_GROUP, BITS, BLOCK_G, False, WORDS,
                B_LOAD,
            )  # fmt: skip
            acc = _mma_step(acc, loaded, b_shared, N_KEEP, M_GROUP, BITS, BLOCK_G, WORDS, A_LAYOUT)
            loaded = ahead
        acc = _mma_step(acc, loaded, b_shared, N_KEEP, M_GROUP, BITS, BLOCK_G, WORDS, A_LAYOUT)
    if full < end:
        loaded = _load_step(
            values, units, b, rows, index_rows, full, end, K, offs_bn, mask_bn, stride_vm,
            stride_um, stride_bk, stride_bn, N_KEEP, M_GROUP, BITS, BLOCK_G, True, WORDS,
            B_LOAD,
        )  # fmt: skip
        acc = _mma_step(acc, loaded, b_shared, N_KEEP, M_GROUP, BITS, BLOCK_G, WORDS, A_LAYOUT)
    offs_m = gl.program_id(0) * BLOCK_M + gl.arange(
        0, BLOCK_M, layout=gl.SliceLayout(1, ACC_LAYOUT)
    )
    offs_n = gl.program_id(1) * BLOCK_N + gl.arange(
        0, BLOCK_N, layout=gl.SliceLayout(0, ACC_LAYOUT)
    )
    split_k.end_piece(
        acc, offs_m, offs_n, offs_m < M, offs_n < N, bias, out, partials, counters, N,
        SPLIT_STRIDE, stride_om, stride_on, HAS_BIAS, ACTIVATION, gl.float32, SPLITS, FUSED,
    )  # fmt: skip


@functools.cache  # built once per tile: callers spread it (**), never change it
def layouts(block_m: int, block_g: int, block_n: int, m: int, k_contiguous: bool) -> dict:
    """The kernel's layouts for 4 warps (one warpgroup; block_m 64 or 128). WORDS: the int32
    words (pairs of positions) of a step as (rows, GL, HQ, PL, QUAD), owned as the wgmma A
    operand owns their columns: a quad's lane t holds QUAD axis t, lanes / 4 rows 0-7, a
    register row 8, warps rows 16 and 32, registers rows 64 on; the rest in registers, GL
    first (the lane's groups: contiguous for vector loads)."""
    gl_count = block_g // 4
    hq, pl = m // 4, 2

    def basis(dim: int, value: int) -> list[int]:
        vec = [0] * 5
        vec[dim] = value
        return vec

    reg = [basis(1, 1 << i) for i in range(gl_count.bit_length() - 1)]
    reg += [basis(3, 1)] + [basis(2, 1 << i) for i in range(hq.bit_length() - 1)]
    reg += [basis(0, 8)] + [basis(0, r) for r in (64, 128, 256) if r < block_m]
    lanes = [basis(4, 1), basis(4, 2), basis(0, 1), basis(0, 2), basis(0, 4)]
    warps = [basis(0, 16), basis(0, 32)]
    words = gl.DistributedLinearLayout(reg, lanes, warps, [], [block_m, gl_count, hq, pl, 4])
    b_operand = wgmma_b_layouts(block_g * m, block_n, k_contiguous)
    return {
        "WORDS": words,
        "A_LAYOUT": gl.DotOperandLayout(0, b_operand["ACC_LAYOUT"], 2),
        **b_operand,
    }


def supports(n: int, m: int, block: int, dtype: torch.dtype, k: int, device: torch.device) -> bool:
    """Element-wise n <= 2 of m in {4, 8}, 16-bit values, K < 2^31, on a Hopper GPU (wgmma;
    Gluon has no interpreter)."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    if torch.cuda.get_device_capability(device) != (9, 0):
        return False
    half = dtype in (torch.float16, torch.bfloat16)
    return block == 1 and half and n in (1, 2) and m in (4, 8) and k < 2**31


def spmm_nm_wgmma(
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
    split: int = 1,
    fused: bool = True,
    max_registers: int | None = None,
) -> torch.Tensor:
    """Launch over out (M, N) for B (K, N') (any strides, N' >= N columns: those past N are
    read, never stored; row-major with 16 | N' keeps B's loads wide). values (M, S) and words
    (int32, `NMMatrix.packed_indices(bits)`) need unit stride along their last dim. block_m 64
    or 128 (one warpgroup), block_n a multiple of 8 up to 256, block_g a multiple of 4 whose
    quarter holds 32 or 64 bits of offsets (2:8: 16 or 32 groups). `split` > 1 cuts the groups
    into that many ranges (fewer where one would be empty), summed by a second kernel.
    `max_registers` caps the registers a thread (more programs an SM, or spills)."""
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return out
    if block_m not in (64, 128) or block_n % 8 or not 8 <= block_n <= 256:
        raise ValueError(
            f"block_m must be 64 or 128 and block_n 8-256 by 8, got {block_m}, {block_n}"
        )
    lane_bits = block_g // 4 * n * bits
    if block_g % 4 or lane_bits not in (32, 64):
        raise ValueError(
            f"block_g must give each lane 32 or 64 bits of offsets, got {block_g} for {n}:{m}"
        )
    if n == 2 and (values.stride(0) % 2 or values.data_ptr() % 4):
        values = values.clone(memory_format=torch.contiguous_format)  # (read as int32 pairs)
    if b.shape[1] < cols:
        raise ValueError(f"b needs at least out's {cols} columns, got {b.shape[1]}")
    k = b.shape[0]
    steps_per_split, splits = split_k.ranges(cdiv(k // m, block_g), split)
    partials = split_k.workspace(out, splits, torch.float32)
    grid = (cdiv(rows, block_m), cdiv(cols, block_n), splits)
    fused = fused and splits > 1
    counters = split_k.tile_counters(out.device, grid[0] * grid[1]) if fused else words
    _nm_wgmma_kernel[grid](
        values.view(torch.int32) if n == 2 else values,
        words.view(torch.int32),
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
        values.stride(0) // 2 if n == 2 else values.stride(0),
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
        BLOCK_G=block_g,
        SPLITS=splits,
        FUSED=fused,
        num_warps=4,
        **({"maxnreg": max_registers} if max_registers else {}),
        **layouts(block_m, block_g, block_n, m, b.stride(0) == 1),
    )
    if splits > 1 and not fused:
        split_k.sum_partials(partials, bias, out, activation)
    return out
