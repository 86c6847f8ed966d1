"""Host time of the Sparse Transformer's eager parts, one call each, the GPU kept busy by a long
sleep queued first (so the time is the host's alone): the Triton densify of a 2048 x 512 weight
(90% sparse, bf16), a SparseLinear's training forward + backward at 8192 tokens, the block
attention core's forward + backward (local + strided, L = 8192, 8 heads of 64), against
nn.Linear and causal SDPA; then each without a gradient (inference), and a whole block's.
ROUNDS rounds over all parts, each part's figure the lowest of its round medians (other
processes on the host only add time). Run it on an older tree too (PYTHONPATH) for the
before.
    PYTHONPATH=src python3 benchmarks/sweeps/host_parts.py
"""

import statistics
import time

import torch

from sparsekernels.models.sparse_transformer import TransformerConfig, transformer_pair
from sparsekernels.ops import _dense

REPS, ROUNDS = 30, 5


def host_us(fn) -> float:
    """Median host time of REPS calls queued behind a ~300 ms GPU sleep (warmed up first)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(int(300e-3 * 1.5e9))
    runs = []
    for _ in range(REPS):
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(runs)


def main() -> None:
    torch.manual_seed(0)
    dtype = torch.bfloat16
    cfg = TransformerConfig(256, 512, 8, 1, 8192)
    sparse, dense = transformer_pair(cfg, "90%", dtype=dtype, device="cuda")
    block, dense_block = sparse.blocks[0], dense.blocks[0]
    lin, dense_lin = block.mlp[0], dense_block.mlp[0]  # 2048 x 512
    W = lin.weight
    x = torch.randn(1, 8192, 512, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(1, 8192, 2048, device="cuda", dtype=dtype)
    qkv = torch.randn(1, 8192, 3, 8, 64, device="cuda", dtype=dtype, requires_grad=True)
    g_attn = torch.randn(1, 8, 8192, 64, device="cuda", dtype=dtype)

    def densify():
        _dense.densify_csr(W.row_offsets, W.column_indices, W.values, W.shape[1])

    def linear_step(layer):
        def run():
            layer(x).backward(g)

        return run

    def attention_step(core):
        def run():
            core(qkv).backward(g_attn)  # (the core's output: B, H, L, D)

        return run

    def inference(module, arg):
        def run():
            with torch.no_grad():
                module(arg)

        return run

    cases = [
        ("densify 2048x512 90%", densify),
        ("SparseLinear fwd+bwd", linear_step(lin)),
        ("nn.Linear fwd+bwd", linear_step(dense_lin)),
        ("block attention fwd+bwd", attention_step(block.attn.core)),
        ("causal SDPA fwd+bwd", attention_step(dense_block.attn.core)),
        ("SparseLinear no grad", inference(lin, x)),
        ("nn.Linear no grad", inference(dense_lin, x)),
        ("block attention no grad", inference(block.attn.core, qkv)),
        ("causal SDPA no grad", inference(dense_block.attn.core, qkv)),
        ("sparse block no grad", inference(block, x)),
        ("dense block no grad", inference(dense_block, x)),
    ]
    best = {name: float("inf") for name, _ in cases}
    for _ in range(ROUNDS):
        for name, fn in cases:
            best[name] = min(best[name], host_us(fn))
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'part':28s} {'host us':>9s}")
    for name, us in best.items():
        print(f"{name:28s} {us:9.1f}")


if __name__ == "__main__":
    main()
