"""CSR decode at one token with 3 bytes a stored entry and aligned vector loads: a prototype to
measure before it becomes the CSR weight's one-token kernel (issue 3: 1.5x dense at 70%).

The hand-pipelined CSR walk (csr_decode_chunks.py, at-3850154) reads a bf16 value and an int16
column per entry at ~2.8 TB/s: 4 bytes an entry cap 70% at 1.67x dense. The per-chunk form with
uint8 columns lost (5-20x slower: a serial step per 256-column chunk). Here the column is coded
as its gap from the previous entry of the row, one byte (col - previous col - 1, the first
entry's previous being -1), and a step recovers its columns by a prefix sum: 3 bytes an entry,
no serial step per chunk. A weight with a gap past 255 keeps the int16 form (never, in
practice, below 99% sparsity).

A row's entries start anywhere, so the loads of values and columns cannot be vector loads. The
"aligned" forms start each row's walk at the 16-entry boundary below it and mask whole
16-entry groups (a mask constant across a vector, so the compiler may use 16-byte loads); the
previous row's entries in the first group are zeroed after the load. The arrays here carry 16
entries of padding past the end, which the last group may read.

Forms ("route" is sk.linear on the CSRMatrix, the library's decode kernel):
- "pipelined": int16 columns, the walk of csr_decode_chunks.py;
- "aligned": int16 columns, aligned groups;
- "delta": one-byte gaps, a prefix sum a step;
- "delta_aligned": one-byte gaps, aligned groups.
bf16, CUDA-graph medians in us against dense and the route, magnitude-pruned LLM weights.
Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_decode_delta.py
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/sweeps/csr_decode_delta.py --check
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
GROUP = 16  # entries an aligned group: 16 bytes of uint8 gaps, two 16-byte loads of bf16
FORMS = {"pipelined": (1, 0), "aligned": (GROUP, 0), "delta": (1, 1), "delta_aligned": (GROUP, 1)}


@triton.jit
def _walk_kernel(
    row_offsets,  # (M + 1,) int32
    columns,  # (nnz + GROUP,) int16 columns, or uint8 gaps when DELTA
    values,  # (nnz + GROUP,) bf16
    x,  # (K,)
    out,  # (M,) float32
    BLOCK: tl.constexpr,
    ALIGN: tl.constexpr,  # 1: loads masked per entry; GROUP: per aligned group
    DELTA: tl.constexpr,
):
    row = tl.program_id(0)
    start = tl.load(row_offsets + row)
    end = tl.load(row_offsets + row + 1)
    k = tl.arange(0, BLOCK)
    first = tl.multiple_of(start // ALIGN * ALIGN, ALIGN)
    offs = first + k
    groups = first + k // ALIGN * ALIGN  # each entry's group start: constant across a vector
    load_mask = groups < end if ALIGN > 1 else offs < end
    cols = tl.load(columns + offs, mask=load_mask, other=0)
    vals = tl.load(values + offs, mask=load_mask, other=0.0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    base = start * 0 - 1  # the column before the row's first: -1
    for _ in range(first, end, BLOCK):
        next_offs = offs + BLOCK
        groups += BLOCK
        next_mask = groups < end if ALIGN > 1 else next_offs < end
        next_cols = tl.load(columns + next_offs, mask=next_mask, other=0)
        next_vals = tl.load(values + next_offs, mask=next_mask, other=0.0)
        live = (offs >= start) & (offs < end)
        if DELTA:
            steps = tl.where(live, cols.to(tl.int32) + 1, 0)
            col = base + tl.cumsum(steps, 0)
            base += tl.sum(steps, 0)
        else:
            col = cols.to(tl.int32)
        picked = tl.load(x + col, mask=live, other=0.0)
        acc += tl.where(live, vals.to(tl.float32), 0.0) * picked.to(tl.float32)
        offs, load_mask, cols, vals = next_offs, next_mask, next_cols, next_vals
    tl.store(out + row, tl.sum(acc, axis=0))


def gaps(A: sk.CSRMatrix) -> torch.Tensor | None:
    """One byte an entry: its column minus the previous entry's in the row, minus one (the
    first entry's previous is -1); None when a gap does not fit in a byte."""
    cols = A.column_indices.long()
    previous = torch.cat([cols.new_full((1,), -1), cols[:-1]])
    starts = A.row_offsets[:-1].long()
    starts = starts[A.row_offsets.diff() > 0]
    previous[starts] = -1
    coded = cols - previous - 1
    if coded.numel() and coded.max().item() > 255:
        return None
    return coded.to(torch.uint8)


def padded(t: torch.Tensor) -> torch.Tensor:
    """t with GROUP zeros after it: what the last aligned group may read."""
    return torch.cat([t, t.new_zeros(GROUP)])


def operands(A: sk.CSRMatrix):
    cols16 = A.pattern.column_indices_int16()
    cols16 = A.column_indices if cols16 is None else cols16
    return {
        "int16": padded(cols16),
        "gaps": padded(gaps(A)),
        "values": padded(A.values),
    }


def launch(A, ops, x, out, form, block, warps):
    align, delta = FORMS[form]
    _walk_kernel[(A.shape[0],)](
        A.row_offsets, ops["gaps" if delta else "int16"], ops["values"], x, out,
        BLOCK=block, ALIGN=align, DELTA=delta, num_warps=warps, num_stages=1,
    )  # fmt: skip
    return out


def check():
    """Every form against float64: rows across steps, empty rows, a row of one entry, a gap of
    255, rows that start inside a group (interpreter)."""
    torch.manual_seed(0)
    for density, cols in ((0.3, 700), (0.05, 1200)):
        dense = torch.randn(9, cols, dtype=torch.bfloat16)
        mask = torch.rand(9, cols) < density
        mask[3] = False  # an empty row
        mask[4] = False
        mask[4, 17] = True  # one entry
        mask[5, 1:300] = False
        mask[5, 300] = True
        mask[5, 0] = True  # a gap of 299: not codable, so this matrix keeps int16 ...
        A = sk.CSRMatrix.from_dense(dense * mask)
        assert gaps(A) is None
        mask[5, 44] = True  # ... and with a gap of exactly 255 it is
        A = sk.CSRMatrix.from_dense(dense * mask)
        assert gaps(A) is not None
        ops = operands(A)
        x = torch.randn(cols, dtype=torch.bfloat16)
        want = A.to_dense().double() @ x.double()
        for form, block in itertools.product(FORMS, (32, 64)):
            out = torch.full((9,), float("nan"))
            launch(A, ops, x, out, form, block, 1)
            err = (out.double() - want).abs().max().item()
            assert err < 1e-3 * max(1.0, want.abs().max().item()), (form, block, err)
            print(f"{density:.0%} {form} block {block}: max error {err:.1e}")


def bench(fn) -> float:
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


CONFIGS = [(256, 1), (512, 2), (128, 1), (512, 4)]


def sweep():
    start = time.time()
    table = []
    shapes = [(4096, 14336), (14336, 4096), (4096, 4096)]
    for (M, K), sparsity in itertools.product(shapes, (0.7, 0.9)):
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        ops = operands(A)
        x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
        want = (A.to_dense().float() @ x[0].float()).double()
        dense = bench(lambda: x @ w.t())
        route = bench(lambda: sk.linear(x, A))
        out = torch.empty(M, device="cuda")
        best = {}
        for form, (block, warps) in itertools.product(FORMS, CONFIGS):
            if time.time() - start > BUDGET_S:
                break
            fn = lambda: launch(A, ops, x[0], out, form, block, warps)  # noqa: E731
            out.fill_(float("nan"))
            fn()
            err = ((out.double() - want).norm() / want.norm()).item()
            if not err < 1e-2:
                print(M, K, sparsity, form, block, warps, "wrong", err)
                continue
            timed = (bench(fn), block, warps)
            best[form] = min(best.get(form, timed), timed)
        case = f"{M}x{K} {sparsity:.0%}"
        print(case, f"dense {dense:.1f} route {route:.1f}", best, flush=True)
        table.append((case, dense, route, best))
    print(f"\n{'case':<16} {'dense':>6} {'route':>6} " + " ".join(f"{k:>18}" for k in FORMS))
    for case, dense, route, best in table:
        cells = [f"{b[0]:6.1f} {b[1:]!s:>11}" if b else f"{'-':>18}" for b in map(best.get, FORMS)]
        print(f"{case:<16} {dense:6.1f} {route:6.1f} " + " ".join(cells))


if __name__ == "__main__":
    check() if CHECK else sweep()
