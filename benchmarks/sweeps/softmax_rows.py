"""The row softmax with many rows a program, the next row's loads issued before this row's
math: a prototype to measure before it becomes kernels/softmax_csr.py's single-read path
(issue 3: 70% of the copy bandwidth; bf16 reaches ~56-61%, at-057a6b3/softmax_aligned.txt).

The library launches a program per row (and pair of heads): 32K programs of one 16-byte load
and one store a lane for local:256 at L = 4096 and 16 heads, each waiting out its load's
latency before its reductions, and 16-byte alignment did not help (softmax_aligned.txt). Here
a program walks `rows_per_program` rows, either contiguous or strided across the grid
(persistent), and loads row i + 1 while it reduces row i. Rows must fit one block (the
single-read path): local:256, strided:128:128 and random:0.1.

Forms: "library" (sparse_softmax, the default config) and "rows R [strided]"; bf16 and fp32, 16
heads at L = 4096, CUDA-graph medians of one launch per copy of the values (copies past L2),
GB/s on the bytes moved against the copy bandwidth measured here. Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/softmax_rows.py
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/sweeps/softmax_rows.py --check
"""

import os
import sys

import _softmax_proto
import torch
import triton
import triton.language as tl

from sparsekernels.bench.cases import _pattern_from_mask, attention_mask

CHECK = "--check" in sys.argv
BUDGET_S = float(os.environ.get("BUDGET_S", 90))


@triton.jit
def _row_load(row_offsets, values, row, rows, lanes, mask_h, stride_ve):
    """A row's entries of BLOCK_H heads (-inf past the row), their offsets and mask."""
    live = row < rows
    start = tl.load(row_offsets + row, mask=live, other=0)
    end = tl.load(row_offsets + row + 1, mask=live, other=0)
    offs = (start + lanes)[None, :]
    mask = mask_h[:, None] & (offs < end)
    z = tl.load(values + offs * stride_ve, mask=mask, other=float("-inf"))
    return z, offs, mask


@triton.jit
def _rows_softmax_kernel(
    row_offsets,  # (M + 1,) int32
    values,  # (batch, nnz): strides stride_vb, stride_ve
    out,  # (batch, nnz): strides stride_ob, stride_oe
    scale,
    rows,
    batch,
    rows_per_program,
    stride_vb,
    stride_ve,
    stride_ob,
    stride_oe,
    STRIDED: tl.constexpr,  # rows pid, pid + programs, ...; else pid * R .. pid * R + R - 1
    BLOCK: tl.constexpr,  # >= the longest row
    BLOCK_H: tl.constexpr,
):
    pid = tl.program_id(0)
    heads = tl.program_id(1).to(tl.int64) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = heads < batch
    values += heads[:, None] * stride_vb
    out += heads[:, None] * stride_ob
    lanes = tl.arange(0, BLOCK)
    if STRIDED:
        row, step = pid, tl.num_programs(0)
    else:
        row, step = pid * rows_per_program, 1
    z, offs, mask = _row_load(row_offsets, values, row, rows, lanes, mask_h, stride_ve)
    for _ in range(0, rows_per_program):
        row += step
        next_z, next_offs, next_mask = _row_load(
            row_offsets, values, row, rows, lanes, mask_h, stride_ve
        )
        s = tl.where(mask, z.to(tl.float32) * scale, float("-inf"))
        row_max = tl.max(s, axis=1)
        shift = tl.where(row_max == float("-inf"), 0.0, row_max)[:, None]
        exps = tl.exp(s - shift)
        p = exps / tl.sum(exps, axis=1)[:, None]
        tl.store(out + offs * stride_oe, p.to(out.dtype.element_ty), mask=mask)
        z, offs, mask = next_z, next_offs, next_mask


def row_block(P) -> int:
    """The longest row as a power of two: read once, outside a CUDA-graph capture."""
    return max(16, triton.next_power_of_2(int(P.row_offsets.diff().max())))


def launch_rows(P, values, out, scale, rows_per_program, strided, heads, warps, block=None):
    rows = P.shape[0]
    block = block or row_block(P)
    programs = triton.cdiv(rows, rows_per_program)
    _rows_softmax_kernel[(programs, triton.cdiv(values.shape[0], heads))](
        P.row_offsets, values, out, scale, rows, values.shape[0],
        rows_per_program, values.stride(0), values.stride(1), out.stride(0), out.stride(1),
        STRIDED=strided, BLOCK=block, BLOCK_H=heads, num_warps=warps,
    )  # fmt: skip


def check():
    """Against float64 softmax per row: rows of 1 to ~70 entries, an empty row, heads past the
    batch, rows not a multiple of a program's, both walks (interpreter)."""
    g = torch.Generator().manual_seed(0)
    for kind in ("local:7", "random:0.3", "strided:5:9"):
        mask = attention_mask(kind, 70, torch.device("cpu"), g)
        mask[3] = False  # an empty row
        P = _pattern_from_mask(mask, torch.float32)
        for dtype, (R, strided) in zip(
            (torch.float32, torch.float16, torch.float32),
            ((4, False), (3, True), (1, False)),
            strict=True,
        ):
            values = torch.randn(3, P.nnz, generator=g).to(dtype)
            out = torch.full_like(values, float("nan"))
            launch_rows(P, values, out, 0.7, R, strided, 2, 1)
            want = _softmax_proto.reference(P, values, 0.7)
            err = (out.double() - want).abs().max().item()
            assert err < (1e-6 if dtype == torch.float32 else 2e-3), (kind, dtype, R, err)
            print(f"{kind} {dtype} rows {R} strided={strided}: max error {err:.1e}")


def sweep():
    def forms(P, out, config):
        found, block = {}, row_block(P)
        for R, strided, h in ((4, False, 2), (16, False, 2), (8, True, 2), (32, True, 2),
                              (16, False, 1), (32, True, 1)):  # fmt: skip
            warps = max(1, config.num_warps * h // max(config.heads, 1))
            name = f"rows {R}{' strided' if strided else ''} h{h}"
            found[name] = lambda v, R=R, s=strided, h=h, w=warps: launch_rows(
                P, v, out, 0.5, R, s, h, w, block
            )
        return found

    def allocate(heads, nnz, dtype):
        return torch.empty(heads, nnz, device="cuda", dtype=dtype)

    _softmax_proto.sweep(forms, allocate, BUDGET_S)


if __name__ == "__main__":
    check() if CHECK else sweep()
