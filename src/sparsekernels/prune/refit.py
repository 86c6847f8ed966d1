"""The kept weights refit exactly for a fixed mask: the least-squares optimum on calibration data.

With H = X^T X of a layer's calibration inputs, a pruned row w' (zero off its kept columns S)
changes the layer's outputs on them by ||X (w' - w)||^2 = (w' - w)^T H (w' - w). For a fixed
mask that is smallest at w'_S = (H_SS)^-1 H_S: w, one small symmetric positive-definite system a
row. SparseGPT's updates only approach it: each pruned column's error moves onto the columns
not yet visited, never back onto earlier kept ones. On all-MiniLM-L6-v2's 36 encoder linears
(benchmarks/results/cpu/2026-12-07-sparsegpt-refit/) SparseGPT's mask with the exact refit cut
the layers' mean relative output error by a third (50%: 0.0159 -> 0.0099) and lifted the mean
embedding cosine at every pattern: 50% 0.936 -> 0.950, 2:4 0.884 -> 0.910, 90% 0.436 -> 0.526.

H is damped as SparseGPT damps it (a fraction of its mean diagonal added to the diagonal), which
pulls the solution gently toward the dense row; inputs the calibration never saw get weight 0.
Rows with the same number of kept columns solve as one batch (padded to the longest row where
counts differ), by Cholesky, in chunks of at most CHUNK_BYTES of systems: a row costs k^3 / 3
multiply-adds for k kept columns, so a 14336 x 4096 layer at 2:4 takes about 4e13.
"""

from __future__ import annotations

import torch

from . import hessians

CHUNK_BYTES = 2**28  # the systems (k x k each) solved at once


def refit_kept(
    w: torch.Tensor, mask: torch.Tensor, hessian: torch.Tensor, *, damp: float = hessians.DAMP
) -> torch.Tensor:
    """The weight pruned to `mask` whose kept entries best reproduce w's outputs on the
    calibration inputs: zeros where the boolean mask is False, and each row's kept entries
    w'_S = (H_SS)^-1 H_S: w, the least-squares optimum for that mask (see the module docstring).

    hessian (in_features, in_features): H = X^T X of the layer's calibration inputs X (tokens,
    in_features), damped by `damp` times its mean diagonal. Works in float32 (float64 for a
    float64 weight, and for any chunk whose systems float32 cannot factor); returns w's dtype.
    A row whose mask keeps everything comes back unchanged.

    Example:
        >>> x = torch.randn(256, 8, dtype=torch.float64)
        >>> w = torch.randn(4, 8, dtype=torch.float64)
        >>> mask = torch.rand(4, 8) < 0.5
        >>> pruned = refit_kept(w, mask, x.T @ x)
        >>> bool((pruned[~mask] == 0).all())
        True
    """
    hessians.check(w, hessian)
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor, got {mask.dtype}")
    if mask.shape != w.shape:
        raise ValueError(f"mask must have w's shape {tuple(w.shape)}, got {tuple(mask.shape)}")
    if mask.device != w.device:
        raise ValueError(f"mask must be on w's device {w.device}, got {mask.device}")
    return refit(w, mask, hessian, hessians.check_damp(damp))


def refit(w: torch.Tensor, mask: torch.Tensor, hessian: torch.Tensor, damp: float):
    """refit_kept without its checks (sparsegpt_prune's arguments are checked already)."""
    work = torch.promote_types(w.dtype, torch.float32)
    target = w.detach().to(work, copy=True)
    target[:, hessians.dead_inputs(hessian.detach())] = 0.0
    out = torch.zeros_like(target)
    whole = mask.all(dim=1)
    out[whole] = w.detach()[whole].to(work)  # (exactly w: nothing to make up for)
    rows = (mask.any(dim=1) & ~whole).nonzero().squeeze(1)
    if not rows.numel():
        return out.to(w.dtype)
    kept = mask[rows]
    k = int(kept.sum(dim=1).max())
    chunk = max(1, CHUNK_BYTES // (k * k * 8))
    hessian = hessian.detach()
    damped = {}  # dtype -> H damped in it (float64 made only where work's dtype fails)
    for start in range(0, rows.numel(), chunk):
        part, keep = rows[start : start + chunk], kept[start : start + chunk]
        for dtype in dict.fromkeys((work, torch.float64)):
            if dtype not in damped:
                damped[dtype] = hessians.damped(hessian, dtype, damp)
            solution = _solve_rows(target[part].to(dtype), keep, damped[dtype], k)
            if solution is not None:
                out[part] = solution.to(work)
                break
        else:
            raise hessians.not_positive_definite(damp)
    return out.to(w.dtype)


def _solve_rows(target: torch.Tensor, kept: torch.Tensor, H: torch.Tensor, k: int):
    """Rows (r, cols) refit to their kept columns, or None where a system is not positive
    definite in H's dtype: r systems of k x k, a row's kept columns first (in order) then
    padding, which solves to 0 (identity rows, zero right-hand side)."""
    order = torch.sort(kept.to(torch.uint8), dim=1, descending=True, stable=True).indices[:, :k]
    valid = kept.gather(1, order)
    systems = H[order[:, :, None], order[:, None, :]]
    both = valid[:, :, None] & valid[:, None, :]
    eye = torch.eye(k, dtype=H.dtype, device=H.device)
    systems = torch.where(both, systems, eye)
    rhs = (target @ H).gather(1, order) * valid  # (H_S: w for each row; H is symmetric)
    factor, info = torch.linalg.cholesky_ex(systems)
    if bool(info.any()):
        return None
    solution = torch.cholesky_solve(rhs.unsqueeze(-1), factor).squeeze(-1)
    return torch.zeros_like(target).scatter_(1, order, solution)  # (padding solved to 0)
