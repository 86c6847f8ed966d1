"""What a sparse model holds for its weights after inference, after a training step, and after
sk.nn.release_caches (bench/held.py's count), against its dense bytes. CPU, fp32, a
MiniLM-sized MLP (384 -> 1536 -> 384) at 2:4 and 50%, 100 tokens:

    PYTHONPATH=src python3 benchmarks/sweeps/held_after_training.py
"""

import datetime
import platform

import torch
from torch import nn

import sparsekernels as sk
from sparsekernels.bench.held import held_bytes


def main() -> None:
    print(f"# {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {platform.processor()}, "
          f"torch {torch.__version__}, sparsekernels {sk.__version__}")  # fmt: skip
    for config in ("2:4", "50%"):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(384, 1536), nn.GELU(), nn.Linear(1536, 384))
        dense = sum(p.numel() * p.element_size() for p in model.parameters())
        sk.sparsify_(model, config)
        x = torch.randn(100, 384)
        with torch.no_grad():
            want = model(x)
        inference = held_bytes(model)
        model(x).sum().backward()
        trained = held_bytes(model)
        sk.nn.release_caches(model)
        with torch.no_grad():
            same = torch.equal(model(x), want)
        released = held_bytes(model)
        print(f"{config:>4}: dense {dense} B; held after inference {inference / dense:.2f}x, "
              f"after a training step {trained / dense:.2f}x, released then inference "
              f"{released / dense:.2f}x (same output: {same})")  # fmt: skip


if __name__ == "__main__":
    main()
