"""The fused block-sparse attention kernels' tiles (attention_block.py and its backward) and
when automatic dispatch takes them (ops/attention.py): named in one place, apart from the SpMM
routes of tuning.py."""

from __future__ import annotations

from dataclasses import dataclass


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
    if head_dim <= 64:  # forward 2 stages, backward 1 (dK/dV 203 -> 158 registers: 3 programs
        # an SM): the same bits, 3% less time on the Sparse Transformer's pattern (H100,
        # results/nvidia-h100/2026-12-07/at-83930b6/attention_stages.txt: 232.5 -> 226.0 us)
        return BlockAttentionConfig(64, 64, 4, 2, 4, 1)
    return BlockAttentionConfig(64, 64, 8, 3, 8, 2)


# A forward of several components (strided patterns) merges them in an fp32 scratch output,
# twice a half-precision output's bytes (strided:128:128, L = 16384, 16 heads: 97 MiB against
# 33 for one component). Its (batch, head) pairs run in chunks whose scratch stays within a
# quarter of the output's bytes, but never below 16 MiB (there 16: a 49 MiB peak): a chunk of
# that size still launches >= 1024 programs of 64 query rows at head dim 64 (~8 per SM of
# 132), so problems below it keep one chunk, and the largest take ~8 launches per component.
BLOCK_ATTENTION_SCRATCH_FRACTION = 1 / 4
BLOCK_ATTENTION_SCRATCH_MIN_BYTES = 16 << 20


def block_attention_scratch_bytes(output_bytes: int) -> int:
    """The most fp32 scratch a merged forward holds at once, for an output of this many bytes."""
    fraction = int(output_bytes * BLOCK_ATTENTION_SCRATCH_FRACTION)
    return max(BLOCK_ATTENTION_SCRATCH_MIN_BYTES, fraction)


# The fused kernel is taken automatically since its first H200 run (2026-11-29: GPU tests pass;
# attention_sweep.py: 1.5-7.8x the composed path, forward and backward, at L = 2048-16384).
# Set False to keep automatic dispatch on the composed path; backend="triton_flash" forces it.
BLOCK_ATTENTION_AUTO = True


def block_attention_not_chosen(fill: float) -> str | None:
    """Why automatic dispatch skips the fused kernel, or None when it should take it."""
    if not BLOCK_ATTENTION_AUTO:
        return "automatic choice turned off (tuning.BLOCK_ATTENTION_AUTO)"
    if fill < BLOCK_ATTENTION_MIN_FILL:
        return f"visited tiles are {fill:.1%} full: the composed path does less work"
    return None
