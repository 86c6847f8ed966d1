"""spmm: sparse (M, K) @ dense (K, N) -> (M, N), with an optional fused bias + activation."""

from __future__ import annotations

import torch
from torch.utils.weak import WeakIdKeyDictionary

from .. import _checks, reference
from ..formats import CSRMatrix, NMMatrix
from ..formats._pattern import Pattern
from . import _cusparselt, _dispatch, _library, _torch_sparse


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
    activation = _checks.activation(activation)
    if isinstance(A, CSRMatrix):
        _check_operands(A, B, bias, allow_batch=True)
        if A.batch is not None and B.dim() == 3 and B.shape[0] != A.batch:
            raise ValueError(f"B's batch {B.shape[0]} must match A's batch {A.batch}")
        t_ro = t_ci = t_perm = None
        if B.requires_grad and torch.is_grad_enabled():
            pattern, t_perm = A.pattern.transpose()
            t_ro, t_ci = pattern.row_offsets, pattern.column_indices
        # The narrowest column index type: fewer bytes for a memory-bound kernel to read.
        cols = A.pattern.column_indices_int16()
        return spmm_csr_raw(
            A.row_offsets,
            A.column_indices if cols is None else cols,
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
        )
    if isinstance(A, NMMatrix):
        _check_operands(A, B, bias, allow_batch=False)
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
) -> torch.Tensor:
    """The registered op with its backend chosen (forced `backend`, else `hint` if it fits)."""
    batch = max(values.shape[0] if values.dim() == 2 else 1, b.shape[0] if b.dim() == 3 else 1)
    rows = row_offsets.numel() - 1
    cells = rows * b.shape[-2]
    density = column_indices.numel() / cells if cells else 1.0
    expanded = 0 in b.stride() and b.numel() > 1
    facts = dict(n=b.shape[-1], batch=batch, rows=rows, density=density, expanded=expanded)
    problem = _problem(values, b, **facts)
    name = _dispatch.choose_with_hint("spmm_csr", problem, backend, hint)
    return _library.spmm_csr(
        row_offsets,
        column_indices,
        values,
        b,
        bias,
        row_order,
        t_ro,
        t_ci,
        t_perm,
        activation,
        name,
    )


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
    shape = (values.shape[0], values.shape[1] // n * m)
    problem = _problem(
        values, b, n=b.shape[-1], pattern=(n, m, vector, block), transpose=transpose, shape=shape
    )
    name = _dispatch.choose_with_hint("spmm_nm", problem, backend, hint)
    if name == "cusparselt":  # its own op: it takes the packed weight as one more tensor
        return _cusparselt.spmm(values, indices, b, bias, activation, matrix)
    return _library.spmm_nm(
        values, indices, b, bias, activation, n, m, vector, block, transpose, name
    )


def transpose_pattern(row_offsets, column_indices, cols: int):
    """(row offsets, column indices, permutation) of A^T when A's cached transpose is absent."""
    shape = (row_offsets.numel() - 1, cols)
    t, perm = Pattern(row_offsets, column_indices, shape).transpose()
    return t.row_offsets, t.column_indices, perm


# ----------------------------------------------------------------------- backends
# The dense backend multiplies the densified weight with cuBLAS where that beats our kernels.
# Unlike the sparse paths it multiplies the structural zeros too: a NaN or Inf in B reaches
# every output of its column. It is chosen automatically only on CUDA (tuning.py says where).
def _dense_csr(row_offsets, column_indices, values, b, bias, row_order, activation):
    weight = densify_csr(row_offsets, column_indices, values, b.shape[-2])
    return _dense_epilogue(torch.matmul(weight, b), bias, activation)


def _dense_nm(values, indices, b, bias, activation, n, m, vector, block, transpose):
    weight = densify_nm(values, indices, n, m, vector, block)
    # cuBLAS reads a transposed operand in place: W^T needs no transposed copy.
    return _dense_epilogue((weight.t() if transpose else weight) @ b, bias, activation)


def _triton_densifies(values: torch.Tensor) -> bool:
    """Densify with the Triton kernels on CUDA; elsewhere with torch indexing."""
    return values.device.type == "cuda"


def densify_csr(row_offsets, column_indices, values, cols: int) -> torch.Tensor:
    """The dense (M, cols) matrix, or (batch, M, cols) for batched values; exact (a copy)."""
    from ..kernels.tuning import MAX_GRID_YZ

    rows = row_offsets.numel() - 1
    batch = values.shape[0] if values.dim() == 2 else 1
    if not _triton_densifies(values) or batch > MAX_GRID_YZ:
        entry_rows = reference.row_indices(row_offsets, column_indices.numel())
        weight = values.new_zeros((*values.shape[:-1], rows, cols))
        weight[..., entry_rows, column_indices.long()] = values
        return weight
    from ..kernels import densify as kernel
    from ..kernels.tuning import densify_csr_config

    config = densify_csr_config(rows, cols, column_indices.numel())
    make = values.new_empty if config.write_zeros else values.new_zeros
    weight = make((*values.shape[:-1], rows, cols))
    kernel.densify_csr(
        row_offsets=row_offsets,
        column_indices=column_indices,
        values=values.contiguous(),
        out=weight.view(batch, rows, cols),
        write_zeros=config.write_zeros,
        block_rows=config.block_rows,
        block_k=config.block_k,
        block_nnz=config.block_nnz,
        num_warps=config.num_warps,
    )
    return weight


def densify_nm(values, indices, n: int, m: int, vector: int, block: int) -> torch.Tensor:
    """The dense (rows, cols) matrix of an N:M weight; exact (a copy)."""
    rows, cols = values.shape[0], values.shape[1] // n * m
    if not _triton_densifies(values):
        from ..formats.nm import nm_columns

        weight = values.new_zeros((rows, cols))
        return weight.scatter_(1, nm_columns(indices, rows, n, m, vector, block), values)
    from ..kernels import densify as kernel
    from ..kernels.tuning import densify_nm_config

    config = densify_nm_config(rows, cols, n, m)
    zeroed = config.write_zeros or config.select
    weight = values.new_empty((rows, cols)) if zeroed else values.new_zeros((rows, cols))
    return kernel.densify_nm(
        values=values.contiguous(),
        indices=indices.contiguous(),
        out=weight,
        n=n,
        m=m,
        vector=vector,
        block=block,
        write_zeros=config.write_zeros,
        select=config.select,
        block_m=config.block_m,
        block_k=config.block_k,
        block_s=config.block_s,
        program_cols=config.program_cols,
        num_warps=config.num_warps,
    )


def _dense_epilogue(out, bias, activation):
    if bias is not None:
        out = out + bias[:, None]
    return reference.apply_activation(out, activation)


def _dense_reasons(prefers_dense):
    def reasons(problem: _dispatch.Problem, forced: bool) -> list[str]:
        if forced:
            return []
        if problem.device.type != "cuda":
            return ["chosen automatically only on CUDA (it multiplies structural zeros too)"]
        if not prefers_dense(problem):
            return ["a sparse kernel is expected to be faster here (kernels/tuning.py)"]
        return []

    return reasons


def _csr_prefers_dense(problem: _dispatch.Problem) -> bool:
    from ..kernels.tuning import spmm_csr_prefers_dense

    half = problem.dtype in (torch.float16, torch.bfloat16)
    return spmm_csr_prefers_dense(problem.facts["n"], problem.facts.get("density", 0.0), half)


def _nm_prefers_dense(problem: _dispatch.Problem) -> bool:
    from ..kernels.tuning import spmm_nm_prefers_dense

    n, m, vector, block = problem.facts["pattern"]
    half = problem.dtype in (torch.float16, torch.bfloat16)
    transpose = problem.facts.get("transpose", False)
    return spmm_nm_prefers_dense(problem.facts["n"], n / m, vector, half, transpose)


def _reference_csr(row_offsets, column_indices, values, b, bias, row_order, activation):
    return reference.spmm_csr(row_offsets, column_indices, values, b, bias, activation)


def _triton_csr(row_offsets, column_indices, values, b, bias, row_order, activation):
    from ..kernels import spmm_csr as kernel
    from ..kernels.tuning import spmm_csr_config

    batch = torch.broadcast_shapes(values.shape[:-1], b.shape[:-2])
    rows = row_offsets.numel() - 1
    out = b.new_empty((*batch, rows, b.shape[-1]))
    if out.numel() == 0:
        return out
    if row_order is None:
        row_order = Pattern(row_offsets, column_indices, (rows, b.shape[-2])).row_order()
    config = spmm_csr_config(b.shape[-1])
    kernel.spmm_csr(
        row_offsets=row_offsets,
        column_indices=column_indices,
        values=values.contiguous(),
        b=b,
        bias=bias.contiguous() if bias is not None else None,
        row_order=row_order,
        out=out.view(-1, rows, b.shape[-1]),
        activation=activation,
        block_rows=config.block_rows,
        block_nnz=config.block_nnz,
        block_n=config.block_n,
        num_warps=config.num_warps,
    )
    return out


def _triton_csr_reasons(problem: _dispatch.Problem, forced: bool) -> list[str]:
    from ..kernels.tuning import MAX_GRID_YZ

    reasons = _dispatch.triton_batched_reasons(problem, forced)
    if -(-problem.facts["n"] // 128) > MAX_GRID_YZ:
        reasons.append(f"N = {problem.facts['n']} needs more column tiles than the grid allows")
    return reasons


def _reference_nm(values, indices, b, bias, activation, n, m, vector, block, transpose):
    return reference.spmm_nm(values, indices, b, bias, activation, n, m, vector, block, transpose)


def _triton_nm(values, indices, b, bias, activation, n, m, vector, block, transpose):
    from ..kernels import spmm_nm as kernel
    from ..kernels import spmm_nm_decode as decode
    from ..kernels.tuning import spmm_nm_config

    out = b.new_empty((values.shape[0], b.shape[1]))
    config = spmm_nm_config(b.shape[1], vector, values.dtype == torch.float64)
    # Vector-wise tiles at 16 tokens still prefer tensor cores (13.9 us vs 36 us, 2:8 v=64).
    if not config.use_dot and b.shape[1] <= DECODE_MAX_N and decode.supports(block):
        return _triton_nm_decode(values, indices, b, bias, out, activation, n, m, vector, block)
    kernel.spmm_nm(
        values=values.contiguous(),
        indices=indices.contiguous(),
        b=_rows_contiguous(b),
        bias=bias.contiguous() if bias is not None else None,
        out=out,
        n=n,
        m=m,
        vector=vector,
        block=block,
        activation=activation,
        use_dot=config.use_dot,
        block_m=config.block_m,
        block_s=config.block_s,
        block_n=config.block_n,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return out


# Up to this many columns of B (tokens), N:M products take the decode kernel: bound by the
# weight's bytes, it reads bit-packed offsets and keeps B's whole row in one tile.
DECODE_MAX_N = 16


def _triton_nm_decode(values, indices, b, bias, out, activation, n, m, vector, block):
    from ..kernels import spmm_nm_decode as decode
    from ..kernels.tuning import spmm_nm_decode_config

    bits = decode.packed_bits(m, block)
    words = _packed_words(indices, bits)
    config = spmm_nm_decode_config(b.shape[1], vector)
    slots_per_word = 32 // bits * block
    decode.spmm_nm_decode(
        values=values.contiguous(),
        words=words,
        bits=bits,
        b=_rows_contiguous(b),
        bias=bias.contiguous() if bias is not None else None,
        out=out,
        n=n,
        m=m,
        vector=vector,
        block=block,
        activation=activation,
        block_m=config.block_m,
        block_w=max(1, config.block_slots // slots_per_word),
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return out


# indices tensor -> (its version, bits, packed words): packing costs a few passes over the
# offsets, so it happens once per weight (keyed by identity; an in-place edit bumps the version).
_PACKED: WeakIdKeyDictionary = WeakIdKeyDictionary()


def _packed_words(indices: torch.Tensor, bits: int) -> torch.Tensor:
    from ..formats.nm import pack_offsets

    version = indices._version
    hit = _PACKED.get(indices)
    if hit is None or hit[0] != version or hit[1] != bits:
        hit = (version, bits, pack_offsets(indices, bits))
        _PACKED[indices] = hit
    return hit[2]


def _rows_contiguous(b: torch.Tensor) -> torch.Tensor:
    """B with each row contiguous: gathered rows then load as wide vectors (linear passes x^T)."""
    if b.shape[1] <= 1 or b.stride(1) == 1:
        return b
    if b.device.type == "cuda":
        from ..kernels.transpose import row_major_copy

        return row_major_copy(src=b)
    return b.contiguous()


def _triton_nm_reasons(problem: _dispatch.Problem, forced: bool) -> list[str]:
    from ..kernels.tuning import MAX_GRID_YZ

    reasons = _dispatch.triton_device_reasons(problem, forced)
    if problem.facts["transpose"]:
        reasons.append("W^T @ B (the backward of x) has no N:M kernel yet")
    if -(-problem.facts["n"] // 16) > MAX_GRID_YZ:
        reasons.append(f"N = {problem.facts['n']} needs more column tiles than the grid allows")
    return reasons


_dispatch.register(
    "spmm_csr", _dispatch.Backend("dense", _dense_csr, _dense_reasons(_csr_prefers_dense))
)
_dispatch.register("spmm_csr", _dispatch.Backend("triton", _triton_csr, _triton_csr_reasons))
_dispatch.register(
    "spmm_csr", _dispatch.Backend("torch_sparse", _torch_sparse.spmm_csr, _torch_sparse.reasons)
)
_dispatch.register("spmm_csr", _dispatch.Backend("reference", _reference_csr, _dispatch.always))
_dispatch.register("spmm_nm", _dispatch.Backend("cusparselt", _cusparselt.run, _cusparselt.reasons))
_dispatch.register(
    "spmm_nm", _dispatch.Backend("dense", _dense_nm, _dense_reasons(_nm_prefers_dense))
)
_dispatch.register("spmm_nm", _dispatch.Backend("triton", _triton_nm, _triton_nm_reasons))
_dispatch.register(
    "spmm_nm", _dispatch.Backend("torch_sparse", _torch_sparse.spmm_nm, _torch_sparse.reasons)
)
_dispatch.register("spmm_nm", _dispatch.Backend("reference", _reference_nm, _dispatch.always))
