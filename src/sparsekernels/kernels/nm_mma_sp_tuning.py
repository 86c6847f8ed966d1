"""Where the sparse-tensor-core kernel (spmm_nm_mma_sp.py: mma.sp, A and its metadata as
stored) takes a product of a few tokens, and its tile and split.

Cold L2, bf16, 2:4, us a call (benchmarks/sweeps/nm_mma_sp_cold.py; results/nvidia-h200/
2026-12-01/at-3c2308c/nm_mma_sp_natural_b.txt; the route before: the select kernel at one
token, the wgmma kernel at 4-32, the unpack kernel past 8 tokens on 14336 rows):
                    4096 x 14336            14336 x 4096            4096 x 4096
  tokens           1     8    16    32     1     8    16    32     1     8    16    32
  dense         31.7  33.0  33.3  34.1  31.3  30.3  30.9  31.3  13.6  13.9  14.2  14.4
  route         23.8  24.3  28.7  37.8  21.6  26.1  33.5  36.2   9.1  10.0  11.8  14.2
  mma.sp        19.9  20.8  24.1  31.8  20.2  20.5  24.3  32.4   7.9   8.4  10.3  13.4
(mma.sp: one 8-token column tile with B permuted in the kernel at 1-8 tokens; 16-token
tiles with B permuted by a launch before (permuted_b, 1.5-2 us: cheaper than the kernel's
shared-memory stores at 16 tokens) past 8.) Every tile is one m16 tile a warp (64 rows a
program) and 8 k32 blocks a step; two m16 tiles a warp, 4 blocks a step, 32-token tiles and
prefetching a step ahead all measured slower.

2:8 and 1:8 (results/nvidia-h200/2026-12-01/at-3b7ddd6/nm_mma_sp_m8.txt; the route: the
select kernel at 1-3 tokens, the wgmma kernel at 4-32, 1:8 at 8-32):
                    4096 x 14336            14336 x 4096            4096 x 4096
  tokens           1     8    16    32     1     8    16    32     1     8    16    32
  2:8  route    14.7  18.8  21.5  28.2  13.0  20.5  23.8  29.8   6.0   8.5   9.3  11.7
       mma.sp   14.9  15.2  18.7  26.6  16.1  16.6  19.6  28.6   6.7   7.1  10.0  12.5
  1:8  route    12.2  17.5  19.9  27.0  11.3  17.8  20.7  24.8   5.3   7.8   8.4  10.8
       mma.sp   12.7  13.1  17.1  25.0  14.0  14.9  17.4  25.5   6.1   6.6   9.4  11.9
At 2-3 tokens (at-940861f/nm_mma_sp_m8_few.txt) the select kernel takes 21-27 us for 2:8
where this one takes 14-16, and 1:8 ties it at 2 tokens. So 2:8 from 2 tokens, 1:8 from
3, to 8, and to 16 on weights of LARGE_WEIGHT elements or more (the launch that permutes B
costs 1.5-2 us, too much beside a small weight's 9 us); at 17-32 the wgmma kernel stays
(within 7% either way).

B permuted in the kernel and loaded for 16-byte shared stores (wide_b_stores; us,
at-940861f/nm_mma_sp_wide.txt; 4-byte stores / 16-byte stores / B permuted before):
                     4096 x 14336        14336 x 4096        4096 x 4096
  2:4  8 tokens     20.6 21.7    -      20.9 21.3    -       8.4  8.6    -
      16 tokens       -  23.8  24.1       -  24.9  24.5        -   9.6  11.0
  2:8  8 tokens     15.3 14.6    -      16.4 15.3    -       7.0  6.7    -
      16 tokens       -  19.5  18.9       -  20.3  19.5        -   8.4   9.7
  1:8 16 tokens       -  22.2  17.1       -  23.8  17.4        -   9.6   9.5
So 2:8 takes the 16-byte stores at 2-8 tokens, and 2:4 and 2:8 on small weights at 9-16
(2:8 there 8.4 against the wgmma kernel's 8.8); 1:8 keeps the 4-byte ones.

The split fills one wave of four programs an SM (the kernel's 62-92 registers would allow
more, which measured no faster), each range two steps at least. fp16 runs the same kernel
as fast (at-940861f/nm_mma_sp_fp16.txt: 2:4 at 8 tokens 20.6 / 20.7 / 8.4 us where its
route took 52.8 / 50.4 / 19.5) and takes the same windows; 1:8 in fp16 on small weights at
9-16 tokens too (8-token tiles, B permuted in the kernel: 8.8 us on 4096 x 4096 at 16 where
the route, with no wgmma window in fp16, took 13.5 through linear, at-50fef63).

More bytes in flight for 2:8 and 1:8 at 1-8 tokens: waves of 8 programs an SM and up to 16
ranges (us, at-9995712/nm_mma_sp_split.txt and at-825820b/nm_mma_sp_few_w8.txt; 4 / 8
programs an SM, B as the route takes it; prefetching a step ahead measured no faster):
                     4096 x 14336        14336 x 4096        4096 x 4096
  2:8  1 token      13.9 13.3           15.1 12.9            6.4  6.3
       8 tokens     14.6 14.0           15.2 13.4            6.7  6.8
  1:8  2 tokens     13.1 12.7           14.9 13.0            6.2  6.2
       8 tokens     13.2 12.9           14.9 13.1            6.3  6.3
(2:4, and 16-token tiles, measured slower with 8.) So 2:8 took one token from the select
kernel on large weights with K > rows (4096 x 14336: 14.5 -> 13.5 us through linear,
at-c0ae491/llm_linear; on 14336 x 4096 it measured 13.1 -> 13.1-13.3, and 4096 x 4096's 6.0
stays), and 1:8 two tokens (13.5 / 12.6 / 6.7). The select kernel's permuted picks took that
token back (results/nvidia-h200/2026-12-03/at-0c0f802/nm_select_bf16.txt, fp16.txt: 4096 x
14336 2:8 13.7 -> 12.5 bf16, 13.6 -> 12.8 fp16).

Linear's column-major out stored by runs of rows (out_m_fastest; at-825820b/nm_mma_sp_out.txt,
into linear's out as now / by rows): 2:8 at 16 tokens 21.3 / 18.7 us on 4096 x 14336 and
21.7 / 20.4 on 14336 x 4096; at 8 tokens 0.0-0.4 faster for 2:8 and 1:8; 2:4 mixed within
0.4 through linear; 2:4 and 1:8 at 16 tokens 0.1-1.0 slower, 2:8 on 4096 x 4096 at 16 as
fast in the sweep but 0.5 slower through linear. So by rows for 2:8 and 1:8 to 8 tokens, and
2:8 to 16 on large weights.

Two m16 tiles a warp (128 rows a program) share B's copy (L2 to shared memory) and its
shared-memory reads with twice the rows: Nsight Compute had 1:8 at 8 tokens on 4096 x 14336
with its L1 77% busy and DRAM 37% (at-4fd8525/ncu.txt), B's traffic a quarter of 2:4's A
bytes a step. Cold, us (at-c6b0743/nm_mma_sp_m2.txt; one / two tiles a warp, B as the route
takes it, row-major out):
                     4096 x 14336        14336 x 4096        4096 x 4096
  1:8  1 token      12.3 11.5 (12.4)    12.9 11.5 (11.6)     6.2  6.3 (5.4)
       2 tokens     12.8 12.4           13.2 12.1            6.3  6.3
       8 tokens     13.2 12.4           13.3 12.1            6.6  6.6
  2:8  8 tokens     14.5 14.9           14.5 15.8            7.0  7.2
  16 tokens, 16-token tiles, split for 4 programs an SM:
  1:8               16.9 19.5           17.4 15.0            9.6  9.6
  2:8               18.7 22.0           19.4 17.2            9.7 10.1
(in brackets the select kernel, the one-token route). So 1:8 takes two tiles a warp at 1-8
tokens, and from one token on large weights with K > rows; 2:8 and 1:8 at 9-16 tokens on
large weights with rows > K. 2:8 at 1-8 and wide weights at 16 keep one.

Vector-wise rows (v > 1, no blocks) took the vector tensor-core tile or the decode kernel at
a few tokens, 2-14x slower than here (2:4 v=64 at 16 tokens on 4096 x 14336 180.6 us against
dense's 33.4). With the vector's choice expanded into per-row metadata the kernel's work is
element-wise's. Cold, bf16, us through linear (results/nvidia-h200/2026-12-05/at-318e1be/
nm_vector_few_routed.txt; before / now, v=4 and v=64 alike within a few percent):
                     4096 x 4096    14336 x 4096    4096 x 14336     dense
  2:4 v=64   1 token   13.8  9.2     23.4 21.2       24.2 20.9       13.6 / 32.4
            16 tokens  53.1 11.0     59.1 25.8      180.6 26.1
            32 tokens  51.3 15.2     58.3 35.0      174.9 33.1
  2:8 v=64  16 tokens  27.7  9.8     31.5 19.2       91.5 19.8
  1:8 v=64   9 tokens 160.6 10.0         -              -
            16 tokens  15.2 10.0     17.8 16.6       47.1 18.2
So vectors take element-wise's windows, but 1:8 from two tokens on every weight (at one the
decode kernel: 11.1-12.9 against 13.1 on 4096 x 14336), 2:8 from one on large weights with
K > rows (14.8 against 21.0-24.0; 12.5-13.8 against 14.4 on the tall one, 6.1-8.3 against
7.7 on the small one: those keep it), and 1:8 to 16 tokens on small weights in bf16 as in fp16
(at-f37dfc2/nm_vector_few_1.txt, nm_vector_few_fp16.txt).

1:4 and 1:2 have no sparse-tensor-core form, but two neighbouring 1:m groups are one 2:2m
group (ops/_nm_alias.py): the same values and bytes, read in 2:8's and 2:4's windows. Cold,
bf16, us through linear, before / now (at-9a11a08/nm_alias.txt; v=32 alike or better):
                     4096 x 4096           14336 x 4096
  tokens           1      8     16       1      8     16
  1:4           7.5/7.5 13.0/7.8 19.4/9.8   16.4/16.4 32.2/14.9 47.9/19.5
  1:2           9.2/9.2 30.9/9.7 36.8/11.1  23.7/21.3 73.7/21.7 91.6/25.8
  dense          12.7   13.6   14.0      32.7   30.5   30.6
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._sizes import cdiv

MMA_SP_NATURAL_B_TOKENS = 8  # up to these B is permuted in the kernel (one 8-token tile)
LARGE_WEIGHT = 1 << 25  # elements: 4096 x 4096 is under, 4096 x 14336 over
MMA_SP_BLOCKS = 8
MMA_SP_PROGRAMS_PER_SM = 4
MMA_SP_MAX_SPLIT = 8
FEW_M8_PROGRAMS_PER_SM = 8  # 2:8 and 1:8 at 1-8 tokens: more bytes in flight
FEW_M8_MAX_SPLIT = 16
MIN_STEPS_A_RANGE = 2


@dataclass(frozen=True)
class _Window:
    fewest: int  # tokens
    most: int
    most_small: int  # on weights under LARGE_WEIGHT elements
    wide_few: bool  # 16-byte shared stores of B at 1-8 tokens
    wide_small: bool  # B permuted in the kernel with them past 8 tokens on small weights
    most_small_fp16: int = 0  # past most_small in fp16: 8-token tiles, B permuted in the kernel
    fewest_wide: int = 0  # on weights of LARGE_WEIGHT elements or more with K > rows
    out_by_rows_most: int = 0  # tokens to which a column-major out is stored by runs of rows
    m_tiles_few: int = 1  # m16 tiles a warp at 1-8 tokens
    m_tiles_tall: int = 1  # past 8 tokens on weights of LARGE_WEIGHT elements or more, rows > K
    vector_fewest_wide: int = 0  # fewest_wide for vector-wise rows


# (n, m) -> the tokens where it measured faster than the route, element-wise
MMA_SP_WINDOWS = {
    (2, 4): _Window(1, 32, 32, wide_few=False, wide_small=True),
    (2, 8): _Window(
        2,
        16,
        16,
        wide_few=True,
        wide_small=True,
        out_by_rows_most=16,
        m_tiles_tall=2,
        vector_fewest_wide=1,
    ),  # fmt: skip
    (1, 8): _Window(
        2,
        16,
        8,
        False,
        False,
        most_small_fp16=16,
        fewest_wide=1,
        out_by_rows_most=8,
        m_tiles_few=2,
        m_tiles_tall=2,
    ),  # fmt: skip
}
WIDE_SMALL_MOST_TOKENS = 16
# Vector-wise rows (v > 1, no blocks) take the kernel too (the docstring's last table)
MMA_SP_VECTORS = True
# 1:m read as 2:2m (ops/_nm_alias.py), in 2:2m's windows: the same values and bytes
MMA_SP_ALIASES = {(1, 2): (2, 4), (1, 4): (2, 8)}


@dataclass(frozen=True)
class SpmmNmMmaSpConfig:
    m_tiles: int
    blocks: int
    n_tiles: int
    split: int
    natural_b: bool
    wide_b_stores: bool
    out_by_rows: bool  # where the out has unit stride along M (linear's): out_m_fastest


def spmm_nm_mma_sp_config(
    n_cols: int,
    n: int,
    m: int,
    vector: int,
    block: int,
    dtype: torch.dtype,
    rows: int,
    k: int,
    sms: int,
) -> SpmmNmMmaSpConfig | None:
    """The tile where the kernel measured faster than the route, else None: element-wise
    rows with their own choice, bf16 or fp16, in the pattern's window of tokens, K of `k`, on
    a GPU of `sms` SMs."""
    window = MMA_SP_WINDOWS.get((n, m))
    if window is None or block != 1 or (vector != 1 and not MMA_SP_VECTORS):
        return None
    # int32 offsets: the permuted B's words (n8 tiles x K / 2) and a block's 128 words
    if k >= 2**29 or -(-n_cols // 8) * 8 * k >= 2**32:
        return None
    if dtype not in (torch.bfloat16, torch.float16):
        return None
    small = rows * k < LARGE_WEIGHT
    most = window.most_small if small else window.most
    if small and (dtype == torch.float16 or vector > 1):
        most = max(most, window.most_small_fp16)
    fewest_wide = window.vector_fewest_wide if vector > 1 else window.fewest_wide
    fewest = fewest_wide if fewest_wide and not small and k > rows else window.fewest
    if not fewest <= n_cols <= most:
        return None
    # (1:8's fp16 fallback on small weights past 8 tokens: 8-token tiles, B as it lies)
    few = n_cols <= MMA_SP_NATURAL_B_TOKENS or (small and n_cols > window.most_small)
    wide_past_few = small and window.wide_small and n_cols <= WIDE_SMALL_MOST_TOKENS
    natural_b = few or wide_past_few
    wide = window.wide_few if few else wide_past_few
    n_tiles = 1 if few else 2
    if n_cols <= MMA_SP_NATURAL_B_TOKENS:
        m_tiles = window.m_tiles_few
    else:
        m_tiles = window.m_tiles_tall if not small and rows > k else 1
    tiles = cdiv(rows, 64 * m_tiles) * cdiv(n_cols, 8 * n_tiles)
    steps = cdiv(k // m, 32 // m * MMA_SP_BLOCKS)  # a step: k256
    programs, most_split = MMA_SP_PROGRAMS_PER_SM, MMA_SP_MAX_SPLIT
    if m == 8 and n_cols <= MMA_SP_NATURAL_B_TOKENS:
        programs, most_split = FEW_M8_PROGRAMS_PER_SM, FEW_M8_MAX_SPLIT
    split = min(programs * sms // tiles, most_split, steps // MIN_STEPS_A_RANGE)
    by_rows = n_cols <= window.out_by_rows_most and (few or not small)
    return SpmmNmMmaSpConfig(
        m_tiles, MMA_SP_BLOCKS, n_tiles, max(1, split), natural_b, wide, by_rows
    )  # fmt: skip
