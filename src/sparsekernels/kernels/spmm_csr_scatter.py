"""CSR @ B on the tensor cores, each K step's stored entries scattered into a zeroed tile in
shared memory (Flash-LLM's "load as sparse, compute as dense"), in Gluon: the CSR route at
8-64 tokens in half precision (ops/_csr_scatter.py). The CSR bitmap kernels (restore
d945ce3..5d969b6) spent 13-16 instructions on every element of the dense tile; here a stored
entry costs a 2-byte shared store and a few integer operations, and the tile's zeros one
16-byte store a thread per 8 elements.

Neither Triton nor Gluon has a shared-memory scatter, so the store is PTX through
`inline_asm_elementwise`, at an offset in the kernel's dynamic shared window (`global_smem`,
the symbol Triton's PTX declares): the tile must sit at offset 0 of it. It is the first half of
the kernel's one 16 KB buffer (B's tile the second); the launcher checks that the compiled
kernel's shared memory is that buffer and no more, so nothing else can lie below it (the
epilogue's scratch reuses the space after the loop), and refuses the kernel otherwise. Barriers
order the zeros, the scatter and the tensor cores' reads (ldmatrix through Gluon's shared
load).

A program takes BM rows (64, or 128 as an experiment: B's tile then serves twice the rows, on 8
warps or on 4 with two m16 tiles a warp), BLOCK_N tokens and a range of column steps (BK: 64,
or 128 as an experiment: half the steps' fixed work an entry, a 32 KB buffer). The weight comes
as `tiled_entries`, built once per weight from CSR: each (BM, BK) tile's entries together, each
one int32 (its place in the shared tile, 2 bytes, above its value's 16 bits), a tile's run
padded to a multiple of 4 entries (a 16-byte load a thread takes 4) and placed for the shared
banks (kernels/csr_scatter_banks.py: dealt in bank order, 1.8 words a bank a store where
row-and-column order wrote 3.2, was 5-10% faster at 70%, at-5bed061; store by store, each
taking a word from the banks with most words left, 1.03 at 70%: untimed). Each step: zero the
tile and store B's (BLOCK_N, BK) tile (16-byte loads), scatter the tile's entries (padding
entries' place is 0xFFFF: not stored), load the next step's run (up to a chunk) and B's tile,
then ldmatrix both and mma.sync (Gluon's mma_v2). Split-K as the other tensor-core kernels
(split_k.end_piece).

What holds it (Nsight Compute, at-35aed1b: 90% on 14336 x 4096 at 16 tokens, 26 us where its
bytes need 7): the L1/shared pipe 83% busy, short-scoreboard waits 43% of a warp's cycles, 256
shared wavefronts a step (zeros 64, ldmatrix 128 of which B's tile read by every warp 64,
scatter 47). Measured and no faster: 128-column steps, 128-row tiles sharing B (at-34d7d26),
wgmma reading both tiles from shared memory in a ring of three (at-ac07a0e; dropped after
1a0b96b, where spmm_csr_scatter_wgmma.py holds it), runs loaded to the range's end and cut at
the scatter (at-4ba51d1, dropped after), and every step's loads two steps ahead
(`steps_ahead=2`, in pairs so that no register copy waits on a load, at-211b1ee). So a
program's chain of loads is not what holds it: with 8 programs an SM their steps overlap. The
L1 pipe is: at 90% a 64 x 64 tile's zeros and its ldmatrix move 16 KB of shared memory for ~410
entries (40 bytes an entry against 4 from DRAM, a wider ratio than the H200's ~7x of shared to
DRAM bandwidth); at 70%, with the scatter, ~315 wavefronts a step, 17 us on 14336 x 4096 at one
wavefront a cycle, plus ~5 us of a program's fixed latency (the offsets, the first run, the
split's sum): 1.4x dense at best.

The tile's shared layout is swizzled like Triton's SwizzledSharedLayout(8, 1, 8): row r's
16-byte chunk j lies at chunk j ^ (r % 8), so ldmatrix reads no bank twice (wgmma's 128-byte
swizzle is the same); swizzle=False lays the rows plainly. The places are computed when the
entries are built, so the kernel and `tiled_entries` must agree on it.
"""

from __future__ import annotations

import functools

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from . import split_k
from ._activation import ACTIVATION_CODES
from ._gluon_bits import check_buffer_alone
from ._sizes import cdiv
from .csr_scatter_banks import BANK_ORDERS, placed_runs
from .spmm_csr_scatter_walks import one_ahead, two_ahead

BLOCK_M = 64  # rows a program by default; 128 (8 warps) shares B's tile (an experiment)
BLOCK_MS = (64, 128)
BLOCK_K = 64  # columns a step by default; 128 halves the steps (an experiment)
BLOCK_KS = (64, 128)
WARPS = 4  # at BLOCK_M rows: a warp's mma rows are 16


@gluon.jit
def _csr_scatter_kernel(
    tile_offsets,  # (cdiv(M, BM) * K_TILES + 1,) int32: tiled_entries(), multiples of 4
    entries,  # (padded nnz,) int32: tiled_entries()
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
    BM: gl.constexpr,  # rows a program: 64, or 128 with 8 warps (tiled_entries' block_m)
    BK: gl.constexpr,  # columns a step: 64 or 128 (tiled_entries' block_k)
    CHUNK: gl.constexpr,  # entries a program loads at once: 4, 8 or 16 a thread
    AHEAD: gl.constexpr,  # steps whose run and B are loaded ahead: 1, or 2 (an experiment)
    UNSCATTER: gl.constexpr,  # (AHEAD 1) zeros only where the step before stored (walks)
    DTYPE: gl.constexpr,  # the values' type
    SCATTER: gl.constexpr,  # layouts()
    ZEROS: gl.constexpr,
    MMA: gl.constexpr,
    A_SHARED: gl.constexpr,
):
    # one buffer, the kernel's only shared memory: the weight's tile at offset 0 (the
    # scatter's places), then B's (BLOCK_N, BK) tile k-contiguous (ldmatrix for mma's B)
    buffer = gl.allocate_shared_memory(DTYPE, [2, BM, BK], A_SHARED)
    tile = buffer.index(0)
    b_tile = buffer.index(1).slice(0, BLOCK_N)
    zeros = gl.zeros([BM, BK], DTYPE, ZEROS)
    a_layout: gl.constexpr = gl.DotOperandLayout(0, MMA, 2)
    b_layout: gl.constexpr = gl.DotOperandLayout(1, MMA, 2)
    # B's tile as (BLOCK_N, BK) rows k-contiguous, 16 bytes a thread where B^T is row-major
    # (linear's x), int32 offsets from its step's first row (the launcher checks B's span)
    offs_bk = gl.arange(0, BK, layout=gl.SliceLayout(0, ZEROS))
    offs_bn = gl.program_id(1) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, ZEROS))
    b_offs = gl.expand_dims(offs_bn * stride_bn, 1) + gl.expand_dims(offs_bk * stride_bk, 0)
    mask_bn = gl.expand_dims(offs_bn < N, 1)
    lane = gl.arange(0, CHUNK, layout=SCATTER)
    acc = gl.zeros([BM, BLOCK_N], gl.float32, MMA)
    first = gl.program_id(2) * TILES_PER_SPLIT
    end = gl.minimum(first + TILES_PER_SPLIT, K_TILES)
    tiles = tile_offsets + gl.program_id(0) * K_TILES
    # AHEAD steps' runs and B's tiles in flight (two: an experiment, no faster)
    if AHEAD == 1:
        acc = one_ahead(tile, b_tile, zeros, acc, tiles, entries, b, b_offs, mask_bn, offs_bk,
                        lane, first, end, K, K_TILES, stride_bk, BK, CHUNK, a_layout,
                        b_layout, UNSCATTER)  # fmt: skip
    else:
        acc = two_ahead(tile, b_tile, zeros, acc, tiles, entries, b, b_offs, mask_bn, offs_bk,
                        lane, first, end, K, K_TILES, stride_bk, BK, CHUNK, a_layout,
                        b_layout)  # fmt: skip
    offs_m = gl.program_id(0) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, MMA))
    offs_n = gl.program_id(1) * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, MMA))
    split_k.end_piece(
        acc, offs_m, offs_n, offs_m < M, offs_n < N, bias, out, partials, counters, N,
        SPLIT_STRIDE, stride_om, stride_on, HAS_BIAS, ACTIVATION, gl.float32, SPLITS, FUSED,
    )  # fmt: skip


@functools.cache  # built once: callers spread it (**), never change it
def layouts(swizzle: bool, warps: int = WARPS) -> dict:
    """The kernel's layouts for `warps` warps (a tile's rows / 16): SCATTER a chunk of entries,
    4 consecutive a thread (one 16-byte load), ZEROS 16 bytes a thread, MMA a warp's 16 rows,
    A_SHARED the tile (swizzled or plain)."""
    return {
        "SCATTER": gl.BlockedLayout([4], [32], [warps], [0]),
        "ZEROS": gl.BlockedLayout([1, 8], [4, 8], [warps, 1], [1, 0]),
        "MMA": gl.NVMMADistributedLayout(
            version=[2, 0], warps_per_cta=[warps, 1], instr_shape=[16, 8]
        ),  # fmt: skip
        "A_SHARED": gl.SwizzledSharedLayout(8, 1, 8, [1, 0])
        if swizzle
        else gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
    }


def tiled_entries(
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    values: torch.Tensor,
    k: int,
    swizzle: bool = True,
    block_k: int = BLOCK_K,
    block_m: int = BLOCK_M,
    banks: str = "greedy",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(tile_offsets, entries) of a CSR weight (M, k) of 16-bit values: each (64, 64) tile's
    entries together, row tiles outer, column steps inner, each an int32 whose high 16 bits
    are the entry's byte place in the kernel's shared tile (swizzled or plain) and whose low
    16 bits are its value's; each tile's run padded with -1 (place 0xFFFF: skipped) to a
    multiple of 4. tile_offsets (row tiles * column steps + 1,) int32 marks the runs. Within a
    run the entries are placed for the scatter's banks (kernels/csr_scatter_banks.py: `banks`
    "greedy", or "spread"), or by row and column ("plain")."""
    if values.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"values must be fp16 or bf16, got {values.dtype}")
    if banks not in BANK_ORDERS:  # (before any work)
        raise ValueError(f"banks must be one of {BANK_ORDERS}, got {banks!r}")
    rows = row_offsets.numel() - 1
    if block_k not in BLOCK_KS:
        raise ValueError(f"block_k must be one of {BLOCK_KS}, got {block_k}")
    if block_m not in BLOCK_MS:
        raise ValueError(f"block_m must be one of {BLOCK_MS}, got {block_m}")
    row_tiles, k_tiles = cdiv(rows, block_m), cdiv(k, block_k)
    nnz = column_indices.numel()
    if row_tiles * k_tiles >= 2**31:
        raise ValueError(f"the weight must have under 2^31 tiles of 64 x 64, got {(rows, k)}")
    device, i32 = values.device, torch.int32
    # int32 but the sort's order and the index tensors (long, as the earlier build on the GPU)
    entry_rows = torch.repeat_interleave(
        torch.arange(rows, device=device, dtype=i32), row_offsets.diff().long(), output_size=nnz
    )
    cols = column_indices.to(i32)
    tile_of = entry_rows // block_m * k_tiles + cols // block_k
    r, c = entry_rows % block_m, cols % block_k
    del entry_rows, cols
    if swizzle:  # 16-byte chunk j of row r at chunk j ^ (r % 8)
        place = r * (block_k * 2) + (((c >> 3) ^ (r % 8)) << 4) + ((c & 7) << 1)
    else:
        place = r * (block_k * 2) + c * 2
    del r, c
    # places are under 32768 (2^15): shifted by 16 they stay positive int32
    packed = (place << 16) | (values.reshape(-1).view(torch.int16).to(i32) & 0xFFFF)
    counts = torch.bincount(tile_of, minlength=row_tiles * k_tiles)
    padded = (counts + 3) // 4 * 4
    offsets = torch.zeros(row_tiles * k_tiles + 1, dtype=torch.long, device=device)
    offsets[1:] = padded.cumsum(0)
    total = int(offsets[-1])
    if total >= 2**31:
        raise ValueError(f"the weight must hold under 2^31 entries, got {nnz}")
    entries = placed_runs(tile_of, place, packed, counts, offsets, banks)
    return offsets.to(i32), entries


def b_step_fits(b: torch.Tensor, block_n: int, block_k: int = BLOCK_K) -> bool:
    """Whether a step's (block_k, N) rows of B span under 2^31 elements (int32 offsets)."""
    return (block_k - 1) * b.stride(0) + (b.shape[1] + block_n) * b.stride(1) < 2**31


def buffer_bytes(block_k: int = BLOCK_K, block_m: int = BLOCK_M) -> int:
    """The kernel's one shared buffer: the weight's (block_m, block_k) tile, then B's."""
    return 2 * block_m * block_k * 2


def buffer_alone(shared_bytes: int, block_k: int = BLOCK_K, block_m: int = BLOCK_M) -> bool:
    """Whether a compiled kernel's shared memory is its buffer alone (then the weight's tile,
    the scatter's target, sits at offset 0 of the shared window)."""
    return shared_bytes == buffer_bytes(block_k, block_m)


def spmm_csr_scatter(
    *,
    tile_offsets: torch.Tensor,
    entries: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    activation: str,
    block_n: int = 16,
    split: int = 1,
    fused: bool = True,
    swizzle: bool = True,
    entries_per_thread: int | None = None,
    block_k: int = BLOCK_K,
    steps_ahead: int = 1,
    block_m: int = BLOCK_M,
    warps: int | None = None,
    unscatter: bool = False,
) -> torch.Tensor:
    """Launch over out (M, N) = act(A @ B + bias) for a weight A (M, K) given as `tiled_entries`
    (built with the same `swizzle`) and B (K, N) in any strides, of the values' 16-bit dtype
    (B's). block_n 8, 16, 32 or 64 (B's tile shares the buffer); `split` > 1 cuts the column
    steps into that many ranges (split_k). `entries_per_thread` (4, 8 or 16) sets how much of a
    step's run is loaded a step ahead, the rest of a longer run in its step; by default what a
    mean tile's run needs, at most 8 at 64 tokens a tile (registers). `block_k` (64 or 128:
    columns a step) must be the one the entries were built with. `steps_ahead` 2 walks the
    steps in pairs, each step's run (to the range's end, cut when scattered) and B loaded two
    steps ahead (an experiment, no faster: 64 registers at 16 tokens, not 48).
    `warps`: block_m / 16 (a warp's 16 rows), or 4 at block_m 128 (an experiment: a warp's
    two m16 tiles share its read of B's tile, half the ldmatrix of B an entry). `unscatter`
    (one step ahead) zeros the tile once and then, after each step, only the places its run
    wrote instead of the whole tile (won ~8% at 90%, lost at 70%, H100; routed to
    csr_scatter_tuning.CSR_SCATTER_UNSCATTER_MAX_DENSITY)."""
    rows, cols = out.shape
    k = b.shape[0]
    if block_k not in BLOCK_KS:
        raise ValueError(f"block_k must be one of {BLOCK_KS}, got {block_k}")
    if steps_ahead not in (1, 2):
        raise ValueError(f"steps_ahead must be 1 or 2, got {steps_ahead}")
    if unscatter and steps_ahead != 1:
        raise ValueError("unscatter walks one step ahead: steps_ahead must be 1")
    if block_m not in BLOCK_MS:
        raise ValueError(f"block_m must be one of {BLOCK_MS}, got {block_m}")
    if warps is None:
        warps = block_m // 16
    if warps not in (4, block_m // 16):
        raise ValueError(f"warps must be 4 or block_m / 16 ({block_m // 16}), got {warps}")
    row_tiles, k_tiles = cdiv(rows, block_m), cdiv(k, block_k)
    if tile_offsets.shape != (row_tiles * k_tiles + 1,) or tile_offsets.dtype != torch.int32:
        raise ValueError(
            f"tile_offsets must be tiled_entries()'s for a ({rows}, {k}) weight: "
            f"({row_tiles * k_tiles + 1},) int32, got {tuple(tile_offsets.shape)} "
            f"{tile_offsets.dtype}"
        )
    if entries.dtype != torch.int32 or entries.dim() != 1:
        raise ValueError(f"entries must be tiled_entries()'s int32 vector, got {entries.dtype}")
    if block_n not in (8, 16, 32, 64):
        raise ValueError(f"block_n must be 8, 16, 32 or 64, got {block_n}")
    if not b_step_fits(b, block_n, block_k):
        raise ValueError(f"b's step of {block_k} rows must span under 2^31 elements, got strides "
                         f"{tuple(b.stride())}")  # fmt: skip
    if entries_per_thread is None:
        mean_run = entries.numel() / max(1, row_tiles * k_tiles)
        groups = cdiv(int(mean_run), 4 * 32 * warps)  # 16-byte loads a thread
        entries_per_thread = 4 if groups <= 1 else 8 if groups == 2 or block_n == 64 else 16
    if entries_per_thread not in (4, 8, 16):
        raise ValueError(f"entries_per_thread must be 4, 8 or 16, got {entries_per_thread}")
    if b.dtype not in (torch.float16, torch.bfloat16) or out.dtype != b.dtype:
        raise TypeError(f"b and out must share a 16-bit dtype, got {b.dtype}, {out.dtype}")
    if rows == 0 or cols == 0:
        return out
    steps_per_split, splits = split_k.ranges(k_tiles, split)
    partials = split_k.workspace(out, splits, torch.float32)
    grid = (row_tiles, cdiv(cols, block_n), splits)
    fused = fused and splits > 1
    counters = split_k.tile_counters(out.device, grid[0] * grid[1]) if fused else tile_offsets
    args = (
        tile_offsets, entries, b, bias if bias is not None else b, out, partials, counters, rows,
        cols, k, k_tiles, steps_per_split, rows * cols, b.stride(0), b.stride(1), out.stride(0),
        out.stride(1),
    )  # fmt: skip
    constants = dict(
        HAS_BIAS=bias is not None, ACTIVATION=ACTIVATION_CODES[activation], SPLITS=splits,
        FUSED=fused, BLOCK_N=block_n, CHUNK=entries_per_thread * 32 * warps,
        DTYPE=gl.bfloat16 if b.dtype == torch.bfloat16 else gl.float16, num_warps=warps,
    )  # fmt: skip
    compiled = _csr_scatter_kernel[grid](
        *args, BM=block_m, BK=block_k, AHEAD=steps_ahead, UNSCATTER=unscatter, **constants,
        **layouts(swizzle, warps),
    )  # fmt: skip
    check_buffer_alone(compiled, buffer_bytes(block_k, block_m), "spmm_csr_scatter")
    if splits > 1 and not fused:
        split_k.sum_partials(partials, bias, out, activation)
    return out
