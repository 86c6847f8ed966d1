"""Decode with the kernels' offsets in int32 against int64 (each kernel's INT32_LIMIT, forced
to 0 for int64): the N:M decode kernel at one token (2:8, 1:8, 2:4; only the gather's offsets
change) and the general CSR kernel at 4 and 16 tokens (70%; every entry's offsets), through
sk.linear on the LLM shapes, bf16, CUDA-graph medians in us against dense. The CSR one-token
kernel ran 28.7 us with int64 offsets and 21.6 with int32 (70% on 4096 x 14336, at-a58e7c0
and at-56c4c49). Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/decode_index_width.py
"""

import itertools

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import spmm_csr, spmm_nm_decode

SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096)]


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def timed_both(kernel, W, x, want) -> dict:
    """{"int32": us, "int64": us} of sk.linear(x, W), `kernel.INT32_LIMIT` set for each."""
    limit, timed = kernel.INT32_LIMIT, {}
    for name, bound in (("int32", limit), ("int64", 0)):
        kernel.INT32_LIMIT = bound  # read at each launch
        got = sk.linear(x, W)
        err = ((got.double() - want).norm() / want.norm()).item()
        timed[name] = bench(lambda: sk.linear(x, W)) if err < 1e-2 else float("nan")
    kernel.INT32_LIMIT = limit
    return timed


def main():
    rows = []
    cases = [(shape, f"{n}:{m}", 1) for shape, (n, m) in itertools.product(
        SHAPES, [(2, 8), (1, 8), (2, 4)])]  # fmt: skip
    cases += [(shape, "70%", tokens) for shape in SHAPES for tokens in (4, 16)]
    for (M, K), pattern, tokens in cases:
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        if pattern == "70%":
            W, kernel = (
                sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), 0.7)),
                spmm_csr,
            )
        else:
            n, m = map(int, pattern.split(":"))
            W, kernel = sk.NMMatrix.from_dense(w, n=n, m=m), spmm_nm_decode
        x = torch.randn(tokens, K, device="cuda", dtype=torch.bfloat16)
        want = x.double() @ W.to_dense().double().t()
        dense = bench(lambda: x @ w.t())
        timed = timed_both(kernel, W, x, want)
        case = f"{M}x{K} {pattern} x{tokens}"
        print(case, f"dense {dense:.1f}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
        rows.append((case, dense, timed))
    print(f"\n{'case':<22} {'dense':>6} {'int32':>6} {'int64':>6}")
    for case, dense, timed in rows:
        print(f"{case:<22} {dense:6.1f} {timed['int32']:6.1f} {timed['int64']:6.1f}")


if __name__ == "__main__":
    main()
