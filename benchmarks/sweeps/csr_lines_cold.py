"""The CSR one-token kernel on the line layout (kernels/spmm_csr_token_lines.py: a byte a column
from each 64-entry line's base) timed cold against linear's route (the plain one-token walk,
4 bytes an entry with int16 columns) and dense cuBLAS, on magnitude-pruned bf16 LLM weights at
70% and 90%: rotated weight copies that together overflow L2 twice, CUDA-graph medians in us a
call, each form checked against float64 first. `linear` is the route with
csr_lines_tuning.CSR_TOKEN_LINES off, `linear+lines` the route as the tuning has it; the line configurations gather x by
inline PTX (kernels/_gather.py), `lines/load` by tl.load; `token/asm` is the plain one-token
walk at the library's configuration with the inline-PTX gather (tuning.CSR_TOKEN_ASM_GATHER),
`token/u` with its middle steps unmasked (tuning.CSR_TOKEN_UNMASKED_MIDDLE), `token/asm+u`
both.
Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_lines_cold.py
LINE_CONFIGS ("RxB/wW": R rows a program, B slots a step, W warps; "/s": rows stored in row
order, "/a2": the weight two steps ahead, "/h": the held count compared in the PTX gather, "/v":
the CSR's own values read through an in-place layout (its aligned lines in place, the rest
from a small copy), the next rows' values past a line's entries unmasked (finite_values),
"/vm": masked, "/l16": lines of 16 slots, "/n": rows visited in their own order, not longest
first: an in-place walk then streams the values in memory order) and SHAPES
(environment) replace the grid. `linear+l16` is the route with 16-slot lines allowed
(csr_lines_tuning.CSR_LINE_LENGTHS (64, 16): a 90% weight's layout), `linear+v` the route
reading the values in place (CSR_LINES_VALUES_IN_PLACE).
"""

import itertools
import os

import torch
from _csr_cases import csr_case
from csr_token_cold import rotated

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.formats._line_layout import build
from sparsekernels.kernels import csr_lines_tuning, spmm_csr_token, spmm_csr_token_lines, tuning

DEVICE = torch.device("cuda")
SHAPES = [(4096, 14336), (14336, 4096), (4096, 4096), (28672, 4096)]
if os.environ.get("SHAPES"):  # SHAPES=14336x4096,...
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ["SHAPES"].split(",")]
CONFIGS = os.environ.get("LINE_CONFIGS", "1x256/w1,2x256/w1,1x512/w1,1x512/w2,4x256/w4").split(",")


def parse(name: str) -> tuple[int, int, int, bool, int, bool, str, int, bool]:
    """ "RxB/wW" with options "/s" (rows stored in row order), "/a2" (two steps ahead), "/h"
    (the held count compared in the PTX gather), "/v" or "/vm" (values read in place, other
    rows' unmasked or masked: the item "v", "vm" or ""), "/l16" (16-slot lines) and "/n"
    (rows visited in their own order: the last item)."""
    rows, rest = name.split("x")
    block, warps, *options = rest.split("/")
    ahead = 2 if "a2" in options else 1
    in_place = "v" if "v" in options else "vm" if "vm" in options else ""
    natural = "n" in options
    return (int(rows), int(block), int(warps[1:]), "s" in options and not natural, ahead,
            "h" in options, in_place, 16 if "l16" in options else 64, natural)  # fmt: skip


def main():
    table = []
    for (M, K), sparsity in itertools.product(SHAPES, (0.7, 0.9)):
        case = csr_case(M, K, sparsity)
        w, A, cols, x, want = (case[k] for k in ("w", "A", "cols", "x", "want"))
        out = torch.empty(M, device="cuda", dtype=torch.bfloat16)
        in_memory_order = torch.arange(M, device=DEVICE, dtype=torch.int32)
        weight_bytes = A.values.nbytes + cols.nbytes + A.row_offsets.nbytes
        count = max(2, copies_for(weight_bytes, DEVICE))
        dense_copies = [w.clone() for _ in range(max(2, copies_for(w.nbytes, DEVICE)))]
        timed = {"dense": rotated(lambda d: x @ d.t(), dense_copies)}
        matrices = [
            sk.CSRMatrix(A.row_offsets.clone(), cols.clone(), A.values.clone(), (M, K), check=False)
            for _ in range(count)
        ]
        xs = x.view(1, K)

        def checked(fn, copies):  # (every copy run first: the route's caches built uncaptured)
            got = [fn(c) for c in copies][0].reshape(-1)
            err = ((got.double() - want).norm() / want.norm()).item()
            return rotated(fn, copies) if err < 1e-2 else float("nan")

        routed = csr_lines_tuning.CSR_TOKEN_LINES
        csr_lines_tuning.CSR_TOKEN_LINES = False  # `linear`: the plain walk
        try:
            timed["linear"] = checked(lambda Ac: sk.linear(xs, Ac), matrices)
        finally:
            csr_lines_tuning.CSR_TOKEN_LINES = routed
        layout = build(A.row_offsets, A.column_indices, K, most_slots=4.0)
        slots = layout.lines * 64 / A.nnz
        timed["linear+lines"] = checked(lambda Ac: sk.linear(xs, Ac), matrices)
        for name, setting, value in (("linear+l16", "CSR_LINE_LENGTHS", (64, 16)),
                                     ("linear+v", "CSR_LINES_VALUES_IN_PLACE", True)):  # fmt: skip
            kept = getattr(csr_lines_tuning, setting)
            setattr(csr_lines_tuning, setting, value)
            try:  # (fresh pattern tensors: the layouts are kept by their identity)
                fresh = [sk.CSRMatrix(Ac.row_offsets.clone(), Ac.column_indices.clone(),
                                      Ac.values, (M, K), check=False) for Ac in matrices]  # fmt: skip
                timed[name] = checked(lambda Ac: sk.linear(xs, Ac), fresh)
            finally:
                setattr(csr_lines_tuning, setting, kept)
        token = tuning.spmm_csr_token_config(A.nnz, M)

        for name, asm, unmasked in (("token/asm", True, False), ("token/u", False, True),
                                    ("token/asm+u", True, True)):  # fmt: skip

            def plain(Ac, token=token, asm=asm, unmasked=unmasked):
                return spmm_csr_token.spmm_csr_token(
                    row_offsets=Ac.row_offsets, column_indices=Ac.pattern.column_indices_int16(),
                    values=Ac.values, x=x, bias=None, row_order=Ac.row_order, out=out,
                    activation="none", rows_per_program=token.rows_per_program,
                    block=token.block, num_warps=token.num_warps, asm_gather=asm,
                    unmasked_middle=unmasked,
                )  # fmt: skip

            out.fill_(float("nan"))
            timed[name] = checked(plain, matrices)
        # by (sequence, line, in place): (layout, packed values (in place: pack_rest's), row
        # order, values) a copy
        lined = {}
        for by_sequence, line, in_place in itertools.product((False, True), (64, 16),
                                                             (False, True)):  # fmt: skip
            if line == 16 and not any("l16" in c for c in CONFIGS):
                continue
            if in_place and not any("/v" in c for c in CONFIGS):
                continue
            lined[by_sequence, line, in_place] = []
            for Ac in matrices:
                sequence = Ac.row_order if by_sequence else None
                copy = build(Ac.row_offsets, Ac.column_indices, K, 4.0, row_sequence=sequence,
                             line=line, in_place=in_place)  # fmt: skip
                packed = copy.pack_rest(Ac.values) if in_place else copy.pack(Ac.values)
                lined[by_sequence, line, in_place].append((copy, packed, Ac.row_order,
                                                           Ac.values))  # fmt: skip
        key16 = (True, 16, False)
        slots16 = (lined[key16][0][0].lines * 16 / A.nnz) if key16 in lined else 0.0
        for name in [*CONFIGS, "lines/load"]:
            asm = name != "lines/load"
            default = (1, 256, 1, False, 1, False, "", 64, False)
            rows, block, warps, by_sequence, ahead, held, in_place, line, natural = (
                parse(name) if asm else default)  # fmt: skip

            def run(c, rows=rows, block=block, warps=warps, asm=asm, ahead=ahead, held=held,
                    in_place=in_place, line=line, natural=natural):  # fmt: skip
                layout, packed, order, values = c
                order = in_memory_order if natural else order
                return spmm_csr_token_lines.spmm_csr_token_lines(
                    row_slots=layout.row_slots, offsets=layout.offsets, heads=layout.heads,
                    values=values if in_place else packed,
                    in_place=layout if in_place else None, rest=packed if in_place else None,
                    finite_values=in_place == "v", x=x,
                    bias=None, row_order=order, out=out,
                    activation="none", rows_per_program=rows, block=block, num_warps=warps,
                    asm_gather=asm, row_sequence=layout.row_sequence, ahead=ahead,
                    held_in_asm=held, line=line,
                )  # fmt: skip

            out.fill_(float("nan"))
            timed[name] = checked(run, lined[by_sequence, line, bool(in_place)])
        label = f"{M}x{K} {sparsity:.0%}"
        print(label, f"copies {count} slots/entry {slots:.3f} (16-slot lines {slots16:.3f})",
              {k: round(v, 1) for k, v in timed.items()}, flush=True)  # fmt: skip
        table.append((label, timed))
    names = list(table[0][1])
    print(f"\n{'case':<16} " + " ".join(f"{n:>12}" for n in names))
    for label, timed in table:
        print(f"{label:<16} " + " ".join(f"{timed.get(n, float('nan')):12.1f}" for n in names))


if __name__ == "__main__":
    main()
