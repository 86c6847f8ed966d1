"""Tile shapes and routing of the depthwise 3x3 convolution kernel (kernels/depthwise.py), from
the H200 sweeps of 2026-11-29 (benchmarks/sweeps/depthwise_sweep.py). Not memoised: the ops are
traced by torch.compile, which warns on lru_cache."""

from __future__ import annotations

from dataclasses import dataclass

from ._sizes import cdiv, next_power_of_2


@dataclass(frozen=True)
class DepthwiseConfig:
    block_c: int
    block_h: int  # output rows one program walks
    block_w: int
    num_warps: int


# From the H200 sweep (2026-11-29): 256 outputs a row step, 8 rows, 2 warps was the fastest
# of the configurations tried on most batched MobileNetV1 layers (10-20% ahead of 512/4 warps).
DEPTHWISE_ROW_TILE = 256  # outputs per program per row step
DEPTHWISE_ROWS = 8
DEPTHWISE_WARPS = 2
DEPTHWISE_MIN_PROGRAMS = 4 * 132  # a few programs per multiprocessor (132 on an H200)


def depthwise_config(
    batch: int,
    channels: int,
    height_out: int,
    width_out: int,
    channels_last: bool,
    tile: int = DEPTHWISE_ROW_TILE,
    rows: int = DEPTHWISE_ROWS,
    num_warps: int = DEPTHWISE_WARPS,
    min_programs: int = DEPTHWISE_MIN_PROGRAMS,
) -> DepthwiseConfig:
    """A program walks `rows` output rows of a `tile`-output row tile, wide along the contiguous
    dimension: NCHW rows span up to 128 columns, then as many channels as fill the tile (small
    late-layer planes share a program); channels_last rows span up to 64 channels, then
    columns. Small problems get fewer rows, then fewer channels, per program so that the grid
    still has `min_programs` programs (1 in Triton's interpreter, which runs them one by one)."""
    p2 = next_power_of_2
    # an empty tensor launches nothing, but dispatch still asks for its tile shape
    batch, channels, height_out, width_out = (
        max(1, v) for v in (batch, channels, height_out, width_out)
    )
    if channels_last:
        block_c = min(64, p2(channels), tile)
        block_w = min(p2(width_out), max(1, tile // block_c))
    else:
        block_w = min(128, p2(width_out), tile)
        block_c = min(p2(channels), max(1, tile // block_w))
    block_h = max(1, min(rows, height_out))

    def programs() -> int:
        tiles = cdiv(height_out, block_h) * cdiv(width_out, block_w)
        return batch * cdiv(channels, block_c) * tiles

    while programs() < min_programs and block_h > 2:
        block_h = (block_h + 1) // 2
    while programs() < min_programs and block_c > 1 and block_c * block_w > 64:
        block_c //= 2
    warps = max(1, min(num_warps, block_c * block_w // 64))
    return DepthwiseConfig(block_c, block_h, block_w, warps)


def depthwise_prefers_triton(
    batch: int,
    channels: int,
    height: int,
    width: int,
    stride: int,
    half_precision: bool,
    channels_last: bool = False,
) -> bool:
    """Where automatic dispatch on CUDA runs our kernel instead of cuDNN (F.conv2d + bias +
    activation). From the H200 sweep of 2026-11-29 (benchmarks/sweeps/depthwise_sweep.py: every
    depthwise layer of MobileNetV1 at 224 px, width 1.0 and 1.8, batch 1 and 32, bf16 and fp32,
    NCHW, CUDA-graph medians, inputs rotated past L2; benchmarks/results/nvidia-h200/
    2026-11-29-depthwise): the kernel was 1.5-3.4x faster than cuDNN on 66 of the 72 layer
    shapes, 2.2-2.5x on each model's 13 layers together at batch 32 and 1.7-1.9x at batch 1.
    cuDNN matched it (0.98-1.08x) only at stride 2 on batched small planes: 14x14, and 28x28
    in fp32; those stay with cuDNN. The batch cut (16) lies between the measured 1 and 32 and is
    a guess; fp16 follows bf16 (same bytes, not measured); channels_last input was not
    measured, so it stays with cuDNN."""
    if channels_last:
        return False
    small_plane = height <= (16 if half_precision else 32)
    return not (stride == 2 and batch >= 16 and small_plane)
