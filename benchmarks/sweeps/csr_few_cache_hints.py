"""Cache hints for the CSR few-token kernel: can the weight's one-pass streams (values and
int16 columns, 4 bytes an entry) be kept from evicting B's rows from L1?

At 8-16 tokens the kernel gathers a B row (16-32 bytes) per stored entry at ~6-8 TB/s,
whether x^T has 4096 rows (128 KiB at 16 tokens, which L1 could hold) or 14336
(csr_few_tokens.txt, at-057a6b3: 70.5 us at 16 tokens on both LLM shapes); column chunks did
not help (csr_few_chunks.txt). Here: the streams loaded with ".cg" (L2 only), B's rows with
"evict_last", both, and neither; bf16 magnitude-pruned weights, B as linear pads it, the
route's configuration; CUDA-graph medians in us, each output checked against float64 first.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_few_cache_hints.py
"""

import itertools

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import spmm_csr_few, tuning
from sparsekernels.ops._layout import padded_rows

SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096)]
HINTS = [("", ""), (".cg", ""), ("", "evict_last"), (".cg", "evict_last")]


def main():
    names = ["none", "streams .cg", "B evict_last", "both"]
    print(f"{'case':<22} {'dense':>6} " + " ".join(f"{n:>13}" for n in names))
    for (M, K), sparsity, tokens in itertools.product(SHAPES, (0.7, 0.9), (4, 8, 16)):
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        x = torch.randn(tokens, K, device="cuda", dtype=torch.bfloat16)
        want = A.to_dense().double() @ x.t().double()
        B, config = padded_rows(x.t()), tuning.spmm_csr_few_config(tokens)
        cols = A.pattern.column_indices_int16()
        out = torch.empty(tokens, M, device="cuda", dtype=torch.bfloat16).t()  # linear's order
        cells = []
        for stream, eviction in HINTS:

            def run(stream=stream, eviction=eviction):
                spmm_csr_few.spmm_csr_few(
                    row_offsets=A.row_offsets, column_indices=cols, values=A.values, b=B,
                    bias=None, row_order=A.row_order, out=out, activation="none",
                    rows_per_program=config.rows_per_program, block=config.block,
                    num_warps=config.num_warps, stream_cache=stream, gather_eviction=eviction,
                )  # fmt: skip

            out.fill_(float("nan"))
            run()
            err = ((out.double() - want).norm() / want.norm()).item()
            cells.append(do_bench_cudagraph(run, rep=20) * 1e3 if err < 1e-2 else float("nan"))
        dense = do_bench_cudagraph(lambda w=w, x=x: x @ w.t(), rep=20) * 1e3
        case = f"{M}x{K} {sparsity:.0%} x{tokens}"
        print(f"{case:<22} {dense:6.1f} " + " ".join(f"{c:13.1f}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
