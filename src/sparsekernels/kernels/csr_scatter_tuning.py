"""Where and how the scatter kernel (spmm_csr_scatter.py) runs CSR weights in half precision.

H200, bf16, cold L2, LLM shapes at 70% and 90% (benchmarks/results/nvidia-h200/2026-12-02/
at-52aea24/csr_scatter_cold.txt), against the CSR route (the few-token kernel to 16 tokens,
densify + cuBLAS past it) and dense:
- 16 tokens, 16-token tiles, a split for 8 programs an SM: 36-40 us at 70% on 14336 x 4096
  and 4096 x 14336 (route 73, dense 32-34), 25-27 at 90% (route 34-37); 4096 x 4096 11.5-15.3
  (route 15.3-25.8, dense 14).
- 64 tokens, 32-token tiles: 57-88 us on the large shapes (route 91-147, dense 33-37);
  4096 x 4096 30-31 (route 27-34).
- 128 tokens: no better than densifying (92-151 against 92-149); 1-4 tokens: the CSR
  kernels are faster (1 token: 10-24 us against 21-33).
- Through linear (at-d3e6a60/csr_scatter_route.txt): 8 tokens at 70% 14.0-36.2 us against
  the few-token kernel's 18.4-52.6, at 90% 10.9-26.5 against 11.5-26.0 (slower on
  4096 x 14336); 32 tokens 20.5-55.4 against densifying's 28.5-144.7 on all three shapes.
- With the runs spread over the banks (at-5bed061, cuBLAS in the same run): 16 tokens 13.6-34.0
  us at 70% (0.91-1.01x dense), 11.2-26.2 at 90% (1.21-1.27x). A split for 4 programs an SM
  instead of 8 was 3-15% faster on 4096 x 4096 and 4096 x 14336 and 9-11% slower on
  14336 x 4096, in a run where the route and the same configuration called directly (its
  output row-major, not linear's) differ by up to 9%: left at 8.
- Past 16 tokens (32-token tiles), a split for 4 programs an SM, not 8 (at-8e676ab/
  csr_scatter_cold_wide.txt, 24-64 tokens): 4096 x 14336 39-71 us against 51-81 at 70%, 33-57
  against 41-77 at 90%; 4096 x 4096 16-25 against 25-37 (8 an SM, or densifying past 32
  tokens); 14336 x 4096 5-10% faster at 70%, 0-8% slower at 90% at 32-64 tokens. Fewer
  ranges, fewer partial tiles to sum. Dense is still faster there (12-36 us).
- Steps loaded two ahead (`steps_ahead=2`, in pairs, no copies waiting on loads) was no faster
  anywhere (at-211b1ee), nor runs cut at the scatter (`late_mask`, at-4ba51d1; dropped).
- 128-row tiles on 4 warps (a warp's two m16 tiles share its reads of B's tile), a split for 4
  programs an SM (at-743e956/csr_scatter_cold.txt): at 90% on 4096 x 14336 and 14336 x 4096,
  8-16 tokens 21.4-23.1 us against 21.9-26.2 (the route then: 8 tokens on the few-token
  kernel), 64 tokens 45.2-50.2 against 57.1-61.8; 32 tokens 30.2 against 34.9 on 14336 x 4096
  but 40.8 against 33.6 on 4096 x 14336. At 70% slower to 16 tokens (34.9-37.2 against
  31.8-33.2); on 4096 x 4096 at 90% slower (10.8-11.2 against 9.7-10.0). The copy of the
  weight is built for one tile height, so the height follows the weight, not the tokens.
  At 8 tokens and 90% the scatter kernel beat the few-token kernel on all three shapes
  (9.7-21.7 us against 11.3-26.2; 4096 x 14336 even). At 17-32 tokens 128-row tiles take a
  split for 2 programs an SM (at-6638332): 30.6-30.9 us on both shapes at 90% against 36.6-41.1
  at 4 and 32.8-32.9 on 64-row tiles (dense 31-34); at 64 tokens 4 stays (45.5 against 50.2).
"""

from __future__ import annotations

from dataclasses import dataclass

CSR_SCATTER_MIN_N = 9  # below: the CSR few-token kernel
CSR_SCATTER_MAX_N = 64  # above: densify + cuBLAS (but tall tiles, below)
CSR_SCATTER_8_MIN_DENSITY = 0.25  # 8 tokens too, for weights this dense (70% sparse: 0.3)
CSR_SCATTER_8_MIN_ELEMENTS = 2**24  # ... or this large (measured 4096 x 4096 and up at 90%)
# 128-row tiles on weights this sparse and large (90% on 4096 x 14336 and 14336 x 4096)
CSR_SCATTER_TALL_TILE_MAX_DENSITY = 0.2
CSR_SCATTER_TALL_TILE_MIN_ELEMENTS = 2**25
# Past 32 tokens only on weights of 4096 x 4096 or more: there, 4 programs an SM beat densifying
# (4096 x 4096 at 48-64 tokens: 20-25 us against 27-37, at-8e676ab); smaller ones unmeasured.
CSR_SCATTER_WIDE_MIN_ELEMENTS = 2**24
# To 80 tokens on the 128-row-tile weights (sparse and large), where it beat densifying even
# after the densify through shared memory: 80 tokens at 90%, us, through linear, scatter /
# densify + cuBLAS (2026-12-04/at-040829e/csr_scatter_route.txt): 4096 x 14336 67.6 / 81.2,
# 14336 x 4096 67.7 / 77.3; at 128 tokens 83.8 / 82.9 and 88.7 / 78.8 (96 not measured). With
# the unscatter (below), to 128 tokens: H100, the same sweep (2026-12-07/at-1233355/
# csr_scatter_route.txt), scatter / the route then (densify + cuBLAS), us: 4096 x 14336 at 96
# tokens 60.4 / 103.5, at 128 72.6 / 106.1; 14336 x 4096 58.1 / 97.1 and 75.8 / 97.3.
# (cuBLAS on the dense weight, 44-52 us there, is what a kept dense copy gives: weight_copies.)
CSR_SCATTER_TALL_MAX_N = 128
# Zeros only at the places the step before stored (the kernel's `unscatter`), not the whole
# tile, on weights at most this dense. H100, bf16, cold L2, the routed tile -> with unscatter
# (results/nvidia-h100/2026-12-06/at-c87015f/csr_scatter_unscatter.txt): 90% 128-row tiles
# 22.4-24.2 -> 19.5-19.9 us at 16 tokens, 31.2-31.9 -> 26.9-28.4 at 32; 95% 20.7-23.1 ->
# 17.8-19.6 and 26.4-29.4 -> 25.0-26.1; 4096^2 (64-row tiles) 3-7% faster at 90-95%. At 80% even
# or slower (14336 x 4096 at 32 tokens 33.3 -> 37.0), at 70% slower (at-0d00394: 40.1 -> 42.7).
CSR_SCATTER_UNSCATTER_MAX_DENSITY: float | None = 0.15


def csr_scatter_takes(n: int, density: float, elements: int) -> bool:
    """Whether the route takes the scatter kernel for N = n on a weight of this density and
    this many elements (rows x K)."""
    if n == CSR_SCATTER_MIN_N - 1:
        return density >= CSR_SCATTER_8_MIN_DENSITY or elements >= CSR_SCATTER_8_MIN_ELEMENTS
    if n > CSR_SCATTER_MAX_N:
        tall = (density <= CSR_SCATTER_TALL_TILE_MAX_DENSITY
                and elements >= CSR_SCATTER_TALL_TILE_MIN_ELEMENTS)  # fmt: skip
        return tall and n <= CSR_SCATTER_TALL_MAX_N
    if n > 32:
        return elements >= CSR_SCATTER_WIDE_MIN_ELEMENTS
    return n >= CSR_SCATTER_MIN_N


def csr_scatter_tile_rows(rows: int, k: int, stored: int) -> int:
    """Rows a tile of the weight's copy (tiled_entries' block_m) for a (rows, k) weight of
    `stored` entries: 128 where sparse and large enough (see above), else 64."""
    elements = rows * k
    sparse = stored <= CSR_SCATTER_TALL_TILE_MAX_DENSITY * elements
    return 128 if sparse and elements >= CSR_SCATTER_TALL_TILE_MIN_ELEMENTS else 64


@dataclass(frozen=True)
class CsrScatterConfig:
    block_n: int  # tokens a program
    programs_per_sm: int  # the K split aims at this many programs an SM
    warps: int = 4  # a warp's 16 rows at 64-row tiles, two m16 tiles a warp at 128
    unscatter: bool = False  # zeros only at the last step's places (sparse weights)


def csr_scatter_config(
    n: int, rows: int, k: int, block_m: int = 64, density: float = 1.0
) -> CsrScatterConfig:
    """The tile and split for N = n on a (rows, k) weight copied in `block_m`-row tiles: at
    128 rows 4 programs an SM, 2 at 17-32 tokens (fewer ranges to sum); at 64 to 16 tokens 4
    programs an SM where rows <= k (6-16% faster on 4096 x 4096, 1-11% on 4096 x 14336,
    at-1a0b96b) and 8 on tall weights (14336 x 4096: 4 was 9-13% slower); past 16 tokens 4
    (see above). `unscatter` at densities to CSR_SCATTER_UNSCATTER_MAX_DENSITY."""
    block_n = 16 if n <= 16 else 32
    limit = CSR_SCATTER_UNSCATTER_MAX_DENSITY
    unscatter = limit is not None and density <= limit
    tall_programs = 2 if 16 < n <= 32 else 4
    programs = tall_programs if block_m == 128 else 4 if n > 16 or rows <= k else 8
    return CsrScatterConfig(block_n=block_n, programs_per_sm=programs, unscatter=unscatter)
