"""The row softmax (kernels/softmax_csr.py) with 1, 2, 4 and 8 heads of a row per program
(sddmm_tuning.SOFTMAX_MAX_HEADS and SOFTMAX_MAX_WARPS pick the default), forward, on the
softmax suite's attention patterns at L = 4096 with 16 heads, bf16 and fp32; GB/s on the values
read and written against the copy bandwidth measured here (the target: 70% of it). CUDA-graph
medians of one launch per copy of the values, the copies together larger than L2.
Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/softmax_heads_sweep.py
    KINDS=local:256 DTYPES=bf16 HEADS=1,4 BUDGET_S=60 ...
"""

import os
import time

import torch
from triton.testing import do_bench_cudagraph

from sparsekernels.bench.cases import _pattern_from_mask, attention_mask
from sparsekernels.kernels import sddmm_tuning
from sparsekernels.kernels.softmax_csr import sparse_softmax

BUDGET_S = float(os.environ.get("BUDGET_S", 120))
START = time.time()
L, BATCH = int(os.environ.get("L", 4096)), 16
KINDS = os.environ.get("KINDS", "local:256,strided:128:128,random:0.1,causal").split(",")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
DTYPES = {k: DTYPES[k] for k in os.environ.get("DTYPES", "bf16,fp32").split(",")}
HEADS = [int(h) for h in os.environ.get("HEADS", "1,2,4,8").split(",")]


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3  # us


def copy_bandwidth() -> float:
    src = torch.empty(2**28, dtype=torch.uint8, device="cuda")  # 256 MiB, past L2
    dst = torch.empty_like(src)
    return 2 * src.numel() / bench(lambda: dst.copy_(src)) / 1e3  # GB/s


copy = copy_bandwidth()
print(f"# {torch.cuda.get_device_name()}, L = {L}, {BATCH} heads; copy {copy:.0f} GB/s")
g = torch.Generator(device="cuda").manual_seed(0)
table = []
for kind in KINDS:
    P = _pattern_from_mask(attention_mask(kind, L, torch.device("cuda"), g), torch.float32)
    for name, dtype in DTYPES.items():
        if time.time() - START > BUDGET_S:
            break
        copies = max(2, -(-(200 << 20) // (BATCH * P.nnz * dtype.itemsize)))  # > L2 in all
        values = [torch.randn(BATCH, P.nnz, device="cuda", dtype=dtype) for _ in range(copies)]
        out = torch.empty_like(values[0])
        want = torch.empty(BATCH, P.nnz, device="cuda", dtype=torch.float64)
        config = sddmm_tuning.softmax_csr_config(P.nnz, L, 1)  # one head a program: the block
        sparse_softmax(row_offsets=P.row_offsets, values=values[0].double(), out=want, scale=0.5,
                       block=config.block, num_warps=config.num_warps)  # fmt: skip
        moved = 2 * BATCH * P.nnz * dtype.itemsize
        times = {}
        for heads in HEADS:
            warps = config.num_warps * heads

            def run(heads=heads, warps=warps, only=None):
                for v in values if only is None else [only]:  # each copy once: cold in L2
                    sparse_softmax(row_offsets=P.row_offsets, values=v, out=out, scale=0.5,
                                   block=config.block, num_warps=warps, heads=heads)  # fmt: skip

            run(only=values[0])
            err = (out.double() - want).abs().max().item()
            times[heads] = bench(run) / copies if err < 1e-2 else float("nan")
        chosen = sddmm_tuning.softmax_csr_config(P.nnz, L, BATCH).heads
        case = f"{kind} {name} block={config.block}"
        print(case, {h: round(t, 1) for h, t in times.items()}, f"default {chosen}", flush=True)
        table.append((case, moved, times, chosen))

print(f"\n{'case':<36} " + " ".join(f"{f'{h} heads':>14}" for h in HEADS) + "  default")
for case, moved, times, chosen in table:
    cells = " ".join(
        f"{times[h]:6.1f} {moved / times[h] / 1e3 / copy:5.0%}  " if times[h] == times[h] else
        f"{'nan':>14}" for h in HEADS
    )  # fmt: skip
    print(f"{case:<36} {cells} {chosen}")
