"""CSR decode at one token with fewer bytes a stored entry: a prototype to measure before it
becomes the CSR weight's decode form (issue 3's decode targets: 1.5x dense at 70%, 3.5x at 90%).

At one token the CSR kernel reads a bf16 value and an int16 column per entry, 4 bytes, so at
70% it can beat dense's 2 bytes a weight by 1.67x at best (it measures 0.99-1.25x, at-39e93db
llm suite). Here the column is split: its low byte per entry (uint8) and, per row, where each
256-column chunk's entries start (int32, ~1-3% of the entry bytes at 70-90% on the LLM shapes):
3 bytes an entry, so 2.2x at best at 70% and 6.7x at 90%. A program walks its rows chunk by
chunk; within a chunk the columns are the chunk's base plus the low bytes. Also timed: the CSR
walk with the next step's columns and values loaded by hand before this step's gather of x
(the gather's address depends on the loaded columns, which Triton's pipelining cannot overlap).

Forms ("route" is sk.linear on the CSRMatrix, the library's decode kernel):
- "pipelined": int16 columns, BLOCK entries of a row a step, hand-pipelined;
- "chunked": uint8 low bytes and chunk starts, up to BLOCK entries of a chunk a step.
bf16, CUDA-graph medians in us against dense and the route, magnitude-pruned LLM weights.
Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_decode_chunks.py
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/sweeps/csr_decode_chunks.py --check
"""

import itertools
import os
import sys
import time

import torch
import triton
import triton.language as tl

import sparsekernels as sk

CHECK = "--check" in sys.argv
BUDGET_S = float(os.environ.get("BUDGET_S", 150))
CHUNK = 256  # columns a chunk: what a uint8 low byte addresses


@triton.jit
def _pipelined_kernel(
    row_offsets,  # (M + 1,) int32
    columns,  # (nnz,) int16 (K <= 32768) or int32
    values,  # (nnz,) bf16
    x,  # (K,)
    out,  # (M,) float32
    M,
    BLOCK_M: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < M
    start = tl.load(row_offsets + offs_m, mask=mask_m, other=0)
    end = tl.load(row_offsets + offs_m + 1, mask=mask_m, other=0)
    longest = tl.max(end - start, axis=0)
    offs = start[:, None] + tl.arange(0, BLOCK)[None, :]
    mask = offs < end[:, None]
    cols = tl.load(columns + offs, mask=mask, other=0)
    vals = tl.load(values + offs, mask=mask, other=0.0)
    acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
    for _ in range(0, longest, BLOCK):
        next_offs = offs + BLOCK
        next_mask = next_offs < end[:, None]
        next_cols = tl.load(columns + next_offs, mask=next_mask, other=0)
        next_vals = tl.load(values + next_offs, mask=next_mask, other=0.0)
        picked = tl.load(x + cols.to(tl.int32), mask=mask, other=0.0)
        acc += vals.to(tl.float32) * picked.to(tl.float32)
        offs, mask, cols, vals = next_offs, next_mask, next_cols, next_vals
    tl.store(out + offs_m, tl.sum(acc, axis=1), mask=mask_m)


@triton.jit
def _chunked_kernel(
    chunk_starts,  # (M, CHUNKS + 1) int32: where each chunk's entries start; the last, the row end
    low,  # (nnz,) uint8: column % CHUNK
    values,  # (nnz,) bf16
    x,  # (K,)
    out,  # (M,) float32
    M,
    CHUNKS,
    CHUNK_COLS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < M
    table = chunk_starts + offs_m.to(tl.int64) * (CHUNKS + 1)
    k = tl.arange(0, BLOCK)
    start = tl.load(table, mask=mask_m, other=0)
    acc = tl.zeros((BLOCK_M, BLOCK), dtype=tl.float32)
    for c in range(CHUNKS):
        end = tl.load(table + c + 1, mask=mask_m, other=0)
        longest = tl.max(end - start, axis=0)
        for e0 in range(0, longest, BLOCK):
            offs = start[:, None] + e0 + k[None, :]
            mask = offs < end[:, None]
            lows = tl.load(low + offs, mask=mask, other=0).to(tl.int32)
            vals = tl.load(values + offs, mask=mask, other=0.0)
            picked = tl.load(x + c * CHUNK_COLS + lows, mask=mask, other=0.0)
            acc += vals.to(tl.float32) * picked.to(tl.float32)
        start = end
    tl.store(out + offs_m, tl.sum(acc, axis=1), mask=mask_m)


def chunked(A: sk.CSRMatrix):
    """(chunk starts (M, chunks + 1) int32, low bytes (nnz,) uint8) of a CSR matrix."""
    rows, cols = A.shape
    chunks = triton.cdiv(cols, CHUNK)
    columns = A.column_indices.long()
    row_of = A.pattern.row_indices()
    counts = torch.bincount(row_of * chunks + columns // CHUNK, minlength=rows * chunks)
    starts = torch.zeros(rows, chunks + 1, dtype=torch.int64, device=columns.device)
    starts[:, 1:] = counts.view(rows, chunks).cumsum(1)
    starts += A.row_offsets[:-1].long()[:, None]
    return starts.to(torch.int32), (columns % CHUNK).to(torch.uint8), chunks


def launch(A, packed, x, out, mode, block_m, block, warps):
    rows = A.shape[0]
    grid = (triton.cdiv(rows, block_m),)
    if mode == "pipelined":
        cols = A.pattern.column_indices_int16()
        cols = A.column_indices if cols is None else cols
        _pipelined_kernel[grid](
            A.row_offsets, cols, A.values, x, out, rows, BLOCK_M=block_m, BLOCK=block,
            num_warps=warps, num_stages=1,
        )  # fmt: skip
    else:
        starts, low, chunks = packed
        _chunked_kernel[grid](
            starts, low, A.values, x, out, rows, chunks, CHUNK_COLS=CHUNK, BLOCK_M=block_m,
            BLOCK=block, num_warps=warps, num_stages=1,
        )  # fmt: skip
    return out


def check():
    """Both forms against float64: rows across chunks and steps, empty rows and chunks, a
    partial last chunk, partial row tiles (interpreter)."""
    torch.manual_seed(0)
    for density, cols in ((0.3, 3 * CHUNK + 40), (0.02, 2 * CHUNK + 7)):
        dense = torch.randn(9, cols, dtype=torch.bfloat16)
        dense[3] = 0  # an empty row
        mask = torch.rand(9, cols) < density
        mask[5, CHUNK : 2 * CHUNK] = False  # an empty chunk inside a row
        A = sk.CSRMatrix.from_dense(dense * mask)
        packed = chunked(A)
        x = torch.randn(cols, dtype=torch.bfloat16)
        want = A.to_dense().double() @ x.double()
        for mode, (block_m, block) in itertools.product(
            ("pipelined", "chunked"), [(1, 32), (4, 16), (2, 64)]
        ):
            out = torch.full((9,), float("nan"))
            launch(A, packed, x, out, mode, block_m, block, 1)
            err = (out.double() - want).abs().max().item()
            assert err < 1e-3 * max(1.0, want.abs().max().item()), (mode, block_m, block, err)
            print(f"{density:.0%} {mode} rows {block_m} block {block}: max error {err:.1e}")


def bench(fn) -> float:
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


CONFIGS = {
    "pipelined": [(1, 256, 1), (1, 512, 2), (1, 128, 1), (2, 256, 2), (4, 128, 2)],
    "chunked": [(1, 64, 1), (1, 128, 1), (2, 64, 1), (4, 64, 2), (4, 32, 1), (8, 32, 2)],
}


def sweep():
    start = time.time()
    table = []
    shapes = [(4096, 14336), (14336, 4096), (4096, 4096)]
    for (M, K), sparsity in itertools.product(shapes, (0.7, 0.9)):
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        packed = chunked(A)
        x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
        want = (A.to_dense().float() @ x[0].float()).double()
        dense = bench(lambda: x @ w.t())
        route = bench(lambda: sk.linear(x, A))
        out = torch.empty(M, device="cuda")
        best = {}
        for mode, configs in CONFIGS.items():
            for block_m, block, warps in configs:
                if time.time() - start > BUDGET_S:
                    break
                fn = lambda: launch(A, packed, x[0], out, mode, block_m, block, warps)  # noqa: E731
                out.fill_(float("nan"))
                fn()
                err = ((out.double() - want).norm() / want.norm()).item()
                if not err < 1e-2:
                    print(M, K, sparsity, mode, block_m, block, warps, "wrong", err)
                    continue
                timed = (bench(fn), block_m, block, warps)
                best[mode] = min(best.get(mode, timed), timed)
        case = f"{M}x{K} {sparsity:.0%}"
        print(case, f"dense {dense:.1f} route {route:.1f}", best, flush=True)
        table.append((case, dense, route, best))
    print(f"\n{'case':<16} {'dense':>6} {'route':>6} " + " ".join(f"{k:>22}" for k in CONFIGS))
    for case, dense, route, best in table:
        cells = [
            f"{b[0]:6.1f} {b[1:]!s:>15}" if b else f"{'-':>22}" for b in map(best.get, CONFIGS)
        ]
        print(f"{case:<16} {dense:6.1f} {route:6.1f} " + " ".join(cells))


if __name__ == "__main__":
    check() if CHECK else sweep()
