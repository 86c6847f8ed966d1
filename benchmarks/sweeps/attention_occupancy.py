"""The fused attention forward's programs an SM: tile shapes, stages and a register cap.

The forward of the Sparse Transformer's pattern visits 1-3 tiles a program (local 128 +
strided 128 at L = 8192: 509 tiles of 64 x 64 a head, two passes), so a program is mostly
latency: its Q tile, the layout's chain (offsets -> cols -> key order -> K, V) and its store.
At 240 registers a thread (sm90_compile_stats.py) two programs of 4 warps fit an SM; `maxnreg`
lets 3-4 in. Forward only, no gradients, CUDA-graph medians, bf16, D = 64, q, k, v as a
(B, L, H, D) projection leaves them. Each configuration is checked against the dispatch's.
From the repository root on the GPU machine:
    PYTHONPATH=src python3 benchmarks/sweeps/attention_occupancy.py
"""

import functools
import os

import torch
import torch.nn.functional as F
from triton.testing import do_bench_cudagraph

from _attention_cases import patterns
from sparsekernels.kernels import attention_block
from sparsekernels.kernels.attention_tuning import (
    BLOCK_ATTENTION_SPLIT_FILL,
    block_attention_config,
)
from sparsekernels.ops import _attention_library

D = 64
CONFIGS = os.environ.get(
    "CONFIGS",
    "64x64w4s3,64x64w4s2,64x64w4s3r168,64x64w4s3r128,64x64w4s2r128,128x64w4s3,"
    "128x64w4s3r168,128x64w8s3,128x64w8s3r128,128x128w8s2,128x128w8s2r128",
).split(",")


def parse(name: str):
    """'128x64w4s3r168' -> (block_m, block_n, warps, stages, maxnreg or None)."""
    tiles, rest = name.split("w")
    bm, bn = (int(t) for t in tiles.split("x"))
    warps, rest = rest.split("s")
    stages, _, regs = rest.partition("r")
    return bm, bn, int(warps), int(stages), int(regs) if regs else None


def run_fused(P, qkv, bm, bn, warps, stages, regs):
    layout = P.pattern.block_layout(bm, bn, BLOCK_ATTENTION_SPLIT_FILL)
    tensors = layout.tensors()
    config = [bm, bn, warps, stages, warps, 2]
    original = attention_block.block_attention_forward
    attention_block.block_attention_forward = functools.partial(original, maxnreg=regs)
    try:
        out = _attention_library.block_attention_forward(*qkv, tensors, D**-0.5, config)[0]
        ms = do_bench_cudagraph(
            lambda: _attention_library.block_attention_forward(*qkv, tensors, D**-0.5, config),
            rep=40,
            return_mode="median",
        )
        spills = _most_spills(attention_block._attn_fwd_kernel)
    finally:
        attention_block.block_attention_forward = original
    return ms * 1e3, out, layout, spills


def _most_spills(kernel) -> int:
    """The most registers spilled by any compiled variant so far (-1: not known)."""
    try:
        compiled = [c for cache in kernel.device_caches.values() for c in cache[0].values()]
        return max((getattr(c, "n_spills", 0) or 0 for c in compiled), default=0)
    except (AttributeError, IndexError, TypeError):
        return -1


def main():
    print(f"# {torch.cuda.get_device_name()}  D={D} bf16, forward, CUDA-graph medians (us)")
    default = block_attention_config(D, False)
    print(f"# dispatch config: {default}")
    rows = []
    for name, L, heads, P in patterns():
        torch.manual_seed(0)
        qkv = [
            torch.randn(1, L, heads, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
            for _ in range(3)
        ]
        with torch.no_grad():
            sdpa = do_bench_cudagraph(
                lambda: F.scaled_dot_product_attention(*qkv, is_causal=True),
                rep=40,
                return_mode="median",
            )
            ref = None
            row = {"case": f"{name} L={L} H={heads}", "sdpa causal": sdpa * 1e3}
            for config in CONFIGS:
                us, out, layout, spills = run_fused(P, qkv, *parse(config))
                if ref is None:
                    ref = out.float()
                err = (out.float() - ref).abs().max().item()
                tiles = sum(c.tiles for c in layout.components)
                flops = tiles * heads * 4 * layout.block_m * layout.block_n * D
                print(
                    f"{row['case']:32s} {config:18s} {us:8.1f} us  tiles/head {tiles:6d} "
                    f"passes {len(layout.components)} {flops / us / 1e6:6.1f} TFLOP/s on tiles "
                    f"spills {spills} err {err:.1e}",
                    flush=True,
                )
                row[config] = us if err < 0.05 else float("nan")
            rows.append(row)
    columns = ["sdpa causal", *CONFIGS]
    print("\ncase".ljust(34) + "".join(f"{c[:15]:>16s}" for c in columns))
    for row in rows:
        print(f"{row['case']:33s}" + "".join(f"{row[c]:16.1f}" for c in columns))


if __name__ == "__main__":
    main()
