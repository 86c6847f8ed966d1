"""The scatter backend through linear (ops/_csr_scatter.py) against the CSR kernels, densify +
cuBLAS and dense, cold L2, bf16: where should the route take it? LLM shapes at 70% and 90%
(magnitude-pruned), 4-128 tokens; each CSR weight copy's tiled entries built before timing.
Each configuration checked against float64 first (NaN where wrong, said).
    PYTHONPATH=src python3 benchmarks/sweeps/csr_scatter_route.py
    SHAPES=4096x14336 TOKENS=16 ...
"""

import os

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for

SHAPES = [tuple(map(int, s.split("x"))) for s in os.environ.get(
    "SHAPES", "4096x14336,14336x4096,4096x4096").split(",")]  # fmt: skip
TOKENS = [int(t) for t in os.environ.get("TOKENS", "4,8,9,12,16,24,32,48,64,80,96,128").split(",")]
SPARSITIES = [float(s) for s in os.environ.get("SPARSITIES", "0.7,0.9").split(",")]
BACKENDS = ["auto", "scatter", "triton", "dense"]


def cold_us(run, copies) -> float:
    for c in copies:  # eager first: the scatter backend's copies are built outside the graph
        run(*c)
    return do_bench_cudagraph(lambda: [run(*c) for c in copies], rep=30) * 1e3 / len(copies)


def main():
    print(f"# {torch.cuda.get_device_name()}, bf16, cold L2, us a call through linear")
    table = []
    for (M, K), sparsity in [(s, p) for s in SHAPES for p in SPARSITIES]:
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        dense_A = A.to_dense()
        n_copies = max(2, copies_for(A.values.nbytes * 4, torch.device("cuda")))
        copies = [
            (sk.CSRMatrix(A.row_offsets.clone(), A.column_indices.clone(), A.values.clone(),
                          A.shape, check=False),)
            for _ in range(n_copies)
        ]  # fmt: skip
        dense_copies = [(dense_A.clone(),) for _ in range(max(2, copies_for(M * K * 2, w.device)))]
        for tokens in TOKENS:
            x = torch.randn(tokens, K, device="cuda", dtype=torch.bfloat16)
            want = x.double() @ dense_A.double().t()
            timed = {"cublas": cold_us(lambda d: x @ d.t(), dense_copies)}  # the dense weight
            for backend in BACKENDS:
                chosen = None if backend == "auto" else backend

                def run(a, chosen=chosen):
                    return sk.linear(x, a, backend=chosen)

                try:
                    err = ((run(*copies[0]).double() - want).norm() / want.norm()).item()
                except Exception as error:  # a backend that refuses: say so
                    print(tokens, backend, type(error).__name__, str(error)[:200], flush=True)
                    timed[backend] = float("nan")
                    continue
                if not err < 1e-2:
                    print(tokens, backend, "wrong: relative error", err, flush=True)
                    timed[backend] = float("nan")
                    continue
                timed[backend] = cold_us(run, copies)
            label = f"{M}x{K} {sparsity:.0%} t{tokens}"
            print(label, {k: round(v, 1) for k, v in timed.items()}, flush=True)
            table.append((label, timed))
        del copies
        torch.cuda.empty_cache()
    names = ["cublas", *BACKENDS]  # "dense": densify + cuBLAS, the CSR route past 16 tokens
    print(f"\n{'case':<24} " + " ".join(f"{c:>9}" for c in names) + " auto/cublas")
    for label, timed in table:
        ratio = timed["cublas"] / timed["auto"]
        print(f"{label:<24} " + " ".join(f"{timed[c]:9.1f}" for c in names) + f"  {ratio:9.2f}")


if __name__ == "__main__":
    main()
