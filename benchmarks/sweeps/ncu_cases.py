"""Kernels to read under Nsight Compute (run_h200.sh step `ncu`): each case runs its call a few
times (compiling, caches warm), then once between torch.cuda.profiler.start() and stop() in an
NVTX range named after the case, so `ncu --profile-from-start off --nvtx` profiles exactly
those launches and labels them. Without ncu it just runs the calls.

The open questions these answer (benchmarks/NOTES.md; the first run's reading is in the
thirteenth session's entry, results/nvidia-h200/2026-11-30/at-02f1e78/ncu.txt):
- the N:M decode kernel at one token moves its weight at ~2 TB/s where cuBLAS's GEMV reads
  3.8 TB/s, stalled on loads with no eligible warp 47% of cycles: does the prefetching walk
  (the next step's loads before this step's gather) keep more loads in flight?
- the select kernel (spmm_nm_select.py, the one-token route for 2:8, 1:8, 2:4 since the
  seventeenth session; `linear 2:8 ... x1` runs it) moves its weight at 2.6 TB/s with no
  gathers and 13.7 instructions a value: issue-bound, latency-bound (one step's loads, then
  its selects, no overlap), or short of warps?
- the one-hot (expand) kernel at 16 tokens takes 43-45 us for 2:8 where its weight's bytes
  need ~10: what bounds it (the expansion's instructions, shared memory, the dot, latency)?
- the sparse-tensor-core kernel (spmm_nm_mma_sp.py) at 8 tokens moves 2:4's bytes at 3.3
  TB/s, 2:8's at 2.6 and 1:8's at 1.8, where a plain read of 1:8's values in its pattern
  (64-byte runs a row a step) reaches 2.7 incl. launch (row_run_reads.py): what holds 1:8?
- the CSR scatter kernel (spmm_csr_scatter.py, the route at 9-32 tokens) takes 26 us at 90%
  on 14336 x 4096 at 16 tokens where its bytes need 7; loading two steps ahead, 128-column
  steps and 128-row tiles changed nothing (at-34d7d26): what does each step wait on? (read in
  at-35aed1b: the shared pipe; a wgmma ring with ~20% fewer wavefronts was 0-5% faster; and
  with 128-row tiles on 4 warps, a warp's two m16 tiles sharing its B reads?)
- the CSR one-token kernel at 70% moves 14336 x 4096's entries at ~2.9 TB/s where cuBLAS's
  GEMV reads 3.8 (the 1.5x target needs 3.5): L1 gathers of x, issue, or bytes in flight?
- the TMA ring (spmm_nm_select_ring.py, the one-token route for 1:8 on 4096+ rows and
  columns) adds bytes at ~3.4 TB/s with ~415 instructions a step, about half its issue bound,
  and ~3.3 us fixed a call: what stalls it (the CTA barrier a step, the ready barrier's wait
  on TMA, x's loads), and how long is the ramp before the first step?
- the row softmax in bf16 is bound by instructions issued: how many does each form issue now
  (base-2 exponentials, one reciprocal a row), with two heads on two warps or on one warp, and
  which pipe is busiest?
    ncu --clock-control none --profile-from-start off --nvtx --section ... \\
        python3 benchmarks/sweeps/ncu_cases.py      (CASES=select,GEMV: names containing either)
"""

import os

import torch

import sparsekernels as sk
from sparsekernels.bench.cases import _pattern_from_mask, attention_mask


def weight(pattern: str, M: int, K: int):
    torch.manual_seed(0)
    w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    if pattern.endswith("%"):
        mask = sk.prune.magnitude_mask(w.float(), float(pattern[:-1]) / 100)
        return w, sk.CSRMatrix.from_dense(w, mask=mask)
    n, m = map(int, pattern.split(":"))
    return w, sk.NMMatrix.from_dense(w, n, m, mask=sk.prune.nm_mask(w.float(), n, m))


def cases() -> dict:
    """name -> a call that launches the kernel(s) to read."""
    from sparsekernels.kernels.softmax_csr import sparse_softmax
    from sparsekernels.kernels.spmm_nm_decode import packed_bits, spmm_nm_decode
    from sparsekernels.ops._triton_nm import packed_words

    calls = {}
    w, W = weight("2:8", 4096, 14336)
    x1 = torch.randn(1, 14336, device="cuda", dtype=torch.bfloat16)
    calls["linear 2:8 4096x14336 x1"] = lambda: sk.linear(x1, W)
    calls["dense GEMV 4096x14336"] = lambda: x1 @ w.t()
    words = packed_words(W.indices, packed_bits(8, 1))
    out = torch.empty(4096, 1, device="cuda", dtype=torch.bfloat16)
    for prefetch in (False, True):  # the route's one-token tile: 4 rows, 1024 slots, 2 warps
        calls[f"decode 2:8 x1 prefetch={prefetch}"] = lambda prefetch=prefetch: spmm_nm_decode(
            values=W.values, words=words, bits=4, b=x1.t(), bias=None, out=out, n=2, m=8,
            vector=1, block=1, activation="none", block_m=4, block_w=128, num_warps=2,
            num_stages=2, prefetch=prefetch,
        )  # fmt: skip
    x8 = torch.randn(8, 14336, device="cuda", dtype=torch.bfloat16)
    for pattern in ("2:4", "2:8", "1:8"):  # the sparse-tensor-core kernel's route at 8 tokens
        _, W8 = weight(pattern, 4096, 14336)
        calls[f"linear {pattern} 4096x14336 x8 (mma.sp)"] = lambda W8=W8: sk.linear(x8, W8)
    _, W_short = weight("2:8", 14336, 4096)  # the select kernel's short-row tile (2 x 128)
    x_short = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    calls["linear 2:8 14336x4096 x1 (select)"] = lambda: sk.linear(x_short, W_short)
    _, W18 = weight("1:8", 4096, 14336)  # the TMA ring's route since the 39th session
    calls["linear 1:8 4096x14336 x1 (ring)"] = lambda: sk.linear(x1, W18)
    _, W18_short = weight("1:8", 14336, 4096)
    calls["linear 1:8 14336x4096 x1 (ring)"] = lambda: sk.linear(x_short, W18_short)
    calls["ring 2:8 4096x14336 x1"] = _ring_case(W, x1)  # ties the select kernel: why?
    for M, K in ((4096, 14336), (14336, 4096)):
        _, W16 = weight("2:8", M, K)
        x16 = torch.randn(16, K, device="cuda", dtype=torch.bfloat16)
        calls[f"linear 2:8 {M}x{K} x16 (expand)"] = lambda W16=W16, x16=x16: sk.linear(x16, W16)
    for pattern, M, K, split, block_m in (("2:8", 14336, 4096, 1, 64), ("1:8", 14336, 4096, 1, 64),
                                          ("2:8", 4096, 14336, 4, 64),
                                          ("2:8", 14336, 4096, 3, 64)):  # fmt: skip
        calls.update(_wgmma_cases(pattern, M, K, split, block_m))
    for sparsity, M, K in (("90%", 14336, 4096), ("70%", 4096, 14336)):
        _, W_csr = weight(sparsity, M, K)
        x16 = torch.randn(16, K, device="cuda", dtype=torch.bfloat16)
        calls[f"linear {sparsity} {M}x{K} x16 (scatter)"] = (
            lambda W_csr=W_csr, x16=x16: sk.linear(x16, W_csr)
        )  # fmt: skip
        calls[f"128 rows 4 warps {sparsity} {M}x{K} x16 (scatter)"] = _scatter_wide_case(
            W_csr, x16
        )  # fmt: skip
    x1_short = x_short  # one token, CSR: the one-token kernel at 70%, the stream walk at 90%
    for sparsity, M, K in (("70%", 14336, 4096), ("70%", 4096, 14336), ("90%", 14336, 4096)):
        _, W_csr = weight(sparsity, M, K)
        x = x1_short if K == 4096 else x1
        calls[f"linear {sparsity} {M}x{K} x1 (csr)"] = lambda W_csr=W_csr, x=x: sk.linear(x, W_csr)
    w_gemv, _ = weight("70%", 14336, 4096)
    calls["dense GEMV 14336x4096"] = lambda: x_short @ w_gemv.t()
    g = torch.Generator(device="cuda").manual_seed(0)
    P = _pattern_from_mask(
        attention_mask("local:256", 4096, torch.device("cuda"), g), torch.float32
    )
    S = P.with_values(torch.randn(16, P.nnz, device="cuda", dtype=torch.bfloat16))
    calls["softmax local:256 16 heads bf16"] = lambda: sk.sparse_softmax(S, 0.5)
    probs = torch.empty_like(S.values)
    calls["softmax local:256 bf16, 2 heads on 1 warp"] = lambda: sparse_softmax(
        row_offsets=P.row_offsets, values=S.values, out=probs, scale=0.5, block=256,
        num_warps=1, heads=2,
    )  # fmt: skip
    return calls


def _ring_case(W, x):
    """The TMA ring kernel at its routed launch on a weight the route gives the select kernel
    (2:8: the same ~415 instructions a step as 1:8, the same ~3.4 TB/s marginal rate)."""
    from sparsekernels.kernels.nm_decode_tuning import SELECT_RING
    from sparsekernels.kernels.spmm_nm_select_ring import spmm_nm_select_ring

    words = W.packed_indices(4)
    out = torch.empty(W.shape[0], 1, device="cuda", dtype=torch.bfloat16)
    return lambda: spmm_nm_select_ring(
        values=W.values, words=words, x=x.t(), bias=None, out=out, n=W.n, activation="none",
        **SELECT_RING,
    )  # fmt: skip


def _scatter_wide_case(W, x):
    """The scatter kernel with 128-row tiles on 4 warps (two m16 tiles a warp share its read
    of B's tile) and the route's split: how many shared wavefronts a row now?"""
    from sparsekernels.kernels.spmm_csr_scatter import spmm_csr_scatter, tiled_entries

    offsets, entries = tiled_entries(
        W.row_offsets, W.column_indices, W.values, W.shape[1], block_m=128
    )
    out = torch.empty(W.shape[0], x.shape[0], device="cuda", dtype=torch.bfloat16)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    split = max(1, min(8 * sms // -(-W.shape[0] // 128), -(-W.shape[1] // 64)))
    return lambda: spmm_csr_scatter(
        tile_offsets=offsets, entries=entries, b=x.t(), bias=None, out=out, activation="none",
        split=split, block_m=128, warps=4,
    )  # fmt: skip


def _wgmma_cases(pattern: str, M: int, K: int, split: int, block_m: int) -> dict:
    """The wgmma kernel (spmm_nm_wgmma.py) at 16 tokens, the route's tiles: what holds it at
    a third of its instruction-issue bound (its time follows its instructions, not its
    bytes: 1:8 moves half of 2:8's and takes 0.88 of its time)?"""
    from sparsekernels.kernels.spmm_nm_decode import packed_bits
    from sparsekernels.kernels.spmm_nm_wgmma import spmm_nm_wgmma
    from sparsekernels.ops._triton_nm import packed_words

    _, W = weight(pattern, M, K)
    x = torch.randn(16, K, device="cuda", dtype=torch.bfloat16)
    words = packed_words(W.indices, packed_bits(W.m, 1))
    out = torch.empty(M, 16, device="cuda", dtype=torch.bfloat16)
    label = f"{pattern} {M}x{K} x16"
    return {
        f"wgmma {label} {block_m}x32 k{split}": lambda: spmm_nm_wgmma(
            values=W.values,
            words=words,
            bits=packed_bits(W.m, 1),
            b=x.t(),
            bias=None,
            out=out,
            n=W.n,
            m=W.m,
            vector=1,
            activation="none",
            block_m=block_m,
            block_g=32,
            block_n=16,
            split=split,
        ),  # fmt: skip
        f"linear {label} (route)": lambda: sk.linear(x, W),
    }


def main():
    wanted = [w for w in os.environ.get("CASES", "").split(",") if w]  # substrings of names
    for name, call in cases().items():
        if wanted and not any(w in name for w in wanted):
            continue
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        torch.cuda.nvtx.range_push(name)
        call()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        print("profiled:", name, flush=True)


if __name__ == "__main__":
    main()
