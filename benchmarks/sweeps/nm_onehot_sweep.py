"""An N:M product on tensor cores without expanding tiles: W @ B = sum over the positions p of a
group of (W's kept values whose offset is p) @ (B's rows at position p of each group).

For each p in 0..m-1, A_p = where(offset == p, values, 0) is a (rows, slots) tile of the
compressed weight as loaded (no 3-D tile, no reshape), and B_p holds the B row each slot would
read at position p: row (group * m + p). So a step is m plain tl.dot calls on 2-D tiles,
n times a dense tile's tensor-core work (idle at these token counts), one select per kept
slot and position, and only the compressed weight (values + uint8 offsets) comes from memory.
The select tile of nm_expand_variants.py (the best so far: 1:8 39.5 us at 16 tokens, dense 31)
needed a (rows, groups, m) tile reshaped for tl.dot and two strided loads at n = 2.

    PYTHONPATH=src python3 benchmarks/sweeps/nm_onehot_sweep.py           # H200 sweep
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/sweeps/nm_onehot_sweep.py --check
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/sweeps/nm_onehot_sweep.py --smoke

Staged search per case (budget BUDGET_S, default 240 s): tiles (rows, slots) first at 4 warps,
3 stages, no K split; then warps, stages and the K split around the best tile. bf16, element-wise
patterns, CUDA-graph medians in us, against dense, the automatic route and the decode kernel.
"""

import itertools
import os
import sys
import time

import torch
import triton
import triton.language as tl

PATTERNS = [(1, 8), (2, 8), (2, 4)]


@triton.jit
def _onehot_dot(
    values,  # (M, S) compressed values, unit stride along S
    indices,  # (M, S) uint8 offsets within the group (NMMatrix.indices, element-wise)
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
    BLOCK_M: tl.constexpr,
    BLOCK_S: tl.constexpr,  # kept slots a step (a multiple of N_KEEP, at least 16)
    BLOCK_N: tl.constexpr,
):
    BLOCK_G: tl.constexpr = BLOCK_S // N_KEEP
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows = offs_m.to(tl.int64)
    g_start = tl.program_id(2) * GROUPS_PER_SPLIT
    g_end = tl.minimum(g_start + GROUPS_PER_SPLIT, GROUPS)
    b_cols = offs_n[None, :].to(tl.int64) * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g0 in range(g_start, g_end, BLOCK_G):
        slots = g0 * N_KEEP + tl.arange(0, BLOCK_S)
        groups = slots // N_KEEP
        mask_s = groups < g_end
        mask = mask_m[:, None] & mask_s[None, :]
        vals = tl.load(values + rows[:, None] * stride_vm + slots[None, :], mask=mask, other=0.0)
        offsets = tl.load(
            indices + rows[:, None] * stride_im + slots[None, :], mask=mask, other=M_GROUP
        ).to(tl.int32)
        zeros = tl.zeros_like(vals)
        b_rows = groups.to(tl.int64) * M_GROUP
        for p in tl.static_range(M_GROUP):
            a = tl.where(offsets == p, vals, zeros)
            b_tile = tl.load(
                b + (b_rows + p)[:, None] * stride_bk + b_cols,
                mask=mask_s[:, None] & mask_n[None, :],
                other=0.0,
            )
            acc = tl.dot(a, b_tile, acc)
    ws_ptrs = ws + tl.program_id(2) * stride_ws + rows[:, None] * stride_wm + offs_n[None, :]
    tl.store(ws_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


def onehot_dot(values, indices, b, n, m, *, block_m, block_s, split, num_warps, num_stages):
    """W @ b for an element-wise N:M weight (values, indices as NMMatrix holds them)."""
    rows, cols = values.shape[0], b.shape[1]
    groups = values.shape[1] // n
    block_g = block_s // n
    per_split = triton.cdiv(triton.cdiv(groups, split), block_g) * block_g
    split = triton.cdiv(groups, per_split)  # whole steps per split: maybe fewer splits
    block_n = max(16, min(64, triton.next_power_of_2(cols)))
    ws = torch.empty(split, rows, cols, device=b.device, dtype=torch.float32)
    grid = (triton.cdiv(rows, block_m), triton.cdiv(cols, block_n), split)
    _onehot_dot[grid](
        values, indices, b, ws, rows, cols, groups, per_split,
        values.stride(0), indices.stride(0), b.stride(0), b.stride(1), ws.stride(0), ws.stride(1),
        N_KEEP=n, M_GROUP=m, BLOCK_M=block_m, BLOCK_S=block_s, BLOCK_N=block_n,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return ws[0].to(b.dtype) if split == 1 else ws.sum(0).to(b.dtype)


def check() -> None:
    """Interpreter check on small fp16 shapes: every pattern, ragged rows, groups and tokens,
    splits that leave a short last part; float64 reference, outputs poisoned by torch.empty."""
    import sparsekernels as sk
    from sparsekernels.prune.masks import nm_mask

    torch.manual_seed(0)
    for (n, m), (M, K, N), split in itertools.product(
        [(1, 8), (2, 8), (2, 4), (1, 4)], [(37, 96, 5), (16, 256, 16), (3, 64, 1)], (1, 3)
    ):
        w = torch.randn(M, K, dtype=torch.float16)
        W = sk.NMMatrix.from_dense(w, n, m, mask=nm_mask(w.float(), n, m))
        B = torch.randn(K, N, dtype=torch.float16)
        ref = W.to_dense().double() @ B.double()
        got = onehot_dot(W.values, W.indices, B, n, m, block_m=16, block_s=16, split=split,
                         num_warps=4, num_stages=1).double()  # fmt: skip
        worst_row = ((got - ref).norm(dim=1) / ref.norm(dim=1).clamp_min(1e-6)).max().item()
        assert worst_row < 2e-3, (n, m, M, K, N, split, worst_row)
        print(f"{n}:{m} {M}x{K}x{N} split {split}: worst row rel. error {worst_row:.1e}")


def sweep(device="cuda", M=14336, K=4096, tokens=(16, 32, 64, 8, 128)) -> None:
    """The H200 sweep; `--smoke` runs its logic on tiny CPU shapes in the interpreter."""
    import sparsekernels as sk
    from sparsekernels.prune.masks import nm_mask

    budget, start = float(os.environ.get("BUDGET_S", 240)), time.time()
    torch.manual_seed(0)

    def bench(fn) -> float:
        if device != "cuda":
            begin = time.perf_counter()
            fn()
            return (time.perf_counter() - begin) * 1e6
        from triton.testing import do_bench_cudagraph

        return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3

    def timed(fn, ref) -> float | None:
        try:
            err = ((fn().float() - ref).norm() / ref.norm()).item()
        except Exception as error:  # noqa: BLE001 - a configuration that does not fit
            print("   ", type(error).__name__, str(error)[:80])
            return None
        return bench(fn) if err < 1e-2 else None

    name = torch.cuda.get_device_name() if device == "cuda" else device
    dtype = torch.bfloat16 if device == "cuda" else torch.float16  # interpreter: no bf16 dot
    print(f"# {name} {dtype} us; configs (block_m, block_s, split, warps, stages)")
    table = []
    w = torch.randn(M, K, device=device, dtype=dtype)
    weights = {nm: sk.NMMatrix.from_dense(w, *nm, mask=nm_mask(w.float(), *nm)) for nm in PATTERNS}
    for N, (n, m) in itertools.product(tokens, PATTERNS):  # most wanted first
        if time.time() - start > budget:
            break
        W = weights[(n, m)]
        B = torch.randn(K, N, device=device, dtype=dtype)
        ref = W.to_dense().float() @ B.float()
        dense, route = bench(lambda: w @ B), bench(lambda: sk.spmm(W, B))

        def run(config):
            bm, bs, split, warps, stages = config
            fn = lambda: onehot_dot(W.values, W.indices, B, n, m, block_m=bm, block_s=bs,  # noqa: E731
                                    split=split, num_warps=warps, num_stages=stages)  # fmt: skip
            return timed(fn, ref)

        # staged: tiles, then split x warps around the best tile, then stages around that
        found = {
            c: run(c) for c in itertools.product((16, 32, 64, 128), (32, 64), (1,), (4,), (3,))
        }
        for stage in ("split x warps", "stages"):
            ok = sorted((t, c) for c, t in found.items() if t is not None)
            if not ok or time.time() - start > budget:
                break
            bm, bs, split, warps, stages = ok[0][1]
            near = (
                itertools.product((bm,), (bs,), (1, 2, 4), (4, 8), (stages,))
                if stage == "split x warps"
                else itertools.product((bm,), (bs,), (split,), (warps,), (2, 4))
            )
            found.update({c: run(c) for c in near if c not in found})
        best = sorted((round(t, 1), c) for c, t in found.items() if t is not None)
        case = f"{n}:{m} N={N}"
        print(case, f"dense {dense:.1f} route {route:.1f} onehot top {best[:3]}", flush=True)
        table.append((case, dense, route, best[0] if best else None))

    print(f"\n{'case':<12} {'dense':>7} {'route':>7} {'onehot':>7}  x dense  best config")
    for case, dense, route, best in table:
        t = best[0] if best else float("nan")
        print(f"{case:<12} {dense:7.1f} {route:7.1f} {t:7.1f}  {dense / t:5.2f}x  {best[1] if best else None}")  # fmt: skip


if __name__ == "__main__":
    if "--check" in sys.argv:
        check()
    elif "--smoke" in sys.argv:
        sweep("cpu", M=40, K=128, tokens=(5,))
    else:
        sweep()
