"""The row softmax's long rows walked twice entry by entry (softmax_csr's walk): the row's max
and the inverse of its sum of exponentials in a first pass (a running max and sum per lane,
or per thread over a column of WALK_PER entries), its probabilities in a second."""

import triton
import triton.language as tl


@triton.jit
def _walk_per_lane(
    values, start, end, lanes, mask_h, scale, stride_ve,
    ACC_DTYPE: tl.constexpr, BLOCK: tl.constexpr, BLOCK_H: tl.constexpr,
):  # fmt: skip
    """A long row's (BLOCK_H, 1) shift (its max, 0 for -inf) and inverse sum: a running max m
    and sum s of exp(z - m) per lane, BLOCK entries a step, the lanes combined at the end."""
    m = tl.full((BLOCK_H, BLOCK), float("-inf"), dtype=ACC_DTYPE)
    s = tl.zeros((BLOCK_H, BLOCK), dtype=ACC_DTYPE)
    for e in range(start, end, BLOCK):
        offs = (e + lanes)[None, :]
        mask = mask_h[:, None] & (offs < end)
        z = tl.load(values + offs * stride_ve, mask=mask, other=float("-inf")).to(ACC_DTYPE)
        z = tl.where(mask, z * scale, float("-inf"))
        m_new = tl.maximum(m, z)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp2(m - shift) + tl.exp2(z - shift)
        m = m_new
    row_max = tl.max(m, axis=1)
    shift = tl.where(row_max == float("-inf"), 0.0, row_max)[:, None]
    total = tl.sum(s * tl.exp2(m - shift), axis=1)  # a lane with m = -inf adds 0
    return shift, (1.0 / total)[:, None]


@triton.jit
def _walk_per_thread(
    values, start, end, mask_h, scale, stride_ve,
    ACC_DTYPE: tl.constexpr, INDEX: tl.constexpr, BLOCK: tl.constexpr, BLOCK_H: tl.constexpr,
    PER: tl.constexpr,
):  # fmt: skip
    """_walk_per_lane with the step as (PER, BLOCK / PER) lanes, entry j * BLOCK / PER + t of a
    step in column t: with PER = BLOCK / threads a thread holds a whole column, so a step's max
    is taken within the thread first and the running sum rescaled once a column (one exp2 per
    PER entries instead of one an entry; compiled for sm_90 with unit strides, pass 1's loop
    155 -> 121 instructions at BLOCK 1024 on 4 warps, 40 -> 38 registers)."""
    W: tl.constexpr = BLOCK // PER
    lanes = (tl.arange(0, PER)[:, None] * W + tl.arange(0, W)[None, :]).to(INDEX)
    m = tl.full((BLOCK_H, W), float("-inf"), dtype=ACC_DTYPE)
    s = tl.zeros((BLOCK_H, W), dtype=ACC_DTYPE)
    for e in range(start, end, BLOCK):
        offs = (e + lanes)[None, :, :]
        mask = mask_h[:, None, None] & (offs < end)
        z = tl.load(values[:, :, None] + offs * stride_ve, mask=mask, other=float("-inf"))
        z = tl.where(mask, z.to(ACC_DTYPE) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, axis=1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp2(m - shift) + tl.sum(tl.exp2(z - shift[:, None, :]), axis=1)
        m = m_new
    row_max = tl.max(m, axis=1)
    shift = tl.where(row_max == float("-inf"), 0.0, row_max)[:, None]
    total = tl.sum(s * tl.exp2(m - shift), axis=1)
    return shift, (1.0 / total)[:, None]


@triton.jit
def walk_twice(
    values, out, start, end, lanes, mask_h, scale, stride_ve, stride_oe,
    ACC_DTYPE: tl.constexpr, INDEX: tl.constexpr, BLOCK: tl.constexpr, BLOCK_H: tl.constexpr,
    WALK_PER: tl.constexpr,
):  # fmt: skip
    """A long row walked twice, BLOCK entries a step: its max and sum, then its probabilities."""
    # Pass 1: the row's max and the inverse of its sum of exponentials.
    if WALK_PER > 1:
        shift, inverse = _walk_per_thread(
            values, start, end, mask_h, scale, stride_ve, ACC_DTYPE, INDEX, BLOCK, BLOCK_H,
            WALK_PER,
        )  # fmt: skip
    else:
        shift, inverse = _walk_per_lane(
            values, start, end, lanes, mask_h, scale, stride_ve, ACC_DTYPE, BLOCK, BLOCK_H
        )

    # Pass 2: write the probabilities.
    for e in range(start, end, BLOCK):
        offs = (e + lanes)[None, :]
        mask = mask_h[:, None] & (offs < end)
        z = tl.load(values + offs * stride_ve, mask=mask, other=0.0).to(ACC_DTYPE)
        # rounded as in pass 1: a bare z * scale - shift contracts to one fma, which for
        # the row's max gives 2^(rounding error) instead of 1 (fp32, large values)
        z = tl.where(mask, z * scale, float("-inf"))
        p = tl.exp2(z - shift) * inverse
        tl.store(out + offs * stride_oe, p.to(out.dtype.element_ty), mask=mask)
