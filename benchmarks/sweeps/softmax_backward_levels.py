"""The row softmax's backward (kernels/softmax_csr.py) reading rows past its block once on 2 or
4 blocks' lanes (LEVELS) against the route (sddmm_tuning.softmax_csr_config: causal rows walked
twice, p and g read in each pass), on the softmax suite's attention patterns with 16 heads,
bf16 and fp32; GB/s on p and g read and d written against the copy bandwidth measured here.
CUDA-graph medians of one launch per copy of the inputs, the copies together larger than L2.
FORMS are "warps/lN" (0 warps: the route's); "default" is the library's choice.
    PYTHONPATH=src python3 benchmarks/sweeps/softmax_backward_levels.py
    L=8192 KINDS=causal FORMS=default,8/l2 ...
"""

import os

import torch
from triton.testing import do_bench_cudagraph

from sparsekernels.bench.cases import _pattern_from_mask, attention_mask
from sparsekernels.kernels import sddmm_tuning
from sparsekernels.kernels.softmax_csr import sparse_softmax_backward

L, BATCH = int(os.environ.get("L", 4096)), 16
KINDS = os.environ.get("KINDS", "causal,local:256").split(",")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
DTYPES = {k: DTYPES[k] for k in os.environ.get("DTYPES", "bf16,fp32").split(",")}
FORMS = os.environ.get("FORMS", "default,8/l0,4/l2,8/l1,8/l2").split(",")


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3  # us


def copy_bandwidth() -> float:
    src = torch.empty(2**28, dtype=torch.uint8, device="cuda")  # 256 MiB, past L2
    dst = torch.empty_like(src)
    return 2 * src.numel() / bench(lambda: dst.copy_(src)) / 1e3  # GB/s


def main():
    copy = copy_bandwidth()
    print(f"# {torch.cuda.get_device_name()}, L = {L}, {BATCH} heads; copy {copy:.0f} GB/s")
    g = torch.Generator(device="cuda").manual_seed(0)
    table = []
    for kind in KINDS:
        P = _pattern_from_mask(attention_mask(kind, L, torch.device("cuda"), g), torch.float32)
        config = sddmm_tuning.softmax_csr_config(P.nnz, L, BATCH)
        for name, dtype in DTYPES.items():
            copies = max(2, -(-(200 << 20) // (2 * BATCH * P.nnz * dtype.itemsize)))
            probs = [torch.rand(BATCH, P.nnz, device="cuda", dtype=dtype) for _ in range(copies)]
            grads = [torch.randn(BATCH, P.nnz, device="cuda", dtype=dtype) for _ in range(copies)]
            out = torch.empty_like(probs[0])
            want = torch.empty(BATCH, P.nnz, device="cuda", dtype=torch.float64)
            sparse_softmax_backward(row_offsets=P.row_offsets, probs=probs[0].double(),
                                    grad=grads[0].double(), out=want, scale=0.5,
                                    block=config.block, num_warps=config.num_warps,
                                    heads=config.heads)  # fmt: skip
            moved = 3 * BATCH * P.nnz * dtype.itemsize
            times = {}
            for form in FORMS:
                warps, levels = config.num_warps, 0
                if form != "default":
                    w, lv = form.split("/")
                    warps, levels = int(w) or config.num_warps, int(lv[1:])

                def run(warps=warps, levels=levels, only=None):
                    pairs = zip(probs, grads, strict=True) if only is None else [only]
                    for p, gr in pairs:  # each copy once: cold in L2
                        sparse_softmax_backward(row_offsets=P.row_offsets, probs=p, grad=gr,
                                                out=out, scale=0.5, block=config.block,
                                                num_warps=warps, heads=config.heads,
                                                levels=levels)  # fmt: skip

                run(only=(probs[0], grads[0]))
                err = ((out.double() - want).abs() / (want.abs() + 1e-2)).max().item()
                ok = err < (2e-2 if dtype == torch.bfloat16 else 1e-4)
                times[form] = bench(run) / copies if ok else float("nan")
            case = f"{kind} {name} block={config.block} warps={config.num_warps}"
            print(case, {f: round(t, 1) for f, t in times.items()}, flush=True)
            table.append((case, moved, times))

    print(f"\n{'case':<40} " + " ".join(f"{f:>14}" for f in FORMS))
    for case, moved, times in table:
        cells = " ".join(
            f"{times[f]:6.1f} {moved / times[f] / 1e3 / copy:5.0%}  " if times[f] == times[f]
            else f"{'nan':>14}" for f in FORMS
        )  # fmt: skip
        print(f"{case:<40} {cells}")


if __name__ == "__main__":
    main()
