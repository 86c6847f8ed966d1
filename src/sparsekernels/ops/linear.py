"""linear: x @ W^T + bias with a sparse weight W (out_features, in_features), as nn.Linear."""

from __future__ import annotations

import math

import torch

from .. import _checks
from ..formats import CSRMatrix, NMMatrix, check_current
from . import _autocast, _eager_plans
from .spmm import spmm


def linear(
    x: torch.Tensor,
    W: CSRMatrix | NMMatrix,
    bias: torch.Tensor | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """x (..., in_features) -> (..., out_features); differentiable in x, W's values and bias.

    Example:
        >>> W = sk.NMMatrix.from_dense(torch.tensor([[1.0, 0.0, 0.0, 2.0]]), n=2, m=4)
        >>> sk.linear(torch.ones(3, 4), W)
        tensor([[3.],
                [3.],
                [3.]])
    """
    dtype = _autocast.target(x)
    if dtype is not None:  # as F.linear: in autocast's dtype
        with torch.autocast(x.device.type, enabled=False):
            cast = _autocast.cast
            return linear(cast(x, dtype), _autocast.cast_weight(W, dtype), cast(bias, dtype),
                          backend=backend)  # fmt: skip
    planned = _eager_plans.run(x, W, bias, backend)  # a repeat eager call: its backend at once
    if planned is not None:
        return planned
    if not isinstance(W, (CSRMatrix, NMMatrix)):
        raise TypeError(f"W must be a CSRMatrix or NMMatrix, got {type(W).__name__}")
    if isinstance(W, CSRMatrix) and W.batch is not None:
        raise ValueError("W must be a single matrix, not a batch of values")
    check_current(W, "W")
    _checks.tensor("x", x)
    _checks.float_dtype("x", x)
    if bias is not None:
        _checks.tensor("bias", bias)
    operands = {"x": x, "W": W.values} if bias is None else {"x": x, "W": W.values, "bias": bias}
    _checks.same_dtype(operands)
    _checks.same_device(operands)
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension (in_features)")
    if x.shape[-1] != W.shape[1]:
        raise ValueError(
            f"x's last dimension must be W's in_features {W.shape[1]}, "
            f"got x of shape {tuple(x.shape)}"
        )
    # (W @ x^T)^T: the token dimension becomes spmm's N.
    tokens = x.reshape(math.prod(x.shape[:-1]), W.shape[1])  # not -1: ambiguous when K = 0
    # The N:M kernels and the CSR few-token walk write W @ x^T column-major, so the transpose is
    # already contiguous; the other paths pay a copy here, as a strided output slows what
    # follows (attention above all).
    out = spmm(W, tokens.t(), bias, backend=backend).t().contiguous()
    _eager_plans.remember(x, W, bias, backend)
    return out.view(*x.shape[:-1], W.shape[0])
