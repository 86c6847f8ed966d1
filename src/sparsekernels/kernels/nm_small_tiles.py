"""The vector-wise N:M tensor-core kernel's small tiles (kernels/spmm_nm.py): where a small
weight gives its usual 64 x 256 tiles few programs, and where few tokens (up to 64) do on any
weight (tuning.spmm_nm_config takes them)."""

from ._sizes import cdiv, next_power_of_2

# Weights too small for the tensor-core tiles of 64 rows x 256 tokens (MiniLM's, BERT-base's):
# where those give few programs, smaller tiles won on the H200 in bf16 at v = 64 (cold L2,
# results/nvidia-h200/2026-12-02/at-6ac7b02/nm_vw_tiles.txt): 16 x 32 tiles (64 slots a step)
# below 256 tokens, 32 x 64 past, e.g. 2:8 on 384 x 1536 5.0-7.4 -> 4.6-5.3 us (cuBLAS 4.7-5.3),
# 768 x 768 at 256 tokens 5.1 -> 3.6; 1:8 on 384 x 1536 3.4-5.2 -> 3.0-3.5 (cuBLAS 4.7-5.4).
# Not on longer K (768 x 3072 at 64 tokens 9.5 -> 12.3), nor from 24 programs below 256 tokens
# (1536 x 384: 2.6 -> 2.9), nor past 24 (3072 x 768 at 256 tokens: 5.3 -> 5.6). These tiles
# read linear's x^T in place from 256 tokens, or below it where K <= 768: its row-major copy
# cost 1.7-2.5 us a call, the strided read 0.3-1.6 (at-4985cf3/nm_vw_tiles_strided.txt);
# through linear (at-7b97b1e against at-6445e04) 768 x 768 at 256 tokens 2:8 5.5 -> 4.4 us,
# 1:8 4.7 -> 3.6, 1536 x 384 2:8 5.2 -> 4.1, 384 x 384 at 64-112 1:8 3.7 -> 2.6, 2:8 4.3 ->
# 3.8 (768 x 768 2:8 there 5.1 -> 5.3, 1:8 4.5 -> 4.1). The 16 x 32 tiles on K = 1536 lost
# (384 x 1536 2:8 at 64-112 tokens 6.6 -> 9.2 into linear's column-major out); 64 x 256 2-3x.
# Why (sm90_compile_stats.py "nm vector-wise", ALIGNED=1): in place, x^T is contiguous along K,
# where the kept columns are scattered, so each is a lone 2-byte load, too narrow for cp.async:
# the step loads synchronously (a 360-instruction loop against 122 pipelined), every step.
SMALL_TILES_MAX_K = 1536
SMALL_TILES_MAX_PROGRAMS = (12, 24)  # (below 256 tokens, from 256)
SMALL_TILES_IN_PLACE_MAX_K = 768  # (below 256 tokens)


def usual_block_n(n_cols: int) -> int:
    """The tokens of the vector-wise kernel's usual (64-row) tile."""
    return 256 if n_cols >= 256 else max(16, next_power_of_2(n_cols))


def vector_wise_small_tiles(n_cols: int, vector: int, rows: int, k: int) -> bool:
    """Whether a half-precision vector-wise product takes the small tensor-core tiles."""
    if vector % 64 or k > SMALL_TILES_MAX_K:
        return False
    programs = cdiv(rows, 64) * cdiv(n_cols, usual_block_n(n_cols))
    return programs <= SMALL_TILES_MAX_PROGRAMS[n_cols >= 256]


def small_tiles(n_cols: int, k: int) -> tuple[int, int, int, int, int, bool]:
    """(block_m, block_s, block_n, num_warps, num_stages, b_in_place) of the small tiles."""
    if n_cols >= 256:
        return 32, 64, 64, 4, 3, True
    return 16, 64, 32, 4, 2, k <= SMALL_TILES_IN_PLACE_MAX_K


# At 16-32 tokens the usual tiles (64 rows) give a weight rows / 64 programs (64 on 4096
# rows, for 132 SMs) and 32 slots a step: 16- or 32-row tiles of 128 slots a step ran 1.2-3.6x
# faster (H100, bf16, v = 64, cold L2, us; results/nvidia-h100/2026-12-05/at-9ec3287/
# nm_vw_tiles_v64.txt, at-d750428/nm_vw_tiles_64_128*.txt; cuBLAS on the dense weight
# 17 / 43 / 45, densify + cuBLAS, the dense backend, 31 / 111 / 114):
#                           16 tokens                       32 tokens
#                    4096^2  14336x4096  4096x14336   4096^2  14336x4096  4096x14336
#   4:8    usual       46.1     53.7       161.7        46.2     54.8       163.2
#          16 rows     14.8     30.2        44.4        15.6     31.5        47.6
#          32 rows     16.4     26.6        53.1        18.6     37.4        61.4
#   8:32   usual       21.3     27.1        81.7        22.5     27.3        82.4
#          16 rows      7.4     17.8        23.9         7.9     17.3        25.4
#          32 rows      7.5     14.7        27.6         8.8     20.1        31.6
#   64:128 usual       24.7     35.3        84.5        25.0     36.4        86.1
#   (b=64) 16 rows     10.0     26.0        28.5        11.5     28.3        33.5
#          32 rows     10.0     23.1        31.2        12.0     35.4        35.7
# (16:32 as 4:8.) 16 tokens: 16-row tiles (4 stages), 32-row ones (3) on 8192+ rows;
# 32 tokens: 16 x 32 tiles. Timed at v = 64 and densities 1/4-1/2 only: other vectors and
# sparser patterns (1:8 v=64 at 25-32 tokens on tall weights: the usual tile 17.7 us, fast)
# keep the usual tiles.
# Below 16 tokens these patterns took the decode kernel, which block-wise 64:128 (b = 64)
# sends to 1.1-2.0 ms at 8 tokens (dense 16-42 us). The 32 x 128 x 16 tile against linear's
# route before, us (H100, cold L2; the tile plus linear's ~1.8 us copy of x^T from 2 tokens;
# results/nvidia-h100/2026-12-06/at-8f343d3/nm_vw_tiles_*_few.txt, nm_vector_few_v64_few.txt):
#                        4096^2           14336 x 4096        4096 x 14336
#   tokens               1    4    8      1     4     8       1     4     8
#   4:8    route      18.0 21.7 30.2   31.8  45.6  71.7    31.1  44.1  76.7
#          32 rows    17.4 24.6 24.6   26.9  37.9  37.3    59.6  90.8  92.9
#   8:32   route      10.9 13.3 18.0   16.4  27.1  40.7    32.2  36.3  51.1
#          32 rows     7.4 12.7 12.5   14.6  20.4  20.7    29.0  42.5  45.3
#   64:128 route      17.8    - 1131   52.2     -  2032       -     -     -
#   (b=64) 32 rows    14.6 18.8 19.0   23.5  36.1  36.6    46.8  65.8  67.4
# (16:32 as 4:8; 64:128 at 2 tokens as at 4.) So the tile from 8192 rows, and for blocks of 64
# columns on any weight (from 9 tokens since: below); on 4096 rows the route stays (4096 x 14336
# gives 32-row tiles 128 programs on a long K; 8:32 on 4096^2 won, not taken). Timed at 1, 4 and 8
# tokens; 9-15 lie between these and the 16-token rule. Only patterns keeping 4+ of a group were
# timed: 2:4, 2:8, 1:2 and 1:4 (the sparse tensor cores' where they measured faster, the decode
# kernel's at one token on tall weights) keep their route below 16 tokens.
FEW_TOKEN_TILES_MAX_N = 32
FEW_TOKEN_TILES_TALL_ROWS = 8192
FEW_TOKEN_TILES_VECTOR = 64
FEW_TOKEN_TILES_MIN_DENSITY = 1 / 4
# Blocks of 64 columns on weights of fewer rows took these tiles at 1-15 tokens, for the decode
# kernel's 2048-slot words. With 256-slot words (nm_decode_tuning.DECODE_WORD_MAX_SLOTS) its
# 4-row tile (DECODE_WIDE_BLOCKS) ran faster to 8 tokens, bf16 64:128 b=64, H100, cold, us, the
# decode kernel alone against these tiles through linear (results/nvidia-h100/2026-12-06/
# at-100f813/nm_decode_blocks.txt, nm_vector_few_64.txt; linear adds ~1.8 us copying x^T):
#                   4096^2                    4096 x 14336              14336 x 4096
#   tokens        1     4     8    15       1     4     8    15       1     4     8    15
#   decode 4r  12.0  14.7  16.8  52.0    24.8  35.7  55.4   174    27.5  33.6  55.2   181
#   tiles      14.6  20.9  20.8  20.7    46.7  64.5  64.2  65.5    23.0  37.1  37.0  37.2
#   dense      15.4  16.5  16.4  16.6    43.1  43.2  43.2  43.7    40.0  40.2  40.7  41.0
# So blocks of 64 on fewer than 8192 rows take the tiles from 9 tokens (tall weights from 1).
FEW_TOKEN_TILES_BLOCK = 64  # block-wise patterns (columns a block) whose decode is slow past 8
FEW_TOKEN_TILES_BLOCK_FEWEST = 9  # tokens, on weights of fewer than 8192 rows
FEW_TOKEN_TILES_MIN_KEPT = 4  # n of n:m, below 16 tokens
# At 9-15 tokens on fewer than 8192 rows these patterns took the decode kernel's 4-row tile
# on four warps or the unpack kernel: 16:32 v=64 on 4096^2 at 12 tokens 40.4 us, 4:8 21.2
# (dense 16.7; H100, results/nvidia-h100/2026-12-06/at-53e510e/nm_route_nmhalfdense.txt),
# where the 16-token tile (16 rows, B padded to 16 columns as at 9-15) ran 14.8 on 4:8. It
# does the same work at 9-15 tokens as at 16, so it takes them. Timed after (H100, cold, us,
# the route before -> this; at-e857cf5/nm_route_nmsixteen.txt, 9-15 tokens alike):
#                  4096^2 at 12    4096 x 14336 at 12
#   bf16 16:32       39.8 -> 16.4     129.5 -> 46.4
#   bf16 4:8         21.0 -> 16.2      58.1 -> 46.8
#   bf16 8:32        22.1 -> 10.5      67.1 -> 25.5
#   fp32 4:8         58.0 -> 32.9     194.5 -> 102.4
#   dense            16.6             43.8 (bf16)
# At 5-8 tokens the route (the decode kernel's 8-row step) ran 21.9 / 21.3 / 13.1 / 34.7 and
# 66.6 / 58.7 / 34.8 / 110.4 (at-e03a8a3/nm_route_from5.txt); the tile forced there 25.7 on
# 4096^2 16:32, its B padded to 8 columns (unaligned loads, ops/_layout.aligned_rows). B now
# padded to 16 at 2-16 tokens, the tile at 5-8 does its 9-15 work: from 5 (not yet timed so;
# at 1-4 the half-dense wide decode steps ran 13-16 us, nm_decode_tuning). Block-wise
# patterns keep the decode kernel below 9 (64 columns: its 4-row tile, the table before).
FEW_TOKEN_TILES_SIXTEEN_FEWEST = 5  # tokens, on weights of fewer than 8192 rows


# At 33-64 tokens the usual tiles (64 rows x 64 tokens) give 4096 rows 64 programs: 16-row
# tiles of 128 slots a step won on 4096 x 14336 and lost on 14336 x 4096 (224 programs), any
# density. bf16, v = 64, H100, cold L2, us, the usual tile -> 16 x 128 x 64 (benchmarks/sweeps/
# nm_vw_tiles.py, results/nvidia-h100/2026-12-06/at-53e510e/nm_vw_tiles_14336.txt; cuBLAS
# 44.8 / 42.5):
#                   4096 x 14336 at 33 / 48       14336 x 4096 at 33
#   2:8            50.8 / 51.2 -> 36.6 / 36.5       21.0 -> 29.2
#   1:8            17.1 / 18.6 -> 14.9 / 15.2        7.5 -> 16.2
#   2:4           103.6 / 103.8 -> 70.0 / 70.1      42.4 -> 53.7
# Taken, on 4096^2 at 33-64 tokens 2:8 13.9-14.9 -> 11.0-11.7 (cuBLAS 14.7-15.1), 2:4 29.6 ->
# 21.8, 1:8 equal; 8192 rows (128 programs) lost at 2:8 and 1:8 (at-1825123/nm_vw_tiles_middle).
FEW_TOKEN_TILES_MIDDLE_MAX_N = 64
FEW_TOKEN_TILES_MIDDLE_MAX_PROGRAMS = 64  # the usual tiles' programs at most


def few_token_tiles(
    n_cols: int, vector: int, rows: int, density: float, block: int = 1, kept: int = 0
) -> tuple[int, int, int, int, int] | None:
    """(block_m, block_s, block_n, num_warps, num_stages) at 1-32 tokens (below 16 for
    patterns keeping `kept` (n) of a group: tall weights and 64-column blocks, and from 9
    tokens the 16-token tile) and at 33-64 where the usual tiles give few programs, else
    None."""
    if vector != FEW_TOKEN_TILES_VECTOR or n_cols > FEW_TOKEN_TILES_MIDDLE_MAX_N:
        return None
    if n_cols > FEW_TOKEN_TILES_MAX_N:
        programs = cdiv(rows, 64) * cdiv(n_cols, usual_block_n(n_cols))
        return (16, 128, 64, 4, 3) if programs <= FEW_TOKEN_TILES_MIDDLE_MAX_PROGRAMS else None
    if density < FEW_TOKEN_TILES_MIN_DENSITY:
        return None
    if n_cols > 16:
        return 16, 128, 32, 4, 3
    if n_cols < 16:
        if kept < FEW_TOKEN_TILES_MIN_KEPT:
            return None
        tall = rows >= FEW_TOKEN_TILES_TALL_ROWS
        wide_blocks = block >= FEW_TOKEN_TILES_BLOCK and n_cols >= FEW_TOKEN_TILES_BLOCK_FEWEST
        if tall or wide_blocks:
            return 32, 128, 16, 4, 3
        below_nine = n_cols < FEW_TOKEN_TILES_BLOCK_FEWEST
        if n_cols < FEW_TOKEN_TILES_SIXTEEN_FEWEST or (block > 1 and below_nine):
            return None  # (block-wise at 5-8 untimed there: the decode kernel, as before)
    if rows >= FEW_TOKEN_TILES_TALL_ROWS:
        return 32, 128, 16, 4, 3
    return 16, 128, 16, 4, 4
