"""The CPU backend of spmm: torch's sparse CSR matmul (MKL on x86), 30-100x the reference there.

Like the reference it multiplies stored entries only and accumulates in float32 (float64 for
float64): half-precision operands are widened, since torch's CPU kernel has no bf16/fp16 path.
"""

from __future__ import annotations

import math

import torch

from .. import reference
from .._cache_mode import building
from .._quiet_warnings import spend_csr_warnings
from ..formats.nm import nm_columns
from ._cpu_columns import as_int32
from ._identity_cache import IdentityCache, version
from ._layout import in_b_order
from ._nm_transpose import transposed_pattern

# indices tensor -> (its version and the pattern's arguments, CSR row offsets, columns): an N:M
# weight's CSR pattern for torch's matmul, built once per weight (an in-place edit of the
# offsets bumps the version). It costs 4 bytes a stored value (8 past 2^31 - 1 of them),
# beside the weight's 2-4 bytes: rebuilding it took 5-6x the matmul (4096 x 4096 at 2:8).
_PATTERN = IdentityCache()


def _nm_pattern(indices, rows: int, n: int, m: int, vector: int, block: int):
    slots = indices.shape[1] * block  # stored values a row
    key = (version(indices), rows, n, m, vector, block)
    hit = _PATTERN.get(indices)
    if hit is None or hit[0] != key or key[0] is None:
        cols = slots // n * m
        index = torch.int32 if max(rows * slots, cols) < 2**31 else torch.int64
        with building(indices):
            columns = nm_columns(indices, rows, n, m, vector, block, index).reshape(-1)
            offsets = torch.arange(rows + 1, device=indices.device, dtype=index) * slots
        hit = (key, offsets, columns)
        if key[0] is not None:  # (an inference tensor's: built for the call)
            _PATTERN[indices] = hit
    return hit[1], hit[2]


def _csr_matmul(row_offsets, column_indices, values, b, shape) -> torch.Tensor:
    acc = reference.accumulate_dtype(b.dtype)
    wide = row_offsets.dtype == torch.int64 or column_indices.dtype == torch.int64
    index = torch.int64 if wide else torch.int32  # (int64 columns: past 2^31 - 1 of them)
    # torch's CSR constructor trusts its inputs: strided index views crash MKL, so copy.
    crow = row_offsets.to(index).contiguous()
    if index == torch.int32 and column_indices.dtype != index and not _recording(values, b):
        col = as_int32(column_indices)  # (int16 columns: into a buffer already mapped)
    else:
        col = column_indices.to(index).contiguous()
    spend_csr_warnings()  # (torch's once-a-process notice that CSR is beta)
    if values.dim() == 1 and b.dim() == 2:  # one matrix (no broadcasting: ~40 us less)
        batch = ()
        values, b = values.to(acc), b.to(acc)
    else:
        batch = torch.broadcast_shapes(values.shape[:-1], b.shape[:-2])
        values = values.expand(*batch, values.shape[-1]).to(acc)
        b = b.expand(*batch, *b.shape[-2:]).to(acc)
    if not batch:
        matrix = torch.sparse_csr_tensor(crow, col, values.contiguous(), shape)
        if b.shape[-1] == 1:  # one token: torch's matrix-vector kernel (4.5 -> 3.3 ms on
            return torch.mv(matrix, b[:, 0].contiguous())[:, None]  # 4096^2 at 70%, 2 cores)
        return matrix @ b
    count = math.prod(batch)
    if count == 0:
        return b.new_zeros((*batch, shape[0], b.shape[-1]))
    flat_values = values.reshape(count, values.shape[-1])
    flat_b = b.reshape(count, *b.shape[-2:])
    outs = [
        torch.sparse_csr_tensor(crow, col, v.contiguous(), shape) @ x
        for v, x in zip(flat_values, flat_b, strict=True)
    ]
    return torch.stack(outs).view(*batch, shape[0], b.shape[-1])


def _recording(*tensors) -> bool:
    """Whether autograd would keep the product's inputs (then the columns must be its own)."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _epilogue(out, bias, activation, dtype):
    if bias is not None:
        out = out + bias.to(out.dtype)[:, None]
    return reference.apply_activation(out, activation).to(dtype)


def spmm_csr(row_offsets, column_indices, values, b, bias, row_order, activation):
    shape = (row_offsets.numel() - 1, b.shape[-2])
    out = _csr_matmul(row_offsets, column_indices, values, b, shape)
    return in_b_order(_epilogue(out, bias, activation, b.dtype), b)


def spmm_nm(values, indices, b, bias, activation, n, m, vector, block, transpose):
    rows, cols = values.shape[0], values.shape[1] // n * m
    flat = values.reshape(-1)
    if transpose:  # W^T's pattern, built once per weight (a sort: 190 ms for 1536 x 384 at 2:4)
        pattern, perm = transposed_pattern(indices, rows, n, m, vector, block)
        out = _csr_matmul(pattern.row_offsets, pattern.column_indices, flat[perm], b, (cols, rows))
    else:
        offsets, columns = _nm_pattern(indices, rows, n, m, vector, block)
        out = _csr_matmul(offsets, columns, flat, b, (rows, cols))
    return in_b_order(_epilogue(out, bias, activation, b.dtype), b)


def reasons(problem, forced: bool) -> list[str]:
    if problem.device.type != "cpu":
        return [f"torch's sparse CSR matmul backs the CPU only (tensors are on {problem.device})"]
    if problem.facts.get("expanded"):
        return ["B is an expanded view: torch's kernel would materialize it"]
    return []
