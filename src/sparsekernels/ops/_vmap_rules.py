"""torch.vmap's rules for the custom ops (torch.func.vmap, jacrev, per-sample gradients).

A batch of B's (or of x's in linear) is one wider product: the vmapped dimension folds into
B's columns, one launch for the batch; a batch of a depthwise convolution's images folds
into its own batch. A batch of anything else (the weight's values, its
pattern, the bias, an SDDMM's operands) runs the op once per batch entry and stacks the
results, as torch's own fallback does, without its warning on every call."""

from __future__ import annotations

import torch

from . import _library
from .depthwise import _depthwise_op


def _per_entry(op, info, in_dims, args):
    outs = [
        op(*(a.select(d, i) if d is not None else a for a, d in zip(args, in_dims, strict=True)))
        for i in range(info.batch_size)
    ]
    return torch.stack(outs), 0


def _folding_b(op, b_index: int):
    """The rule for an op whose argument `b_index` is B (..., K, N): a batch of B alone folds
    into N; out (..., rows, N * batch) unfolds into the batch's last dimension."""

    def rule(info, in_dims, *args):
        others = [d for i, d in enumerate(in_dims) if i != b_index]
        if in_dims[b_index] is None or any(d is not None for d in others):
            return _per_entry(op, info, in_dims, args)
        b = args[b_index].movedim(in_dims[b_index], -1)  # (..., K, N, batch)
        folded = b.reshape(*b.shape[:-2], b.shape[-2] * b.shape[-1])
        out = op(*args[:b_index], folded, *args[b_index + 1 :])
        return out.unflatten(-1, (b.shape[-2], b.shape[-1])), out.dim()

    return rule


def _folding_batch(op):
    """The rule for an op whose first argument is x (N, ...): a batch of x alone folds into N."""

    def rule(info, in_dims, *args):
        if in_dims[0] is None or any(d is not None for d in in_dims[1:]):
            return _per_entry(op, info, in_dims, args)
        x = args[0].movedim(in_dims[0], 0)
        out = op(x.flatten(0, 1), *args[1:])
        return out.unflatten(0, (x.shape[0], x.shape[1])), 0

    return rule


def _entry_wise(op):
    return lambda info, in_dims, *args: _per_entry(op, info, in_dims, args)


torch.library.register_vmap(_library.spmm_csr, _folding_b(_library.spmm_csr, 3))
torch.library.register_vmap(_library.spmm_nm, _folding_b(_library.spmm_nm, 2))
torch.library.register_vmap(_depthwise_op, _folding_batch(_depthwise_op))
for _op in (
    _library.sddmm_csr,
    _library.sddmm_nm,
    _library.sparse_softmax,
    _library.sparse_softmax_backward,
):
    torch.library.register_vmap(_op, _entry_wise(_op))
