"""Rotary embedding of q and k and the KV-cache writes in one launch, from the fused q/k/v
projection's output: for a decode step's few tokens (models/llama.py).

At batch 1 a decode step's attention spends more launches than time: the rotation (cat, product,
addcmul) and the two cache copies were five small kernels a layer, ~2 us each in a CUDA graph,
on the dense and the sparse model alike. Here one program per (token, head) of q, k and v loads
its head's row, rotates it in float32 if it is a q or k head (x * cos + swap(x) * signed_sin,
the rotate-half form with the sign folded into signed_sin = cat(-sin, sin)), rounds once, and
stores q into a fresh (batch, tokens, heads, head_dim) tensor, k and v into the caches at
positions start .. start + tokens. float32 and bfloat16 only, like kernels/rms_norm.py.
On the H200 (results/nvidia-h200/2026-12-01/at-2f885a8/llama_profile.txt) it takes 1.2 us a
layer where the five kernels took ~10.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._pdl import decode_pdl, launch_options, pdl_start
from ._sizes import next_power_of_2

DTYPES = (torch.float32, torch.bfloat16)


# start changes every decode step: one compiled kernel for all (Triton would specialize 1 and
# multiples of 16, compiling new variants mid-generation)
@triton.jit(do_not_specialize=["start"])
def _rope_cache_kernel(
    qkv, cos, sin, q_out, k_cache, v_cache, tokens, start,
    stride_qkv_b, stride_qkv_t, stride_cos, stride_q_b, stride_q_t,
    stride_c_b, stride_c_h, stride_c_t,
    HEADS: tl.constexpr, KV_HEADS: tl.constexpr, D: tl.constexpr, BLOCK_D: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    pdl_start(PDL)  # (kernels/_pdl.py: with SPARSEKERNELS_PDL, overlap the launch)
    pid = tl.program_id(0)
    # int64: t x the qkv row stride passes 2**31 from ~350k tokens, a KV head x max_len x D
    # from ~2.4M cached positions (8 KV heads of 128)
    head = (pid % (HEADS + 2 * KV_HEADS)).to(tl.int64)
    t = ((pid // (HEADS + 2 * KV_HEADS)) % tokens).to(tl.int64)
    b = (pid // (HEADS + 2 * KV_HEADS) // tokens).to(tl.int64)
    offs = tl.arange(0, BLOCK_D)
    mask = offs < D
    row = qkv + b * stride_qkv_b + t * stride_qkv_t + head * D
    x = tl.load(row + offs, mask=mask, other=0.0)
    position = start + t
    cache_row = b * stride_c_b + position * stride_c_t
    if head < HEADS + KV_HEADS:  # q or k: rotated
        swapped = tl.load(row + (offs + D // 2) % D, mask=mask, other=0.0)
        c = tl.load(cos + t * stride_cos + offs, mask=mask, other=0.0)
        s = tl.load(sin + t * stride_cos + offs, mask=mask, other=0.0)
        turned = x.to(tl.float32) * c.to(tl.float32) + swapped.to(tl.float32) * s.to(tl.float32)
        turned = turned.to(q_out.dtype.element_ty)
        if head < HEADS:
            tl.store(q_out + b * stride_q_b + t * stride_q_t + head * D + offs, turned, mask=mask)
        else:
            kv = cache_row + (head - HEADS) * stride_c_h
            tl.store(k_cache + kv + offs, turned, mask=mask)
    else:
        kv = cache_row + (head - HEADS - KV_HEADS) * stride_c_h
        tl.store(v_cache + kv + offs, x, mask=mask)


def supports(qkv: torch.Tensor, head_dim: int) -> bool:
    """float32 or bfloat16, an even head_dim."""
    return qkv.dtype in DTYPES and head_dim % 2 == 0


def rope_cache(
    qkv: torch.Tensor,
    cos: torch.Tensor,
    signed_sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    start: int,
    heads: int,
    kv_heads: int,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """qkv (batch, tokens, (heads + 2 kv_heads) head_dim), its last dim contiguous; cos and
    signed_sin (tokens, head_dim) for positions start..; caches (>= batch, kv_heads, max_len,
    head_dim), contiguous along head_dim. Writes the rotated k and v into the caches and returns
    the rotated q, (batch, heads, tokens, head_dim) as a view of a (batch, tokens, heads,
    head_dim) tensor (the layout the composed form returns), or of `out` when given."""
    B, T, width = qkv.shape
    d = k_cache.shape[-1]
    if width != (heads + 2 * kv_heads) * d:
        raise ValueError(f"qkv's last dim must be (heads + 2 kv_heads) * {d}, got {width}")
    if not supports(qkv, d):
        raise TypeError(f"qkv must be float32 or bfloat16 with an even head_dim, got {qkv.dtype}")
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.dim() != 4 or cache.shape[0] < B or cache.shape[1] != kv_heads:
            raise ValueError(f"{name} must be (>= {B}, {kv_heads}, max_len, {d}), got "
                             f"{tuple(cache.shape)}")  # fmt: skip
        if cache.dtype != qkv.dtype or cache.stride(-1) != 1:
            raise ValueError(f"{name} must be {qkv.dtype} and contiguous along head_dim")
    if k_cache.stride() != v_cache.stride() or k_cache.shape != v_cache.shape:
        raise ValueError("k_cache and v_cache must have one shape and layout")
    if start < 0 or start + T > k_cache.shape[2]:
        raise ValueError(f"positions {start}..{start + T} must lie within the caches' "
                         f"{k_cache.shape[2]}")  # fmt: skip
    for name, table in (("cos", cos), ("signed_sin", signed_sin)):
        if table.shape != (T, d) or table.dtype != qkv.dtype or table.stride(-1) != 1:
            raise ValueError(f"{name} must be ({T}, {d}) {qkv.dtype}, contiguous rows")
    if cos.stride() != signed_sin.stride():
        raise ValueError("cos and signed_sin must have one layout")
    if qkv.stride(-1) != 1:
        qkv = qkv.contiguous()
    q = qkv.new_empty(B, T, heads, d) if out is None else out
    if q.shape != (B, T, heads, d) or q.dtype != qkv.dtype or q.stride(-1) != 1:
        raise ValueError(f"out must be ({B}, {T}, {heads}, {d}) {qkv.dtype}, contiguous rows")
    if B * T:
        pdl = min(1, decode_pdl(qkv.device))
        _rope_cache_kernel[(B * T * (heads + 2 * kv_heads),)](
            qkv, cos, signed_sin, q, k_cache, v_cache, T, start,
            qkv.stride(0), qkv.stride(1), cos.stride(0), q.stride(0), q.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            HEADS=heads, KV_HEADS=kv_heads, D=d, BLOCK_D=next_power_of_2(d), PDL=pdl,
            num_warps=1, **launch_options(pdl),
        )  # fmt: skip
    return q.transpose(1, 2)
