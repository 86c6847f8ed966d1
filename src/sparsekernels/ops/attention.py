"""sparse_attention: softmax(scale * Q K^T at a fixed pattern) V.

Backends, in the order automatic dispatch tries them:
- `triton_flash`: one fused block-sparse flash-attention kernel (kernels/attention_block.py) over
  the pattern's cached block layout; scores never reach memory and Q K^T, P V run on tensor
  cores. Taken in fp16/bf16 when the visited tiles are full enough (kernels/attention_tuning.py).
  Inside a visited tile, positions the pattern does not store are multiplied by zero: a NaN or
  Inf in a V row there (or in Q, K, dO in backward) reaches the query, as with the `dense`
  spmm backend.
- `triton`: sddmm + sparse_softmax + spmm, each with its own dispatch (forced: their Triton
  kernels); it materialises the (B * H, nnz) scores.
- `reference`: the same composition on the plain-PyTorch reference ops (CPU, any dtype).
"""

from __future__ import annotations

import math

import torch

from .. import _checks
from ..formats import CSRMatrix, check_current
from ..formats._pattern import Pattern
from . import _attention_library, _autocast, _dispatch
from ._library import eager, eager_inference
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
    dtype = _autocast.target(q)
    if dtype is not None:  # as scaled_dot_product_attention: in autocast's dtype
        with torch.autocast(q.device.type, enabled=False):
            cast = _autocast.cast
            return sparse_attention(cast(q, dtype), cast(k, dtype), cast(v, dtype), pattern,
                                    scale, backend=backend)  # fmt: skip
    name, scale = checked_backend(q, k, v, pattern, scale, backend)
    return _dispatch.run("sparse_attention", name, q, k, v, pattern, scale, backend)


def checked_backend(q, k, v, pattern, scale, backend) -> tuple[str, float]:
    """The backend sparse_attention takes for these inputs and the scale as a float, after
    checking them all (q, k, v as named in the errors)."""
    if not isinstance(pattern, CSRMatrix):
        raise TypeError(f"pattern must be a CSRMatrix, got {type(pattern).__name__}")
    check_current(pattern, "pattern", values=False)
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
    scale = _checks.softmax_scale("scale", scale)
    facts = {"batch": batch * heads, "d": d, "dv": v.shape[3], "pattern": pattern.pattern}
    problem = _dispatch.Problem(q.device, q.dtype, facts)
    name = _dispatch.choose("sparse_attention", problem, backend)
    if name == "triton_flash" and torch._C._are_functorch_transforms_active():
        if backend == "triton_flash":
            raise NotImplementedError(
                "backend='triton_flash' does not support torch.func transforms (grad, vmap, ...)"
            )
        # (the fused op has no rules for them; the composed ops do)
        name = "triton" if q.device.type == "cuda" else "reference"
    return name, float(scale)


def _composed(q, k, v, pattern, scale, backend):
    """softmax(scale * sddmm(q, k)) then spmm with v; `backend` forced on each op (or None).
    In 16-bit the scale goes into q first, as torch's math attention does: sddmm's scores are
    in q's dtype, and unscaled ones passed fp16's 65504 (NaN rows) where q k / sqrt(d) fit."""
    if q.device.type == "cpu" and q.element_size() == 2 and backend != "triton":
        # The CPU backends compute half precision in fp32 anyway: scores kept in fp32, as
        # flash's and SDPA's are (rounded to bf16, scores of ~64 lost 2x SDPA's accuracy).
        out = _composed(q.float(), k.float(), v.float(), pattern, scale, backend)
        return out.to(q.dtype)
    batch, heads, lq, d = q.shape
    flat = batch * heads  # explicit sizes: a -1 is ambiguous when B, H or D is 0
    lk, dv = k.shape[2], v.shape[3]
    if q.element_size() == 2:
        q, scale = q * scale, 1.0
    scores = sddmm(q.reshape(flat, lq, d), k.reshape(flat, lk, d), pattern, backend=backend)
    probs = sparse_softmax(scores, scale, backend=backend)
    out = spmm(probs, v.reshape(flat, lk, dv), backend=backend)
    return out.view(batch, heads, lq, dv)


def flash_plan(pattern: Pattern, head_dim: int, device: torch.device):
    """The fused kernel's configuration and the pattern's block layout for it (cached)."""
    from ..kernels.attention_tuning import BLOCK_ATTENTION_SPLIT_FILL, block_attention_config

    config = block_attention_config(head_dim, device.type == "cpu")
    layout = pattern.block_layout(config.block_m, config.block_n, BLOCK_ATTENTION_SPLIT_FILL)
    return config, layout


def _flash(q, k, v, pattern, scale, backend):
    config, layout = flash_plan(pattern.pattern, q.shape[-1], q.device)
    args = (q, k, v, layout.tensors(), scale, config.as_list())
    if eager_inference(q, k, v):
        return _attention_library.block_attention_forward(*args)[0]
    if eager(q, k, v):  # a gradient, eagerly: the op's autograd.Function twin
        return _attention_library.BlockAttentionEager.apply(*args)[0]
    return _attention_library.block_attention(*args)[0]


def _flash_reasons(problem: _dispatch.Problem, forced: bool) -> list[str]:
    from ..kernels.attention_tuning import BLOCK_ATTENTION_MAX_HEAD_DIM, block_attention_not_chosen
    from ..kernels.tuning import MAX_GRID_YZ

    reasons = _dispatch.triton_device_reasons(problem, forced)
    if reasons:  # (sizes unread: a symbolic size compared would guard a compiled graph)
        return reasons
    if problem.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        reasons.append(f"dtype {problem.dtype} (fused kernel: float16, bfloat16, float32)")
    # facts a caller may leave out (sparsekernels info): a small problem, no pattern to judge
    d, dv = problem.facts.get("d", 64), problem.facts.get("dv", 64)
    batch, pattern = problem.facts.get("batch", 1), problem.facts.get("pattern")
    if max(d, dv) > BLOCK_ATTENTION_MAX_HEAD_DIM:
        reasons.append(f"head dimensions {d}, {dv} exceed {BLOCK_ATTENTION_MAX_HEAD_DIM}")
    if batch > MAX_GRID_YZ:
        reasons.append(f"batch * heads {batch} exceeds the grid limit {MAX_GRID_YZ}")
    if reasons or forced:
        return reasons
    if problem.dtype == torch.float32:  # its tiles are IEEE fp32 dots, slower than CUDA cores'
        # composed path: 1.83 against 1.09 ms, local:256 at L=2048 (H200, 2026-11-29-d quick)
        return ["float32: the composed path is faster (its fp32 tiles run as IEEE dots)"]
    if not isinstance(pattern, Pattern):
        return reasons
    # planned once per pattern and tile shape, then cached on the pattern
    _, layout = flash_plan(pattern, d, problem.device)
    why_not = block_attention_not_chosen(layout.fill)
    if why_not:
        reasons.append(why_not)
    return reasons


_dispatch.register("sparse_attention", _dispatch.Backend("triton_flash", _flash, _flash_reasons))
_dispatch.register(
    "sparse_attention",
    _dispatch.Backend("triton", _composed, _dispatch.triton_batched_reasons),
)
_dispatch.register("sparse_attention", _dispatch.Backend("reference", _composed, _dispatch.always))
