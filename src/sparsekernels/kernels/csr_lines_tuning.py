"""Where and how the CSR walks on the line layout (formats/_line_layout.py: a byte a column from
each 64-slot line's base) run: one token (spmm_csr_token_lines.py) and 2-16 tokens
(spmm_csr_few_lines.py). The routes are ops/_csr_lines.py's."""

from __future__ import annotations

from .._env import flag
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
# SPARSEKERNELS_CSR_LINES=0 (read at import) turns both line walks off, the plain walks run
# instead: nothing is kept beside a CSR weight at 1-4 tokens (a 70% layer holds 1.20 bytes a
# dense element instead of 2.15, 2026-12-04/at-c14ba34/csrinplace/layer_memory.txt) and its
# one-token call takes 21.6 instead of 19.2 us on 4096 x 14336 (at-3983a71), dense 31.4.
LINES_WANTED = flag("SPARSEKERNELS_CSR_LINES", True)
CSR_TOKEN_LINES = LINES_WANTED
CSR_LINES_MIN_NNZ = 1 << 20
CSR_LINES_MIN_ROWS = CSR_TOKEN_FEW_ROWS + 1
CSR_LINES_MOST_SLOTS = 1.25  # slots a stored entry
# Line lengths tried in order (formats/_line_layout.LINES): 64-slot lines, then 16-slot lines
# for sparser rows (~90%: 64 entries span past 255 columns; 16 span ~160, 3.25 bytes an entry
# read against CSR's 4). 90%, cold, bf16, us, the plain walk -> 16-slot lines
# (2026-12-04/at-1e8e4fc/csr_lines_cold.txt): 4096 x 14336 10.1 -> 10.0, 14336 x 4096 12.3
# -> 11.5, 28672 x 4096 22.5 -> 19.0, 4096^2 5.6 -> 5.3; at 70% 64-slot lines stay faster.
CSR_LINE_LENGTHS = (64, 16)
# Rows stored in the order programs visit them (neighbouring programs read neighbouring
# memory): 2-4% faster, cold, bf16, 70%, us (2026-12-04/at-04a88ad/csr_lines_cold_options.txt):
# 4096 x 14336 20.5 -> 20.2, 14336 x 4096 21.4 -> 20.9, 28672 x 4096 37.4 -> 36.5, 4096^2 8.5
# -> 8.2, 6144 x 4096 11.0 -> 10.6. The weight loaded two steps ahead of the gather instead of
# one: 1.3-1.5x slower (30.3, 28.1, 52.3; its loop 140 -> 182 instructions a warp).
CSR_LINES_BY_SEQUENCE = True
CSR_LINES_AHEAD = 1
# The PTX gather comparing each slot with its line's held count itself (no mask passed in: a
# select and a compare less a slot; sm_90 loop 138 -> 121 instructions a step): 4-6% faster at
# 70%, cold, bf16, us (2026-12-04/at-4252cf3/csr_lines_cold.txt, 2x256/w2/s -> /h): 4096 x
# 14336 20.3 -> 19.3, 14336 x 4096 20.9 -> 19.7, 28672 x 4096 36.4 -> 35.1, 4096^2 8.2 -> 7.8.
CSR_LINES_HELD_IN_ASM = True
# The line walks (one token and few) reading the CSR's own values instead of a packed copy,
# through an in-place layout (formats/_line_layout.py: lines cut to start at multiples of 8
# entries are read in place as aligned 16-byte vectors; ~a line a row, where the row starts off
# the alignment, from a small copy): a 70% layer at decode holds 1.59-1.62 bytes a dense
# element instead of 2.15-2.19 (dense 2; H200, 2026-12-04/at-c14ba34/layer_memory.txt). Off:
# slower, cold, bf16, 70%, 4096 x 14336: 21.6 against the packed walk's 19.2 us, no better
# than the plain walk's 21.7 (at-c07cd00); the in-place code on packed data took 20.9
# (at-3983a71/csr_in_place_probe.txt): the code costs most. Its last form (each step's windows,
# one base and a select of offsets: an sm_90 loop of 122 instructions a step against 121) is
# still ~10% slower: 21.1 against 19.2 us (2026-12-05/at-c3b827c/csr_in_place_probe.txt).
CSR_LINES_VALUES_IN_PLACE = False


def spmm_csr_token_lines_config(nnz: int, rows: int, dtype) -> SpmmCsrTokenConfig | None:
    """The line layout's one-token configuration where it is routed, else None."""
    half = dtype.is_floating_point and dtype.itemsize == 2  # bf16 or fp16 (torch.dtype)
    large = nnz >= CSR_LINES_MIN_NNZ and rows >= CSR_LINES_MIN_ROWS
    if not (CSR_TOKEN_LINES and half and large):
        return None
    return SpmmCsrTokenConfig(rows_per_program=2, block=CSR_TOKEN_BLOCK, num_warps=2)


# The few-token walk on the line layout (spmm_csr_few_lines.py: B's rows read as vectors by
# inline PTX, sm_90 loops without shared memory) on the weights the one-token line walk takes,
# at 2-4 tokens: there it beats the route it replaces (the few-token walk) and cuBLAS; from 5
# it loses to both (its sums grow with the tokens). Cold, bf16, 70%, us, cuBLAS / few-token
# walk / this (2026-12-04/at-4252cf3/csr_few_lines_cold.txt): 2 tokens, two rows a program and
# 256 slots a step: 4096 x 14336 31.6 / 29.3 / 21.8, 14336 x 4096 30.2 / 30.2 / 22.1, 28672 x
# 4096 61.0 / 54.4 / 39.7, 4096^2 13.6 / 12.2 / 8.9; 4 tokens, a row a program (one warp) and
# 128 slots: 32.8 / 32.8 / 27.6, 30.2 / 37.3 / 29.7, 56.3 / 64.8 / 53.0, 13.9 / 13.6 / 10.7;
# 8 tokens at its best: 38.4 (33.0 cuBLAS), 39.6 (32.4), 70.1 (56.9), 14.4 (13.7).
CSR_FEW_LINES = LINES_WANTED
CSR_FEW_LINES_MOST_TOKENS = 4
CSR_FEW_LINE_LENGTHS = (64,)  # the layouts it takes (16-slot lines not measured at 2-4 tokens)


def spmm_csr_few_lines_config(nnz: int, rows: int, n: int, dtype) -> SpmmCsrTokenConfig | None:
    """The few-token line walk's configuration at N = n where it is routed, else None."""
    if not CSR_FEW_LINES or n > CSR_FEW_LINES_MOST_TOKENS:
        return None
    if spmm_csr_token_lines_config(nnz, rows, dtype) is None:
        return None
    if n <= 2:
        return SpmmCsrTokenConfig(rows_per_program=2, block=256, num_warps=2)
    return SpmmCsrTokenConfig(rows_per_program=1, block=128, num_warps=1)
