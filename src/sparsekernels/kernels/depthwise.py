"""Depthwise 3x3 convolution (padding 1, stride 1 or 2) with fused bias + activation.

One program owns BLOCK_C channels x BLOCK_W columns of one image's output and walks down
BLOCK_H of its rows. Each input row is loaded once per program as its three column taps (the
row shifted left, centred, shifted right; zero padding by mask), kept in registers and used
for every output row it touches: at stride 1 a row feeds three output rows, so a program
issues 3 loads per output instead of 9, and its masks and addresses are computed once per
program (columns) or once per row (a scalar). The 9 weights and the bias are loaded once.
Accumulation is fp32 (fp64 for fp64 inputs), in the reference's order (kh, then kw).
Strides are arguments: the same kernel reads NCHW (rows wide along W) and channels_last (wide
along C); Triton specializes unit strides, so the contiguous dimension's loads coalesce.
Addresses inside one image are int32 (the launcher checks that an image fits); the image and
first-channel offsets are int64.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._activation import ACTIVATION_CODES, activate
from ._sizes import cdiv


@triton.jit
def _load_row(x_left, m_left, m_mid, m_right, ih, H, stride_xh, stride_xw, ACC_DTYPE: tl.constexpr):
    """The three column taps of input row ih; zeros outside the image."""
    inside = (ih >= 0) & (ih < H)  # a scalar; where(), not &: the interpreter needs it
    row = x_left + ih * stride_xh
    left = tl.load(row, mask=tl.where(inside, m_left, False), other=0.0).to(ACC_DTYPE)
    mid = tl.load(row + stride_xw, mask=tl.where(inside, m_mid, False), other=0.0)
    right = tl.load(row + 2 * stride_xw, mask=tl.where(inside, m_right, False), other=0.0)
    mid, right = mid.to(ACC_DTYPE), right.to(ACC_DTYPE)
    return left, mid, right


@triton.jit
def _taps(acc, w_left, w_mid, w_right, left, mid, right):
    return acc + w_left * left + w_mid * mid + w_right * right


@triton.jit
def _store_row(acc, bias, out_row, mask, HAS_BIAS: tl.constexpr, ACTIVATION: tl.constexpr):
    if HAS_BIAS:
        acc += bias
    acc = activate(acc, ACTIVATION)
    tl.store(out_row, acc.to(out_row.dtype.element_ty), mask=mask)


# Sizes used only in comparisons and image offsets are not specialized (fewer compilations
# across a network's layers); the row and column strides are, for aligned, coalesced access.
@triton.jit(do_not_specialize=["C", "H", "W", "HO", "WO", "stride_xn", "stride_on"])
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
    BLOCK_H: tl.constexpr,  # output rows a program walks, one at a time
    BLOCK_W: tl.constexpr,
):
    tiles_w = tl.cdiv(WO, BLOCK_W)
    pid_hw = tl.program_id(0)
    c0 = tl.program_id(1) * BLOCK_C
    n = tl.program_id(2).to(tl.int64)
    oh0 = (pid_hw // tiles_w) * BLOCK_H
    ow = (pid_hw % tiles_w) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    dc = tl.arange(0, BLOCK_C)[:, None]
    mask_c = (c0 + dc) < C

    # Columns, once per program: the left tap's pointers and each tap's mask.
    iw = ow * STRIDE - 1
    x += n * stride_xn + c0.to(tl.int64) * stride_xc
    x_left = x + dc * stride_xc + iw * stride_xw
    m_left = mask_c & (iw >= 0) & (iw < W)
    m_mid = mask_c & (iw + 1 < W)
    m_right = mask_c & (iw + 2 < W)
    out += n * stride_on + c0.to(tl.int64) * stride_oc
    out_cols = out + dc * stride_oc + ow * stride_ow
    m_out = mask_c & (ow < WO)

    w = weight + (c0 + dc) * 9
    w00 = tl.load(w + 0, mask=mask_c, other=0.0).to(ACC_DTYPE)
    w01 = tl.load(w + 1, mask=mask_c, other=0.0).to(ACC_DTYPE)
    w02 = tl.load(w + 2, mask=mask_c, other=0.0).to(ACC_DTYPE)
    w10 = tl.load(w + 3, mask=mask_c, other=0.0).to(ACC_DTYPE)
    w11 = tl.load(w + 4, mask=mask_c, other=0.0).to(ACC_DTYPE)
    w12 = tl.load(w + 5, mask=mask_c, other=0.0).to(ACC_DTYPE)
    w20 = tl.load(w + 6, mask=mask_c, other=0.0).to(ACC_DTYPE)
    w21 = tl.load(w + 7, mask=mask_c, other=0.0).to(ACC_DTYPE)
    w22 = tl.load(w + 8, mask=mask_c, other=0.0).to(ACC_DTYPE)
    b = w00
    if HAS_BIAS:
        b = tl.load(bias + c0 + dc, mask=mask_c, other=0.0).to(ACC_DTYPE)

    rows = tl.minimum(BLOCK_H, HO - oh0)
    # The top input row of output row oh is STRIDE * oh - 1.
    t0, t1, t2 = _load_row(
        x_left, m_left, m_mid, m_right, oh0 * STRIDE - 1, H, stride_xh, stride_xw, ACC_DTYPE
    )
    if STRIDE == 1:  # rows oh - 1, oh, oh + 1: carry two rows, load one per output row
        m0, m1, m2 = _load_row(
            x_left, m_left, m_mid, m_right, oh0, H, stride_xh, stride_xw, ACC_DTYPE
        )
        for i in range(rows):
            oh = oh0 + i
            b0, b1, b2 = _load_row(
                x_left, m_left, m_mid, m_right, oh + 1, H, stride_xh, stride_xw, ACC_DTYPE
            )
            acc = w00 * t0 + w01 * t1 + w02 * t2
            acc = _taps(acc, w10, w11, w12, m0, m1, m2)
            acc = _taps(acc, w20, w21, w22, b0, b1, b2)
            _store_row(acc, b, out_cols + oh * stride_oh, m_out, HAS_BIAS, ACTIVATION)
            t0, t1, t2 = m0, m1, m2
            m0, m1, m2 = b0, b1, b2
    else:  # rows 2oh - 1, 2oh, 2oh + 1: carry one row, load two per output row
        for i in range(rows):
            oh = oh0 + i
            m0, m1, m2 = _load_row(
                x_left, m_left, m_mid, m_right, 2 * oh, H, stride_xh, stride_xw, ACC_DTYPE
            )
            b0, b1, b2 = _load_row(
                x_left, m_left, m_mid, m_right, 2 * oh + 1, H, stride_xh, stride_xw, ACC_DTYPE
            )
            acc = w00 * t0 + w01 * t1 + w02 * t2
            acc = _taps(acc, w10, w11, w12, m0, m1, m2)
            acc = _taps(acc, w20, w21, w22, b0, b1, b2)
            _store_row(acc, b, out_cols + oh * stride_oh, m_out, HAS_BIAS, ACTIVATION)
            t0, t1, t2 = b0, b1, b2


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
    tiles = cdiv(height_out, block_h) * cdiv(width_out, block_w)
    grid = (tiles, cdiv(channels, block_c), batch)
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
        ACTIVATION=ACTIVATION_CODES[activation],
        ACC_DTYPE=acc,
        BLOCK_C=block_c,
        BLOCK_H=block_h,
        BLOCK_W=block_w,
        num_warps=num_warps,
    )
    return out
