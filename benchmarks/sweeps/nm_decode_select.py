"""N:M decode at one token without per-slot gathers of x: a prototype to measure before it
replaces the decode kernel's one-token path (kernels/spmm_nm_decode.py).

The decode kernel reaches ~2 TB/s on the weight's bytes at one token (2:8 on 4096 x 14336:
18.1 us) where cuBLAS's dense GEMV reads 3.7 TB/s; its time grows with the slots, not the
bytes (~1.2 ps a slot at 2:4 and 2:8), which points at the per-slot gather of x from L1 (32
lanes, ~32 cache lines an instruction) rather than at HBM. The variants here load x once per
step as a dense (groups, m) chunk, coalesced, and pick each slot's element from it:
- "select": m compare-selects a slot against x loaded per position p (m strided loads a step);
- "gather": tl.gather along the group's m positions of the chunk (shared memory or shuffles,
  as Triton lowers it);
- "direct": the same loop with the plain per-slot gather, to separate the loop from the gather;
- "prefetch": "direct" with the next step's values and words loaded before this step's gather,
  by hand (the gather's address depends on the words, so Triton's pipelining cannot overlap
  it; here only the gather waits).
Offsets are read as the decode kernel stores them (bit-packed int32 words), re-read per slot
from L1. Element-wise, one token, bf16; CUDA-graph medians in us against dense and the
library's route. Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_decode_select.py
    MODES=direct,prefetch BUDGET_S=120 ...  (a subset of the forms)
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/sweeps/nm_decode_select.py --check
"""

import itertools
import os
import sys
import time

import torch
import triton
import triton.language as tl

import sparsekernels as sk
from sparsekernels.kernels.spmm_nm_decode import packed_bits

CHECK = "--check" in sys.argv
BUDGET_S = float(os.environ.get("BUDGET_S", 150))
MODES = {"select": 0, "gather": 1, "direct": 2, "prefetch": 3}
RUN = os.environ.get("MODES", ",".join(MODES)).split(",")


@triton.jit
def _tile(M, N_KEEP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_G: tl.constexpr):
    """The program's rows (offsets, mask, clamped int64 rows) and its group and slot ranges."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < M
    rows = tl.where(mask_m, offs_m, 0).to(tl.int64)
    return offs_m, mask_m, rows, tl.arange(0, BLOCK_G), tl.arange(0, N_KEEP)


@triton.jit
def _select_kernel(
    values,  # (M, S) bf16, unit stride along S
    words,  # (M, W) int32 packed offsets, BITS each
    x,  # (K,) the token
    out,  # (M,) float32
    M,
    S,
    stride_vm,
    stride_wm,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    BITS: tl.constexpr,
    MODE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr,  # groups a step
):
    SPW: tl.constexpr = 32 // BITS
    offs_m, mask_m, rows, g, j = _tile(M, N_KEEP, BLOCK_M, BLOCK_G)
    p = tl.arange(0, M_GROUP)
    acc = tl.zeros((BLOCK_M, BLOCK_G, N_KEEP), dtype=tl.float32)
    groups_total = S // N_KEEP
    for g0 in range(0, groups_total, BLOCK_G):
        groups = g0 + g
        mask_g = groups < groups_total
        slots = groups[:, None] * N_KEEP + j[None, :]  # (G, n)
        mask = mask_m[:, None, None] & mask_g[None, :, None]
        vals = tl.load(
            values + rows[:, None, None] * stride_vm + slots[None, :, :], mask=mask, other=0.0
        )
        word = tl.load(
            words + rows[:, None, None] * stride_wm + (slots // SPW)[None, :, :], mask=mask, other=0
        )
        offsets = (word >> ((slots % SPW) * BITS)[None, :, :]) & ((1 << BITS) - 1)
        if MODE == 0:
            picked = tl.zeros((BLOCK_M, BLOCK_G, N_KEEP), dtype=tl.float32)
            for q in tl.static_range(M_GROUP):
                xq = tl.load(x + groups * M_GROUP + q, mask=mask_g, other=0.0).to(tl.float32)
                picked = tl.where(offsets == q, xq[None, :, None], picked)
        elif MODE == 1:
            chunk = tl.load(
                x + groups[:, None] * M_GROUP + p[None, :], mask=mask_g[:, None], other=0.0
            ).to(tl.float32)
            chunk = tl.broadcast_to(chunk[None, :, :], (BLOCK_M, BLOCK_G, M_GROUP))
            picked = tl.gather(chunk, offsets, 2)
        else:
            cols = groups[None, :, None] * M_GROUP + offsets
            picked = tl.load(x + cols, mask=mask, other=0.0).to(tl.float32)
        acc += vals.to(tl.float32) * picked
    total = tl.sum(tl.sum(acc, axis=2), axis=1)
    tl.store(out + offs_m, total, mask=mask_m)


@triton.jit
def _prefetch_kernel(
    values,
    words,
    x,
    out,
    M,
    S,
    stride_vm,
    stride_wm,
    N_KEEP: tl.constexpr,
    M_GROUP: tl.constexpr,
    BITS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_G: tl.constexpr,
):
    SPW: tl.constexpr = 32 // BITS
    offs_m, mask_m, rows, g, j = _tile(M, N_KEEP, BLOCK_M, BLOCK_G)
    groups_total = S // N_KEEP
    value_rows = values + rows[:, None, None] * stride_vm
    word_rows = words + rows[:, None, None] * stride_wm
    groups = g
    slots = groups[:, None] * N_KEEP + j[None, :]
    mask = mask_m[:, None, None] & (groups < groups_total)[None, :, None]
    vals = tl.load(value_rows + slots[None, :, :], mask=mask, other=0.0)
    word = tl.load(word_rows + (slots // SPW)[None, :, :], mask=mask, other=0)
    acc = tl.zeros((BLOCK_M, BLOCK_G, N_KEEP), dtype=tl.float32)
    for g0 in range(0, groups_total, BLOCK_G):
        next_groups = g0 + BLOCK_G + g
        next_slots = next_groups[:, None] * N_KEEP + j[None, :]
        next_mask = mask_m[:, None, None] & (next_groups < groups_total)[None, :, None]
        next_vals = tl.load(value_rows + next_slots[None, :, :], mask=next_mask, other=0.0)
        next_word = tl.load(word_rows + (next_slots // SPW)[None, :, :], mask=next_mask, other=0)
        offsets = (word >> ((slots % SPW) * BITS)[None, :, :]) & ((1 << BITS) - 1)
        picked = tl.load(x + groups[None, :, None] * M_GROUP + offsets, mask=mask, other=0.0)
        acc += vals.to(tl.float32) * picked.to(tl.float32)
        groups, slots, mask, vals, word = next_groups, next_slots, next_mask, next_vals, next_word
    total = tl.sum(tl.sum(acc, axis=2), axis=1)
    tl.store(out + offs_m, total, mask=mask_m)


def launch(W, words, bits, x, out, mode, block_m, block_g, warps):
    rows, slots = W.values.shape
    grid = (triton.cdiv(rows, block_m),)
    if mode == "prefetch":
        _prefetch_kernel[grid](
            W.values, words, x, out, rows, slots, W.values.stride(0), words.stride(0),
            N_KEEP=W.n, M_GROUP=W.m, BITS=bits, BLOCK_M=block_m, BLOCK_G=block_g,
            num_warps=warps, num_stages=1,
        )  # fmt: skip
        return out
    _select_kernel[grid](
        W.values, words, x, out, rows, slots, W.values.stride(0), words.stride(0),
        N_KEEP=W.n, M_GROUP=W.m, BITS=bits, MODE=MODES[mode], BLOCK_M=block_m, BLOCK_G=block_g,
        num_warps=warps,
    )  # fmt: skip
    return out


def nm_weight(rows, cols, n, m, device):
    w = torch.randn(rows, cols, device=device, dtype=torch.bfloat16)
    return sk.NMMatrix.from_dense(w, n, m, mask=sk.prune.nm_mask(w.float(), n, m))


def check():
    """Every mode against float64 on small shapes with partial tiles (interpreter)."""
    for (n, m), mode in itertools.product([(2, 8), (1, 8), (2, 4)], MODES):
        W = nm_weight(7, 8 * m + m, n, m, "cpu")
        bits = packed_bits(m, 1)
        words = W.packed_indices(bits)
        x = torch.randn(W.shape[1], dtype=torch.bfloat16)
        out = torch.full((7,), float("nan"))
        launch(W, words, bits, x, out, mode, 4, 4, 1)
        want = W.to_dense().double() @ x.double()
        err = (out.double() - want).abs().max().item()
        assert err < 1e-2 * want.abs().max().item(), (n, m, mode, err)
        print(f"{n}:{m} {mode}: max error {err:.2e}")


def bench(fn) -> float:
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3


def sweep():
    start = time.time()
    table = []
    shapes = [(4096, 14336), (14336, 4096)]
    for (M, K), (n, m) in itertools.product(shapes, [(2, 8), (1, 8), (2, 4)]):
        W = nm_weight(M, K, n, m, "cuda")
        bits = packed_bits(m, 1)
        words = W.packed_indices(bits)
        x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
        dense_w = W.to_dense()
        want = (dense_w.float() @ x[0].float()).double()
        dense = bench(lambda: x @ dense_w.t())
        route = bench(lambda: sk.linear(x, W))
        out = torch.empty(M, device="cuda")
        results = []
        for mode, bm, bg, nw in itertools.product(RUN, (4, 8), (64, 256), (1, 4)):
            if time.time() - start > BUDGET_S or bm * bg * n > 4096:
                continue
            fn = lambda: launch(W, words, bits, x[0], out, mode, bm, bg, nw)  # noqa: E731
            try:
                out.fill_(float("nan"))
                fn()
                err = ((out.double() - want).norm() / want.norm()).item()
                if not err < 1e-2:
                    print(M, K, n, m, mode, bm, bg, nw, "wrong", err)
                    continue
                results.append((bench(fn), mode, bm, bg, nw))
            except Exception as error:  # noqa: BLE001 - a config that does not compile
                print(mode, bm, bg, nw, type(error).__name__, str(error)[:100])
        best = {mode: min((r for r in results if r[1] == mode), default=None) for mode in RUN}
        case = f"{M}x{K} {n}:{m}"
        print(case, f"dense {dense:.1f} route {route:.1f}", best, flush=True)
        table.append((case, dense, route, best))
    print(f"\n{'case':<18} {'dense':>6} {'route':>6} " + " ".join(f"{k:>24}" for k in RUN))
    for case, dense, route, best in table:
        cells = [
            f"{b[0]:6.1f} {b[2:]!s:>17}" if b else f"{'-':>24}" for b in (best[k] for k in RUN)
        ]
        print(f"{case:<18} {dense:6.1f} {route:6.1f} " + " ".join(cells))


if __name__ == "__main__":
    check() if CHECK else sweep()
