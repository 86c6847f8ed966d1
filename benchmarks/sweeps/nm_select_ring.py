"""One token, 1:8 and 2:8: the select kernel fed by a TMA ring (kernels/spmm_nm_select_ring.py)
against the select kernel's routed tile (through linear), the select kernel's best plain tiles
and dense, cold L2.

The select kernel is short of bytes in flight (1.4-2.6 TB/s, latency-bound in Nsight Compute);
cuBLAS's GEMV keeps a deep TMA ring a multiprocessor. Each timing rotates weight copies that
overflow L2 twice; CUDA-graph medians in us a call, each configuration checked against float64
first. Also prints each form's weight bandwidth (values and offset bytes over the time).
    PYTHONPATH=src python3 benchmarks/sweeps/nm_select_ring.py
    SHAPES=4096x14336 PATTERNS=1:8 RINGS=8x8w/s4/p1,16x8w/s6/p1 ...
"""

import itertools
import os

import torch
from _nm_cases import env_cases, nm_case
from nm_decode_tall_cold import dense_cold, linear_cold
from triton.testing import do_bench_cudagraph

from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels.spmm_nm_select import spmm_nm_select
from sparsekernels.kernels.spmm_nm_select_ring import spmm_nm_select_ring

DEVICE = torch.device("cuda")
DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}[os.environ.get("DTYPE", "bf16")]
SHAPES, PATTERNS, _ = env_cases("4096x14336,14336x4096,4096x4096,28672x4096", "1:8,2:8", "1")
# "RxWw/sS/pP[/i][/n][/c]": R rows a step, W computing warps (32 W units a step), S buffers in
# the ring, P persistent programs a multiprocessor; /i: no TMA warp (the computing warps
# refill); /n: x's candidates loaded in their step (not a step ahead); /c: the refill's
# coordinates counted (no division a step); /b: x's halves picked by byte permutes; /u: x's
# candidates unmasked where a row is whole steps
RINGS = os.environ.get(
    "RINGS",
    "16x4w/s2/p4/i/c,16x4w/s2/p4/i/c/u,16x4w/s2/p4/i/c/b,16x4w/s2/p4/i/c/b/u,"
    "16x4w/s3/p3/i/c/b/u,32x4w/s2/p4/i/c/b/u,16x4w/s2/p5/i/c/b/u",
).split(",")
PLAIN = [(4, 256, 2), (2, 128, 1)]  # the select kernel's routed long- and short-row tiles


def parse(name: str) -> dict:
    tile, stages, programs, *flags = name.split("/")
    rows, warps = tile.rstrip("w").split("x")
    return dict(rows=int(rows), warps=int(warps), stages=int(stages[1:]),
                programs_per_sm=int(programs[1:]), producer="i" not in flags,
                prefetch="n" not in flags, counted="c" in flags, permute="b" in flags,
                unmasked="u" in flags)  # fmt: skip


def main():
    table = []
    for (M, K), (n, m) in itertools.product(SHAPES, PATTERNS):
        case = nm_case(M, K, n, m, 1, DTYPE)
        W, want, bits, words = (case[k] for k in ("W", "want", "bits", "words"))
        words4 = W.packed_indices(4)
        x = case["x"].reshape(-1)
        nbytes = W.values.nbytes + words4.nbytes
        copies = max(2, copies_for(nbytes, DEVICE))
        weights = [(W.values.clone(), words4.clone()) for _ in range(copies)]
        timed = {"dense": dense_cold(case), "linear": linear_cold(case, copies, n, m)}
        out = torch.empty(M, 1, device="cuda", dtype=DTYPE)

        def measure(name, run):
            out.fill_(float("nan"))
            run(*weights[0])
            err = ((out.double() - want).norm() / want.norm()).item()
            if not err < 1e-2:
                print(M, K, n, m, name, "wrong", err, flush=True)
                timed[name] = float("nan")
                return
            total = do_bench_cudagraph(lambda: [run(*w) for w in weights], rep=30) * 1e3
            timed[name] = total / copies

        for rows, groups, warps in PLAIN:
            measure(f"{rows}x{groups}/{warps}w", lambda v, w, r=rows, g=groups, nw=warps: (
                spmm_nm_select(values=v, words=w, bits=bits, x=x, bias=None, out=out, n=n, m=m,
                               activation="none", block_m=r, block_g=g, num_warps=nw)))  # fmt: skip
        for name in RINGS:
            options = parse(name)
            measure(name, lambda v, w, o=options: spmm_nm_select_ring(
                values=v, words=w, x=x, bias=None, out=out, n=n, activation="none", **o))  # fmt: skip
        label = f"{M}x{K} {n}:{m} {DTYPE}".replace("torch.", "")
        best = min((t, k) for k, t in timed.items() if k not in ("dense",) and t == t)
        print(label, f"copies {copies}", {k: round(v, 1) for k, v in timed.items()},
              f"best {best[1]} {nbytes / best[0] / 1e6:.2f} TB/s", flush=True)  # fmt: skip
        table.append((label, timed))
    names = list(table[0][1])
    print(f"\n{'case':<24} " + " ".join(f"{c:>15}" for c in names))
    for label, timed in table:
        print(f"{label:<24} " + " ".join(f"{timed[c]:15.1f}" for c in names))


if __name__ == "__main__":
    main()
