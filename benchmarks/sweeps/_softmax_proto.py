"""What the row-softmax prototype sweeps share: the float64 reference on a small pattern (their
interpreter checks) and the timed comparison with the library on the attention patterns whose
rows fit one block (local:256, strided:128:128, random:0.1; 16 heads at L = 4096, bf16 and
fp32): CUDA-graph medians of one launch per copy of the values (copies past L2), GB/s on the
bytes moved against the copy bandwidth measured in the same run. Prints a table last."""

import time

import torch

from sparsekernels.bench.cases import _pattern_from_mask, attention_mask
from sparsekernels.kernels import sddmm_tuning
from sparsekernels.kernels.softmax_csr import sparse_softmax


def reference(P, values: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(scale * values) over each row's stored entries, in float64, per head."""
    L = P.shape[0]
    dense = torch.full((values.shape[0], L, P.shape[1]), float("-inf"), dtype=torch.float64)
    rows, cols = P.pattern.row_indices(), P.column_indices.long()
    dense[:, rows, cols] = values.double() * scale
    return torch.softmax(dense, -1)[:, rows, cols]


def bench(fn) -> float:
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def sweep(prototype_forms, allocate, budget_s: float) -> None:
    """prototype_forms(P, out, config) -> {name: form(values)}, timed beside the library's
    default; allocate(heads, nnz, dtype) -> an empty (heads, nnz) tensor the forms accept."""
    started, L, heads = time.time(), 4096, 16
    src = torch.empty(2**28, dtype=torch.uint8, device="cuda")
    copy = 2 * src.numel() / bench(lambda: torch.empty_like(src).copy_(src)) / 1e3
    print(f"# {torch.cuda.get_device_name()}, L = {L}, {heads} heads; copy {copy:.0f} GB/s")
    g = torch.Generator(device="cuda").manual_seed(0)
    table = []
    for kind in ("local:256", "strided:128:128", "random:0.1"):
        P = _pattern_from_mask(attention_mask(kind, L, torch.device("cuda"), g), torch.float32)
        for dtype in (torch.bfloat16, torch.float32):
            if time.time() - started > budget_s:
                break
            copies = max(2, -(-(200 << 20) // (heads * P.nnz * dtype.itemsize)))
            values = [allocate(heads, P.nnz, dtype) for _ in range(copies)]
            for v in values:
                v.copy_(torch.randn(heads, P.nnz, device="cuda"))
            out = allocate(heads, P.nnz, dtype)
            config = sddmm_tuning.softmax_csr_config(P.nnz, L, heads)
            want = torch.empty(heads, P.nnz, device="cuda", dtype=torch.float64)
            sparse_softmax(row_offsets=P.row_offsets, values=values[0].double(), out=want,
                           scale=0.5, block=config.block, num_warps=config.num_warps)  # fmt: skip
            forms = {
                "library": lambda v, P=P, out=out, config=config: sparse_softmax(
                    row_offsets=P.row_offsets, values=v, out=out, scale=0.5, block=config.block,
                    num_warps=config.num_warps, heads=config.heads),
                **prototype_forms(P, out, config),
            }  # fmt: skip
            times = {}
            for name, form in forms.items():
                out.fill_(float("nan"))
                form(values[0])
                err = (out.double() - want).abs().max().item()
                times[name] = (
                    bench(lambda form=form: [form(v) for v in values]) / copies
                    if err < 1e-2
                    else float("nan")
                )
            moved = 2 * heads * P.nnz * dtype.itemsize
            case = f"{kind} {str(dtype)[6:]}"
            print(case, {k: round(t, 1) for k, t in times.items()}, flush=True)
            table.append((case, moved, times))
    for case, moved, times in table:
        print(case)
        for name, t in times.items():
            print(f"    {name:<22} {t:7.1f} us {moved / t / 1e3 / copy:5.0%} of copy")
