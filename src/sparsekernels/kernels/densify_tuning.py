"""Configurations of the densify kernels (kernels/densify.py), which expand a CSR or N:M weight
into a dense one for the dense fallback (ops/_dense.py: densify + cuBLAS where our sparse
kernels lose). Memoised on their integer arguments (lru_cache)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ._sizes import mean_row, next_power_of_2

_memo = lru_cache(maxsize=4096)


# First configurations, not yet measured on the H200: benchmarks/sweeps/densify_sweep.py times
# these against the alternatives it lists and prints the best of each case.
@dataclass(frozen=True)
class DensifyCsrConfig:
    write_zeros: bool  # False: the caller zeroes the output (torch.zeros) and the kernel scatters
    block_rows: int
    block_k: int  # zeros stored per row and step
    block_nnz: int  # stored entries scattered per row and step
    num_warps: int


@_memo
def densify_csr_config(rows: int, cols: int, nnz: int) -> DensifyCsrConfig:
    """One row per program (a 14336-row weight is 14336 programs): 1024 zeros a step (16 bytes
    a thread for bf16 with 4 warps), then the row's entries in runs as long as an average row,
    128 to 1024. Short rows (under 256 columns) are packed several to a program."""
    block_k = min(1024, max(16, next_power_of_2(cols)))
    block_rows = max(1, min(8, 256 // block_k))
    block_nnz = max(128, min(1024, mean_row(nnz, rows)))
    num_warps = 4 if block_rows * block_k >= 1024 else 2
    return DensifyCsrConfig(True, block_rows, block_k, block_nnz, num_warps)


@dataclass(frozen=True)
class DensifyNmConfig:
    select: bool  # True: each element stored once (power-of-two m); False: zeros, then scatter
    write_zeros: bool  # scatter: False when the caller zeroes the output
    block_m: int
    block_k: int  # output columns a step (select: block_k / m whole groups)
    block_s: int  # compressed slots a step (scatter)
    program_cols: int  # columns a program covers (whole groups; at least one group)
    num_warps: int


# The select form loads a group's kept offsets and values one slot at a time (n / block loads
# of each an element): at 2:4-1:8 it ran 2.9-3.8 TB/s (densify_sweep.py, 2026-12-04/
# at-040829e), but through linear at 17 tokens on the H200 (the route: densify + cuBLAS) 16:32
# took 135 us on 4096^2 and 414 on 14336 x 4096, 8:32 81 and 256, against cuBLAS's 14 and 31
# on the dense weight (2026-12-06/at-6286a4d/nm_route_nmdensified.txt): a densify of ~121 /
# ~383 us (16:32) and ~67 / ~225 (8:32). The scatter form's cost is set by the kept entries,
# not n: at the same densities (2:4, 2:8) it ran 32.0 / 100.3 and 24.0 / 83.2 us. So m >= 32
# with 8+ kept slots a group scatters. Estimated from those two runs, not yet timed on these
# patterns (densify_sweep.py PATTERNS=...: run_h200.sh step densifylarge); 8:16 (~21 against
# 2:4's 32) and 4:16 (~14 against 24) keep select.
SELECT_MOST_KEPT_WIDE = 4  # kept slots a group (n / block) the select form takes at m >= 32


@_memo
def densify_nm_config(rows: int, cols: int, n: int, m: int, block: int = 1) -> DensifyNmConfig:
    """Select for power-of-two m: 2 rows x 1024 columns a step, each thread holding whole groups
    (16-byte stores for m >= 8 in bf16, no shared memory, two loads per kept slot); programs
    of 2048 columns. Other m, and m >= 32 keeping more than SELECT_MOST_KEPT_WIDE slots of
    `block` columns a group: zeros then scatter, 4 rows x 256 slots a step."""
    block_k = min(1024, max(16, next_power_of_2(cols)))
    block_s = max(16, min(256, next_power_of_2(max(cols // m * n, 1))))
    many_kept = m >= 32 and n // block > SELECT_MOST_KEPT_WIDE
    if m & (m - 1) == 0 and not many_kept:
        return DensifyNmConfig(True, True, 2, max(block_k, m), block_s, 2048, num_warps=4)
    return DensifyNmConfig(False, True, 4, block_k, block_s, 2048, num_warps=4)


# The densify through shared memory (densify_shared.py) on CUDA for 2- and 4-byte values, where
# a row fits in SHARED_MOST bytes; off: the Triton densify above.
SHARED_ROWS = True
# A program's rows, bytes. On the H200 one 8 KB row a program reached the bytes' floor (3.0-3.7
# TB/s read + written, a memset 3.3), 32 KB programs of 4 rows 2.3-3.3 (2026-12-04/at-040829e).
SHARED_PROGRAM = 8 * 1024
SHARED_MOST = 64 * 1024  # one row's most bytes
# Weights of fewer elements keep the Triton densify: on DLMC's (16K-1.2M elements) the shared
# one was 0-6 us slower a call (2026-12-04/at-1cb7a48/dlmc, not understood), on 16.7M (4096^2)
# 7 us faster; between them not measured.
SHARED_LEAST_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class DensifyCsrSharedConfig:
    rows_per_program: int  # a power of two
    row_span: int  # a row's room: the power of two >= its columns
    block_nnz: int  # a row's entries a scatter step (32-1024, a power of two)
    num_warps: int


@_memo
def densify_csr_shared_config(rows: int, cols: int, nnz: int, elem: int):
    """Rows a program filling SHARED_PROGRAM bytes (at most 16), else one row up to SHARED_MOST;
    None past it, under SHARED_LEAST_ELEMENTS, off, or for values of other than 2 or 4 bytes
    (the Triton densify)."""
    row_span = next_power_of_2(max(cols, 1))
    if not SHARED_ROWS or elem not in (2, 4) or row_span * elem > SHARED_MOST:
        return None
    if rows * cols < SHARED_LEAST_ELEMENTS:
        return None
    rows_per_program = max(1, min(16, SHARED_PROGRAM // (row_span * elem)))
    # a mean row's entries a step, at most 1024 a step over the program's rows (8 a thread:
    # a (16, 512) step took 255 registers and a 1794-instruction loop)
    block_nnz = min(1024, max(32, mean_row(nnz, rows)))
    while rows_per_program * block_nnz > 1024 and block_nnz > 32:
        block_nnz //= 2
    return DensifyCsrSharedConfig(rows_per_program, row_span, block_nnz, 4)
