"""Kernels to read under Nsight Compute (run_h200.sh step `ncu`): each case runs its call a few
times (compiling, caches warm), then once between torch.cuda.profiler.start() and stop() in an
NVTX range named after the case, so `ncu --profile-from-start off --nvtx` profiles exactly
those launches and labels them. Without ncu it just runs the calls.

The open questions these answer (benchmarks/NOTES.md):
- the N:M decode kernel at one token moves its weight at ~2 TB/s where cuBLAS's GEMV reads
  3.7 TB/s (dense GEMV profiled beside it);
- the same kernel at 8 tokens runs 5-10 us slower into linear's column-major output than into
  a row-major one, from the same compiled loop;
- the CSR few-token kernel at 16 tokens takes ~1 stored entry a clock per multiprocessor:
  is it L1 (tag) bound, L2 bound, or latency bound?
- the row softmax in bf16 reaches ~60% of the copy bandwidth (target 70%).
    ncu --clock-control none --profile-from-start off --nvtx --section ... \\
        python3 benchmarks/sweeps/ncu_cases.py
"""

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
    calls = {}
    for pattern, tokens in [("2:8", 1), ("2:8", 8), ("70%", 1), ("70%", 16)]:
        w, W = weight(pattern, 4096, 14336)
        x = torch.randn(tokens, 14336, device="cuda", dtype=torch.bfloat16)
        calls[f"linear {pattern} 4096x14336 x{tokens}"] = lambda W=W, x=x: sk.linear(x, W)
        if tokens == 1:
            calls["dense GEMV 4096x14336"] = lambda w=w, x=x: x @ w.t()
    # the decode kernel into a row-major output (linear's is column-major), 2:8 at 8 tokens
    from sparsekernels.ops import _triton_nm

    _, W = weight("2:8", 4096, 14336)
    b = torch.randn(8, 14336, device="cuda", dtype=torch.bfloat16).t()
    row_major = torch.empty(4096, 8, device="cuda", dtype=torch.bfloat16)
    calls["decode 2:8 x8 into row-major"] = lambda: _triton_nm._decode(
        W.values, W.indices, b, None, row_major, "none", 2, 8, 1, 1
    )
    g = torch.Generator(device="cuda").manual_seed(0)
    P = _pattern_from_mask(
        attention_mask("local:256", 4096, torch.device("cuda"), g), torch.float32
    )
    S = P.with_values(torch.randn(16, P.nnz, device="cuda", dtype=torch.bfloat16))
    calls["softmax local:256 16 heads bf16"] = lambda: sk.sparse_softmax(S, 0.5)
    return calls


def main():
    for name, call in cases().items():
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
