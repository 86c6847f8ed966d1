"""sparse_softmax: softmax over each CSR row's stored values (structural zeros are -inf)."""

from __future__ import annotations

import torch

from .. import reference
from ..formats import CSRMatrix
from . import _dispatch, _library


def sparse_softmax(S: CSRMatrix, scale: float = 1.0, *, backend: str | None = None) -> CSRMatrix:
    """softmax(scale * S) row by row over the stored entries; empty rows stay empty.

    Differentiable in S's values. Works on batched values (batch, nnz) too.

    Example:
        >>> S = sk.CSRMatrix.from_dense(torch.tensor([[1.0, 0.0, 1.0]]))
        >>> sk.sparse_softmax(S).values
        tensor([0.5000, 0.5000])
    """
    if not isinstance(S, CSRMatrix):
        raise TypeError(f"S must be a CSRMatrix, got {type(S).__name__}")
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a number, got {type(scale).__name__}")
    problem = _dispatch.Problem(S.device, S.dtype, {})
    name = _dispatch.choose("sparse_softmax", problem, backend)
    probs = _library.sparse_softmax(S.row_offsets, S.values, float(scale), name)
    return CSRMatrix._from_pattern(S.pattern, probs, check=False)


def sparse_softmax_backward_raw(row_offsets, probs, grad, scale, hint=None):
    problem = _dispatch.Problem(probs.device, probs.dtype, {})
    name = _dispatch.choose_with_hint("sparse_softmax_backward", problem, None, hint)
    return _library.sparse_softmax_backward(row_offsets, probs, grad, scale, name)


_dispatch.register(
    "sparse_softmax", _dispatch.Backend("reference", reference.sparse_softmax, _dispatch.always)
)
_dispatch.register(
    "sparse_softmax_backward",
    _dispatch.Backend("reference", reference.sparse_softmax_backward, _dispatch.always),
)
