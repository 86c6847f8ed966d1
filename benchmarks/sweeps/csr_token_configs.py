"""The CSR one-token kernel (kernels/spmm_csr_token.py) over its configurations: rows a program,
entries of a row a step, warps. Sets tuning.spmm_csr_token_config.

One-warp programs of one row fill at most half an SM's warp slots (32 resident blocks), which
may leave short rows latency-bound (14336 x 4096 at 90%: ~410 entries, two steps a row); a
program of several rows, a warp each, fills them all. Against dense and the general CSR kernel's
one-row form (the route before the one-token kernel) and the prototype it came from
(csr_decode_delta.py's "aligned" form: one row a program, no row order, no tail step). bf16, magnitude-pruned LLM weights at 70%
and 90%, CUDA-graph medians in us; BUDGET_S caps the run. Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_token_configs.py
"""

import itertools
import os
import sys
import time
from pathlib import Path

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import spmm_csr, spmm_csr_token

sys.path.insert(0, str(Path(__file__).parent))
import csr_decode_delta  # noqa: E402 - the prototype this kernel came from, timed beside it

BUDGET_S = float(os.environ.get("BUDGET_S", 120))
CONFIGS = [(1, 256, 1), (1, 128, 1), (1, 512, 2), (2, 256, 2), (2, 128, 2), (4, 128, 4),
           (4, 256, 4), (2, 256, 1), (4, 64, 2), (8, 128, 8)]  # fmt: skip


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def main():
    started = time.time()
    table = []
    for (M, K), sparsity in itertools.product(
        [(4096, 14336), (14336, 4096), (4096, 4096)], (0.7, 0.9)
    ):
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        cols = A.pattern.column_indices_int16()
        x = torch.randn(K, device="cuda", dtype=torch.bfloat16)
        want = A.to_dense().double() @ x.double()
        out = torch.empty(M, device="cuda", dtype=torch.bfloat16)
        dense = bench(lambda: w @ x)
        general = bench(
            lambda: spmm_csr.spmm_csr(
                row_offsets=A.row_offsets, column_indices=cols, values=A.values, b=x[:, None],
                bias=None, row_order=A.row_order, out=out.view(1, M, 1), activation="none",
                block_rows=1, block_nnz=256, block_n=1, num_warps=1,
            )
        )  # fmt: skip
        ops = csr_decode_delta.operands(A)
        out32 = torch.empty(M, device="cuda")
        proto = bench(lambda: csr_decode_delta.launch(A, ops, x, out32, "aligned", 256, 1))
        timed = {}
        for rows, block, warps in CONFIGS:
            if time.time() - started > BUDGET_S:
                break

            def run(rows=rows, block=block, warps=warps):
                spmm_csr_token.spmm_csr_token(
                    row_offsets=A.row_offsets, column_indices=cols, values=A.values, x=x,
                    bias=None, row_order=A.row_order, out=out, activation="none",
                    rows_per_program=rows, block=block, num_warps=warps,
                )  # fmt: skip

            out.fill_(float("nan"))
            run()
            err = ((out.double() - want).norm() / want.norm()).item()
            if not err < 1e-2:
                print(M, K, sparsity, rows, block, warps, "wrong", err)
                continue
            timed[(rows, block, warps)] = bench(run)
        case = f"{M}x{K} {sparsity:.0%}"
        ranked = sorted(timed.items(), key=lambda kv: kv[1])
        print(
            case,
            f"dense {dense:.1f} general {general:.1f} prototype {proto:.1f}",
            ranked,
            flush=True,
        )
        table.append((case, dense, general, proto, timed))
    names = [f"{r}x{b}/{w}w" for r, b, w in CONFIGS]
    head = f"\n{'case':<16} {'dense':>6} {'general':>7} {'proto':>6} "
    print(head + " ".join(f"{n:>10}" for n in names))
    for case, dense, general, proto, timed in table:
        cells = [f"{timed[c]:10.1f}" if c in timed else f"{'-':>10}" for c in CONFIGS]
        print(f"{case:<16} {dense:6.1f} {general:7.1f} {proto:6.1f} " + " ".join(cells))


if __name__ == "__main__":
    main()
