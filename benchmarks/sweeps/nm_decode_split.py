"""Split-K for the N:M decode kernel (kernels/spmm_nm_decode.py): each row's walk cut into 1, 2,
4, 8 ranges (SPLITS) at the default tiles, against dense, bf16, CUDA-graph medians, x (tokens,
K) @ W^T as linear runs it. Few-row weights (4096 rows: 1024 one-warp programs) should gain;
sets nm_decode_tuning.DECODE_SPLIT_PROGRAMS. Prints a table last; BUDGET_S caps the run
(default 150 s).
    PYTHONPATH=src python3 benchmarks/sweeps/nm_decode_split.py
    SHAPES=4096x14336 PATTERNS=1:8 TOKENS=1,8 SPLITS=1,2,4,8,16 ...
"""

import os
import time

import torch
from triton.testing import do_bench_cudagraph

import sparsekernels as sk
from sparsekernels.kernels import nm_decode_tuning
from sparsekernels.kernels.spmm_nm_decode import packed_bits, spmm_nm_decode
from sparsekernels.ops._layout import padded_rows
from sparsekernels.prune.masks import nm_mask

BUDGET_S = float(os.environ.get("BUDGET_S", 150))
START = time.time()
torch.manual_seed(0)


def _env(name: str, default: str) -> list[str]:
    return os.environ.get(name, default).split(",")


SHAPES = [tuple(map(int, s.split("x"))) for s in _env("SHAPES", "4096x14336,4096x4096,14336x4096")]
PATTERNS = [tuple(map(int, p.split(":"))) for p in _env("PATTERNS", "1:8,2:8,2:4")]
TOKENS = [int(t) for t in _env("TOKENS", "1,4,8,16")]
SPLITS = [int(s) for s in _env("SPLITS", "1,2,4,8")]


def bench(fn) -> float:
    return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e3  # us


table = []
print(f"# {torch.cuda.get_device_name()} bf16, us; the decode kernel at each split")
for M, K in SHAPES:
    w = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    for n, m in PATTERNS:
        W = sk.NMMatrix.from_dense(w, n, m, mask=nm_mask(w.float(), n, m))
        bits = packed_bits(m, 1)
        words = W.packed_indices(bits)
        for N in TOKENS:
            if time.time() - START > BUDGET_S:
                break
            x = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
            B = padded_rows(x.t())
            out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            ref = x.float() @ W.to_dense().float().t()
            dense = bench(lambda: x @ w.t())
            c = nm_decode_tuning.spmm_nm_decode_config(N, 1)
            block_w = max(1, c.block_slots // (32 // bits))
            times = {}
            for split in SPLITS:
                fn = lambda: spmm_nm_decode(values=W.values, words=words, bits=bits, b=B,  # noqa: E731
                                            bias=None, out=out, n=n, m=m, vector=1, block=1,
                                            activation="none", block_m=c.block_m,
                                            block_w=block_w, num_warps=c.num_warps,
                                            num_stages=c.num_stages, split=split)  # fmt: skip
                out.fill_(float("nan"))
                fn()
                err = ((out.float().t() - ref).norm() / ref.norm()).item()
                times[split] = bench(fn) if err < 1e-2 else float("nan")
            case = f"{M}x{K} {n}:{m} N={N}"
            print(
                case, f"dense {dense:.1f}", {s: round(t, 1) for s, t in times.items()}, flush=True
            )
            table.append((case, dense, times))

print(
    f"\n{'case':<24} {'dense':>6} "
    + " ".join(f"{'split ' + str(s):>8}" for s in SPLITS)
    + "  best x dense"
)
for case, dense, times in table:
    best = min(times.values())
    cells = " ".join(f"{times[s]:8.1f}" for s in SPLITS)
    print(f"{case:<24} {dense:6.1f} {cells}  {dense / best:5.2f}x")
