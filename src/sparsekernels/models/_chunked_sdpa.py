"""Scaled dot-product attention over blocks of queries where torch would hold every score.

In float64 (the references the e2e cases check against) scaled_dot_product_attention runs its
math backend, which materialises (batch, heads, L, L) scores: 64 GiB at L = 32768 with 8 heads.
Softmax is taken per query row, so attending block by block gives the same result.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SCORE_BYTES = 1 << 30  # the scores one call may hold


def sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale),
    in blocks of queries when float64 scores would pass SCORE_BYTES."""
    queries, keys = q.shape[-2], k.shape[-2]
    row_bytes = q[..., 0, 0].numel() * keys * q.element_size()
    if q.dtype != torch.float64 or row_bytes * queries <= SCORE_BYTES:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=causal, scale=scale
        )
    rows = max(1, SCORE_BYTES // row_bytes)
    key_index = torch.arange(keys, device=q.device)
    blocks = []
    for i in range(0, queries, rows):
        j = min(queries, i + rows)
        if causal:  # is_causal's mask: query i sees keys 0..i
            block_mask = torch.arange(i, j, device=q.device)[:, None] >= key_index[None, :]
        else:
            block_mask = None if mask is None else mask[..., i:j, :]
        blocks.append(
            F.scaled_dot_product_attention(q[..., i:j, :], k, v, attn_mask=block_mask, scale=scale)
        )
    return torch.cat(blocks, dim=-2)
