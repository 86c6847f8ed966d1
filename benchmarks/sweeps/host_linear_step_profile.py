"""Where a SparseLinear's training forward + backward spends its host time, against nn.Linear's:
host_parts.py's "fwd+bwd" cases (2048 x 512, 90% sparse, bf16, 8192 tokens) under the torch
profiler (CPU activity, every thread: the backward runs on autograd's device thread, which
cProfile would not see), the GPU kept busy by a long sleep queued first. Prints, per case, the
ops and autograd nodes by self host time per call (us), then each case's whole call.
    PYTHONPATH=src python3 benchmarks/sweeps/host_linear_step_profile.py
"""

import os
import time

import torch
from torch.profiler import ProfilerActivity, profile

from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair

CALLS = int(os.environ.get("CALLS", "20"))
ROWS = int(os.environ.get("ROWS", "25"))


def step(layer, x, g):
    def run():
        layer(x).backward(g)

    return run


def profiled(name: str, fn) -> None:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(int(400e-3 * 1.5e9))  # (the launches queue; the host's time alone)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        host = (time.perf_counter() - start) * 1e6 / CALLS
    torch.cuda.synchronize()
    print(f"\n### {name}: {host:.1f} us a call under the profiler (its own cost included)")
    print(f"{'op / node':60s} {'self us':>8s} {'total us':>9s} {'calls':>6s}")
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    for event in rows[:ROWS]:
        print(
            f"{event.key[:60]:60s} {event.self_cpu_time_total / CALLS:8.1f} "
            f"{event.cpu_time_total / CALLS:9.1f} {event.count / CALLS:6.1f}"
        )


def main() -> None:
    torch.manual_seed(0)
    dtype = torch.bfloat16
    cfg = TransformerConfig(256, 512, 8, 1, 8192)
    sparse, dense = transformer_pair(cfg, "90%", dtype=dtype, device="cuda")
    lin, dense_lin = sparse.blocks[0].mlp[0], dense.blocks[0].mlp[0]  # 2048 x 512
    x = torch.randn(1, 8192, 512, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(1, 8192, 2048, device="cuda", dtype=dtype)
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, layer in (("SparseLinear fwd+bwd", lin), ("nn.Linear fwd+bwd", dense_lin)):
        profiled(name, step(layer, x, g))


if __name__ == "__main__":
    main()
