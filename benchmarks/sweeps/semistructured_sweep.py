"""2:4 bf16 linear: cuSPARSELt through our op vs our Triton N:M kernel vs dense cuBLAS.

Sets kernels/tuning.py's `spmm_nm_prefers_cusparselt` (CUSPARSELT_MIN_N_BF16 / _FP16). For each weight
(M, K) in the Llama-8B MLP/attention shapes and N tokens, x (N, K) row-major as in a model:

  dense       torch.matmul(x, w.t()), cuBLAS on the dense weight (the 2:4 zeros included)
  cslt        sk.linear(x, W, backend="cusparselt"): our op, weight packed once and cached,
              cuSPARSELt's algorithm searched once per size (ops/_cusparselt_algs.py)
  cslt0       the same with the search off (algorithm 0, as torch's own path)
  triton      sk.linear(x, W, backend="triton"): our N:M kernel (to 128 tokens: past that it
              takes tens of ms and the route is dense or cslt)
  torch24     F.linear(x, to_sparse_semi_structured(w)): torch's own 2:4 path, same library
  cslt_B      sk.spmm(W, B, backend="cusparselt") with B (K, N) row-major (the other layout)
  lt_alg      torch._cslt_sparse_mm with the alg_id cuSPARSELt's search picks (ours uses 0)
  cslt_eager  cslt timed without a CUDA graph: adds the host work (cuSPARSELt plans per call)

Every provider is first checked against a float32 product (relative Frobenius error < 1e-2).
Times are CUDA-graph medians (triton.testing.do_bench_cudagraph) in microseconds, except
cslt_eager (do_bench); a '*' marks a provider that could not be captured and ran eagerly.
Run from the repository root on the GPU machine (about a minute on an H200):

    PYTHONPATH=src python3 benchmarks/sweeps/semistructured_sweep.py

SHAPES=MxK,..., TOKENS=n,... and DTYPE=bf16|fp16 (environment) replace the defaults.
"""

import os
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench, do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.formats import semi_structured
from sparsekernels.kernels import tuning
from sparsekernels.ops import _cusparselt

SHAPES = [
    tuple(int(v) for v in s.split("x"))
    for s in os.environ.get("SHAPES", "4096x4096,14336x4096,4096x14336").split(",")
]
TOKENS = [int(n) for n in os.environ.get("TOKENS", "1,16,128,2048,8192").split(",")]
COLUMNS = ["dense", "cslt", "cslt0", "triton", "torch24", "cslt_B", "lt_alg", "cslt_eager"]
TRITON_MAX_N = 128
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}[os.environ.get("DTYPE", "bf16")]


def graph_us(fn) -> str:
    try:
        return f"{do_bench_cudagraph(fn, rep=20, return_mode='median') * 1e3:.1f}"
    except Exception:  # not capturable: time it eagerly
        torch.cuda.synchronize()
        return f"{eager_us(fn)}*"


def eager_us(fn) -> str:
    return f"{do_bench(fn, warmup=10, rep=30, return_mode='median') * 1e3:.1f}"


def rel_error(got, want) -> float:
    return ((got.float() - want).norm() / want.norm().clamp_min(1e-30)).item()


def providers(W, Wd, x, packed, Ws):
    B = x.t().contiguous()
    b_lt = _cusparselt._dense_operand(x.t(), -x.shape[0] % semi_structured.DENSE_MULTIPLE)
    try:
        alg = torch._cslt_sparse_mm_search(packed, b_lt)
    except RuntimeError:  # some cuSPARSELt versions search nothing
        alg = 0
    cslt = lambda: sk.linear(x, W, backend="cusparselt")
    cslt()  # the search, outside any capture

    def cslt0():
        tuning.CUSPARSELT_SEARCH = False
        try:
            return cslt()
        finally:
            tuning.CUSPARSELT_SEARCH = True

    found = {
        "dense": (lambda: torch.matmul(x, Wd.t()), False),
        "cslt": (cslt, False),
        "cslt0": (cslt0, False),
        "triton": (lambda: sk.linear(x, W, backend="triton"), False),
        "torch24": (lambda: F.linear(x, Ws), False),
        "cslt_B": (lambda: sk.spmm(W, B, backend="cusparselt").t(), False),
        "lt_alg": (
            lambda: torch._cslt_sparse_mm(packed, b_lt, alg_id=alg)[:, : x.shape[0]].t(),
            False,
        ),
        "cslt_eager": (cslt, True),
    }
    if x.shape[0] > TRITON_MAX_N:
        del found["triton"]
    return found, alg


def main() -> None:
    start = time.perf_counter()
    torch.manual_seed(0)
    print(
        f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"cuSPARSELt {torch.backends.cusparselt.version()}, 2:4 {DTYPE}",
        flush=True,
    )
    rows = []
    for M, K in SHAPES:
        w = torch.randn(M, K, device="cuda", dtype=DTYPE)
        W = sk.NMMatrix.from_dense(w, 2, 4, mask=sk.prune.nm_mask(w.float(), 2, 4))
        Wd = W.to_dense()
        packed = _cusparselt._packed(W.values, W.indices, K)
        Ws = torch.sparse.to_sparse_semi_structured(Wd)
        for N in TOKENS:
            x = torch.randn(N, K, device="cuda", dtype=DTYPE)
            want = x.float() @ Wd.float().t()
            fns, alg = providers(W, Wd, x, packed, Ws)
            row = {"shape": f"{M}x{K}", "N": N, "alg": alg}
            for name, (fn, eager) in fns.items():
                try:
                    err = rel_error(fn(), want)
                    row[name] = (eager_us(fn) if eager else graph_us(fn)) if err < 1e-2 else "BAD"
                    if err >= 1e-2:
                        print(f"BAD {name} {M}x{K} N={N}: relative error {err:.3g}", flush=True)
                except Exception as error:  # keep sweeping; the table shows which failed
                    row[name] = "fail"
                    print(f"fail {name} {M}x{K} N={N}: {str(error)[:120]}", flush=True)
            print(row, flush=True)
            rows.append(row)
    print_table(rows)
    print(f"# {time.perf_counter() - start:.0f} s", flush=True)


def _us(value) -> float | None:
    try:
        return float(str(value).rstrip("*"))
    except ValueError:
        return None


def print_table(rows) -> None:
    head = f"{'M x K':>11} {'N':>5} " + " ".join(f"{c:>10}" for c in COLUMNS)
    head += f" {'alg':>4} {'dense/cslt':>10} {'triton/cslt':>11} {'torch24/cslt':>12}"
    print("\n" + head)
    wins = {}
    for row in rows:
        dense, cslt, triton = (_us(row.get(c)) for c in ("dense", "cslt", "triton"))
        vs_dense = f"{dense / cslt:.2f}x" if dense and cslt else "-"
        vs_triton = f"{triton / cslt:.2f}x" if triton and cslt else "-"
        torch24 = _us(row.get("torch24"))
        vs_torch = f"{torch24 / cslt:.2f}x" if torch24 and cslt else "-"
        cells = " ".join(f"{str(row.get(c, '-')):>10}" for c in COLUMNS)
        print(
            f"{row['shape']:>11} {row['N']:>5} {cells} {row['alg']:>4} {vs_dense:>10} "
            f"{vs_triton:>11} {vs_torch:>12}"
        )
        best_other = min(t for t in (dense, triton) if t) if (dense or triton) else None
        wins.setdefault(row["N"], []).append(bool(cslt and best_other and cslt < best_other))
    every = [n for n in sorted(wins) if all(wins[n])]
    since = next((n for n in every if all(n2 in every for n2 in wins if n2 >= n)), None)
    print(
        "# cslt beats dense and triton on every shape from N = "
        f"{since} on (tuning.CUSPARSELT_MIN_N_*)"
        if since
        else "# cslt never wins on every shape"
    )


if __name__ == "__main__":
    main()
