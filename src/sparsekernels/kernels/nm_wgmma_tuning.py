"""Where the wgmma kernel (spmm_nm_wgmma.py: the dense tile built in the tensor cores' operand
registers, Hopper) takes a product of a few tokens, and its tile.

Cold L2, bf16, us, 64 x 32 tiles (16 tokens a column tile), split 4 (benchmarks/sweeps/
nm_wgmma_cold.py, results/nvidia-h200/2026-12-01/at-4700dd4/nm_wgmma.txt; the route before:
the unpack kernel, else the select kernel at 8 tokens for 1:8):
                        4096 x 14336            14336 x 4096
  tokens                 8       16               8       16
  dense               32.1     33.3            30.4     31.0
  2:8  route          29.7     29.7            30.9     30.3
       wgmma          23.7     22.8            22.8     22.3
  1:8  route          23.2     22.9            22.0     22.0
       wgmma          21.7     20.6            20.9     19.6
  2:4  route          32.0     32.2            36.8     32.6
       wgmma          34.2     33.4            33.7     32.7
So it takes 2:8 and 1:8 at 8-16 tokens; 2:4 stays with the unpack kernel (its tile build is
half the work a step but its steps are twice as many). Unsplit on 14336 rows it measured
the same (22.6 us at 2:8), so the split follows the unpack kernel's rule. Fewer tokens,
more, other patterns, dtypes and vectors were not timed: they keep their route.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._sizes import cdiv
from .nm_unpack_tuning import UNPACK_BLOCK_M, UNPACK_MAX_SPLIT, UNPACK_PROGRAMS


@dataclass(frozen=True)
class SpmmNmWgmmaConfig:
    block_m: int
    block_g: int  # groups a step
    block_n: int  # tokens a column tile
    split: int  # ranges of groups, one program each (split_k.py sums them)


# (n, m) -> (fewest, most) tokens where it measured faster than the route, bf16
WGMMA_TOKENS = {(2, 8): (8, 16), (1, 8): (8, 16)}
WGMMA_DTYPES = (torch.bfloat16,)


def spmm_nm_wgmma_config(
    n_cols: int, n: int, m: int, vector: int, block: int, dtype: torch.dtype, rows: int
) -> SpmmNmWgmmaConfig | None:
    """The tile where the wgmma kernel measured faster than the route (WGMMA_TOKENS), else
    None: element-wise rows with their own choice."""
    window = WGMMA_TOKENS.get((n, m))
    if window is None or vector != 1 or block != 1 or dtype not in WGMMA_DTYPES:
        return None
    if not window[0] <= n_cols <= window[1]:
        return None
    split = max(1, min(UNPACK_MAX_SPLIT, UNPACK_PROGRAMS // cdiv(rows, UNPACK_BLOCK_M)))
    return SpmmNmWgmmaConfig(64, 32, 16, split)
