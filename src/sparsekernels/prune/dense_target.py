"""The dense model's outputs as the target of a layer pruned late in a sequential pass.

Pruned sequentially, a layer's inputs X_s come from the model whose earlier layers are pruned
already, while the model it should imitate saw X_d. Fitting the pruned weight to its own dense
weight on X_s (SparseGPT's sequential mode) keeps the earlier layers' errors; fitting it to the
dense model's outputs X_d w^T lets the layer make up for them (asymmetric calibration, as GPTAQ
does for quantization). With G = X_s^T X_d, the dense weight that serves that target best,
kept near w by a ridge of `damp` times H's mean diagonal,

    t^T = (H + lambda I)^-1 (G w^T + lambda w^T),  H = X_s^T X_s,

is pruned by SparseGPT on H as usual: its mask, then the exact refit, w'_S = (H_SS)^-1 (H t^T)_S,
which is the least-squares fit of the dense outputs over the mask (up to the ridge). On
all-MiniLM-L6-v2 as the demo prunes it (benchmarks/results/cpu/2026-12-07-asymmetric/) the
mean embedding cosine rose 50% 0.950 -> 0.957 and 2:4 0.910 -> 0.920 against one pass (plain
sequential: within 0.001 of one pass). The ridge matters: at 0.03 of the mean diagonal
(nearly the bare fit) 50% scored 0.952 and 2:4 0.916; 0.3-1 scored best, 0.5 highest at both.
"""

from __future__ import annotations

import torch

from .. import _checks
from . import hessians

TARGET_DAMP = 0.5  # the ridge toward w, as a fraction of H's mean diagonal


def dense_output_target(
    w: torch.Tensor,
    hessian: torch.Tensor,
    cross: torch.Tensor,
    *,
    damp: float = TARGET_DAMP,
) -> torch.Tensor:
    """The dense weight (out_features, in_features) whose outputs on the pruned model's inputs
    X_s best match w's on the dense model's inputs X_d, kept near w by a ridge (see the module
    docstring); prune it with sparsegpt_prune(t, hessian) to fit the dense outputs over a mask.

    hessian: H = X_s^T X_s (in_features, in_features); cross: G = X_s^T X_d, the same tokens in
    the same order in both (not symmetric). damp > 0: the ridge as a fraction of H's mean
    diagonal. Works in float32 (float64 for a float64 weight, or where float32 cannot factor);
    returns w's dtype. Where X_s = X_d (G = H) the target is w itself.

    Example:
        >>> xd = torch.randn(256, 8, dtype=torch.float64)
        >>> xs = xd + 0.1 * torch.randn(256, 8, dtype=torch.float64)
        >>> w = torch.randn(4, 8, dtype=torch.float64)
        >>> t = dense_output_target(w, xs.T @ xs, xs.T @ xd, damp=1e-6)
        >>> bool(((xs @ t.T - xd @ w.T).norm() < (xs @ w.T - xd @ w.T).norm()))
        True
    """
    hessians.check(w, hessian)
    _checks.tensor("cross", cross)
    if cross.shape != hessian.shape:
        raise ValueError(
            f"cross must have the hessian's shape {tuple(hessian.shape)} (X_s^T X_d), "
            f"got {tuple(cross.shape)}"
        )
    if not cross.is_floating_point():
        raise TypeError(f"cross must be a floating-point tensor, got {cross.dtype}")
    if cross.device != w.device:
        raise ValueError(f"cross must be on w's device {w.device}, got {cross.device}")
    if not torch.isfinite(cross).all():
        raise ValueError("cross must be finite (no NaN or Inf)")
    if not _checks.is_real(damp) or not 0 < damp < 1e3:
        raise ValueError(f"damp must be a number in (0, 1000), got {damp!r}")
    return target(w, hessian, cross, float(damp))


def target(w: torch.Tensor, hessian: torch.Tensor, cross: torch.Tensor, damp: float):
    """dense_output_target without its checks."""
    work = torch.promote_types(w.dtype, torch.float32)
    scale = float(hessian.detach().diagonal().double().mean()) if w.shape[1] else 0.0
    if scale <= 0:  # (no input ever nonzero: nothing to fit, w stands)
        return w.detach().clone()
    for dtype in dict.fromkeys((work, torch.float64)):
        ridge = damp * scale
        system = hessian.detach().to(dtype, copy=True)
        system.diagonal().add_(ridge)
        factor, info = torch.linalg.cholesky_ex(system)
        if not bool(info):
            wt = w.detach().to(dtype).t()
            rhs = cross.detach().to(dtype) @ wt + ridge * wt
            return torch.cholesky_solve(rhs, factor).t().to(w.dtype)
    raise hessians.not_positive_definite(damp)
