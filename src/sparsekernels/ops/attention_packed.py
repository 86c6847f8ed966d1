"""sparse_attention_packed: sparse_attention on one fused projection's packed q, k, v."""

from __future__ import annotations

import torch

from .. import _checks
from .._fill_streams import before_launch
from ..formats import CSRMatrix
from . import _attention_library, _attention_plans, _autocast, _dispatch, _launch_plans
from ._library import eager, eager_inference
from .attention import checked_backend, flash_plan


def sparse_attention_packed(
    qkv: torch.Tensor,
    pattern: CSRMatrix,
    scale: float | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """qkv (B, L, 3, H, D): queries, keys and values packed as a fused qkv projection's output
    viewed (flash-attn's qkvpacked layout); pattern (L, L). Returns
    sparse_attention(q, k, v, pattern, scale) for q, k, v = qkv[:, :, i].transpose(1, 2):
    (B, H, L, D), laid out (B, L, H, D) in memory. The same values and gradients; where the
    fused kernel takes a gradient (eager or compiled), it writes qkv's gradient as one
    tensor: three views' gradients would be stacked into a new tensor and, through a permute,
    copied once more (two passes over qkv's bytes each training step).

    Example:
        >>> pattern = sk.CSRMatrix.from_dense(torch.ones(4, 4).tril())   # causal
        >>> qkv = torch.randn(1, 4, 3, 2, 8)                              # (B, L, 3, H, D)
        >>> sk.sparse_attention_packed(qkv, pattern).shape
        torch.Size([1, 2, 4, 8])
    """
    dtype = _autocast.target(qkv)
    if dtype is not None:  # as sparse_attention: in autocast's dtype
        with torch.autocast(qkv.device.type, enabled=False):
            return sparse_attention_packed(
                _autocast.cast(qkv, dtype), pattern, scale, backend=backend
            )
    _checks.tensor("qkv", qkv)
    _checks.ndim("qkv", qkv, [5])
    if qkv.shape[2] != 3:
        raise ValueError(f"qkv must be (batch, length, 3, heads, head_dim), got {tuple(qkv.shape)}")
    q, k, v = _attention_library.packed_views(qkv)
    plan = _attention_plans.find(qkv, pattern, scale, backend)  # a repeat eager call
    if plan is not None:
        return _planned(qkv, q, k, v, pattern, plan)
    given = scale
    name, scale = checked_backend(q, k, v, pattern, scale, backend)
    if name == "triton_flash" and qkv.shape[-1]:
        config, layout = flash_plan(pattern.pattern, qkv.shape[-1], qkv.device)
        plan = _attention_plans.Plan(scale, config.as_list(), layout.tensors())
        _attention_plans.remember(qkv, pattern, given, backend, plan)
    if name != "triton_flash" or not qkv.shape[-1] or eager_inference(qkv):
        # (no gradient: the views cost nothing; D = 0: the kernels widen q and k)
        return _dispatch.run("sparse_attention", name, q, k, v, pattern, scale, backend)
    args = (qkv, plan.layout, scale, plan.config)
    if eager(qkv):  # the op's autograd.Function twin
        return _attention_library.BlockAttentionPackedEager.apply(*args)[0]
    return _attention_library.block_attention_packed(*args)[0]


def _planned(qkv, q, k, v, pattern, plan) -> torch.Tensor:
    """The fused kernel's call as the whole path makes it, from a remembered plan."""
    if eager_inference(qkv):  # (as _dispatch.run, then the backend, would launch it)
        before_launch(qkv.device)
        forward = _attention_library.block_attention_forward
        args = (q, k, v, plan.layout, plan.scale, plan.config)
        return plan.forward(qkv, pattern, lambda: forward(*args)[0])
    state = _launch_plans.weight_state(pattern) if _launch_plans.TRAINING else None
    args = (qkv, plan.layout, plan.scale, plan.config, plan, state)
    return _attention_library.BlockAttentionPackedEager.apply(*args)[0]
