"""The general CSR kernel's tiles (kernels/spmm_csr.py: row-swizzled tiles past the decode
sizes), by the product's columns, the sparse matrix's rows and its values' size."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ._sizes import cdiv, next_power_of_2


@dataclass(frozen=True)
class SpmmCsrConfig:
    block_rows: int
    block_nnz: int
    block_n: int
    num_warps: int


# DLMC's matrices (64-2048 rows, N = 49-3136) are small for the LLM tiles above N = 16: too few
# programs. H200 sweep, cold L2, 53 cases (benchmarks/sweeps/csr_dlmc_configs.py, results/
# nvidia-h200/2026-11-30/at-54e4fc2/csr_dlmc_configs.txt), geometric mean of time against the
# LLM tile (4 rows, 32 entries, 128 columns, 4 warps):
#   N = 49 and 196 (ResNet-50's late layers): 32 columns, 4 rows: fp32 0.75 / 0.62, bf16 0.65 /
#     0.59 (2304 x 256 at 196 in fp32: 53.6 -> 29.2 us);
#   half precision where the LLM tile leaves fewer than CSR_FEW_PROGRAMS programs: one row, 64
#     columns, 2 warps: 0.57 at N = 256-784, 0.80 at 3136 (128 x 512 at 784: 23.8 -> 12.6 us);
#     at 2048 programs and more (512 x 512 at N = 2048) it was 5-8% slower, so the LLM tile stays;
#   fp32 from N = 256: the LLM tile was best or within 4% of the best in 22 of 24.
CSR_NARROW_BELOW_N = 256
CSR_FEW_PROGRAMS = 2048
# The 32-column tile reads each row's stored entries once per 32 columns: through linear on
# LLM weights it ran in proportion to those passes (H100, fp32 90%, 14336 x 4096, cold L2, us:
# 49 tokens 330, 128 tokens 649, 256 tokens with 128-column tiles 516; results/nvidia-h100/
# 2026-12-06/at-53e510e/csr_linear_layout.txt). Where the row tiles alone are this many
# (4096+ rows; DLMC's ResNet-50 layers have at most 2304), columns take one tile up to 128
# wide: fp32 90% 14336 x 4096 at 128 tokens 643.5 -> 276.4 us, 4096^2 at 49 99.9 -> 52.4,
# 1.02-1.40x strict dense from 49 tokens (at-1825123/csr_linear_tiles.txt).
CSR_WIDE_MIN_PROGRAMS = 1024


@lru_cache(maxsize=4096)
def spmm_csr_config(n: int, rows: int = 0, itemsize: int = 4) -> SpmmCsrConfig:
    """From an H200 sweep (4096 and 14336 rows x 4096, 70-90% sparse, bf16, 2026-11-29):
    N = 1 wants one row per program and long runs of stored entries; N <= 16 a few rows per
    program; larger N a few rows and a column tile up to 128 wide, narrower where that leaves
    few programs (DLMC, above). `rows` (0 when unknown) and `itemsize` are the sparse matrix's."""
    if n == 1:  # one warp per row: 2.6x dense at 90% (2026-11-29-b/decode_sweep.txt)
        return SpmmCsrConfig(block_rows=1, block_nnz=256, block_n=1, num_warps=1)
    if n <= 16:
        block_n = next_power_of_2(n)
        return SpmmCsrConfig(block_rows=4, block_nnz=128, block_n=block_n, num_warps=2)
    block_n = min(128, next_power_of_2(n))
    if n < CSR_NARROW_BELOW_N:
        if cdiv(rows, 4) < CSR_WIDE_MIN_PROGRAMS:
            block_n = 32
        return SpmmCsrConfig(block_rows=4, block_nnz=32, block_n=block_n, num_warps=4)
    if itemsize <= 2 and 0 < cdiv(rows, 4) * cdiv(n, block_n) < CSR_FEW_PROGRAMS:
        return SpmmCsrConfig(block_rows=1, block_nnz=32, block_n=64, num_warps=2)
    return SpmmCsrConfig(block_rows=4, block_nnz=32, block_n=block_n, num_warps=4)
