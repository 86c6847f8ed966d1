"""Plain-PyTorch versions of every op: the CPU backend and the test oracle.

They work on raw tensors (the arguments of the registered ops) on any device, accumulate in
float32 (float64 for float64 inputs) and return the input dtype. Only stored entries are
multiplied, so a NaN in a dense operand reaches only the outputs a stored entry connects it to.
Sums over stored entries are segment reductions in a fixed order (no atomics), so results are
bitwise reproducible on CPU and CUDA. Work is chunked so memory stays bounded.
"""

from __future__ import annotations

import math

import torch

from .formats.nm import nm_columns

_CHUNK_ELEMENTS = 1 << 24  # temporaries of at most this many elements per step


def accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def apply_activation(x: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "relu":
        return torch.relu(x)
    if activation == "gelu":
        return torch.nn.functional.gelu(x)
    return x


def row_indices(row_offsets: torch.Tensor, nnz: int) -> torch.Tensor:
    """The row of every stored entry, int64."""
    rows = torch.arange(row_offsets.numel() - 1, device=row_offsets.device)
    return torch.repeat_interleave(rows, row_offsets.diff().long(), output_size=nnz)


def _column_chunks(columns: int, height: int):
    """Slices of the columns so that a (height, chunk) temporary stays under the budget."""
    step = max(1, _CHUNK_ELEMENTS // max(height, 1))
    for start in range(0, columns, step):
        yield slice(start, min(columns, start + step))


def _entry_chunks(nnz: int, width: int):
    step = max(1, _CHUNK_ELEMENTS // max(width, 1))
    for start in range(0, nnz, step):
        yield slice(start, min(nnz, start + step))


def _segment_sums(products: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Sum consecutive runs of products (..., nnz, c) of the given lengths -> (..., runs, c)."""
    if lengths.numel() == 0:  # no rows: segment_reduce rejects an empty reduction
        return products.new_zeros((*products.shape[:-2], 0, products.shape[-1]))
    if torch._C._are_functorch_transforms_active():  # (vmap has no rule for segment_reduce)
        runs = torch.repeat_interleave(
            torch.arange(lengths.numel(), device=lengths.device), lengths
        )
        out = products.new_zeros((*products.shape[:-2], lengths.numel(), products.shape[-1]))
        return out.index_add(-2, runs, products)
    summed = torch.segment_reduce(products.movedim(-2, 0), "sum", lengths=lengths, axis=0)
    return summed.movedim(0, -2)


def _sum_products(out, lengths, src, src_rows, values):
    """out[..., r, :] = sum over run r of entries e: values[..., e] * src[..., src_rows[e], :].

    Entries are grouped by destination (runs of `lengths`), so the sums need no atomics.
    """
    batch = math.prod(torch.broadcast_shapes(values.shape[:-1], src.shape[:-2]))
    for part in _column_chunks(src.shape[-1], src_rows.numel() * batch):
        products = values[..., :, None] * src[..., src_rows, part]
        out[..., part] = _segment_sums(products, lengths)
    return out


def spmm_csr(
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    values: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str = "none",
    transpose: bool = False,
    out_rows: int | None = None,
) -> torch.Tensor:
    """act(A @ b + bias[:, None]) for CSR A (M, K); with transpose, A^T @ b (out_rows = K).

    values (nnz,) or (batch, nnz); b (K, N) or (batch, K, N).
    """
    acc = accumulate_dtype(b.dtype)
    rows = row_indices(row_offsets, column_indices.numel())
    cols = column_indices.long()
    values = values.to(acc)
    if transpose:  # regroup the entries by column: A^T's rows
        order = torch.argsort(cols * max(row_offsets.numel() - 1, 1) + rows, stable=True)
        lengths = torch.bincount(cols, minlength=out_rows)
        src_rows, values, m = rows[order], values[..., order], out_rows
    else:
        lengths, src_rows, m = row_offsets.diff().long(), cols, row_offsets.numel() - 1
    batch = torch.broadcast_shapes(values.shape[:-1], b.shape[:-2])
    out = torch.empty(*batch, m, b.shape[-1], dtype=acc, device=b.device)
    _sum_products(out, lengths, b.to(acc), src_rows, values)
    if bias is not None:
        out += bias.to(acc)[:, None]
    return apply_activation(out, activation).to(b.dtype)


def spmm_nm(
    values: torch.Tensor,
    indices: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None,
    activation: str,
    n: int,
    m: int,
    vector: int,
    block: int,
    transpose: bool = False,
) -> torch.Tensor:
    """act(W @ b + bias) for an N:M weight W (M, K); with transpose, W^T @ b."""
    rows_out, cols_out = values.shape[0], values.shape[1] // n * m
    cols = nm_columns(indices, rows_out, n, m, vector, block).reshape(-1)
    offsets = torch.arange(rows_out + 1, device=values.device) * values.shape[1]
    return spmm_csr(
        offsets, cols, values.reshape(-1), b, bias, activation, transpose, out_rows=cols_out
    )


def sddmm_csr(
    row_offsets: torch.Tensor, column_indices: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """(x @ y^T) at the pattern's positions: x (M, K), y (N, K), or batched (batch, M, K)."""
    acc = accumulate_dtype(x.dtype)
    nnz = column_indices.numel()
    rows = row_indices(row_offsets, nnz)
    cols = column_indices.long()
    batch = torch.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    out = torch.empty(*batch, nnz, dtype=acc, device=x.device)
    xa, ya = x.to(acc), y.to(acc)
    for part in _entry_chunks(nnz, x.shape[-1] * math.prod(batch)):
        out[..., part] = (xa[..., rows[part], :] * ya[..., cols[part], :]).sum(-1)
    return out.to(x.dtype)


def sddmm_nm(
    indices: torch.Tensor, x: torch.Tensor, y: torch.Tensor, n: int, m: int, vector: int, block: int
) -> torch.Tensor:
    """(x @ y^T) at an N:M pattern's kept positions, shaped like its values (M, groups * n)."""
    rows = x.shape[0]
    per_row = y.shape[0] // m * n
    cols = nm_columns(indices, rows, n, m, vector, block).reshape(-1)
    offsets = torch.arange(rows + 1, device=x.device) * per_row
    return sddmm_csr(offsets, cols, x, y).view(rows, per_row)


def sparse_softmax(row_offsets: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """Softmax of scale * values over each row's stored entries (empty rows stay empty)."""
    acc = accumulate_dtype(values.dtype)
    nnz = values.shape[-1]
    rows = row_indices(row_offsets, nnz)
    m = row_offsets.numel() - 1
    z = values.to(acc) * scale
    lead = z.shape[:-1]
    row_max = torch.full((*lead, m), float("-inf"), dtype=acc, device=z.device)
    row_max = row_max.scatter_reduce(-1, rows.expand_as(z), z, "amax", include_self=True)
    # A row of -inf would give exp(nan); shift by 0 there so it yields 0/0 = nan like dense.
    shift = torch.where(torch.isinf(row_max) & (row_max < 0), torch.zeros_like(row_max), row_max)
    e = torch.exp(z - shift[..., rows])
    total = _row_sums(e, row_offsets)
    return (e / total[..., rows]).to(values.dtype)


def _row_sums(values: torch.Tensor, row_offsets: torch.Tensor) -> torch.Tensor:
    """Each row's sum of `values` (..., nnz) -> (..., rows), in float64: segment_reduce sums a
    row in order, which in fp32 lost ~100x torch.sum's accuracy over 10^5 entries."""
    sums = _segment_sums(values.double()[..., None], row_offsets.diff().long())[..., 0]
    return sums.to(values.dtype)


def sparse_softmax_backward(
    row_offsets: torch.Tensor, probs: torch.Tensor, grad: torch.Tensor, scale: float
) -> torch.Tensor:
    """d(values) from d(probs): scale * p * (g - sum_row(p * g))."""
    acc = accumulate_dtype(probs.dtype)
    p, g = probs.to(acc), grad.to(acc)
    return (scale * p * (g - row_sums_at_entries(row_offsets, p * g))).to(probs.dtype)


def row_sums_at_entries(row_offsets: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Each stored entry's row sum of `values` (..., nnz) -> (..., nnz)."""
    rows = row_indices(row_offsets, values.shape[-1])
    return _row_sums(values, row_offsets)[..., rows]
