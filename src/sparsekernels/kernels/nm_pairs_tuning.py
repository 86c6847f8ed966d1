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
The blocked step (spmm_nm_pairs._blocked_step: A as two S-wide blocks by one masked load, the
offsets four to an int32 word, 5 stages) then beat every unblocked tile (results/nvidia-h100/
2026-12-06/at-5b1e44a/nm_pairs_blocked.txt, the same cases), route -> the rule's tile:
                     4096^2              14336 x 4096          4096 x 14336
  tokens           24        40         24        40         24         40
  4:32        13.0  8.5  17.0 10.8   23.2 17.5   33.5 23.6   28.6 17.8   44.7 24.2
  1:32         6.6  5.6   8.0  6.3    9.7  9.1   12.6 11.1   11.2  8.4   16.3 10.3
  1:16         8.3  6.7  11.1  7.9   14.2 11.8   19.1 15.4   18.0 12.1   26.3 15.6
  4:16        19.2 13.3  28.1 16.6   41.4 30.5   61.2 41.4   52.2 32.0   82.4 41.5
  2:16        12.2  8.7  17.4 11.2   22.7 17.7   34.4 24.0   26.9 18.1   39.1 24.3
  dense       14.2       14.4       41.9       42.5       44.3       44.1
(2:16's route on 4096 rows: its 2:8 copy; 4:16 on 4096^2 past 32 tokens: densifying.) So every
one of these patterns, on every shape, takes the blocked step: 2 pairs, 64 slots a step, 2
warps (the helper's compile found warps 2-3 of a 2-pair tile repeating 0-1's work); from
1536 slots (K = 14336 at n / m = 1/8 and up) 2 pairs x 128 slots on 4 warps to 32 tokens,
past it 4 pairs x 64 slots with K split in two. 4:16 on 4096^2 past 32 tokens still runs
0.87x dense (16.6 against 14.4), but 1.7x faster than densifying.
In fp16 (results/nvidia-h100/2026-12-06/at-c87015f/nm_pairs_fp16.txt, H100, the same forms at
24 and 40 tokens) the rule's tile was the fastest or within 5% in every case, route -> tile:
4:32 on 14336 x 4096 111.6 -> 17.6 and 159.8 -> 23.6, 4:16 on 4096^2 27.8 -> 16.9 (dense
14.4), 1:16 on 4096 x 14336 28.4 -> 11.9: fp16 takes it too (1:32 untimed in fp16; in bf16
it gained the most). Other vectors and token counts are untimed: they keep their route.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAIRS_ROUTE_TOKENS = (17, 48)
PAIRS_ROUTE_DTYPES = (torch.bfloat16, torch.float16)
PAIRS_ROUTE_VECTORS = (8,)
PAIRS_ROUTE_PATTERNS = {(4, 32), (1, 32), (2, 16), (1, 16), (4, 16)}
SPLIT_SLOTS = 1536


@dataclass(frozen=True)
class SpmmNmPairsConfig:
    pairs: int
    block_s: int
    block_n: int
    num_warps: int
    num_stages: int
    split: int
    blocked: bool = False  # the blocked step (spmm_nm_pairs._blocked_step)


def spmm_nm_pairs_config(
    n_cols: int, n: int, m: int, vector: int, block: int, dtype: torch.dtype, rows: int, k: int
) -> SpmmNmPairsConfig | None:
    """The pairs kernel's tile for an n:m weight of `rows` x `k` at `n_cols` tokens where it
    measured faster than the route (the table above), else None."""
    fewest, most = PAIRS_ROUTE_TOKENS
    timed = dtype in PAIRS_ROUTE_DTYPES and vector in PAIRS_ROUTE_VECTORS and block == 1
    if not timed or (n, m) not in PAIRS_ROUTE_PATTERNS or not fewest <= n_cols <= most:
        return None
    block_n = 32 if n_cols <= 32 else 64
    if k // m * n >= SPLIT_SLOTS:
        if n_cols <= 32:
            return SpmmNmPairsConfig(2, 128, block_n, 4, 5, 1, blocked=True)
        return SpmmNmPairsConfig(4, 64, block_n, 4, 5, 2, blocked=True)
    return SpmmNmPairsConfig(2, 64, block_n, 2, 5, 1, blocked=True)
