"""The blocked CSR SDDMM walk (kernels/sddmm_blocked.py) over its blocks, steps and warps,
against the library's route (sk.sddmm), the per-entry kernel, cuSPARSE's SDDMM
(torch.sparse.sampled_addmm, fp32) and the dense product (X @ Y^T).

Issue 3 wants 5x cuSPARSE in fp32 at 90-98% sparsity; the per-entry kernel reads each entry's Y
row from L2 (fp32 K = 64: 256 bytes an entry), and sat at 1.1-1.8x. The blocked walk reads a
block's X and Y rows from L2 once, then from L1: how large a block an SM's L1 holds with the
programs resident beside it is what this measures: every resident program brings its own
block, so small programs (two warps: a dozen an SM) thrash L1 where one or two wide ones (8-16
warps, 128-256 entries a step) keep theirs. Uniform random patterns on 4096 x 4096 at
2-30% stored, K = 64 and 256, fp32 and bf16, one matrix (the sddmm suite's cases), and 16
matrices sharing a pattern (attention's heads; no cuSPARSE peer there).

Forms: `b{R}x{C}/e{entries a step}/w{warps}`, optionally `/c{chunk}` (a block cut into
pieces of at most that many entries), `/k{K a step}` (default 64 bytes: fp32 16, bf16 32) and
`/p{programs an SM}` (persistent: that many programs an SM walk every piece, so as many blocks
share an SM's L1) and `/a` (a step's cells loaded two steps before it, its operands one step
where K is one step, as with /k64 at K = 64 in fp32; a form pipelined by the compiler instead,
cp.async into shared memory, ran 2-3x slower and was dropped: results/nvidia-h100/
2026-12-06/at-c87015f). "staged[/w{warps}][/e{entries a step}][/b{R}x{C}]" is
kernels/sddmm_staged.py (rows staged in shared memory; fp32, one matrix, K 16-64).
CUDA-graph medians in us, the operands warm in L2 as a preceding product leaves them; each
form checked against float64 first (a form that fails prints "wrong" and is not timed).
Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/sddmm_blocked.py
Environment: DTYPES=fp32,bf16 KS=64,256 DENSITIES=0.02,0.05,0.1,0.3 BATCHES=1,16 FORMS=...
BUDGET_S=240.
"""

import itertools
import os
import time

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.cases import _pattern_from_mask
from sparsekernels.kernels import sddmm_blocked, sddmm_staged, sddmm_tuning
from sparsekernels.kernels.sddmm_csr import sddmm_csr

BUDGET_S = float(os.environ.get("BUDGET_S", 240))
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
PICKED = os.environ.get("DTYPES", "fp32,bf16").split(",")
KS = [int(k) for k in os.environ.get("KS", "64,256").split(",")]
DENSITIES = [float(d) for d in os.environ.get("DENSITIES", "0.02,0.05,0.1,0.3").split(",")]
BATCHES = [int(b) for b in os.environ.get("BATCHES", "1,16").split(",")]
SIZE = int(os.environ.get("SIZE", 4096))
FORMS = os.environ.get(
    "FORMS",
    "auto,b64x64/e32/w2,b128x128/e32/w2,b256x256/e32/w2,b128x128/e128/w8,b192x192/e128/w8,"
    "b256x256/e128/w8,b256x256/e256/w16,b384x384/e256/w16,b256x256/e128/w8/c2048,"
    "b128x128/e32/w4/p4,b192x192/e64/w8/p2,b256x256/e64/w8/p1,b96x96/e32/w2/p8,"
    "b256x256/e128/w8/k64,b128x128/e32/w4/p4/k64",
).split(",")


SMS = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 1


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def parse(form: str, K: int, itemsize: int) -> dict:
    """A form's blocks, chunk, step and warps ("auto": sddmm_tuning's configuration)."""
    if form == "auto":
        c = sddmm_tuning.sddmm_blocked_config(K, itemsize)
        return dict(block=(c.block_rows, c.block_cols), chunk=c.chunk, block_nnz=c.block_nnz,
                    block_k=c.block_k, warps=c.num_warps, per_sm=0, ahead=False)  # fmt: skip
    parts = form.split("/")
    rows, cols = (int(v) for v in parts[0][1:].split("x"))
    block_k = sddmm_tuning.sddmm_blocked_config(K, itemsize).block_k
    got = dict(block=(rows, cols), chunk=2**30, block_nnz=32, block_k=block_k, warps=2,
               per_sm=0, ahead=False)  # fmt: skip
    for p in parts[1:]:
        if p == "a":
            got["ahead"] = True
            continue
        key = {"e": "block_nnz", "w": "warps", "c": "chunk", "k": "block_k", "p": "per_sm"}[p[0]]
        got[key] = int(p[1:])
    return got


def staged_run(form: str, P, X, Y, out, batch: int):
    """The staged kernel (kernels/sddmm_staged.py: fp32, one matrix, K 16-64) as
    "staged[/w{warps}][/e{entries a step}][/b{R}x{C}]", or None where it does not apply."""
    K = X.shape[-1]
    if X.dtype != torch.float32 or batch != 1 or K not in sddmm_staged.KS:
        return None
    options = dict(w=4, e=64, b=None)
    for part in form.split("/")[1:]:
        options[part[0]] = tuple(int(v) for v in part[1:].split("x")) if part[0] == "b" else (
            int(part[1:]))  # fmt: skip
    c = sddmm_staged.config(K, options["w"], options["e"], options["b"])
    plan = sddmm_blocked.build_plan(P.row_offsets, P.column_indices, SIZE, c["BR"], c["BC"],
                                    2**30)  # fmt: skip
    return lambda: sddmm_staged.sddmm_staged(
        plan=plan, x=X, y=Y, out=out.view(-1), num_warps=options["w"], block_nnz=options["e"]
    )


def main():
    started, table = time.time(), []
    g = torch.Generator(device="cuda").manual_seed(0)
    cases = itertools.product(KS, PICKED, DENSITIES, BATCHES)  # K = 64 in both dtypes first
    for K, name, density, batch in cases:
        if time.time() - started > BUDGET_S:
            print("budget spent", flush=True)
            break
        dtype = DTYPES[name]
        mask = torch.rand(SIZE, SIZE, generator=g, device="cuda") < density
        P = _pattern_from_mask(mask, dtype)
        shape = (batch, SIZE, K) if batch > 1 else (SIZE, K)
        X = torch.randn(shape, generator=g, device="cuda").to(dtype)
        Y = torch.randn(shape, generator=g, device="cuda").to(dtype)
        rows, cols = P.pattern.row_indices().long(), P.column_indices.long()
        want = (X.double() @ Y.double().transpose(-1, -2))[..., rows, cols].reshape(-1, P.nnz)
        timed = {"dense": bench(lambda: X @ Y.transpose(-1, -2)),
                 "route": bench(lambda: sk.sddmm(X, Y, P))}  # fmt: skip
        if dtype == torch.float32 and batch == 1:
            T = P.to_torch()
            timed["cusparse"] = bench(lambda: torch.sparse.sampled_addmm(T, X, Y.t(), beta=0.0))
        out = torch.empty(batch, P.nnz, device="cuda", dtype=dtype)
        entry = sddmm_tuning.sddmm_csr_config(K, P.nnz, SIZE)

        def per_entry():
            sddmm_csr(row_offsets=P.row_offsets, column_indices=P.column_indices, x=X, y=Y,
                      row_order=P.row_order, out=out, block_nnz=entry.block_nnz,
                      block_k=entry.block_k, num_warps=entry.num_warps)  # fmt: skip

        runs = {"entry": per_entry}
        for form in FORMS:
            if form.startswith("staged"):
                staged = staged_run(form, P, X, Y, out, batch)
                if staged is not None:
                    runs[form] = staged
                continue
            f = parse(form, K, X.element_size())
            plan = sddmm_blocked.build_plan(P.row_offsets, P.column_indices, SIZE, *f["block"],
                                            f["chunk"])  # fmt: skip

            programs = f["per_sm"] * SMS or None

            def blocked(plan=plan, f=f, programs=programs):
                sddmm_blocked.sddmm_blocked(plan=plan, x=X, y=Y, out=out,
                                            block_nnz=f["block_nnz"], block_k=f["block_k"],
                                            num_warps=f["warps"], programs=programs,
                                            ahead=f["ahead"])  # fmt: skip

            runs[form] = blocked
        for label, run in runs.items():
            out.fill_(float("nan"))
            try:
                run()
            except Exception as error:  # noqa: BLE001 - a form that fails is reported
                print(f"  {label}: {type(error).__name__}: {error}"[:300], flush=True)
                timed[label] = float("nan")
                continue
            err = ((out.double() - want).norm() / want.norm()).item()
            timed[label] = bench(run) if err < 1e-2 else float("nan")
            if err >= 1e-2:
                print(f"  {label} wrong: relative error {err:.2e}", flush=True)
        case = f"{name} K={K} {density:.0%} x{batch}"
        print(case, {k: round(v, 1) for k, v in timed.items()}, flush=True)
        table.append((case, timed))
    names = ["dense", "cusparse", "route", "entry", *FORMS]
    print(f"\n{'case':<20} " + " ".join(f"{c[:14]:>14}" for c in names))
    for case, timed in table:
        print(f"{case:<20} " + " ".join(f"{timed.get(c, float('nan')):14.1f}" for c in names))


if __name__ == "__main__":
    main()
