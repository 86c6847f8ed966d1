"""Decode at one token with the gather's offsets in int32 against int64: the N:M decode kernel
(kernels/spmm_nm_decode.py, INT32_LIMIT) through sk.linear, on the LLM shapes at 2:8, 1:8 and
2:4, bf16, CUDA-graph medians in us against dense. The CSR one-token kernel ran 28.7 us with
int64 offsets and 21.6 with int32 (70% on 4096 x 14336, at-a58e7c0 and at-56c4c49); this
measures the same choice in the N:M kernel, where only the gather's offsets change.
Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/decode_index_width.py
"""

import itertools

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import spmm_nm_decode


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def main():
    rows = []
    limit = spmm_nm_decode.INT32_LIMIT
    for (M, K), (n, m) in itertools.product(
        [(4096, 14336), (14336, 4096), (4096, 4096)], [(2, 8), (1, 8), (2, 4)]
    ):
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        W = sk.NMMatrix.from_dense(w, n=n, m=m)
        x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
        want = (x.double() @ W.to_dense().double().t())[0]
        dense = bench(lambda: x @ w.t())
        timed = {}
        for name, bound in (("int32", limit), ("int64", 0)):
            spmm_nm_decode.INT32_LIMIT = bound  # read at each launch
            got = sk.linear(x, W)[0]
            err = ((got.double() - want).norm() / want.norm()).item()
            timed[name] = bench(lambda: sk.linear(x, W)) if err < 1e-2 else float("nan")
        spmm_nm_decode.INT32_LIMIT = limit
        case = f"{M}x{K} {n}:{m}"
        print(case, f"dense {dense:.1f}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
        rows.append((case, dense, timed))
    print(f"\n{'case':<16} {'dense':>6} {'int32':>6} {'int64':>6}")
    for case, dense, timed in rows:
        print(f"{case:<16} {dense:6.1f} {timed['int32']:6.1f} {timed['int64']:6.1f}")


if __name__ == "__main__":
    main()
