"""The CSR one-token kernel on byte columns (spmm_csr_token_bytes.py) against the int16 one,
timed cold: rotated copies of the weight that together overflow L2 twice, as csr_token_cold.py.

Byte columns (Pattern.column_bytes) store an entry in 3 bytes (bf16 value, 1-byte column) plus
a 4-byte word a 16-entry group: about 0.975 B a dense weight at 70% sparsity against 1.2 for
int16 columns. The int16 kernel at the library's configuration (tuning.spmm_csr_token_config)
against the byte kernel at a small grid, dense cuBLAS cold beside them. bf16, magnitude-pruned
LLM weights at 70% and 90% (at 90% a group's part may span over 255 columns: the pattern is then
ineligible, reported and skipped), CUDA-graph medians in us a call, each checked against float64
first (NaN if wrong). Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_token_bytes_cold.py
"""

import itertools

import torch
from _csr_cases import csr_case
from triton.testing import do_bench_cudagraph

from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels import spmm_csr_token, spmm_csr_token_bytes, tuning

DEVICE = torch.device("cuda")
SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096)]
# the byte kernel's (rows a program, entries a step, warps)
CONFIGS = list(itertools.product((1, 2), (256, 512), (1, 2)))


def rotated(fn, copies: list) -> float:
    """us a call of fn over each copy in turn, as one CUDA graph."""
    return do_bench_cudagraph(lambda: [fn(c) for c in copies], rep=30) * 1e3 / len(copies)


def timed_if_right(run, copies, out, want) -> float:
    """us a call of run over the copies, NaN unless its first result matches float64."""
    out.fill_(float("nan"))
    run(copies[0])
    err = ((out.double() - want).norm() / want.norm()).item()
    return rotated(run, copies) if err < 1e-2 else float("nan")


def main():
    table = []
    for (M, K), sparsity in itertools.product(SHAPES, (0.7, 0.9)):
        case = csr_case(M, K, sparsity)
        w, A, cols, x, want = (case[k] for k in ("w", "A", "cols", "x", "want"))
        out = torch.empty(M, device="cuda", dtype=torch.bfloat16)
        dense_copies = [w.clone() for _ in range(max(2, copies_for(w.nbytes, DEVICE)))]
        timed = {"dense": rotated(lambda d: d @ x, dense_copies)}

        parts = (A.row_offsets, cols, A.values, A.row_order)
        int16_bytes = sum(t.nbytes for t in parts[:3])
        count = max(2, copies_for(int16_bytes, DEVICE))
        copies = [tuple(t.clone() for t in parts) for _ in range(count)]
        lib = tuning.spmm_csr_token_config(A.nnz)

        def run_int16(c, lib=lib):
            spmm_csr_token.spmm_csr_token(
                row_offsets=c[0], column_indices=c[1], values=c[2], x=x, bias=None,
                row_order=c[3], out=out, activation="none", rows_per_program=lib.rows_per_program,
                block=lib.block, num_warps=lib.num_warps,
            )  # fmt: skip

        timed["int16 library"] = timed_if_right(run_int16, copies, out, want)
        per_weight = {"int16": int16_bytes / (M * K)}
        del copies

        column_bytes = A.pattern.column_bytes()
        if column_bytes is None:
            print(f"{M}x{K} {sparsity:.0%}: byte columns ineligible (a group's part spans "
                  "over 255 columns or a group touches 3 rows), skipped", flush=True)  # fmt: skip
        else:
            lo, bases = column_bytes
            parts = (A.row_offsets, lo, bases, A.values, A.row_order)
            byte_bytes = sum(t.nbytes for t in parts[:4])
            per_weight["bytes"] = byte_bytes / (M * K)
            count = max(2, copies_for(byte_bytes, DEVICE))
            copies = [tuple(t.clone() for t in parts) for _ in range(count)]
            for rows, block, warps in CONFIGS:

                def run(c, rows=rows, block=block, warps=warps):
                    spmm_csr_token_bytes.spmm_csr_token_bytes(
                        row_offsets=c[0], column_bytes=c[1], column_bases=c[2], values=c[3],
                        x=x, bias=None, row_order=c[4], out=out, activation="none",
                        rows_per_program=rows, block=block, num_warps=warps,
                    )  # fmt: skip

                timed[f"b {rows}x{block}/{warps}w"] = timed_if_right(run, copies, out, want)
            del copies
        name = f"{M}x{K} {sparsity:.0%}"
        print(name, f"library {lib}", "B a weight", {k: round(v, 3) for k, v in per_weight.items()},
              {k: round(v, 1) for k, v in timed.items()}, flush=True)  # fmt: skip
        table.append((name, timed))
    names = list(dict.fromkeys(n for _, timed in table for n in timed))
    print(f"\n{'case':<16} " + " ".join(f"{n:>13}" for n in names))
    for name, timed in table:
        print(f"{name:<16} " + " ".join(f"{timed.get(n, float('nan')):13.1f}" for n in names))


if __name__ == "__main__":
    main()
