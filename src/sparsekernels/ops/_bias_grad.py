"""A bias's gradient: the product's gradient summed over its tokens (and any batch)."""

from __future__ import annotations

import torch

from .._cache_mode import building, traced

_GEMV_DTYPES = (torch.float16, torch.bfloat16)


def bias_grad(g: torch.Tensor) -> torch.Tensor:
    """g (..., M, N) summed over N and the batch dimensions: (M,). On CUDA in 16-bit a GEMV
    with ones (cuBLAS, fp32 accumulation, as torch's sums): torch's column sums of a linear's
    (tokens, C) gradient read 0.3-1.6 TB/s on an H100, the GEMV about twice that
    (benchmarks/results/nvidia-h100/2026-12-07/at-d5b2c72/bias_grad.txt)."""
    if g.is_cuda and g.dim() == 2 and g.dtype in _GEMV_DTYPES and g.shape[-1]:
        return torch.mv(g, _ones(g))
    d = g.sum(dim=-1)
    return d.sum(dim=tuple(range(d.dim() - 1))) if d.dim() > 1 else d


_ONES: dict = {}  # (length, dtype, device) -> a ones vector: a fill and an allocation a call less
_MOST_ONES = 32  # kept (a model's token counts); then cleared


def _ones(g: torch.Tensor) -> torch.Tensor:
    """Ones of g's last length, dtype and device; made afresh inside a CUDA graph capture (a
    kept one would live in the graph's memory pool) and while torch.compile traces (a kept fake
    one met by a later trace is a tensor that trace never made: inductor raised on it)."""
    if traced(g) or torch.cuda.is_current_stream_capturing():
        return g.new_ones(g.shape[-1])
    key = (g.shape[-1], g.dtype, g.device)
    ones = _ONES.get(key)
    if ones is None:
        if len(_ONES) >= _MOST_ONES:
            _ONES.clear()
        with building(g.detach()):  # (the fill marked on its stream: others wait for it)
            ones = g.new_ones(g.shape[-1])
        _ONES[key] = ones
    return ones
