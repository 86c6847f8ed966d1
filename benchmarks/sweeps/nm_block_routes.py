"""N:M patterns whose automatic route lost to dense at 16 tokens (H100, nm suite at-55405e1:
4:8 v=4 b=4 on 4096 x 4096 0.06x dense, 235 us where the H200 run of 2026-11-29 took 43; 2:4
v=64 0.33x; 64:128 v=64 b=64 0.60x; 2:8 and 1:4 at v=32 0.74x; 4:16 v=4 b=4 0.73x).

Per pattern, shape and token count, CUDA-graph medians in microseconds of:
  route      sk.spmm(W, B) as dispatched (backend=None)
  triton     backend="triton"
  no-expand  backend="triton" with tuning.EXPAND_GROUPED off (the grouped tensor-core kernel
             took 4:8 to 64 tokens since the thirtieth session; measured on element-wise only)
  densify    backend="dense": the weight densified each call, then cuBLAS
  cublas     the dense weight's product alone (what a dense model runs)
Each output is checked against a float64 product first. From the repository root on the GPU
machine (under a minute):

    PYTHONPATH=src python3 benchmarks/sweeps/nm_block_routes.py
"""

import os
import time

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import tuning

PATTERNS = [  # (n, m, vector, block)
    (4, 8, 4, 4),
    (4, 16, 4, 4),
    (2, 4, 64, 1),
    (64, 128, 64, 64),
    (2, 8, 32, 1),
    (1, 4, 32, 1),
    (4, 8, 1, 1),
    (2, 8, 1, 1),
]
SHAPES = [(4096, 4096), (14336, 4096)]
TOKENS = [int(t) for t in os.environ.get("TOKENS", "16,32").split(",")]


def us(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def case_line(n, m, vector, block, rows, k, tokens) -> str:
    torch.manual_seed(0)
    w = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
    mask = sk.prune.nm_mask(w.float(), n, m, vector, block)
    W = sk.NMMatrix.from_dense(w * mask, n, m, vector, block, mask=mask)
    dense = W.to_dense()
    B = torch.randn(k, tokens, device="cuda", dtype=torch.bfloat16)
    want = dense.double() @ B.double()
    scale = want.abs().max().item()

    def no_expand():
        tuning.EXPAND_GROUPED = False
        try:
            return sk.spmm(W, B, backend="triton")
        finally:
            tuning.EXPAND_GROUPED = True

    fns = {
        "route": lambda: sk.spmm(W, B),
        "triton": lambda: sk.spmm(W, B, backend="triton"),
        "no-expand": no_expand,
        "densify": lambda: sk.spmm(W, B, backend="dense"),
        "cublas": lambda: dense @ B,
    }
    cells = []
    for name, fn in fns.items():
        try:
            err = (fn().double() - want).abs().max().item() / scale
            if not err < 2e-2:
                cells.append(f"{name} BAD({err:.2g})")
                continue
            if name == "no-expand":  # (the graph records the launch the flag picks)
                tuning.EXPAND_GROUPED = False
                try:
                    t = us(lambda: sk.spmm(W, B, backend="triton"))
                finally:
                    tuning.EXPAND_GROUPED = True
            else:
                t = us(fn)
            cells.append(f"{name} {t:.1f}")
        except Exception as error:  # noqa: BLE001 (reported in the table)
            cells.append(f"{name} ERR({type(error).__name__}: {str(error)[:60]})")
    pattern = (
        f"{n}:{m}" + (f",v={vector}" if vector > 1 else "") + (f",b={block}" if block > 1 else "")
    )
    return f"{pattern:>16} {rows}x{k} N={tokens}: " + ", ".join(cells)


def main() -> None:
    start = time.time()
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for n, m, vector, block in PATTERNS:
        for rows, k in SHAPES:
            for tokens in TOKENS:
                print(case_line(n, m, vector, block, rows, k, tokens), flush=True)
    print(f"# {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
