"""What sk.nn.set_weight_copies costs and saves on the GPU: a CSR SparseLinear (bf16, no
gradient) through each choice, "all" (the default: the line walks' packed copy at 1-4 tokens,
the scatter kernel's tiled copy at 8-64), "in_place" (the line walks read the values in
place, no tiled copy) and "none" (the CSR alone), against nn.Linear, per weight, sparsity and
token count: us a call as CUDA graphs (weights of 117 MB: past L2; each layer called once
eagerly first, as README asks) and the bytes the layer holds after its calls (bench/held.py)
per dense element. Each checked against float64 first (NaN where wrong).
    PYTHONPATH=src python3 benchmarks/sweeps/weight_copies.py
    SHAPES=4096x14336 SPARSITIES=0.7 TOKENS=1,16 ...
"""

import os

import torch
from compiled_routes import timed  # (checked against float64, then a CUDA graph's time)
from torch import nn

import sparsekernels as sk
from sparsekernels.bench.held import held_bytes

SHAPES = [tuple(int(d) for d in s.split("x")) for s in
          os.environ.get("SHAPES", "4096x14336,14336x4096").split(",")]  # fmt: skip
SPARSITIES = [float(s) for s in os.environ.get("SPARSITIES", "0.7,0.9").split(",")]
TOKENS = [int(t) for t in os.environ.get("TOKENS", "1,2,4,8,16,32,64").split(",")]
CHOICES = ("all", "in_place", "none")


def main() -> None:
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}", flush=True)
    rows = []
    for (M, K), sparsity in ((shape, s) for shape in SHAPES for s in SPARSITIES):
        torch.manual_seed(0)
        dense = nn.Linear(K, M, bias=False, device="cuda", dtype=torch.bfloat16)
        dense.requires_grad_(False)
        layers = {}
        for choice in CHOICES:
            layer = sk.nn.SparseLinear.from_dense(dense, sparsity=sparsity).requires_grad_(False)
            layer.set_weight_copies(choice)
            layers[choice] = layer
        pruned = layers["all"].to_dense()
        for tokens in TOKENS:
            x = torch.randn(tokens, K, device="cuda", dtype=torch.bfloat16)
            want = x.double() @ pruned.double().t()
            us = {"dense": timed(lambda x=x: torch.nn.functional.linear(x, pruned), want)}
            with torch.no_grad():
                for choice, layer in layers.items():
                    us[choice] = timed(lambda x=x, layer=layer: layer(x), want)
            rows.append((M, K, sparsity, tokens, us))
            cells = "  ".join(f"{name} {t:7.1f}" for name, t in us.items())
            print(f"{M:5d} x {K:5d} {sparsity:.0%} {tokens:3d} tokens  {cells}", flush=True)
        held = {c: held_bytes(layer) / (M * K) for c, layer in layers.items()}
        print(f"{M:5d} x {K:5d} {sparsity:.0%} held after every call, bytes a dense element: "
              + "  ".join(f"{c} {b:.2f}" for c, b in held.items()) + "  (dense 2.00)", flush=True)  # fmt: skip
    print("\nus a call (CUDA graphs); x dense = dense / choice")
    for M, K, sparsity, tokens, us in rows:
        ratios = "  ".join(f"{c} {us['dense'] / us[c]:5.2f}x" for c in CHOICES)
        print(f"{M:5d} x {K:5d} {sparsity:.0%} {tokens:3d}  {ratios}")


if __name__ == "__main__":
    main()
