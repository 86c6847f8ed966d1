"""The SpMM kernels' configurations and routing heuristics (CSR, N:M), the dense fallback's
thresholds and cuSPARSELt's, named in one place; SDDMM and softmax (sddmm_tuning.py), depthwise
(depthwise_tuning.py), densify (densify_tuning.py), fused attention (attention_tuning.py) and the
N:M decode kernel's tiles (nm_decode_tuning.py) keep theirs beside their kernels, and the
general CSR kernel's tiles theirs in csr_tile_tuning.py (imported here under the same names).

Per-GPU tuned tables land here as data once the benchmark harness has measured them. The
configuration functions of the kernels behind the ops depend on their arguments only, so each
answer is computed once (`_memo`): an eager decode call asks for several, and host time is what
such calls cost. Those called in the ops' Python wrappers stay plain: torch.compile traces the
wrappers and warns about cached functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from ._sizes import cdiv, next_power_of_2
from .csr_tile_tuning import SpmmCsrConfig, spmm_csr_config  # noqa: F401 (the ops' names)
from .nm_small_tiles import few_token_tiles, small_tiles, usual_block_n, vector_wise_small_tiles

_memo = lru_cache(maxsize=4096)

# CUDA caps grid dimensions 1 and 2 at 65535 programs.
MAX_GRID_YZ = 65535


@dataclass(frozen=True)
class SpmmCsrTokenConfig:
    rows_per_program: int
    block: int  # stored entries of a row a step, a multiple of spmm_csr_token.GROUP
    num_warps: int


# Below this many stored entries, a one-token walk is short enough to be latency-bound: two rows
# a program (one warp) keep twice the loads in flight. H200 sweep (at-56c4c49/
# csr_token_configs.txt): 2 rows 8-19% faster at 1.7-5.9M entries (90% on the LLM shapes),
# 1 row 1-10% faster at 17.6M (70% on 4096 x 14336 and 14336 x 4096); even at 5.0M.
CSR_TOKEN_TWO_ROWS_BELOW_NNZ = 10_000_000
CSR_TOKEN_BLOCK = 256  # stored entries a step (the stream walk's too)


# Few rows (<= 2048): one-warp programs of 1-2 rows leave most of the GPU idle and each warp
# waits on its own loads, so a program takes one row and, on up to 1024 rows, 512 entries a
# step (one warp, or two where rows are 1024+ entries long: twice the loads in flight). Cold,
# bf16, us, the two-row rule -> this (results/nvidia-h200/2026-12-03/at-bfde5bd/
# csr_token_cold_small.txt): 1024 x 4096 70% 6.3 -> 4.9, 90% 4.5 -> 4.0; 1024 x 8192 70% 9.8 ->
# 6.4, 90% 5.8 -> 4.8; 2048 x 4096 70% 7.3 -> 6.5, 90% 4.9 -> 4.5; 2048 x 2048 70% 5.2 -> 4.8;
# 384 x 1536 70% 3.1 -> 2.7; 768 x 768 and 1536 x 384 within 0.1.
CSR_TOKEN_FEW_ROWS = 2048
CSR_TOKEN_WIDE_ROWS = 1024  # up to this many rows, 512-entry steps on rows of 256+ entries
CSR_TOKEN_TWO_WARP_ENTRIES = 1024  # mean entries a row from which a row takes two warps there


def spmm_csr_token_config(nnz: int, rows: int) -> SpmmCsrTokenConfig:
    """One token (spmm_csr_token.py) on a weight of `rows` rows and `nnz` stored entries: a
    warp walks one or two rows 256 entries a step; few rows take one row a program, with wider
    steps and a second warp on the fewest (above)."""
    if rows <= CSR_TOKEN_FEW_ROWS:
        mean = nnz / max(rows, 1)
        if rows <= CSR_TOKEN_WIDE_ROWS and mean >= 256:
            warps = 2 if mean >= CSR_TOKEN_TWO_WARP_ENTRIES else 1
            return SpmmCsrTokenConfig(rows_per_program=1, block=512, num_warps=warps)
        return SpmmCsrTokenConfig(rows_per_program=1, block=CSR_TOKEN_BLOCK, num_warps=1)
    per_program = 2 if nnz < CSR_TOKEN_TWO_ROWS_BELOW_NNZ else 1
    return SpmmCsrTokenConfig(rows_per_program=per_program, block=CSR_TOKEN_BLOCK, num_warps=1)


# x gathered by inline PTX in the one-token vector walk (spmm_csr_token.py, kernels/_gather.py:
# the gather keeps the step's layout; sm_90 loop a 256-entry step on two rows, x contiguous,
# 307 -> 251 instructions) and its middle steps unmasked (99 instructions for one row with
# both): fewer instructions, no faster. Cold, bf16, us, route -> asm / unmasked / both
# (results/nvidia-h200/2026-12-04/at-d8b7176/csr_lines_cold.txt): 70% 4096 x 14336 21.6 ->
# 21.8 / 21.0 / 21.6; 90% 4096 x 14336 10.2 -> 13.2 / 9.9 / 12.5; 90% 14336 x 4096 12.4 ->
# 14.6 / 14.2 / 15.2. Off; the line layout's walk (below) takes the PTX gather.
CSR_TOKEN_ASM_GATHER = False
CSR_TOKEN_UNMASKED_MIDDLE = False

# Many short rows: a warp walks 4 rows one after another (spmm_csr_token_stream.py) where the
# one-token kernel's per-program chain of loads dominates. Cold, bf16, us (results/nvidia-h200/
# 2026-12-02/at-c01d85b/csr_token_stream*.txt; one-token kernel / stream): 90% 14336 x 4096
# 14.1-14.4 / 11.8-12.0, 11008 x 4096 11.8 / 10.2, 16384 x 2048 11.4 / 8.4; 70% 14336 x 4096
# 24.0-24.1 / 22.5-22.7, 16384 x 2048 18.2 / 15.7, 11008 x 4096 19.5 / 20.1. Slower on 4096
# rows (4096 x 4096 at 90%, 410 entries a row: 5.6 / 7.8) and on rows of 819+ entries.
CSR_STREAM_MIN_ROWS = 10_000
CSR_STREAM_MAX_ROW_ENTRIES = 640  # mean stored entries a row
CSR_STREAM_ROWS = 4


def spmm_csr_token_stream_rows(rows: int, nnz: int) -> int | None:
    """Rows a program for the one-token stream walk where it measured faster, else None."""
    if rows >= CSR_STREAM_MIN_ROWS and nnz <= CSR_STREAM_MAX_ROW_ENTRIES * rows:
        return CSR_STREAM_ROWS
    return None


# The largest N (tokens) the CSR row walk takes: 1 is the one-token kernel; 2..this, the
# few-token kernel (spmm_csr_few.py); past it the general kernel. H200 sweep (2026-11-30,
# csr_few_tokens.txt, 4096 x 14336, 14336 x 4096 and 4096 x 4096 at 70% and 90%, bf16): the
# few-token kernel's best configuration beat the general kernel in every case, 1.2-2.2x (70% on
# 4096 x 14336: 58.3 -> 26.5 us at 2 tokens, 120.7 -> 69.9 us at 16).
CSR_ROW_WALK_MAX_N = 16


# Few-row weights (<= 2048 rows, as at one token: spmm_csr_token_config) leave most of the GPU
# idle with two rows a program: one row a program, 256 entries a step on two warps, cold, us,
# bf16, the old configuration -> this (results/nvidia-h200/2026-12-03/at-82a3814/
# csr_few_tokens_few_rows.txt): 1024 x 4096 70% 5.2 -> 4.3 at 2 tokens, 9.2 -> 8.3 at 16;
# 1024 x 8192 70% 8.1 -> 6.2 at 2, 10.7 -> 9.3 at 8; 2048 x 4096 70% 5.8 -> 5.6 at 2. On
# 2048 rows from 5 tokens the two-warp row loses (70% 11.1 at 8 tokens): a warp, 128 entries.
CSR_FEW_ROWS = 2048


def spmm_csr_few_config(n: int, rows: int = 0) -> SpmmCsrTokenConfig:
    """The few-token kernel's configuration by N and the weight's rows (0: unknown), the best
    of the H200 sweeps in most of their cases (csr_few_tokens.txt; few rows above): up to 4
    tokens two rows a program, a warp each, 128 entries a step; up to 8, a warp on one row, 64
    entries a step (its B tile is 8 wide); up to 16, 128 entries."""
    if 0 < rows <= CSR_FEW_ROWS // 2 or (0 < rows <= CSR_FEW_ROWS and n <= 4):
        return SpmmCsrTokenConfig(rows_per_program=1, block=256, num_warps=2)
    if 0 < rows <= CSR_FEW_ROWS:
        return SpmmCsrTokenConfig(rows_per_program=1, block=128, num_warps=1)
    if n <= 4:
        return SpmmCsrTokenConfig(rows_per_program=2, block=128, num_warps=2)
    if n <= 8:
        return SpmmCsrTokenConfig(rows_per_program=1, block=64, num_warps=1)
    return SpmmCsrTokenConfig(rows_per_program=1, block=128, num_warps=1)


@dataclass(frozen=True)
class SpmmNmConfig:
    use_dot: bool  # tensor-core path: rows of a tile share one choice (vector-wise)
    block_m: int
    block_s: int  # compressed slots per step
    block_n: int
    num_warps: int
    num_stages: int
    b_in_place: bool = False  # read linear's x^T strided rather than from a row-major copy


def _largest_power_of_two_dividing(value: int, cap: int) -> int:
    power = 1
    while power * 2 <= cap and value % (power * 2) == 0:
        power *= 2
    return power


@_memo
def spmm_nm_config(
    n_cols: int,
    vector: int,
    dtype_is_fp64: bool,
    rows: int | None = None,
    k: int | None = None,
    density: float = 1.0,
    block: int = 1,
    kept: int = 0,
) -> SpmmNmConfig:
    """Vector-wise patterns with v >= 16 and N >= 16 go to tensor cores (smaller tiles where
    `rows` x `k`, when given, make the usual ones few: vector_wise_small_tiles; at 1-32 tokens
    few_token_tiles' by `density` (n / m), `block` and `kept` (n)); the rest gather on CUDA
    cores, at N <= 16 in few rows and long slot runs a program (H200 sweep, 2026-11-29)."""
    tile_rows = _largest_power_of_two_dividing(vector, 64)
    sized = rows is not None and k is not None
    if not dtype_is_fp64 and tile_rows >= 16 and n_cols > 0:
        if sized and n_cols >= 16 and vector_wise_small_tiles(n_cols, vector, rows, k):
            return SpmmNmConfig(True, *small_tiles(n_cols, k))
        few = few_token_tiles(n_cols, vector, rows, density, block, kept) if sized else None
        if few is not None:
            return SpmmNmConfig(True, *few)
        if n_cols >= 16:
            return SpmmNmConfig(True, tile_rows, 32, usual_block_n(n_cols), 8, 3)
    block_n = min(16, next_power_of_2(max(n_cols, 1)))
    if n_cols <= 16:
        return SpmmNmConfig(False, 2, min(512, 8192 // (2 * block_n)), block_n, 2, 2)
    return SpmmNmConfig(False, 32, max(8, 4096 // (32 * block_n)), block_n, 4, 2)


# Up to this many columns of B (tokens), N:M products take the decode kernel: bound by the
# weight's bytes, it reads bit-packed offsets and keeps B's whole row in one tile. With B padded
# to an aligned power-of-two row it beats the gather kernel at 1-12 tokens for every pattern
# (1:8 14336 x 4096 at 8 tokens: 19.2 against 94.2 us) and ties it at 16 (30.8 vs 34.0; 4096 x
# 14336: 37.9 vs 36.6); H200, results/nvidia-h200/2026-11-30/at-49c3dd1/nm_decode_vs_gather.txt.
DECODE_MAX_N = 16
# At 1:8 and sparser the decode kernel still beats densify + cuBLAS at 32 tokens (43 against
# 75 us, 14336 x 4096 bf16; 2:8: 86 against 80 us), results/nvidia-h200/2026-11-30/at-94ee33f/
# nm_expand_variants.txt.
DECODE_MAX_N_SPARSEST = 32


def decode_max_n(density: float) -> int:
    """The most tokens the N:M decode kernel takes for a pattern of this density (n / m)."""
    return DECODE_MAX_N_SPARSEST if density <= 1 / 8 else DECODE_MAX_N


# The tensor-core N:M kernel (spmm_nm_expand.py: m plain tl.dot calls a step on the compressed
# tile, one per position of a group) takes half-precision products of element-wise (and v < 16)
# patterns at 1:8 and sparser with EXPAND_MIN_N..EXPAND_MAX_N tokens (and the patterns below to
# EXPAND_GROUPED_MAX_N). The first H200 sweep
# (results/nvidia-h200/2026-11-30/at-15b48bc/nm_onehot_sweep.txt), 1:8 bf16 14336 x 4096, us:
#   tokens     8     16     32     64    128
#   kernel  31.7   25.7   29.3   31.6   55.7
#   decode  18.9   30.2   43.6      -      -   (the route before: decode to 32, then densify)
#   densify    -      -      -   75.6   77.5
#   dense   30.8   31.4   31.1   32.6   33.8
# The decode kernel grows ~1.4 us a token and this kernel is flat to 16 (one 16-wide column
# tile): they cross near 13 tokens. Since then (at-31eeef3, split-K and retuned tiles) it runs
# 22.9-27.3 us at 16-64 tokens; on 4096 x 14336 the decode kernel took 43.2 us at 8 tokens
# (llm suite at-466caa8) where this kernel takes ~26: the crossing may sit lower on few-row
# weights (not measured below 16 tokens since).
EXPAND_MIN_N = 13
EXPAND_MAX_N = 128
EXPAND_MAX_DENSITY = 1 / 8
# The grouped form (a group's n slots folded into one dot row, so dots are n times shallower
# and B rows load once) beat the automatic route at 2:8, 2:4 and 4:8 to 64 tokens, bf16, us
# (results/nvidia-h200/2026-11-30/at-31eeef3/nm_expand_n2.txt; dense 30-38 us, so a sparse
# weight still loses to the dense one there):
#   14336 x 4096      16 tokens        64 tokens        128 tokens
#   2:8          41.8 (route 54.4)  58.7 (80.6)   94.0 (densify 82.4)
#   2:4          49.0 (90.2)        62.5 (97.1)  123.5 (99.1)
#   4:8          77.0 (114.0)       84.6 (92.6)  141.1 (94.3)
# n = 2 at 16 tokens ran 4-9% faster in the slot form. Other patterns are not measured, and
# their grouped form compiles slowly (16:32 took minutes), so they keep the slot form. Those
# sweeps were element-wise: block-wise 4:8 (v = 4, b = 4) ran 7-8x slower grouped than on the
# other kernels at 16 tokens on an H100, 232 against 32 us on 4096 x 4096 and 894 against 107
# on 14336 x 4096 (results/nvidia-h100/2026-12-05/nm-block-routes/), so blocks stay off it.
EXPAND_GROUPED = True
EXPAND_GROUPED_PATTERNS = ((2, 4), (2, 8), (4, 8))
EXPAND_GROUPED_MAX_N = 64


@dataclass(frozen=True)
class SpmmNmExpandConfig:
    block_m: int
    block_s: int  # compressed slots a step
    block_n: int
    num_warps: int
    num_stages: int
    grouped: bool = False  # fold each group's n slots into one dot row (spmm_nm_expand.py)
    split: int = 1  # ranges of slots, one program each, summed by a second kernel


# Small weights keep the decode kernel to 16 tokens: on 4096 x 4096 at 16 tokens, linear's
# column-major output, cold L2, it ran 2:8 16.4 us against this kernel's 18.7 and 1:8 10.5
# against 12.5; on 14336 x 4096 and 4096 x 14336 this kernel won (2:8 45.8 against 49.5, 1:8
# 26.7 against 27.4), results/nvidia-h200/2026-11-30/at-92edd26/nm_cold_8_16.txt.
EXPAND_SMALL_WEIGHT = 4096 * 4096  # elements (rows x K) at most


def spmm_nm_expand_takes(
    n_cols: int,
    n: int,
    m: int,
    vector: int,
    half_precision: bool,
    elements: int = 0,
    block: int = 1,
) -> bool:
    """Whether the tensor-core N:M kernel takes the product; `elements` (rows x K, 0 when
    unknown) leaves small element-wise weights to the decode kernel to DECODE_MAX_N tokens;
    block-wise patterns (`block` > 1) take only the slot form."""
    if not half_precision or _largest_power_of_two_dividing(vector, 64) >= 16:
        return False  # v >= 16: the vector-wise kernel
    small = 0 < elements <= EXPAND_SMALL_WEIGHT and vector == 1 and n * 4 <= m
    if small and n_cols <= DECODE_MAX_N:
        return False
    if n / m <= EXPAND_MAX_DENSITY:
        return EXPAND_MIN_N <= n_cols <= EXPAND_MAX_N
    grouped = EXPAND_GROUPED and (n, m) in EXPAND_GROUPED_PATTERNS and block == 1
    return grouped and EXPAND_MIN_N <= n_cols <= EXPAND_GROUPED_MAX_N


# Shared memory a program of the expand kernel may use (the H200 allows 227 KiB): each
# pipeline stage holds the value and offset tiles and m tiles of B.
EXPAND_SHARED_BYTES = 220 * 1024
MULTIPROCESSORS = 132  # H200


@_memo
def spmm_nm_expand_config(
    n_cols: int, n: int, m: int, rows: int, slots: int, element_bytes: int
) -> SpmmNmExpandConfig:
    """The sweeps' best tiles (rows, slots a step, warps, stages) per token count, 1:8 bf16
    (results/nvidia-h200/2026-11-30/at-31eeef3/nm_expand_split.txt); the tokens in one column
    tile up to 64; 1:16 (m = 16 dots a step) ran best at 128 x 32, the grouped form at 64-row
    tiles (at-7c6bc6f). Fewer stages, then narrower tiles, where m tiles of B a stage would not
    fit in shared memory (1:16 at 64 tokens once asked for 292 KiB).

    Split-K where the grid leaves multiprocessors idle: the most ranges that keep the programs
    within a wave (two at 128 tokens and in the grouped form), 4 steps a range at least. 1:8 on
    4096 x 14336 went from 40.8 / 49.7 / 60.1 us at 16 / 32 / 64 tokens (64 or 32 programs) to
    25.6 / 26.1 / 30.2 (1.20-1.26x dense); on 14336 rows (112-224 programs) splitting was
    slower. Smaller row tiles instead were slower too (32 rows: 46.4 us at 16 tokens)."""
    block_n = max(16, min(64, next_power_of_2(n_cols)))
    if m >= 16:
        block_m, block_s, stages = 128, 32, 3
    elif n_cols <= 16:
        block_m, block_s, stages = 64, 64, 3
    elif n_cols <= 64:
        block_m, block_s, stages = 128, 32, 3 if n_cols <= 32 else 4
    else:
        block_m, block_s, stages = 128, 32, 2
    # a dot row per group: at least 16 groups a step
    grouped = EXPAND_GROUPED and (n, m) in EXPAND_GROUPED_PATTERNS and (n > 2 or n_cols > 16)
    if grouped:
        block_m, block_s = 64, max(block_s, 16 * n)

    def stage_bytes() -> int:
        b_rows = block_s // n if grouped else block_s
        return block_m * block_s * (element_bytes + 1) + m * b_rows * block_n * element_bytes

    while stages > 1 and stages * stage_bytes() > EXPAND_SHARED_BYTES:
        stages -= 1
    while block_n > 16 and stage_bytes() > EXPAND_SHARED_BYTES:
        block_n //= 2
    while block_s > (16 * n if grouped else 16) and stage_bytes() > EXPAND_SHARED_BYTES:
        block_s //= 2
    programs = cdiv(rows, block_m) * cdiv(n_cols, block_n)
    waves = 2 if grouped or n_cols > 64 else 1
    split = 1
    while programs * split * 2 <= waves * MULTIPROCESSORS and cdiv(slots, block_s) >= 8 * split:
        split *= 2
    return SpmmNmExpandConfig(block_m, block_s, block_n, 4, stages, grouped, split)


# ------------------------------------------------------------------ dense fallback
# Where cuBLAS on the densified weight beats our kernels (H200 runs of 2026-11-29,
# benchmarks/results/nvidia-h200/2026-11-29): the CUDA-core kernels lose to tensor cores at
# batched sizes in half precision, and to strict fp32 below ~90% sparsity. Densifying costs one
# pass over the dense weight (40-75 us for 14336 x 4096 bf16), about as much as the GEMM, yet
# past the decode sizes the CUDA-core gather kernels lose even to that: at 32 tokens on
# 14336 x 4096 bf16, N:M gather 380-1480 us, CSR 263-766 us, densify + cuBLAS 75-107 us (dense
# alone 31 us; results/nvidia-h200/2026-11-30/at-94ee33f/nm_expand_variants.txt).
DENSE_FALLBACK_MIN_N = 128  # the vector-wise tensor-core N:M kernel's limit
SPMM_CSR_DECODE_MAX_N = 16  # past this, CSR products (W^T's of N:M weights too) densify


# Strict fp32 (no tensor cores on either side): the CSR kernel against cuBLAS over the DLMC
# sample (results/nvidia-h200/2026-11-29/dlmc, geometric means): 1.16x at 10% stored, 0.80x at
# 20%. The crossover is near 14%; a threshold at exactly 10% flipped 90%-sparse layers one way
# or the other with the rounding of their kept count (MobileNet's: 0.09999 to 0.10010).
FP32_DENSE_MIN_DENSITY = 0.14
# With the DLMC tiles (spmm_csr_config) small products keep the kernel to 30% stored: at 20-30%
# it beat densify + cuBLAS in 11 of 12 cases up to ~24M multiply-adds (128 x 512 at 20%, N =
# 784: 8.7 against 13.3 us) and lost past it (2048 x 512 at 30%, N = 256, 80M: 26 against 24;
# 2304 x 256 at 30%, N = 196, 35M: 35 against 20); results/nvidia-h200/2026-11-30/at-298425b/
# dlmc. Over that run's 72 fp32 cases: 1.92x -> 2.00x cuSPARSE (geometric mean).
FP32_SMALL_MAX_DENSITY = 0.3
FP32_SMALL_MAX_PRODUCTS = 24_000_000


# Half precision: densify + cuBLAS wins past the decode sizes, except on the smallest products,
# where both are launch-bound and the CSR kernel is one launch to their two. DLMC, bf16
# (results/nvidia-h200/2026-11-30/at-3a5f8a3/dlmc): the CSR kernel was faster at N <= 256 with
# at most ~3M multiply-adds (stored entries x N): 512 x 512 at 2% and N = 256 4.0 us against
# 5.0, 512 x 4608 at 2% and N = 49 8.3 against 15.6; past that it lost (512 x 512 at 10%,
# 6.7M: 6.8-9.5 against 5.1). It won at 2-5% stored (1024 x 256 at 5%, N = 196: 6.5 against
# 7.7); at 10% or more it lost on small products too: all-MiniLM's 384 x 384 at 64-112 tokens
# (results/nvidia-h200/2026-12-02/at-9aa671a/small_layer_routes.txt, warm L2) 8.9-11.0 us at
# 10% and 13.8 at 30% against densify's 4.9 (its rows' entries walked in series).
HALF_CSR_MAX_N = 256
HALF_CSR_MAX_PRODUCTS = 3_000_000
HALF_CSR_MAX_DENSITY = 0.05


def spmm_csr_prefers_dense(n: int, density: float, half_precision: bool, products: int = 0) -> bool:
    """`products`: stored entries x N x batch (0 when unknown)."""
    if n <= SPMM_CSR_DECODE_MAX_N:
        return False
    if half_precision:
        small = 0 < products <= HALF_CSR_MAX_PRODUCTS and density <= HALF_CSR_MAX_DENSITY
        return not (n <= HALF_CSR_MAX_N and small)
    small = 0 < products <= FP32_SMALL_MAX_PRODUCTS and density <= FP32_SMALL_MAX_DENSITY
    return density > FP32_DENSE_MIN_DENSITY and not small


# 2:8 at v = 64 (a quarter of each 64-row tile's K kept) on weights of at most 1024 rows lost
# to densify + cuBLAS from 128 tokens in bf16: 1.15-1.53x on 768 x 3072 and 1024 x 4096 at
# 128-1024 tokens, 1.22-1.27x on 768 x 768 from 256 (16 or fewer 64-row tiles: few programs
# for the walk along K); from 3072 rows it won, and 1:8 won or tied everywhere
# (results/nvidia-h200/2026-12-02/at-6ac7b02/encoder_layer_routes.txt). Where the small tiles
# (nm_small_tiles.py: K <= 1536, few programs) take the product it does not lose to densify
# through linear (at-6445e04: 768 x 768 at 256 tokens 4.5 against 5.6 us, 384 x 1536 at 64-112
# 6.5-6.6 against 6.5).
VECTOR_WISE_FEW_ROWS = 1024


def spmm_nm_prefers_dense(
    n: int,
    pattern: tuple[int, int],
    vector: int,
    half_precision: bool,
    transpose: bool = False,
    rows: int | None = None,
    k: int | None = None,
    block: int = 1,
) -> bool:
    """The vector-wise tensor-core path wins at v >= 64 from 75% sparsity, at v = 32 from 87.5%,
    and below DENSE_FALLBACK_MIN_N tokens for every v >= 16; in half precision on weights of
    VECTOR_WISE_FEW_ROWS `rows` or fewer (when given) only from 87.5%, or where the small
    tiles take `rows` x `k`. Element-wise (and
    v < 16) patterns densify past the decode kernel's sizes. W^T @ B (the backward of x) runs
    on the CSR kernel, so it densifies past that kernel's decode sizes."""
    if transpose:
        return n > SPMM_CSR_DECODE_MAX_N
    n_keep, m = pattern
    density = n_keep / m
    tile_rows = _largest_power_of_two_dividing(vector, 64)
    if tile_rows < 16:  # the gather kernel's patterns
        return n > decode_max_n(density) and not spmm_nm_expand_takes(
            n, n_keep, m, vector, half_precision, block=block
        )
    if n < DENSE_FALLBACK_MIN_N:
        return False
    kept = density * 64 / tile_rows  # (of K, as the tiles walk it)
    wins = tile_rows >= 32 and kept <= 0.25
    few_rows = half_precision and rows is not None and rows <= VECTOR_WISE_FEW_ROWS
    if wins and few_rows and kept > 0.125:
        return k is None or not vector_wise_small_tiles(n, vector, rows, k)
    return not wins


# ------------------------------------------------------------------ cuSPARSELt (2:4)
# Where torch's cuSPARSELt 2:4 matmul (the `cusparselt` backend of spmm/linear) beats both our
# Triton N:M kernels and dense cuBLAS: benchmarks/sweeps/semistructured_sweep.py on the H200,
# 2:4 through linear on 4096 x 4096, 14336 x 4096, 4096 x 14336 and 28672 x 8192 at 128-8192
# tokens (results/nvidia-h200/2026-12-05/at-c3b827c/semistructured.txt and at-ba67939/).
# With cuSPARSELt's searched algorithm (CUSPARSELT_SEARCH, ops/_cusparselt_algs.py) bf16 runs
# 1.11-1.72x dense from 512 tokens on every shape (256: 0.69-1.72x; 128: 0.64-1.06x). fp16 is
# written row-major (searching its transposed product faults), and linear copies the product
# transposed: torch's strided copy ran at 0.5 TB/s and left fp16 0.72-0.82x dense at K = 4096
# (so fp16 took only K >= 8192); the tiled copy (CUSPARSELT_TILED_TRANSPOSE) makes fp16
# 1.22-1.37x dense at K = 4096 and 1.39-1.57x at K >= 8192 from 1024 tokens on an H100
# (results/nvidia-h100/2026-12-05/cusparselt-at-55405e1/transposing_copy.txt), so fp16 takes
# every K. Forcing backend="cusparselt" works wherever it is available.
CUSPARSELT_MIN_N_BF16: int | None = 512
CUSPARSELT_MIN_N_FP16: int | None = 1024
# cuSPARSELt's own algorithm search, once per problem size (ops/_cusparselt_algs.py): its pick
# ran 1.2-2.5x faster than algorithm 0 (2026-12-05/at-4f5c74f/cusparselt_search_safety.txt).
CUSPARSELT_SEARCH = True
# fp16 through linear (and bf16 with no searched algorithm, as while capturing a graph):
# cuSPARSELt's product comes row-major (rows, tokens) and linear needs it transposed. torch's
# strided copy ran at 0.5 TB/s on an H100; kernels/transpose.py's 64 x 64 tiles at 2.7-5.0
# (3.9-9.8x faster; 128 x 32 and 32 x 128 no better), making fp16 linear 1.22-1.57x dense
# where torch's copy left it 0.72-1.22x, and bf16 without a search 1.01-1.24x where it was
# 0.64-0.95x (results/nvidia-h100/2026-12-05/cusparselt-at-55405e1/transposing_copy.txt).
CUSPARSELT_TILED_TRANSPOSE = True


def spmm_nm_prefers_cusparselt(rows: int, k: int, n: int, dtype: torch.dtype) -> bool:
    """Whether a 2:4 weight (rows, k) times (k, n) in `dtype` should go to cuSPARSELt
    automatically (the sweeps above)."""
    if dtype == torch.bfloat16:
        return CUSPARSELT_MIN_N_BF16 is not None and n >= CUSPARSELT_MIN_N_BF16
    if dtype == torch.float16:
        return CUSPARSELT_MIN_N_FP16 is not None and n >= CUSPARSELT_MIN_N_FP16
    return False
