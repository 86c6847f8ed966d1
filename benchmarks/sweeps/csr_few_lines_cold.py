"""The CSR few-token walk on the line layout (kernels/spmm_csr_few_lines.py: a byte a column,
B's rows read as vectors by inline PTX) timed cold against linear's route (the few-token walk
to 8 tokens, the scatter backend from 9) and cuBLAS on the dense weight, on magnitude-pruned
bf16 LLM weights at 2-16 tokens: rotated weight copies that together overflow L2 twice,
CUDA-graph medians in us a call, each form checked against float64 first (NaN where wrong).
`linear` is the route with csr_lines_tuning.CSR_FEW_LINES off, `linear+lines` with it on; the
configurations ("RxB/wW": R rows a program, B slots a step, W warps; "/l16": 16-slot lines;
"/v": the CSR's own values read through an in-place layout, only the lines not read in place
copied)
run the kernel with the PTX gather, `lines/load` with tl.load's at the tuning's configuration;
`linear+l16` the route taking 16-slot lines too (csr_lines_tuning.CSR_FEW_LINE_LENGTHS (64,
16): a 90% weight's layout), `linear+v` the route reading the values in place
(CSR_LINES_VALUES_IN_PLACE). Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_few_lines_cold.py
SHAPES, SPARSITIES, TOKENS and LINE_CONFIGS (environment) replace the grid.
"""

import os

import torch
from csr_token_cold import rotated

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.formats._line_layout import build
from sparsekernels.kernels import csr_lines_tuning, spmm_csr_few_lines
from sparsekernels.ops import _launch_plans
from sparsekernels.ops._layout import padded_rows

# Each call through the route as the tuning stands (a launch plan would replay what an earlier
# call launched, whatever CSR_FEW_LINES says now); graphs hide the host's time anyway.
_launch_plans.ENABLED = False

DEVICE = torch.device("cuda")
SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "SHAPES", "4096x14336,14336x4096,28672x4096,4096x4096").split(",")]  # fmt: skip
SPARSITIES = [float(s) for s in os.environ.get("SPARSITIES", "0.7").split(",")]
TOKENS = [int(t) for t in os.environ.get("TOKENS", "2,4,8,16").split(",")]
CONFIGS = os.environ.get("LINE_CONFIGS", "2x256/w2,2x128/w2,2x64/w2,4x128/w4,1x128/w1").split(",")


def parse(name: str) -> tuple[int, int, int, int, bool]:
    """ "RxB/wW", "/l16" for 16-slot lines, "/v" for values in place: (rows, block, warps,
    line, in place)."""
    rows, rest = name.split("x")
    block, warps, *options = rest.split("/")
    return int(rows), int(block), int(warps[1:]), 16 if "l16" in options else 64, "v" in options


def main():
    table = []
    for (M, K), sparsity in [(s, p) for s in SHAPES for p in SPARSITIES]:
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
        dense = A.to_dense()
        count = max(2, copies_for(A.values.nbytes * 3, DEVICE))
        matrices = [
            sk.CSRMatrix(A.row_offsets.clone(), A.column_indices.clone(), A.values.clone(),
                         (M, K), check=False)
            for _ in range(count)
        ]  # fmt: skip
        dense_copies = [dense.clone() for _ in range(max(2, copies_for(dense.nbytes, DEVICE)))]
        lined = {key: [] for key in ((64, False), (16, False), (64, True), (16, True))}
        for Ac, (line, in_place) in [(Ac, key) for Ac in matrices for key in lined]:
            layout = build(Ac.row_offsets, Ac.column_indices, K, 4.0, row_sequence=Ac.row_order,
                           line=line, in_place=in_place)  # fmt: skip
            values = Ac.values if in_place else layout.pack(Ac.values)
            rest = layout.pack_rest(Ac.values) if in_place else None
            lined[line, in_place].append((layout, values, rest))
        for tokens in TOKENS:
            x = torch.randn(tokens, K, device="cuda", dtype=torch.bfloat16)
            want = x.double() @ dense.double().t()
            out = torch.empty(M, tokens, device="cuda", dtype=torch.bfloat16)
            b = padded_rows(x.t())

            def checked(fn, copies):  # (every copy run first: the route's caches built uncaptured)
                got = [fn(c) for c in copies][0]
                err = ((got.double() - want).norm() / want.norm()).item()
                return rotated(fn, copies) if err < 1e-2 else float("nan")

            timed = {"cublas": rotated(lambda d: x @ d.t(), dense_copies)}
            lengths = csr_lines_tuning.CSR_FEW_LINE_LENGTHS
            for name, routed in (("linear", False), ("linear+lines", True), ("linear+l16", True),
                                 ("linear+v", True)):  # fmt: skip
                csr_lines_tuning.CSR_FEW_LINES = routed
                if name == "linear+l16":
                    csr_lines_tuning.CSR_FEW_LINE_LENGTHS = (64, 16)
                csr_lines_tuning.CSR_LINES_VALUES_IN_PLACE = name == "linear+v"
                try:
                    timed[name] = checked(lambda Ac: sk.linear(x, Ac), matrices)
                finally:
                    csr_lines_tuning.CSR_FEW_LINES = False
                    csr_lines_tuning.CSR_FEW_LINE_LENGTHS = lengths
                    csr_lines_tuning.CSR_LINES_VALUES_IN_PLACE = False
            csr_lines_tuning.CSR_FEW_LINES = True
            library = csr_lines_tuning.spmm_csr_few_lines_config(A.nnz, M, tokens, torch.bfloat16)
            csr_lines_tuning.CSR_FEW_LINES = False
            default = CONFIGS[0]  # (a weight the route refuses: the first configuration)
            if library is not None:
                default = f"{library.rows_per_program}x{library.block}/w{library.num_warps}"
            for name in [*CONFIGS, "lines/load"]:
                asm = name != "lines/load"
                rows, block, warps, line, in_place = parse(name if asm else default)

                def run(c, rows=rows, block=block, warps=warps, asm=asm, line=line,
                        in_place=in_place):  # fmt: skip
                    layout, values, rest = c
                    spmm_csr_few_lines.spmm_csr_few_lines(
                        row_slots=layout.row_slots, offsets=layout.offsets, heads=layout.heads,
                        values=values, b=b, bias=None, row_order=layout.row_sequence, out=out,
                        activation="none", rows_per_program=rows, block=block,
                        num_warps=warps, row_sequence=layout.row_sequence, asm_gather=asm,
                        line=line, in_place=layout if in_place else None, rest=rest,
                        finite_values=in_place,
                    )  # fmt: skip
                    return out.t()

                out.fill_(float("nan"))
                timed[name] = checked(run, lined[line, in_place])
            label = f"{M}x{K} {sparsity:.0%} t{tokens}"
            print(label, {k: round(v, 1) for k, v in timed.items()}, flush=True)
            table.append((label, timed))
    names = list(table[0][1])
    print(f"\n{'case':<22} " + " ".join(f"{n:>12}" for n in names))
    for label, timed in table:
        print(f"{label:<22} " + " ".join(f"{timed.get(n, float('nan')):12.1f}" for n in names))


if __name__ == "__main__":
    main()
