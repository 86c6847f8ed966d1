"""CSR SDDMM on tensor cores (kernels/sddmm_tiles.py) against the per-entry gather kernel
(kernels/sddmm_csr.py), the whole product on cuBLAS plus a gather (the "dense" route), cuSPARSE
(torch.sparse.sampled_addmm, fp32 only) and the dense product alone, on uniform random
patterns and the Sparse Transformer's local window. Tile configurations (block_m, block_n,
block_k, warps, stages, and programs an SM walking tiles at K within one step, the next
tile prefetched into registers with /r: CONFIGS=64x64x64/w4/s5/p2,64x64x64/w8/s1/p2/r,...)
are timed each; float32 runs at "ieee" (torch's default "highest"
precision) and, as a separate column, "tf32". CUDA-graph medians in us (inputs stay in L2
between runs: the harness's cold-L2 suite gives the figures of record). Sets sddmm_tuning.SDDMM_TILES_*
and the SDDMM_DENSE_* densities; prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/sddmm_tiles_sweep.py
    KS=64,256 DENSITIES=0.02,0.1 DTYPES=bf16 BUDGET_S=100 ...
"""

import os
import time

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import sddmm_tiles, sddmm_tuning
from sparsekernels.kernels.sddmm_csr import sddmm_csr
from sparsekernels.ops import _dense

BUDGET_S = float(os.environ.get("BUDGET_S", 200))
START = time.time()
torch.manual_seed(0)


def _env(name: str, default: str) -> list[str]:
    return os.environ.get(name, default).split(",")


SIZE = int(os.environ.get("SIZE", 4096))
KS = [int(k) for k in _env("KS", "64,256,2048")]
DENSITIES = [float(d) for d in _env("DENSITIES", "0.005,0.02,0.05,0.1,0.3,0.5")]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
DTYPES = {name: DTYPES[name] for name in _env("DTYPES", "bf16,fp32")}
CONFIGS = [
    (64, 64, 64, 4, 3, 0, False),
    (128, 64, 64, 4, 3, 0, False),
    (128, 128, 64, 8, 3, 0, False),
    (32, 64, 64, 4, 2, 0, False),
]


def _config(text: str) -> tuple:
    """ "{bm}x{bn}x{bk}/w{warps}/s{stages}[/p{programs an SM}][/r]": /p walks tiles (K <= bk),
    /r with it prefetches the next tile into registers."""
    shape, *rest = text.split("/")
    options = {part[0]: int(part[1:]) for part in rest if part != "r"}
    walk = (options.get("p", 0), "r" in rest)
    return (*(int(v) for v in shape.split("x")), options["w"], options["s"], *walk)


if "CONFIGS" in os.environ:  # e.g. 64x64x64/w4/s1,64x64x64/w4/s3/p2
    CONFIGS = [_config(text) for text in _env("CONFIGS", "")]
SMS = torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 1


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def patterns():
    rows = torch.arange(SIZE, device="cuda")
    local = (rows[:, None] - rows[None, :]).abs() < 128
    yield "local:256 x16 heads", sk.CSRMatrix.from_dense(local.float()), 16
    for density in DENSITIES:
        mask = torch.rand(SIZE, SIZE, device="cuda") < density
        yield f"random d={density}", sk.CSRMatrix.from_dense(mask.float()), 1


table = []
print(f"# {torch.cuda.get_device_name()}, {SIZE}x{SIZE} output, us")
for name, P, heads in patterns():
    ro, ci = P.row_offsets, P.column_indices
    row_order = P.pattern.row_order()
    plans = {}
    for bm, bn, *_ in CONFIGS:
        if (bm, bn) not in plans:
            torch.cuda.synchronize()
            t0 = time.time()
            plan = sddmm_tiles.build_plan(ro, ci, SIZE, bm, bn)
            torch.cuda.synchronize()
            built = (time.time() - t0) * 1e3
            plans[bm, bn] = plan
            print(f"{name}: plan {bm}x{bn} fill {plan.fill:.3f} map {tuple(plan.columns.shape)}"
                  f" built in {built:.1f} ms")  # fmt: skip
    for K in KS:
        for dname, dtype in DTYPES.items():
            if time.time() - START > BUDGET_S:
                break
            shape = (heads, SIZE, K) if heads > 1 else (SIZE, K)
            x = torch.randn(shape, device="cuda", dtype=dtype)
            y = torch.randn(shape, device="cuda", dtype=dtype)
            rows = _dense.flat_positions(ro, ci, SIZE)
            want = (x.double() @ y.double().transpose(-1, -2)).flatten(-2)[..., rows]
            want = want.reshape(heads, -1)
            out = torch.empty(heads, P.nnz, device="cuda", dtype=dtype)

            def ok(fn) -> bool:
                out.fill_(float("nan"))
                fn()
                err = ((out.double() - want).norm() / want.norm()).item()
                return err < (1e-2 if dtype != torch.float32 else 1e-5)

            times = {}
            c = sddmm_tuning.sddmm_csr_config(K, P.nnz, SIZE)
            gather = lambda: sddmm_csr(row_offsets=ro, column_indices=ci, x=x, y=y,  # noqa: E731
                                       row_order=row_order, out=out, block_nnz=c.block_nnz,
                                       block_k=c.block_k, num_warps=c.num_warps)  # fmt: skip
            times["gather"] = bench(gather) if ok(gather) else float("nan")
            times["dense route"] = bench(lambda: _dense.sddmm_csr(ro, ci, x, y))
            times["dense product"] = bench(lambda: x @ y.transpose(-1, -2))
            if dtype == torch.float32 and heads == 1:
                T = P.to_torch()
                times["cusparse"] = bench(lambda: torch.sparse.sampled_addmm(T, x, y.t(), beta=0))
            variants = [("ieee", c) for c in CONFIGS]
            if dtype == torch.float32:
                variants += [("tf32", c) for c in CONFIGS]
            for precision, config in variants:
                bm, bn, bk, warps, stages, per_sm, prefetch = config
                plan = plans[bm, bn]
                programs = per_sm * SMS if per_sm and bk >= K else None
                if per_sm and programs is None:
                    continue  # (a walk needs K within one step)
                fn = lambda: sddmm_tiles.sddmm_tiles(plan=plan, x=x, y=y, out=out,  # noqa: E731
                                                     block_k=bk, precision=precision,
                                                     num_warps=warps, num_stages=stages,
                                                     programs=programs,
                                                     prefetch=prefetch)  # fmt: skip
                try:
                    good = ok(fn) if precision == "ieee" else True
                    times[f"{precision} {config}"] = bench(fn) if good else float("nan")
                except Exception as error:  # noqa: BLE001 - a config that fails is reported
                    print(f"  {config} {precision}: {type(error).__name__}: {error}"[:300])
                    times[f"{precision} {config}"] = float("nan")
            case = f"{name} K={K} {dname}"
            print(case, {k: round(v, 1) for k, v in times.items()}, flush=True)
            table.append((case, times))

print(
    f"\n{'case':<34} {'gather':>7} {'dense':>7} {'product':>7} {'cuSP':>7} {'tiles':>7} "
    f"{'tf32':>7}  best tile"
)
nan = float("nan")
for case, times in table:

    def best(prefix):
        found = {k: v for k, v in times.items() if k.startswith(prefix) and v == v}
        return (min(found, key=found.get), min(found.values())) if found else ("-", nan)

    print(
        f"{case:<34} {times['gather']:7.1f} {times['dense route']:7.1f} "
        f"{times['dense product']:7.1f} {times.get('cusparse', nan):7.1f} "
        f"{best('ieee')[1]:7.1f} {best('tf32')[1]:7.1f}  "
        f"{best('ieee')[0][5:]}"
    )
