"""The CSR one-token walk with lanes on consecutive entries: a prototype against
kernels/spmm_csr_token.py, to measure before it changes the library.

The library kernel loads 16-byte vectors, so lane i holds entries 8i..8i+7 of a 256-entry
step, and each gather of x (one element a lane) reaches 32 entries 8 apart: at 70% on
14336 columns those span ~850 columns, ~32 distinct 32-byte sectors of x a gather. Both
one-token walks run at ~6.4 entries a clock per multiprocessor whatever their bytes
(nm_decode_tall.py says why that points at the gather). Here the entry offsets are multiplied
by a runtime stride of 1 that Triton may not specialize, so it cannot prove them contiguous
and lays a step out lane-major: lane i holds entries i, i + 32, ... Loads of values and
columns stay coalesced (64 bytes a warp instruction, scalar a lane) and a gather's 32 lanes
read 32 consecutive entries: ~110 columns, ~7 sectors. Same row order, rows a program and
hand-pipelined walk as the library. bf16 magnitude-pruned LLM weights at 70% and 90%,
CUDA-graph medians in us, each output checked against float64 first. Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_token_lanes.py
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/sweeps/csr_token_lanes.py --check
"""

import itertools
import sys

import torch
import triton
import triton.language as tl

import sparsekernels as sk
from sparsekernels.kernels import spmm_csr_token, tuning

CHECK = "--check" in sys.argv
SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096)]
CONFIGS = [(1, 256, 1), (2, 256, 1), (2, 256, 2), (1, 512, 1), (4, 128, 2), (2, 512, 2)]


@triton.jit(do_not_specialize=["lane_stride"])
def _token_lanes_kernel(
    row_offsets,  # (M + 1,) int32
    column_indices,  # (nnz,) int16/int32
    values,  # (nnz,)
    x,  # (K,) contiguous
    row_order,  # (M,) int32, longest rows first
    out,  # (M,) contiguous
    M,
    lane_stride,  # 1, hidden from the compiler: no vectors, lanes on consecutive entries
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    order = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    mask_r = order < M
    row = tl.load(row_order + order, mask=mask_r, other=0)
    start = tl.load(row_offsets + row, mask=mask_r, other=0)[:, None]
    end = tl.load(row_offsets + row + 1, mask=mask_r, other=0)[:, None]
    offs = start + (tl.arange(0, BLOCK) * lane_stride)[None, :]
    mask = offs < end
    cols = tl.load(column_indices + offs, mask=mask, other=0)
    vals = tl.load(values + offs, mask=mask, other=0.0)
    acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    for _ in range(0, tl.max(end - start), BLOCK):
        next_offs = offs + BLOCK
        next_mask = next_offs < end
        next_cols = tl.load(column_indices + next_offs, mask=next_mask, other=0)
        next_vals = tl.load(values + next_offs, mask=next_mask, other=0.0)
        picked = tl.load(x + cols.to(tl.int32), mask=mask, other=0.0)
        acc += vals.to(tl.float32) * picked.to(tl.float32)
        offs, mask, cols, vals = next_offs, next_mask, next_cols, next_vals
    tl.store(out + row, tl.sum(acc, axis=1).to(out.dtype.element_ty), mask=mask_r)


def launch_lanes(A, cols, x, out, rows_per_program, block, warps):
    rows = A.shape[0]
    _token_lanes_kernel[(triton.cdiv(rows, rows_per_program),)](
        A.row_offsets, cols, A.values, x, A.row_order, out, rows, 1,
        ROWS=rows_per_program, BLOCK=block, num_warps=warps,
    )  # fmt: skip


def check():
    """Against float64: rows longer than a step, empty rows, a single row (interpreter)."""
    g = torch.Generator().manual_seed(0)
    for M, K, density in ((37, 300, 0.4), (1, 50, 0.5), (20, 40, 0.05)):
        dense = torch.randn(M, K, generator=g)
        mask = torch.rand(M, K, generator=g) < density
        mask[M // 2] = False  # an empty row
        A = sk.CSRMatrix.from_dense(dense, mask=mask)
        x = torch.randn(K, generator=g)
        want = (dense * mask).double() @ x.double()
        for rows, block in ((1, 32), (2, 64), (4, 16)):
            out = torch.full((M,), float("nan"))
            launch_lanes(A, A.pattern.column_indices_int16(), x, out, rows, block, 1)
            err = (out.double() - want).abs().max().item()
            assert err < 1e-4, (M, K, rows, block, err)
            print(f"{M}x{K} rows {rows} block {block}: max error {err:.1e}")


def bench(fn) -> float:
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def sweep():
    table = []
    for (M, K), sparsity in itertools.product(SHAPES, (0.7, 0.9)):
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        x = torch.randn(K, device="cuda", dtype=torch.bfloat16)
        want = A.to_dense().double() @ x.double()
        cols = A.pattern.column_indices_int16()
        out = torch.empty(M, device="cuda", dtype=torch.bfloat16)
        config = tuning.spmm_csr_token_config(A.nnz)
        timed = {"dense": bench(lambda w=w, x=x: w @ x)}
        forms = {
            "library": lambda: spmm_csr_token.spmm_csr_token(
                row_offsets=A.row_offsets, column_indices=cols, values=A.values, x=x,
                bias=None, row_order=A.row_order, out=out, activation="none",
                rows_per_program=config.rows_per_program, block=config.block,
                num_warps=config.num_warps),
        }  # fmt: skip
        for rows, block, warps in CONFIGS:
            forms[f"{rows}x{block}/{warps}w"] = lambda r=rows, b=block, nw=warps: launch_lanes(
                A, cols, x, out, r, b, nw
            )
        for name, form in forms.items():
            out.fill_(float("nan"))
            form()
            err = ((out.double() - want).norm() / want.norm()).item()
            timed[name] = bench(form) if err < 1e-2 else float("nan")
        case = f"{M}x{K} {sparsity:.0%}"
        print(case, {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((case, timed))
    names = list(table[0][1]) if table else []
    print(f"\n{'case':<18} " + " ".join(f"{n:>10}" for n in names))
    for case, timed in table:
        print(f"{case:<18} " + " ".join(f"{timed[n]:10.1f}" for n in names))


if __name__ == "__main__":
    check() if CHECK else sweep()
