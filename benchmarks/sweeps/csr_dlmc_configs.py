"""The general CSR kernel's tiles (tuning.spmm_csr_config) on DLMC matrices, cold L2.

spmm_csr_config was swept on LLM weights (4096 and 14336 rows) at N = 256 and picks by N
alone: 4 rows a program, 32 entries a step, 128 columns, 4 warps. DLMC's matrices are small
(64-2048 rows) with N = 49-3136, and there the kernel runs latency-bound: 64 x 256 at 50% with
N = 3136 took 11.7 us in fp32 and 22.3 in bf16 where its bytes need ~2 (results/nvidia-h200/
2026-11-30/at-0488441/dlmc), 2048 x 512 at N = 49 25.6 us (cuSPARSE 28.8, dense fp32 10.2):
few programs, each walking four rows 32 entries at a time. This times a grid of tiles per
matrix, fp32 and bf16, against the library's choice, as the harness does: the matrix (fresh
N(0, 1) values) and B rotated through copies that together overflow L2 twice; CUDA-graph
medians in us a call, each checked against float64 first. Narrow column tiles with many rows
(e.g. 16x16x32) keep a program's slice of B (K x 32) in L1 across its rows: at N = 2048 every
entry re-reads its B row, and from L2 that caps the kernel near 8 TFLOP/s in fp32. Prints a
table last. A trailing "/p" ("library/p") gives the kernel B copied to a multiple of 16
columns, zero past N: masked on N (ResNet-50's 49 and 196) B's rows load 2-4 bytes a thread
(sm_90 SASS), on the padded width as 16-byte vectors; "pad" is that copy's own time.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_dlmc_configs.py   # DLMC=.dlmc (extracted)
    MODELS=rn50 CONFIGS=library/p DTYPES=fp32,bf16 ...
    DTYPES=fp32 CONFIGS=1x32x64/2w,2x32x128/4w BUDGET_S=60 ...
"""

import os
import time
from pathlib import Path

import torch
from triton.testing import do_bench_cudagraph

from sparsekernels.bench import dlmc
from sparsekernels.bench.harness import copies_for
from sparsekernels.formats import load_smtx
from sparsekernels.kernels import spmm_csr, tuning
from sparsekernels.kernels._sizes import next_power_of_2

DEVICE = torch.device("cuda")
BUDGET_S = float(os.environ.get("BUDGET_S", 170))
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
DTYPES = {k: DTYPES[k] for k in os.environ.get("DTYPES", "fp32,bf16").split(",")}
# "RxZxC/Ww": R rows a program, Z stored entries a step, C columns of B (capped at N's power
# of two), W warps
CONFIGS = os.environ.get(
    "CONFIGS",
    "1x16x64/2w,1x32x64/2w,1x32x128/4w,1x64x64/4w,1x64x128/4w,2x16x128/4w,2x32x64/4w,"
    "2x32x128/4w,4x16x128/4w,4x32x64/4w,8x16x64/4w,1x32x256/8w,8x16x32/4w,16x16x32/8w,"
    "4x32x32/4w",
).split(",")
DENSITIES = (0.5, 0.2, 0.05)  # per DLMC layer shape, the matrix nearest each


def parse(name: str) -> tuple[int, int, int, int]:
    tile, warps = name.removesuffix("/p").split("/")
    rows, nnz, cols = (int(d) for d in tile.split("x"))
    return rows, nnz, cols, int(warps.rstrip("w"))


def chosen_matrices() -> list[tuple[dlmc.Matrix, int]]:
    """(matrix, N): per layer shape (model, rows, cols), the matrices nearest DENSITIES;
    Transformer layers at N = 256 and 2048, ResNet-50 layers at their own N."""
    matrices, sizes = dlmc.find(Path(os.environ.get("DLMC", ".dlmc")))
    shapes: dict[tuple, list] = {}
    models = os.environ.get("MODELS", "transformer,rn50").split(",")
    for m in matrices:
        if m.model not in models or (m.model == "rn50" and m.name not in sizes):
            continue
        shapes.setdefault((m.model, m.rows, m.cols), []).append(m)
    picked = []
    for (model, _, _), group in sorted(shapes.items()):
        near = {
            min(group, key=lambda m: abs(m.nnz / (m.rows * m.cols) - d)).path for d in DENSITIES
        }
        for m in (m for m in group if m.path in near):
            for n in (256, 2048) if model == "transformer" else (sizes[m.name],):
                picked.append((m, n))
    return picked


def padded_columns(b: torch.Tensor) -> torch.Tensor:
    """b (K, N) copied to a multiple of 16 columns, zero past N."""
    return torch.nn.functional.pad(b, (0, -b.shape[1] % 16)).contiguous()


def rotated(fn, copies: list) -> float:
    return do_bench_cudagraph(lambda: [fn(c) for c in copies], rep=30) * 1e3 / len(copies)


def main():
    start = time.time()
    table = []
    for matrix, n in chosen_matrices():
        for dname, dtype in DTYPES.items():
            if time.time() - start > BUDGET_S:
                break
            A = load_smtx(matrix.path, dtype=dtype, device=DEVICE)
            A = A.with_values(torch.randn_like(A.values))
            cols = A.pattern.column_indices_int16()
            cols = A.column_indices if cols is None else cols
            b = torch.randn(A.shape[1], n, device=DEVICE, dtype=dtype)
            want = A.to_dense().double() @ b.double()
            out = torch.empty(1, A.shape[0], n, device=DEVICE, dtype=dtype)
            case_bytes = A.values.nbytes + cols.nbytes + b.nbytes + out.nbytes
            copies = [
                (A.values.clone(), b.clone()) for _ in range(max(2, copies_for(case_bytes, DEVICE)))
            ]
            copies[0] = (A.values, b)  # (checked first: want is b's product)
            lib = tuning.spmm_csr_config(n, A.shape[0], A.values.element_size())
            library = (lib.block_rows, lib.block_nnz, lib.block_n, lib.num_warps)
            configs = {"library": library}
            configs.update({c: library if c == "library/p" else parse(c) for c in CONFIGS})
            padded = [(v, padded_columns(bc)) for v, bc in copies]
            timed = {}
            for label, (rows, nnz, width, warps) in configs.items():
                width = min(width, next_power_of_2(n))
                tried = padded if label.endswith("/p") else copies

                def run(c, rows=rows, nnz=nnz, width=width, warps=warps):
                    spmm_csr.spmm_csr(
                        row_offsets=A.row_offsets, column_indices=cols, values=c[0], b=c[1],
                        bias=None, row_order=A.row_order, out=out, activation="none",
                        block_rows=rows, block_nnz=nnz, block_n=width, num_warps=warps,
                    )  # fmt: skip

                out.fill_(float("nan"))
                run(tried[0])
                err = ((out[0].double() - want).norm() / want.norm()).item()
                timed[label] = rotated(run, tried) if err < 1e-2 else float("nan")
            timed["pad"] = rotated(lambda c: padded_columns(c[1]), copies)
            density = A.nnz / (A.shape[0] * A.shape[1])
            case = f"{dname} {A.shape[0]}x{A.shape[1]}x{n} d={density:.2f}"
            best = min((t, c) for c, t in timed.items() if t == t)
            print(case, matrix.label, {k: round(v, 1) for k, v in timed.items()}, "best", best,
                  flush=True)  # fmt: skip
            table.append((case, timed))
    names = ["library", *CONFIGS, "pad"]
    print(f"\n{'case':<28} " + " ".join(f"{c:>12}" for c in names))
    for case, timed in table:
        print(f"{case:<28} " + " ".join(f"{timed.get(c, float('nan')):12.1f}" for c in names))


if __name__ == "__main__":
    main()
