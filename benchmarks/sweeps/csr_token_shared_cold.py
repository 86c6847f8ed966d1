"""The one-token CSR walk with x gathered from shared memory (kernels/spmm_csr_token_shared.py)
against the library's one-token route (the L1-gathering walk or the stream walk, as
tuning picks them) and dense cuBLAS, cold: rotated copies of the weight that together overflow
L2 twice. bf16, magnitude-pruned LLM weights at 70% and 90%, CUDA-graph medians in us a call,
each checked against float64 first (NaN where wrong). Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_token_shared_cold.py
SHAPES=MxK,... and FORMS=RxBxP,... (warps a program, entries a step, programs a
multiprocessor) replace the defaults.
"""

import itertools
import os

import torch
from _csr_cases import csr_case
from csr_token_cold import rotated

from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels import spmm_csr_token, spmm_csr_token_stream, tuning
from sparsekernels.kernels.spmm_csr_token_shared import spmm_csr_token_shared

DEVICE = torch.device("cuda")
SHAPES = [
    tuple(int(v) for v in c.split("x"))
    for c in os.environ.get("SHAPES", "4096x14336,14336x4096,4096x4096,1024x4096").split(",")
]
FORMS = [
    tuple(int(v) for v in c.split("x"))
    for c in os.environ.get(
        "FORMS", "4x256x4,8x256x2,2x512x4,2x512x8,4x512x2,4x512x3,4x512x4,8x512x2"
    ).split(",")
]


def library(c, x, out):
    """The route's one-token choice (ops/spmm.py) on the parts c."""
    rows, nnz = out.shape[0], c[1].numel()
    stream = tuning.spmm_csr_token_stream_rows(rows, nnz)
    common = dict(row_offsets=c[0], column_indices=c[1], values=c[2], x=x, bias=None,
                  row_order=c[3], out=out, activation="none")  # fmt: skip
    if stream is not None:
        spmm_csr_token_stream.spmm_csr_token_stream(
            **common, rows_per_program=stream, block=tuning.CSR_TOKEN_BLOCK
        )
        return
    config = tuning.spmm_csr_token_config(nnz, rows)
    spmm_csr_token.spmm_csr_token(
        **common, rows_per_program=config.rows_per_program, block=config.block,
        num_warps=config.num_warps,
    )  # fmt: skip


def main():
    table = []
    for (M, K), sparsity in itertools.product(SHAPES, (0.7, 0.9)):
        case = csr_case(M, K, sparsity)
        w, A, cols, x, want = (case[k] for k in ("w", "A", "cols", "x", "want"))
        out = torch.empty(M, device="cuda", dtype=torch.bfloat16)
        weight_bytes = A.values.nbytes + cols.nbytes + A.row_offsets.nbytes
        count = max(2, copies_for(weight_bytes, DEVICE))
        parts = (A.row_offsets, cols, A.values, A.row_order)
        copies = [tuple(t.clone() for t in parts) for _ in range(count)]
        dense_copies = [w.clone() for _ in range(max(2, copies_for(w.nbytes, DEVICE)))]
        timed = {"dense": rotated(lambda d: d @ x, dense_copies)}
        runs = {"library": lambda c: library(c, x, out)}
        for rows, block, per_sm in FORMS:
            runs[f"s{rows}x{block}x{per_sm}"] = lambda c, r=rows, b=block, p=per_sm: (
                spmm_csr_token_shared(
                    row_offsets=c[0], column_indices=c[1], values=c[2], x=x, bias=None,
                    row_order=c[3], out=out, activation="none", rows=r, block=b,
                    programs_per_sm=p,
                )
            )  # fmt: skip
        for label, run in runs.items():
            out.fill_(float("nan"))
            try:
                run(copies[0])
                err = ((out.double() - want).norm() / want.norm()).item()
                timed[label] = rotated(run, copies) if err < 1e-2 else float("nan")
            except Exception as error:  # noqa: BLE001 - a form that fails is reported, not fatal
                print(f"{M}x{K} {sparsity:.0%} {label}: {type(error).__name__}: {error}"[:300])
                timed[label] = float("nan")
        name = f"{M}x{K} {sparsity:.0%}"
        print(name, f"copies {count}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((name, timed))
    names = list(table[0][1])
    print(f"\n{'case':<16} " + " ".join(f"{n:>10}" for n in names))
    for name, timed in table:
        print(f"{name:<16} " + " ".join(f"{timed.get(n, float('nan')):10.1f}" for n in names))


if __name__ == "__main__":
    main()
