"""The vector-wise N:M tensor-core kernel (kernels/spmm_nm.py, `_spmm_nm_dot_kernel`) on weights
too small for its 64 x 256 tiles: MiniLM's and BERT's layers, where the route's tile gives 6-24
programs (at-9aa671a/small_layer_routes.txt: 2:8 v=64 on 384 x 1536 7.6-9.9 us at 16-256
tokens against densify + cuBLAS's 6.4-6.8). Each configuration (block_m x block_s x block_n /
warps / stages; "route" is tuning.spmm_nm_config's) checked against float64, then timed as
a CUDA graph over weight copies past L2; densify + cuBLAS and cuBLAS on the dense weight in
the same run. bf16, linear's layout (B = x^T, copied row-major and 16-column aligned as the
route does since the sixty-second session, the product column-major; a trailing "/t" reads
x^T in place, strided, "/u" copies it unpadded as the route did before (its B loads masked on
N: 2-byte, unpipelined, where the tokens are not a multiple of 16), and "copy" is the padded
copy's own time). "sized" is the route given the weight's shape (its small tiles).
    PYTHONPATH=src python3 benchmarks/sweeps/nm_vw_tiles.py
    SHAPES=384x1536 PATTERNS=2:8 TOKENS=112 CONFIGS=16x32x32/4/3 ...
    VECTOR=64 BLOCK=64 PATTERNS=64:128 SHAPES=4096x4096,14336x4096 TOKENS=16 ... (block-wise)
"""

import os

import torch
from _nm_cases import checked_cold_us, env_cases
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels import spmm_nm as kernel
from sparsekernels.kernels import tuning
from sparsekernels.ops._layout import aligned_rows, rows_contiguous, spmm_out

VECTOR = int(os.environ.get("VECTOR", "64"))
BLOCK = int(os.environ.get("BLOCK", "1"))  # block-wise patterns (64:128 v=64 b=64 at 16 tokens)
CONFIGS = os.environ.get(
    "CONFIGS",
    "route,32x32x128/4/3,16x32x128/4/3,16x32x64/4/3,16x32x32/4/3,32x64x64/4/3,16x64x32/4/2",
).split(",")


def config(name: str, tokens: int, rows: int, k: int) -> tuning.SpmmNmConfig:
    name = name.removesuffix("/t").removesuffix("/u")
    if name == "route":
        return tuning.spmm_nm_config(tokens, VECTOR, False)
    if name == "sized":
        return tuning.spmm_nm_config(tokens, VECTOR, False, rows, k)
    tile, warps, stages = name.split("/")
    block_m, block_s, block_n = map(int, tile.split("x"))
    return tuning.SpmmNmConfig(True, block_m, block_s, block_n, int(warps), int(stages))


def main():
    shapes, patterns, token_counts = env_cases(
        "384x1536,1536x384,384x384,768x3072,3072x768,768x768", "2:8,1:8,2:4", "16,64,128,256,512"
    )
    print(f"# {torch.cuda.get_device_name()}, bf16, v={VECTOR}, b={BLOCK}, cold L2, us a product")
    table = []
    for (M, K), (n, m) in [(s, p) for s in shapes for p in patterns]:
        torch.manual_seed(0)
        w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        mask = sk.prune.nm_mask(w.float(), n, m, vector=VECTOR, block=BLOCK)
        W = sk.NMMatrix.from_dense(w * mask, n, m, vector=VECTOR, block=BLOCK, mask=mask)
        dense = W.to_dense()
        copies = max(2, copies_for(dense.nbytes, w.device))
        weights = [(W.values.clone(), W.indices.clone()) for _ in range(copies)]
        dense_copies = [(dense.clone(),) for _ in range(copies)]
        for tokens in token_counts:
            x = torch.randn(tokens, K, device="cuda", dtype=torch.bfloat16)
            b_copied = aligned_rows(x.t())
            want = dense.double() @ x.t().double()
            out = spmm_out(x.t(), M)
            timed = {}
            for name in CONFIGS:
                c = config(name, tokens, M, K)
                forms = {"/t": x.t(), "/u": rows_contiguous(x.t())}
                b = forms.get(name[-2:], b_copied)

                def run(values, indices, c=c, b=b):
                    kernel.spmm_nm(values=values, indices=indices, b=b, bias=None, out=out, n=n,
                                   m=m, vector=VECTOR, block=BLOCK, activation="none", use_dot=True,
                                   block_m=c.block_m, block_s=c.block_s, block_n=c.block_n,
                                   num_warps=c.num_warps, num_stages=c.num_stages)  # fmt: skip

                timed[name] = checked_cold_us(f"{M}x{K} {n}:{m} t{tokens} {name}", run, weights,
                                              out, want)  # fmt: skip
            timed["densify"] = (
                do_bench_cudagraph(
                    lambda: [sk.linear(x, W, backend="dense") for _ in range(copies)], rep=30
                )
                * 1e3
                / copies
            )  # (one weight: its densified copy is made each call anyway)
            timed["copy"] = do_bench_cudagraph(lambda: aligned_rows(x.t()), rep=30) * 1e3
            timed["cublas"] = (
                do_bench_cudagraph(lambda: [x @ d.t() for (d,) in dense_copies], rep=30)
                * 1e3
                / copies
            )
            label = f"{M}x{K} {n}:{m} t{tokens}"
            print(label, {k: round(v, 1) for k, v in timed.items()}, flush=True)
            table.append((label, timed))
        weights = dense_copies = None  # (free the copies before the next shape)
        torch.cuda.empty_cache()
    names = [*CONFIGS, "copy", "densify", "cublas"]
    print(f"\n{'case':<24} " + " ".join(f"{c[:13]:>13}" for c in names))
    for label, timed in table:
        print(f"{label:<24} " + " ".join(f"{timed[c]:13.1f}" for c in names))


if __name__ == "__main__":
    main()
