"""The vector-wise N:M tensor-core kernel's small tiles (kernels/spmm_nm.py): where a small
weight gives its usual 64 x 256 tiles few programs (tuning.spmm_nm_config takes them)."""

from ._sizes import cdiv, next_power_of_2

# Weights too small for the tensor-core tiles of 64 rows x 256 tokens (MiniLM's, BERT-base's):
# where those give few programs, smaller tiles won on the H200 in bf16 at v = 64 (cold L2,
# results/nvidia-h200/2026-12-02/at-6ac7b02/nm_vw_tiles.txt): 16 x 32 tiles (64 slots a step)
# below 256 tokens, 32 x 64 past, e.g. 2:8 on 384 x 1536 5.0-7.4 -> 4.6-5.3 us (cuBLAS 4.7-5.3),
# 768 x 768 at 256 tokens 5.1 -> 3.6; 1:8 on 384 x 1536 3.4-5.2 -> 3.0-3.5 (cuBLAS 4.7-5.4).
# Not on longer K (768 x 3072 at 64 tokens 9.5 -> 12.3), nor from 24 programs below 256 tokens
# (1536 x 384: 2.6 -> 2.9), nor past 24 (3072 x 768 at 256 tokens: 5.3 -> 5.6). These tiles
# read linear's x^T in place from 256 tokens, or below it where K <= 768: its row-major copy
# cost 1.7-2.5 us a call, the strided read 0.3-1.6 (at-4985cf3/nm_vw_tiles_strided.txt);
# through linear (at-7b97b1e against at-6445e04) 768 x 768 at 256 tokens 2:8 5.5 -> 4.4 us,
# 1:8 4.7 -> 3.6, 1536 x 384 2:8 5.2 -> 4.1, 384 x 384 at 64-112 1:8 3.7 -> 2.6, 2:8 4.3 ->
# 3.8 (768 x 768 2:8 there 5.1 -> 5.3, 1:8 4.5 -> 4.1). The 16 x 32 tiles on K = 1536 lost
# (384 x 1536 2:8 at 64-112 tokens 6.6 -> 9.2 into linear's column-major out); 64 x 256 2-3x.
# Why (sm90_compile_stats.py "nm vector-wise", ALIGNED=1): in place, x^T is contiguous along K,
# where the kept columns are scattered, so each is a lone 2-byte load, too narrow for cp.async:
# the step loads synchronously (a 360-instruction loop against 122 pipelined), every step.
SMALL_TILES_MAX_K = 1536
SMALL_TILES_MAX_PROGRAMS = (12, 24)  # (below 256 tokens, from 256)
SMALL_TILES_IN_PLACE_MAX_K = 768  # (below 256 tokens)


def usual_block_n(n_cols: int) -> int:
    """The tokens of the vector-wise kernel's usual (64-row) tile."""
    return 256 if n_cols >= 256 else max(16, next_power_of_2(n_cols))


def vector_wise_small_tiles(n_cols: int, vector: int, rows: int, k: int) -> bool:
    """Whether a half-precision vector-wise product takes the small tensor-core tiles."""
    if vector % 64 or k > SMALL_TILES_MAX_K:
        return False
    programs = cdiv(rows, 64) * cdiv(n_cols, usual_block_n(n_cols))
    return programs <= SMALL_TILES_MAX_PROGRAMS[n_cols >= 256]


def small_tiles(n_cols: int, k: int) -> tuple[int, int, int, int, int, bool]:
    """(block_m, block_s, block_n, num_warps, num_stages, b_in_place) of the small tiles."""
    if n_cols >= 256:
        return 32, 64, 64, 4, 3, True
    return 16, 64, 32, 4, 2, k <= SMALL_TILES_IN_PLACE_MAX_K
