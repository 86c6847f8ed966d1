"""A CPU training step (forward + backward, fp32, 400 tokens) of one sparsified nn.Linear with
the CPU dense rule (kernels/spmm_cpu_tuning.py) and without it (WIDTHS emptied: torch's sparse
matmul for the product and for x's gradient), against nn.Linear; interleaved, ms, medians.

PYTHONPATH=src python benchmarks/results/cpu/2026-12-04-dense-route/train_step.py
"""

import statistics
import time
import warnings

import torch

import sparsekernels as sk
from sparsekernels.kernels import spmm_cpu_tuning

warnings.simplefilter("ignore")  # torch's beta warning for sparse CSR
torch.manual_seed(0)
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
widths = spmm_cpu_tuning.WIDTHS
for pattern in ("2:4", "70%"):
    for shape in ((384, 1536), (1536, 384)):
        model = torch.nn.Sequential(torch.nn.Linear(*shape))
        sk.sparsify_(model, pattern)
        dense = torch.nn.Linear(*shape)
        x = torch.randn(400, shape[0], requires_grad=True)
        times = {"rule": [], "no rule": [], "nn.Linear": []}
        for _ in range(15):
            for name, module, rule in (("rule", model, widths), ("no rule", model, ()),
                                       ("nn.Linear", dense, widths)):  # fmt: skip
                spmm_cpu_tuning.WIDTHS = rule
                module.zero_grad(set_to_none=True)
                start = time.perf_counter()
                module(x).square().mean().backward()
                times[name].append(time.perf_counter() - start)
        spmm_cpu_tuning.WIDTHS = widths
        cells = "  ".join(f"{k} {statistics.median(v) * 1e3:6.2f}" for k, v in times.items())
        print(f"{pattern:4s} in {shape[0]:4d} out {shape[1]:4d}  {cells}", flush=True)
