"""Backward kernels of the fused block-sparse attention (kernels/attention_block.py): dK and dV
per key tile, walking the query tiles that touch it (the transposed layout), and dQ per query
tile; both recompute the probabilities from the forward's log-sum-exp. Before them, each query's
delta = rowsum(out * d_out) in fp32, read in place (torch would make fp32 copies of both: three
(B, H, L, Dv) fp32 temporaries, 48 MiB a layer of the e2e Transformer at L = 8192)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._sizes import cdiv, next_power_of_2
from .attention_block import (
    LOG2E,
    _blocks,
    _component_args,
    _dot_flags,
    _positions,
    _strides4,
    _tile_mask,
    _tile_mask_t,
)


@triton.jit
def _attn_bwd_delta_kernel(
    out,  # (B, H, Lq, Dv): strides s_ob, s_oh, s_om, s_od
    d_out,  # like out, strides of its own (an expanded gradient has zero strides)
    delta,  # (B * H, Lq) fp32, contiguous
    heads,
    lq,
    dv,
    s_ob,
    s_oh,
    s_om,
    s_od,
    s_gb,
    s_gh,
    s_gm,
    s_gd,
    BLOCK_M: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    bh = tl.program_id(1).to(tl.int64)
    b, h = bh // heads, bh % heads
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = rows < lq
    o_rows = out + b * s_ob + h * s_oh + rows[:, None] * s_om
    g_rows = d_out + b * s_gb + h * s_gh + rows[:, None] * s_gm
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for d0 in range(0, dv, BLOCK_DV):
        cols = d0 + tl.arange(0, BLOCK_DV).to(tl.int64)
        mask = mask_m[:, None] & (cols < dv)[None, :]
        o = tl.load(o_rows + cols[None, :] * s_od, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_rows + cols[None, :] * s_gd, mask=mask, other=0.0).to(tl.float32)
        acc += tl.sum(o * g, axis=1)
    tl.store(delta + bh * lq + rows, acc, mask=mask_m)


def output_gradient_rowsums(out: torch.Tensor, d_out: torch.Tensor) -> torch.Tensor:
    """delta = (out * d_out).sum(-1) in fp32 as (B * H, Lq), for out and d_out (B, H, Lq, Dv) of
    any strides, without copying either."""
    batch, heads, lq, dv = out.shape
    delta = torch.empty(batch * heads, lq, device=out.device, dtype=torch.float32)
    if delta.numel() == 0:
        return delta
    block_m = 64
    _attn_bwd_delta_kernel[(cdiv(lq, block_m), batch * heads)](
        out, d_out, delta, heads, lq, dv, *_strides4(out), *_strides4(d_out),
        BLOCK_M=block_m, BLOCK_DV=min(64, max(16, next_power_of_2(dv))),
    )  # fmt: skip
    return delta


@triton.jit
def _attn_bwd_dkdv_kernel(
    q,
    k,
    v,
    d_out,
    lse,
    delta,
    dk,
    dv,
    dk_sum,  # with ACCUMULATE the earlier passes' dk, dv (fp32; dk, dv themselves or the
    dv_sum,  # last pass's scratch, dk and dv then in their final dtype: no conversion after)
    row_perm,
    col_perm,
    t_offsets,
    t_rows,
    t_masks,
    words,
    H,
    Lq,
    Lk,
    D,
    DV,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_ob,
    stride_oh,
    stride_om,
    stride_od,
    stride_dkb,
    stride_dkh,
    stride_dkn,
    stride_dkd,
    stride_dvb,
    stride_dvh,
    stride_dvn,
    stride_dvd,
    scale,
    scale_log2e,
    ROW_PERM: tl.constexpr,
    COL_PERM: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    WORD_BITS: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """d_out: strides stride_o*; dk, dv: their own. Every program stores its tile, zeros for a
    key tile no query visits, so the gradients need no zero fill first."""
    kt = tl.program_id(0)
    bh = tl.program_id(1)
    start = tl.load(t_offsets + kt)
    end = tl.load(t_offsets + kt + 1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    q += b * stride_qb + h * stride_qh
    d_out += b * stride_ob + h * stride_oh
    k_off = b * stride_kb + h * stride_kh
    v_off = b * stride_vb + h * stride_vh
    lse += bh.to(tl.int64) * Lq
    delta += bh.to(tl.int64) * Lq

    keys, valid_n = _positions(col_perm, kt, Lk, BLOCK_N, COL_PERM)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    mask_d = offs_d < D
    mask_dv = offs_dv < DV
    k_ptrs = keys[:, None] * stride_kn + offs_d[None, :] * stride_kd
    v_ptrs = keys[:, None] * stride_vn + offs_dv[None, :] * stride_vd
    k_mask = valid_n[:, None] & mask_d[None, :]
    v_mask = valid_n[:, None] & mask_dv[None, :]
    k_tile = tl.load(k + k_off + k_ptrs, mask=k_mask, other=0.0)
    v_tile = tl.load(v + v_off + v_ptrs, mask=v_mask, other=0.0)
    if UPCAST:
        k_tile = k_tile.to(tl.float32)
        v_tile = v_tile.to(tl.float32)
    dk_acc = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv_acc = tl.zeros((BLOCK_N, BLOCK_DV), dtype=tl.float32)
    for e in range(start, end):
        qt = tl.load(t_rows + e)
        mask_id = tl.load(t_masks + e)
        rows, valid_m = _positions(row_perm, qt, Lq, BLOCK_M, ROW_PERM)
        q_t = tl.load(
            q + rows[None, :] * stride_qm + offs_d[:, None] * stride_qd,
            mask=valid_m[None, :] & mask_d[:, None],
            other=0.0,
        )
        do = tl.load(
            d_out + rows[:, None] * stride_om + offs_dv[None, :] * stride_od,
            mask=valid_m[:, None] & mask_dv[None, :],
            other=0.0,
        )
        m = tl.load(lse + rows, mask=valid_m, other=0.0)
        dlt = tl.load(delta + rows, mask=valid_m, other=0.0)
        if UPCAST:
            q_t = q_t.to(tl.float32)
            do = do.to(tl.float32)
        s_t = tl.dot(k_tile, q_t, input_precision=PRECISION) * scale_log2e  # (BLOCK_N, BLOCK_M)
        p_t = tl.exp2(s_t - m[None, :])
        if mask_id >= 0:
            keep = _tile_mask_t(words, mask_id, BLOCK_M, BLOCK_N, WORD_BITS)
            p_t = tl.where(keep, p_t, 0.0)
        dv_acc = tl.dot(p_t.to(do.dtype), do, dv_acc, input_precision=PRECISION)
        dp_t = tl.dot(v_tile, tl.trans(do), input_precision=PRECISION)
        ds_t = p_t * (dp_t - dlt[None, :])
        dk_acc = tl.dot(ds_t.to(q_t.dtype), tl.trans(q_t), dk_acc, input_precision=PRECISION)
    dk_acc *= scale
    dk_at = b * stride_dkb + h * stride_dkh + keys[:, None] * stride_dkn
    dk_at += offs_d[None, :] * stride_dkd
    dv_at = b * stride_dvb + h * stride_dvh + keys[:, None] * stride_dvn
    dv_at += offs_dv[None, :] * stride_dvd
    if ACCUMULATE:
        dk_acc += tl.load(dk_sum + dk_at, mask=k_mask, other=0.0).to(tl.float32)
        dv_acc += tl.load(dv_sum + dv_at, mask=v_mask, other=0.0).to(tl.float32)
    tl.store(dk + dk_at, dk_acc.to(dk.dtype.element_ty), mask=k_mask)
    tl.store(dv + dv_at, dv_acc.to(dv.dtype.element_ty), mask=v_mask)


@triton.jit
def _attn_bwd_dq_kernel(
    q,
    k,
    v,
    d_out,
    lse,
    delta,
    dq,
    dq_sum,  # with ACCUMULATE the earlier passes' dq (as dk_sum above)
    row_perm,
    col_perm,
    offsets,
    cols,
    masks,
    words,
    H,
    Lq,
    Lk,
    D,
    DV,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_ob,
    stride_oh,
    stride_om,
    stride_od,
    stride_dqb,
    stride_dqh,
    stride_dqm,
    stride_dqd,
    scale,
    scale_log2e,
    ROW_PERM: tl.constexpr,
    COL_PERM: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    WORD_BITS: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """d_out: strides stride_o*; dq: its own. Every program stores its tile, zeros for a query
    tile with no keys, so dq needs no zero fill first."""
    qt = tl.program_id(0)
    bh = tl.program_id(1)
    start = tl.load(offsets + qt)
    end = tl.load(offsets + qt + 1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    q_off = b * stride_qb + h * stride_qh
    k += b * stride_kb + h * stride_kh
    v += b * stride_vb + h * stride_vh
    d_out += b * stride_ob + h * stride_oh
    lse += bh.to(tl.int64) * Lq
    delta += bh.to(tl.int64) * Lq

    rows, valid_m = _positions(row_perm, qt, Lq, BLOCK_M, ROW_PERM)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    mask_d = offs_d < D
    mask_dv = offs_dv < DV
    q_ptrs = rows[:, None] * stride_qm + offs_d[None, :] * stride_qd
    q_mask = valid_m[:, None] & mask_d[None, :]
    q_tile = tl.load(q + q_off + q_ptrs, mask=q_mask, other=0.0)
    do = tl.load(
        d_out + rows[:, None] * stride_om + offs_dv[None, :] * stride_od,
        mask=valid_m[:, None] & mask_dv[None, :],
        other=0.0,
    )
    m = tl.load(lse + rows, mask=valid_m, other=0.0)
    dlt = tl.load(delta + rows, mask=valid_m, other=0.0)
    if UPCAST:
        q_tile = q_tile.to(tl.float32)
        do = do.to(tl.float32)
    dq_acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for e in range(start, end):
        kt = tl.load(cols + e)
        mask_id = tl.load(masks + e)
        keys, valid_n = _positions(col_perm, kt, Lk, BLOCK_N, COL_PERM)
        k_t = tl.load(
            k + keys[None, :] * stride_kn + offs_d[:, None] * stride_kd,
            mask=valid_n[None, :] & mask_d[:, None],
            other=0.0,
        )
        v_t = tl.load(
            v + keys[None, :] * stride_vn + offs_dv[:, None] * stride_vd,
            mask=valid_n[None, :] & mask_dv[:, None],
            other=0.0,
        )
        if UPCAST:
            k_t = k_t.to(tl.float32)
            v_t = v_t.to(tl.float32)
        s = tl.dot(q_tile, k_t, input_precision=PRECISION) * scale_log2e
        p = tl.exp2(s - m[:, None])
        if mask_id >= 0:
            p = tl.where(_tile_mask(words, mask_id, BLOCK_M, BLOCK_N, WORD_BITS), p, 0.0)
        dp = tl.dot(do, v_t, input_precision=PRECISION)
        ds = p * (dp - dlt[:, None])
        dq_acc = tl.dot(ds.to(k_t.dtype), tl.trans(k_t), dq_acc, input_precision=PRECISION)
    dq_acc *= scale
    dq_at = b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqm
    dq_at += offs_d[None, :] * stride_dqd
    if ACCUMULATE:
        dq_acc += tl.load(dq_sum + dq_at, mask=q_mask, other=0.0).to(tl.float32)
    tl.store(dq + dq_at, dq_acc.to(dq.dtype.element_ty), mask=q_mask)


# ----------------------------------------------------------------------- launchers
def block_attention_backward(
    *,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    d_out: torch.Tensor,
    lse: torch.Tensor,
    delta: torch.Tensor,
    dq: torch.Tensor,
    dk: torch.Tensor,
    dv: torch.Tensor,
    component: list[torch.Tensor],
    accumulate: bool,
    scale: float,
    block_m: int,
    block_n: int,
    num_warps: int,
    num_stages: int,
    sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> None:
    """One component's share of dq, dk, dv (shaped like q, k, v, any strides): written whole,
    or with `accumulate` added to the earlier passes' fp32 sums, which are dq, dk, dv
    themselves or `sums` (laid out as they are: the last pass then stores the gradients in
    their own dtype). lse and delta: (B * H, Lq) fp32."""
    grads = (dq, dk, dv)
    if sums is not None and any(
        s.shape != t.shape or s.stride() != t.stride() for s, t in zip(sums, grads, strict=True)
    ):
        raise ValueError("sums must be laid out as dq, dk and dv")
    dq_sum, dk_sum, dv_sum = sums if sums is not None else (dq, dk, dv)
    batch, heads, lq, d = q.shape
    lk, d_v = k.shape[2], v.shape[3]
    row_perm, col_perm, flags = _component_args(component)
    offsets, cols, masks, t_offsets, t_rows, t_masks, words = component[2:9]
    common = dict(
        ACCUMULATE=accumulate,
        **flags,
        **_blocks(q, v, block_m, block_n),
        **_dot_flags(q),
        num_warps=num_warps,
        num_stages=num_stages,
    )
    strides = (*_strides4(q), *_strides4(k), *_strides4(v), *_strides4(d_out))
    _attn_bwd_dkdv_kernel[(t_offsets.numel() - 1, batch * heads)](
        q, k, v, d_out, lse, delta, dk, dv, dk_sum, dv_sum, row_perm, col_perm, t_offsets, t_rows,
        t_masks, words, heads, lq, lk, d, d_v, *strides, *_strides4(dk), *_strides4(dv), scale,
        scale * LOG2E, **common,
    )  # fmt: skip
    _attn_bwd_dq_kernel[(offsets.numel() - 1, batch * heads)](
        q, k, v, d_out, lse, delta, dq, dq_sum, row_perm, col_perm, offsets, cols, masks, words,
        heads, lq, lk, d, d_v, *strides, *_strides4(dq), scale, scale * LOG2E, **common,
    )  # fmt: skip
