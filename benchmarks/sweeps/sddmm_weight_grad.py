"""The weight gradient of a CSR weight over thousands of tokens: where the time goes.

dW at the stored positions is sddmm(g^T, x^T, W): the Sparse Transformer's training step (L =
8192, 90% weights) spends 243 us in cuBLAS's whole products and 126 us in gathers of the stored
entries (results/nvidia-h200/2026-12-01/at-a0be525/transformer_profile.txt). For its four
weights (qkv 1536 x 512, proj 512 x 512, fc1 2048 x 512, fc2 512 x 2048) at 8192 tokens,
bf16, 90%: the route (backend None), the dense backend, the tensor-core tile kernel
(backend "triton"); the dense product alone and three gathers of its stored entries (advanced
indexing, the route's; torch.take; gather along the flattened product); and the dense
model's whole gradient g^T @ x, the peer. CUDA-graph medians, warm L2. Each path is checked
against the route first. From the repository root on the GPU machine:
    PYTHONPATH=src python3 benchmarks/sweeps/sddmm_weight_grad.py
"""

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.ops._dense import flat_positions

TOKENS, DENSITY, DTYPE = 8192, 0.1, torch.bfloat16
SHAPES = [(1536, 512), (512, 512), (2048, 512), (512, 2048)]


def us(fn) -> float:
    return do_bench_cudagraph(fn, rep=40, return_mode="median") * 1e3


def main():
    print(f"# {torch.cuda.get_device_name()}  {TOKENS} tokens, {DENSITY:.0%} stored, bf16, us")
    torch.manual_seed(0)
    rows = []
    for out_f, in_f in SHAPES:
        keep = torch.rand(out_f, in_f, device="cuda") < DENSITY
        W = sk.CSRMatrix.from_dense(torch.randn(out_f, in_f, device="cuda", dtype=DTYPE) * keep)
        g = torch.randn(TOKENS, out_f, device="cuda", dtype=DTYPE)
        x = torch.randn(TOKENS, in_f, device="cuda", dtype=DTYPE)
        X, Y = g.t(), x.t()  # (out, tokens), (in, tokens): as linear's backward passes them
        # (kept int32 where they fit on CUDA; torch.take and gather want int64)
        positions = flat_positions(W.row_offsets, W.column_indices, in_f).long()
        product = X @ Y.t()
        flat = product.flatten()
        want = sk.sddmm(X, Y, W).values.float()
        paths = {
            "route": lambda: sk.sddmm(X, Y, W),
            "dense backend": lambda: sk.sddmm(X, Y, W, backend="dense"),
            "tile kernel": lambda: sk.sddmm(X, Y, W, backend="triton"),
            "product only": lambda: X @ Y.t(),
            "gather [idx]": lambda: flat[positions],
            "gather take": lambda: torch.take(product, positions),
            "gather dim 0": lambda: flat.gather(0, positions),
            "dense dW": lambda: g.t() @ x,
        }
        row = {"case": f"{out_f}x{in_f}"}
        for name, fn in paths.items():
            got = fn()
            got = got.values if isinstance(got, sk.CSRMatrix) else got
            if got.numel() == want.numel():
                err = (got.float() - want).abs().max().item() / want.abs().max().item()
                if err > 0.02:
                    print(f"{row['case']} {name}: relative error {err:.2e}", flush=True)
                    row[name] = float("nan")
                    continue
            row[name] = us(fn)
        print(" ".join(f"{k}={v:.1f}" if k != "case" else v for k, v in row.items()), flush=True)
        rows.append(row)
    names = [k for k in rows[0] if k != "case"]
    print("\ncase       " + "".join(f"{n[:13]:>14s}" for n in names))
    for row in rows:
        print(f"{row['case']:10s} " + "".join(f"{row[n]:14.1f}" for n in names))


if __name__ == "__main__":
    main()
