"""What a sparse layer holds on the GPU once it has run: its stored weight plus every form the
routes derive and keep beside it (the int16 column copy, the line layout and its packed
values, row orders, transposes), against the dense layer's weight. bf16 LLM weights at 70%
CSR and 2:8, after linear at 1, then 1, 4 and 16, then 1-512 tokens (a decode server's prefill
and steps): torch.cuda.memory_allocated before the weight is built and after each phase, the
outputs freed. Prints a table last (MiB, and bytes a dense element).
    PYTHONPATH=src python3 benchmarks/sweeps/layer_memory.py
SHAPES and PATTERNS (environment) replace the grid.
"""

import gc
import os

import torch

import sparsekernels as sk

SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "SHAPES", "4096x14336,14336x4096").split(",")]  # fmt: skip
PATTERNS = os.environ.get("PATTERNS", "70%,2:8").split(",")
PHASES = {"1 token": (1,), "+ 4, 16 tokens": (1, 4, 16), "+ 512 tokens": (1, 4, 16, 512)}


def allocated() -> int:
    gc.collect()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def weight(pattern: str, w: torch.Tensor):
    if pattern.endswith("%"):
        mask = sk.prune.magnitude_mask(w.float(), float(pattern[:-1]) / 100)
        return sk.CSRMatrix.from_dense(w, mask=mask)
    n, m = (int(v) for v in pattern.split(":"))
    return sk.NMMatrix.from_dense(w, n, m, mask=sk.prune.nm_mask(w.float(), n, m))


def main():
    table = []
    for M, K in SHAPES:
        for pattern in PATTERNS:
            torch.manual_seed(0)
            dense = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
            start = allocated()
            W = weight(pattern, dense)
            held = {"stored": allocated() - start}
            for phase, tokens in PHASES.items():
                for t in tokens:
                    x = torch.randn(t, K, device="cuda", dtype=torch.bfloat16)
                    for _ in range(3):  # (launch plans record at a signature's second call)
                        sk.linear(x, W)
                    del x
                held[phase] = allocated() - start
            del W
            label = f"{M}x{K} {pattern}"
            per_element = {k: v / (M * K) for k, v in held.items()}
            print(label, {k: f"{v / 2**20:.1f} MiB" for k, v in held.items()},
                  {k: round(v, 2) for k, v in per_element.items()}, flush=True)  # fmt: skip
            table.append((label, per_element))
            del dense
    names = list(table[0][1])
    print("\nbytes a dense element held (dense bf16: 2.00)")
    print(f"{'case':<20} " + " ".join(f"{n:>16}" for n in names))
    for label, held in table:
        print(f"{label:<20} " + " ".join(f"{held[n]:16.2f}" for n in names))


if __name__ == "__main__":
    main()
