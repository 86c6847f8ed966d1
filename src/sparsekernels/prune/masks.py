"""Pruning masks by magnitude: unstructured and N:M (element-, vector- and block-wise)."""

from __future__ import annotations

import torch

from .. import _checks
from ..formats.nm import check_pattern_args


def magnitude_mask(w: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Boolean mask keeping the round((1 - sparsity) * numel) largest |w| of the whole tensor."""
    _checks.tensor("w", w)
    _checks.float_dtype("w", w)
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not 0 <= sparsity <= 1:
        raise ValueError(f"sparsity must be a number in [0, 1], got {sparsity!r}")
    keep = w.numel() - round(sparsity * w.numel())
    mask = torch.zeros(w.numel(), dtype=torch.bool, device=w.device)
    if keep:
        # NaN counts as the largest magnitude: pruning never hides it.
        scores = w.detach().abs().float().reshape(-1).nan_to_num(nan=float("inf"))
        mask[scores.topk(keep, sorted=False).indices] = True
    return mask.view(w.shape)


def nm_mask(w: torch.Tensor, n: int, m: int, vector: int = 1, block: int = 1) -> torch.Tensor:
    """Boolean mask keeping n of every m along the columns (in_features) of a 2-D weight.

    `vector` consecutive rows share one choice and `block` consecutive columns move together;
    each candidate (rows x columns) block is scored by its summed magnitude.
    """
    _checks.tensor("w", w)
    _checks.ndim("w", w, [2])
    _checks.float_dtype("w", w)
    check_pattern_args(tuple(w.shape), n, m, vector, block)
    rows, cols = w.shape
    row_groups, blocks_per_group = -(-rows // vector), m // block
    scores = w.detach().abs().float().nan_to_num(nan=float("inf"))
    padded = scores.new_zeros(row_groups * vector, cols)
    padded[:rows] = scores
    blocks = padded.view(row_groups, vector, cols // m, blocks_per_group, block).sum((1, 4))
    chosen = blocks.topk(n // block, dim=-1).indices
    keep = torch.zeros_like(blocks, dtype=torch.bool).scatter_(-1, chosen, True)
    mask = keep[:, None, :, :, None].expand(row_groups, vector, cols // m, blocks_per_group, block)
    return mask.reshape(row_groups * vector, cols)[:rows].contiguous()
