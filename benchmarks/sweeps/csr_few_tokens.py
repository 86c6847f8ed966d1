"""The CSR few-token kernel (kernels/spmm_csr_few.py) over its configurations against the route
(the general CSR kernel at 2-16 tokens) and dense: sets tuning.CSR_ROW_WALK_MAX_N (up to which
N the routes take it) and tuning.spmm_csr_few_config.

At 4 and 16 tokens the general kernel runs 70% weights at 0.27-0.84x dense (at-56c4c49/llm:
14336 x 4096, 61.7 us at 4 tokens where one token takes 24.5), a reduction across its entries
every step; the few-token kernel keeps each entry's sums to the end and walks the one-token
kernel's aligned groups. bf16, magnitude-pruned LLM weights at 70% and 90%, B as linear passes
it (x^T padded to a power-of-two width), CUDA-graph medians in us; BUDGET_S caps the run.
Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_few_tokens.py
    TOKENS=4,16 SHAPES=14336x4096 BUDGET_S=60 ...
"""

import itertools
import os
import time

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import spmm_csr_few
from sparsekernels.ops._layout import padded_rows

BUDGET_S = float(os.environ.get("BUDGET_S", 150))
TOKENS = [int(t) for t in os.environ.get("TOKENS", "2,4,8,16").split(",")]
SHAPES = [tuple(map(int, s.split("x"))) for s in
          os.environ.get("SHAPES", "4096x14336,14336x4096,4096x4096").split(",")]  # fmt: skip
CONFIGS = [(1, 32, 1), (1, 64, 1), (1, 128, 1), (1, 128, 2), (1, 256, 2), (2, 64, 2),
           (2, 128, 2), (2, 32, 1), (4, 64, 4), (4, 32, 2)]  # fmt: skip


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def main():
    started = time.time()
    table = []
    for (M, K), sparsity in itertools.product(SHAPES, (0.7, 0.9)):
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        cols = A.pattern.column_indices_int16()
        for n in TOKENS:
            if time.time() - started > BUDGET_S:
                break
            x = torch.randn(n, K, device="cuda", dtype=torch.bfloat16)
            B = padded_rows(x.t())
            want = A.to_dense().double() @ x.t().double()
            out = torch.empty(M, n, device="cuda", dtype=torch.bfloat16)
            dense = bench(lambda: x @ w.t())
            route = bench(lambda: sk.linear(x, A))
            timed = {}
            for rows, block, warps in CONFIGS:

                def run(rows=rows, block=block, warps=warps):
                    spmm_csr_few.spmm_csr_few(
                        row_offsets=A.row_offsets, column_indices=cols, values=A.values, b=B,
                        bias=None, row_order=A.row_order, out=out, activation="none",
                        rows_per_program=rows, block=block, num_warps=warps,
                    )  # fmt: skip

                out.fill_(float("nan"))
                run()
                err = ((out.double() - want).norm() / want.norm()).item()
                if not err < 1e-2:
                    print(M, K, sparsity, n, rows, block, warps, "wrong", err)
                    continue
                timed[(rows, block, warps)] = bench(run)
            case = f"{M}x{K} {sparsity:.0%} x{n}"
            best = min(timed.items(), key=lambda kv: kv[1]) if timed else (None, float("nan"))
            print(case, f"dense {dense:.1f} route {route:.1f} best {best}", timed, flush=True)
            table.append((case, dense, route, timed))
    names = [f"{r}x{b}/{w}w" for r, b, w in CONFIGS]
    print(f"\n{'case':<22} {'dense':>6} {'route':>6} " + " ".join(f"{c:>9}" for c in names))
    for case, dense, route, timed in table:
        cells = [f"{timed[c]:9.1f}" if c in timed else f"{'-':>9}" for c in CONFIGS]
        print(f"{case:<22} {dense:6.1f} {route:6.1f} " + " ".join(cells))


if __name__ == "__main__":
    main()
