"""Wanda: pruning by weight magnitude times input activation norm (Sun et al., 2023).

A weight W[i, j] of a linear layer y = x W^T is scored |W[i, j]| * ||X[:, j]||_2, where X holds the
layer's inputs over calibration tokens; scores are compared within each output row (unstructured)
or within each group of m along a row (N:M), never across rows. `sparsify_(..., calibration=)`
collects the norms with forward hooks and prunes with this mask.
"""

from __future__ import annotations

import torch

from .. import _checks
from .masks import _scores, is_nm_request, nm_select, topk_mask


def wanda_scores(w: torch.Tensor, input_norm: torch.Tensor) -> torch.Tensor:
    """|w| * input_norm (broadcast along the rows), in float32 or wider; a NaN weight scores
    +Inf, as in magnitude pruning, so pruning never hides it."""
    _checks.tensor("w", w)
    _checks.ndim("w", w, [2])
    _checks.float_dtype("w", w)
    _checks.tensor("input_norm", input_norm)
    if tuple(input_norm.shape) != (w.shape[1],):
        raise ValueError(
            f"input_norm must have shape (in_features,) = ({w.shape[1]},) for a weight of shape "
            f"{tuple(w.shape)}, got {tuple(input_norm.shape)}"
        )
    if not input_norm.is_floating_point():
        raise TypeError(f"input_norm must be a floating-point tensor, got {input_norm.dtype}")
    if input_norm.device != w.device:
        raise ValueError(f"input_norm must be on w's device {w.device}, got {input_norm.device}")
    _checks.has_data("w", w)
    _checks.has_data("input_norm", input_norm)
    if not torch.isfinite(input_norm).all():
        raise ValueError("input_norm must be finite (no NaN or Inf)")
    if (input_norm < 0).any():
        raise ValueError("input_norm must be non-negative (it is an L2 norm)")
    scores = _scores(w)
    return (scores * input_norm.detach().to(scores.dtype)).nan_to_num(nan=float("inf"))


def wanda_mask(
    w: torch.Tensor,
    input_norm: torch.Tensor,
    sparsity: float | None = None,
    n: int | None = None,
    m: int | None = None,
    vector: int = 1,
    block: int = 1,
) -> torch.Tensor:
    """Boolean mask of the weights Wanda keeps in a 2-D weight (out_features, in_features).

    input_norm (in_features,): the L2 norm of each input feature over the calibration tokens.
    Give `sparsity` (keep round((1 - sparsity) * in_features) per output row) or `n` and `m`
    (keep n of every m along each row, `vector` rows sharing a choice, `block` columns moving
    together, as nm_mask).

    Example:
        >>> w = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
        >>> wanda_mask(w, torch.tensor([8.0, 1.0, 1.0, 1.0]), sparsity=0.5)
        tensor([[ True, False, False,  True]])
    """
    structured = is_nm_request(sparsity, n, m, vector, block)
    scores = wanda_scores(w, input_norm)
    if structured:
        return nm_select(scores, n, m, vector=vector, block=block)
    return topk_mask(scores, sparsity, per_row=True)
