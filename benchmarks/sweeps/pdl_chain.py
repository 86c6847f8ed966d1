"""Programmatic dependent launch for the one-token routes (kernels/_pdl.py): sk.linear at one
token with SPARSEKERNELS_PDL 0 (off), 1 (wait first) and 2 (the first step's weight loads
before the wait), against dense, cold L2.

A decode step is a chain of kernels, each waiting for the one before to end and drain; with PDL
a kernel's programs start while the one before finishes. Three chains, each over rotated weight
copies that overflow L2 twice, as one CUDA graph (us a call):
- back to back: linear after linear (each one's programs overlap the one before's tail);
- after a torch kernel: x * 1 (no trigger of its own: its end is the trigger) then linear, as
  after a norm or an activation from torch; dense runs the same pair;
- dependent, for correctness: 8 square layers each taking the last one's output (4096 x 4096),
  checked bitwise against the same chain with PDL off, as a graph and eagerly.
    PYTHONPATH=src python3 benchmarks/sweeps/pdl_chain.py
    CASES=csr90:14336x4096,nm2:8:14336x4096 ...
"""

import os

os.environ["SPARSEKERNELS_LAUNCH_PLANS"] = "0"  # a recorded plan would keep its first PDL level

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from triton.testing import do_bench_cudagraph  # noqa: E402

import sparsekernels as sk  # noqa: E402
from sparsekernels.bench.harness import copies_for  # noqa: E402

DEVICE = torch.device("cuda")
CASES = os.environ.get(
    "CASES",
    "csr90:14336x4096,csr90:4096x14336,csr70:14336x4096,csr70:4096x14336,nm2:8:14336x4096,"
    "nm1:8:14336x4096,nm1:8:4096x14336,nm2:4:4096x14336",
).split(",")
LEVELS = (0, 1, 2)


def weight(kind: str, M: int, K: int, seed: int):
    """(dense w, sparse W) for 'csr90', 'csr70' or 'nm2:8'-style kinds, scaled so that chained
    products stay near unit size."""
    torch.manual_seed(seed)
    w = torch.randn(M, K, device=DEVICE, dtype=torch.bfloat16)
    if kind.startswith("csr"):
        sparsity = int(kind[3:]) / 100
        mask = sk.prune.magnitude_mask(w.float(), sparsity)
        w = (w * mask / (K * (1 - sparsity)) ** 0.5).to(torch.bfloat16)
        return w, sk.CSRMatrix.from_dense(w, mask=mask)
    n, m = (int(v) for v in kind[2:].split(":"))
    mask = sk.prune.nm_mask(w.float(), n, m)
    w = (w * mask / (K * n / m) ** 0.5).to(torch.bfloat16)
    return w, sk.NMMatrix.from_dense(w, n, m, mask=mask)


def timed(calls) -> float:
    return do_bench_cudagraph(lambda: [c() for c in calls], rep=30) * 1e3 / len(calls)


def with_pdl(level: int, fn):
    os.environ["SPARSEKERNELS_PDL"] = str(level)
    try:
        return fn()
    finally:
        os.environ.pop("SPARSEKERNELS_PDL", None)


def chains(kind: str, M: int, K: int) -> dict:
    w, W = weight(kind, M, K, 0)
    count = max(2, copies_for(w.nbytes, DEVICE))
    pairs = [weight(kind, M, K, s) for s in range(count)]
    x = torch.randn(1, K, device=DEVICE, dtype=torch.bfloat16)
    row = {
        "dense": timed([lambda d=d: F.linear(x, d) for d, _ in pairs]),
        "dense+op": timed([lambda d=d: F.linear(x * 1, d) for d, _ in pairs]),
    }
    want = F.linear(x.double(), w.double())
    for level in LEVELS:
        got = with_pdl(level, lambda: sk.linear(x, W))
        if ((got.double() - want).norm() / want.norm()).item() > 1e-2:
            row[f"pdl{level}"] = row[f"pdl{level}+op"] = float("nan")
            continue
        row[f"pdl{level}"] = with_pdl(level, lambda: timed([lambda S=S: sk.linear(x, S)
                                                           for _, S in pairs]))  # fmt: skip
        row[f"pdl{level}+op"] = with_pdl(level, lambda: timed([lambda S=S: sk.linear(x * 1, S)
                                                              for _, S in pairs]))  # fmt: skip
    return row


def dependent_chain_matches(kind: str) -> str:
    """8 layers of 4096 x 4096, each on the last's output: PDL 1 and 2 against 0, bitwise, in a
    CUDA graph and eagerly."""
    layers = [weight(kind, 4096, 4096, 100 + i)[1] for i in range(8)]
    x = torch.randn(1, 4096, device=DEVICE, dtype=torch.bfloat16)

    def chain():
        y = x
        for W in layers:
            y = sk.linear(y, W)
        return y

    def graphed():
        chain()  # compile and plan first
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = chain()
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        return y.clone()

    base = with_pdl(0, chain)
    verdict = []
    for level in (1, 2):
        for name, run in (("eager", chain), ("graph", graphed)):
            same = torch.equal(with_pdl(level, run), base)
            verdict.append(f"pdl{level} {name} {'same' if same else 'DIFFERS'}")
    return ", ".join(verdict)


def main():
    table = []
    for case in CASES:
        kind, shape = case.rsplit(":", 1)
        M, K = (int(v) for v in shape.split("x"))
        row = chains(kind, M, K)
        print(case, {k: round(v, 1) for k, v in row.items()}, flush=True)
        table.append((case, row))
    for kind in ("csr90", "csr70", "nm2:8", "nm1:8"):
        print(f"dependent chain {kind}: {dependent_chain_matches(kind)}", flush=True)
    names = list(table[0][1])
    print(f"\n{'case':<22} " + " ".join(f"{n:>9}" for n in names))
    for case, row in table:
        print(f"{case:<22} " + " ".join(f"{row[n]:9.1f}" for n in names))


if __name__ == "__main__":
    main()
