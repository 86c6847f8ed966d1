"""Where linear runs an N:M weight of 8-row vectors through the condensed-K kernel
(spmm_nm_pairs.py: two vectors a 16-row tensor-core tile, the values as stored against B's
gathered rows), and its tile.

At m = 16 / 32 and 17-48 tokens the route took the one-hot kernel (m dots a step) or densified
(4:16). Through linear's x^T copy, H100, cold L2, bf16, v = 8, us a call, the route -> the
kernel's best tile (benchmarks/sweeps/nm_pairs.py, results/nvidia-h100/2026-12-06/at-e857cf5/
nm_pairs_forms.txt):
                     4096^2              14336 x 4096          4096 x 14336
  tokens           24        40         24        40         24         40
  4:32        35.4 12.8  48.8 17.1  109.1 22.9  157.1 33.2   89.7 28.5  148.3 43.9
  1:32        31.7  6.5  46.6  7.6   32.3  9.6   45.4 12.1   46.7 11.3   84.8 16.1
  1:16        18.9  8.5  23.0 10.9   29.5 14.3   41.0 19.2   28.1 18.3   36.3 25.7
  4:16        27.4 19.3  27.6 28.8  102.7 40.8  102.9 60.3  105.9 50.8  106.6 80.7
  2:16        12.1 12.7  15-17 17.3  26.5 22.3  45-46 34.4  27.3 27.9  38-39 43.6
  dense       14.3       14.5       42.0       42.5       44.3       44.9
(2:16's route: its copy stored as 2:8, at 40 tokens the copy's 33 and 48 from
nm_route_nmstoredas.txt of the same run; 1:16 as 1:8 ran 11.3-29.9, slower than this.)
So every one of these patterns on 14336 rows; 2:16 on fewer rows keeps its 2:8 copy, and
4:16 past 32 tokens on a 4096^2 weight keeps densifying. The tiles: 4 pairs (64 rows) and 64
slots a step on 8192 rows or more; else 2 pairs, 64 slots a step (128 past 32 tokens or from
1024 slots), and K split in two from 1536 slots (K = 14336 at n / m = 1/8 and up). fp16, other
vectors and token counts are untimed: they keep their route.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAIRS_ROUTE_TOKENS = (17, 48)
PAIRS_ROUTE_DTYPES = (torch.bfloat16,)
PAIRS_ROUTE_VECTORS = (8,)
PAIRS_ROUTE_PATTERNS = {(4, 32), (1, 32), (2, 16), (1, 16), (4, 16)}
MANY_ROWS = 8192
SMALL_WEIGHT = 1 << 24  # elements: 4096 x 4096
WIDE_STEP_SLOTS = 1024
SPLIT_SLOTS = 1536


@dataclass(frozen=True)
class SpmmNmPairsConfig:
    pairs: int
    block_s: int
    block_n: int
    num_warps: int
    num_stages: int
    split: int
    blocked: bool = False  # the blocked step (spmm_nm_pairs._blocked_step): not yet timed


def spmm_nm_pairs_config(
    n_cols: int, n: int, m: int, vector: int, block: int, dtype: torch.dtype, rows: int, k: int
) -> SpmmNmPairsConfig | None:
    """The pairs kernel's tile for an n:m weight of `rows` x `k` at `n_cols` tokens where it
    measured faster than the route (the table above), else None."""
    fewest, most = PAIRS_ROUTE_TOKENS
    timed = dtype in PAIRS_ROUTE_DTYPES and vector in PAIRS_ROUTE_VECTORS and block == 1
    if not timed or (n, m) not in PAIRS_ROUTE_PATTERNS or not fewest <= n_cols <= most:
        return None
    many_rows = rows >= MANY_ROWS
    if (n, m) == (2, 16) and not many_rows:
        return None  # (its 2:8 copy: ops/_nm_stored_as.py)
    if (n, m) == (4, 16) and n_cols > 32 and rows * k <= SMALL_WEIGHT:
        return None
    block_n = 32 if n_cols <= 32 else 64
    slots = k // m * n
    if many_rows:
        return SpmmNmPairsConfig(4, 64, block_n, 4, 3, 1)
    if slots >= SPLIT_SLOTS:
        return SpmmNmPairsConfig(2, 64, block_n, 4, 3, 2)
    wide = n_cols > 32 or slots >= WIDE_STEP_SLOTS
    return SpmmNmPairsConfig(2, 128 if wide else 64, block_n, 4, 3, 1)
