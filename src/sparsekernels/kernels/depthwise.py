"""Depthwise 3x3 convolution (padding 1, stride 1 or 2) with fused bias + activation.

One program computes a BLOCK_C x BLOCK_H x BLOCK_W tile of the output: BLOCK_C channels of one
image, a BLOCK_H x BLOCK_W window of their planes. It loads its channels' 9 weights and bias
once, then for each of the 9 taps one shifted, masked tile of the input (zero padding by mask);
the taps of a tile overlap, so after the first the loads hit L1 and each input byte crosses
DRAM about once. Accumulation is fp32 (fp64 for fp64 inputs). Strides are arguments: the same
kernel reads NCHW (tiles wide along W, one or a few channels) and channels_last (tiles wide
along C); Triton specializes unit strides, so the contiguous dimension's loads coalesce.
Addresses inside one image are int32 (the launcher checks that an image fits); the image and
first-channel offsets are int64.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


# Sizes used only in comparisons and image offsets are not specialized (fewer compilations
# across a network's layers); W, WO and the row/column strides are, for vectorized access.
@triton.jit(do_not_specialize=["C", "H", "HO", "stride_xn", "stride_on"])
def _depthwise3x3_kernel(
    x,  # (N, C, H, W): strides stride_xn, stride_xc, stride_xh, stride_xw (any layout)
    weight,  # (C, 9) contiguous: the 3x3 taps of channel c row by row
    bias,  # (C,) when HAS_BIAS
    out,  # (N, C, HO, WO): strides stride_on, stride_oc, stride_oh, stride_ow
    C,
    H,
    W,
    HO,
    WO,
    stride_xn,
    stride_xc,
    stride_xh,
    stride_xw,
    stride_on,
    stride_oc,
    stride_oh,
    stride_ow,
    STRIDE: tl.constexpr,  # convolution stride, 1 or 2
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # 0 none, 1 relu, 2 gelu
    ACC_DTYPE: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_W: tl.constexpr,
):
    tiles_w = tl.cdiv(WO, BLOCK_W)
    pid_hw = tl.program_id(0)
    c0 = tl.program_id(1) * BLOCK_C
    n = tl.program_id(2).to(tl.int64)
    oh0 = (pid_hw // tiles_w) * BLOCK_H
    ow0 = (pid_hw % tiles_w) * BLOCK_W

    dc = tl.arange(0, BLOCK_C)
    mask_c = (c0 + dc) < C
    dc3 = dc[:, None, None]
    mask_c3 = mask_c[:, None, None]
    oh = oh0 + tl.arange(0, BLOCK_H)[None, :, None]
    ow = ow0 + tl.arange(0, BLOCK_W)[None, None, :]

    x += n * stride_xn + c0.to(tl.int64) * stride_xc
    x_c = dc3 * stride_xc
    w_ptr = weight + (c0 + dc3) * 9
    acc = tl.zeros((BLOCK_C, BLOCK_H, BLOCK_W), dtype=ACC_DTYPE)
    for kh in tl.static_range(3):
        ih = oh * STRIDE + (kh - 1)
        mask_h = mask_c3 & (ih >= 0) & (ih < H)
        x_h = x_c + ih * stride_xh
        for kw in tl.static_range(3):
            iw = ow * STRIDE + (kw - 1)
            mask = mask_h & (iw >= 0) & (iw < W)
            tap = tl.load(w_ptr + (kh * 3 + kw), mask=mask_c3, other=0.0).to(ACC_DTYPE)
            vals = tl.load(x + x_h + iw * stride_xw, mask=mask, other=0.0).to(ACC_DTYPE)
            acc += tap * vals

    if HAS_BIAS:
        acc += tl.load(bias + c0 + dc3, mask=mask_c3, other=0.0).to(ACC_DTYPE)
    if ACTIVATION == 1:
        acc = tl.where(acc < 0, 0.0, acc)  # NaN stays NaN, as torch.relu
    elif ACTIVATION == 2:
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    out += n * stride_on + c0.to(tl.int64) * stride_oc
    out_ptrs = out + dc3 * stride_oc + oh * stride_oh + ow * stride_ow
    mask_out = mask_c3 & (oh < HO) & (ow < WO)
    tl.store(out_ptrs, acc.to(out.dtype.element_ty), mask=mask_out)


_ACTIVATION_CODES = {"none": 0, "relu": 1, "gelu": 2}
_INT32_MAX = 2**31 - 1


def image_span(t: torch.Tensor) -> int:
    """Elements between the first and the farthest element of one image of t (N, C, H, W)."""
    return sum(
        (size - 1) * stride for size, stride in zip(t.shape[1:], t.stride()[1:], strict=True)
    )


def depthwise_conv3x3(
    *,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    out: torch.Tensor,
    stride: int,
    activation: str,
    block_c: int,
    block_h: int,
    block_w: int,
    num_warps: int,
) -> torch.Tensor:
    """Launch over out (N, C, HO, WO); weight (C, 9) contiguous, bias (C,) contiguous or None."""
    batch, channels, height_out, width_out = out.shape
    if out.numel() == 0:
        return out
    if max(image_span(x), image_span(out)) > _INT32_MAX:
        raise ValueError("one image of x or out spans more than 2^31 elements")
    tiles = triton.cdiv(height_out, block_h) * triton.cdiv(width_out, block_w)
    grid = (tiles, triton.cdiv(channels, block_c), batch)
    acc = tl.float64 if out.dtype == torch.float64 else tl.float32
    _depthwise3x3_kernel[grid](
        x,
        weight,
        bias if bias is not None else weight,
        out,
        channels,
        x.shape[2],
        x.shape[3],
        height_out,
        width_out,
        *x.stride(),
        *out.stride(),
        STRIDE=stride,
        HAS_BIAS=bias is not None,
        ACTIVATION=_ACTIVATION_CODES[activation],
        ACC_DTYPE=acc,
        BLOCK_C=block_c,
        BLOCK_H=block_h,
        BLOCK_W=block_w,
        num_warps=num_warps,
    )
    return out
