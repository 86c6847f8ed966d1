"""Pruning masks: selection from a score matrix (unstructured per tensor or per row, and N:M
element-, vector- and block-wise), and magnitude masks built on it.

Every pruning criterion (magnitude here, Wanda in wanda.py) computes a score per weight and hands
it to `topk_mask` or `nm_select`, so the patterns are chosen by one piece of code.
"""

from __future__ import annotations

import torch

from .. import _checks
from ..formats.nm import check_pattern_args


def topk_mask(scores: torch.Tensor, sparsity: float, per_row: bool = False) -> torch.Tensor:
    """Boolean mask keeping the highest scores: round((1 - sparsity) * numel) of the whole
    tensor, or with `per_row` round((1 - sparsity) * columns) of every row of a 2-D tensor.

    Example:
        >>> topk_mask(torch.tensor([[1.0, 3.0], [4.0, 2.0]]), 0.5, per_row=True)
        tensor([[False,  True],
                [ True, False]])
    """
    _checks.tensor("scores", scores)
    _real_scores(scores)
    sparsity = _check_sparsity(sparsity)
    if scores.dtype == torch.bool:  # (topk takes no bool)
        scores = scores.to(torch.uint8)
    if per_row:
        _checks.ndim("scores", scores, [2])
        rows, cols = scores.shape
        keep = round((1 - sparsity) * cols)
        mask = torch.zeros(rows, cols, dtype=torch.bool, device=scores.device)
        if keep and rows:
            mask.scatter_(1, scores.topk(keep, dim=1, sorted=False).indices, True)
        return mask
    keep = round((1 - sparsity) * scores.numel())
    mask = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
    if keep:
        mask[scores.reshape(-1).topk(keep, sorted=False).indices] = True
    return mask.view(scores.shape)


def nm_select(
    scores: torch.Tensor, n: int, m: int, vector: int = 1, block: int = 1
) -> torch.Tensor:
    """Boolean mask keeping n of every m along the columns of a 2-D score matrix.

    `vector` consecutive rows share one choice and `block` consecutive columns move together;
    each candidate (rows x columns) block is scored by the sum of its scores.
    """
    _checks.tensor("scores", scores)
    _checks.ndim("scores", scores, [2])
    _real_scores(scores)
    n, m, vector, block = check_pattern_args(tuple(scores.shape), n, m, vector, block)
    rows, cols = scores.shape
    row_groups, blocks_per_group = -(-rows // vector), m // block
    padded = scores.new_zeros(row_groups * vector, cols)
    padded[:rows] = scores
    blocks = padded.view(row_groups, vector, cols // m, blocks_per_group, block).sum((1, 4))
    chosen = blocks.topk(n // block, dim=-1).indices
    keep = torch.zeros_like(blocks, dtype=torch.bool).scatter_(-1, chosen, True)
    mask = keep[:, None, :, :, None].expand(row_groups, vector, cols // m, blocks_per_group, block)
    return mask.reshape(row_groups * vector, cols)[:rows].contiguous()


def _real_scores(scores: torch.Tensor) -> None:
    """Scores must order: real numbers (or bools), not complex ones (torch's topk refuses them
    with an error that names no argument)."""
    if scores.is_complex():
        raise TypeError(f"scores must be real (ordered), got {scores.dtype}")


def magnitude_mask(w: torch.Tensor, sparsity: float, per_row: bool = False) -> torch.Tensor:
    """Boolean mask keeping the round((1 - sparsity) * numel) largest |w| of the whole tensor,
    or with `per_row` the same fraction of every row of a 2-D weight."""
    _checks.tensor("w", w)
    _checks.float_dtype("w", w)
    if per_row:
        _checks.ndim("w", w, [2])
    sparsity = _check_sparsity(sparsity)
    return topk_mask(_scores(w), sparsity, per_row=per_row)


def nm_mask(w: torch.Tensor, n: int, m: int, vector: int = 1, block: int = 1) -> torch.Tensor:
    """Boolean mask keeping n of every m along the columns (in_features) of a 2-D weight.

    `vector` consecutive rows share one choice and `block` consecutive columns move together;
    each candidate (rows x columns) block is scored by its summed magnitude.
    """
    _checks.tensor("w", w)
    _checks.ndim("w", w, [2])
    _checks.float_dtype("w", w)
    n, m, vector, block = check_pattern_args(tuple(w.shape), n, m, vector, block)
    return nm_select(_scores(w), n, m, vector=vector, block=block)


def is_nm_request(sparsity, n, m, vector: int = 1, block: int = 1) -> bool:
    """Whether (sparsity, n, m) asks for N:M (True) or unstructured (False); exactly one kind
    must be given, and vector/block only with N:M."""
    structured = n is not None or m is not None
    if structured and sparsity is not None:
        raise ValueError("give either sparsity (unstructured) or n and m (N:M), not both")
    if not structured and sparsity is None:
        raise ValueError("give a sparsity (unstructured) or n and m (N:M)")
    if not structured:
        _check_sparsity(sparsity)
        if vector != 1 or block != 1:
            raise ValueError("vector and block apply to N:M patterns only (give n and m)")
    elif n is None or m is None:
        raise ValueError(f"N:M needs both n and m, got n={n!r}, m={m!r}")
    return structured


def _check_sparsity(sparsity) -> float:
    """sparsity as a Python float (a NumPy scalar converted), in [0, 1]."""
    if not _checks.is_real(sparsity) or not 0 <= sparsity <= 1:
        raise ValueError(f"sparsity must be a number in [0, 1], got {sparsity!r}")
    return float(sparsity)


def _scores(w: torch.Tensor) -> torch.Tensor:
    """|w| in float32 or wider (float64 stays float64, so near ties are not rounded together);
    NaN counts as the largest magnitude (above Inf): pruning never hides it."""
    wide = torch.promote_types(w.dtype, torch.float32)
    return w.detach().abs().to(wide).nan_to_num(nan=float("inf"))
