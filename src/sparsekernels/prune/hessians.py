"""The calibration inputs' Gram matrix H = X^T X as SparseGPT and the exact refit take it: its
checks, and its damped form."""

from __future__ import annotations

import torch

from .. import _checks

DAMP = 0.01  # damping added to H's diagonal, as a fraction of its mean diagonal (SparseGPT's)


def check(w: object, hessian: object) -> None:
    """Raise on a weight or hessian that SparseGPT or the refit cannot take (before any work)."""
    _checks.tensor("w", w)
    _checks.ndim("w", w, [2])
    _checks.float_dtype("w", w)
    _checks.tensor("hessian", hessian)
    cols = w.shape[1]
    if tuple(hessian.shape) != (cols, cols):
        raise ValueError(
            f"hessian must have shape (in_features, in_features) = ({cols}, {cols}) for a weight "
            f"of shape {tuple(w.shape)}, got {tuple(hessian.shape)}"
        )
    if not hessian.is_floating_point():
        raise TypeError(f"hessian must be a floating-point tensor, got {hessian.dtype}")
    if hessian.device != w.device:
        raise ValueError(f"hessian must be on w's device {w.device}, got {hessian.device}")
    _checks.has_data("w", w)
    if not torch.isfinite(w).all():
        raise ValueError("w must be finite (no NaN or Inf): the update would spread it")
    if not torch.isfinite(hessian).all():
        raise ValueError("hessian must be finite (no NaN or Inf)")
    # (X^T X is symmetric; the Cholesky factorisation reads one triangle and would silently
    # drop the other's differences)
    H = hessian.detach()
    asymmetry = (H - H.t()).abs().amax() if cols else H.new_zeros(())
    if float(asymmetry) > 1e-4 * float(H.abs().amax() if cols else 0) + 1e-30:
        raise ValueError(
            f"hessian must be symmetric (X^T X of the layer's inputs); it differs from its "
            f"transpose by up to {float(asymmetry):.3g}"
        )


def check_damp(damp: object) -> float:
    if not _checks.is_real(damp) or not 0 <= damp < 1e3:
        raise ValueError(f"damp must be a number in [0, 1000), got {damp!r}")
    return float(damp)


def dead_inputs(hessian: torch.Tensor) -> torch.Tensor:
    """Inputs the calibration never saw (a zero on H's diagonal): they carry no information."""
    return hessian.diagonal() == 0


def damped(hessian: torch.Tensor, dtype: torch.dtype, damp: float) -> torch.Tensor:
    """H in `dtype` (a copy) with a dead input's diagonal set to 1, then `damp` times the mean
    diagonal added to the diagonal."""
    dead = dead_inputs(hessian)
    H = hessian.to(dtype, copy=True)
    H[dead, dead] = 1.0
    H.diagonal().add_(damp * H.diagonal().mean())
    return H


def not_positive_definite(damp: float) -> ValueError:
    return ValueError(
        "hessian is not positive definite even after damping: it must be X^T X of the "
        f"layer's inputs (symmetric, positive semi-definite); or raise damp (now {damp})"
    )
