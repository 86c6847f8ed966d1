"""Pruning masks by magnitude: unstructured and N:M (element-, vector- and block-wise)."""

from __future__ import annotations

import torch

from .. import _checks
from ..formats.nm import check_pattern_args


def magnitude_mask(w: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Boolean mask keeping the round((1 - sparsity) * numel) largest |w| of the whole tensor."""
    _checks.tensor("w", w)
    _checks.float_dtype("w", w)
    if (
        isinstance(sparsity, bool)
        or not isinstance(sparsity, (int, float))
        or not 0 <= sparsity <= 1
    ):
        raise ValueError(f"sparsity must be a number in [0, 1], got {sparsity!r}")
    keep = round((1 - sparsity) * w.numel())
    mask = torch.zeros(w.numel(), dtype=torch.bool, device=w.device)
    if keep:
        scores = _scores(w).reshape(-1)
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
    scores = _scores(w)
    padded = scores.new_zeros(row_groups * vector, cols)
    padded[:rows] = scores
    blocks = padded.view(row_groups, vector, cols // m, blocks_per_group, block).sum((1, 4))
    chosen = blocks.topk(n // block, dim=-1).indices
    keep = torch.zeros_like(blocks, dtype=torch.bool).scatter_(-1, chosen, True)
    mask = keep[:, None, :, :, None].expand(row_groups, vector, cols // m, blocks_per_group, block)
    return mask.reshape(row_groups * vector, cols)[:rows].contiguous()


def _scores(w: torch.Tensor) -> torch.Tensor:
    """|w| in float32 or wider (float64 stays float64, so near ties are not rounded together);
    NaN counts as the largest magnitude (above Inf): pruning never hides it."""
    wide = torch.promote_types(w.dtype, torch.float32)
    return w.detach().abs().to(wide).nan_to_num(nan=float("inf"))
