"""The condensed-K kernel for 8-row vectors (kernels/spmm_nm_pairs.py) against linear's route
(which takes it where nm_pairs_tuning says) and cuBLAS on the dense weight, bf16 (DTYPE=float16
for fp16), cold L2, CUDA-graph medians, us a call.

At m = 16 / 32 and 17-48 tokens the route took the one-hot kernel (m dots a step, 0.26-0.82x
dense on the H100) or, for 2:16 at 17-32, its copy stored as 2:8. Each kernel call here
includes linear's x^T copy (16-column aligned, ops/_layout.aligned_rows) and writes linear's
(tokens, rows) output; each form is checked against float64 first (NaN where wrong).
    PYTHONPATH=src python3 benchmarks/sweeps/nm_pairs.py
    SHAPES=14336x4096 PATTERNS=2:16,4:32 TOKENS=24,40 VECTOR=8 FORMS=p2s32,p4s32/k2 ...
A form "pPsS[/kK][/wW][/tT][/b]": P pairs (16 rows) a program, S slots a step, split K into K
ranges, W warps (4), T stages (3; 5 with b), b the blocked step (spmm_nm_pairs._blocked_step,
a helper's sm_90 analysis: loop 1.6-2.2x shorter); the column tile is 32 tokens to 32, else 64.
"""

import itertools
import os

import torch
from _nm_cases import env_cases
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels.spmm_nm_pairs import spmm_nm_pairs
from sparsekernels.ops._layout import aligned_rows

DEVICE = torch.device("cuda")
VECTOR = int(os.environ.get("VECTOR", "8"))
DTYPE = getattr(torch, os.environ.get("DTYPE", "bfloat16"))
FORMS = os.environ.get("FORMS", "p1s32,p2s32,p4s32,p2s64,p1s32/k2,p4s32/w8").split(",")


def parse(form: str) -> dict:
    tile, *flags = form.split("/")
    pairs, block_s = (int(d) for d in tile[1:].split("s"))
    blocked = "b" in flags
    flag = {f[0]: int(f[1:]) for f in flags if f != "b"}
    return dict(pairs=pairs, block_s=block_s, split=flag.get("k", 1),
                num_warps=flag.get("w", 4), num_stages=flag.get("t", 5 if blocked else 3),
                blocked=blocked)  # fmt: skip


def pairs_linear(W, x: torch.Tensor, tile: dict) -> torch.Tensor:
    """linear(x, W) through the pairs kernel: x^T copied as the route copies it, the product
    written in linear's (tokens, rows) order."""
    out = torch.empty(x.shape[0], W.shape[0], device=x.device, dtype=x.dtype)
    spmm_nm_pairs(
        values=W.values, indices=W.indices, b=aligned_rows(x.t()), bias=None, out=out.t(),
        n=W.n, m=W.m, vector=W.vector, activation="none",
        block_n=32 if x.shape[0] <= 32 else 64, **tile,
    )  # fmt: skip
    return out


def cold(fn, weights) -> float:
    return do_bench_cudagraph(lambda: [fn(w) for w in weights], rep=30) * 1e3 / len(weights)


def main():
    shapes, patterns, token_counts = env_cases(
        "4096x4096,14336x4096,4096x14336", "2:16,4:32,1:32,1:16,4:16", "17,24,33,40,48"
    )
    table = []
    for (M, K), (n, m) in itertools.product(shapes, patterns):
        torch.manual_seed(0)
        w = torch.randn(M, K, device=DEVICE, dtype=DTYPE)
        mask = sk.prune.nm_mask(w.float(), n, m, VECTOR, block=1)
        W = sk.NMMatrix.from_dense(w, n, m, VECTOR, block=1, mask=mask)
        dense = W.to_dense()
        copies = max(2, copies_for(W.values.nbytes, DEVICE))
        Ws = [W.with_values(W.values.clone()) for _ in range(copies)]
        dense_copies = [dense.clone() for _ in range(max(2, copies_for(dense.nbytes, DEVICE)))]
        for tokens in token_counts:
            x = torch.randn(tokens, K, device=DEVICE, dtype=DTYPE)
            want = x.double() @ dense.double().t()
            timed = {
                "dense": cold(lambda d: x @ d.t(), dense_copies),
                "route": cold(lambda Wc: sk.linear(x, Wc), Ws),
            }
            for form in FORMS:
                tile = parse(form)
                got = pairs_linear(W, x, tile)
                right = ((got.double() - want).norm() / want.norm()).item() < 1e-2
                timed[form] = (
                    cold(lambda Wc: pairs_linear(Wc, x, tile), Ws) if right else float("nan")
                )
            label = f"{M}x{K} {n}:{m} v{VECTOR} t{tokens}"
            print(label, {f: round(t, 1) for f, t in timed.items()}, flush=True)
            table.append((label, timed))
    names = ["dense", "route", *FORMS]
    print(
        f"\n# {torch.cuda.get_device_name()}, {DTYPE}, us a call, cold L2; x dense = dense / best"
    )
    print(f"{'case':<28}" + "".join(f"{f:>11}" for f in names) + f"{'x dense':>8}")
    for label, t in table:
        best = min(t[f] for f in FORMS if t[f] == t[f]) if any(t[f] == t[f] for f in FORMS) else 0
        cells = "".join(f"{t[f]:11.1f}" for f in names)
        print(f"{label:<28}{cells}{t['dense'] / best if best else float('nan'):8.2f}")


if __name__ == "__main__":
    main()
