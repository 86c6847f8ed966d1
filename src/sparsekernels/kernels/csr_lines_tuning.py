"""Where and how the CSR walks on the line layout (formats/_line_layout.py: a byte a column from
each 64-slot line's base) run: one token (spmm_csr_token_lines.py) and 2-16 tokens
(spmm_csr_few_lines.py). The routes are ops/_csr_lines.py's."""

from __future__ import annotations

from .tuning import CSR_TOKEN_BLOCK, CSR_TOKEN_FEW_ROWS, SpmmCsrTokenConfig

# The one-token walk on the line layout (spmm_csr_token_lines.py over formats/_line_layout.py:
# a byte a column from each 64-slot line's base, x gathered by inline PTX) on large half-precision
# weights of more than CSR_TOKEN_FEW_ROWS rows whose lines hold few padding slots (random 70%
# rows: 1.01-1.03 slots an entry; 90%: ~2.5, refused). The layout and packed values are a
# second copy of the weight kept beside the CSR arrays (~3.1 bytes an entry): the price of the
# faster read. Two rows a program, a warp each, 256 slots a step. Cold, bf16, 70%, us, the
# plain walk -> this (results/nvidia-h200/2026-12-04/at-d8b7176/csr_lines_cold_configs.txt):
# 4096 x 14336 21.5 -> 20.6, 14336 x 4096 24.1 -> 21.4, 28672 x 4096 42.8 -> 36.9, 11008 x 4096
# 19.5 -> 17.8, 4096 x 4096 9.1 -> 8.4; on <= 2048 rows no faster (1024 x 8192 6.8 -> 9.3).
CSR_TOKEN_LINES = True
CSR_LINES_MIN_NNZ = 1 << 20
CSR_LINES_MIN_ROWS = CSR_TOKEN_FEW_ROWS + 1
CSR_LINES_MOST_SLOTS = 1.25  # slots a stored entry
# Rows stored in the order programs visit them (neighbouring programs read neighbouring
# memory): 2-4% faster, cold, bf16, 70%, us (2026-12-04/at-04a88ad/csr_lines_cold_options.txt):
# 4096 x 14336 20.5 -> 20.2, 14336 x 4096 21.4 -> 20.9, 28672 x 4096 37.4 -> 36.5, 4096^2 8.5
# -> 8.2, 6144 x 4096 11.0 -> 10.6. The weight loaded two steps ahead of the gather instead of
# one: 1.3-1.5x slower (30.3, 28.1, 52.3; its loop 140 -> 182 instructions a warp).
CSR_LINES_BY_SEQUENCE = True
CSR_LINES_AHEAD = 1
# The PTX gather comparing each slot with its line's held count itself (no mask passed in: a
# select and a compare less a slot; sm_90 loop 138 -> 121 instructions a step). Written after
# the forty-third session's device time: off until csr_lines_cold.py's "/h" forms measure it.
CSR_LINES_HELD_IN_ASM = False


def spmm_csr_token_lines_config(nnz: int, rows: int, dtype) -> SpmmCsrTokenConfig | None:
    """The line layout's one-token configuration where it is routed, else None."""
    half = dtype.is_floating_point and dtype.itemsize == 2  # bf16 or fp16 (torch.dtype)
    large = nnz >= CSR_LINES_MIN_NNZ and rows >= CSR_LINES_MIN_ROWS
    if not (CSR_TOKEN_LINES and half and large):
        return None
    return SpmmCsrTokenConfig(rows_per_program=2, block=CSR_TOKEN_BLOCK, num_warps=2)


# The few-token walk on the line layout (spmm_csr_few_lines.py: 2-16 tokens, B's rows read as
# vectors by inline PTX, sm_90 loops without shared memory) on the weights the one-token line
# walk takes. Written after the forty-third session's device time: off until
# benchmarks/sweeps/csr_few_lines_cold.py measures it against the route (the few-token walk,
# the scatter backend from 9 tokens) and cuBLAS. Two rows a program, a warp each; steps of
# 256 slots up to 4 tokens, 128 up to 8, 64 up to 16 (32 sums a thread).
CSR_FEW_LINES = False


def spmm_csr_few_lines_config(nnz: int, rows: int, n: int, dtype) -> SpmmCsrTokenConfig | None:
    """The few-token line walk's configuration at N = n where it is routed, else None."""
    if not CSR_FEW_LINES or spmm_csr_token_lines_config(nnz, rows, dtype) is None:
        return None
    block = 256 if n <= 4 else 128 if n <= 8 else 64
    return SpmmCsrTokenConfig(rows_per_program=2, block=block, num_warps=2)
