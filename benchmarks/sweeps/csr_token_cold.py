"""The CSR one-token kernel's configurations (tuning.spmm_csr_token_config) timed cold: rotated
copies of the weight that together overflow L2 twice, as the harness does.

csr_token_configs.py chose them warm: at 90% a 4096 x 14336 weight is 23 MB (values and int16
columns) and sat in the H200's 50 MB L2, where latency and the config's best differ from a
weight read from HBM. The library's choice by nnz (`library`) against the same grid, dense
cuBLAS cold beside them. bf16, magnitude-pruned LLM weights at 70% and 90%, CUDA-graph medians
in us a call, each checked against float64 first. Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_token_cold.py
CONFIGS and SHAPES (environment) replace the grid and the shapes.
"""

import itertools
import os

import torch
from _csr_cases import csr_case
from triton.testing import do_bench_cudagraph

from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels import spmm_csr_token, tuning

DEVICE = torch.device("cuda")
SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096)]
# (rows a program, entries a step, warps[, registers a thread]); CONFIGS=2x512x1,2x256x2x40,...
CONFIGS = [(1, 256, 1), (2, 256, 1), (2, 256, 2), (1, 512, 2), (4, 128, 4), (2, 128, 2),
           (4, 256, 4), (8, 128, 8)]  # fmt: skip
if os.environ.get("CONFIGS"):
    CONFIGS = [tuple(int(v) for v in c.split("x")) for c in os.environ["CONFIGS"].split(",")]
if os.environ.get("SHAPES"):  # SHAPES=14336x4096,...
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ["SHAPES"].split(",")]


def rotated(fn, copies: list) -> float:
    """us a call of fn over each copy in turn, as one CUDA graph."""
    return do_bench_cudagraph(lambda: [fn(c) for c in copies], rep=30) * 1e3 / len(copies)


def main():
    table = []
    for (M, K), sparsity in itertools.product(SHAPES, (0.9, 0.7)):
        case = csr_case(M, K, sparsity)
        w, A, cols, x, want = (case[k] for k in ("w", "A", "cols", "x", "want"))
        out = torch.empty(M, device="cuda", dtype=torch.bfloat16)
        weight_bytes = A.values.nbytes + cols.nbytes + A.row_offsets.nbytes
        count = max(2, copies_for(weight_bytes, DEVICE))
        parts = (A.row_offsets, cols, A.values, A.row_order)
        copies = [tuple(t.clone() for t in parts) for _ in range(count)]
        dense_copies = [w.clone() for _ in range(max(2, copies_for(w.nbytes, DEVICE)))]
        timed = {"dense": rotated(lambda d: d @ x, dense_copies)}
        lib = tuning.spmm_csr_token_config(A.nnz, M)
        configs = [("library", (lib.rows_per_program, lib.block, lib.num_warps, 0))]
        configs += [
            (f"{c[0]}x{c[1]}/{c[2]}w" + (f"/r{c[3]}" if len(c) > 3 else ""), (*c, 0)[:4])
            for c in CONFIGS
        ]
        for label, (rows, block, warps, maxnreg) in configs:

            def run(c, rows=rows, block=block, warps=warps, maxnreg=maxnreg):
                spmm_csr_token.spmm_csr_token(
                    row_offsets=c[0], column_indices=c[1], values=c[2], x=x, bias=None,
                    row_order=c[3], out=out, activation="none", rows_per_program=rows,
                    block=block, num_warps=warps, maxnreg=maxnreg or None,
                )  # fmt: skip

            out.fill_(float("nan"))
            run(copies[0])
            err = ((out.double() - want).norm() / want.norm()).item()
            timed[label] = rotated(run, copies) if err < 1e-2 else float("nan")
        case = f"{M}x{K} {sparsity:.0%}"
        print(case, f"copies {count} library {lib}", {k: round(v, 1) for k, v in timed.items()},
              flush=True)  # fmt: skip
        table.append((case, timed))
    names = list(table[0][1])
    print(f"\n{'case':<16} " + " ".join(f"{n:>10}" for n in names))
    for case, timed in table:
        print(f"{case:<16} " + " ".join(f"{timed.get(n, float('nan')):10.1f}" for n in names))


if __name__ == "__main__":
    main()
