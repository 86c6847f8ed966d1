"""Small layers (all-MiniLM-L6-v2's: 384 x 384, 1536 x 384, 384 x 1536) through linear, bf16,
every backend against cuBLAS on the dense weight: which route should take a weight that sits
in L2 at the demo's batch sizes (~112 tokens a batch)? The graphed demo at fa2a136 ran its
sparse models at 1.19-1.27x dense's kernel time (50-70%, 2:4, 2:8), 1.90-1.98x at 90% and 1.60x
at 2:8 v=64. Warm L2 (the model's encoder weights, 21 MB, fit in it) and cold (weights
rotated past L2); CUDA-graph medians. Each backend checked against float64 first (NaN where
wrong or refused, said).
    PYTHONPATH=src python3 benchmarks/sweeps/small_layer_routes.py
    SHAPES=384x1536 TOKENS=112 PATTERNS=90%,2:8 ...
"""

import os

import torch
from csr_scatter_route import cold_us  # (eager first, then one graph over the copies)

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for

SHAPES = [tuple(map(int, s.split("x"))) for s in os.environ.get(
    "SHAPES", "384x384,1536x384,384x1536").split(",")]  # fmt: skip
TOKENS = [int(t) for t in os.environ.get("TOKENS", "16,64,112,256").split(",")]
PATTERNS = os.environ.get("PATTERNS", "50%,70%,90%,2:4,2:8,2:8v64").split(",")
CSR_BACKENDS = ["auto", "scatter", "triton", "dense"]
NM_BACKENDS = ["auto", "triton", "dense", "cusparselt"]


def weight(pattern: str, w: torch.Tensor):
    if pattern.endswith("%"):
        mask = sk.prune.magnitude_mask(w.float(), float(pattern[:-1]) / 100)
        return sk.CSRMatrix.from_dense(w * mask, mask=mask)
    nm, _, v = pattern.partition("v")
    n, m = map(int, nm.split(":"))
    vector = int(v or 1)
    mask = sk.prune.nm_mask(w.float(), n, m, vector=vector)
    return sk.NMMatrix.from_dense(w * mask, n, m, vector=vector, mask=mask)


def us(run, weights) -> float:
    return cold_us(run, [(w,) for w in weights])


def main():
    print(f"# {torch.cuda.get_device_name()}, bf16, us a call through linear (warm | cold L2)")
    table = []
    for (M, K), pattern in [(s, p) for s in SHAPES for p in PATTERNS]:
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = weight(pattern, w)
        dense_A = A.to_dense()
        cold = [weight(pattern, w) for _ in range(max(2, copies_for(dense_A.nbytes, w.device)))]
        dense_cold = [dense_A.clone() for _ in range(len(cold))]
        backends = CSR_BACKENDS if isinstance(A, sk.CSRMatrix) else NM_BACKENDS
        for tokens in TOKENS:
            x = torch.randn(tokens, K, device="cuda", dtype=torch.bfloat16)
            want = x.double() @ dense_A.double().t()
            warm = {"cublas": us(lambda d: x @ d.t(), [dense_A])}
            colds = {"cublas": us(lambda d: x @ d.t(), dense_cold)}
            for backend in backends:
                chosen = None if backend == "auto" else backend

                def run(a, chosen=chosen):
                    return sk.linear(x, a, backend=chosen)

                try:
                    err = ((run(A).double() - want).norm() / want.norm()).item()
                except Exception as error:  # a backend that refuses: say so
                    print(M, K, pattern, tokens, backend, type(error).__name__,
                          str(error)[:120], flush=True)  # fmt: skip
                    warm[backend] = colds[backend] = float("nan")
                    continue
                if not err < 1e-2:
                    print(M, K, pattern, tokens, backend, "wrong: relative error", err, flush=True)
                    warm[backend] = colds[backend] = float("nan")
                    continue
                warm[backend], colds[backend] = us(run, [A]), us(run, cold)
            label = f"{M}x{K} {pattern} t{tokens}"
            table.append((label, backends, warm, colds))
            print(label, {k: round(v, 1) for k, v in warm.items()},
                  {k: round(v, 1) for k, v in colds.items()}, flush=True)  # fmt: skip
        del cold, dense_cold
        torch.cuda.empty_cache()
    print(f"\n{'case':<22} warm: cublas, backends...  | cold: cublas, backends... | auto/cublas")
    for label, backends, warm, colds in table:
        names = ["cublas", *backends]
        cells = " ".join(f"{n[:5]}={warm[n]:.1f}" for n in names)
        cold_cells = " ".join(f"{colds[n]:.1f}" for n in names)
        ratio = f"{warm['cublas'] / warm['auto']:.2f} / {colds['cublas'] / colds['auto']:.2f}"
        print(f"{label:<22} {cells} | {cold_cells} | {ratio}")


if __name__ == "__main__":
    main()
