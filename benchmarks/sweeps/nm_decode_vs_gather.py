"""Element-wise N:M at 1-16 tokens: the decode kernel against the gather kernel it replaced, per
token count, to set kernels/tuning.py's DECODE_MAX_N (the llm suite of 2026-11-29-d had the
decode kernel slower at 16 tokens for m = 8, faster at 1-4). bf16, B (K, N) contiguous."""

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import tuning
from sparsekernels.prune.masks import nm_mask

torch.manual_seed(0)
print(f"# {torch.cuda.get_device_name()} bf16, us (CUDA-graph medians); decode / gather / F.linear")
for M, K in [(14336, 4096), (4096, 14336)]:
    w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    for n, m in [(1, 8), (2, 8), (2, 4)]:
        W = sk.NMMatrix.from_dense(w * nm_mask(w, n, m), n, m)
        line = f"{M}x{K} {n}:{m}"
        for N in (1, 2, 4, 8, 12, 16):
            b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
            times, outs = [], []
            for limit in (16, 0):  # decode, then gather
                tuning.DECODE_MAX_N = tuning.DECODE_MAX_N_SPARSEST = limit
                sk.spmm(W, b, backend="triton")
                times.append(
                    do_bench_cudagraph(lambda: sk.spmm(W, b, backend="triton"), rep=20) * 1e3
                )
                outs.append(sk.spmm(W, b, backend="triton").float())
            dense = do_bench_cudagraph(lambda: w @ b, rep=20) * 1e3
            assert torch.allclose(outs[0], outs[1], rtol=2e-2, atol=2e-1), (M, K, n, m, N)
            line += f" | N={N}: {times[0]:.1f}/{times[1]:.1f}/{dense:.1f}"
        print(line, flush=True)
tuning.DECODE_MAX_N, tuning.DECODE_MAX_N_SPARSEST = 16, 32
