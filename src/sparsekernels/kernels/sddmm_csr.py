"""CSR SDDMM, first kernel: one program computes every stored entry of one row of one matrix.

out[b, e] = dot(x[b, row(e), :], y[b, col(e), :]) for each stored entry e. Rows are visited in
`row_order` (longest first, Sputnik's row swizzle). A program walks its row BLOCK_NNZ entries at
a time; for each chunk it loops over K in BLOCK_K steps, loading the x row chunk (BLOCK_K,) and
gathering the y rows (BLOCK_NNZ, BLOCK_K) its column indices pick, and multiply-reduces along K
in fp32 (fp64 for fp64 inputs). Only stored entries are computed, so a NaN in x or y reaches only
the entries whose row or column holds it.

Index arithmetic within a matrix is INDEX: int64 wherever a product can pass 2^31 (a
transposed operand, x^T in the backward of `linear`, has a stride along K as large as its row
count), else int32 (INT32_LIMIT; int64 arithmetic on every entry cost the CSR one-token kernel
a third of its speed, spmm_csr_token.py). The row, entry offsets, column indices and the K
offsets take it once loaded; batch offsets are int64.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._sizes import matrix_span, operand_strides


@triton.jit
def _sddmm_csr_kernel(
    row_offsets,  # (M + 1,) int32/int64
    column_indices,  # (nnz,) int16/int32/int64
    x,  # (M, K) or (batch, M, K): strides stride_xb (0 when unbatched), stride_xm, stride_xk
    y,  # (N, K) or (batch, N, K): strides stride_yb (0 when unbatched), stride_yn, stride_yk
    row_order,  # (M,) int32: the row each program pid(0) computes
    out,  # (batch, nnz): stride_ob between matrices, unit stride along nnz
    K,
    stride_xb,
    stride_xm,
    stride_xk,
    stride_yb,
    stride_yn,
    stride_yk,
    stride_ob,
    ACC_DTYPE: tl.constexpr,
    INDEX: tl.constexpr,  # int32 when every offset within a matrix fits, else int64
    BLOCK_NNZ: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    row = tl.load(row_order + tl.program_id(0)).to(INDEX)
    batch = tl.program_id(1).to(tl.int64)
    start = tl.load(row_offsets + row).to(INDEX)
    end = tl.load(row_offsets + row + 1).to(INDEX)

    x += batch * stride_xb + row * stride_xm
    y += batch * stride_yb
    out += batch * stride_ob
    for e in range(start, end, BLOCK_NNZ):
        offs = e + tl.arange(0, BLOCK_NNZ).to(INDEX)  # INDEX in the interpreter too
        mask = offs < end
        cols = tl.load(column_indices + offs, mask=mask, other=0).to(INDEX)
        acc = tl.zeros((BLOCK_NNZ,), dtype=ACC_DTYPE)
        for k in range(0, K, BLOCK_K):
            # INDEX before the strides (k is a small Python int in the interpreter)
            offs_k = k + tl.arange(0, BLOCK_K).to(INDEX)
            mask_k = offs_k < K
            x_chunk = tl.load(x + offs_k * stride_xk, mask=mask_k, other=0.0).to(ACC_DTYPE)
            y_tile = tl.load(
                y + cols[:, None] * stride_yn + offs_k[None, :] * stride_yk,
                mask=mask[:, None] & mask_k[None, :],
                other=0.0,
            ).to(ACC_DTYPE)
            acc += tl.sum(x_chunk[None, :] * y_tile, axis=1)
        tl.store(out + offs, acc.to(out.dtype.element_ty), mask=mask)


INT32_LIMIT = 2**31  # offsets within a matrix below it are computed in int32


def _reach(x: torch.Tensor, y: torch.Tensor, nnz: int, rows: int, block_nnz: int) -> int:
    """A bound on the offsets the kernel forms within one matrix of x, y and out."""

    return max(nnz + block_nnz, matrix_span(x), matrix_span(y), rows + 1)


def sddmm_csr(
    *,
    row_offsets: torch.Tensor,
    column_indices: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    row_order: torch.Tensor,
    out: torch.Tensor,
    block_nnz: int,
    block_k: int,
    num_warps: int,
) -> torch.Tensor:
    """Launch over out (batch, nnz), unit stride along nnz; x, y may be unbatched (stride 0)."""
    batch, nnz = out.shape
    rows = row_offsets.numel() - 1
    if rows == 0 or nnz == 0 or batch == 0:
        return out
    assert out.stride(1) == 1 or nnz == 1, "out must have unit stride along nnz"
    acc = tl.float64 if out.dtype == torch.float64 else tl.float32
    _sddmm_csr_kernel[(rows, batch)](
        row_offsets,
        column_indices,
        x,
        y,
        row_order,
        out,
        x.shape[-1],
        *operand_strides(x),
        *operand_strides(y),
        out.stride(0),
        ACC_DTYPE=acc,
        INDEX=tl.int32 if _reach(x, y, nnz, rows, block_nnz) < INT32_LIMIT else tl.int64,
        BLOCK_NNZ=block_nnz,
        BLOCK_K=block_k,
        num_warps=num_warps,
    )
    return out
