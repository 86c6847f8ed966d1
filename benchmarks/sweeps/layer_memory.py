"""What a sparse layer holds on the GPU once it has run: its stored weight plus every form the
routes derive and keep beside it (the int16 column copy, the line layout and its packed
values, row orders, transposes), against the dense layer's weight. bf16 LLM weights at 70%
CSR and 2:8, after linear at 1, then 1, 4 and 16, then 1-512 tokens (a decode server's prefill
and steps): torch.cuda.memory_allocated before the weight is built and after each phase, the
outputs freed. Prints a table last (MiB, and bytes a dense element), and after each phase the
owners of what the layer holds: the weight's own tensors, its and its pattern's caches, and
each IdentityCache of the ops modules (storages reached from their entries, counted once).
    PYTHONPATH=src python3 benchmarks/sweeps/layer_memory.py
SHAPES and PATTERNS (environment) replace the grid; a pattern "70%/v" runs with the line walks
reading the CSR's own values (csr_lines_tuning.CSR_LINES_VALUES_IN_PLACE: no packed copy).
"""

import gc
import os
import sys

import torch

import sparsekernels as sk
from sparsekernels.bench.held import storages
from sparsekernels.kernels import csr_lines_tuning

SHAPES = [tuple(int(v) for v in s.split("x")) for s in os.environ.get(
    "SHAPES", "4096x14336,14336x4096").split(",")]  # fmt: skip
PATTERNS = os.environ.get("PATTERNS", "70%,70%/v,2:8").split(",")
PHASES = {"1 token": (1,), "+ 4, 16 tokens": (1, 4, 16), "+ 512 tokens": (1, 4, 16, 512)}


def allocated() -> int:
    gc.collect()
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated()


def owners(W, device: str = "cuda") -> dict[str, int]:
    """Bytes held a owner: the weight's own tensors, its caches', each ops IdentityCache's."""
    from sparsekernels.ops._identity_cache import IdentityCache

    own: dict = {}
    for name in ("values", "indices", "row_offsets", "column_indices"):
        if hasattr(W, name):
            storages(getattr(W, name), own, device_type=device)
    held, counted = {"weight": sum(own.values())}, set(own)
    roots = {"weight cache": getattr(W, "_cache", {})}
    if hasattr(W, "pattern"):
        roots["pattern cache"] = W.pattern._cache
    for module_name, module in sorted(sys.modules.items()):
        if module_name.startswith("sparsekernels."):
            for attr, value in vars(module).items():
                if isinstance(value, IdentityCache):
                    short = module_name.rsplit(".", 1)[-1]
                    roots[f"{short}.{attr}"] = [e[1] for e in value._entries.values()]
    for name, root in roots.items():
        found: dict = {}
        storages(root, found, device_type=device)
        fresh = {ptr: size for ptr, size in found.items() if ptr not in counted}
        counted |= set(fresh)
        if fresh:
            held[name] = sum(fresh.values())
    return held


def plans_held(device: str = "cuda") -> list[str]:
    """Each eager plan's backend, x's shape and the storages it reaches (MiB each)."""
    from sparsekernels.ops import _eager_plans

    lines = []
    for _, signatures in _eager_plans._PLANS._entries.values():
        for signature, plan in signatures.items():
            found: dict = {}
            storages(plan, found, device_type=device)
            sizes = sorted((round(v / 2**20, 1) for v in found.values()), reverse=True)
            lines.append(f"{plan.backend} x{tuple(signature[0])}: {sizes[:6]}")
    return lines


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
            W = weight(pattern.removesuffix("/v"), dense)
            csr_lines_tuning.CSR_LINES_VALUES_IN_PLACE = pattern.endswith("/v")
            held = {"stored": allocated() - start}
            for phase, tokens in PHASES.items():
                for t in tokens:
                    x = torch.randn(t, K, device="cuda", dtype=torch.bfloat16)
                    for _ in range(3):  # (launch plans record at a signature's second call)
                        sk.linear(x, W)
                    del x
                held[phase] = allocated() - start
                parts = {k: f"{v / (M * K):.2f}" for k, v in owners(W).items()}
                print(f"  {M}x{K} {pattern} after {phase}: bytes a dense element by owner", parts)
                print("    eager plans' launch plans hold (MiB):", plans_held())
            del W
            csr_lines_tuning.CSR_LINES_VALUES_IN_PLACE = False
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
