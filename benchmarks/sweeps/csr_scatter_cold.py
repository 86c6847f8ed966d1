"""The scatter-into-shared-memory CSR kernel (kernels/spmm_csr_scatter.py: each 64 x 64 tile's
entries stored into a zeroed shared tile, then mma.sync) against the CSR route through linear
and dense, cold L2, bf16: can unstructured weights beat dense at 4-128 tokens, where the route
runs 0.2-1.0x dense at 70%?

LLM shapes at 70% and 90% (magnitude-pruned), 8-64 tokens (TOKENS=...); the kernel's column
tiles, splits for 4-16 programs an SM, 64- or 128-column steps, loads one or two steps ahead,
64- or 128-row tiles.
Each timing rotates weight copies that overflow L2 twice; CUDA-graph medians in us a call, each
configuration checked against float64 first (NaN where wrong or refused, said).
    PYTHONPATH=src python3 benchmarks/sweeps/csr_scatter_cold.py
    SHAPES=4096x14336 TOKENS=16 ...
"""

import os

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels.spmm_csr_scatter import spmm_csr_scatter, tiled_entries

SHAPES = [tuple(map(int, s.split("x"))) for s in os.environ.get(
    "SHAPES", "4096x14336,14336x4096,4096x4096").split(",")]  # fmt: skip
TOKENS = [int(t) for t in os.environ.get("TOKENS", "8,16,32,64").split(",")]
SPARSITIES = [float(s) for s in os.environ.get("SPARSITIES", "0.7,0.9").split(",")]
# "nN/wW[/plain][/rc][/sp][/u][/eE][/kK][/aA][/mM][/gG]": N-token column tiles, a split for W
# programs an SM, a plain tile, runs in row and column order or dealt in bank order (the
# default places them store by store: csr_scatter_banks), zeros only at the step before's
# places (u: unscatter), E entries a
# thread loaded ahead (default: the launcher's), K columns a step (64), A steps loaded ahead
# (1; 2: in pairs), M rows a program (64; 128 on 8 warps), G warps (M / 16, or 4 at M 128).
# Routed: n16/w8 to 16 tokens (w4 where rows <= K), n32/w4 past; m128/g4 with w4 on weights of
# 2^25 elements or more at density <= 0.2 (csr_scatter_tuning).
CONFIGS = os.environ.get(
    "CONFIGS", "n16/w8,n16/w4,n16/w4/m128/g4,n16/w8/m128/g4,n32/w4,n32/w4/m128/g4"
).split(",")


def _option(name: str, letter: str, default):
    """A configuration's "/eE", "/kK", "/aA", "/mM" or "/gG" number, else the default."""
    found = [int(p[1:]) for p in name.split("/")[2:] if p.startswith(letter)]
    return found[0] if found else default


def cold_us(run, copies) -> float:
    return do_bench_cudagraph(lambda: [run(*c) for c in copies], rep=30) * 1e3 / len(copies)


def main():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"# {torch.cuda.get_device_name()}, bf16, cold L2, us a call")
    table = []
    for (M, K), sparsity in [(s, p) for s in SHAPES for p in SPARSITIES]:
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        dense_A = A.to_dense()
        forms = {}  # (swizzle, block_k, block_m, banks) -> tiled entries, as configurations ask

        def form(*key, A=A, K=K, forms=forms):
            if key not in forms:
                swizzle, block_k, block_m, banks = key
                forms[key] = tiled_entries(A.row_offsets, A.column_indices, A.values, K, swizzle,
                                           block_k, block_m, banks)  # fmt: skip
            return forms[key]

        weight_bytes = form(True, 64, 64, "greedy")[1].nbytes
        n_copies = max(2, copies_for(weight_bytes, torch.device("cuda")))
        for tokens in TOKENS:
            x = torch.randn(tokens, K, device="cuda", dtype=torch.bfloat16)
            want = dense_A.double() @ x.t().double()
            timed = {}
            dense_count = max(2, copies_for(M * K * 2, w.device))
            dense_copies = [(dense_A.clone(),) for _ in range(dense_count)]
            timed["dense"] = cold_us(lambda d: x @ d.t(), dense_copies)
            csr_copies = [
                (sk.CSRMatrix(A.row_offsets.clone(), A.column_indices.clone(), A.values.clone(),
                              A.shape, check=False),)
                for _ in range(n_copies)
            ]  # fmt: skip
            for (a,) in csr_copies:  # eager first: the route's tiled copies, outside the graph
                sk.linear(x, a)
            timed["route"] = cold_us(lambda a: sk.linear(x, a), csr_copies)
            for name in CONFIGS:
                block_n = int(name.split("/")[0][1:])
                wave = int(name.split("/")[1][1:])
                swizzle = "plain" not in name
                ept = _option(name, "e", None)
                block_k = _option(name, "k", 64)
                ahead = _option(name, "a", 1)
                block_m = _option(name, "m", 64)
                warps = _option(name, "g", None)
                flags = name.split("/")
                banks = "plain" if "rc" in flags else "spread" if "sp" in flags else "greedy"
                offsets, entries = form(swizzle, block_k, block_m, banks)
                tiles = -(-M // block_m) * -(-tokens // block_n)
                split = max(1, min(wave * sms // tiles, -(-K // block_k)))
                out = torch.empty(M, tokens, device="cuda", dtype=torch.bfloat16)
                b = x.t()

                unscatter = "u" in name.split("/")

                def run(offsets, entries, out=out, b=b, block_n=block_n, split=split,
                        swizzle=swizzle, ept=ept, block_k=block_k, ahead=ahead,
                        block_m=block_m, warps=warps, unscatter=unscatter):  # fmt: skip
                    spmm_csr_scatter(
                        tile_offsets=offsets, entries=entries, b=b, bias=None, out=out,
                        activation="none", block_n=block_n, split=split, swizzle=swizzle,
                        entries_per_thread=ept, block_k=block_k, steps_ahead=ahead,
                        block_m=block_m, warps=warps, unscatter=unscatter,
                    )  # fmt: skip

                key = name
                timed[f"split {name}"] = split
                out.fill_(float("nan"))
                try:
                    run(offsets, entries)
                except Exception as error:  # a tile the compiler refuses: say so
                    print(key, type(error).__name__, str(error)[:300], flush=True)
                    timed[key] = float("nan")
                    continue
                err = ((out.double() - want).norm() / want.norm()).item()
                if not err < 1e-2:
                    print(key, "wrong: relative error", err, flush=True)
                    timed[key] = float("nan")
                    continue
                copies = [(offsets, entries.clone()) for _ in range(n_copies)]
                timed[key] = cold_us(run, copies)
            label = f"{M}x{K} {sparsity:.0%} t{tokens}"
            print(label, {k: round(v, 1) for k, v in timed.items()}, flush=True)
            timed = {k: v for k, v in timed.items() if not k.startswith("split")}
            table.append((label, timed))
    names = sorted(
        {c for _, timed in table for c in timed}, key=lambda c: (c not in ("dense", "route"), c)
    )  # noqa: E501
    print(f"\n{'case':<24} " + " ".join(f"{c:>14}" for c in names))
    for label, timed in table:
        print(f"{label:<24} " + " ".join(f"{timed.get(c, float('nan')):14.1f}" for c in names))


if __name__ == "__main__":
    main()
