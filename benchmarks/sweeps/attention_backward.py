"""The fused attention's backward against causal SDPA's (flash), where training's time goes.

Forward, and forward + backward, of the dispatch's fused path (backend="triton_flash") and of
causal SDPA on the Sparse Transformer's pattern (local 128 + strided 128, L = 8192, 8 heads),
causal 4096 x 16 heads and local:256 16384 x 16 heads; bf16, D = 64, q, k, v as a (B, L, H, D)
projection leaves them. CUDA-graph medians (captured after a warm-up on a side stream, as
whole-step capture needs); eager do_bench medians (marked *) where a capture fails. The
backward is the difference. From the repository root on the GPU machine:
    PYTHONPATH=src python3 benchmarks/sweeps/attention_backward.py
"""

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import sparsekernels as sk
from sparsekernels.bench.cases import attention_mask

D = 64


def patterns():
    yield (
        "local_strided 128/128",
        8192,
        8,
        sk.nn.SparseAttention.local_strided(8192, 128, 128, device="cuda").pattern,
    )
    g = torch.Generator(device="cuda").manual_seed(0)
    for kind, L, heads in (("causal", 4096, 16), ("local:256", 16384, 16)):
        mask = attention_mask(kind, L, torch.device("cuda"), g)
        yield kind, L, heads, sk.CSRMatrix.from_dense(mask.to(torch.bfloat16), mask)


def graph_median(fn, reps: int = 30) -> tuple[float, str]:
    """Median microseconds of one replay of fn captured as a CUDA graph; eager (*) on failure."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        times = []
        for _ in range(reps):
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        return sorted(times)[len(times) // 2], ""
    except Exception:  # noqa: BLE001 - a path that cannot be captured is timed eagerly
        torch.cuda.synchronize()
        return do_bench(fn, warmup=5, rep=40, return_mode="median") * 1e3, "*"


def main():
    print(f"# {torch.cuda.get_device_name()}  D={D} bf16, microseconds (* eager)")
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
                forward, mark_f = graph_median(lambda fn=fn: fn(*qkv))
            both, mark_b = graph_median(lambda fn=fn: fn(*qkv).backward(grad))
            for t in leaves:
                t.grad = None
            row = (f"{name} L={L} H={heads}", path, forward, mark_f, both, mark_b)
            print(
                f"{row[0]:32s} {path:12s} fwd {forward:8.1f}{mark_f:1s} fwd+bwd {both:8.1f}"
                f"{mark_b:1s} bwd {both - forward:8.1f}",
                flush=True,
            )
            rows.append(row)
    print(f"\n{'case':32s} {'path':12s} {'fwd':>9s} {'fwd+bwd':>9s} {'bwd':>9s}")
    for case, path, forward, mark_f, both, mark_b in rows:
        print(
            f"{case:32s} {path:12s} {forward:8.1f}{mark_f:1s} {both:8.1f}{mark_b:1s} "
            f"{both - forward:9.1f}"
        )


if __name__ == "__main__":
    main()
