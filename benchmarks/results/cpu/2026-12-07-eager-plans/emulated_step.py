"""Host time of the Sparse Transformer's eager training step and inference call on the CUDA
route, emulated on the CPU: the route's backends forced as on CUDA (dense linears, the fused
attention), Triton launches stubbed after two warm-up steps, a toy size (dim 16, L = 128, 3
layers) so that CPU compute stays small; against the dense twin. Median of ROUNDS rounds of 200
calls each. Run on a tree with PYTHONPATH (TRITON_INTERPRET=1 for the kernels' definitions):
    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/results/cpu/2026-12-07-eager-plans/emulated_step.py
"""

import statistics
import time

import torch
import triton.runtime.interpreter as interp

from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair
from sparsekernels.ops import _dense, _dispatch

FORCED = {"spmm_csr": "dense", "sddmm_csr": "dense", "sparse_attention": "triton_flash"}
first_fitting = _dispatch._first_fitting
_dispatch._first_fitting = lambda op, problem: FORCED.get(op) or first_fitting(op, problem)
_dense.triton_densifies = lambda values: True
STUB = [False]
interpreted = interp.InterpretedFunction.run
interp.InterpretedFunction.run = lambda self, *a, **k: None if STUB[0] else interpreted(self, *a, **k)
ROUNDS = 5


def median_ms(fn) -> float:
    best = []
    for _ in range(ROUNDS):
        runs = []
        for _ in range(200):
            start = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - start)
        best.append(statistics.median(runs))
    return min(best) * 1e3


def main() -> None:
    torch.set_num_threads(1)
    # (stubbed launches leave outputs unwritten: denormal garbage slows the CPU's matmuls)
    torch.set_flush_denormal(True)
    cfg = TransformerConfig(vocab=16, dim=16, heads=2, layers=3, seq_len=128, window=16, stride=16)
    sparse, dense = transformer_pair(cfg, "90%", dtype=torch.float32)
    tokens = torch.randint(0, cfg.vocab, (1, cfg.seq_len + 1))
    rows = []
    for name, model in (("sparse", sparse), ("dense", dense)):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

        def step(model=model, opt=opt):
            loss = model.loss(tokens)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        def infer(model=model):
            with torch.no_grad():
                model(tokens[:, :-1])

        STUB[0] = False
        step(), step(), infer(), infer()
        STUB[0] = True
        rows.append((name, median_ms(step), median_ms(infer)))
    print(f"# torch {torch.__version__}, CPU emulation of the CUDA route, launches stubbed")
    print(f"{'model':8s} {'train step ms':>14s} {'inference ms':>13s}")
    for name, train, infer_ms in rows:
        print(f"{name:8s} {train:14.2f} {infer_ms:13.3f}")


if __name__ == "__main__":
    main()
