"""Attention of one new token a sequence over its KV cache, grouped-query: a decode step's
attention (models/llama.py).

torch's scaled_dot_product_attention takes 5.7 us a layer for one query over 129 keys on the
H200 (cuDNN's flash kernel, results/nvidia-h200/2026-12-01/at-2f885a8/llama_profile.txt): 23 us
of a 2:8 step's ~50 outside the weight products. The work is tiny (129 x 128 keys and values a
head), so one program a query head walks its key-value head's cache in blocks, with an online
softmax in float32 (base-2 exponentials, the scale folded into q), and writes its head's output
once. The query heads of a group read the same keys: L2 serves all but the first.
float32, float16 and bfloat16; head dims up to 256.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
BLOCK_N = 32  # keys a step
MAX_HEAD_DIM = 256


@triton.jit
def _decode_attention_kernel(
    q,  # (B, H, D) any strides
    k,  # (B, KV_HEADS, >= L, D) any strides
    v,
    out,  # (B, H, D) any strides
    L,  # keys a sequence
    H,
    scale_log2e,
    stride_qb,
    stride_qh,
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
    stride_od,
    GROUP: tl.constexpr,  # query heads a key-value head
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid = tl.program_id(0)
    b = (pid // H).to(tl.int64)
    h = pid % H
    kv = (h // GROUP).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < D
    query = tl.load(q + b * stride_qb + h * stride_qh + offs_d * stride_qd, mask=mask_d, other=0.0)
    query = query.to(tl.float32) * scale_log2e
    keys = k + b * stride_kb + kv * stride_kh + offs_d[None, :] * stride_kd
    values = v + b * stride_vb + kv * stride_vh + offs_d[None, :] * stride_vd
    m_i = tl.full((1,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((1,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for n0 in range(0, L, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        mask_n = offs_n < L
        tile_mask = mask_n[:, None] & mask_d[None, :]
        key = tl.load(keys + offs_n[:, None] * stride_kn, mask=tile_mask, other=0.0)
        s = tl.sum(key.to(tl.float32) * query[None, :], axis=1)
        s = tl.where(mask_n, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))  # finite: every step has a key (n0 < L)
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        value = tl.load(values + offs_n[:, None] * stride_vn, mask=tile_mask, other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * value.to(tl.float32), axis=0)
        m_i = m_new
    result = acc / l_i
    tl.store(
        out + b * stride_ob + h * stride_oh + offs_d * stride_od,
        result.to(out.dtype.element_ty),
        mask=mask_d,
    )


def supports(q: torch.Tensor, k: torch.Tensor) -> bool:
    """One query a sequence, q's dtype one of DTYPES, k's the same, head dim up to 256, query
    heads a multiple of the key-value heads."""
    return (
        q.dim() == 4
        and q.shape[2] == 1
        and q.dtype in DTYPES
        and k.dtype == q.dtype
        and 0 < q.shape[-1] <= MAX_HEAD_DIM
        and k.shape[1] > 0
        and q.shape[1] % k.shape[1] == 0
    )


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v for q (B, H, 1, D) over k and v (B, KV_HEADS, L, D), every key
    visible (the query is the newest token), each group of H / KV_HEADS query heads on one
    key-value head; returns (B, H, 1, D) laid out as (B, 1, H, D), so the merge of the heads
    that follows is a view. With no keys the output is zeros."""
    if not supports(q, k):
        raise ValueError(
            f"q must be (B, H, 1, D) of {DTYPES} with D <= {MAX_HEAD_DIM} and H a multiple of k's "
            f"heads, k the same dtype; got q {tuple(q.shape)} {q.dtype}, k {tuple(k.shape)} "
            f"{k.dtype}"
        )
    batch, heads, _, d = q.shape
    if k.shape[0] != batch or k.shape != v.shape or k.shape[-1] != d or v.dtype != q.dtype:
        raise ValueError(
            f"k and v must be ({batch}, KV_HEADS, L, {d}) of one shape and q's dtype, got "
            f"{tuple(k.shape)} {k.dtype} and {tuple(v.shape)} {v.dtype}"
        )
    out = q.new_empty((batch, 1, heads, d)).transpose(1, 2)
    if batch == 0 or k.shape[2] == 0:
        return out.zero_() if k.shape[2] == 0 else out
    _decode_attention_kernel[(batch * heads,)](
        q, k, v, out, k.shape[2], heads, (1.0 / math.sqrt(d)) * math.log2(math.e),
        q.stride(0), q.stride(1), q.stride(3),
        k.stride(0), k.stride(1), k.stride(2), k.stride(3),
        v.stride(0), v.stride(1), v.stride(2), v.stride(3),
        out.stride(0), out.stride(1), out.stride(3),
        GROUP=heads // k.shape[1], D=d, BLOCK_D=triton.next_power_of_2(d), BLOCK_N=BLOCK_N,
        num_warps=4,
    )  # fmt: skip
    return out
