"""torch.vmap's rules for the custom ops (torch.func.vmap, jacrev, per-sample gradients).

A batch of B's (or of x's in linear) is one wider product: the vmapped dimension folds into
B's columns, one launch for the batch; a batch of a depthwise convolution's images folds
into its own batch. The CSR ops' own batch (a weight's batch of values, an SDDMM's X and Y,
the softmax's values, an N:M SDDMM's X and Y as a CSR one's) takes a batch of those.
Anything else (a pattern, the bias) runs the op once per batch entry and stacks the results,
as torch's own fallback does, without its warning on every call."""

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


def _into_the_ops_batch(op, core: dict[int, int], same_shape: bool = False):
    """The rule for a CSR op whose arguments at `core`'s positions take one leading batch
    dimension over their core dimensions (values: 1, B, X, Y: 2), broadcast between them: the
    vmapped dimension becomes that batch, or is merged with it (copies where an operand lacks
    one). `same_shape`: the op broadcasts nothing, so every operand gets the whole batch."""

    def rule(info, in_dims, *args):
        if any(d is not None for i, d in enumerate(in_dims) if i not in core):
            return _per_entry(op, info, in_dims, args)
        size, args = info.batch_size, list(args)
        logical = []
        for i, ndim in core.items():
            if args[i] is None:
                continue
            if in_dims[i] is not None:
                args[i] = args[i].movedim(in_dims[i], 0)
            extra = args[i].dim() - ndim - (in_dims[i] is not None)
            logical.append(args[i].shape[int(in_dims[i] is not None) :][:extra])
        batch = tuple(torch.broadcast_shapes(*logical))
        for i, ndim in core.items():
            t = args[i]
            if t is None or (in_dims[i] is None and t.dim() == ndim and not same_shape):
                continue  # (no batch at all: the op broadcasts it)
            if in_dims[i] is None:
                t = t.unsqueeze(0)
            if t.dim() == ndim + 1 and batch:
                t = t.unsqueeze(1)
            core_shape = t.shape[t.dim() - ndim :]
            t = t.expand(size, *batch, *core_shape)
            args[i] = t.reshape(size * (batch[0] if batch else 1), *core_shape)
        out = op(*args)
        return (out.unflatten(0, (size, batch[0])) if batch else out), 0

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


def _sddmm_nm(info, in_dims, indices, x, y, n, m, vector, block, backend):
    """An N:M SDDMM is a CSR one whose rows hold groups * n entries each: a batch of X and Y
    goes into the CSR op's own batch, one call (per-sample gradients of N:M weights)."""
    from ..formats._pattern import column_dtype_for, index_dtype_for
    from ..formats.nm import nm_columns
    from .sddmm import sddmm_csr_backend

    if in_dims[0] is not None:
        return _per_entry(_library.sddmm_nm, info, in_dims, (indices, x, y, n, m, vector, block,
                                                             backend))  # fmt: skip
    x = x if in_dims[1] is None else x.movedim(in_dims[1], 0)
    y = y if in_dims[2] is None else y.movedim(in_dims[2], 0)
    rows, per_row = x.shape[-2], y.shape[-2] // m * n
    columns = nm_columns(indices, rows, n, m, vector, block, column_dtype_for(y.shape[-2]))
    offsets = torch.arange(rows + 1, device=x.device) * per_row
    offsets = offsets.to(index_dtype_for(rows * per_row))
    columns = columns.reshape(-1)
    name = sddmm_csr_backend(offsets, columns, x, y, hint=backend)
    out = _library.sddmm_csr(offsets, columns, x, y, None, None, None, name)  # (the op: a rule
    return out.view(info.batch_size, rows, per_row), 0  # runs below the transforms' Functions)


_spmm_csr_b = _folding_b(_library.spmm_csr, 3)
_spmm_csr_batch = _into_the_ops_batch(_library.spmm_csr, {2: 1, 3: 2})


def _spmm_csr(info, in_dims, *args):
    """B alone batched: folded into its columns; the values batched too: the op's batch."""
    if in_dims[2] is None:
        return _spmm_csr_b(info, in_dims, *args)
    return _spmm_csr_batch(info, in_dims, *args)


torch.library.register_vmap(_library.spmm_csr, _spmm_csr)
torch.library.register_vmap(
    _library.sddmm_csr, _into_the_ops_batch(_library.sddmm_csr, {2: 2, 3: 2})
)
torch.library.register_vmap(
    _library.sparse_softmax, _into_the_ops_batch(_library.sparse_softmax, {1: 1})
)
torch.library.register_vmap(
    _library.sparse_softmax_backward,
    _into_the_ops_batch(_library.sparse_softmax_backward, {1: 1, 2: 1}, same_shape=True),
)
torch.library.register_vmap(_library.spmm_nm, _folding_b(_library.spmm_nm, 2))
torch.library.register_vmap(_depthwise_op, _folding_batch(_depthwise_op))
torch.library.register_vmap(_library.sddmm_nm, _sddmm_nm)
