"""The N:M decode kernel at 2-16 tokens with each slot's sums kept to the end (keep_sums) against
its reduction at every step (the route), over a few tile shapes; sets the decode configuration
for N > 1 (nm_decode_tuning.spmm_nm_decode_config).

At 8 tokens the route ran 2:8 on 4096 x 14336 in 53.1 us, slower than at 16 tokens (45.3,
the expand kernel) and than dense (34.1; llm suite at-94aadcc). The CSR few-token kernel
walks its entries the same way but keeps per-entry sums and reduces once: 17.6M entries at 8
tokens in 46.9 us against the decode kernel's 14.7M slots in 53.1. Element-wise 2:8, 1:8 and
2:4 on the LLM shapes, bf16, B padded as the route passes it; CUDA-graph medians in us, every
case checked against float64 first. Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_decode_keep_sums.py
"""

import itertools
import os
import time

import torch
from _nm_cases import nm_case
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import nm_decode_tuning
from sparsekernels.kernels.spmm_nm_decode import spmm_nm_decode

BUDGET_S = float(os.environ.get("BUDGET_S", 150))
SHAPES = [(4096, 14336), (14336, 4096)]
TOKENS = [int(t) for t in os.environ.get("TOKENS", "2,4,8,16").split(",")]
# (rows a program, slots a step, warps, keep_sums); the first is the route's at N > 1
CONFIGS = [(2, 256, 1, False), (1, 64, 1, True), (1, 128, 1, True), (2, 64, 1, True),
           (2, 128, 2, True), (1, 256, 2, True), (4, 64, 2, True)]  # fmt: skip


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def main():
    started, table = time.time(), []
    for (M, K), (n, m), tokens in itertools.product(SHAPES, ((2, 8), (1, 8), (2, 4)), TOKENS):
        if time.time() - started > BUDGET_S:
            break
        case = nm_case(M, K, n, m, tokens)
        w, W, x, want, B, bits, words = (
            case[k] for k in ("w", "W", "x", "want", "B", "bits", "words")
        )
        out = torch.empty(M, tokens, device="cuda", dtype=torch.bfloat16)
        timed = {"dense": bench(lambda: x @ w.t()), "route": bench(lambda: sk.linear(x, W))}
        for block_m, slots, warps, keep in CONFIGS:
            block_w = max(1, slots // (32 // bits))
            steps = -(-W.values.shape[1] // (block_w * (32 // bits)))

            def run(block_m=block_m, block_w=block_w, warps=warps, keep=keep, steps=steps):
                spmm_nm_decode(
                    values=W.values, words=words, bits=bits, b=B, bias=None, out=out, n=n, m=m,
                    vector=1, block=1, activation="none", block_m=block_m, block_w=block_w,
                    num_warps=warps, num_stages=2, keep_sums=keep,
                    split=nm_decode_tuning.spmm_nm_decode_split(M, block_m, steps),
                )  # fmt: skip

            out.fill_(float("nan"))
            run()
            err = ((out.double() - want).norm() / want.norm()).item()
            name = f"{block_m}x{slots}/{warps}w{'+k' if keep else ''}"
            timed[name] = bench(run) if err < 1e-2 else float("nan")
        case = f"{M}x{K} {n}:{m} x{tokens}"
        print(case, {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((case, timed))
    names = list(table[0][1]) if table else []
    print(f"\n{'case':<22} " + " ".join(f"{c:>12}" for c in names))
    for case, timed in table:
        print(f"{case:<22} " + " ".join(f"{timed[c]:12.1f}" for c in names))


if __name__ == "__main__":
    main()
