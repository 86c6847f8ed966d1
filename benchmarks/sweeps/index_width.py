"""Kernels with their offsets in int32 against int64 (each kernel's INT32_LIMIT, forced to 0
for int64): the N:M decode kernel at one token (2:8, 1:8, 2:4; only the gather's offsets
change) and the general CSR kernel at 32 and 256 tokens (70%; every entry's offsets; at 2-16
tokens the row walk of spmm_csr_few.py runs, int32 like the one-token kernel), through
sk.linear on the LLM shapes against dense; the row softmax (every entry's offsets) through
sk.sparse_softmax on attention patterns, 16 heads at L = 4096; the per-entry SDDMM (the route
for uniform patterns at 2-10%) on 4096 x 4096 at K = 64 and 256, fp32. bf16 unless said,
CUDA-graph medians in us. The CSR one-token kernel ran 28.7 us with int64 offsets and 21.6 with int32 (70% on
4096 x 14336, at-a58e7c0 and at-56c4c49). Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/index_width.py
"""

import itertools

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.cases import _pattern_from_mask, attention_mask
from sparsekernels.kernels import sddmm_csr, softmax_csr, spmm_csr, spmm_nm_decode

SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096)]


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def timed_both(kernel, fn, want) -> dict:
    """{"int32": us, "int64": us} of fn(), `kernel.INT32_LIMIT` set for each."""
    limit, timed = kernel.INT32_LIMIT, {}
    for name, bound in (("int32", 2**31), ("int64", 0)):
        kernel.INT32_LIMIT = bound  # read at each launch
        err = ((fn().double() - want).norm() / want.norm()).item()
        timed[name] = bench(fn) if err < 1e-2 else float("nan")
    kernel.INT32_LIMIT = limit
    return timed


def main():
    rows = []
    cases = [(shape, f"{n}:{m}", 1) for shape, (n, m) in itertools.product(
        SHAPES, [(2, 8), (1, 8), (2, 4)])]  # fmt: skip
    cases += [(shape, "70%", tokens) for shape in SHAPES for tokens in (32, 256)]  # general kernel
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
            mask = sk.prune.nm_mask(w.float(), n, m)
            W, kernel = sk.NMMatrix.from_dense(w, n, m, mask=mask), spmm_nm_decode
        x = torch.randn(tokens, K, device="cuda", dtype=torch.bfloat16)
        want = x.double() @ W.to_dense().double().t()
        dense = bench(lambda: x @ w.t())
        timed = timed_both(kernel, lambda W=W, x=x: sk.linear(x, W), want)
        case = f"{M}x{K} {pattern} x{tokens}"
        print(case, f"dense {dense:.1f}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
        rows.append((case, dense, timed))
    g = torch.Generator(device="cuda").manual_seed(0)
    for kind in ("local:256", "random:0.1", "causal"):
        mask = attention_mask(kind, 4096, torch.device("cuda"), g)
        S = _pattern_from_mask(mask, torch.float32).with_values(
            torch.randn(16, int(mask.sum()), device="cuda", dtype=torch.bfloat16)
        )
        want = sk.sparse_softmax(S.with_values(S.values.double()), 0.5).values
        timed = timed_both(softmax_csr, lambda S=S: sk.sparse_softmax(S, 0.5).values, want)
        print(f"softmax {kind}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
        rows.append((f"softmax {kind} x16", float("nan"), timed))
    for density, k in itertools.product((0.02, 0.1), (64, 256)):
        torch.manual_seed(0)
        mask = torch.rand(4096, 4096, device="cuda") < density
        P = sk.CSRMatrix.from_dense(mask.float(), mask=mask)
        x, y = (torch.randn(4096, k, device="cuda") for _ in range(2))
        want = sk.sddmm(x.double(), y.double(), P.to(dtype=torch.float64)).values
        timed = timed_both(sddmm_csr, lambda P=P, x=x, y=y: sk.sddmm(x, y, P).values, want)
        case = f"sddmm {density:.0%} K={k} fp32"
        print(case, {key: round(v, 1) for key, v in timed.items()}, flush=True)
        rows.append((case, float("nan"), timed))
    print(f"\n{'case':<22} {'dense':>6} {'int32':>6} {'int64':>6}")
    for case, dense, timed in rows:
        print(f"{case:<22} {dense:6.1f} {timed['int32']:6.1f} {timed['int64']:6.1f}")


if __name__ == "__main__":
    main()
