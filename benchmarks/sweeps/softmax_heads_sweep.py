"""The row softmax (kernels/softmax_csr.py) by heads of a row per program, warps per program
and offset width (sddmm_tuning.softmax_forward_config and softmax_csr.INT32_ONLY_FOR_WALKS pick the
defaults), forward, on the softmax suite's attention patterns at L = 4096 with 16 heads, bf16
and fp32; GB/s on the values read and written against the copy bandwidth measured here (the
target: 70% of it). CUDA-graph medians of one launch per copy of the values, the copies
together larger than L2. Prints a table last.

Nsight Compute found the kernel bound by instructions issued, not memory (at-02f1e78/ncu.txt:
SM 79%, DRAM 37% on local:256 bf16). Compiled for sm_90, the single-read branch issues per
512 entries (2 heads of 256): 2 warps 542 warp-instructions with int64 offsets, 460 with int32;
1 warp 441 / 349 (no barrier in its reductions); 4 warps 648 / 636. FORMS are
"heads/warps/offsets", then "/t" for half the block and a tail as
sddmm_tuning.softmax_tail routes them with SOFTMAX_TAIL on (strided:128:128's rows on 128 + 32
lanes: 183 against 230 instructions a warp; patterns without a saving run as before), "/a"
for whole 16-byte groups as SOFTMAX_ALIGN routes them (softmax_csr_groups: vector loads and
stores), "/lN" for rows up to 2^N blocks read once on the fewest of
2 or 4 blocks' lanes that hold them (softmax_csr's LEVELS; causal rows now walked twice);
"/cN" for the walk's max taken per thread over N entries a step (softmax_csr's WALK_PER),
"/rN" for Triton's maxnreg N; "/a" forms read values padded to 16 entries a matrix and write
an output padded alike (softmax_csr.group_form "aligned": 16-byte loads and stores); "/u" the
groups on the unpadded (heads, nnz) arrays (group_form "phased": each head's groups counted
from the array's start);
"default" is the library's choice.
    PYTHONPATH=src python3 benchmarks/sweeps/softmax_heads_sweep.py
    KINDS=local:256 DTYPES=bf16 FORMS=2/1/i32,4/2/i32 BUDGET_S=60 ...
"""

import os
import time

import torch
from triton.testing import do_bench_cudagraph

from sparsekernels.bench.cases import _pattern_from_mask, attention_mask
from sparsekernels.kernels import sddmm_tuning, softmax_csr
from sparsekernels.kernels.softmax_csr import sparse_softmax

BUDGET_S = float(os.environ.get("BUDGET_S", 120))
START = time.time()
L, BATCH = int(os.environ.get("L", 4096)), 16
KINDS = os.environ.get("KINDS", "local:256,strided:128:128,random:0.1,causal").split(",")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
DTYPES = {k: DTYPES[k] for k in os.environ.get("DTYPES", "bf16,fp32").split(",")}
# heads/warps per program (0: the library's warps a head times the heads)/offsets (i32, i64)
FORMS = os.environ.get(
    "FORMS",
    "default,1/0/i64,2/0/i64,4/0/i64,2/1/i64,2/1/i32,2/2/i32,4/2/i32,4/1/i32,8/2/i32,"
    "2/1/i32/t,2/2/i32/t,4/2/i32/t",
).split(",")


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3  # us


def copy_bandwidth() -> float:
    src = torch.empty(2**28, dtype=torch.uint8, device="cuda")  # 256 MiB, past L2
    dst = torch.empty_like(src)
    return 2 * src.numel() / bench(lambda: dst.copy_(src)) / 1e3  # GB/s


copy = copy_bandwidth()
default_walks = softmax_csr.INT32_ONLY_FOR_WALKS
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
        padded_values, padded_out = values, out  # "/a": each matrix padded to 16 entries
        if any("a" in form.split("/")[3:] for form in FORMS):
            width = -(-P.nnz // 16) * 16
            padded_values = [torch.empty(BATCH, width, device="cuda", dtype=dtype)[:, : P.nnz]
                             for _ in range(copies)]  # fmt: skip
            for padded, v in zip(padded_values, values, strict=True):
                padded.copy_(v)
            padded_out = torch.empty(BATCH, width, device="cuda", dtype=dtype)[:, : P.nnz]
        want = torch.empty(BATCH, P.nnz, device="cuda", dtype=torch.float64)
        config = sddmm_tuning.softmax_csr_config(P.nnz, L, 1)  # one head a program: the block
        sparse_softmax(row_offsets=P.row_offsets, values=values[0].double(), out=want, scale=0.5,
                       block=config.block, num_warps=config.num_warps)  # fmt: skip
        moved = 2 * BATCH * P.nnz * dtype.itemsize
        times = {}
        for form in FORMS:
            block, tail, library_int32, align, flags = config.block, 0, False, 0, []
            levels, walk_per = 0, 1
            if form == "default":  # the library's forward route, its tail and offsets included
                chosen = sddmm_tuning.softmax_forward_config(P.nnz, L, BATCH, dtype.itemsize)
                heads, warps, int32 = chosen.heads, chosen.num_warps, None
                tail, library_int32, align = chosen.tail, chosen.int32, chosen.align
                levels, walk_per = chosen.levels, chosen.walk_per
                block = chosen.block // 2 if tail else chosen.block
            else:
                h, w, offsets, *flags = form.split("/")
                heads, warps, int32 = int(h), int(w) or config.num_warps * int(h), offsets == "i32"
            levels = next((int(f[1:]) for f in flags if f.startswith("l")), levels)
            walk_per = next((int(f[1:]) for f in flags if f.startswith("c")), walk_per)
            if "a" in flags or "u" in flags:  # whole 16-byte groups, as SOFTMAX_ALIGN routes them
                align = 16 // dtype.itemsize
            if "t" in flags:  # the library's tail, as SOFTMAX_TAIL routes it
                tail_was = sddmm_tuning.SOFTMAX_TAIL
                sddmm_tuning.SOFTMAX_TAIL = True
                tail = sddmm_tuning.softmax_tail(P.nnz, L, config.block)
                sddmm_tuning.SOFTMAX_TAIL = tail_was
                block = config.block // 2 if tail else config.block

            registers = next((int(f[1:]) for f in flags if f.startswith("r")), None)
            padded = "a" in flags  # (default: the arrays as a user's, unpadded)
            inputs, output = (padded_values, padded_out) if padded else (values, out)

            def run(heads=heads, warps=warps, block=block, tail=tail, i32=library_int32,
                    align=align, levels=levels, walk_per=walk_per, registers=registers,
                    inputs=inputs, output=output, only=None):  # fmt: skip
                for v in inputs if only is None else [inputs[0]]:  # each copy once: cold in L2
                    sparse_softmax(row_offsets=P.row_offsets, values=v, out=output, scale=0.5,
                                   block=block, num_warps=warps, heads=heads, tail=tail,
                                   int32=i32, align=align, levels=levels,
                                   walk_per=walk_per, max_registers=registers)  # fmt: skip

            if int32 is not None:  # int32 wherever offsets fit, or int64 everywhere
                softmax_csr.INT32_ONLY_FOR_WALKS = False
                softmax_csr.INT32_LIMIT = 2**31 if int32 else 0
            run(only=True)
            err = (output.double() - want).abs().max().item()
            times[form] = bench(run) / copies if err < 1e-2 else float("nan")
            softmax_csr.INT32_ONLY_FOR_WALKS, softmax_csr.INT32_LIMIT = default_walks, 2**31
        chosen = sddmm_tuning.softmax_forward_config(P.nnz, L, BATCH, dtype.itemsize)
        default = f"{chosen.heads}/{chosen.num_warps}" + ("/t" if chosen.tail else "")
        default += "/a" if chosen.align else ""
        default += f"/l{chosen.levels}" if chosen.levels else ""
        default += f"/c{chosen.walk_per}" if chosen.walk_per > 1 else ""
        case = f"{kind} {name} block={config.block}"
        print(case, {f: round(t, 1) for f, t in times.items()}, f"default {default}", flush=True)
        table.append((case, moved, times, default))

print(f"\n{'case':<36} " + " ".join(f"{f:>14}" for f in FORMS) + "  default")
for case, moved, times, default in table:
    cells = " ".join(
        f"{times[f]:6.1f} {moved / times[f] / 1e3 / copy:5.0%}  " if times[f] == times[f] else
        f"{'nan':>14}" for f in FORMS
    )  # fmt: skip
    print(f"{case:<36} {cells} {default}")
