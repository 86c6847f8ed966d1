"""linear on a CSR weight past 16 tokens through the general CSR kernel (backend="triton"):
x^T copied row-major and 16-column aligned (the route since the sixty-second session) against
x^T read in place ("strided": each gathered row of B was N loads K apart, the route before),
and cuBLAS on the dense weight (TF32 off for fp32). The automatic route takes this kernel in
strict fp32 on weights of under 14% stored (30% for products of at most 24M multiply-adds)
and in half precision only for small products; the dense backend elsewhere.
Cold L2 (rotated weight copies), CUDA-graph medians, us a call; each form checked against
float64 first (NaN where wrong).
    PYTHONPATH=src python3 benchmarks/sweeps/csr_linear_layout.py
    SHAPES=4096x4096 SPARSITIES=0.9 TOKENS=24,49 DTYPES=fp32 FORMS=route,b32,b64,b128 ...
"""

import importlib
import os

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels import tuning

# the module, not the function sparsekernels.ops exports under the same name
spmm_ops = importlib.import_module("sparsekernels.ops.spmm")
DEVICE = torch.device("cuda")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
DTYPES = [DTYPES[d] for d in os.environ.get("DTYPES", "fp32,bf16").split(",")]
SHAPES = [tuple(int(d) for d in s.split("x")) for s in os.environ.get(
    "SHAPES", "4096x4096,14336x4096").split(",")]  # fmt: skip
SPARSITIES = [float(s) for s in os.environ.get("SPARSITIES", "0.9,0.95").split(",")]
TOKENS = [int(t) for t in os.environ.get("TOKENS", "17,24,49,64,128,256").split(",")]
# "route", "strided", and "bN": the route's x^T with the kernel's tile forced to N columns
# (4 rows, 32 entries a step, 4 warps: the tile below 256 tokens is b32 on few rows)
FORMS = os.environ.get("FORMS", "route,strided").split(",")


def linear_cold(As, x: torch.Tensor, want: torch.Tensor, form: str) -> float:
    padded = spmm_ops.rows_padded_to_16
    config = tuning.spmm_csr_config
    if form == "strided":
        spmm_ops.rows_padded_to_16 = lambda b: b
    elif form.startswith("b"):
        forced = tuning.SpmmCsrConfig(
            block_rows=4, block_nnz=32, block_n=int(form[1:]), num_warps=4
        )
        tuning.spmm_csr_config = lambda n, rows=0, itemsize=4: forced
    try:
        got = sk.linear(x, As[0], backend="triton")
        tolerance = 1e-4 if x.dtype == torch.float32 else 1e-2
        if not ((got.double() - want).norm() / want.norm()).item() < tolerance:
            print(form, "wrong", flush=True)
            return float("nan")
        calls = lambda: [sk.linear(x, A, backend="triton") for A in As]  # noqa: E731
        return do_bench_cudagraph(calls, rep=30) * 1e3 / len(As)
    finally:
        spmm_ops.rows_padded_to_16 = padded
        tuning.spmm_csr_config = config


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    table = []
    for dtype in DTYPES:
        for (rows, k), sparsity in [(s, p) for s in SHAPES for p in SPARSITIES]:
            torch.manual_seed(0)
            w = torch.randn(rows, k, device=DEVICE, dtype=dtype)
            A = sk.CSRMatrix.from_dense(w, mask=sk.prune.magnitude_mask(w.float(), sparsity))
            dense = A.to_dense()
            copies = max(2, copies_for(A.values.nbytes * 3, DEVICE))
            As = [A.with_values(A.values.clone()) for _ in range(copies)]
            dense_copies = [dense.clone() for _ in range(max(2, copies_for(dense.nbytes, DEVICE)))]
            for tokens in TOKENS:
                x = torch.randn(tokens, k, device=DEVICE, dtype=dtype)
                want = x.double() @ dense.double().t()
                timed = {
                    "dense": do_bench_cudagraph(lambda: [x @ d.t() for d in dense_copies], rep=30)
                    * 1e3
                    / len(dense_copies)
                }
                for form in FORMS:
                    timed[form] = linear_cold(As, x, want, form)
                name = str(dtype).replace("torch.", "")
                label = f"{rows}x{k} {name} {sparsity:.0%} t{tokens}"
                print(label, {f: round(t, 1) for f, t in timed.items()}, flush=True)
                table.append((label, timed))
    print(f"\n# {torch.cuda.get_device_name()}, us a call, cold L2; x dense = dense / route")
    print(f"{'case':<32}" + "".join(f"{f:>9}" for f in ["dense", *FORMS]) + f"{'x dense':>9}")
    for label, t in table:
        cells = "".join(f"{t[f]:9.1f}" for f in ["dense", *FORMS])
        print(f"{label:<32}{cells}{t['dense'] / t['route']:9.2f}")


if __name__ == "__main__":
    main()
