"""The one-hot tensor-core N:M kernel (kernels/spmm_nm_expand.py) against the automatic route
and dense, bf16, CUDA-graph medians, B (K, N) row-major: checks tuning.EXPAND_* and
spmm_nm_expand_config around the chosen tiles: row tiles (BLOCK_M), split-K ranges (SPLITS),
the slot and grouped forms (FORMS=both, n a power of two) and, with GRID=1, slots a step and
stages. Prints the best configurations per case and a table last; BUDGET_S caps the run
(default 240 s). Earlier runs (results/nvidia-h200/2026-11-30/at-94ee33f, at-15b48bc,
at-7c6bc6f) measured the kernel's earlier forms and tiles.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_expand_sweep.py
    SHAPES=4096x14336 PATTERNS=1:8,2:8 TOKENS=16,64 SPLITS=1,2,4 ... (comma-separated lists)
"""

import itertools
import os
import time

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels.spmm_nm_expand import spmm_nm_expand
from sparsekernels.kernels.tuning import spmm_nm_expand_config
from sparsekernels.prune.masks import nm_mask

BUDGET_S = float(os.environ.get("BUDGET_S", 240))
START = time.time()
torch.manual_seed(0)


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3  # us


def checked(fn, out, ref) -> float | None:
    out.fill_(float("nan"))
    fn()
    err = ((out.float() - ref).norm() / ref.norm()).item()
    return bench(fn) if err < 1e-2 else None


# Around the tiles the one-hot sweep found; each configuration compiles once per pattern and
# column tile, which dominates the run: keep the grid small.
def _env(name: str, default: str) -> list[str]:
    return os.environ.get(name, default).split(",")


SHAPES = [tuple(map(int, s.split("x"))) for s in _env("SHAPES", "14336x4096,4096x14336")]
PATTERNS = [tuple(map(int, p.split(":"))) for p in _env("PATTERNS", "1:8,1:16")]
TOKENS = [int(t) for t in _env("TOKENS", "12,16,32,64,128")]
BLOCK_M = [int(b) for b in _env("BLOCK_M", "64,128")]
SPLITS = [int(b) for b in _env("SPLITS", "1,2,4,8")]
FORMS = os.environ.get("FORMS", "config")  # "both": the slot and grouped forms for n = 2, 4, ...
GRID = os.environ.get("GRID", "0") == "1"  # also slots a step and stages, at the chosen split
table = []
print(f"# {torch.cuda.get_device_name()} bf16, us; configs "
      "(block_m, slots a step, warps, stages, split, grouped)")  # fmt: skip
for M, K in SHAPES:
    w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    for n, m in PATTERNS:
        W = sk.NMMatrix.from_dense(w, n, m, mask=nm_mask(w.float(), n, m))
        for N in TOKENS:
            if time.time() - START > BUDGET_S:
                break
            B = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
            ref = W.to_dense().float() @ B.float()
            dense = bench(lambda: w @ B)
            route = bench(lambda: sk.spmm(W, B))
            out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            c = spmm_nm_expand_config(N, n, m, M, W.values.shape[1], 2)
            chosen = (c.block_m, c.block_s, c.num_warps, c.num_stages, c.split, c.grouped)
            forms = [False, True] if FORMS == "both" and n > 1 and n & (n - 1) == 0 else [c.grouped]
            candidates = [chosen]
            candidates += [(bm, c.block_s, 4, c.num_stages, sp, g)
                           for bm, sp, g in itertools.product(BLOCK_M, SPLITS, forms)]  # fmt: skip
            if GRID:
                candidates += [(c.block_m, bs, 4, ns, c.split, c.grouped)
                               for bs, ns in itertools.product((32, 64), (2, 3, 4))]  # fmt: skip
            results = []
            for bm, bs, nw, ns, sp, g in dict.fromkeys(candidates):
                fn = lambda: spmm_nm_expand(values=W.values, indices=W.indices, b=B,  # noqa: E731
                                            bias=None, out=out, n=n, m=m, vector=1, block=1,
                                            activation="none", block_m=bm, block_s=bs,
                                            block_n=c.block_n, num_warps=nw, num_stages=ns,
                                            grouped=g, split=sp)  # fmt: skip
                try:
                    t = checked(fn, out, ref)
                except Exception as error:  # noqa: BLE001 - a configuration that does not fit
                    print("  ", bm, bs, nw, ns, sp, g, type(error).__name__, str(error)[:60])
                    continue
                if t is not None:
                    results.append((round(t, 1), bm, bs, nw, ns, sp, g))
                else:
                    print("   WRONG", bm, bs, nw, ns, sp, g)
            results.sort()
            case = f"{M}x{K} {n}:{m} N={N}"
            mine = next((r[0] for r in results if r[1:] == chosen), float("nan"))
            print(case, f"dense {dense:.1f} route {route:.1f} chosen {mine} {chosen} top "
                  f"{results[:4]}", flush=True)  # fmt: skip
            table.append((case, dense, route, mine, results[0] if results else None))

print(
    f"\n{'case':<26} {'dense':>7} {'route':>7} {'chosen':>7} {'best':>7}  best x dense  best config"
)
for case, dense, route, mine, best in table:
    t = best[0] if best else float("nan")
    print(f"{case:<26} {dense:7.1f} {route:7.1f} {mine:7.1f} {t:7.1f}  {dense / t:5.2f}x  {best[1:] if best else None}")  # fmt: skip
