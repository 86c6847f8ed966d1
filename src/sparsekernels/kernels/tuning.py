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
