"""linear's copy of x^T at 2-16 tokens: is it worth its ~2-3.5 us? The N:M decode kernel reads B
(K, N) fastest as a padded row-major copy (one aligned vector a gathered row), so linear copies
x^T (x is (tokens, K) row-major) into (K, next power of two) before the kernel: at 8 tokens
on 4096^2 2:8 the route took 14.5 us where the kernel alone took 12.4 (results/nvidia-h200/
2026-11-30/at-92edd26, llm_linear and nm_cold_8_16.txt). The kernel also takes a strided B:
x^T as it is (stride_bk = 1, stride_bn = K), a gather of one element a token per slot instead
of a vector, but no copy and no second launch.

Per case, cold L2 (rotated weight copies, as the harness), CUDA-graph medians in us a call:
  route   sk.linear(x, W): the copy and the kernel (the configuration the library picks)
  padded  the same kernel and configuration on a B padded beforehand (the copy not timed)
  direct  the same kernel and configuration on x^T unpadded, strided (no copy)
and dense (x @ w^T). Each checked against float64 first. Prints a table last.
    PYTHONPATH=src python3 benchmarks/sweeps/nm_decode_xt.py
    SHAPES=4096x4096 PATTERNS=2:8 TOKENS=8 ...
"""

import itertools

import torch
from _nm_cases import env_cases, nm_case
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.bench.harness import copies_for
from sparsekernels.kernels import nm_decode_tuning
from sparsekernels.kernels._sizes import cdiv
from sparsekernels.kernels.spmm_nm_decode import spmm_nm_decode

DEVICE = torch.device("cuda")
SHAPES, PATTERNS, TOKENS = env_cases("4096x4096,14336x4096,4096x14336", "2:8,1:8", "4,8")


def rotated(fn, copies: list) -> float:
    return do_bench_cudagraph(lambda: [fn(c) for c in copies], rep=30) * 1e3 / len(copies)


def main():
    table = []
    for (M, K), (n, m), tokens in itertools.product(SHAPES, PATTERNS, TOKENS):
        case = nm_case(M, K, n, m, tokens)
        w, W, x, want, B, bits, words = (
            case[k] for k in ("w", "W", "x", "want", "B", "bits", "words")
        )
        count = max(2, copies_for(W.values.nbytes + words.nbytes, DEVICE))
        weights = [(W.values.clone(), W.indices.clone(), words.clone()) for _ in range(count)]
        dense_copies = [w.clone() for _ in range(max(2, copies_for(w.nbytes, DEVICE)))]
        timed = {"dense": rotated(lambda d: x @ d.t(), dense_copies)}

        as_nm = [sk.NMMatrix(v, i, W.shape, n, m, check=False) for v, i, _ in weights]
        got = [sk.linear(x, Wc) for Wc in as_nm][0]  # packs each copy's offsets before capture
        ok = ((got.t().double() - want).norm() / want.norm()).item() < 1e-2
        timed["route"] = rotated(lambda Wc: sk.linear(x, Wc), as_nm) if ok else float("nan")

        config = nm_decode_tuning.spmm_nm_decode_config(
            tokens, 1, M, W.values.shape[1], n, m, 1, column_major_out=True
        )
        spw = 32 // bits
        block_w = max(1, config.block_slots // spw)
        steps = cdiv(W.values.shape[1], block_w * spw)
        split = nm_decode_tuning.spmm_nm_decode_split(
            M, config.block_m, steps, config.split_programs
        )
        out = torch.empty(tokens, M, device="cuda", dtype=torch.bfloat16).t()  # linear's order
        for label, b in (("padded", B), ("direct", x.t())):

            def run(c, b=b):
                spmm_nm_decode(
                    values=c[0], words=c[2], bits=bits, b=b, bias=None, out=out, n=n, m=m,
                    vector=1, block=1, activation="none", block_m=config.block_m,
                    block_w=block_w, num_warps=config.num_warps, num_stages=config.num_stages,
                    split=split, prefetch=config.prefetch,
                )  # fmt: skip

            out.fill_(float("nan"))
            run(weights[0])
            err = ((out.double() - want).norm() / want.norm()).item()
            timed[label] = rotated(run, weights) if err < 1e-2 else float("nan")
        label = f"{M}x{K} {n}:{m} x{tokens}"
        print(label, f"copies {count} {config}", {k: round(v, 1) for k, v in timed.items()},
              flush=True)  # fmt: skip
        table.append((label, timed))
    names = list(table[0][1])
    print(f"\n{'case':<22} " + " ".join(f"{c:>8}" for c in names))
    for label, timed in table:
        print(f"{label:<22} " + " ".join(f"{timed[c]:8.1f}" for c in names))


if __name__ == "__main__":
    main()
