"""Unstructured sparsity on tensor cores from a bitmap (SpInfer's encoding, EuroSys 2025): a
prototype to measure before it becomes a format.

At 50-70% sparsity CSR stores 4 bytes per kept bf16 value (value + int16 column): 1.2 bytes per
weight at 70%, so its decode kernel can beat dense (2 bytes per weight) by 1.67x at best, and
it measures 1.0-1.2x. A bitmap stores 1 bit per weight plus the kept values: 0.725 bytes per
weight at 70% (2.76x at best), 0.325 at 90%. Each step a program loads a (rows, BLOCK_K / 32)
tile of bitmap words, expands it to (rows, BLOCK_K) bits, ranks the set bits with a prefix sum
along the row, gathers the kept values at those ranks into a dense register tile (zeros
elsewhere) and runs tl.dot on it: "load as sparse, compute as dense", the whole weight read
once whatever the token count. Row starts are CSR's row offsets; each step adds its bits to
them, so no per-tile offsets are stored.

On the H200 it lost everywhere (results/nvidia-h200/2026-11-30/at-31eeef3/bitmap_sweep.txt):
84-293 us against dense's 30-38 and the CSR route's 9-149 (70% at 1 token: 102 us on
14336 x 4096 against CSR's 30; 90%: 84 against 11). The per-step expansion, prefix sum and
gather of (rows, BLOCK_K) elements cost far more than the bytes they save; SpInfer does this
with warp-level popcounts on shared memory, which Triton does not expose. Not made a format.

    PYTHONPATH=src python3 benchmarks/sweeps/bitmap_sweep.py           # H200 sweep
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/sweeps/bitmap_sweep.py --check
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/sweeps/bitmap_sweep.py --smoke

Sweep (BUDGET_S, default 240 s): bf16, CUDA-graph medians in us, x (tokens, K) @ W^T as
linear runs it, against dense and our CSR route, on the LLM shapes at 70% and 90% sparsity.
"""

import itertools
import os
import sys
import time

import torch
import triton
import triton.language as tl


def encode(dense: torch.Tensor):
    """(bitmap, values, row_offsets) of a (rows, cols) matrix: bit c % 32 of word c // 32 of a
    row is set where dense is nonzero; values row-major in column order; int32 words."""
    rows, cols = dense.shape
    words = triton.cdiv(cols, 32)
    kept = torch.zeros(rows, words * 32, dtype=torch.bool, device=dense.device)
    kept[:, :cols] = dense != 0
    weights = torch.ones(32, dtype=torch.int64, device=dense.device) << torch.arange(
        32, device=dense.device
    )
    bitmap = (kept.view(rows, words, 32).long() * weights).sum(-1)
    bitmap = torch.where(bitmap >= 2**31, bitmap - 2**32, bitmap).to(torch.int32)
    counts = (dense != 0).sum(1)
    row_offsets = torch.zeros(rows + 1, dtype=torch.int64, device=dense.device)
    row_offsets[1:] = counts.cumsum(0)
    return bitmap, dense[dense != 0], row_offsets


@triton.jit
def _bitmap_dot(
    bitmap,  # (M, WORDS) int32
    values,  # (nnz,)
    row_offsets,  # (M + 1,) int64
    b,  # (K, N): strides stride_bk, stride_bn
    out,  # (M, N) row-major
    M,
    N,
    K,
    WORDS,
    stride_bk,
    stride_bn,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,  # a multiple of 32
    BLOCK_N: tl.constexpr,
):
    WORDS_A_STEP: tl.constexpr = BLOCK_K // 32
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows = offs_m.to(tl.int64)
    base = tl.load(row_offsets + rows, mask=mask_m, other=0)  # the next kept value of each row
    bit = tl.arange(0, 32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        w = k0 // 32 + tl.arange(0, WORDS_A_STEP)
        words = tl.load(
            bitmap + rows[:, None] * WORDS + w[None, :],
            mask=mask_m[:, None] & (w < WORDS)[None, :],
            other=0,
        )
        bits = (words[:, :, None] >> bit[None, None, :]) & 1  # (rows, words, 32)
        bits = tl.reshape(bits, (BLOCK_M, BLOCK_K))
        rank = tl.cumsum(bits, axis=1) - bits  # kept values before this column in the step
        a = tl.load(values + base[:, None] + rank, mask=bits != 0, other=0.0)
        base += tl.sum(bits, axis=1)
        ks = k0 + tl.arange(0, BLOCK_K)
        b_tile = tl.load(
            b + ks[:, None].to(tl.int64) * stride_bk + offs_n[None, :] * stride_bn,
            mask=(ks < K)[:, None] & mask_n[None, :],
            other=0.0,
        )
        acc = tl.dot(a.to(b_tile.dtype), b_tile, acc)
    out_ptrs = out + rows[:, None] * N + offs_n[None, :]
    tl.store(out_ptrs, acc.to(out.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def bitmap_dot(bitmap, values, row_offsets, b, *, block_m, block_k, num_warps, num_stages):
    """W @ b for W encoded by `encode`; b (K, N) in any strides."""
    rows, (K, N) = bitmap.shape[0], b.shape
    block_n = max(16, min(64, triton.next_power_of_2(N)))
    out = torch.empty(rows, N, device=b.device, dtype=b.dtype)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(N, block_n))
    _bitmap_dot[grid](
        bitmap, values, row_offsets, b, out, rows, N, K, bitmap.shape[1],
        b.stride(0), b.stride(1), BLOCK_M=block_m, BLOCK_K=block_k, BLOCK_N=block_n,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return out


def _sparse(rows, cols, density, dtype, device, gen):
    w = torch.randn(rows, cols, generator=gen, dtype=torch.float32).to(dtype)
    keep = torch.rand(rows, cols, generator=gen) < density
    return (w * keep).to(device)


def check() -> None:
    """Interpreter check: ragged rows, columns and tokens, empty rows, an all-zero and an
    all-kept matrix, fp16 and fp32; float64 reference, worst row's relative error."""
    gen = torch.Generator().manual_seed(0)
    cases = [(37, 100, 5, 0.3), (16, 64, 1, 0.5), (3, 33, 16, 0.9), (20, 96, 3, 0.0), (9, 64, 2, 1)]
    for (M, K, N, density), dtype in itertools.product(cases, (torch.float16, torch.float32)):
        w = _sparse(M, K, density, dtype, "cpu", gen)
        w[M // 2] = 0  # an empty row
        B = torch.randn(N, K, generator=gen).to(dtype).t()  # linear's x^T
        ref = w.double() @ B.double()
        got = bitmap_dot(*encode(w), B, block_m=16, block_k=64, num_warps=4, num_stages=1)
        scale = (w.double().abs() @ B.double().abs()).clamp_min(1e-6)
        worst = ((got.double() - ref).abs() / scale).max().item()
        assert worst < (2e-3 if dtype == torch.float16 else 1e-5), (M, K, N, density, worst)
        print(f"{M}x{K}x{N} density {density} {dtype}: worst relative error {worst:.1e}")


def sweep(device="cuda", shapes=((14336, 4096), (4096, 14336)), tokens=(1, 16, 32, 64, 128)):
    """The H200 sweep; `--smoke` runs its logic on tiny CPU shapes in the interpreter."""
    import sparsekernels as sk

    budget, start = float(os.environ.get("BUDGET_S", 240)), time.time()
    gen = torch.Generator().manual_seed(0)

    def bench(fn) -> float:
        if device != "cuda":
            begin = time.perf_counter()
            fn()
            return (time.perf_counter() - begin) * 1e6
        from triton.testing import do_bench_cudagraph

        return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3

    dtype = torch.bfloat16 if device == "cuda" else torch.float16  # interpreter: no bf16 dot
    name = torch.cuda.get_device_name() if device == "cuda" else device
    print(f"# {name} {dtype} us; configs (block_m, block_k, warps, stages)")
    grid = list(itertools.product((16, 32, 64), (64, 128), (4,), (2, 3)))
    table = []
    for (M, K), sparsity in itertools.product(shapes, (0.7, 0.9)):
        w = _sparse(M, K, 1 - sparsity, dtype, device, gen)
        encoded = encode(w)
        W = sk.CSRMatrix.from_dense(w)
        for N in tokens:
            if time.time() - start > budget:
                break
            x = torch.randn(N, K, generator=gen).to(dtype).to(device)
            ref = (x.float() @ w.float().t()).t()
            dense, route = bench(lambda: x @ w.t()), bench(lambda: sk.linear(x, W))
            found = []
            for bm, bk, warps, stages in grid:
                fn = lambda: bitmap_dot(*encoded, x.t(), block_m=bm, block_k=bk,  # noqa: E731
                                        num_warps=warps, num_stages=stages)  # fmt: skip
                try:
                    err = ((fn().float() - ref).norm() / ref.norm()).item()
                except Exception as error:  # noqa: BLE001 - a configuration that does not fit
                    print("   ", bm, bk, warps, stages, type(error).__name__, str(error)[:60])
                    continue
                if err < 1e-2:
                    found.append((round(bench(fn), 1), bm, bk, warps, stages))
            found.sort()
            case = f"{M}x{K} {sparsity:.0%} N={N}"
            print(
                case, f"dense {dense:.1f} csr route {route:.1f} bitmap top {found[:3]}", flush=True
            )
            table.append((case, dense, route, found[0] if found else None))

    print(f"\n{'case':<24} {'dense':>7} {'csr':>7} {'bitmap':>7}  x dense  best config")
    for case, dense, route, best in table:
        t = best[0] if best else float("nan")
        print(f"{case:<24} {dense:7.1f} {route:7.1f} {t:7.1f}  {dense / t:5.2f}x  {best[1:] if best else None}")  # fmt: skip


if __name__ == "__main__":
    if "--check" in sys.argv:
        check()
    elif "--smoke" in sys.argv:
        sweep("cpu", shapes=((40, 128),), tokens=(5,))
    else:
        sweep()
