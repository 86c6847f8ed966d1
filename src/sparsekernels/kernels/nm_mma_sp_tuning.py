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

The split fills one wave of four programs an SM (the kernel's 72-92 registers would allow
more, which measured no faster), each range two steps at least. fp16 runs the same kernel
but was not timed, so it keeps its route.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._sizes import cdiv

MMA_SP_MOST_TOKENS = 32
MMA_SP_NATURAL_B_TOKENS = 8  # up to these B is permuted in the kernel (one 8-token tile)
MMA_SP_BLOCKS = 8
MMA_SP_PROGRAMS_PER_SM = 4
MMA_SP_MAX_SPLIT = 8
MIN_STEPS_A_RANGE = 2


@dataclass(frozen=True)
class SpmmNmMmaSpConfig:
    m_tiles: int
    blocks: int
    n_tiles: int
    split: int
    natural_b: bool


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
    """The tile where the kernel measured faster than the route, else None: 2:4 element-wise
    rows with their own choice, bf16, 1-32 tokens, K of `k`, on a GPU of `sms` SMs."""
    if (n, m, vector, block) != (2, 4, 1, 1) or dtype != torch.bfloat16:
        return None
    if not 1 <= n_cols <= MMA_SP_MOST_TOKENS:
        return None
    natural_b = n_cols <= MMA_SP_NATURAL_B_TOKENS
    n_tiles = 1 if natural_b else 2
    tiles = cdiv(rows, 64) * cdiv(n_cols, 8 * n_tiles)
    steps = cdiv(k // 4, 8 * MMA_SP_BLOCKS)
    split = min(MMA_SP_PROGRAMS_PER_SM * sms // tiles, MMA_SP_MAX_SPLIT, steps // MIN_STEPS_A_RANGE)
    return SpmmNmMmaSpConfig(1, MMA_SP_BLOCKS, n_tiles, max(1, split), natural_b)
