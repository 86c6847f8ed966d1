"""sddmm: (X @ Y^T) sampled at a sparse pattern's positions -> a CSRMatrix on that pattern."""

from __future__ import annotations

import torch

from .. import _checks, reference
from ..formats import CSRMatrix, check_current
from . import _autocast, _dense, _dispatch, _library, _sddmm_plans


def sddmm(
    X: torch.Tensor, Y: torch.Tensor, pattern: CSRMatrix, *, backend: str | None = None
) -> CSRMatrix:
    """X (M, K), Y (N, K) (or batched (batch, M, K), (batch, N, K)); pattern (M, N).

    Returns a CSRMatrix on pattern's structure holding (X @ Y^T)[i, j] at each stored (i, j)
    (values (batch, nnz) when batched). Differentiable in X and Y; pattern's values are ignored.

    Example:
        >>> P = sk.CSRMatrix.from_dense(torch.eye(3))
        >>> sk.sddmm(torch.ones(3, 4), torch.ones(3, 4), P).values
        tensor([4., 4., 4.])
    """
    if not isinstance(pattern, CSRMatrix):
        raise TypeError(f"pattern must be a CSRMatrix, got {type(pattern).__name__}")
    check_current(pattern, "pattern", values=False)
    dtype = _autocast.target(X)
    if dtype is not None:  # as matmul: both operands in autocast's dtype, the op run without it
        with torch.autocast(X.device.type, enabled=False):
            cast = _autocast.cast
            return sddmm(cast(X, dtype), cast(Y, dtype), pattern, backend=backend)
    for name, t in (("X", X), ("Y", Y)):
        _checks.tensor(name, t)
        _checks.ndim(name, t, [2, 3])
        _checks.float_dtype(name, t)
    _checks.same_dtype({"X": X, "Y": Y})
    _checks.same_device({"X": X, "Y": Y, "pattern": pattern.column_indices})
    rows, cols = pattern.shape
    if X.shape[-2] != rows or Y.shape[-2] != cols:
        raise ValueError(
            f"X must have pattern's {rows} rows and Y its {cols} columns as rows; got X "
            f"{tuple(X.shape)}, Y {tuple(Y.shape)} for pattern {pattern.shape}"
        )
    if X.shape[-1] != Y.shape[-1]:
        raise ValueError(
            f"X and Y must share their last dimension, got {X.shape[-1]} and {Y.shape[-1]}"
        )
    if X.dim() == 3 and Y.dim() == 3 and X.shape[0] != Y.shape[0]:
        raise ValueError(f"X's batch {X.shape[0]} and Y's batch {Y.shape[0]} differ")
    transposed = None
    if Y.requires_grad and torch.is_grad_enabled() and _y_grad_transposes(X, Y, pattern, backend):
        t, perm = pattern.pattern.transpose()
        transposed = (t.row_offsets, t.column_indices, perm)
    values = sddmm_csr_raw(
        pattern.row_offsets, pattern.column_indices, X, Y, transposed, None, backend
    )
    return CSRMatrix._from_pattern(pattern.pattern, values, check=False)


def _y_grad_transposes(X, Y, pattern: CSRMatrix, backend: str | None) -> bool:
    """Whether Y's gradient G^T @ X will want the pattern's transpose: not where the dense
    route reads G transposed (decided as the backward will), so a training step there keeps
    no transposed pattern (6-8 bytes a stored entry). A backward that permutes after all
    (create_graph) builds it then."""
    if not _library.eager(X, Y):  # (traced or transformed: the op's backward permutes)
        return True
    from .spmm import transposed_permutes

    ro, ci = pattern.row_offsets, pattern.column_indices
    hint = _library.spmm_hint(sddmm_csr_backend(ro, ci, X, Y, None, backend))
    batch = torch.broadcast_shapes(X.shape[:-2], Y.shape[:-2])
    expanded = 0 in X.stride() and X.numel() > 1
    return transposed_permutes(
        pattern.nnz, Y.shape[-2], (*batch, pattern.nnz), X, X.shape, expanded, hint
    )


def sddmm_csr_raw(row_offsets, column_indices, x, y, transposed=None, hint=None, backend=None):
    """The registered op with its backend chosen; `transposed` is A^T's pattern for backward."""
    name = sddmm_csr_backend(row_offsets, column_indices, x, y, hint, backend)
    if _library.eager_inference(x, y):  # no gradient: skip the op's dispatch cost
        return _dispatch.run("sddmm_csr", name, row_offsets, column_indices, x, y)
    t_ro, t_ci, t_perm = transposed if transposed is not None else (None, None, None)
    return _library.call(
        _library.sddmm_csr, row_offsets, column_indices, x, y, t_ro, t_ci, t_perm, name
    )


def sddmm_csr_backend(row_offsets, column_indices, x, y, hint=None, backend=None) -> str:
    """The backend a CSR SDDMM takes (forced `backend`, else `hint` if it fits)."""
    problem = _csr_problem(row_offsets, column_indices, x, y)
    return _dispatch.choose_with_hint("sddmm_csr", problem, backend, hint)


def _csr_problem(row_offsets, column_indices, x, y) -> _dispatch.Problem:
    batch = max(x.shape[0] if x.dim() == 3 else 1, y.shape[0] if y.dim() == 3 else 1)
    rows, cols = row_offsets.numel() - 1, y.shape[-2]
    cells = batch * rows * cols
    density = column_indices.numel() / (rows * cols) if rows * cols else 1.0
    facts = {"k": x.shape[-1], "batch": batch, "rows": rows, "density": density, "cells": cells}
    if x.is_cuda and x.dtype in _TILE_DTYPES:  # the tensor-core kernel's case (cached per pattern)
        facts["tile_fill"] = _sddmm_plans.tile_fill(row_offsets, column_indices, cols)
    return _dispatch.Problem(x.device, x.dtype, facts)


def sddmm_nm_raw(indices, x, y, n, m, vector, block, hint=None, backend=None):
    problem = _nm_problem(indices, x, y, n, m, vector, block)
    name = _dispatch.choose_with_hint("sddmm_nm", problem, backend, hint)
    if _library.eager_inference(x, y):
        return _dispatch.run("sddmm_nm", name, indices, x, y, n, m, vector, block)
    return _library.call(_library.sddmm_nm, indices, x, y, n, m, vector, block, name)


def _nm_problem(indices, x, y, n, m, vector, block) -> _dispatch.Problem:
    facts = {"k": x.shape[-1], "pattern": (n, m, vector, block), "density": n / m}
    facts["cells"] = x.shape[0] * y.shape[0]
    return _dispatch.Problem(x.device, x.dtype, facts)


# ----------------------------------------------------------------------- backends
_TILE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _triton_csr(row_offsets, column_indices, x, y):
    from ..kernels import sddmm_csr as kernel
    from ..kernels import sddmm_tuning

    batch = torch.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    nnz, rows, cols, k = column_indices.numel(), row_offsets.numel() - 1, y.shape[-2], x.shape[-1]
    out = x.new_empty((*batch, nnz))
    if out.numel() == 0:
        return out
    if x.dtype in _TILE_DTYPES and _tile_ids_fit(rows, cols, k):
        fill = _sddmm_plans.tile_fill(row_offsets, column_indices, cols)
        half = x.dtype != torch.float32
        if sddmm_tuning.sddmm_tiles_takes(k, nnz / (rows * cols), fill, half):
            return _triton_tiles(row_offsets, column_indices, x, y, out)
    if nnz <= 2**31 - 1 and sddmm_tuning.sddmm_blocked_takes(
        k, x.element_size(), nnz / (rows * cols)
    ):
        return _triton_blocked(row_offsets, column_indices, x, y, out)
    row_order = _sddmm_plans.row_order(row_offsets, column_indices, cols)
    config = sddmm_tuning.sddmm_csr_config(k, nnz, rows)
    kernel.sddmm_csr(
        row_offsets=row_offsets,
        column_indices=column_indices,
        x=x,
        y=y,
        row_order=row_order,
        out=out.view(-1, nnz),
        block_nnz=config.block_nnz,
        block_k=config.block_k,
        num_warps=config.num_warps,
    )
    return out


def _triton_blocked(row_offsets, column_indices, x, y, out):
    """The blocked walk: each block of the output's X and Y rows read from L2 once."""
    from ..kernels import sddmm_blocked, sddmm_tuning

    config = sddmm_tuning.sddmm_blocked_config(x.shape[-1], x.element_size())
    plan = _sddmm_plans.blocked_plan(
        row_offsets, column_indices, y.shape[-2], config.block_rows, config.block_cols,
        config.chunk,
    )  # fmt: skip
    sddmm_blocked.sddmm_blocked(
        plan=plan,
        x=x,
        y=y,
        out=out.view(-1, out.shape[-1]),
        block_nnz=config.block_nnz,
        block_k=config.block_k,
        num_warps=config.num_warps,
    )
    return out


def _tile_ids_fit(rows: int, cols: int, k: int) -> bool:
    """Whether the tensor-core kernel's tile ids (int32, row tile x tiles a row + column tile)
    fit: not past ~2.9M x 2.9M (64 x 64 tiles)."""
    from ..kernels import sddmm_tuning

    config = sddmm_tuning.sddmm_tiles_config(k)
    return -(-rows // config.block_m) * -(-cols // config.block_n) <= 2**31 - 1


def _triton_tiles(row_offsets, column_indices, x, y, out):
    """The tensor-core kernel; float32 at torch's matmul precision ("highest", the default:
    exact float32 products; otherwise TF32, as torch.matmul would)."""
    from ..kernels import sddmm_tiles, sddmm_tuning

    config = sddmm_tuning.sddmm_tiles_config(x.shape[-1])
    plan = _sddmm_plans.tile_plan(
        row_offsets, column_indices, y.shape[-2], config.block_m, config.block_n
    )
    highest = torch.get_float32_matmul_precision() == "highest"
    sddmm_tiles.sddmm_tiles(
        plan=plan,
        x=x,
        y=y,
        out=out.view(-1, out.shape[-1]),
        block_k=config.block_k,
        precision="ieee" if highest else "tf32",
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return out


# the whole product where it wins: on CUDA per sddmm_tuning.sddmm_prefers_dense, on the CPU (whose
# only sparse SDDMM is the float64 reference) per sddmm_tuning.sddmm_prefers_dense_on_cpu
_DENSE_REASONS = _dense.reasons(_dense.sddmm_prefers_dense, _dense.sddmm_prefers_dense_on_cpu)
_dispatch.register("sddmm_csr", _dispatch.Backend("dense", _dense.sddmm_csr, _DENSE_REASONS))
_dispatch.register(
    "sddmm_csr", _dispatch.Backend("triton", _triton_csr, _dispatch.triton_batched_reasons)
)
_dispatch.register(
    "sddmm_csr", _dispatch.Backend("reference", reference.sddmm_csr, _dispatch.always)
)
_dispatch.register("sddmm_nm", _dispatch.Backend("dense", _dense.sddmm_nm, _DENSE_REASONS))
_dispatch.register("sddmm_nm", _dispatch.Backend("reference", reference.sddmm_nm, _dispatch.always))
_dispatch.defer("sddmm_csr", _csr_problem)
_dispatch.defer("sddmm_nm", _nm_problem)
