"""Configurations of the N:M decode kernel (kernels/spmm_nm_decode.py, 1-16 tokens): its tiles by
tokens, rows and pattern, and its split-K rule, from the H200 sweeps cited beside each. Which
kernel takes a product (the decode kernel up to tuning.decode_max_n tokens) is tuning.py's."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from ._sizes import cdiv, next_power_of_2
from .spmm_nm_decode import packed_bits, span_gather_fits

_memo = lru_cache(maxsize=4096)


@dataclass(frozen=True)
class SpmmNmDecodeConfig:
    block_m: int
    block_slots: int  # compressed slots per step (the launcher converts it to packed words)
    num_warps: int
    num_stages: int = 2
    split_programs: int = 0  # > 0: split-K toward this many programs (spmm_nm_decode_split)
    prefetch: bool = False  # own-row walk: the next step's loads before this step's gather
    gather_shared: bool = False  # one token: x's span of a step gathered from shared memory


# The most slots one packed word may cover. The walk steps by whole words, and a step's
# (rows, slots, tokens) products sit in registers: 1-bit offsets of 64-column blocks (64:128,
# b = 64) made a word 2048 slots, 8x the tiled step, and at 8 tokens the kernel spilled 27 KB a
# thread (sm_90 compile, Triton 3.6: 38.5 KB of spill stores a warp's step) and ran 1131 us on
# 4096 x 4096 (H100, results/nvidia-h100/2026-12-06/at-8f343d3/route_probe.txt). Wider offsets
# (8 bits there) give the 256-slot step the tiles were tuned for, the loop of 4:8 v=64 at 8
# tokens (no spill beyond its 320 B; 30.2 us there): not yet timed on a GPU for blocks.
DECODE_WORD_MAX_SLOTS = 256


def decode_bits(m: int, block: int, most: int | None = None) -> int:
    """Bits a packed offset takes for the decode kernel: spmm_nm_decode.packed_bits, widened
    (to 16 at most) until a word covers at most `most` slots (DECODE_WORD_MAX_SLOTS)."""
    most = DECODE_WORD_MAX_SLOTS if most is None else most
    bits = packed_bits(m, block)
    while 32 // bits * block > most and bits < 16:
        bits *= 2
    return bits


# Few-row weights at one token: 4 rows a program leave 4096 x 14336 with 1024 one-warp programs,
# under 8 warps a multiprocessor, too few loads in flight. Steps as wide as a row's slots up to
# 1024, on two warps from 1024, were faster there (benchmarks/sweeps/nm_decode_configs.py,
# results/nvidia-h200/2026-11-30/at-e11396c/nm_decode_configs.txt, bf16 us, warm L2):
#   4096 x 14336   2:8 18.6 -> 16.7   1:8 12.6 -> 11.7   2:4 52.0 -> 34.4 (split-K gave 36.8)
#   4096 x 4096    2:8  6.2 ->  5.6   1:8  5.0 ->  4.4   2:4 12.0 -> 10.5
# On 14336 rows (3584 programs) 256-slot steps on one warp stay best (2:8 13.8 against 16.4 us,
# results/nvidia-h200/2026-11-29-c). Grids between were not measured: the bound is the one seen.
DECODE_FEW_ROW_PROGRAMS = 1024
DECODE_WIDE_SLOTS = 1024

# Element-wise weights of 75% sparsity and more with long rows (K >= 8192) at 5-8 tokens (B
# padded to 8 columns) into linear's column-major output: tall tiles, 32 rows a program and 16
# slots a step on one warp, split-K toward 2048 programs. The lanes of a gather then cover rows
# of the same few groups (~2 sectors of B a gather instead of ~16), and the output is stored 32
# rows at a time. H200, bf16, cold L2 (rotated weight copies), 2-row tiles -> tall, us
# (benchmarks/sweeps/nm_decode_tall_cold.py, results/nvidia-h200/2026-11-30/at-ab4d15f):
#                      column-major out           row-major out
#   4096 x 14336  2:8  63.9 -> 34.8 (8 tokens)    48.1 -> 40.2
#                 1:8  26.6 -> 20.9               21.5 -> 26.4
#   14336 x 4096  2:8  33.6 -> 35.7               31.7 -> 37.1
#                 1:8  21.3 -> 20.1               20.1 -> 21.5
#   4096 x 4096   2:8  15.1 -> 15.3               12.8 -> 20.7
#   28672 x 8192  2:8  157.8 -> 128.1 (at-9520baa) 114.4 -> 128.7
#                 1:8  75.0 -> 68.2               64.0 -> 69.1
#   8192 x 28672  2:8  163.3 -> 113.5             164.4 -> 116.7
#                 1:8  88.0 -> 61.9               62.8 -> 65.0
#   8192 x 8192   2:8  48.4 -> 37.5 (1:8 21.6 -> 21.7)
# 5 tokens alike. The 2-row tiles run slowly into a column-major output on long rows (the two
# orders compile differently: Nsight Compute, at-02f1e78/ncu.txt); the tall tiles remove that,
# and elsewhere lose or tie. Warm-L2 timings (nm_decode_tall.py, at-02f1e78) had them
# winning everywhere at 8 tokens, the weight then served from L2; 2:4 lost even there, and at
# 2, 4 and 16 tokens they were within 10% or slower.
DECODE_TALL = SpmmNmDecodeConfig(32, 16, 1, split_programs=2048)
DECODE_TALL_COLS = 8  # B's padded width (next_power_of_2 of the tokens) where it runs
DECODE_TALL_MAX_DENSITY = 0.25  # n / m at most
DECODE_TALL_MIN_K = 8192  # the weight's dense row length at least
# The same weights on shorter rows into the column-major output keep 2-row tiles, their walk
# issuing the next step's loads before this step's gather (prefetch). Cold L2, 8 tokens, us
# (nm_decode_tall_cold.py, results/nvidia-h200/2026-11-30/at-92edd26/nm_cold_8_16.txt):
#   4096 x 4096 2:8 12.4 -> 11.7, 1:8 8.1 -> 7.8; 14336 x 4096 2:8 30.9 -> 30.9, 1:8 20.6 -> 19.6
# Into a row-major output it won on 4096^2 and lost on 14336 x 4096 1:8 (19.2 -> 19.9): off
# there. At one token the same sweep found the routes' tiles best and prefetch no gain.
DECODE_SHORT_ROWS = SpmmNmDecodeConfig(2, 256, 1, prefetch=True)
# Half-dense element-wise weights (2:4) at one token: 4 rows and 512 slots a step on one warp.
# Cold L2, bf16, route's tile -> this, us (nm_decode_tall_cold.py, results/nvidia-h200/
# 2026-11-30/at-54e4fc2/nm_cold_24.txt): 4096 x 14336 49.4 -> 37.9, 14336 x 4096 38.4 -> 31.7,
# 4096 x 4096 16.7 -> 12.4 (dense 31.5, 30.3, 13.6). The same tile lost on 2:8 and 1:8
# (nm_cold_hints.txt: 2:8 on 4096 x 14336 18.4 -> 27.0 us).
DECODE_HALF_DENSE = SpmmNmDecodeConfig(4, 512, 1)
# Where the kernel can gather from shared memory (n and m powers of two, whole groups in a
# word: 2:4, 4:8, 1:2, 8:16), the step loads x's span and gathers from it. Cold L2, bf16,
# DECODE_HALF_DENSE -> 4 rows on two warps, us (nm_decode_tall_cold.py "/g", results/
# nvidia-h200/2026-11-30/at-66451f2/nm_cold_shared.txt): 2:4 4096 x 14336 38.1 -> 30.1,
# 14336 x 4096 31.7 -> 28.9, 4096 x 4096 12.5 -> 10.6 (dense 33.0, 31.5, 13.5); then 8 rows on
# four warps (at-da81bec/nm_cold_shared_24.txt) 30.3 -> 28.9, 28.9 -> 27.5, 10.6 -> 10.3;
# 16 rows, 256 or 1024 slots, or split-K were slower. On 2:8 and 1:8 no shared form beat the
# routes' tiles beyond noise, taller tiles split toward 2048 programs included
# (at-da81bec/nm_cold_shared_tall.txt: 2:8 4096 x 14336 18.4 -> 20.4 at best).
DECODE_HALF_DENSE_SHARED = SpmmNmDecodeConfig(8, 512, 4, gather_shared=True)
# Vector-wise rows (v % 8 == 0) share a step's gathers 8 rows at a time on one warp, but the
# step's products (8 rows x 256 slots x B's padded width) outgrow its registers from 16 columns
# in 16 bits and from 4 in fp32 (2.4 KB of spill a thread at 8 tokens, sm_90 compile): 4:8 v=64
# at 12 tokens ran 614 us on 4096^2 and 4:8 v=8 b=4 2161 us on 14336 x 4096 (dense 17 / 42).
# 4 rows a program on four warps instead, through linear, H100, cold L2, us, 8 rows -> 4 x 4
# (benchmarks/sweeps/nm_route_cliffs.py, results/nvidia-h100/2026-12-06/at-98f9b2a/):
#                      4096^2                     14336 x 4096             dense
#   bf16 4:8 v=64  t12 614.4 -> 40.3                                       17
#   bf16 4:8 v=16  t12 616.7 -> 40.7             2154.9 -> 127.9           17 / 41
#   bf16 4:8 v=8 b=4  t12, t16  621 -> 38        2160 -> 120               17 / 42
#   fp32 4:8 v=64  t4, t8, t12  27.5, 170.8, 468.0 -> 21.8, 34.8, 58.6     33-50
#   fp32 2:8 v=8   t4, t8, t16  16.7, 91.1, 249.5 -> 13.7, 21.2, 33.2      34-50
#                  on 14336 x 4096              43.3, 364.1, 820.1 -> 36.3, 60.2, 102.5
# At 2 tokens in fp32 the two tie (14336 x 4096 53.1 against 55.4; 4096^2 22.6 against 19.7);
# in bf16 at 4-8 tokens the 8-row tile won on tall and long weights (14336 x 4096 v=16 at 4:
# 46.3 against 51.5), so it stays there. Where the unpack kernel takes these (nm_unpack_tuning's
# few-token vector windows) it is faster still; this is the rest's tile (fp16, fp32, 2:16...).
DECODE_FOUR_WARPS = SpmmNmDecodeConfig(4, 256, 4)
# Blocks of 64 columns in vectors: 4 rows on one warp, 1-8 tokens (the 8-row tile: 13.5 / 27.3
# us at one token on 4096^2 / 4096 x 14336, 30.0 / 71.5 at 8; this 12.0 / 24.8 and 16.8 /
# 55.4; nm_small_tiles' table, where the tensor-core tiles take tall weights and 9+ tokens).
DECODE_WIDE_BLOCKS = SpmmNmDecodeConfig(4, 256, 1)
DECODE_WIDE_BLOCK = 64  # columns a block
# B's padded columns at most for the 8-row tile: 16-bit values, wider (fp32; fp64 untimed)
DECODE_EIGHT_ROWS_MAX_WIDTH = (8, 2)
# fp32 element-wise and v < 8 rows past 8 tokens: the 2-row step on one warp spilled (292 B at
# 16 padded columns, 1600 B at 32, sm_90) and at 17-32 tokens (1:8 and sparser) ran 3-9x
# slower than on more warps. Through linear, H100, cold L2, us, the route (one warp) -> two /
# four warps (benchmarks/sweeps/nm_route_cliffs.py, results/nvidia-h100/2026-12-06/at-7fbbb42/
# nm_route_nmcliffsfp32.txt; dense 47-50 / 150-194):
#                   4096^2                               14336 x 4096
#   tokens      12                  24                  12                  24
#   1:8       24.1 -> 20.2/21.2  147.7 -> 35.9/35.3   69.5 -> 56.6/60.3   473 -> 110/108
#   1:8 v=4   34.8 -> 22.7/22.8  301.5 -> 409/40.2   102.8 -> 68.8/68.4  1090 -> 1479/128
#   2:16 v=4  35.1 -> 22.1/22.8  301.2 -> 409/40.1   103.8 -> 66.7/68.1  1091 -> 1478/127
#   4:8 v=4  104.4 -> 72.1/74.6          -           329.0 -> 238/247           -
#   2:8       39.2 -> 33.5/37.2          -           122.0 -> 104/116           -
# 16 and 32 tokens alike (4:8 and 2:8 leave the kernel past 16). Two warps to 16 columns, four
# to 32; 2-8 tokens keep one (no spill there); fp64 takes fp32's (untimed).
DECODE_WIDE_WARPS = {16: 2, 32: 4}  # B's padded columns -> warps, values wider than 16 bits
# The 8-row tile in 16 bits at 5-8 tokens: its one-warp step spilled 292-428 B (sm_90, the
# sixty-first session's audit). Through linear, H200, cold L2, us, one warp -> two
# (benchmarks/sweeps/nm_route_cliffs.py FORMS=route,w2,4r4w at 5 and 8 tokens alike, results/
# nvidia-h200/2026-12-06/at-6286a4d/nm_route_nmwarps.txt; dense 13-14 / 30 / 32):
#                   4096^2          14336 x 4096      4096 x 14336
#   2:16 v=8     12.2 -> 9.5      24.1 -> 22.9      30.4 -> 21.6
#   4:16 v=8     18.4 -> 13.8     40.4 -> 39.1      53.2 -> 37.6
#   1:32 v=8      7.6 -> 6.3      13.7 -> 11.5      12.8 -> 9.7
#   8:16 v=16    29.4 -> 22.8     68.9 -> 69.9      73.7 -> 69.0
#   16:32 v=64   29.8 -> 21.7          -            74.8 -> 66.8
#   fp16 8:32 v=64  17.5 -> 12.4       -            50.1 -> 32.4
# (- : the tensor-core tiles take it; 4 rows on four warps lost to both.) 1-4 tokens keep one
# warp (no spill; untimed on two).
DECODE_EIGHT_ROWS_WARPS = {8: 2}  # B's padded columns -> warps, 16-bit values

# Half-dense vector-wise weights (n / m >= 1/2) on few rows in 16 bits at 1-4 tokens: 4096 rows
# give the 8-row tile 512 one-warp programs, one warp a scheduler, and each 256-slot step is a
# dependent chain of loads (results/cpu/2026-12-06-halfdense-decode-analysis/report.md). Four
# warps over 1024 slots at 1-2 tokens, 512 at 4. Through linear, H100, cold L2, bf16, us, the
# route -> 512 / 1024 slots on four warps (benchmarks/sweeps/nm_route_cliffs.py, results/
# nvidia-h100/2026-12-06/at-53e510e/nm_route_nmhalfdense.txt; dense 15.6-16.8):
#                       1 token            2 tokens           4 tokens
#   4096^2 4:8 v=8    18.8 -> 15.7/15.0  20.5 -> 14.1/13.3  22.9 -> 16.7/19.4
#   4096^2 4:8 v=64   17.9 -> 15.0/14.5  19.7 -> 14.1/13.2  21.6 -> 16.0/18.1
#   4096^2 16:32 v=64 19.6 -> 14.8/14.5  19.6 -> 14.2/13.5  21.9 -> 16.2/18.4
# At 8 tokens they tied or lost (16:32 v=64 22.0 -> 26.4/30.7), and on 14336 x 4096 (1792
# programs) they tied or lost at 1-2 tokens (4:8 v=8 31.5 -> 35.8/33.4). Taken (caa0a3e) and
# timed against the walk before (s256w1, at-1825123/nm_route_halfdense_wide.txt): on 4096^2
# 1.2-1.5x faster at 1-4 tokens, bf16 and fp16; on 4096 x 14336, whose 28 steps of 256 slots
# split-K takes (DECODE_SPLIT_MIN_STEPS), 4:8 v=8 at one token 31.9 -> 42.0: long rows keep it.
DECODE_FEW_ROWS_WIDE_STEPS = {1: 1024, 2: 1024, 4: 512}  # B's padded columns -> slots a step
DECODE_FEW_ROWS_WIDE_PROGRAMS = 512  # 8-row programs at most (4096 rows)
DECODE_FEW_ROWS_WIDE_WARPS = 4


def _few_rows_wide_steps(
    n_cols: int, rows: int, row_slots: int, n: int, m: int, itemsize: int
) -> int:
    """Slots a step of the 8-row tile on four warps for half-dense weights on few rows of
    fewer than 24 steps of 256 slots at 1-4 tokens in 16 bits (the table above), else 0."""
    if itemsize != 2 or n <= 0 or 2 * n < m:
        return 0
    if not 0 < cdiv(rows, 8) <= DECODE_FEW_ROWS_WIDE_PROGRAMS:
        return 0
    if cdiv(row_slots, 256) >= DECODE_SPLIT_MIN_STEPS:  # (the usual 256-slot walk splits them)
        return 0
    return DECODE_FEW_ROWS_WIDE_STEPS.get(next_power_of_2(n_cols), 0)


@dataclass(frozen=True)
class SpmmNmSelectConfig:
    block_m: int  # rows a program (1, 2 or 4)
    block_g: int  # groups of a row a step
    num_warps: int


# One token, element-wise weights: x picked by the offsets' bits in registers, no gathers
# (kernels/spmm_nm_select.py), 16-bit values read as int32 pairs and offsets as bytes. Cold L2,
# the decode kernel's route -> the tile taken here, us (benchmarks/sweeps/nm_select_cold.py,
# results/nvidia-h200/2026-12-01/, dense bf16 ~31, fp32 ~56-62 on both shapes):
#                      4096 x 14336 (long rows)   14336 x 4096 (short rows)
#   bf16 2:8           18.5 -> 14.3               16.0 -> 13.7    (at-2e7f2fc/nm_select_cold.txt;
#   bf16 1:8           12.7 -> 12.2               11.7 -> 11.3     4096^2 and 28672 x 4096 too)
#   bf16 2:4           23.6 -> 23.6               23.2 -> 21.3
#   bf16 1:4           27.5 -> 19.6               22.9 -> 16.3    (at-d3ec53e/nm_select_other.txt)
#   bf16 4:8           36.0 -> 25.7               38.1 -> 26.0
#   fp16 2:8           18.2 -> 15.0               15.9 -> 14.7    (at-3d62f47/nm_select_fp16.txt)
#   fp16 1:8           12.7 -> 11.6               11.8 -> 11.5
#   fp16 2:4           28.7 -> 27.2               27.1 -> 24.0
#   fp32 2:8           46.5 -> 27.5               31.0 -> 23.9    (at-3d62f47/nm_select_fp32.txt)
#   fp32 2:4           34.3 -> 33.1               36.1 -> 33.9
# Where it lost, the decode kernel stays: bf16 1:2 (26.6 against 29.3 at best), 1:16, 2:16 and
# 4:16 (7.1, 12.0, 19.1 against 13.0, 15.4, 30.9: fifteen selects a value), fp32 1:8 (16.7
# against 20.5 on short rows). 1:4 and 4:8 in fp16 were not timed. The launcher picks 16-bit x
# by byte permutes where m is 8 (the route's `permute`, compiled only), bf16, cold, us, the tile
# as it was -> permuted (at-11b63d0/nm_select_permute.txt): 2:8 4 x 256 14.5 -> 12.5 and 14.3 ->
# 12.8, 2 x 128 13.0 -> 12.0 and 5.9 -> 5.4 (4096 x 4096), 22.1 -> 20.6 (28672 x 4096); 4:8
# 25.8 -> 25.3, 25.9 -> 23.2, 47.8 -> 42.7; 1:8 within 0.1 us or faster. fp16 4:8, the decode
# kernel's before, permuted 4 x 256 (at-0c0f802/nm_select_fp16.txt): 4096 x 14336 35.5 -> 25.8,
# 14336 x 4096 37.3 -> 23.5, 4096 x 4096 12.3 -> 9.9, 28672 x 4096 63.5 -> 44.1.
_LONG = SpmmNmSelectConfig(4, 256, 2)  # 4 rows x 256 groups a step on two warps
_LONG_HALF_DENSE = SpmmNmSelectConfig(2, 256, 2)
_SHORT = SpmmNmSelectConfig(2, 128, 1)
SELECT_LONG_K = 8192  # a row's dense length from which the long-row tile is taken
_HALF = (torch.bfloat16, torch.float16)
# (n, m, dtype) -> (long-row tile, short-row tile)
SELECT_TILES = {
    **{(2, 8, dt): (_LONG, _SHORT) for dt in _HALF},
    **{(1, 8, dt): (_LONG, _SHORT) for dt in _HALF},
    **{(2, 4, dt): (_LONG_HALF_DENSE, _SHORT) for dt in _HALF},
    (1, 4, torch.bfloat16): (_LONG_HALF_DENSE, _LONG),
    **{(4, 8, dt): (_LONG, _LONG) for dt in _HALF},
    (2, 8, torch.float32): (_SHORT, _SHORT),
    (2, 4, torch.float32): (_LONG_HALF_DENSE, _LONG_HALF_DENSE),
}


# Few rows, long rows: the tiles above leave most of the GPU idle on weights of up to 2048
# rows (a 2 x 128 tile on 1024 rows is 512 one-warp programs). Two rows x 512 groups a step on
# four warps, cold, us, the route -> this (results/nvidia-h200/2026-12-03/at-3e7b2b0/
# nm_select_small.txt, bf16; at-82a3814/nm_select_few_fp16.txt and nm_select_few_more.txt):
#                 1024 x 4096   1024 x 8192   2048 x 4096
#   bf16 2:8      4.5 -> 3.4    6.6 -> 4.7    4.9 -> 3.8
#   bf16 1:8      4.0 -> 2.6    6.6 -> 4.2    4.5 -> 3.6
#   fp16 2:8      4.4 -> 3.7    7.0 -> 5.4    4.9 -> 4.4
#   fp16 1:8      4.0 -> 2.5    6.0 -> 3.7    4.6 -> 3.6
#   bf16 1:4      6.5 -> 4.0    9.3 -> 5.9    6.8 -> 4.6
# bf16 4:8 (four kept of eight: more values a row) gains from a row a program on one warp
# instead (5.9 -> 4.7, 9.8 -> 7.2, 7.0 -> 6.2); the four-warp tile loses there (6.7, 11.0,
# 11.2). On 384 x 1536 no tile beat the route by more than 0.2 us.
SELECT_FEW_ROWS = 2048
SELECT_FEW_ROWS_MIN_K = 4096
SELECT_FEW_ROWS_TILE = SpmmNmSelectConfig(2, 512, 4)
_ONE_ROW = SpmmNmSelectConfig(1, 256, 1)
SELECT_FEW_ROWS_TILES = {
    **{(n, 8, dt): SELECT_FEW_ROWS_TILE for n in (1, 2) for dt in _HALF},
    (1, 4, torch.bfloat16): SELECT_FEW_ROWS_TILE,
    **{(4, 8, dt): _ONE_ROW for dt in _HALF},  # fp16 by bf16's (one kernel, 16-bit x pairs)
}


# The select kernel fed by a TMA ring (kernels/spmm_nm_select_ring.py: persistent programs, the
# weight's boxes copied STAGES steps ahead, x's candidates a step ahead, the finish's sums
# transposed through shared memory) on 1:8 weights of 4096+ rows and columns, cold, bf16, us,
# the select kernel's route -> this, dense in brackets
# (results/nvidia-h200/2026-12-03/at-beabbc0/nm_select_ring_p3.txt): 4096 x 14336 12.2 -> 8.4
# (31.7), 14336 x 4096 11.4 -> 9.0 (30.1), 4096 x 4096 5.2 -> 4.7 (13.6), 28672 x 4096 19.6 ->
# 13.6 (56.0): 16 rows x 128 units a step on four warps, two buffers, four programs a
# multiprocessor (three and two buffers: within 0.5 us; a TMA warp of its own slower). fp16
# alike (nm_select_ring_fp16.txt). At 2:8 it ties the select kernel (13.4 / 13.6 us on
# 4096 x 14336, 13.9 / 13.1 on 14336 x 4096): not routed. The refill's coordinates counted
# (no division a step) 0-0.4 us faster (at-e6aaaac/nm_select_ring.txt: 28672 x 4096 13.2 ->
# 12.9; 2:8 still ties, 13.2 / 13.6 and 13.3 / 12.9). x's halves picked by byte permutes
# (permute) and no candidate mask on whole steps (unmasked), at-11b63d0/nm_select_ring.txt:
# 1:8 8.3 -> 7.9, 8.9 -> 8.3, 4.8 -> 4.4, 13.1 -> 12.0; 2:8 13.2 -> 12.4, 13.5 -> 12.2, 6.0 ->
# 5.8, 21.6 -> 20.5, a tie again with the select kernel's permuted picks (12.5, 12.0, 5.3, 20.6).
SELECT_RING = dict(
    rows=16,
    warps=4,
    stages=2,
    programs_per_sm=4,
    producer=False,
    prefetch=True,
    counted=True,
    permute=True,
    unmasked=True,
)
SELECT_RING_PATTERNS = {(1, 8, dt) for dt in _HALF}
SELECT_RING_MIN_K = 4096  # the weight's dense row length and
SELECT_RING_MIN_ROWS = 4096  # rows, both at least


def spmm_nm_select_ring_config(
    n_cols: int, n: int, m: int, vector: int, block: int, dtype: torch.dtype, k: int, rows: int
) -> dict | None:
    """The ring kernel's launch options where it measured faster than the select kernel
    (SELECT_RING), else None; the caller checks the kernel's `supports` and Hopper."""
    element_wise = n_cols == 1 and vector == 1 and block == 1
    large = k >= SELECT_RING_MIN_K and rows >= SELECT_RING_MIN_ROWS
    return SELECT_RING if element_wise and large and (n, m, dtype) in SELECT_RING_PATTERNS else None


def spmm_nm_select_config(
    n_cols: int,
    n: int,
    m: int,
    vector: int,
    block: int,
    dtype: torch.dtype,
    k: int = 0,
    rows: int = 0,
) -> SpmmNmSelectConfig | None:
    """The select kernel's tile where it measured faster than the decode kernel (SELECT_TILES,
    or SELECT_FEW_ROWS_TILES on few long rows), else None; `k` the weight's dense row length,
    `rows` its rows (0: unknown)."""
    tiles = SELECT_TILES.get((n, m, dtype))
    if not (n_cols == 1 and tiles is not None and vector == 1 and block == 1):
        return None
    if k >= 2**31 - 2**20:  # (its bit and column offsets are int32 unless 2:8 is 16-bit)
        return None
    few_rows = 0 < rows <= SELECT_FEW_ROWS and k >= SELECT_FEW_ROWS_MIN_K
    if few_rows and (n, m, dtype) in SELECT_FEW_ROWS_TILES:
        return SELECT_FEW_ROWS_TILES[(n, m, dtype)]
    return tiles[0] if k >= SELECT_LONG_K else tiles[1]


@_memo
def spmm_nm_decode_config(
    n_cols: int,
    vector: int,
    rows: int = 0,
    row_slots: int = 0,
    n: int = 0,
    m: int = 0,
    block: int = 1,
    column_major_out: bool = False,
    itemsize: int = 2,
) -> SpmmNmDecodeConfig:
    """Decode kernel (N <= 16), from the H200 sweeps of 2026-11-29 (benchmarks/sweeps/
    nm_decode_configs.py; results/nvidia-h200/2026-11-29-c): one warp and 256 slots a step.
    Element-wise, 4 rows a program at one token (2:8 13.8 us, 2.2x dense; 1:8 10.7 us; 2:4 30.4
    us), 2 rows from 4 tokens on. Vector-wise tiles of 8 rows share their columns (2:8 v=64:
    8.2 us, 3.7x dense). Few-row weights at one token step over up to 1024 slots (above);
    sparse element-wise weights at 5-8 tokens into a column-major output take tall tiles on
    long rows (DECODE_TALL, above), else prefetching 2-row tiles (DECODE_SHORT_ROWS); half-dense
    element-wise weights at one token DECODE_HALF_DENSE(_SHARED). `rows`
    and `row_slots` (compressed slots a row), `n` and `m` (the pattern) 0 when unknown;
    `block` the pattern's block along K; `itemsize` the values' bytes. Vector-wise rows past
    DECODE_EIGHT_ROWS_MAX_WIDTH take 4 rows on four warps (DECODE_FOUR_WARPS), blocks of 64
    columns 4 rows on one warp below it (DECODE_WIDE_BLOCKS); fp32's 2-row tiles past 8 tokens
    more warps (DECODE_WIDE_WARPS), the 8-row tile at 5-8 tokens two (DECODE_EIGHT_ROWS_WARPS),
    and on few rows of half-dense weights wider steps on four (DECODE_FEW_ROWS_WIDE_STEPS)."""
    if vector % 8 == 0:
        if next_power_of_2(n_cols) > DECODE_EIGHT_ROWS_MAX_WIDTH[itemsize > 2]:
            return DECODE_FOUR_WARPS
        if block >= DECODE_WIDE_BLOCK:
            return DECODE_WIDE_BLOCKS
        wide = _few_rows_wide_steps(n_cols, rows, row_slots, n, m, itemsize)
        if wide:
            return SpmmNmDecodeConfig(8, wide, DECODE_FEW_ROWS_WIDE_WARPS)
        return SpmmNmDecodeConfig(8, 256, DECODE_EIGHT_ROWS_WARPS.get(next_power_of_2(n_cols), 1))
    sparse = 0 < n <= DECODE_TALL_MAX_DENSITY * m
    long_rows = n > 0 and row_slots * m // n >= DECODE_TALL_MIN_K
    element_wise = vector == 1 and block == 1
    tall_width = next_power_of_2(n_cols) == DECODE_TALL_COLS
    if element_wise and sparse and tall_width and column_major_out:
        return DECODE_TALL if long_rows else DECODE_SHORT_ROWS
    if n_cols == 1:
        if element_wise and 0 < m <= 2 * n:
            fits = span_gather_fits(n, m, block, n_cols, vector, DECODE_HALF_DENSE_SHARED.block_m)
            if fits and row_slots * m // n < 2**31:  # (its span's columns are int32)
                return DECODE_HALF_DENSE_SHARED
            return DECODE_HALF_DENSE
        if 0 < cdiv(rows, 4) <= DECODE_FEW_ROW_PROGRAMS:
            slots = min(DECODE_WIDE_SLOTS, max(256, next_power_of_2(row_slots)))
            return SpmmNmDecodeConfig(4, slots, 2 if slots >= DECODE_WIDE_SLOTS else 1)
        return SpmmNmDecodeConfig(4, 256, 1)
    warps = DECODE_WIDE_WARPS.get(next_power_of_2(n_cols), 1) if itemsize > 2 else 1
    return SpmmNmDecodeConfig(2, 256, warps)


# Split-K for the decode kernel (spmm_nm_decode.py): rows of at least DECODE_SPLIT_MIN_STEPS
# steps are cut into ranges of DECODE_SPLIT_RANGE_STEPS steps or more, doubling while the grid
# stays within DECODE_SPLIT_PROGRAMS programs. Swept on the H200 (benchmarks/sweeps/
# nm_decode_split.py, results/nvidia-h200/2026-11-30/at-f297d15/nm_decode_split.txt): only long
# rows gain. 2:4 on 4096 x 14336 (28 steps) ran 51.3 -> 36.8 us at 1 token with 4 ranges, 48.9
# -> 42.5 at 4, 79.2 -> 58.3 at 8; rows of 7-14 steps (1:8, 2:8, 4096-column 2:4) gained
# nothing or lost (2:8 at 8 tokens 33.0 -> 41.9 us with 2 ranges).
DECODE_SPLIT_MIN_STEPS = 24
DECODE_SPLIT_RANGE_STEPS = 6
DECODE_SPLIT_PROGRAMS = 8192


def spmm_nm_decode_split(rows: int, block_m: int, steps: int, target_programs: int = 0) -> int:
    """The ranges a row's walk is cut into. `target_programs` (a config's split_programs, the
    tall tiles'): as many as bring the grid toward it, 4 steps a range at least."""
    programs = cdiv(rows, block_m)
    if target_programs:
        return max(1, min(steps // 4, target_programs // programs))
    if steps < DECODE_SPLIT_MIN_STEPS:
        return 1
    split = 1
    while (
        programs * split * 2 <= DECODE_SPLIT_PROGRAMS
        and steps >= DECODE_SPLIT_RANGE_STEPS * split * 2
    ):
        split *= 2
    return split
