"""Does the few-token CSR kernel gain from walking the weight in column chunks, so the slice of
x every program gathers from stays in each SM's L1?

At 8-16 tokens the kernel gathers a row of B (16-32 bytes) per stored entry, ~8 TB/s whatever
K is (csr_few_tokens.txt: 70% on 4096 x 14336 at 16 tokens, 17.6M entries in 70 us), where
L1 could serve ~30 TB/s if what a program reads were resident. This emulates a chunked kernel
with the library's: the weight cut into column slices of KC columns (each its own CSR matrix),
one launch per slice on its slice of x into its own fp32 partial output, in a row, then the
partials summed. If the launches alone beat one launch over the whole weight, a kernel that
walks (row, chunk) ranges in chunk order is worth writing. bf16, magnitude-pruned weights,
B as linear passes it; CUDA-graph medians in us; prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_few_chunks.py
"""

import itertools
import os
import time

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import spmm_csr_few, tuning
from sparsekernels.ops._layout import padded_rows

BUDGET_S = float(os.environ.get("BUDGET_S", 120))
SHAPES = [(4096, 14336), (14336, 4096)]
CHUNKS = [512, 1024, 2048, 4096]


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def slices(w: torch.Tensor, mask: torch.Tensor, width: int) -> list:
    """(CSR matrix of the column slice, its first column) for each slice of `width` columns."""
    return [
        (sk.CSRMatrix.from_dense(w[:, c0 : c0 + width], mask=mask[:, c0 : c0 + width]), c0)
        for c0 in range(0, w.shape[1], width)
    ]


def launcher(parts, B, outs, n):
    config = tuning.spmm_csr_few_config(n)

    def run():
        for (A, c0), out in zip(parts, outs, strict=True):
            spmm_csr_few.spmm_csr_few(
                row_offsets=A.row_offsets, column_indices=A.pattern.column_indices_int16(),
                values=A.values, b=B[c0 : c0 + A.shape[1]], bias=None, row_order=A.row_order,
                out=out, activation="none", rows_per_program=config.rows_per_program,
                block=config.block, num_warps=config.num_warps,
            )  # fmt: skip

    return run


def main():
    started, table = time.time(), []
    for (M, K), sparsity, n in itertools.product(SHAPES, (0.7, 0.9), (8, 16)):
        if time.time() - started > BUDGET_S:
            break
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        mask = sk.prune.magnitude_mask(w.float(), sparsity)
        x = torch.randn(n, K, device="cuda", dtype=torch.bfloat16)
        B = padded_rows(x.t())
        want = (w * mask).double() @ x.t().double()
        dense = bench(lambda: x @ w.t())
        timed = {}
        for width in [K] + [c for c in CHUNKS if c < K]:
            parts = slices(w, mask, width)
            outs = torch.empty(len(parts), M, n, device="cuda", dtype=torch.float32)
            run = launcher(parts, B, outs, n)
            outs.fill_(float("nan"))
            run()
            err = ((outs.sum(0).double() - want).norm() / want.norm()).item()
            if not err < 1e-2:
                print(M, K, sparsity, n, width, "wrong", err)
                continue
            timed[width] = (bench(run), bench(lambda run=run, outs=outs: (run(), outs.sum(0))))
        case = f"{M}x{K} {sparsity:.0%} x{n}"
        print(case, f"dense {dense:.1f}", timed, flush=True)
        table.append((case, dense, timed))
    print(f"\n{'case':<22} {'dense':>6}  width: launches / with the sum")
    for case, dense, timed in table:
        cells = "  ".join(f"{w}: {a:.1f}/{b:.1f}" for w, (a, b) in timed.items())
        print(f"{case:<22} {dense:6.1f}  {cells}")


if __name__ == "__main__":
    main()
