"""`sparsekernels demo --tour`: a short tour of the formats and ops on whatever device is present.

Every line checks a sparse result against the same math done densely in float64, so the tour
also shows that the library computes the right thing here. Times are indicative only; speed
claims live in benchmarks/results/ (`sparsekernels bench`).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

import sparsekernels as sk


def _median_ms(fn, device: torch.device, reps: int = 5) -> float:
    fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def _row(*cells) -> None:
    print("  " + "".join(f"{c:<{w}}" for c, w in zip(cells, (30, 14, 14, 12, 12), strict=False)))


def run(device_name: str | None = None) -> int:
    device = torch.device(device_name or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    size, tokens = (4096, 16) if device.type == "cuda" else (1024, 16)
    gen = torch.Generator(device="cpu").manual_seed(0)
    print(f"sparsekernels {sk.__version__} on {device} ({dtype}); torch {torch.__version__}")

    weight = torch.randn(size, size, generator=gen).to(device)
    x = torch.randn(tokens, size, generator=gen).to(device)
    dense_ms = _median_ms(lambda: x.to(dtype) @ weight.to(dtype).t(), device)
    print(f"\n1. A {size}x{size} layer, {tokens} tokens: x @ W^T (dense: {dense_ms:.3f} ms)")
    _row("format", "rel. error", "weight MB", "ms", "vs dense")
    _row("dense", "-", f"{weight.numel() * dtype.itemsize / 1e6:.1f}", f"{dense_ms:.3f}", "1.00x")
    formats = {
        "CSR, 90% unstructured": lambda w: sk.CSRMatrix.from_dense(
            w, mask=sk.prune.magnitude_mask(w, 0.9)
        ),
        "N:M 2:8 (element-wise)": lambda w: _nm(w, 2, 8, 1),
        "N:M 2:8, vector 64": lambda w: _nm(w, 2, 8, 64),
    }
    for name, build in formats.items():
        W = build(weight).to(dtype=dtype)
        want = x.double() @ W.to_dense().double().t()
        got = sk.linear(x.to(dtype), W)
        ms = _median_ms(lambda W=W: sk.linear(x.to(dtype), W), device)
        _row(
            name,
            f"{_rel_err(got, want):.1e}",
            f"{W.nbytes / 1e6:.1f}",
            f"{ms:.3f}",
            f"{dense_ms / ms:.2f}x",
        )

    print("\n2. Sparse attention (local window 64 + stride 64), B=1, H=4, L=1024, D=64")
    L = 1024
    i = torch.arange(L)
    keep = ((i[:, None] - i[None, :]).abs() < 64) | (i[None, :] % 64 == 63)
    pattern = sk.CSRMatrix.from_dense(keep.float()).to(device=device)
    q, k, v = (torch.randn(1, 4, L, 64, generator=gen).to(device, dtype) for _ in range(3))
    got = sk.sparse_attention(q, k, v, pattern)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=keep.to(device)
    )
    print(
        f"  density {pattern.density:.3f}; "
        f"rel. error vs dense masked attention {_rel_err(got, want):.1e}"
    )

    print("\n3. Training with a fixed mask: gradients of the kept weights and of x")
    w = torch.randn(256, 512, generator=gen, dtype=torch.float64).to(device)
    mask = sk.prune.nm_mask(w, 2, 8)
    W = sk.NMMatrix.from_dense(w, 2, 8, mask=mask)
    values = W.values.clone().requires_grad_()
    xs = torch.randn(32, 512, generator=gen, dtype=torch.float64, device="cpu").to(device)
    xs.requires_grad_()
    sk.linear(xs, W.with_values(values)).square().sum().backward()
    dense_w = (w * mask).requires_grad_()
    x2 = xs.detach().clone().requires_grad_()
    (x2 @ dense_w.t()).square().sum().backward()
    kept_grad = dense_w.grad.gather(1, W.column_indices())
    print(
        f"  d(values) rel. error {_rel_err(values.grad, kept_grad):.1e}; "
        f"d(x) rel. error {_rel_err(xs.grad, x2.grad):.1e}"
    )

    print("\n4. Save and load (safetensors, DLMC .smtx)")
    with tempfile.TemporaryDirectory() as tmp:
        A = formats["CSR, 90% unstructured"](weight)
        sk.save_safetensors(A, Path(tmp) / "w.safetensors")
        back = sk.load_safetensors(Path(tmp) / "w.safetensors", device=device)
        sk.save_smtx(A, Path(tmp) / "w.smtx")
        pattern_back = sk.load_smtx(Path(tmp) / "w.smtx", device=device)
        same = torch.equal(back.values, A.values) and torch.equal(
            pattern_back.column_indices, A.column_indices
        )
        print(f"  round trip identical: {same}")
    print(
        "\nDone. Benchmarks against cuBLAS, cuSPARSE and torch's 2:4: "
        "`sparsekernels bench --quick`."
    )
    return 0


def _nm(w: torch.Tensor, n: int, m: int, vector: int) -> sk.NMMatrix:
    mask = sk.prune.nm_mask(w, n, m, vector=vector)
    return sk.NMMatrix.from_dense(w, n, m, vector=vector, mask=mask)
