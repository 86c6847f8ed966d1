"""Compiled against eager linear on the GPU: since the fifty-sixth session a traced op chooses
its backend in its body when it runs (ops/_dispatch.AUTO), the eager choice; since the
fifty-seventh cuSPARSELt too (the weight packed once, found by the values' identity). This
times, per weight and token count, bf16, as CUDA graphs (weights of 117 MB: past L2):
- eager: sk.linear, the eager route (cuSPARSELt for 2:4 from 512 tokens);
- compiled: torch.compile(sk.linear, dynamic=True, fullgraph=True), the op's own choice;
- compiled/cslt: the same with backend="cusparselt" forced (2:4 only);
- dense: F.linear.
Each checked against float64 first (NaN where wrong).
    PYTHONPATH=src python3 benchmarks/sweeps/compiled_routes.py
    CONFIGS=2:4 TOKENS=512,2048 SHAPES=4096x14336 ...
"""

import os

import torch
import torch.nn.functional as F
from triton.testing import do_bench_cudagraph

import sparsekernels as sk

SHAPES = [tuple(int(d) for d in s.split("x")) for s in
          os.environ.get("SHAPES", "4096x14336,14336x4096").split(",")]  # fmt: skip
CONFIGS = os.environ.get("CONFIGS", "2:4,2:8,70%").split(",")
TOKENS = [int(t) for t in os.environ.get("TOKENS", "16,512,2048").split(",")]


def weight(rows: int, cols: int, config: str):
    torch.manual_seed(0)
    w = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    if config.endswith("%"):
        mask = sk.prune.magnitude_mask(w.float(), sparsity=float(config[:-1]) / 100)
        return sk.CSRMatrix.from_dense(w, mask=mask)
    n, m = (int(d) for d in config.split(":"))
    return sk.NMMatrix.from_dense(w, n, m, mask=sk.prune.nm_mask(w.float(), n, m))


def timed(call, want: torch.Tensor) -> float:
    got = call()
    err = (got.double() - want).abs().max().item()
    bound = 2e-2 * want.abs().max().item() + 1e-2
    if not err <= bound:
        print(f"  wrong: max error {err:.3g} (bound {bound:.3g})", flush=True)
        return float("nan")
    return do_bench_cudagraph(call) * 1e3


def main() -> None:
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}", flush=True)
    linear = torch.compile(sk.linear, dynamic=True, fullgraph=True)
    forced = torch.compile(
        lambda x, W: sk.linear(x, W, backend="cusparselt"), dynamic=True, fullgraph=True
    )
    rows = []
    for (M, K), config in ((shape, c) for shape in SHAPES for c in CONFIGS):
        W = weight(M, K, config)
        for tokens in TOKENS:
            x = torch.randn(tokens, K, device="cuda", dtype=torch.bfloat16)
            dense = W.to_dense()  # (the pruned weight, stored dense)
            want = x.double() @ dense.double().t()
            forms = {
                "eager": lambda x=x, W=W: sk.linear(x, W),
                "compiled": lambda x=x, W=W: linear(x, W),
                "dense": lambda x=x, w=dense: F.linear(x, w),
            }
            if config == "2:4":
                forms["compiled/cslt"] = lambda x=x, W=W: forced(x, W)
            us = {name: timed(call, want) for name, call in forms.items()}
            rows.append((M, K, config, tokens, us))
            cells = "  ".join(f"{name} {t:8.1f}" for name, t in us.items())
            print(f"{M:5d} x {K:5d} {config:>4} {tokens:5d} tokens  {cells}", flush=True)
    print("\nus a call (CUDA graphs); x dense = dense / form")
    for M, K, config, tokens, us in rows:
        ratios = "  ".join(f"{name} {us['dense'] / t:5.2f}x" for name, t in us.items()
                           if name != "dense")  # fmt: skip
        print(f"{M:5d} x {K:5d} {config:>4} {tokens:5d}  {ratios}")


if __name__ == "__main__":
    main()
