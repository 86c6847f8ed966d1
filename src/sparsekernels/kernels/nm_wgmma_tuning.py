"""Where the wgmma kernel (spmm_nm_wgmma.py: the dense tile built in the tensor cores' operand
registers, Hopper) takes a product of a few tokens, and its tile and split.

Cold L2, bf16, us (benchmarks/sweeps/nm_wgmma_cold.py; results/nvidia-h200/2026-12-01/
at-f819c08: nm_wgmma_splits.txt at 4 and 16 tokens, nm_wgmma_n8.txt at 8, nm_wgmma_n32.txt at
32; the route before: this kernel's 16-token tile split 4 on 4096 rows for 2:8 and 1:8 at
8-16 tokens, else the unpack kernel, the select kernel at 4 tokens):
                        4096 x 14336          14336 x 4096          4096 x 4096
  tokens                4     8    16    32    4     8    16    32      8    32
  dense              31.7  31.2  33.3  32.4  32.6  30.0  30.6  30.9   13.5  14.3
  2:8  route         26.8  21.1  21.5  37.7  23.8  22.7  22.9  31.2    8.8  14.2
       wgmma         19.4  18.9  21.0  27.3  19.7  20.3  22.4  28.5    8.1  11.2
  1:8  route         16.5  19.0  19.6  29.5  15.2  19.9  20.3  24.2    8.1  11.9
       wgmma         16.4  16.6  19.6  25.6  16.5  17.0  20.0  26.3    7.1  10.2
  2:4  route         32.5  32.7  31.0  46.2  37.1  36.7  32.6  35.4   13.2  16.3
       wgmma         30.0  23.7  27.9  36.9  25.6  25.4  33.2  39.0    9.7  13.4
(wgmma: the tile and split below, as routed; at 4 tokens the 8-token tile split 4.) So it
takes 2:8 at 4-32 tokens, 1:8 at 8-16 (and 17-32 where split), 2:4 at 4-8 (and 9-32 where
split); 1-3 tokens were not timed and keep the select kernel.

A column tile of 8, 16 or 32 tokens (the wgmma's N): the product's tensor-core work grows with
it, so the narrowest that holds the tokens (16 tokens as two 8-token tiles build the tile
twice: 31.5 against 21.0). 64-token tiles spilled (69-215 us).

The split fills one wave: split-K ranges until the row tiles times the ranges reach the
programs that fit on the GPU at once (3 an SM at the kernel's 160-168 registers, 4 for 2:4 on
8-token tiles at 128, 2 on 32-token tiles at 208-224), each range at least 4 steps. A second
wave cost more than the ranges saved (2:8 at 16 tokens on 4096 rows: split 6 21.0, split 8
21.8; on 32-token tiles split 4 27.3, split 6 30.7). Where that gives one range, 1:8 and
2:4 past 8 tokens stay with the unpack kernel, which measured faster there.
fp16 was timed for 2:8 at 8-16 tokens (as fast as bf16: 19.6-22.1 against its route's
34.8-47.9, nm_wgmma_fp16.txt); other patterns in fp16 keep their route.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._sizes import cdiv


@dataclass(frozen=True)
class SpmmNmWgmmaConfig:
    block_m: int
    block_g: int  # groups a step
    block_n: int  # tokens a column tile
    split: int  # ranges of groups, one program each (the last of a tile sums them)


@dataclass(frozen=True)
class _Window:
    fewest: int  # tokens
    most: int
    block_n: int
    needs_split: bool  # taken only where the weight's rows leave room for two ranges or more


# (n, m) -> the token windows where it measured faster than the route, bf16
WGMMA_WINDOWS = {
    (2, 8): (_Window(4, 8, 8, False), _Window(9, 16, 16, False), _Window(17, 32, 32, False)),
    (1, 8): (_Window(8, 8, 8, False), _Window(9, 16, 16, False), _Window(17, 32, 32, True)),
    (2, 4): (_Window(4, 8, 8, False), _Window(9, 16, 16, True), _Window(17, 32, 32, True)),
}
WGMMA_DTYPES = {(2, 8): (torch.bfloat16, torch.float16)}  # others: bf16 only
WGMMA_BLOCK_M = 64
WGMMA_BLOCK_G = 32
WGMMA_MAX_SPLIT = 8
MIN_STEPS_A_RANGE = 4


def programs_per_sm(n: int, m: int, block_n: int) -> int:
    """The kernel's programs an SM holds at once, by its registers a thread (Triton 3.6 on
    sm_90, 4 warps): 2:4 on 8-token tiles 128 (4), 32-token tiles 192-224 (2), else 144-168
    (3)."""
    if block_n >= 32:
        return 2
    if (n, m) == (2, 4) and block_n <= 8:
        return 4
    return 3


# Vector-wise rows (2:8 and 1:8, bf16) at 17-32 tokens, where mma.sp does not take them:
# benchmarks/sweeps/nm_vector_few.py's "+tiles" form against the route (the decode, gather or
# condensed-K kernels), cold L2, us, H100 (results/nvidia-h100/2026-12-05/at-d750428/):
#                      4096 x 4096      14336 x 4096      4096 x 14336    (dense 14 / 44 / 46)
#   tokens             17   24   32     17    24    32     17    24    32
#   2:8 v=4  route   32.4 33.2 22.4  108.0 115.1  56.8   99.6 103.1  56.4
#            +tiles  12.1 12.0 11.9   26.7  27.3  27.8   27.7  28.1  28.3
#   2:8 v=64 route   42.8 43.2 25.3   44.1  44.5  31.1  148.5 148.7  86.7
#            +tiles  12.0 11.6 11.9   27.0  27.3  27.6   27.5  27.8  28.0
#   1:8 v=4  route   22.9 25.1 14.7   63.6  71.9  32.7   62.3  69.3  27.9
#            +tiles  11.3 11.1 11.2   23.4  23.6  24.1   25.8  26.2  25.8
#   1:8 v=64 route   23.5 23.6 14.5   24.6  24.8  17.7   76.1  76.1  44.4
#            +tiles  11.2 10.9 11.1   23.3  23.5  24.0   25.6  26.0  25.6
# (+tiles: this kernel where its windows take the size, else the unpack kernel's; 1:8 on
# 14336 rows leaves no room for a split, so the unpack kernel ran those.) Other token counts
# and dtypes were not timed with vectors, nor weights of fewer rows (the small ones take the
# condensed-K kernel's small tiles, nm_small_tiles.py): they keep their route.
WGMMA_VECTORS = True
WGMMA_VECTOR_TOKENS = (17, 32)
VECTOR_MIN_ROWS = 4096


def spmm_nm_wgmma_config(
    n_cols: int,
    n: int,
    m: int,
    vector: int,
    block: int,
    dtype: torch.dtype,
    rows: int,
    k: int,
    sms: int,
) -> SpmmNmWgmmaConfig | None:
    """The tile where the wgmma kernel measured faster than the route (WGMMA_WINDOWS), else
    None: element-wise rows with their own choice, K of `k`, on a GPU of `sms` SMs."""
    windows = WGMMA_WINDOWS.get((n, m), ())
    if block != 1 or (vector != 1 and not _takes_vectors(n_cols, dtype, rows)):
        return None
    if dtype not in WGMMA_DTYPES.get((n, m), (torch.bfloat16,)):
        return None
    window = next((w for w in windows if w.fewest <= n_cols <= w.most), None)
    if window is None:
        return None
    row_tiles = cdiv(rows, WGMMA_BLOCK_M)
    wave = sms * programs_per_sm(n, m, window.block_n)
    steps = cdiv(k // m, WGMMA_BLOCK_G)
    split = min(wave // row_tiles, WGMMA_MAX_SPLIT, steps // MIN_STEPS_A_RANGE)
    split = max(1, split)
    if window.needs_split and split < 2:
        return None
    return SpmmNmWgmmaConfig(WGMMA_BLOCK_M, WGMMA_BLOCK_G, window.block_n, split)


def _takes_vectors(n_cols: int, dtype: torch.dtype, rows: int) -> bool:
    fewest, most = WGMMA_VECTOR_TOKENS
    timed = dtype == torch.bfloat16 and rows >= VECTOR_MIN_ROWS
    return WGMMA_VECTORS and timed and fewest <= n_cols <= most
