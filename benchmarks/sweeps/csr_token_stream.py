"""A CSR one-token walk that streams a program's rows one after another (a prototype).

The library's one-token kernel (kernels/spmm_csr_token.py) gives each program its rows at once:
it loads the rows' place in row order, then their offsets, then the first step's entries, then x
at their columns, a chain of dependent loads that every program pays before it streams. At 90%
on 14336 x 4096 a row is ~410 entries (two 256-entry steps), so the chain is most of a program,
and the weight (23.5 MB, 5.5 us at the copy's 4.24 TB/s) takes 14.2 us cold (at-92edd26/
csr_token_cold.txt) where the same bytes in 4096 longer rows take 10.1.

Here a program (one warp) walks ROWS rows in row order as one stream of steps: each step's
loads are issued before the step before it gathers x, across row ends too, so the next row's
first step is in flight while this row finishes. The rows' (row, start, end) come from one
int32 table built once per weight (`walk_table`), read a row ahead, so a row costs no chain.
Against the library's choice and its configurations, cold (rotated copies that overflow L2
twice), bf16, magnitude-pruned LLM weights at 70% and 90%; CUDA-graph medians in us a call,
each checked against float64 first (NaN where wrong). Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_token_stream.py
"""

import itertools
import os

import torch
import triton
import triton.language as tl
from _csr_cases import csr_case
from csr_token_cold import rotated

from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels import spmm_csr_token, tuning

DEVICE = torch.device("cuda")
GROUP = spmm_csr_token.GROUP
SHAPES = [
    tuple(int(v) for v in c.split("x"))
    for c in os.environ.get("SHAPES", "4096x14336,14336x4096,4096x4096").split(",")
]
# "RxB": one stream of R rows, B entries a step; "SxRxB": S streams of R rows a warp
STREAMS = [
    tuple(int(v) for v in c.split("x"))
    for c in os.environ.get(
        "STREAMS", "2x256,4x256,2x1x256,2x2x256,2x4x256,4x1x256,4x2x256,2x2x128,4x2x128"
    ).split(",")
]


def walk_table(row_offsets: torch.Tensor, row_order: torch.Tensor) -> torch.Tensor:
    """(M, 4) int32: each row in row order as (row, first entry, end, 0)."""
    order = row_order.long()
    offsets = row_offsets.long()
    table = torch.stack([order, offsets[order], offsets[order + 1], torch.zeros_like(order)], 1)
    return table.to(torch.int32).contiguous()


@triton.jit
def _stream_kernel(table, column_indices, values, x, out, M, full, stride_x, stride_o,
                   ROWS: tl.constexpr, BLOCK: tl.constexpr, GROUP: tl.constexpr):  # fmt: skip
    i = tl.program_id(0) * ROWS  # the row-order place of the row being walked
    last = tl.minimum(i + ROWS, M)
    k = tl.arange(0, BLOCK)
    in_group = k // GROUP * GROUP
    row = tl.load(table + 4 * i)
    start = tl.load(table + 4 * i + 1)
    end = tl.load(table + 4 * i + 2)
    has_next = i + 1 < last
    next_row = tl.load(table + 4 * i + 4, mask=has_next, other=0)
    next_start = tl.load(table + 4 * i + 5, mask=has_next, other=0)
    next_end = tl.load(table + 4 * i + 6, mask=has_next, other=0)
    walk_end = tl.minimum(end, full)
    pos = tl.multiple_of(start // GROUP * GROUP, GROUP)
    mask = pos + in_group < walk_end
    cols = tl.load(column_indices + pos + k, mask=mask, other=0)
    vals = tl.load(values + pos + k, mask=mask, other=0.0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    while i < last:
        same_row = pos + BLOCK < walk_end
        next_pos = tl.where(same_row, pos + BLOCK, next_start // GROUP * GROUP)
        next_pos = tl.multiple_of(next_pos, GROUP)
        next_walk_end = tl.where(same_row, walk_end, tl.minimum(next_end, full))
        next_mask = next_pos + in_group < next_walk_end
        next_cols = tl.load(column_indices + next_pos + k, mask=next_mask, other=0)
        next_vals = tl.load(values + next_pos + k, mask=next_mask, other=0.0)
        live = (pos + k >= start) & (pos + k < walk_end)
        picked = tl.load(x + cols.to(tl.int32) * stride_x, mask=live, other=0.0)
        acc += tl.where(live, vals.to(tl.float32), 0.0) * picked.to(tl.float32)
        if not same_row:  # the row's last step: its sum, then the next row
            total = tl.sum(acc)
            if end > full:  # entries of the arrays' last partial group, one by one
                tail = full + tl.arange(0, GROUP)
                owned = (tail >= start) & (tail < end)
                tail_cols = tl.load(column_indices + tail, mask=owned, other=0).to(tl.int32)
                tail_vals = tl.load(values + tail, mask=owned, other=0.0).to(tl.float32)
                got = tl.load(x + tail_cols * stride_x, mask=owned, other=0.0).to(tl.float32)
                total += tl.sum(tail_vals * got)
            tl.store(out + row * stride_o, total.to(out.dtype.element_ty))
            acc = tl.zeros((BLOCK,), dtype=tl.float32)
            i += 1
            row, start, end, walk_end = next_row, next_start, next_end, next_walk_end
            has_next = i + 1 < last
            next_row = tl.load(table + 4 * i + 4, mask=has_next, other=0)
            next_start = tl.load(table + 4 * i + 5, mask=has_next, other=0)
            next_end = tl.load(table + 4 * i + 6, mask=has_next, other=0)
        pos, cols, vals = next_pos, next_cols, next_vals


@triton.jit
def _streams_kernel(table, column_indices, values, x, out, M, full, stride_x, stride_o,
                    STREAMS: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr,
                    GROUP: tl.constexpr):  # fmt: skip
    """STREAMS walks side by side in one warp, each through its own ROWS rows as above: STREAMS
    steps in flight, none waiting on a row's start."""
    s = tl.arange(0, STREAMS)
    i = tl.program_id(0) * (STREAMS * ROWS) + s * ROWS  # (S,) each stream's row-order place
    last = tl.minimum(i + ROWS, M)
    k = tl.arange(0, BLOCK)[None, :]
    in_group = k // GROUP * GROUP
    active = i < last
    row = tl.load(table + 4 * i, mask=active, other=0)
    start = tl.load(table + 4 * i + 1, mask=active, other=0)
    end = tl.load(table + 4 * i + 2, mask=active, other=0)
    has_next = i + 1 < last
    next_row = tl.load(table + 4 * i + 4, mask=has_next, other=0)
    next_start = tl.load(table + 4 * i + 5, mask=has_next, other=0)
    next_end = tl.load(table + 4 * i + 6, mask=has_next, other=0)
    walk_end = tl.minimum(end, full)
    pos = start // GROUP * GROUP
    mask = pos[:, None] + in_group < walk_end[:, None]
    cols = tl.load(column_indices + pos[:, None] + k, mask=mask, other=0)
    vals = tl.load(values + pos[:, None] + k, mask=mask, other=0.0)
    acc = tl.zeros((STREAMS, BLOCK), dtype=tl.float32)
    while tl.max(active.to(tl.int32)) > 0:
        same_row = pos + BLOCK < walk_end
        next_pos = tl.where(same_row, pos + BLOCK, next_start // GROUP * GROUP)
        next_walk_end = tl.where(same_row, walk_end, tl.minimum(next_end, full))
        next_mask = next_pos[:, None] + in_group < next_walk_end[:, None]
        next_cols = tl.load(column_indices + next_pos[:, None] + k, mask=next_mask, other=0)
        next_vals = tl.load(values + next_pos[:, None] + k, mask=next_mask, other=0.0)
        offs = pos[:, None] + k
        live = (offs >= start[:, None]) & (offs < walk_end[:, None])
        picked = tl.load(x + cols.to(tl.int32) * stride_x, mask=live, other=0.0)
        acc += tl.where(live, vals.to(tl.float32), 0.0) * picked.to(tl.float32)
        done = active & (pos + BLOCK >= walk_end)
        if tl.max(done.to(tl.int32)) > 0:  # some stream's row ends: its sum, then its next row
            total = tl.sum(acc, axis=1)
            if tl.max(tl.where(done, end, 0)) > full:  # the arrays' last partial group
                tail = full + tl.arange(0, GROUP)[None, :]
                owned = (tail >= start[:, None]) & (tail < end[:, None]) & done[:, None]
                tail_cols = tl.load(column_indices + tail, mask=owned, other=0).to(tl.int32)
                tail_vals = tl.load(values + tail, mask=owned, other=0.0).to(tl.float32)
                got = tl.load(x + tail_cols * stride_x, mask=owned, other=0.0).to(tl.float32)
                total += tl.sum(tail_vals * got, axis=1)
            tl.store(out + row * stride_o, total.to(out.dtype.element_ty), mask=done)
            acc = tl.where(done[:, None], 0.0, acc)
            i = tl.where(done, i + 1, i)
            active = i < last
            row = tl.where(done, next_row, row)
            start = tl.where(done, next_start, start)
            end = tl.where(done, next_end, end)
            walk_end = tl.where(done, next_walk_end, walk_end)
            has_next = done & (i + 1 < last)
            next_row = tl.where(done, tl.load(table + 4 * i + 4, mask=has_next, other=0), next_row)
            next_start = tl.where(
                done, tl.load(table + 4 * i + 5, mask=has_next, other=0), next_start
            )  # fmt: skip
            next_end = tl.where(done, tl.load(table + 4 * i + 6, mask=has_next, other=0), next_end)
        pos, cols, vals = next_pos, next_cols, next_vals


def streams(table, cols, values, x, out, streams_per_warp, rows_per_stream, block):
    M, nnz = out.shape[0], values.numel()
    grid = (triton.cdiv(M, streams_per_warp * rows_per_stream),)
    _streams_kernel[grid](
        table, cols, values, x, out, M, nnz // GROUP * GROUP, x.stride(0), out.stride(0),
        STREAMS=streams_per_warp, ROWS=rows_per_stream, BLOCK=block, GROUP=GROUP, num_warps=1,
        num_stages=1,
    )  # fmt: skip


def stream(table, cols, values, x, out, rows_per_program, block):
    M, nnz = out.shape[0], values.numel()
    _stream_kernel[(triton.cdiv(M, rows_per_program),)](
        table, cols, values, x, out, M, nnz // GROUP * GROUP, x.stride(0), out.stride(0),
        ROWS=rows_per_program, BLOCK=block, GROUP=GROUP, num_warps=1, num_stages=1,
    )  # fmt: skip


def main():
    table_rows = []
    for (M, K), sparsity in itertools.product(SHAPES, (0.9, 0.7)):
        case = csr_case(M, K, sparsity)
        w, A, cols, x, want = (case[k] for k in ("w", "A", "cols", "x", "want"))
        out = torch.empty(M, device="cuda", dtype=torch.bfloat16)
        weight_bytes = A.values.nbytes + cols.nbytes + A.row_offsets.nbytes
        count = max(2, copies_for(weight_bytes, DEVICE))
        parts = (A.row_offsets, cols, A.values, A.row_order)
        copies = [tuple(t.clone() for t in parts) for _ in range(count)]
        tables = [walk_table(c[0], c[3]) for c in copies]
        dense_copies = [w.clone() for _ in range(max(2, copies_for(w.nbytes, DEVICE)))]
        timed = {"dense": rotated(lambda d: d @ x, dense_copies)}
        lib = tuning.spmm_csr_token_config(A.nnz, M)

        def library(c, lib=lib):
            spmm_csr_token.spmm_csr_token(
                row_offsets=c[0], column_indices=c[1], values=c[2], x=x, bias=None,
                row_order=c[3], out=out, activation="none", rows_per_program=lib.rows_per_program,
                block=lib.block, num_warps=lib.num_warps,
            )  # fmt: skip

        runs = [("library", library, copies)]
        for config in STREAMS:

            def run(c, config=config):
                if len(config) == 2:
                    stream(c[4], c[1], c[2], x, out, *config)
                else:
                    streams(c[4], c[1], c[2], x, out, *config)

            label = "s" + "x".join(map(str, config))
            runs.append((label, run, [c + (t,) for c, t in zip(copies, tables, strict=True)]))
        for label, fn, args in runs:
            out.fill_(float("nan"))
            fn(args[0])
            err = ((out.double() - want).norm() / want.norm()).item()
            timed[label] = rotated(fn, args) if err < 1e-2 else float("nan")
        name = f"{M}x{K} {sparsity:.0%}"
        print(name, f"copies {count} library {lib}", {k: round(v, 1) for k, v in timed.items()},
              flush=True)  # fmt: skip
        table_rows.append((name, timed))
    names = list(table_rows[0][1])
    print(f"\n{'case':<16} " + " ".join(f"{n:>10}" for n in names))
    for name, timed in table_rows:
        print(f"{name:<16} " + " ".join(f"{timed.get(n, float('nan')):10.1f}" for n in names))


if __name__ == "__main__":
    main()
