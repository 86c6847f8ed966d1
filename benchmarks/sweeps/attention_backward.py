"""The fused attention's backward against causal SDPA's (flash), where training's time goes.

Forward, and forward + backward, of the dispatch's fused path (backend="triton_flash") and of
causal SDPA on the Sparse Transformer's pattern (local 128 + strided 128, L = 8192, 8 heads),
causal 4096 x 16 heads and local:256 16384 x 16 heads; bf16, D = 64, q, k, v as a (B, L, H, D)
projection leaves them. GPU kernel time from torch.profiler (the sum of a call's kernels, warm
L2, no host overhead), with each path's costliest kernels. The backward is the difference.
From the repository root on the GPU machine:
    PYTHONPATH=src python3 benchmarks/sweeps/attention_backward.py
"""

import torch
import torch.nn.functional as F

import sparsekernels as sk
from _attention_cases import patterns

D = 64


def gpu_time(fn, reps: int = 5) -> tuple[float, list[tuple[str, float]]]:
    """Microseconds of GPU kernel time a call of fn takes (torch.profiler's CUDA activity, so
    host overhead does not count; eager calls of these paths are host-bound and capturing a
    backward in a CUDA graph failed on flash's RNG state), and its costliest kernels."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    kernels = [
        (event.key, event.self_device_time_total / reps)
        for event in prof.key_averages()
        if event.device_type == DeviceType.CUDA and event.self_device_time_total > 0
    ]
    kernels.sort(key=lambda item: -item[1])
    return sum(t for _, t in kernels), kernels


def main():
    print(f"# {torch.cuda.get_device_name()}  D={D} bf16, GPU microseconds a call")
    rows = []
    for name, L, heads, P in patterns():
        torch.manual_seed(0)
        leaves = [
            torch.randn(1, L, heads, D, device="cuda", dtype=torch.bfloat16).requires_grad_()
            for _ in range(3)
        ]
        qkv = [t.transpose(1, 2) for t in leaves]
        grad = torch.randn_like(qkv[0])
        paths = {
            "fused": lambda q, k, v: sk.sparse_attention(q, k, v, P, backend="triton_flash"),
            "sdpa causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        }
        for path, fn in paths.items():
            with torch.no_grad():
                forward, _ = gpu_time(lambda fn=fn: fn(*qkv))
            both, kernels = gpu_time(lambda fn=fn: fn(*qkv).backward(grad))
            for t in leaves:
                t.grad = None
            row = (f"{name} L={L} H={heads}", path, forward, both)
            print(f"{row[0]:32s} {path:12s} fwd {forward:8.1f} fwd+bwd {both:8.1f}", flush=True)
            for key, us in kernels[:8]:
                print(f"    {us:8.1f} us  {key[:100]}")
            rows.append(row)
    print(f"\n{'case':32s} {'path':12s} {'fwd':>9s} {'fwd+bwd':>9s} {'bwd':>9s}")
    for case, path, forward, both in rows:
        print(f"{case:32s} {path:12s} {forward:9.1f} {both:9.1f} {both - forward:9.1f}")


if __name__ == "__main__":
    main()
