"""A bias's gradient: the product's gradient summed over its tokens (and any batch)."""

from __future__ import annotations

import torch

_GEMV_DTYPES = (torch.float16, torch.bfloat16)


def bias_grad(g: torch.Tensor) -> torch.Tensor:
    """g (..., M, N) summed over N and the batch dimensions: (M,). On CUDA in 16-bit a GEMV
    with ones (cuBLAS, fp32 accumulation, as torch's sums): torch's column sums of a linear's
    (tokens, C) gradient read 0.3-1.6 TB/s on an H100, the GEMV about twice that
    (benchmarks/results/nvidia-h100/2026-12-07/at-d5b2c72/bias_grad.txt)."""
    if g.is_cuda and g.dim() == 2 and g.dtype in _GEMV_DTYPES and g.shape[-1]:
        return torch.mv(g, g.new_ones(g.shape[-1]))
    d = g.sum(dim=-1)
    return d.sum(dim=tuple(range(d.dim() - 1))) if d.dim() > 1 else d
