"""Why the expand-and-dot N:M kernel (kernels/spmm_nm_expand.py) lost to dense 3-9x on its first
H200 run (results/nvidia-h200/2026-11-30/at-94ee33f/nm_expand_sweep.txt), and what 17-128 tokens
should run: two other ways to expand a tile, each with an optional split of K (partial sums in
float32, added by torch: deterministic), against dense, the current route, the decode kernel
past 16 tokens and densify + cuBLAS. bf16, element-wise patterns, CUDA-graph medians in us.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_expand_variants.py

- select3d: the densify kernel's select tile (rows, groups, m): each thread holds whole groups,
  one compare-select per kept slot, then a reshape to (rows, groups * m) for tl.dot.
- gather2d: the dense tile (rows, k) directly; each position loads its group's kept offsets and
  values (repeated addresses, served by L1) and keeps the one that matches.
"""

import itertools
import os
import time

import torch
import triton
import triton.language as tl
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import spmm_nm_decode as decode
from sparsekernels.ops._layout import padded_rows
from sparsekernels.ops._triton_nm import packed_words
from sparsekernels.prune.masks import nm_mask

BUDGET_S = float(os.environ.get("BUDGET_S", 200))
START = time.time()
torch.manual_seed(0)


@triton.jit
def _expand_dot(
    values,  # (M, S) bf16, unit stride along S
    indices,  # (M, S) uint8 offsets within the group
    b,  # (K, N)
    ws,  # (SPLIT, M, N) float32 partial sums
    M,
    N,
    GROUPS,
    GROUPS_PER_SPLIT,
    stride_vm,
    stride_im,
    stride_bk,
    stride_bn,
    stride_ws,
    stride_wm,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    GATHER2D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    BLOCK_K: tl.constexpr = BLOCK_G * M_GROUP
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows = offs_m.to(tl.int64)
    g_start = tl.program_id(2) * GROUPS_PER_SPLIT
    g_end = tl.minimum(g_start + GROUPS_PER_SPLIT, GROUPS)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g0 in range(g_start, g_end, BLOCK_G):
        if GATHER2D:
            k_local = tl.arange(0, BLOCK_K)
            groups = g0 + k_local // M_GROUP
            position = (k_local % M_GROUP)[None, :]
            mask = mask_m[:, None] & (groups < g_end)[None, :]
            a = tl.zeros((BLOCK_M, BLOCK_K), dtype=values.dtype.element_ty)
            for j in tl.static_range(N_KEEP):
                slots = (groups * N_KEEP + j)[None, :]
                offset = tl.load(
                    indices + rows[:, None] * stride_im + slots, mask=mask, other=M_GROUP
                )
                value = tl.load(values + rows[:, None] * stride_vm + slots, mask=mask, other=0.0)
                a = tl.where(offset.to(tl.int32) == position, value, a)
        else:
            groups = g0 + tl.arange(0, BLOCK_G)
            within = tl.arange(0, M_GROUP)[None, None, :]
            mask = mask_m[:, None, None] & (groups < g_end)[None, :, None]
            slots = groups[None, :, None] * N_KEEP
            tile = tl.zeros((BLOCK_M, BLOCK_G, M_GROUP), dtype=values.dtype.element_ty)
            for j in tl.static_range(N_KEEP):
                offset = tl.load(
                    indices + rows[:, None, None] * stride_im + slots + j, mask=mask, other=M_GROUP
                )
                value = tl.load(
                    values + rows[:, None, None] * stride_vm + slots + j, mask=mask, other=0.0
                )
                tile = tl.where(offset.to(tl.int32) == within, value, tile)
            a = tl.reshape(tile, (BLOCK_M, BLOCK_K))
        ks = g0 * M_GROUP + tl.arange(0, BLOCK_K)
        b_tile = tl.load(
            b + ks[:, None] * stride_bk + offs_n[None, :] * stride_bn,
            mask=(ks < g_end * M_GROUP)[:, None] & mask_n[None, :],
            other=0.0,
        )
        acc = tl.dot(a, b_tile, acc)
    ws_ptrs = ws + tl.program_id(2) * stride_ws + rows[:, None] * stride_wm + offs_n[None, :]
    tl.store(ws_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


def expand_dot(
    values, indices, b, n, m, *, gather2d, block_m, block_g, split, num_warps, num_stages
):
    rows, cols = values.shape[0], b.shape[1]
    groups = values.shape[1] // n
    per_split = triton.cdiv(triton.cdiv(groups, split), block_g) * block_g
    block_n = max(16, min(64, triton.next_power_of_2(cols)))
    split = triton.cdiv(groups, per_split)  # whole steps per split: maybe fewer splits
    ws = torch.empty(split, rows, cols, device=b.device, dtype=torch.float32)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(cols, block_n), split)
    _expand_dot[grid](
        values, indices, b, ws, rows, cols, groups, per_split,
        values.stride(0), indices.stride(0), b.stride(0), b.stride(1), ws.stride(0), ws.stride(1),
        N_KEEP=n, M_GROUP=m, GATHER2D=gather2d, BLOCK_M=block_m, BLOCK_G=block_g,
        BLOCK_N=block_n, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return ws[0].to(b.dtype) if split == 1 else ws.sum(0).to(b.dtype)


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def checked(fn, ref) -> float | None:
    err = ((fn().float() - ref).norm() / ref.norm()).item()
    return bench(fn) if err < 1e-2 else None


GRID = list(itertools.product((False, True), (16, 64), (128,), (1, 4)))  # 2d, rows, k, split


def main():
    table = []
    print(f"# {torch.cuda.get_device_name()} bf16 us; variants (gather2d, block_m, block_k, split)")
    M, K = 14336, 4096
    w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    for n, m in [(1, 8), (2, 8), (2, 4)]:
        W = sk.NMMatrix.from_dense(w, n, m, mask=nm_mask(w.float(), n, m))
        bits = decode.packed_bits(m, 1)
        words = packed_words(W.indices, bits)
        for N in (16, 32, 64, 128):
            if time.time() - START > BUDGET_S:
                break
            B = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
            ref = W.to_dense().float() @ B.float()
            row = {"dense": bench(lambda: w @ B)}
            row["route"] = bench(lambda: sk.spmm(W, B))
            row["densify+mm"] = bench(lambda: sk.spmm(W, B, backend="dense"))
            if N <= 64:
                out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
                Bp = padded_rows(B)
                dec = lambda: decode.spmm_nm_decode(values=W.values, words=words, bits=bits, b=Bp,  # noqa: E731
                                                    bias=None, out=out, n=n, m=m, vector=1, block=1,
                                                    activation="none", block_m=2, block_w=256 // (32 // bits),
                                                    num_warps=1, num_stages=2)  # fmt: skip
                row["decode"] = checked(dec, ref)
            best = []
            if N <= 64:
                for gather2d, bm, bk, split in GRID:
                    fn = lambda: expand_dot(W.values, W.indices, B, n, m, gather2d=gather2d,  # noqa: E731
                                            block_m=bm, block_g=bk // m, split=split, num_warps=4,
                                            num_stages=3)  # fmt: skip
                    try:
                        t = checked(fn, ref)
                    except Exception as error:  # noqa: BLE001 - a configuration that does not fit
                        print("  ", gather2d, bm, bk, split, type(error).__name__, str(error)[:80])
                        continue
                    if t is not None:
                        best.append((round(t, 1), gather2d, bm, bk, split))
                    else:
                        print("   wrong result", gather2d, bm, bk, split)
                best.sort()
            case = f"{n}:{m} N={N}"
            print(
                case,
                {k: round(v, 1) if v else v for k, v in row.items()},
                "expand",
                best[:4],
                flush=True,
            )
            table.append((case, row, best[0] if best else None))

    print(
        f"\n{'case':<12} {'dense':>7} {'route':>7} {'dnsfy':>7} {'decode':>7} {'expand':>7}  best variant"
    )
    for case, row, best in table:
        dec = row.get("decode") or float("nan")
        t = best[0] if best else float("nan")
        print(f"{case:<12} {row['dense']:7.1f} {row['route']:7.1f} {row['densify+mm']:7.1f} {dec:7.1f} {t:7.1f}  {best[1:] if best else None}")  # fmt: skip

    csr_routes(w)


def csr_routes(w):
    """The same question for CSR weights: what the automatic route runs at 16-128 tokens."""
    from sparsekernels.prune.masks import magnitude_mask

    print(f"\n{'CSR case':<16} {'dense':>7} {'route':>7} {'dnsfy':>7}")
    for sparsity in (0.7, 0.9):
        W = sk.CSRMatrix.from_dense(w * magnitude_mask(w.float(), sparsity))
        for N in (16, 32, 64, 128):
            B = torch.randn(w.shape[1], N, device="cuda", dtype=torch.bfloat16)
            dense, route = bench(lambda: w @ B), bench(lambda: sk.spmm(W, B))
            densify = bench(lambda: sk.spmm(W, B, backend="dense"))
            print(f"{sparsity:.0%} N={N:<10} {dense:7.1f} {route:7.1f} {densify:7.1f}", flush=True)


if __name__ == "__main__":
    main()
