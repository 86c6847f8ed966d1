"""sparse_softmax: softmax over each CSR row's stored values (structural zeros are -inf)."""

from __future__ import annotations

import torch

from .. import _checks, reference
from ..formats import CSRMatrix, check_current
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
    check_current(S, "S")
    scale = _checks.softmax_scale("scale", scale)
    problem = _problem(S.row_offsets, S.values)
    name = _dispatch.choose("sparse_softmax", problem, backend)
    if _library.eager_inference(S.values):  # no gradient: skip the op's dispatch cost
        probs = _dispatch.run("sparse_softmax", name, S.row_offsets, S.values, float(scale))
    else:
        probs = _library.call(_library.sparse_softmax, S.row_offsets, S.values, float(scale), name)
    return CSRMatrix._from_pattern(S.pattern, probs, check=False)


def _problem(row_offsets: torch.Tensor, *values: torch.Tensor) -> _dispatch.Problem:
    batch = max(v.shape[0] if v.dim() == 2 else 1 for v in values)
    facts = {"batch": batch, "rows": row_offsets.numel() - 1}
    return _dispatch.Problem(values[0].device, values[0].dtype, facts)


def sparse_softmax_backward_raw(row_offsets, probs, grad, scale, hint=None):
    problem = _problem(row_offsets, probs, grad)
    name = _dispatch.choose_with_hint("sparse_softmax_backward", problem, None, hint)
    return _library.call(_library.sparse_softmax_backward, row_offsets, probs, grad, scale, name)


# ----------------------------------------------------------------------- backends
def _triton_softmax(row_offsets, values, scale):
    from ..kernels import softmax_csr as kernel
    from ..kernels.sddmm_tuning import softmax_forward_config

    nnz = values.shape[-1]
    batch = values.numel() // nnz if nnz else 0
    config = softmax_forward_config(nnz, row_offsets.numel() - 1, batch, values.element_size())
    if config.align and values.dim() == 2 and values.stride(-1) == 1 and values.stride(0) >= nnz:
        # laid out as values (a padded batch stays padded): the same groups in both arrays,
        # read and written as 16-byte vectors (softmax_csr.group_form)
        out = values.new_empty_strided(values.shape, values.stride())
    else:
        out = torch.empty_like(values, memory_format=torch.contiguous_format)
    if out.numel() == 0:
        return out
    flat = out.view(-1, nnz)
    kernel.sparse_softmax(
        row_offsets=row_offsets,
        values=values,
        out=flat,
        scale=scale,
        block=config.block // 2 if config.tail else config.block,
        num_warps=config.num_warps,
        heads=config.heads,
        tail=config.tail,
        int32=config.int32,
        align=config.align,
        levels=config.levels,
        walk_per=config.walk_per,
    )
    return out


def _triton_softmax_backward(row_offsets, probs, grad, scale):
    from ..kernels import softmax_csr as kernel
    from ..kernels.sddmm_tuning import softmax_csr_config

    nnz = probs.shape[-1]
    out = probs.new_empty((*torch.broadcast_shapes(probs.shape[:-1], grad.shape[:-1]), nnz))
    if out.numel() == 0:
        return out
    flat = out.view(-1, nnz)
    config = softmax_csr_config(nnz, row_offsets.numel() - 1, flat.shape[0])
    kernel.sparse_softmax_backward(
        row_offsets=row_offsets,
        probs=probs,
        grad=grad,
        out=flat,
        scale=scale,
        block=config.block,
        num_warps=config.num_warps,
        heads=config.heads,
    )
    return out


_dispatch.register(
    "sparse_softmax",
    _dispatch.Backend("triton", _triton_softmax, _dispatch.triton_batched_reasons),
)
_dispatch.register(
    "sparse_softmax", _dispatch.Backend("reference", reference.sparse_softmax, _dispatch.always)
)
_dispatch.register(
    "sparse_softmax_backward",
    _dispatch.Backend("triton", _triton_softmax_backward, _dispatch.triton_batched_reasons),
)
_dispatch.register(
    "sparse_softmax_backward",
    _dispatch.Backend("reference", reference.sparse_softmax_backward, _dispatch.always),
)
_dispatch.defer("sparse_softmax", lambda row_offsets, values, scale: _problem(row_offsets, values))
_dispatch.defer(
    "sparse_softmax_backward",
    lambda row_offsets, probs, grad, scale: _problem(row_offsets, probs, grad),
)
