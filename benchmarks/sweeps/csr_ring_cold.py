"""The CSR one-token kernel fed by a TMA ring (kernels/spmm_csr_ring.py) timed cold against the
library's route (linear: the one-token or stream walk) and dense cuBLAS, on magnitude-pruned bf16
LLM weights at 70% and 90%. Rotated weight copies that together overflow L2 twice, CUDA-graph
medians in us a call, each form checked against float64 first. Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_ring_cold.py
RINGS ("LxW/wN/vV/sS/pP[/f]": L lines of 64 entries a step, N warps, V adjacent entries a
thread, S buffers, P programs a multiprocessor; /f: the next step's values and x read a step
ahead; /l: the line form, formats/_line_layout.py: a base column a line of 64 and a byte an
entry) and SHAPES (environment) replace the grid.
"""

import itertools
import os

import torch
from _csr_cases import csr_case
from csr_token_cold import rotated

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.formats._line_layout import build
from sparsekernels.kernels import spmm_csr_ring

DEVICE = torch.device("cuda")
SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096), (28672, 4096)]
if os.environ.get("SHAPES"):  # SHAPES=14336x4096,...
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ["SHAPES"].split(",")]
RINGS = os.environ.get(
    "RINGS",
    "16x64/w4/v8/s4/p4,16x64/w4/v8/s4/p4/f,32x64/w4/v8/s3/p4,32x64/w4/v8/s3/p4/f,"
    "16x64/w4/v4/s4/p4,16x64/w4/v8/s4/p8/f,32x64/w8/v8/s4/p2/f,8x64/w4/v4/s6/p4/f,"
    "16x64/w4/v8/s4/p4/l,16x64/w4/v8/s4/p4/f/l,32x64/w4/v8/s3/p4/f/l,32x64/w8/v8/s4/p2/f/l",
).split(",")


def parse(name: str) -> dict:
    lines = int(name.split("x")[0])
    flags = {f[0]: int(f[1:] or 1) for f in name.split("/")[1:]}
    return dict(lines=lines, warps=flags["w"], vector=flags["v"], stages=flags["s"],
                programs_per_sm=flags["p"], prefetch="f" in flags,
                line_form="l" in flags)  # fmt: skip


def line_form(A):
    """(row slots, byte offsets, packed values, bases) of A's line layout."""
    layout = build(A.row_offsets, A.column_indices, A.shape[1], most_slots=4.0)
    return layout.row_slots, layout.offsets, layout.pack(A.values), layout.bases


def main():
    table = []
    for (M, K), sparsity in itertools.product(SHAPES, (0.7, 0.9)):
        case = csr_case(M, K, sparsity)
        w, A, cols, x, want = (case[k] for k in ("w", "A", "cols", "x", "want"))
        out = torch.empty(M, device="cuda", dtype=torch.bfloat16)
        weight_bytes = A.values.nbytes + cols.nbytes + A.row_offsets.nbytes
        count = max(2, copies_for(weight_bytes, DEVICE))
        dense_copies = [w.clone() for _ in range(max(2, copies_for(w.nbytes, DEVICE)))]
        timed = {"dense": rotated(lambda d: x @ d.t(), dense_copies)}
        matrices = [
            sk.CSRMatrix(A.row_offsets.clone(), cols.clone(), A.values.clone(), (M, K), check=False)
            for _ in range(count)
        ]
        xs = x.view(1, K)
        got = [sk.linear(xs, Ac) for Ac in matrices][0]  # caches each copy's row order first
        err = ((got[0].double() - want).norm() / want.norm()).item()
        timed["linear"] = (
            rotated(lambda Ac: sk.linear(xs, Ac), matrices) if err < 1e-2 else float("nan")
        )
        parts = [(Ac.row_offsets, Ac.pattern.column_indices_int16(), Ac.values, None)
                 for Ac in matrices]  # fmt: skip
        lined = [line_form(Ac) for Ac in matrices] if any("/l" in n for n in RINGS) else []
        if lined:
            slots = lined[0][0][-1].item()
            print(f"{M}x{K} {sparsity:.0%}: line form {slots / A.nnz:.3f} slots an entry")
        for name in RINGS:
            options = parse(name)
            programs = spmm_csr_ring.programs_for(DEVICE, options.pop("programs_per_sm"))
            chosen = lined if options.pop("line_form") else parts
            splits = [spmm_csr_ring.row_splits(p[0], programs) for p in chosen]
            runs = list(zip(chosen, splits, strict=True))

            def run(c, options=options):
                (row_offsets, columns, values, bases), splits = c
                spmm_csr_ring.spmm_csr_ring(
                    row_offsets=row_offsets, column_indices=columns, values=values, x=x,
                    bias=None, out=out, activation="none", splits=splits, bases=bases,
                    **options,
                )  # fmt: skip

            out.fill_(float("nan"))
            run(runs[0])
            err = ((out.double() - want).norm() / want.norm()).item()
            timed[name] = rotated(run, runs) if err < 1e-2 else float("nan")
        label = f"{M}x{K} {sparsity:.0%}"
        print(label, f"copies {count}", {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((label, timed))
    names = list(table[0][1])
    print(f"\n{'case':<16} " + " ".join(f"{n:>18}" for n in names))
    for label, timed in table:
        print(f"{label:<16} " + " ".join(f"{timed.get(n, float('nan')):18.1f}" for n in names))


if __name__ == "__main__":
    main()
