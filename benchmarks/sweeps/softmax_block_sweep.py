"""The row softmax (kernels/softmax_csr.py) with its block sized to the longest row rather than
the average one, forward, on the softmax suite's attention patterns at L = 4096, 16 heads.

A row longer than the block is read twice (a pass for the max and sum, one to write), so a
pattern of long, uneven rows moves 1.5x the bytes it must: causal at L = 4096 (rows of 1 to
4096 entries, a block of 1024) ran at 52% of the copy bandwidth in bf16 (at-84bb050/sddmm), the
target being 70%. A block as long as the longest row (up to 4096 here) reads every row once,
at the cost of idle lanes on short rows. Forms, each at 1 and 2 heads a program:
- "mean": the library's default block (sddmm_tuning.softmax_csr_config), warps as it picks;
- "longest": the next power of two above the longest row, 256 entries a warp up to 8 warps
  (16 for two heads).
GB/s on the values read and written against the copy bandwidth measured here; CUDA-graph
medians of one launch per copy of the values, the copies together larger than L2. Prints a
table last.
    PYTHONPATH=src python3 benchmarks/sweeps/softmax_block_sweep.py
"""

import os
import time

import torch
from triton import next_power_of_2
from triton.testing import do_bench_cudagraph

from sparsekernels.bench.cases import _pattern_from_mask, attention_mask
from sparsekernels.kernels import sddmm_tuning
from sparsekernels.kernels.softmax_csr import sparse_softmax

BUDGET_S = float(os.environ.get("BUDGET_S", 60))
START = time.time()
L, BATCH = int(os.environ.get("L", 4096)), 16
KINDS = os.environ.get("KINDS", "causal,local:256,strided:128:128,random:0.1").split(",")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
DTYPES = {k: DTYPES[k] for k in os.environ.get("DTYPES", "bf16,fp32").split(",")}


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3  # us


def copy_bandwidth() -> float:
    src = torch.empty(2**28, dtype=torch.uint8, device="cuda")  # 256 MiB, past L2
    dst = torch.empty_like(src)
    return 2 * src.numel() / bench(lambda: dst.copy_(src)) / 1e3  # GB/s


def forms(P, rows: int) -> dict:
    """name -> (block, warps a head)."""
    mean = sddmm_tuning.softmax_csr_config(P.nnz, rows, 1)
    longest = int(P.row_offsets.diff().max().item())
    block = max(32, next_power_of_2(longest))
    return {"mean": (mean.block, mean.num_warps), "longest": (block, min(8, max(1, block // 256)))}


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
        moved = 2 * BATCH * P.nnz * dtype.itemsize
        ref = torch.empty(BATCH, P.nnz, device="cuda", dtype=torch.float64)
        mean_block, mean_warps = forms(P, L)["mean"]
        sparse_softmax(row_offsets=P.row_offsets, values=values[0].double(), out=ref, scale=0.5,
                       block=mean_block, num_warps=mean_warps)  # fmt: skip
        times = {}
        for form, (block, warps) in forms(P, L).items():
            for heads in (1, 2):

                def run(block=block, warps=warps * heads, heads=heads, only=None):
                    for v in values if only is None else [only]:  # each copy once: cold in L2
                        sparse_softmax(row_offsets=P.row_offsets, values=v, out=out, scale=0.5,
                                       block=block, num_warps=warps, heads=heads)  # fmt: skip

                out.fill_(float("nan"))
                run(only=values[0])
                err = (out.double() - ref).abs().max().item()
                key = f"{form} b{block} h{heads}"
                times[key] = bench(run) / copies if err < 1e-2 else float("nan")
        print(f"{kind} {name}", {k: round(t, 1) for k, t in times.items()}, flush=True)
        table.append((f"{kind} {name}", moved, times))

for case, moved, times in table:
    cells = "  ".join(
        f"{k}: {t:6.1f} us {moved / t / 1e3 / copy:4.0%}" if t == t else f"{k}: nan"
        for k, t in times.items()
    )
    print(f"{case:<24} {cells}")
