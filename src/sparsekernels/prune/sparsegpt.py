"""SparseGPT: one-shot pruning with error compensation (Frantar & Alistarh, 2023).

For a linear layer y = x W^T with calibration inputs X (tokens, in_features) and their Gram
matrix H = X^T X, SparseGPT prunes W column by column and, after each column, moves the error it
made onto the columns not yet visited (the Optimal Brain Surgeon update restricted to them), so
the layer's outputs XW^T change as little as the pattern allows. The inverse Hessians of the
shrinking column sets are all rows of one upper Cholesky factor U of H^-1 (H^-1 = U^T U), so the
whole layer costs one Cholesky and one triangular pass. Columns are processed in blocks of
`blocksize`: updates inside a block are applied column by column, those to later blocks once
per block (the same result, batched).

The mask is chosen as the pass goes, by the OBS saliency w^2 / U[j, j]^2 of the weights as they
are at that moment (already compensated for earlier columns): for unstructured sparsity at the
start of each block (per output row, or over the whole block as in the paper's code), for N:M at
the start of each group of m columns (`vector` rows share a choice by their summed saliency,
`block` columns move together, as in nm_select). `sparsify_(model, "2:4,method=sparsegpt",
calibration=...)` collects H with hooks and calls sparsegpt_prune on every layer.
"""

from __future__ import annotations

import torch

from .. import _checks
from ..formats.nm import check_pattern_args
from . import hessians
from .masks import is_nm_request, nm_select
from .refit import refit as exact_refit

BLOCKSIZE = 128  # columns per lazy batch of updates (the paper's value)
DAMP = hessians.DAMP


def sparsegpt_prune(
    w: torch.Tensor,
    hessian: torch.Tensor,
    sparsity: float | None = None,
    n: int | None = None,
    m: int | None = None,
    vector: int = 1,
    block: int = 1,
    *,
    per_row: bool = True,
    blocksize: int = BLOCKSIZE,
    damp: float = DAMP,
    refit: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prune a 2-D weight (out_features, in_features) by SparseGPT; returns (weight, mask).

    hessian (in_features, in_features): H = sum over calibration tokens of x^T x for the layer's
    inputs x (symmetric positive semi-definite; its scale does not matter). Give `sparsity`
    (unstructured: keep round((1 - sparsity) * in_features) per output row, or with
    per_row=False round((1 - sparsity) * numel) overall, split over the column blocks) or `n`
    and `m` (keep n of every m along each row; `vector` rows share a choice, `block` columns move
    together). H is damped by `damp` times its mean diagonal; inputs that are always zero (a zero
    on H's diagonal) carry no information, so their weights are zeroed, as in the paper.

    The work runs on w's device in float32 (float64 for a float64 weight, and for the Cholesky
    factorization should float32 not be enough); the weight comes back in w's dtype with zeros
    where the boolean mask is False and the kept entries updated to compensate the pruned ones.
    With `refit` (the default) SparseGPT chooses the mask and the kept entries are then solved
    for exactly, each row's least-squares optimum for that mask (prune/refit.py: on
    all-MiniLM-L6-v2 it lifted the embeddings' mean cosine from 0.884 to 0.910 at 2:4);
    refit=False keeps the paper's own updates.

    Example:
        >>> x = torch.randn(256, 8, dtype=torch.float64)
        >>> w = torch.randn(4, 8, dtype=torch.float64)
        >>> pruned, mask = sparsegpt_prune(w, x.T @ x, n=2, m=4)
        >>> bool((pruned[~mask] == 0).all()), mask.sum().item()
        (True, 16)
    """
    args = _check_args(w, hessian, sparsity, n, m, vector, block, per_row, blocksize, damp)
    if not isinstance(refit, bool):
        raise TypeError(f"refit must be a bool, got {type(refit).__name__}")
    structured, sparsity, n, m, vector, block, blocksize, damp = args
    rows, cols = w.shape
    work = torch.promote_types(w.dtype, torch.float32)
    W = w.detach().to(work).clone()
    U = _inverse_cholesky(hessian.detach(), W, damp)
    if structured:
        blocksize = max(blocksize // m, 1) * m  # groups of m never straddle two blocks
    density = 1.0 - (sparsity or 0.0)
    mask = torch.zeros(rows, cols, dtype=torch.bool, device=w.device)
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        W1, U1 = W[:, i1:i2], U[i1:i2, i1:i2]  # W1 as compensated for the earlier blocks
        d = U1.diagonal()
        keep1 = torch.zeros(rows, i2 - i1, dtype=torch.bool, device=w.device)
        if not structured:
            saliency = W1.square() / d.square()
            if per_row:
                keep = round(density * i2) - round(density * i1)
                _keep_top(keep1, saliency, keep, dim=1)
            else:
                keep = round(density * rows * i2) - round(density * rows * i1)
                _keep_top(keep1.view(-1), saliency.reshape(-1), keep, dim=0)
        # Transposed (columns, rows) so that one column is one contiguous row. A column's error
        # is (its compensated value) / U[j, j] where pruned, 0 where kept: `scale` holds that
        # factor. Columns are compensated lazily: one product per column instead of updating
        # the rest of the block after each.
        Wt = W1.t().contiguous()
        errors = torch.zeros_like(Wt)
        scale = (~keep1).t() / d[:, None]
        for j in range(i2 - i1):
            if structured and j % m == 0:  # choose the group from its compensated weights
                group = slice(j, j + m)
                current = Wt[group] - U1[:j, group].t() @ errors[:j]
                choice = _nm_choice(current.t().square() / d[group].square(), n, m, vector, block)
                keep1[:, group] = choice
                scale[group] = (~choice).t() / d[group, None]
            column = torch.addmv(Wt[j], errors[:j].t(), U1[:j, j], alpha=-1)
            torch.mul(column, scale[j], out=errors[j])
        W1 -= errors.t() @ U1.triu(1)  # every column's compensation from within the block
        W1.masked_fill_(~keep1, 0.0)  # exact zeros where pruned
        W[:, i2:] -= errors.t() @ U[i1:i2, i2:]
        mask[:, i1:i2] = keep1
    if refit:
        return exact_refit(w, mask, hessian.detach(), damp), mask
    return W.to(w.dtype), mask


def _inverse_cholesky(H: torch.Tensor, W: torch.Tensor, damp: float) -> torch.Tensor:
    """The upper Cholesky factor U of (H damped)^-1 in W's dtype (float32 or float64); zeroes
    W's columns of dead inputs."""
    W[:, hessians.dead_inputs(H)] = 0.0
    for dtype in dict.fromkeys((W.dtype, torch.float64)):  # float64 if float32 falls short
        Hd = hessians.damped(H, dtype, damp)
        # H = R R^T with R upper triangular (the Cholesky factor of H with rows and columns
        # reversed); then H^-1 = R^-T R^-1, so U = R^-1: one factorization, one triangular
        # inverse.
        flipped, info = torch.linalg.cholesky_ex(Hd.flip(0, 1))
        if not int(info):
            R = flipped.flip(0, 1)
            eye = torch.eye(R.shape[0], dtype=dtype, device=R.device)
            return torch.linalg.solve_triangular(R, eye, upper=True).to(W.dtype)
    raise hessians.not_positive_definite(damp)


def _nm_choice(saliency: torch.Tensor, n: int, m: int, vector: int, block: int) -> torch.Tensor:
    """Which of one group's m columns (rows, m) to keep: nm_select, with a shortcut for the
    element-wise pattern (called once per group, so it is worth one)."""
    if vector == 1 and block == 1:
        keep = torch.zeros_like(saliency, dtype=torch.bool)
        return keep.scatter_(1, saliency.topk(n, dim=1, sorted=False).indices, True)
    return nm_select(saliency, n, m, vector=vector, block=block)


def _keep_top(keep: torch.Tensor, saliency: torch.Tensor, count: int, dim: int) -> None:
    """Set `keep` True at the `count` largest saliencies along `dim` (in place)."""
    if count > 0:
        keep.scatter_(dim, saliency.topk(count, dim=dim, sorted=False).indices, True)


def _check_args(w, hessian, sparsity, n, m, vector, block, per_row, blocksize, damp) -> tuple:
    """Raise on bad arguments (before any work); (True for an N:M pattern, then sparsity, n, m,
    vector, block, blocksize and damp as Python numbers: NumPy scalars converted)."""
    hessians.check(w, hessian)
    blocksize = _checks.positive_int("blocksize", blocksize)
    damp = hessians.check_damp(damp)
    if not isinstance(per_row, bool):
        raise TypeError(f"per_row must be a bool, got {type(per_row).__name__}")
    if not is_nm_request(sparsity, n, m, vector, block):
        return False, float(sparsity), n, m, int(vector), int(block), blocksize, damp
    n, m, vector, block = check_pattern_args(tuple(w.shape), n, m, vector, block)
    return True, sparsity, n, m, vector, block, blocksize, damp
