"""The scatter kernel (spmm_csr_scatter.py) with wgmma reading the tiles from shared memory,
three tiles in a ring, in Gluon (sm_90). An experiment, not routed: no faster.

Nsight Compute on the mma.sync form (results/nvidia-h200/2026-12-02/at-35aed1b/ncu.txt, 90%
on 14336 x 4096 at 16 tokens): the L1/shared pipe 83% busy, short-scoreboard waits 43% of a
warp's cycles. Of a step's 256 shared wavefronts (a 64 x 64 tile, 4 warps) ldmatrix took
128: the weight's tile once, B's tile once for each warp. wgmma reads both from shared
memory itself, B once for the warpgroup, and without an instruction a warp waits on; that
leaves the zeros (64), the scatter and B's store (16). Measured (at-ac07a0e): within noise of
mma.sync at 8-32 tokens (16 tokens, 70%: 33.8-35.0 us on the large shapes against 32.5-37.1;
90%: 24.5-24.8 against 24.2-26.2); its 32 KB buffer also allows fewer programs an SM. So the
shared pipe's bytes are not what holds the step.

The ring lets the tensor cores run a step's product while the warps load and scatter the
next: step i scatters into tile i % 3, waits for step i - 1's wgmma, fences the shared
stores for the async proxy and meets the other warps at the step's one barrier, starts its
wgmma asynchronously, loads step i + 1's run and B, and zeroes tile (i + 2) % 3 (step
i - 1's, whose wgmma every warp has seen finish before the barrier); the scatter into that
tile comes two barriers later. The ring's turn is unrolled (static tile slices) and runs
whole: past a program's range a step's loads are masked off (an empty run, zero B) and its
product adds zero, and the launcher cuts K into ranges of whole turns (`turn_ranges`). With
an `if` around each step instead, Triton 3.6 dropped the run's start from the loop's carried
values (the TTGIR's scf.for lacked it): wrong past one turn (at-33c8671). The tiles are the
128-byte swizzle wgmma reads (NVMMA: row r's 16-byte chunk j at j ^ (r % 8)), the places
tiled_entries(swizzle=True) computes; the scatter adds the tile's offset in the kernel's one
buffer (the weight's three tiles, then B's), which the launcher checks sits at offset 0 of
the shared window.
"""

from __future__ import annotations

import functools

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from . import split_k
from ._gluon_bits import cta_barrier as _cta_barrier
from ._sizes import cdiv
from .spmm_csr_scatter_walks import store_entry

RING = gl.constexpr(3)  # the weight's tiles in flight: scattered, read by wgmma, zeroed
TILE_BYTES = gl.constexpr(64 * 64 * 2)


def b_slots(block_n: int) -> int:
    """64 x 64 slots of the buffer that hold B's RING tiles of (block_n, 64)."""
    return cdiv(RING.value * block_n, 64)


def buffer_bytes(block_n: int) -> int:
    """The kernel's one shared buffer: RING weight tiles, then B's."""
    return (RING.value + b_slots(block_n)) * TILE_BYTES.value


def turn_ranges(steps: int, split: int) -> tuple[int, int]:
    """split_k.ranges with each piece whole turns of the ring (the kernel runs a turn whole:
    a piece's last turn may pass its range, in empty steps), the last piece what is left."""
    per_piece, _ = split_k.ranges(steps, split)
    per_piece = cdiv(per_piece, RING.value) * RING.value
    return per_piece, max(1, cdiv(steps, per_piece))


@gluon.jit
def _scatter_shifted(run, shift):
    """The run's entries stored into the tile `shift` >> 16 bytes into the buffer (padding,
    -1, stays padding)."""
    store_entry(gl.where(run != -1, run + shift, run))


@gluon.jit
def _csr_scatter_wgmma_kernel(
    tile_offsets,  # (cdiv(M, 64) * K_TILES + 1,) int32: tiled_entries(), multiples of 4
    entries,  # (padded nnz,) int32: tiled_entries(swizzle=True)
    b,  # (K, N): strides stride_bk, stride_bn
    bias,
    out,  # (M, N)
    partials,  # with SPLITS > 1 the (SPLITS, M, N) float32 workspace
    counters,  # with FUSED an int32 a tile, zero (split_k.tile_counters)
    M,
    N,
    K,
    K_TILES,
    TILES_PER_SPLIT,  # program_id(2) takes its range of column steps
    SPLIT_STRIDE,  # M * N
    stride_bk,
    stride_bn,
    stride_om,
    stride_on,
    HAS_BIAS: gl.constexpr,
    ACTIVATION: gl.constexpr,
    SPLITS: gl.constexpr,
    FUSED: gl.constexpr,
    BLOCK_N: gl.constexpr,
    CHUNK: gl.constexpr,  # entries a program loads at once: 4, 8 or 16 a thread
    B_SLOTS: gl.constexpr,  # b_slots(BLOCK_N)
    DTYPE: gl.constexpr,
    SCATTER: gl.constexpr,  # layouts()
    ZEROS: gl.constexpr,
    ACC: gl.constexpr,
    SHARED: gl.constexpr,
):
    BM: gl.constexpr = 64
    BK: gl.constexpr = 64
    buffer = gl.allocate_shared_memory(DTYPE, [RING + B_SLOTS, BM, BK], SHARED)
    zeros = gl.zeros([BM, BK], DTYPE, ZEROS)
    for r in gl.static_range(RING - 1):  # the third is zeroed in the first step
        buffer.index(r).store(zeros)
    offs_bk = gl.arange(0, BK, layout=gl.SliceLayout(0, ZEROS))
    offs_bn = gl.program_id(1) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, ZEROS))
    b_offs = gl.expand_dims(offs_bn * stride_bn, 1) + gl.expand_dims(offs_bk * stride_bk, 0)
    mask_bn = gl.expand_dims(offs_bn < N, 1)
    lane = gl.arange(0, CHUNK, layout=SCATTER)
    acc = gl.zeros([BM, BLOCK_N], gl.float32, ACC)
    first = gl.program_id(2) * TILES_PER_SPLIT
    end = gl.minimum(first + TILES_PER_SPLIT, K_TILES)
    tiles = tile_offsets + gl.program_id(0) * K_TILES
    # the run and B's tile of each step are loaded during the step before (the mma.sync
    # kernel's walk): bounds of step kt [start, stop), `after` ends step kt + 1's run
    start = gl.multiple_of(gl.load(tiles + first), 4)
    stop = gl.multiple_of(gl.load(tiles + gl.minimum(first + 1, K_TILES)), 4)
    after = gl.multiple_of(gl.load(tiles + gl.minimum(first + 2, K_TILES)), 4)
    run = gl.load(entries + start + lane, mask=start + lane < stop, other=-1)
    b_step = b + first.to(gl.int64) * BK * stride_bk
    b_mask = mask_bn & gl.expand_dims(offs_bk < K - first * BK, 0)
    bt = gl.load(b_step + b_offs, mask=b_mask, other=0.0)
    _cta_barrier()  # the zeros before any warp's scatter
    # The ring's turns unrolled, so each step's tiles are static slices of the buffer. A turn
    # runs whole: steps past the range load nothing (masked: empty runs, zero B) and add zero
    # products (the launcher makes ranges whole turns but the last). Not `if kt < end`
    # around a step: Triton 3.6 then drops `start` from the loop's carried values.
    for k0 in range(first, end, RING):
        for r in gl.static_range(RING):
            kt = k0 + r
            _scatter_shifted(run, r * (TILE_BYTES << 16))
            rest_end = gl.where(kt < end, stop, start)  # past the range: no second chunk
            for e0 in range(start + CHUNK, rest_end, CHUNK):  # a run longer than a chunk
                at = e0 + lane
                _scatter_shifted(gl.load(entries + at, mask=at < stop, other=-1),
                             r * (TILE_BYTES << 16))  # fmt: skip
            b_tile = buffer.index(RING + r * BLOCK_N // BM).slice(r * BLOCK_N % BM, BLOCK_N)
            b_tile.store(bt)
            acc = warpgroup_mma_wait(0, deps=[acc])  # the step before's product is done
            fence_async_shared()  # the stores, for wgmma's reads (the async proxy)
            _cta_barrier()
            acc = warpgroup_mma(buffer.index(r), b_tile.permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=[acc])  # (in flight: joined at the next step)
            more = kt + 1 < end
            run = gl.load(entries + stop + lane, mask=(stop + lane < after) & more, other=-1)
            b_step += BK * stride_bk
            rows_left = gl.where(more, K - (kt + 1) * BK, 0)
            bt = gl.load(b_step + b_offs, mask=mask_bn & gl.expand_dims(offs_bk < rows_left, 0),
                         other=0.0)  # fmt: skip
            start = stop
            stop = after
            after = gl.multiple_of(gl.load(tiles + gl.minimum(kt + 3, K_TILES)), 4)
            buffer.index((r + RING - 1) % RING).store(zeros)  # the step before's tile
    acc = warpgroup_mma_wait(0, deps=[acc])
    offs_m = gl.program_id(0) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, ACC))
    offs_n = gl.program_id(1) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, ACC))
    split_k.end_piece(
        acc, offs_m, offs_n, offs_m < M, offs_n < N, bias, out, partials, counters, N,
        SPLIT_STRIDE, stride_om, stride_on, HAS_BIAS, ACTIVATION, gl.float32, SPLITS, FUSED,
    )  # fmt: skip


@functools.cache  # built once: callers spread it (**), never change it
def layouts(block_n: int) -> dict:
    """SCATTER a chunk of entries (4 consecutive a thread), ZEROS 16 bytes a thread, ACC the
    wgmma's accumulator (one warpgroup, 64 rows), SHARED the buffer's 128-byte swizzle."""
    return {
        "SCATTER": gl.BlockedLayout([4], [32], [4], [0]),
        "ZEROS": gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0]),
        "ACC": gl.NVMMADistributedLayout([3, 0], [4, 1], [16, block_n, 16]),
        "SHARED": gl.NVMMASharedLayout(128, 16, 2),
    }
