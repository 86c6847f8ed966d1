"""Why the in-place line walk is slower than the packed one (H200, 70%: 21.6 against 19.3 us on
4096 x 14336; results/nvidia-h200/2026-12-04/at-c07cd00): its code or its data? Three forms of
the routed one-token walk (2 rows a program, 256 slots a step, 2 warps, rows by sequence, the
held count in the PTX gather), timed cold as csr_lines_cold.py times them:
`packed` (the packed values), `packed/ip` (the in-place code reading the packed values: every
line's window its own slots, so the code is the in-place walk's and the data the packed
layout's), `in-place` (the CSR's own values). If `packed/ip` is as slow as `in-place` the code
costs; if as fast as `packed`, where the values lie does.
    PYTHONPATH=src python3 benchmarks/sweeps/csr_in_place_probe.py
SHAPES (environment, "4096x14336,...") and SPARSITIES ("0.7,0.9") replace the grid.
"""

import itertools
import os
import types

import torch
from _csr_cases import csr_case
from csr_token_cold import rotated

from sparsekernels.bench.harness import copies_for
from sparsekernels.formats._line_layout import build
from sparsekernels.kernels import spmm_csr_token_lines as kernel

DEVICE = torch.device("cuda")
SHAPES = [(4096, 14336), (14336, 4096)]
if os.environ.get("SHAPES"):
    SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ["SHAPES"].split(",")]
SPARSITIES = [float(s) for s in os.environ.get("SPARSITIES", "0.7").split(",")]
FORMS = ("packed", "packed/ip", "in-place")


def copy_forms(A, K: int) -> dict:
    """Each form's kernel arguments for one copy of the weight."""
    order = A.row_order.clone()
    packed_layout = build(A.row_offsets, A.column_indices, K, 4.0, row_sequence=order)
    packed = packed_layout.pack(A.values)
    own_slots = torch.arange(packed_layout.lines, device=DEVICE, dtype=torch.int32) * 64
    layout = build(A.row_offsets, A.column_indices, K, 4.0, row_sequence=order, in_place=True)
    values = A.values.clone()
    return {
        "packed": dict(lay=packed_layout, values=packed, in_place=None, rest=None),
        "packed/ip": dict(
            lay=packed_layout,
            values=packed,
            rest=packed,
            in_place=types.SimpleNamespace(windows=own_slots),
        ),  # fmt: skip
        "in-place": dict(
            lay=layout, values=values, in_place=layout, rest=layout.pack_rest(values)
        ),  # fmt: skip
        "order": order,
    }


def main():
    kernel.check_in_place = lambda *args: None  # (packed/ip's stand-in layout)
    table = []
    for (M, K), sparsity in itertools.product(SHAPES, SPARSITIES):
        case = csr_case(M, K, sparsity)
        A, x, want = (case[k] for k in ("A", "x", "want"))
        out = torch.empty(M, device=DEVICE, dtype=torch.bfloat16)
        count = max(2, copies_for(A.values.nbytes * 2, DEVICE))
        copies = [copy_forms(A, K) for _ in range(count)]
        timed = {}
        for form in FORMS:

            def run(c, form=form):
                f = c[form]
                return kernel.spmm_csr_token_lines(
                    row_slots=f["lay"].row_slots, offsets=f["lay"].offsets,
                    heads=f["lay"].heads, values=f["values"], in_place=f["in_place"],
                    rest=f["rest"], finite_values=True, x=x, bias=None, row_order=c["order"],
                    out=out, activation="none", rows_per_program=2, block=256, num_warps=2,
                    asm_gather=True, row_sequence=c["order"], held_in_asm=True,
                )  # fmt: skip

            out.fill_(float("nan"))
            got = run(copies[0]).double()
            err = ((got - want.reshape(-1)).norm() / want.norm()).item()
            timed[form] = rotated(run, copies) if err < 1e-2 else float("nan")
        label = f"{M}x{K} {sparsity:.0%}"
        print(label, {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((label, timed))
    print(f"\n{'case':<16} " + " ".join(f"{n:>12}" for n in FORMS))
    for label, timed in table:
        print(f"{label:<16} " + " ".join(f"{timed[n]:12.1f}" for n in FORMS))


if __name__ == "__main__":
    main()
