"""sparse_attention: softmax(scale * Q K^T at a fixed pattern) V, from sddmm, softmax and spmm."""

from __future__ import annotations

import math

import torch

from .. import _checks
from ..formats import CSRMatrix
from .sddmm import sddmm
from .softmax import sparse_softmax
from .spmm import spmm


def sparse_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pattern: CSRMatrix,
    scale: float | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """q (B, H, Lq, D), k (B, H, Lk, D), v (B, H, Lk, Dv); pattern (Lq, Lk) says which keys each
    query attends to (its values are ignored). scale defaults to 1 / sqrt(D). Returns
    (B, H, Lq, Dv); a query with no stored keys gets zeros. Differentiable in q, k and v.

    Example:
        >>> pattern = sk.CSRMatrix.from_dense(torch.ones(4, 4).tril())   # causal
        >>> q = k = v = torch.randn(1, 2, 4, 8)
        >>> sk.sparse_attention(q, k, v, pattern).shape
        torch.Size([1, 2, 4, 8])
    """
    if not isinstance(pattern, CSRMatrix):
        raise TypeError(f"pattern must be a CSRMatrix, got {type(pattern).__name__}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _checks.tensor(name, t)
        _checks.ndim(name, t, [4])
        _checks.float_dtype(name, t)
    _checks.same_dtype({"q": q, "k": k, "v": v})
    _checks.same_device({"q": q, "k": k, "v": v, "pattern": pattern.column_indices})
    batch, heads, lq, d = q.shape
    if k.shape[:2] != (batch, heads) or v.shape[:2] != (batch, heads):
        raise ValueError(
            f"q, k and v must share (batch, heads); got {q.shape}, {k.shape}, {v.shape}"
        )
    if k.shape[-1] != d:
        raise ValueError(f"k must have q's head dimension {d}, got {k.shape[-1]}")
    if v.shape[2] != k.shape[2]:
        raise ValueError(f"v must have k's length {k.shape[2]}, got {v.shape[2]}")
    if pattern.shape != (lq, k.shape[2]):
        raise ValueError(f"pattern must have shape ({lq}, {k.shape[2]}), got {pattern.shape}")
    if scale is None:
        scale = 1.0 / math.sqrt(d) if d else 1.0
    flat = batch * heads  # explicit sizes: a -1 is ambiguous when B, H or D is 0
    lk, dv = k.shape[2], v.shape[3]
    scores = sddmm(q.reshape(flat, lq, d), k.reshape(flat, lk, d), pattern, backend=backend)
    probs = sparse_softmax(scores, scale, backend=backend)
    out = spmm(probs, v.reshape(flat, lk, dv), backend=backend)
    return out.view(batch, heads, lq, v.shape[3])
