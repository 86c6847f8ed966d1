"""Which CPU products of spmm/linear take the dense backend (densify, then BLAS) over torch's sparse
CSR matmul (MKL): a cost model fitted to quiet timings on a 2-core x86 box (torch 2.13 CPU
build, fp32, medians; scratch timings of 2026-12-04 recorded in benchmarks/NOTES.md).

MKL's CSR matmul costs about ten times BLAS's a multiply-add (0.15 against 0.015 ns, the same
on 1536 x 384 and 4096 x 4096), so below ~10% stored it wins at any token count; above, the
dense product wins once enough tokens pay for densifying the weight. Densifying (positions,
then an index_copy_, ops/_densify_cpu.py) costs ~3-9 ns a stored entry through linear, and
past 2^22 cells a fresh allocation's page faults add ~2 ns a cell (4096 x 4096 fp32: 27-34
ms of zeros). Measured crossovers (benchmarks/results/cpu/2026-12-04-dense-route): MiniLM's
384 x 384, 1536 x 384 and 384 x 1536 at 50-70% and 2:4 from 96-192 tokens, 2:8 from 96-192;
4096 x 4096 at 50% below 128, 70% and 2:8 128-256; 90% and 1:8 none up to 384 tokens (but
for 384 x 384 there). MKL's cost a multiply-add grows with the tokens (2:4 on 384 x 1536:
0.10 ns at 96, 0.17 at 384), so the linear model is conservative at many tokens.
Half precision follows the same rule: both backends compute it in fp32 on the CPU (a bf16 BLAS
product on a CPU without bf16 units ran ~10x slower than fp32: 1536 x 384 at 70% and 384
tokens, torch's bf16 dense 38.0 ms, widened to fp32 4.9, the sparse matmul 11.7, the dense
backend widened 6.6; ops/_dense.widens_on_cpu). float64 keeps the sparse matmul (not timed).
"""

from __future__ import annotations

import torch

SPARSE_NS_PER_PRODUCT = 0.15  # torch's CSR matmul, a stored entry x a token
DENSE_NS_PER_PRODUCT = 0.015  # BLAS sgemm, a cell x a token
DENSIFY_NS_PER_ENTRY = 7.0
DENSIFY_NS_PER_CELL_LARGE = 2.0
LARGE_CELLS = 2**22
# Prefer the sparse matmul unless dense is clearly faster: it holds no dense temporary, a NaN
# in B stays out of the columns it never multiplies, and this VM's speed drifted between runs
# (interleaved timings put 70% on 1536 x 384 between 128 and 192 tokens, 50% on 384 x 384 at
# ~100, 2:8 between 128 and 192).
DENSE_MARGIN = 1.25
MAX_CELLS = 2**27  # the dense temporary's elements, all batches (512 MB in fp32)
WIDTHS = (torch.float32, torch.bfloat16, torch.float16)  # (half precision computed in fp32)


def spmm_prefers_dense_on_cpu(n: int, nnz: int, cells: int, dtype: torch.dtype) -> bool:
    """`nnz`: stored entries, `cells`: the dense weight's elements (both over the whole batch),
    `n`: tokens (B's columns)."""
    if dtype not in WIDTHS or not 0 < cells <= MAX_CELLS or n <= 0:
        return False
    large = cells > LARGE_CELLS
    densify = nnz * DENSIFY_NS_PER_ENTRY + (cells * DENSIFY_NS_PER_CELL_LARGE if large else 0.0)
    sparse = SPARSE_NS_PER_PRODUCT * nnz * n
    dense = densify + DENSE_NS_PER_PRODUCT * cells * n
    return sparse > DENSE_MARGIN * dense
