"""Where the unpack kernel (spmm_nm_unpack.py: each step's groups unpacked into one dense tile
for one tl.dot) takes a product of a few tokens, and its tile.

Cold L2, bf16, us (benchmarks/sweeps/nm_unpack_cold.py, results/nvidia-h200/2026-12-01/
at-9bb60c3/nm_unpack.txt; the route before: the decode kernel to 12 tokens, then the expand
kernel; dense bf16 30-33 us):
                        4096 x 14336 (64 x 32 tiles, split 4)    14336 x 4096 (split 1)
  tokens                 4      8      16                          4      8      16
  2:8  route          26.3   37.0   46.7                        23.8   33.8   46.0
       unpack         29.0   31.0   29.5                        30.1   29.9   30.4
  1:8  route          16.6   23.2   27.4                        15.2   22.0   26.2
       unpack         21.4   23.5   22.5                        21.9   21.9   22.3
  2:4  route          41.8   57.6   54.6                        40.5   55.7   55.1
       unpack         31.3   33.5   32.2                        32.5   32.4   32.8
At 32 and 64 tokens (at-48a0785/nm_unpack_wide.txt; the route: the expand kernel), one column
tile of 32 or 64 tokens (the tile costs the same for any tokens in it):
                        4096 x 14336 (64-token tile, split 4)    14336 x 4096 (split 1)
  tokens                32     64                                 32 (32-wide)  64 (64-wide)
  2:8  route          56.6   62.0                               56.8          63.4
       unpack         39.5   40.4                               31.3          44.2
  1:8  route          30.8   36.5                               32.8          36.8
       unpack         30.9   33.5                               24.1          27.8
  2:4  route          67.6   69.0                               72.2          69.6
       unpack         48.7   51.4                               36.5          39.4
(dense bf16 31-37 us: still faster than either at 32-64 tokens.) So it takes 2:4 from 4
tokens, 2:8 from 8 and 1:8 from 13 (at 8 a tie), to 64. At one token it lost everywhere (29-33
us against the select kernel's 11-22). On 4096-row weights the 64 row tiles leave the GPU idle:
split 4 took 2:8 at 16 tokens from 66.5 to 29.5 us; on 14336 rows splitting changed little
(30.4 -> 28.8). The tile's own size sets the time, not the weight's bytes (NOTES, nineteenth
session). Other patterns, dtypes and shapes were not timed: they keep their route (vectors:
below).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import nm_wgmma_tuning
from ._sizes import cdiv
from .nm_small_tiles import few_token_tiles


@dataclass(frozen=True)
class SpmmNmUnpackConfig:
    block_m: int
    block_g: int  # groups a step
    num_warps: int
    num_stages: int
    split: int  # ranges of groups, one program each (split_k.py sums them)
    block_n: int  # tokens a column tile


# (n, m) -> (fewest, most) tokens where it measured faster than the route, bf16
UNPACK_TOKENS = {(2, 4): (4, 64), (2, 8): (8, 64), (1, 8): (13, 64)}
UNPACK_DTYPES = (torch.bfloat16,)
UNPACK_BLOCK_M = 64
UNPACK_PROGRAMS = 256  # split-K until the row tiles times the ranges reach this (4096 rows: 4)
UNPACK_MAX_SPLIT = 4


# Vector-wise rows at 17-32 tokens where the wgmma kernel does not take them (nm_wgmma_tuning's
# table: 1:8 on 14336 rows, 23.4-24.1 us against the route's 32.7-71.9 at v=4), but v >= 16
# only to 24 tokens: at 32 the condensed-K kernel's full 32-token tile won (1:8 v=64 14336 x
# 4096: 17.7 against 24.0 us). Other token counts were not timed with vectors, nor weights of
# fewer than 4096 rows (nm_wgmma_tuning.VECTOR_MIN_ROWS).
# At 33-64 tokens (benchmarks/sweeps/nm_vector_few.py VECTOR_TOKENS=17,64, H100, cold L2, us,
# results/nvidia-h100/2026-12-06/at-8f343d3/nm_vector_few_33_64.txt; dense 44-48):
#                      14336 x 4096        4096 x 14336
#   tokens             33     64           33     64
#   2:8 v=4  route  128.1   61.7        121.2   61.2
#            unpack  44.6   45.3         38.4   39.2
#   2:8 v=64 route   45.7   23.9        145.5   53.7
#            unpack  44.6   45.0         38.7   39.0
#   1:8 v=4  route   83.8   33.9         81.1   33.0
#            unpack  27.3   27.0         29.6   30.3
#   1:8 v=64 route   25.2   14.2         75.1   29.0
#            unpack  27.2   26.9         29.4   30.3
# So the window runs to 64 tokens for v < 16, and for v >= 16 from 33 on weights of fewer than
# 8192 rows (on 14336 rows the condensed-K kernel's 64-row tiles fill the GPU and won; 1:8 v=64
# at 64 tokens is a near tie, 30.3 against 29.0). Only 2:8 and 1:8 were timed there (33 and
# 64 tokens): 2:4 keeps its route past 32.
UNPACK_VECTORS = True
UNPACK_VECTOR_TOKENS = (17, 64)
UNPACK_WIDE_VECTOR_MOST = 24  # tokens, for v >= 16 (at 17-32; from 33 see below)
UNPACK_WIDER_VECTOR_PATTERNS = ((2, 8), (1, 8))  # past 32 tokens
UNPACK_WIDE_VECTOR_MAX_ROWS = 8191  # v >= 16 at 33-64 tokens


# Block-wise 4:8 and 4:16 with 4-row vectors and 4-column blocks (v = b = 4) at 4-64 tokens
# (benchmarks/sweeps/nm_unpack_cold.py VECTOR=4 BLOCK=4, H100, cold L2, us, bf16,
# results/nvidia-h100/2026-12-06/at-35a24db/nm_unpack_blocks.txt; the route before: the decode
# kernel to 16 tokens, then the dense backend: the weight densified a call, then cuBLAS; the
# dense preference leaves this window to Triton now, ops/_dense.nm_prefers_dense):
#                        4096 x 4096             14336 x 4096            4096 x 14336
#   tokens           4    16    32    64      4    16    32    64      4    16    32    64
#   4:8   dense    15.7  16.9  14.7  15.1   43.4  43.9  44.8  44.4   44.9  45.7  46.1  47.4
#         route    17.1  37.3  29.7  30.2   43.1 113.5 112.7 112.5   46.1 118.7 115.7 116.3
#         unpack   12.7  12.8  18.5  27.8   30.8  30.8  46.9  47.7   31.1  31.9  51.0  90.4
#   4:16  route    11.9  21.6  26.3  26.5   25.7  61.1 103.8 103.5   29.1  61.9 106.3 107.4
#         unpack   10.8  11.3  15.1  21.6   23.3  23.0  32.4  33.8   23.8  24.1  40.4  68.6
# (unpack: the best of its tiles, which the rule below picks: 64 rows x 16 groups, 16 tokens a
# column tile split until 256 programs, or 64 tokens a tile unsplit on 8192+ rows past 16.)
# Blocks of 4 columns in 8- and 16-row vectors: the route was the decode kernel's 8-row tile to
# 16 tokens, its step spilling from 9 (nm_decode_tuning.DECODE_FOUR_WARPS); linear, H100, cold,
# the route -> the unpack kernel (benchmarks/sweeps/nm_route_cliffs.py, results/nvidia-h100/
# 2026-12-06/at-98f9b2a/; 4:16 at-100f813/nm_unpack_v8.txt), us, dense 15-44, all b = 4:
#                    4096^2                  14336 x 4096             4096 x 14336
#   tokens        4     8    12    16      4     8    12    16      4     8    12    16
#   4:8 v=8    19.2  29.5   621   621   41.7  71.2  2161  2160   41.2  75.4  2101  2086
#              12.9  12.9  13.1  12.9   30.7  30.5  30.9  30.9   31.5  31.7  31.8  31.9
#   4:8 v=16      -  28.7   618  30.4      -  70.8  2161  74.2      -     -     -     -
#                 -  12.9  13.1  12.9      -  31.4  31.4  31.8      -     -     -     -
#   4:16 v=8      -  17.2   336   336   24.6  39.3  1083  1083   32.0     -     -  1101
#                 -  10.9  10.9  10.8   23.7  23.2  23.1  23.1   23.7     -     -  24.5
# (At 2 tokens the route won on 14336 x 4096: 4:8 v=8 27.6 against 30.5, 4:16 17.2 against
# 23.7.) At 17-64 tokens the route was the dense backend for v = 8 (the weight densified a
# call; Triton alone: its gather kernel, 933 us for fp16 4:8 on 4096 x 14336 at 24 tokens in
# the nmfew suite) and the vector-wise tensor-core kernel for v = 16. The route -> the unpack
# kernel's windows widened to 64 tokens, its own tiles (nm_route_cliffs.py FORMS=route,wide,
# H100, cold L2, us, results/nvidia-h100/2026-12-06/at-5c48776/nm_route_wide.txt):
#                      4096^2                    14336 x 4096              4096 x 14336
#   tokens          17     32     64          17     32     64          17     32     64
#   4:8 v=8 b=4  30.1   29.9   29.9       109.5  109.7  110.1       113.4  113.7  114.7
#                19.0   18.6   28.6        45.6   46.7   47.5        52.5   51.5   93.8
#   4:16 v=8     26.5   26.0   26.5       100.6  100.6  101.4       104.6  105.0  104.1
#                14.1   15.3   21.8        32.3   32.7   34.4        40.6   41.0   68.1
#   4:8 v=16     50.4   34.4   34.3       121.5   77.9   78.2       166.5  109.0  108.5
#                19.1   18.8   28.7        45.8   46.5   47.9        52.3   51.1   93.3
# fp16 as bf16 (4:8 v=8: 19.1, 18.8, 28.7 / 45.8, 46.9, 47.7 / 52.3, 51.5, 93.2); dense
# 14-15 / 42-43 / 44-46: 0.48-1.29x dense now (4:16 ahead of it on the larger weights to 32
# tokens), the route 0.21-0.55x. 24 and 48 tokens alike. 4:16 v = 16 and other block-wise
# patterns, vectors, dtypes and 1-3 tokens were not timed: they keep their route.
# (n, m, vector, block) -> (fewest, most) tokens
UNPACK_BLOCK_WINDOWS = {
    (4, 8, 4, 4): (4, 64),
    (4, 16, 4, 4): (4, 64),
    (4, 8, 8, 4): (4, 64),
    (4, 16, 8, 4): (4, 64),
    (4, 8, 16, 4): (8, 64),
}
UNPACK_BLOCK_GROUPS = 16  # 32 spilled at 4:16 (sm_90 compile) and ran 1.1-1.6x slower
UNPACK_BLOCK_WIDE_MIN_ROWS = 8192  # past 16 tokens: one 64-token column tile, no split
UNPACK_BLOCK_MIN_ROWS = 4096  # (timed from 4096 rows; smaller weights keep their route)


# Element-wise 4:8 in vectors of 8+ rows at 8-16 tokens: the route was the decode kernel's
# 8-row tile (spilling from 9 tokens), the grouped expand kernel at 13-16 for v = 8, the
# tensor-core kernel's usual tiles at 16 for v = 16. Same sweep, route -> unpack, us:
#                      4096^2              14336 x 4096            4096 x 14336
#   tokens            8     12    16       8     12     16        8     12     16
#   4:8 v=8        30.7    616  27.1    73.0   2158   81.4        -      -      -
#                  21.2   21.3  21.0    63.0   63.1   63.3        -      -      -
#   4:8 v=16       30.7    617  41.8    72.6   2155   95.0     76.2   2123  134.5
#                  21.1   21.4  20.9    63.9   64.0   64.3     59.8   59.5   57.5
#   4:8 v=64       30.3    614  16.6   (35.3   35.7   28.7)    75.9   2125   46.6
#                  21.0   21.4  21.2    63.8   64.0   64.1     58.5   58.9   57.9
# v = 64 keeps the few-token tensor-core tiles where they apply (the bracketed route, and 16
# tokens: nm_small_tiles.few_token_tiles; since the sixty-third session 9-15 tokens too, the
# 16-token tile's work); at 4 tokens the route won on the tall weights
# (4:8 v=16 14336 x 4096 46.3 against 62.6). v = 32 lies between the timed vectors, untimed.
# The tiles as the element-wise window's at 16 tokens (32 groups a step, split to 256 programs).
# At 17-64 tokens (the route: the grouped expand kernel for v = 8, the vector-wise tensor-core
# kernel for v = 16), same sweep as the block-wise table above, route -> unpack, us:
#                      4096^2                    14336 x 4096              4096 x 14336
#   tokens          17     32     64          17     32     64          17     32     64
#   4:8 v=8      40.3   31.1   32.4       131.1   84.2   84.6       123.5   79.3   83.5
#                25.9   25.5   26.2        64.3   64.2   83.3        71.0   69.5   71.4
#   4:8 v=16     64.9   41.7   42.0       138.4   93.0   92.2       210.7  134.2  135.6
#                25.6   25.2   25.9        63.6   64.4   84.5        71.3   69.7   71.4
# (48 tokens: 34.1 -> 25.8, 87.0 -> 84.8, 85.3 -> 70.4 for v = 8; near ties on 14336 rows.)
UNPACK_FEW_VECTOR_WINDOWS = {(4, 8): (8, 64)}  # (n, m) -> tokens, for v % 8 == 0
# v >= 32 past 16 tokens untimed (the condensed-K tiles won 2:8 v=64 at 64 tokens, above)
UNPACK_FEW_WIDE_VECTOR_MOST = 16
UNPACK_FEW_VECTOR_MIN_ROWS = 4096
# fp16 too in these windows and the block-wise ones of 8+ rows: forced on fp16 (4:8 v = 16 and
# v = 8 b = 4 at 8 and 12 tokens) the kernel ran as in bf16, 21.4-21.6 / 63.0-63.2 us and
# 13.0-13.1 / 30.7-30.8 on 4096^2 / 14336 x 4096, where the 4-warp decode took 30.1-37.6 /
# 69.9-116.7 and 28.7-35.7 / 68.0-109.4 (results/nvidia-h100/2026-12-06/at-8f59f6b/
# nm_route_cliffs_fp16.txt; dense 14-17 / 41). 4:16 in fp16 untimed (the same 16-bit tile).
UNPACK_FEW_VECTOR_DTYPES = (torch.bfloat16, torch.float16)


def spmm_nm_unpack_config(
    n_cols: int, n: int, m: int, vector: int, block: int, dtype: torch.dtype, rows: int
) -> SpmmNmUnpackConfig | None:
    """The tile where the unpack kernel measured faster than the route (UNPACK_TOKENS;
    vector-wise rows by _takes_vectors and UNPACK_FEW_VECTOR_WINDOWS, block-wise by
    UNPACK_BLOCK_WINDOWS), else None."""
    if block != 1:
        return _block_config(n_cols, n, m, vector, block, dtype, rows)
    if not _takes_few_vector_tokens(n_cols, n, m, vector, dtype, rows):
        if dtype not in UNPACK_DTYPES:
            return None
        window = UNPACK_TOKENS.get((n, m))
        if window is None or not window[0] <= n_cols <= window[1]:
            return None
        if vector != 1 and not _takes_vectors(n_cols, n, m, vector, rows):
            return None
    split = max(1, min(UNPACK_MAX_SPLIT, UNPACK_PROGRAMS // cdiv(rows, UNPACK_BLOCK_M)))
    if n_cols <= 16:
        block_n, stages = 16, 3
    elif split > 1:  # (the split form was timed on 64-token tiles, 2 stages)
        block_n, stages = 64, 2
    else:
        block_n, stages = (32 if n_cols <= 32 else 64), 3
    return SpmmNmUnpackConfig(UNPACK_BLOCK_M, 32, 4, stages, split, block_n)


def _takes_vectors(n_cols: int, n: int, m: int, vector: int, rows: int) -> bool:
    fewest, most = UNPACK_VECTOR_TOKENS
    if not (UNPACK_VECTORS and rows >= nm_wgmma_tuning.VECTOR_MIN_ROWS):
        return False
    if not fewest <= n_cols <= most:
        return False
    if n_cols > 32 and (n, m) not in UNPACK_WIDER_VECTOR_PATTERNS:
        return False
    if vector < 16:
        return True
    return n_cols <= UNPACK_WIDE_VECTOR_MOST or (
        n_cols > 32 and rows <= UNPACK_WIDE_VECTOR_MAX_ROWS
    )


def _takes_few_vector_tokens(
    n_cols: int, n: int, m: int, vector: int, dtype: torch.dtype, rows: int
) -> bool:
    window = UNPACK_FEW_VECTOR_WINDOWS.get((n, m))
    if window is None or vector % 8 or rows < UNPACK_FEW_VECTOR_MIN_ROWS:
        return False
    if dtype not in UNPACK_FEW_VECTOR_DTYPES:
        return False
    if not window[0] <= n_cols <= window[1]:
        return False
    if vector >= 32 and n_cols > UNPACK_FEW_WIDE_VECTOR_MOST:
        return False
    return few_token_tiles(n_cols, vector, rows, n / m, 1, n) is None


def _block_config(
    n_cols: int, n: int, m: int, vector: int, block: int, dtype: torch.dtype, rows: int
) -> SpmmNmUnpackConfig | None:
    fewest, most = UNPACK_BLOCK_WINDOWS.get((n, m, vector, block), (1, 0))
    dtypes = UNPACK_FEW_VECTOR_DTYPES if vector >= 8 else UNPACK_DTYPES
    timed = dtype in dtypes and rows >= UNPACK_BLOCK_MIN_ROWS
    if not (timed and fewest <= n_cols <= most):
        return None
    if n_cols > 16 and rows >= UNPACK_BLOCK_WIDE_MIN_ROWS:
        return SpmmNmUnpackConfig(UNPACK_BLOCK_M, UNPACK_BLOCK_GROUPS, 4, 2, 1, 64)
    tiles = cdiv(rows, UNPACK_BLOCK_M) * cdiv(n_cols, 16)
    split = max(1, min(UNPACK_MAX_SPLIT, UNPACK_PROGRAMS // tiles))
    return SpmmNmUnpackConfig(UNPACK_BLOCK_M, UNPACK_BLOCK_GROUPS, 4, 3, split, 16)
