"""spmm: sparse (M, K) @ dense (K, N) -> (M, N), with an optional fused bias + activation."""

from __future__ import annotations

import math

import torch

from .. import _checks, reference
from ..formats import CSRMatrix, NMMatrix, check_current
from ..formats._pattern import Pattern
from ..kernels import spmm_csr as spmm_csr_kernel
from ..kernels import spmm_csr_few, spmm_csr_token, spmm_csr_token_stream, tuning
from . import (
    _autocast,
    _csr_lines,
    _csr_scatter,
    _cusparselt,
    _dense,
    _dispatch,
    _library,
    _torch_sparse,
    _triton_nm,
)
from ._layout import (
    column_major,
    csr_row_walk_in_b_order,
    in_b_order,
    padded_rows,
    rows_padded_to_16,
    spmm_out,
)
from ._weight_pdl import weight_pdl


def spmm(
    A: CSRMatrix | NMMatrix,
    B: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """act(A @ B + bias[:, None]); bias (M,) is added to row i (Sputnik's convention).

    A CSRMatrix may hold a batch of values (batch, nnz) and B may be batched (batch, K, N).
    Differentiable in A's values, B and bias.

    Example:
        >>> A = sk.CSRMatrix.from_dense(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
        >>> sk.spmm(A, torch.ones(2, 3), activation="relu")
        tensor([[1., 1., 1.],
                [2., 2., 2.]])
    """
    dtype = _autocast.target(B)
    if dtype is not None:  # as matmul: in autocast's dtype
        with torch.autocast(B.device.type, enabled=False):
            cast = _autocast.cast
            return spmm(_autocast.cast_weight(A, dtype), cast(B, dtype), cast(bias, dtype),
                        activation, backend=backend)  # fmt: skip
    activation = _checks.activation(activation)
    if isinstance(A, CSRMatrix):
        _check_operands(A, B, bias, allow_batch=True)
        check_current(A, "A")
        if A.batch is not None and B.dim() == 3 and B.shape[0] != A.batch:
            raise ValueError(f"B's batch {B.shape[0]} must match A's batch {A.batch}")
        # The narrowest column index type: fewer bytes for a memory-bound kernel to read.
        cols = A.pattern.column_indices_int16()
        columns = A.column_indices if cols is None else cols
        _csr_scatter.prepare(A, B)  # the scatter backend's copy of the weight, once
        t_ro = t_ci = t_perm = None
        chosen = None
        if B.requires_grad and torch.is_grad_enabled():
            chosen, transposes = _backward_transposes(A, columns, B, backend)
            if transposes:
                pattern, t_perm = A.pattern.transpose()
                t_ro, t_ci = pattern.row_offsets, pattern.column_indices
        return spmm_csr_raw(
            A.row_offsets,
            columns,
            A.values,
            B,
            bias,
            A.row_order,
            activation,
            None,
            backend,
            t_ro,
            t_ci,
            t_perm,
            chosen,
        )
    if isinstance(A, NMMatrix):
        _check_operands(A, B, bias, allow_batch=False)
        check_current(A, "A")
        return spmm_nm_raw(
            A.values,
            A.indices,
            B,
            bias,
            activation,
            A.n,
            A.m,
            A.vector,
            A.block,
            False,
            None,
            backend,
            A,
        )
    raise TypeError(f"A must be a CSRMatrix or NMMatrix, got {type(A).__name__}")


def _check_operands(A, B, bias, allow_batch: bool) -> None:
    _checks.tensor("B", B)
    _checks.ndim("B", B, [2, 3] if allow_batch else [2])
    _checks.float_dtype("B", B)
    if B.shape[-2] != A.shape[1]:
        raise ValueError(
            f"B must have A's column count {A.shape[1]} rows, got B of shape {tuple(B.shape)}"
        )
    operands = {"A": A.values, "B": B}
    if bias is not None:
        _checks.tensor("bias", bias)
        if tuple(bias.shape) != (A.shape[0],):
            raise ValueError(f"bias must have shape ({A.shape[0]},), got {tuple(bias.shape)}")
        operands["bias"] = bias
    _checks.same_device(operands)
    _checks.same_dtype(operands)


def _problem(values: torch.Tensor, b: torch.Tensor, **facts) -> _dispatch.Problem:
    return _dispatch.Problem(b.device, b.dtype, facts)


def csr_problem(row_offsets, column_indices, values, b) -> _dispatch.Problem:
    """What the CSR backends decide on (spmm_csr_raw, and linear's eager plans)."""
    batch = max(values.shape[0] if values.dim() == 2 else 1, b.shape[0] if b.dim() == 3 else 1)
    rows = row_offsets.numel() - 1
    cells = rows * b.shape[-2]
    density = column_indices.numel() / cells if cells else 1.0
    expanded = 0 in b.stride() and b.numel() > 1
    nnz = column_indices.numel()
    tiled = _csr_scatter.ready(row_offsets, column_indices, values, b)
    facts = dict(
        n=b.shape[-1], batch=batch, rows=rows, density=density, nnz=nnz, expanded=expanded,
        b_dim=b.dim(), values_dim=values.dim(), tiled=tiled, k=b.shape[-2],
    )  # fmt: skip
    return _problem(values, b, **facts)


def nm_problem(values, b, n, m, vector, block, transpose) -> _dispatch.Problem:
    """What the N:M backends decide on (spmm_nm_raw, and linear's eager plans)."""
    shape = (values.shape[0], values.shape[1] // n * m)
    expanded = 0 in b.stride() and b.numel() > 1
    return _problem(values, b, n=b.shape[-1], pattern=(n, m, vector, block),
                    transpose=transpose, shape=shape, expanded=expanded)  # fmt: skip


def spmm_csr_raw(
    row_offsets,
    column_indices,
    values,
    b,
    bias,
    row_order,
    activation,
    hint=None,
    backend=None,
    t_ro=None,
    t_ci=None,
    t_perm=None,
    chosen=None,
) -> torch.Tensor:
    """The registered op with its backend chosen (forced `backend`, else `hint` if it fits),
    or `chosen` where the caller chose it already on these very arguments."""
    name = chosen
    if name is None:
        problem = csr_problem(row_offsets, column_indices, values, b)
        name = _dispatch.choose_with_hint("spmm_csr", problem, backend, hint)
    if _library.eager_inference(values, b, bias):  # no gradient: skip the op's dispatch cost
        args = (row_offsets, column_indices, values, b, bias, row_order, activation)
        return _dispatch.run("spmm_csr", name, *args)
    args = (row_offsets, column_indices, values, b, bias, row_order, t_ro, t_ci, t_perm)
    if _library.eager(values, b, bias):  # a gradient, eagerly: the op's autograd.Function twin
        return _library.spmm_csr_eager(*args, activation, name)
    return _library.call(_library.spmm_csr, *args, activation, name)


def spmm_nm_raw(
    values,
    indices,
    b,
    bias,
    activation,
    n,
    m,
    vector,
    block,
    transpose,
    hint=None,
    backend=None,
    matrix=None,
) -> torch.Tensor:
    """The registered op with its backend chosen; `matrix` (the NMMatrix, when the caller has
    it) lends the cusparselt backend the weight it packed once."""
    problem = nm_problem(values, b, n, m, vector, block, transpose)
    name = _dispatch.choose_with_hint("spmm_nm", problem, backend, hint)
    if name == "cusparselt" and torch._C._are_functorch_transforms_active():
        if backend == "cusparselt":
            raise NotImplementedError(
                "backend='cusparselt' does not support torch.func transforms (grad, vmap, ...)"
            )
        name = "dense"  # (its op has no rules for them; dense is what took these sizes before)
    if name == "cusparselt":  # its own op: it takes the packed weight as one more tensor
        return _cusparselt.spmm(values, indices, b, bias, activation, matrix)
    args = (values, indices, b, bias, activation, n, m, vector, block, transpose)
    if _library.eager_inference(values, b, bias):  # no gradient: skip the op's dispatch cost
        return _dispatch.run("spmm_nm", name, *args)
    if _library.eager(values, b, bias):  # a gradient, eagerly: the op's autograd.Function twin
        return _library.spmm_nm_eager(*args, name)
    return _library.call(_library.spmm_nm, *args, name)


def transpose_pattern(row_offsets, column_indices, cols: int):
    """(row offsets, column indices, permutation) of A^T when A's cached transpose is absent."""
    shape = (row_offsets.numel() - 1, cols)
    t, perm = Pattern(row_offsets, column_indices, shape).transpose()
    return t.row_offsets, t.column_indices, perm


def spmm_csr_transposed(row_offsets, column_indices, values, b, cols: int, transposed, hint=None):
    """A^T @ b for A (rows, cols) in CSR, as the backward passes need it; `transposed` holds
    A^T's (row offsets, column indices, permutation) or three Nones. Where the dense backend
    takes the product and no gradient is recorded (a backward without create_graph), A is
    densified as stored and cuBLAS reads it transposed: no permuted copy of the values (a
    gather a call: the Sparse Transformer's training step ran 12 of them) and no transposed
    pattern."""
    if _library.eager_inference(values, b):
        problem = _transposed_problem(row_offsets, column_indices, values, b, cols)
        if _dispatch.choose_with_hint("spmm_csr", problem, None, hint) == "dense":
            return _dense.spmm_csr_transposed(row_offsets, column_indices, values, b, cols)
    t_ro, t_ci, t_perm = transposed
    if t_perm is None:
        t_ro, t_ci, t_perm = transpose_pattern(row_offsets, column_indices, cols)
    t_values = values[..., t_perm.long()]
    return spmm_csr_raw(t_ro, t_ci, t_values, b, None, None, "none", hint)


def _transposed_problem(row_offsets, column_indices, values, b, cols: int) -> _dispatch.Problem:
    """csr_problem's facts for A^T @ b, without A^T's arrays (its values, permuted afresh,
    never have the scatter kernel's tiled copy)."""
    expanded = 0 in b.stride() and b.numel() > 1
    facts = _transposed_facts(column_indices.numel(), cols, values.shape, b.shape, expanded)
    return _problem(values, b, **facts)


def _transposed_facts(nnz: int, cols: int, values_shape, b_shape, expanded: bool) -> dict:
    batch = max(values_shape[0] if len(values_shape) == 2 else 1,
                b_shape[0] if len(b_shape) == 3 else 1)  # fmt: skip
    cells = cols * b_shape[-2]
    return dict(
        n=b_shape[-1], batch=batch, rows=cols, density=nnz / cells if cells else 1.0, nnz=nnz,
        expanded=expanded, b_dim=len(b_shape), values_dim=len(values_shape), tiled=False,
        k=b_shape[-2],
    )  # fmt: skip


def _backward_transposes(
    A: CSRMatrix, columns: torch.Tensor, B: torch.Tensor, backend: str | None
) -> tuple[str | None, bool]:
    """The forward's backend as spmm_csr_raw would choose it on (A's offsets, `columns`, its
    values, B) (None where the op chooses when it runs), and whether B's gradient A^T @ G will
    want A^T's pattern: not where spmm_csr_transposed will read A transposed on the dense
    route (G is (..., M, N) as the product; decided as the backward will, the forward's backend
    its hint), so a training step there keeps no transposed pattern (6-8 bytes a stored
    entry). A backward that goes another way after all (create_graph) builds it then."""
    if not _library.eager(A.values, B):  # (traced or transformed: the op's backward permutes)
        return None, True
    problem = csr_problem(A.row_offsets, columns, A.values, B)
    forward = _dispatch.choose_with_hint("spmm_csr", problem, backend, None)
    batch = (B.shape[0],) if B.dim() == 3 else (A.batch,) if A.batch is not None else ()
    g_shape = (*batch, A.shape[0], B.shape[-1])  # (the product's, as G's)
    permutes = transposed_permutes(A.nnz, A.shape[1], A.values.shape, B, g_shape, False, forward)
    return forward, permutes


def transposed_permutes(nnz, cols, values_shape, like, b_shape, expanded, hint) -> bool:
    """Whether spmm_csr_transposed will take a sparse route (permuting A's values by A^T's
    pattern) for A (…, cols) with values_shape and b of b_shape (`like`'s device and dtype),
    rather than the dense one that reads A transposed: as its backward call will decide."""
    facts = _transposed_facts(nnz, cols, values_shape, b_shape, expanded)
    problem = _problem(None, like, **facts)
    return _dispatch.choose_with_hint("spmm_csr", problem, None, hint) != "dense"


# ----------------------------------------------------------------------- backends
def _reference_csr(row_offsets, column_indices, values, b, bias, row_order, activation):
    out = reference.spmm_csr(row_offsets, column_indices, values, b, bias, activation)
    return in_b_order(out, b)


def _batch_shape(a: torch.Size, b: torch.Size) -> torch.Size:
    """torch.broadcast_shapes for the usual cases without its cost (~30 us a call on the host)."""
    if a == b or not b:
        return a
    return b if not a else torch.broadcast_shapes(a, b)


def _triton_csr(row_offsets, column_indices, values, b, bias, row_order, activation):
    batch = _batch_shape(values.shape[:-1], b.shape[:-2])
    rows = row_offsets.numel() - 1
    walk_in_b_order = csr_row_walk_in_b_order(values, b)
    out = spmm_out(b, rows) if walk_in_b_order else b.new_empty((*batch, rows, b.shape[-1]))
    if out.numel() == 0:
        return out
    if row_order is None:
        row_order = Pattern(row_offsets, column_indices, (rows, b.shape[-2])).row_order()
    if b.dim() == 2 and b.shape[1] == 1 and values.dim() == 1:  # one token: aligned vector loads
        if _csr_lines.run(row_offsets, column_indices, values, b[:, 0], bias, out[:, 0],
                          row_order, activation):  # fmt: skip
            return out  # (the line layout: a byte a column, csr_lines_tuning.CSR_TOKEN_LINES)
        stream_rows = tuning.spmm_csr_token_stream_rows(rows, column_indices.numel())
        if stream_rows is not None:  # many short rows: each program's rows as one stream
            spmm_csr_token_stream.spmm_csr_token_stream(
                row_offsets=row_offsets,
                column_indices=column_indices,
                values=values.contiguous(),
                x=b[:, 0],
                bias=bias.contiguous() if bias is not None else None,
                row_order=row_order,
                out=out[:, 0],
                activation=activation,
                rows_per_program=stream_rows,
                block=tuning.CSR_TOKEN_BLOCK,
                pdl=weight_pdl(values, row_offsets, column_indices),
            )
            return out
        config = tuning.spmm_csr_token_config(column_indices.numel(), rows)
        spmm_csr_token.spmm_csr_token(
            row_offsets=row_offsets,
            column_indices=column_indices,
            values=values.contiguous(),
            x=b[:, 0],
            bias=bias.contiguous() if bias is not None else None,
            row_order=row_order,
            out=out[:, 0],
            activation=activation,
            rows_per_program=config.rows_per_program,
            block=config.block,
            num_warps=config.num_warps,
            pdl=weight_pdl(values, row_offsets, column_indices),
            asm_gather=tuning.CSR_TOKEN_ASM_GATHER and not _dispatch.triton_interpreter_enabled(),
            unmasked_middle=tuning.CSR_TOKEN_UNMASKED_MIDDLE,
        )
        return out
    if walk_in_b_order:
        padded = padded_rows(b)
        if _csr_lines.run_few(row_offsets, column_indices, values, padded, bias, out, row_order,
                              activation):  # fmt: skip
            return out  # (the line layout: a byte a column, csr_lines_tuning.CSR_FEW_LINES)
        config = tuning.spmm_csr_few_config(b.shape[1], rows)
        spmm_csr_few.spmm_csr_few(
            row_offsets=row_offsets,
            column_indices=column_indices,
            values=values.contiguous(),
            b=padded,
            bias=bias.contiguous() if bias is not None else None,
            row_order=row_order,
            out=out,
            activation=activation,
            rows_per_program=config.rows_per_program,
            block=config.block,
            num_warps=config.num_warps,
        )
        return out
    programs_rows = rows * math.prod(batch)  # the grid's row tiles span the batch
    config = tuning.spmm_csr_config(b.shape[-1], programs_rows, values.element_size())
    if b.dim() == 2 and 1 < b.shape[1] <= 16:  # decode sizes: rows as aligned vectors
        b = padded_rows(b)
    elif b.dim() == 2 and column_major(b):  # linear's x^T: a gathered row was N loads K apart
        b = rows_padded_to_16(b)  # (row-major, 16-column aligned: wide loads at any N)
    spmm_csr_kernel.spmm_csr(
        row_offsets=row_offsets,
        column_indices=column_indices,
        values=values.contiguous(),
        b=b,
        bias=bias.contiguous() if bias is not None else None,
        row_order=row_order,
        out=out.view(-1, rows, out.shape[-1]),
        activation=activation,
        block_rows=config.block_rows,
        block_nnz=config.block_nnz,
        block_n=config.block_n,
        num_warps=config.num_warps,
    )
    return out


def _triton_csr_reasons(problem: _dispatch.Problem, forced: bool) -> list[str]:
    reasons = _dispatch.triton_batched_reasons(problem, forced)
    if -(-problem.facts["n"] // 128) > tuning.MAX_GRID_YZ:
        reasons.append(f"N = {problem.facts['n']} needs more column tiles than the grid allows")
    return reasons


def _reference_nm(values, indices, b, bias, activation, n, m, vector, block, transpose):
    out = reference.spmm_nm(values, indices, b, bias, activation, n, m, vector, block, transpose)
    return in_b_order(out, b)


_dispatch.register("spmm_csr", _dispatch.Backend("scatter", _csr_scatter.run, _csr_scatter.reasons))
_dispatch.register(
    "spmm_csr",
    _dispatch.Backend(
        "dense",
        _dense.spmm_csr,
        _dense.reasons(_dense.csr_prefers_dense, _dense.csr_prefers_dense_on_cpu),
    ),
)
_dispatch.register("spmm_csr", _dispatch.Backend("triton", _triton_csr, _triton_csr_reasons))
_dispatch.register(
    "spmm_csr", _dispatch.Backend("torch_sparse", _torch_sparse.spmm_csr, _torch_sparse.reasons)
)
_dispatch.register("spmm_csr", _dispatch.Backend("reference", _reference_csr, _dispatch.always))
_dispatch.register("spmm_nm", _dispatch.Backend("cusparselt", _cusparselt.run, _cusparselt.reasons))
_dispatch.register(
    "spmm_nm",
    _dispatch.Backend(
        "dense",
        _dense.spmm_nm,
        _dense.reasons(_dense.nm_prefers_dense, _dense.nm_prefers_dense_on_cpu),
    ),
)
_dispatch.register("spmm_nm", _dispatch.Backend("triton", _triton_nm.spmm_nm, _triton_nm.reasons))
_dispatch.register(
    "spmm_nm", _dispatch.Backend("torch_sparse", _torch_sparse.spmm_nm, _torch_sparse.reasons)
)
_dispatch.register("spmm_nm", _dispatch.Backend("reference", _reference_nm, _dispatch.always))
_dispatch.defer("spmm_csr", lambda ro, ci, values, b, *rest: csr_problem(ro, ci, values, b))


def _traced_nm_problem(values, indices, b, bias, activation, n, m, vector, block, transpose):
    """spmm_nm's problem in a compiled graph's op body: cuSPARSELt only where its packing is
    kept across calls (_cusparselt.packing_kept)."""
    problem = nm_problem(values, b, n, m, vector, block, transpose)
    kept = not transpose and _cusparselt.packing_kept(values, indices, b.shape[0])
    problem.facts.update(traced=True, packing_kept=kept)
    return problem


_dispatch.defer("spmm_nm", _traced_nm_problem)
