"""Configurations and routing of CSR SDDMM (kernels/sddmm_csr.py, kernels/sddmm_tiles.py) and
the row softmax (kernels/softmax_csr.py): which SDDMM runs where (the per-entry kernel, tensor
cores on filled tiles, or cuBLAS's whole product), and their tiles. From the H200 sweeps cited
beside each rule. Memoised where the inputs are plain integers (lru_cache)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from ._sizes import mean_row, next_power_of_2

_memo = lru_cache(maxsize=4096)


# ------------------------------------------------------------------ the per-entry kernel, softmax
@dataclass(frozen=True)
class SddmmCsrConfig:
    block_nnz: int
    block_k: int
    num_warps: int


# The per-entry kernel's steps: K 64 at a time, about 2048 products a step (32 entries at K >=
# 64) on two warps. H200 sweep (benchmarks/sweeps/sddmm_entry_configs.py, results/nvidia-h200/
# 2026-11-30/at-92edd26/sddmm_entry_configs.txt, 4096^2 at 2-10% stored, us): the first
# heuristic (up to 128 of K, 4096 products, 4 warps) against 32 entries x 64 of K on 2 warps:
#   fp32 K = 64   16.3 -> 13.5, 30.2 -> 27.3, 53.9 -> 50.5   (2%, 5%, 10%)
#   fp32 K = 256  42.7 -> 38.7, 96.5 -> 85.5, 184.2 -> 159.6
#   bf16 K = 64   11.4 -> 10.0, 19.8 -> 19.1, 34.2 -> 35.2;  K = 256 28.2 -> 26.1 (2%)
# (bf16 at 5-10% with K = 256 takes the tensor-core tiles.) One warp on 16 entries was as fast
# at 2% and slower at 10%.
SDDMM_BLOCK_K = 64
SDDMM_STEP_PRODUCTS = 2048


@_memo
def sddmm_csr_config(k: int, nnz: int, rows: int) -> SddmmCsrConfig:
    """A K chunk as wide as K up to SDDMM_BLOCK_K; about SDDMM_STEP_PRODUCTS products a step
    (BLOCK_NNZ x BLOCK_K), but no more stored entries a step than an average row holds."""
    block_k = max(16, min(SDDMM_BLOCK_K, next_power_of_2(max(k, 1))))
    row = mean_row(nnz, rows)
    block_nnz = max(16, min(SDDMM_STEP_PRODUCTS // block_k, row))
    return SddmmCsrConfig(block_nnz, block_k, num_warps=2 if block_nnz * block_k >= 1024 else 1)


@dataclass(frozen=True)
class SddmmBlockedConfig:
    block_rows: int
    block_cols: int
    chunk: int  # the most entries a piece holds (a program walks one or more pieces)
    block_nnz: int
    block_k: int
    num_warps: int


# The blocked walk (sddmm_blocked.py): a program takes one block of the output, R x C, so its
# rows of X and Y are read from L2 once and then from L1. Untimed, so not routed yet
# (SDDMM_BLOCKED; benchmarks/sweeps/sddmm_blocked.py times it against the route). A program's
# rows, (R + C) x K values, are sized to a share of L1 (an H200 SM has up to 256 KB of L1 and
# shared memory together; the programs resident on one SM each bring their own block).
SDDMM_BLOCKED = False
SDDMM_BLOCKED_ROW_BYTES = 96 * 1024  # one program's X and Y rows
# L2's bytes an entry, blocked against the per-entry walk: 2 / (side x density) for square
# blocks, against 1; the blocked walk is taken below this ratio
SDDMM_BLOCKED_MAX_L2_RATIO = 0.5


@_memo
def sddmm_blocked_config(k: int, itemsize: int) -> SddmmBlockedConfig:
    """Square blocks whose X and Y rows take SDDMM_BLOCKED_ROW_BYTES (a multiple of 16, 16 to
    1024 rows); a block one piece; 64 entries a step on two warps, K 64 bytes at a time (fp32
    16, bf16 32: the walk sums along K in each lane and across lanes once, so a narrow K step
    leaves 4 lanes an entry to sum; sm_90: fp32 54 registers at 16, 146 at 64)."""
    side = SDDMM_BLOCKED_ROW_BYTES // (2 * max(k, 1) * itemsize)
    side = max(16, min(1024, side // 16 * 16))
    block_k = max(16, min(64 // itemsize, next_power_of_2(max(k, 1))))
    return SddmmBlockedConfig(side, side, 2**30, 64, block_k, num_warps=2)


def sddmm_blocked_takes(k: int, itemsize: int, density: float) -> bool:
    """With SDDMM_BLOCKED: where the blocks cut L2's bytes an entry below
    SDDMM_BLOCKED_MAX_L2_RATIO of the per-entry walk's."""
    if not SDDMM_BLOCKED or density <= 0:
        return False
    side = sddmm_blocked_config(k, itemsize).block_rows
    return 2 / (side * density) < SDDMM_BLOCKED_MAX_L2_RATIO


@dataclass(frozen=True)
class SoftmaxCsrConfig:
    block: int
    num_warps: int
    heads: int = 1  # matrices sharing the pattern (attention heads) per program
    tail: int = 0  # > 0: the forward reads rows up to block / 2 + tail once (softmax_tail)
    int32: bool = False  # the forward's offsets in int32 wherever they fit (its tail's rows)
    align: int = 0  # > 1: the forward reads rows in whole 16-byte groups of this many entries
    levels: int = 0  # the forward reads rows up to block * 2^levels once too (softmax_csr)
    walk_per: int = 1  # > 1: the forward's walk takes a step's max per thread first


# Heads per program: a row of up to 256 entries is one warp's work, and one-warp programs meet
# the limit of 32 programs a multiprocessor (32 of its 64 warps): 16 heads x 4096 rows of ~256
# entries (local:256, bf16) ran 42.8 us (results/nvidia-h200/2026-11-30/at-25e62da/sddmm).
# Heads of a row share a program, two at most: the sweep over 1-8 heads a program
# (benchmarks/sweeps/softmax_heads_sweep.py, results/nvidia-h200/2026-11-30/at-e11396c/
# softmax_heads_sweep.txt, 16 heads x 4096 rows, forward) found two fastest on every pattern,
# us for 1 / 2 / 4 heads:
#   local:256 bf16 41.5 / 25.0 / 30.9    strided:128:128 bf16 41.4 / 23.1 / 28.9
#   random:0.1 bf16 (512 a row) 59.5 / 45.7 / 62.1    causal (1024 a row) 385 / 397 / 442
# Rows of 1024 and more keep one head (four warps already).
SOFTMAX_MAX_HEADS = 2
SOFTMAX_MAX_WARPS = 4


# The forward may read a row once as half a block and a tail: the kernel is bound by
# instructions issued (Nsight Compute, results/nvidia-h200/2026-11-30/at-02f1e78/ncu.txt), and
# masked lanes issue them too, so strided:128:128's rows (~141 entries on average, 256 lanes)
# run on 128 + 32 lanes. Rows longer than that take the walk.
SOFTMAX_TAIL = True
# The forward's own tiles, from the sweep of heads x warps x offset width (benchmarks/sweeps/
# softmax_heads_sweep.py, results/nvidia-h200/2026-11-30/at-92edd26/softmax_heads_sweep.txt,
# 16 heads x 4096 rows, cold L2, us): rows on a half block and a tail of at most 256 lanes ran
# fastest four heads on two warps with int32 offsets (strided:128:128 bf16 22.4 -> 16.7, 39% ->
# 52% of copy; fp32 24.2 -> 22.4); rows of 257-512 entries one warp a head, int32 (random:0.1
# bf16 45.6 -> 41.9, fp32 58.4 -> 56.2). The backward keeps softmax_csr_config's.
SOFTMAX_TAIL_HEADS = 4
SOFTMAX_TAIL_MAX_LANES = 256
# Rows read once may be read and written in whole 16-byte groups (softmax_csr_groups: vector
# loads and stores where each matrix's values start 16-byte aligned, the op's output then
# padded alike). An earlier form loading groups only lost cold in bf16 on the H200 (at-54e4fc2/
# softmax_align.txt: its loads never vectorized on patterns whose nnz % 8 != 0). The loads-
# and-stores form on arrays padded to 16 entries a matrix, H100, cold, bf16, 16 heads at
# L = 4096 (results/nvidia-h100/2026-12-06/at-5b1e44a/softmax_grouped.txt), us: local:256
# 26.5 -> 25.7 (int32, maxnreg 40), strided:128:128 17.7 -> 15.8 (its tail), random:0.1
# 44.7 -> 39.7 (int32, maxnreg 40). Arrays at any batch stride now take groups too (the phased
# form: contiguous (heads, nnz) at nnz % 16 != 0, as SDDMM writes them and the suite has them),
# and long rows walk in groups. Timed (H100, cold, bf16, 16 heads at L = 4096, results/
# nvidia-h100/2026-12-07/at-1233355/softmax_phased.txt), us, the route against groups on the
# unpadded arrays: causal's walked rows 251.4 -> 218.0 (71% -> 82% of copy); rows read once
# gained nothing (local:256 26.7 against 26.0-28.0, strided:128:128 17.9 against 17.6,
# random:0.1 44.9 against 47.5): groups for walked rows only.
SOFTMAX_ALIGN = False  # rows read once
SOFTMAX_ALIGN_WALKS = True  # the walk's one-head blocks (walk_per > 1)
# A walked row's first pass takes each step's max per thread (softmax_csr_walks._walk_per_thread:
# one rescaling exp2 per thread a step, not per entry) on the walk's one-head blocks of 1024: H100,
# cold, 16 heads of a causal L = 4096 pattern (benchmarks/sweeps/softmax_heads_sweep.py,
# results/nvidia-h100/2026-12-06/at-5b1e44a/softmax_levels_L4096.txt), us: bf16 275.5 ->
# 249.8 (64% -> 71% of copy), fp32 410.0 -> 398.8. Reading those rows once on 2-4 blocks'
# lanes instead (LEVELS) lost: 289.6-307.1 in bf16, and the backward's 314.7 -> 337.9.
SOFTMAX_WALK_PER_THREAD_BLOCK = 1024


def softmax_tail(nnz: int, rows: int, block: int) -> int:
    """With SOFTMAX_TAIL: the power of two covering an average row's entries past block / 2
    and an eighth more (strided:128:128 averages 141 entries a row, its longest 159: 128 + 32),
    where that is fewer lanes than the block's other half (else 0, as without it)."""
    if not SOFTMAX_TAIL or block < 64:
        return 0
    average = -(-nnz // max(rows, 1))
    tail = next_power_of_2(max(1, average + average // 8 - block // 2))
    return tail if tail < block // 2 else 0


@_memo
def softmax_csr_config(nnz: int, rows: int, batch: int = 1) -> SoftmaxCsrConfig:
    """First-kernel heuristic (the backward's; the forward starts from it): a chunk the size of
    an average row, 32 to 1024 entries; one warp a head up to 256 entries, then at most 8
    entries per thread; up to SOFTMAX_MAX_HEADS heads of the same row share a program, within
    SOFTMAX_MAX_WARPS warps."""
    block = max(32, min(1024, mean_row(nnz, rows)))
    warps = max(1, min(4, block // 256))
    fit = max(1, min(SOFTMAX_MAX_HEADS, SOFTMAX_MAX_WARPS // warps))
    heads = min(next_power_of_2(max(batch, 1)), fit)
    return SoftmaxCsrConfig(block, num_warps=warps * heads, heads=heads)


@_memo
def softmax_forward_config(
    nnz: int, rows: int, batch: int = 1, itemsize: int = 4
) -> SoftmaxCsrConfig:
    """The forward's: softmax_csr_config with the tail (softmax_tail); a tail's rows up to
    SOFTMAX_TAIL_MAX_LANES lanes on SOFTMAX_TAIL_HEADS heads a program, two a warp, int32
    offsets; blocks of 512 one warp a head (the sweep above); with SOFTMAX_ALIGN, 16-bit
    values (`itemsize` bytes an entry) read in 16-byte groups; blocks of 1024 (one head) walk
    long rows taking a step's max per thread, in groups with SOFTMAX_ALIGN_WALKS."""
    base = softmax_csr_config(nnz, rows, batch)
    tail = softmax_tail(nnz, rows, base.block)
    align = 16 // itemsize if SOFTMAX_ALIGN and itemsize == 2 else 0
    if tail and base.block // 2 + tail <= SOFTMAX_TAIL_MAX_LANES:
        heads = min(next_power_of_2(max(batch, 1)), SOFTMAX_TAIL_HEADS)
        return SoftmaxCsrConfig(base.block, max(1, heads // 2), heads, tail, True, align)
    if base.block == 512:  # int32 too: with int64 offsets one warp a head ran 59.9 us
        return replace(base, num_warps=base.heads, tail=tail, int32=True, align=align)
    walk_per = 1
    if base.heads == 1 and base.block >= SOFTMAX_WALK_PER_THREAD_BLOCK:
        walk_per = base.block // (32 * base.num_warps)  # a thread's entries a step
        if SOFTMAX_ALIGN_WALKS and itemsize == 2:
            align = 16 // itemsize
    return replace(base, tail=tail, align=align, walk_per=walk_per)


# ------------------------------------------------------------------ routes
# The whole product x @ y^T on cuBLAS, then the stored entries picked out, beats a sampled
# product on CUDA cores wherever tensor cores do more than 1/density times the work faster: a
# 90% sparse weight's gradient (512 x 2048, K = 8192 tokens, bf16) took 936 us a call in the
# sddmm kernel, while the dense product is ~25 us (H200, results/nvidia-h200/2026-11-30/
# at-a179149/transformer_profile.txt).
# The product must stay small where there are many matrices (attention's L x L scores per
# head); one matrix is a weight's gradient, as large as the weight itself, so a layer of 28672 x
# 8192 (2^27.8 cells) still takes the product rather than a per-entry walk over K.
SDDMM_DENSE_MIN_K = 64
SDDMM_DENSE_MAX_CELLS = 2**27  # elements of the whole product, all batches
SDDMM_DENSE_MAX_CELLS_ONE_MATRIX = 2**30


# From the H200 sweep of 2026-11-30 (results/nvidia-h200/2026-11-30/at-e10ccc9/
# sddmm_tiles_sweep.txt, 4096 x 4096, uniform random): in half precision the whole product wins
# from 10% stored at K = 64 (30.5 us against the per-entry kernel's 38.5; at 5% the kernel's
# 22.3 against 24.4) and from 2% at K >= 128 (K = 256: 28.7 against 31.0); in float32 from 25%.
SDDMM_DENSE_MIN_DENSITY_HALF_SHORT_K = 0.08  # K < 128
SDDMM_DENSE_MIN_DENSITY_HALF = 0.02
SDDMM_DENSE_MIN_DENSITY_FP32 = 0.25


def sddmm_prefers_dense(
    k: int,
    density: float,
    cells: int,
    half_precision: bool,
    tile_fill: float = 0.0,
    batch: int = 1,
) -> bool:
    largest = SDDMM_DENSE_MAX_CELLS if batch > 1 else SDDMM_DENSE_MAX_CELLS_ONE_MATRIX
    if k < SDDMM_DENSE_MIN_K or cells > largest:
        return False
    if sddmm_tiles_takes(k, density, tile_fill, half_precision):
        return False
    if not half_precision:
        return density >= SDDMM_DENSE_MIN_DENSITY_FP32
    if k < 128:
        return density >= SDDMM_DENSE_MIN_DENSITY_HALF_SHORT_K
    return density >= SDDMM_DENSE_MIN_DENSITY_HALF


# The tensor-core SDDMM (sddmm_tiles.py) computes every cell of the tiles holding entries, then
# keeps the entries. It wins where those tiles are well filled and, against cuBLAS's whole
# product, where they are a part of the product or K is short (same sweep): a 256-wide local
# window (fill 0.8, 8% of the cells in visited tiles, 16 heads) ran 52.7 us against 245 for the
# whole product at K = 64 bf16, 303 against 1800 at K = 2048, 226 against 513 (per-entry
# kernel) in float32; uniform 30% at K = 64 bf16 42.7 against 50.9; at 10% it lost (34.3
# against 30.5), and with every tile visited it lost to cuBLAS at K = 2048 (171.5 against 135.0)
# and in float32 (146.4 against 118.5). `fill` is entries per cell of the visited 64 x 64 tiles.
SDDMM_TILES_MIN_FILL = 0.2
SDDMM_TILES_MAX_VISITED = 0.5  # share of the product's cells in visited tiles, past short K
SDDMM_TILES_SHORT_K = 256


def sddmm_tiles_takes(k: int, density: float, fill: float, half_precision: bool) -> bool:
    if fill < SDDMM_TILES_MIN_FILL:
        return False
    visited = density / fill
    return visited <= SDDMM_TILES_MAX_VISITED or (half_precision and k <= SDDMM_TILES_SHORT_K)


@dataclass(frozen=True)
class SddmmTilesConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


# the tile the route measures its fill on (and runs at short K)
SDDMM_TILES_PROBE = (64, 64)


# Two stages where K is at most two of the tile's 64-column steps: a third buffer has nothing to
# hold and costs programs an SM. H100, K = 64, cold (results/nvidia-h100/2026-12-07/at-1233355/
# sddmm_tiles_walk.txt), us, 3 -> 2 stages: bf16 local:256 (16 heads) 51.1 -> 48.6, uniform
# 0.5-10% 28.0-33.5 -> 24.1-30.3; tf32 local 89.8 -> 68.5, uniform 45.2-52.8 -> 33.8-38.5. Walks
# over several tiles a program (at 5-7 stages, or prefetching) were slower everywhere.
SDDMM_TILES_FEW_STEPS_K = 128


@_memo
def sddmm_tiles_config(k: int) -> SddmmTilesConfig:
    """64 x 64 tiles at K <= 256, 128 x 128 past it (the same sweep's fastest); 2 stages to
    K = SDDMM_TILES_FEW_STEPS_K, else 3."""
    stages = 2 if k <= SDDMM_TILES_FEW_STEPS_K else 3
    if k <= SDDMM_TILES_SHORT_K:
        return SddmmTilesConfig(*SDDMM_TILES_PROBE, 64, 4, stages)
    return SddmmTilesConfig(128, 128, 64, 8, stages)


# On the CPU the only sparse SDDMM is the float64 reference, which gathers a (stored entries, K)
# block: a 2:4 weight gradient (1536 x 384, 640 tokens) took 2.3 s a training step where the BLAS
# product and a gather take milliseconds (CPU box, 2026-11-30). From a few percent stored the
# whole product wins.
SDDMM_CPU_DENSE_MIN_DENSITY = 0.02


def sddmm_prefers_dense_on_cpu(density: float, cells: int) -> bool:
    return density >= SDDMM_CPU_DENSE_MIN_DENSITY and cells <= SDDMM_DENSE_MAX_CELLS
