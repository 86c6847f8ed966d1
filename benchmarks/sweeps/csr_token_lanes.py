"""The CSR one-token kernel's two walks (kernels/spmm_csr_token.py): aligned 16-byte vectors (the
route) against lanes on consecutive entries (`lane_major=True`), over rows a program, step and
warps. Sets whether the route takes the lane-major walk.

The vector walk has lane i on entries 8i..8i+7 of a 256-entry step, so each gather of x (one
element a lane) reaches 32 entries 8 apart: at 70% on 14336 columns those span ~850 columns,
~32 distinct 32-byte sectors of x a gather. Both one-token walks of the library (CSR and N:M)
run at ~6.4 entries a clock per multiprocessor whatever their bytes (nm_decode_tall.py says
why that points at the gather). The lane-major walk's loads are scalar but coalesced (64 bytes
a warp instruction) and a gather's 32 lanes read 32 consecutive entries: ~110 columns, ~7
sectors. bf16 magnitude-pruned LLM weights at 70% and 90%, CUDA-graph medians in us, each
output checked against float64 first. Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_token_lanes.py
"""

import itertools

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import spmm_csr_token, tuning

SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096)]
# (rows a program, entries a step, warps) for the lane-major walk
CONFIGS = [(1, 256, 1), (2, 256, 1), (2, 256, 2), (1, 512, 1), (4, 128, 2), (2, 512, 2)]


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def main():
    table = []
    for (M, K), sparsity in itertools.product(SHAPES, (0.7, 0.9)):
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        x = torch.randn(K, device="cuda", dtype=torch.bfloat16)
        want = A.to_dense().double() @ x.double()
        cols = A.pattern.column_indices_int16()
        out = torch.empty(M, device="cuda", dtype=torch.bfloat16)
        route = tuning.spmm_csr_token_config(A.nnz, A.shape[0])
        walks = [("route", route.rows_per_program, route.block, route.num_warps, False)]
        walks += [(f"lanes {r}x{b}/{nw}w", r, b, nw, True) for r, b, nw in CONFIGS]
        timed = {"dense": bench(lambda w=w, x=x: w @ x)}
        for name, rows, block, warps, lane_major in walks:

            def run(rows=rows, block=block, warps=warps, lane_major=lane_major):
                spmm_csr_token.spmm_csr_token(
                    row_offsets=A.row_offsets, column_indices=cols, values=A.values, x=x,
                    bias=None, row_order=A.row_order, out=out, activation="none",
                    rows_per_program=rows, block=block, num_warps=warps,
                    lane_major=lane_major,
                )  # fmt: skip

            out.fill_(float("nan"))
            run()
            err = ((out.double() - want).norm() / want.norm()).item()
            timed[name] = bench(run) if err < 1e-2 else float("nan")
        case = f"{M}x{K} {sparsity:.0%}"
        print(case, {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((case, timed))
    names = list(table[0][1]) if table else []
    print(f"\n{'case':<18} " + " ".join(f"{n[-12:]:>12}" for n in names))
    for case, timed in table:
        print(f"{case:<18} " + " ".join(f"{timed[n]:12.1f}" for n in names))


if __name__ == "__main__":
    main()
