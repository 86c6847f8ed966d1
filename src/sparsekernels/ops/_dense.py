"""The `dense` backend of spmm/linear: densify the sparse weight (a Triton kernel on CUDA, torch
indexing on CPU) and multiply with cuBLAS, where that beats our sparse kernels (kernels/tuning.py).

Unlike the sparse paths it multiplies the structural zeros too: a NaN or Inf in B reaches every
output of its column. It is chosen automatically on CUDA (kernels/tuning.py) and, for products
with many tokens and more than ~10% stored, on the CPU (kernels/spmm_cpu_tuning.py; fp32, and
half precision computed in fp32).
"""

from __future__ import annotations

import torch

from .. import reference
from .._cache_mode import building
from .._fill_streams import before_launch
from ..formats._pattern import index_dtype_for
from . import _dispatch
from ._identity_cache import IdentityCache, version
from ._layout import column_major


def widens_on_cpu(t: torch.Tensor) -> bool:
    """Half precision on the CPU is computed in float32 and rounded once at the end: a bf16 BLAS
    product on a CPU without bf16 units took ~10x fp32's (1536 x 384 at 384 tokens: 38.0 ms
    against 4.9; kernels/spmm_cpu_tuning.py), and torch's sparse CPU kernels widen too."""
    return t.device.type == "cpu" and t.dtype in (torch.float16, torch.bfloat16)


def _wide(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.float()  # (strides kept: column-major b stays so)


def spmm_csr(row_offsets, column_indices, values, b, bias, row_order, activation):
    if widens_on_cpu(b):
        wide = spmm_csr(row_offsets, column_indices, _wide(values), _wide(b), _wide(bias),
                        row_order, activation)  # fmt: skip
        return wide.to(b.dtype)
    weight = densify_csr(row_offsets, column_indices, values, b.shape[-2])
    if weight.dim() == 2 and column_major(b):
        return _in_b_order(weight, b, bias, activation)
    return epilogue(torch.matmul(weight, b), bias, activation)


def spmm_csr_transposed(row_offsets, column_indices, values, b, cols: int) -> torch.Tensor:
    """A^T @ b, A densified as stored and read transposed by cuBLAS (in b's memory order, as
    spmm_csr's product: column-major for a column-major b)."""
    if widens_on_cpu(b):
        wide = spmm_csr_transposed(row_offsets, column_indices, _wide(values), _wide(b), cols)
        return wide.to(b.dtype)
    if values.is_cuda:
        before_launch(values.device)  # (after any fill on another stream, as _dispatch.run)
        with torch.cuda.device(values.device):  # (Triton launches on the current device)
            weight = densify_csr(row_offsets, column_indices, values, cols)
    else:
        weight = densify_csr(row_offsets, column_indices, values, cols)
    if weight.dim() == 2 and column_major(b):
        return (b.t() @ weight).t()
    return weight.mT @ b


def spmm_nm(values, indices, b, bias, activation, n, m, vector, block, transpose):
    if widens_on_cpu(b):
        wide = spmm_nm(_wide(values), indices, _wide(b), _wide(bias), activation, n, m, vector,
                       block, transpose)  # fmt: skip
        return wide.to(b.dtype)
    weight = densify_nm(values, indices, n, m, vector, block)
    # cuBLAS reads a transposed operand in place: W^T needs no transposed copy.
    weight = weight.t() if transpose else weight
    if column_major(b):
        return _in_b_order(weight, b, bias, activation)
    return epilogue(weight @ b, bias, activation)


def _in_b_order(weight, b, bias, activation):
    """W @ b for a column-major b (linear's x^T) as (b^T @ W^T)^T: cuBLAS reads both transposes
    in place and adds the bias in its epilogue, and the product comes out column-major, so
    linear's result is contiguous without a transposing copy (ops/_layout.py)."""
    product_t = b.t() @ weight.t() if bias is None else torch.addmm(bias, b.t(), weight.t())
    return reference.apply_activation(product_t, activation).t()


def sddmm_csr(row_offsets, column_indices, x, y):
    """(x @ y^T) at the stored positions, from the whole product on cuBLAS: at a weight
    gradient's shapes (K = tokens in the thousands) tensor cores finish the dense product long
    before a CUDA-core kernel finishes the sampled one."""
    if widens_on_cpu(x):
        return sddmm_csr(row_offsets, column_indices, _wide(x), _wide(y)).to(x.dtype)
    product = torch.matmul(x, y.transpose(-1, -2))
    # (index_select reads int32 positions as they are; indexing widened them to int64 first,
    # a kernel and an 8-byte-an-entry copy every call)
    return product.flatten(-2).index_select(-1, flat_positions(row_offsets, column_indices,
                                                               y.shape[-2]))  # fmt: skip


# column indices -> (row offsets, versions, row * cols + column of every stored entry): a
# pattern's positions in the flattened product, once per pattern (a weight gradient asks every
# step; computing them costs five launches), on CUDA int32 where they fit (kept beside every
# trained weight: 4 bytes an entry, not 8); int64 on the CPU, whose densify would widen them
# every call (index_copy_ takes int64 only: 4096 x 4096 at 30% 48-56 -> 75 ms).
_FLAT = IdentityCache()


def flat_positions(row_offsets, column_indices, cols: int) -> torch.Tensor:
    """Keyed by the column indices' identity; the entry holds its row offsets, so their identity
    stays valid, and both versions, so an in-place edit recomputes."""
    key = (version(row_offsets), version(column_indices), cols)
    hit = _FLAT.get(column_indices)
    if hit is None or hit[0] is not row_offsets or hit[1] != key or None in key:
        with building(column_indices):
            rows = reference.row_indices(row_offsets, column_indices.numel())
            flat = rows * cols + column_indices.long()
            if flat.is_cuda:
                flat = flat.to(index_dtype_for((row_offsets.numel() - 1) * cols))
            hit = (row_offsets, key, flat)
        if None not in key:  # (inference tensors': built for the call)
            _FLAT[column_indices] = hit
    return hit[2]


def sddmm_nm(indices, x, y, n: int, m: int, vector: int, block: int):
    """(x @ y^T) at an N:M pattern's kept positions (M, groups * n), from the whole product."""
    from ..formats.nm import nm_columns

    if widens_on_cpu(x):
        return sddmm_nm(indices, _wide(x), _wide(y), n, m, vector, block).to(x.dtype)
    product = x @ y.t()
    return product.gather(1, nm_columns(indices, x.shape[0], n, m, vector, block))


def triton_densifies(values: torch.Tensor) -> bool:
    """Densify with the Triton kernels on CUDA; elsewhere with torch indexing."""
    return values.device.type == "cuda"


def densify_csr(row_offsets, column_indices, values, cols: int) -> torch.Tensor:
    """The dense (M, cols) matrix, or (batch, M, cols) for batched values; exact (a copy)."""
    from ..kernels.tuning import MAX_GRID_YZ

    rows = row_offsets.numel() - 1
    batch = values.shape[0] if values.dim() == 2 else 1
    if not triton_densifies(values) or batch > MAX_GRID_YZ:
        from ._densify_cpu import densify_csr as by_positions

        hit = _FLAT.get(column_indices)  # (the sddmm route's positions, where still valid)
        key = (version(row_offsets), version(column_indices), cols)
        kept = hit[2] if hit is not None and hit[0] is row_offsets and hit[1] == key else None
        return by_positions(row_offsets, column_indices, values, rows, cols, kept)
    from ..kernels import densify as kernel
    from ..kernels.densify_tuning import densify_csr_config, densify_csr_shared_config

    shared = densify_csr_shared_config(rows, cols, column_indices.numel(), values.element_size())
    if shared is not None and values.is_cuda:  # rows zeroed and scattered in shared memory
        # (Gluon: no interpreter), copied out whole
        from ..kernels.densify_shared import densify_csr_shared

        weight = values.new_empty((*values.shape[:-1], rows, cols))
        densify_csr_shared(
            row_offsets=row_offsets,
            column_indices=column_indices,
            values=values.contiguous(),
            out=weight.view(batch, rows, cols),
            rows_per_program=shared.rows_per_program,
            row_span=shared.row_span,
            block_nnz=shared.block_nnz,
            num_warps=shared.num_warps,
        )
        return weight
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
    if not triton_densifies(values):
        from ..formats.nm import nm_columns

        weight = values.new_zeros((rows, cols))
        return weight.scatter_(1, nm_columns(indices, rows, n, m, vector, block), values)
    from ..kernels import densify as kernel
    from ..kernels.densify_tuning import densify_nm_config

    config = densify_nm_config(rows, cols, n, m, block)
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


def epilogue(out, bias, activation):
    if bias is not None:
        out = out + bias[:, None]
    return reference.apply_activation(out, activation)


CPU_REASON = "on the CPU only where expected to be faster (it multiplies structural zeros too)"


def reasons(prefers_dense, prefers_dense_on_cpu=None):
    """Why the dense backend is not chosen automatically: on CUDA where `prefers_dense` says a
    sparse kernel wins; elsewhere unless `prefers_dense_on_cpu` (given) says it wins."""

    def reasons(problem: _dispatch.Problem, forced: bool) -> list[str]:
        if forced:
            return []
        if problem.device.type != "cuda":
            if prefers_dense_on_cpu is None:
                return ["chosen automatically only on CUDA (it multiplies structural zeros too)"]
            if not prefers_dense_on_cpu(problem):
                return [CPU_REASON]
            return []
        if not prefers_dense(problem):
            return ["a sparse kernel is expected to be faster here (kernels/tuning.py)"]
        return []

    return reasons


def csr_prefers_dense(problem: _dispatch.Problem) -> bool:
    from ..kernels.tuning import spmm_csr_prefers_dense

    facts, half = problem.facts, problem.dtype in (torch.float16, torch.bfloat16)
    products = facts.get("nnz", 0) * facts["n"] * facts.get("batch", 1)
    return spmm_csr_prefers_dense(facts["n"], facts.get("density", 0.0), half, products)


def csr_prefers_dense_on_cpu(problem: _dispatch.Problem) -> bool:
    from ..kernels.spmm_cpu_tuning import spmm_prefers_dense_on_cpu

    facts = problem.facts
    batch = facts.get("batch", 1)
    cells = batch * facts.get("rows", 0) * facts.get("k", 0)
    nnz = batch * facts.get("nnz", 0)
    return spmm_prefers_dense_on_cpu(facts["n"], nnz, cells, problem.dtype)


def nm_prefers_dense_on_cpu(problem: _dispatch.Problem) -> bool:
    from ..kernels.spmm_cpu_tuning import spmm_prefers_dense_on_cpu

    n, m, _, _ = problem.facts["pattern"]
    rows, cols = problem.facts.get("shape", (0, 0))
    nnz = rows * cols // m * n
    return spmm_prefers_dense_on_cpu(problem.facts["n"], nnz, rows * cols, problem.dtype)


def sddmm_prefers_dense(problem: _dispatch.Problem) -> bool:
    from ..kernels.sddmm_tuning import sddmm_prefers_dense

    facts, half = problem.facts, problem.dtype in (torch.float16, torch.bfloat16)
    # facts a caller may leave out (sparsekernels info, the bench's peers): not dense
    k, density, cells = facts.get("k", 0), facts.get("density", 0.0), facts.get("cells", 0)
    fill, batch = facts.get("tile_fill", 0.0), facts.get("batch", 1)
    return sddmm_prefers_dense(k, density, cells, half, fill, batch)


def sddmm_prefers_dense_on_cpu(problem: _dispatch.Problem) -> bool:
    from ..kernels.sddmm_tuning import sddmm_prefers_dense_on_cpu

    facts = problem.facts
    return sddmm_prefers_dense_on_cpu(facts.get("density", 0.0), facts.get("cells", 0))


def nm_prefers_dense(problem: _dispatch.Problem) -> bool:
    from ..kernels.nm_unpack_tuning import spmm_nm_unpack_config
    from ..kernels.tuning import spmm_nm_prefers_dense
    from ._nm_alias import routed_pattern
    from ._nm_stored_as import stored_pattern

    n, m, vector, block = problem.facts["pattern"]
    half = problem.dtype in (torch.float16, torch.bfloat16)
    transpose = problem.facts.get("transpose", False)
    rows, k = problem.facts.get("shape", (None, None))
    n_cols = problem.facts["n"]
    if not transpose and None not in (rows, k):  # 8-row vectors at m = 16 / 32: pairs kernel
        from ..kernels.nm_pairs_tuning import spmm_nm_pairs_config

        if spmm_nm_pairs_config(n_cols, n, m, vector, block, problem.dtype, rows, k):
            return False
    if not transpose and k is not None:  # 1:m read as 2:2m where that route measured faster
        n, m = routed_pattern(n, m, vector, block, k, n_cols, problem.dtype)
    if not transpose:  # 2:16 through a copy stored as 2:8 where that measured faster
        n, m = stored_pattern(n, m, vector, block, n_cols, problem.dtype) or (n, m)
    # where the unpack kernel measured faster than densifying (block-wise v = b = 4 at 17-64
    # tokens: 46.9 against 112.7 us, nm_unpack_tuning), the Triton route keeps the product
    unpacks = not transpose and rows is not None
    if unpacks and spmm_nm_unpack_config(n_cols, n, m, vector, block, problem.dtype, rows):
        return False
    return spmm_nm_prefers_dense(n_cols, (n, m), vector, half, transpose, rows, k, block)
