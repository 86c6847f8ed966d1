"""Every kernel configuration and heuristic, named, in one place.

Per-GPU tuned tables land here as data once the benchmark harness has measured them.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton

# CUDA caps grid dimensions 1 and 2 at 65535 programs.
MAX_GRID_YZ = 65535


@dataclass(frozen=True)
class SpmmCsrConfig:
    block_nnz: int
    block_n: int
    num_warps: int


def spmm_csr_config(n: int) -> SpmmCsrConfig:
    """First-kernel heuristic: a column tile as wide as N up to 128, 32 stored entries a step."""
    block_n = max(16, min(128, triton.next_power_of_2(max(n, 1))))
    return SpmmCsrConfig(block_nnz=32, block_n=block_n, num_warps=4 if block_n >= 64 else 2)


@dataclass(frozen=True)
class SpmmNmConfig:
    use_dot: bool  # tensor-core path: rows of a tile share one choice (vector-wise)
    block_m: int
    block_s: int  # compressed slots per step
    block_n: int
    num_warps: int
    num_stages: int


def _largest_power_of_two_dividing(value: int, cap: int) -> int:
    power = 1
    while power * 2 <= cap and value % (power * 2) == 0:
        power *= 2
    return power


def spmm_nm_config(n_cols: int, vector: int, dtype_is_fp64: bool) -> SpmmNmConfig:
    """Vector-wise patterns with v >= 16 and N >= 16 go to tensor cores; the rest gather on
    CUDA cores with a (BLOCK_M, BLOCK_S, BLOCK_N) budget of 4096 products per step."""
    tile_rows = _largest_power_of_two_dividing(vector, 64)
    if not dtype_is_fp64 and tile_rows >= 16 and n_cols >= 16:
        block_n = 128 if n_cols >= 128 else max(16, triton.next_power_of_2(n_cols))
        return SpmmNmConfig(True, tile_rows, 64, block_n, num_warps=4, num_stages=3)
    block_m = 32
    block_n = min(16, triton.next_power_of_2(max(n_cols, 1)))
    block_s = max(8, 4096 // (block_m * block_n))
    return SpmmNmConfig(False, block_m, block_s, block_n, num_warps=4, num_stages=2)
