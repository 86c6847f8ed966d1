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
    block_rows: int
    block_nnz: int
    block_n: int
    num_warps: int


def spmm_csr_config(n: int) -> SpmmCsrConfig:
    """From an H200 sweep (4096 and 14336 rows x 4096, 70-90% sparse, bf16, 2026-11-29):
    N = 1 wants one row per program and long runs of stored entries; N <= 16 a few rows per
    program; larger N a few rows and a column tile up to 128 wide."""
    if n == 1:  # one warp per row: 2.6x dense at 90% (2026-11-29-b/decode_sweep.txt)
        return SpmmCsrConfig(block_rows=1, block_nnz=256, block_n=1, num_warps=1)
    if n <= 16:
        block_n = triton.next_power_of_2(n)
        return SpmmCsrConfig(block_rows=4, block_nnz=128, block_n=block_n, num_warps=2)
    block_n = min(128, triton.next_power_of_2(n))
    return SpmmCsrConfig(block_rows=4, block_nnz=32, block_n=block_n, num_warps=4)


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
    CUDA cores. Decode sizes (N <= 16) use few rows and long slot runs per program, so even a
    4096-row weight spreads over thousands of programs (H200 sweep, 2026-11-29)."""
    tile_rows = _largest_power_of_two_dividing(vector, 64)
    if not dtype_is_fp64 and tile_rows >= 16 and n_cols >= 16:
        block_n = 256 if n_cols >= 256 else max(16, triton.next_power_of_2(n_cols))
        return SpmmNmConfig(True, tile_rows, 32, block_n, num_warps=8, num_stages=3)
    block_n = min(16, triton.next_power_of_2(max(n_cols, 1)))
    if n_cols <= 16:
        return SpmmNmConfig(False, 2, min(512, 8192 // (2 * block_n)), block_n, 2, 2)
    return SpmmNmConfig(False, 32, max(8, 4096 // (32 * block_n)), block_n, 4, 2)


# ------------------------------------------------------------------ sddmm_csr, softmax_csr
@dataclass(frozen=True)
class SddmmCsrConfig:
    block_nnz: int
    block_k: int
    num_warps: int


def _mean_row(nnz: int, rows: int) -> int:
    """Stored entries in an average row, rounded up to a power of 2."""
    return triton.next_power_of_2(max(1, -(-nnz // max(rows, 1))))


def sddmm_csr_config(k: int, nnz: int, rows: int) -> SddmmCsrConfig:
    """First-kernel heuristic: a K chunk as wide as K up to 128; about 4096 products a step
    (BLOCK_NNZ x BLOCK_K), but no more stored entries a step than an average row holds."""
    block_k = max(16, min(128, triton.next_power_of_2(max(k, 1))))
    row = _mean_row(nnz, rows)
    block_nnz = max(16, min(4096 // block_k, row))
    return SddmmCsrConfig(block_nnz, block_k, num_warps=4 if block_nnz * block_k >= 2048 else 2)


@dataclass(frozen=True)
class SoftmaxCsrConfig:
    block: int
    num_warps: int


def softmax_csr_config(nnz: int, rows: int) -> SoftmaxCsrConfig:
    """First-kernel heuristic (forward and backward): a chunk the size of an average row, 32 to
    1024 entries; one warp up to 256 entries, then at most 8 entries per thread."""
    block = max(32, min(1024, _mean_row(nnz, rows)))
    return SoftmaxCsrConfig(block, num_warps=max(1, min(4, block // 256)))


# ------------------------------------------------------------------ dense fallback
# Where cuBLAS on the densified weight beats our kernels (H200 runs of 2026-11-29,
# benchmarks/results/nvidia-h200/2026-11-29): the CUDA-core kernels lose to tensor cores at
# batched sizes in half precision, and to strict fp32 below ~90% sparsity. Densifying costs one
# pass over the dense weight, small next to a GEMM only from a few hundred columns on.
DENSE_FALLBACK_MIN_N = 128


def spmm_csr_prefers_dense(n: int, density: float, half_precision: bool) -> bool:
    if n < DENSE_FALLBACK_MIN_N:
        return False
    return half_precision or density > 0.1


def spmm_nm_prefers_dense(n: int, density: float, vector: int, half_precision: bool) -> bool:
    """The vector-wise tensor-core path wins at v >= 64 from 75% sparsity, at v = 32 from 87.5%."""
    if n < DENSE_FALLBACK_MIN_N:
        return False
    tile_rows = _largest_power_of_two_dividing(vector, 64)
    return not (tile_rows >= 32 and density * 64 / tile_rows <= 0.25)


# ------------------------------------------------------------------ fused block-sparse attention
@dataclass(frozen=True)
class BlockAttentionConfig:
    block_m: int  # queries per tile (the layout's tile shape, shared by forward and backward)
    block_n: int  # keys per tile
    num_warps: int
    num_stages: int
    bwd_num_warps: int
    bwd_num_stages: int

    def as_list(self) -> list[int]:
        return [
            self.block_m,
            self.block_n,
            self.num_warps,
            self.num_stages,
            self.bwd_num_warps,
            self.bwd_num_stages,
        ]


# Tiles of the natural order at least this full stay there; sparser tiles' entries go to a
# second pass in another order (formats/_block_layout.py) when that visits fewer tiles.
BLOCK_ATTENTION_SPLIT_FILL = 1 / 8
# Automatic dispatch takes the fused kernel when the visited tiles are at least this full on
# average (stored entries / visited tile positions); below, the composed CUDA-core path does
# less work. First guess: the fused kernel's tensor-core tile costs ~ 1/30 of the CUDA-core
# SDDMM + softmax + SpMM per entry; benchmarks/sweeps/attention_sweep.py measures it.
BLOCK_ATTENTION_MIN_FILL = 1 / 32
BLOCK_ATTENTION_MAX_HEAD_DIM = 128


def block_attention_config(head_dim: int, on_cpu: bool) -> BlockAttentionConfig:
    """64 x 64 tiles (what local windows and strides of 64-128 fill best); 16 x 16 in the CPU
    interpreter, which is slow per element."""
    if on_cpu:
        return BlockAttentionConfig(16, 16, 1, 1, 1, 1)
    warps = 4 if head_dim <= 64 else 8
    return BlockAttentionConfig(64, 64, warps, 3, warps, 2)


def block_attention_helps(fill: float) -> bool:
    return fill >= BLOCK_ATTENTION_MIN_FILL
