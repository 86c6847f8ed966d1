"""Where the CSR bitmap kernels (spmm_csr_bitmap.py, Triton; spmm_csr_bitmap_wgmma.py, Gluon)
take a product of a few tokens from the CSR kernels, and their tile.

Not yet measured on the H200 (benchmarks/sweeps/csr_bitmap_cold.py, run_h200.sh step
`csrbitmap`), so no window is open: CSR_BITMAP_WINDOWS stays empty until the sweep says where
they win. Their cost is a decode of every weight element, whatever the density and the token
count (13-16 sm_90 instructions an element), where the CSR kernels pay per stored entry and,
at 2-16 tokens, gather a row of B per entry; so a window is a range of tokens and of
densities.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._sizes import cdiv
from .spmm_csr_bitmap import WORD

PROGRAMS_PER_SM = 4
MAX_SPLIT = 16
MIN_STEPS_A_RANGE = 2


@dataclass(frozen=True)
class _Window:
    fewest: int  # tokens
    most: int
    least_density: float  # stored entries / weight elements
    most_density: float


# dtype -> the windows where a bitmap kernel measured faster than the CSR route
CSR_BITMAP_WINDOWS: dict[torch.dtype, tuple[_Window, ...]] = {}


@dataclass(frozen=True)
class CsrBitmapConfig:
    gluon: bool  # the Gluon kernel (Hopper), else the Triton one
    block_m: int
    block_w: int  # 32-column words a step
    block_n: int
    split: int
    num_warps: int
    num_stages: int


def csr_bitmap_config(
    n_cols: int, rows: int, k: int, nnz: int, dtype: torch.dtype, sms: int, gluon: bool
) -> CsrBitmapConfig | None:
    """The tile where a bitmap kernel measured faster than the CSR route, else None: a (rows,
    k) weight of `nnz` entries times `n_cols` tokens in `dtype`, on a GPU of `sms` SMs, the
    Gluon kernel where `gluon` (it compiles there)."""
    density = nnz / (rows * k) if rows * k else 1.0
    inside = any(
        w.fewest <= n_cols <= w.most and w.least_density <= density <= w.most_density
        for w in CSR_BITMAP_WINDOWS.get(dtype, ())
    )
    if not inside:
        return None
    block_m, block_w = (64, 4) if gluon else (32, 4)
    block_n = 8 if gluon and n_cols <= 8 else 16
    tiles = cdiv(rows, block_m) * cdiv(n_cols, block_n)
    steps = cdiv(cdiv(k, WORD), block_w)
    split = max(1, min(PROGRAMS_PER_SM * sms // tiles, MAX_SPLIT, steps // MIN_STEPS_A_RANGE))
    return CsrBitmapConfig(gluon, block_m, block_w, block_n, split, num_warps=4, num_stages=2)
