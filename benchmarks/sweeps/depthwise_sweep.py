"""Depthwise 3x3 + bias + ReLU at every depthwise layer of MobileNetV1 (224 px; width 1.0 and
1.8; batch 1 and 32; fp32 and bf16): our kernel in a few tile configurations against cuDNN
(F.conv2d with bias, then ReLU: what the "torch" backend runs), and with --compile the same
under torch.compile (it measured no faster than eager cuDNN: the convolution stays cuDNN's).

Times are CUDA-graph medians per call (do_bench_cudagraph), each call on the next of several
rotated input copies so that together they overflow L2 (`--hot`: one copy, as inside a network
whose previous layer just wrote the input). GB/s counts the input read once, the output written
once and the weights. Every configuration is first checked against float64, output poisoned.
Triton's compilations run first in parallel processes (--jobs), then land in its disk cache.

From the repository root on the GPU machine (about 80 s on an H200; --compile adds ~60 s):
    PYTHONPATH=src python3 benchmarks/sweeps/depthwise_sweep.py [--hot] [--compile] [--jobs 8]
It prints one line per case, then the summary table: per model, the sum over its 13 depthwise
layers of each provider's time, and the layer shapes where our best configuration beats cuDNN
by more than 5% (what kernels/depthwise_tuning.py's depthwise_prefers_triton should say).
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import multiprocessing
import os
import time
from collections import Counter

import torch
import torch.nn.functional as F

from sparsekernels.kernels import depthwise as kernel
from sparsekernels.kernels.depthwise_tuning import DepthwiseConfig, depthwise_config
from sparsekernels.models.mobilenet import BLOCKS, channels

WIDTHS, BATCHES = (1.0, 1.8), (1, 32)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
TILES = ((256, 8, 2), (512, 8, 4), (512, 16, 4))  # (row tile, rows, warps)
REP_MS = 5
L2_BYTES = 60 * 2**20
MAX_COPIES = 32
WIN = 1.05  # "faster" means by more than 5%


def layers(width: float) -> Counter:
    """(channels, input size, stride) -> how many of MobileNetV1's depthwise layers have it."""
    found, c, size = Counter(), channels(32, width), 112
    for cout, stride in BLOCKS:
        found[(c, size, stride)] += 1
        size, c = (size - 1) // stride + 1, channels(cout, width)
    return found


def configs(batch: int, c: int, size: int, stride: int) -> list[DepthwiseConfig]:
    out = (size - 1) // stride + 1
    found = []
    for tile, rows, warps in TILES:
        cfg = depthwise_config(batch, c, out, out, False, tile, rows, warps)
        if cfg not in found:
            found.append(cfg)
    return found


def cases():
    for width in WIDTHS:
        for (c, size, stride), count in layers(width).items():
            for batch in BATCHES:
                for name in DTYPES:
                    yield width, batch, name, c, size, stride, count


def operands(batch, c, size, dtype, copies=1, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    xs = [torch.randn(batch, c, size, size, generator=g, device="cuda").to(dtype)]
    xs += [xs[0].clone() for _ in range(copies - 1)]
    w = torch.randn(c, 1, 3, 3, generator=g, device="cuda").to(dtype)
    b = torch.randn(c, generator=g, device="cuda").to(dtype)
    return xs, w, b


def launch(x, w9, b, out, stride, cfg):
    kernel.depthwise_conv3x3(
        x=x,
        weight=w9,
        bias=b,
        out=out,
        stride=stride,
        activation="relu",
        block_c=cfg.block_c,
        block_h=cfg.block_h,
        block_w=cfg.block_w,
        num_warps=cfg.num_warps,
    )


def _compile_one(args):
    """Runs in a worker process: compiles (and caches on disk) one case's kernels."""
    batch, c, size, stride, name = args
    xs, w, b = operands(batch, c, size, DTYPES[name])
    out = torch.empty(batch, c, (size - 1) // stride + 1, (size - 1) // stride + 1,
                      device="cuda", dtype=DTYPES[name])  # fmt: skip
    for cfg in configs(batch, c, size, stride):
        launch(xs[0], w.reshape(c, 9), b, out, stride, cfg)
    torch.cuda.synchronize()


def precompile(jobs: int) -> None:
    """Triton compiles each specialization once (~0.5 s); do them in parallel processes so the
    sweep's own process finds them in Triton's disk cache."""
    work = sorted(
        {(batch, c, size, stride, name) for _, batch, name, c, size, stride, _ in cases()}
    )
    if jobs <= 1:
        return
    ctx = multiprocessing.get_context("spawn")
    with futures.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
        list(pool.map(_compile_one, work))


def bench(fns) -> float:
    """Microseconds per call: a CUDA graph of calls rotating over `fns`, median of replays."""
    from triton.testing import do_bench_cudagraph

    def run():
        for fn in fns:
            fn()

    return do_bench_cudagraph(run, rep=REP_MS, return_mode="median") * 1e3 / len(fns)


def check(got, want, dtype) -> float:
    err = (got.double() - want).abs().max() / want.abs().max().clamp_min(1e-30)
    limit = 2e-2 if dtype == torch.bfloat16 else 1e-3  # fp32: cuDNN may use TF32
    if not err <= limit:
        raise AssertionError(f"error {err:.2e} over {limit:.0e}")
    return float(err)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hot", action="store_true", help="one input copy (L2-resident)")
    parser.add_argument(
        "--compile", action="store_true", help="also time cuDNN + ReLU under torch.compile"
    )
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1))
    args = parser.parse_args()
    start = time.perf_counter()
    precompile(args.jobs)
    print(f"precompiled in {time.perf_counter() - start:.1f} s", flush=True)

    def cudnn(x, w, b, stride):
        return torch.relu(F.conv2d(x, w, b, stride, 1, 1, x.shape[1]))

    # One compiled function per (stride, dtype), dynamic in the shapes; they share a code
    # object, so dynamo's recompile limit counts all of them (and batch 1 is specialized).
    torch._dynamo.config.recompile_limit = 64
    compiled = {}
    for key in [(s, n) for s in (1, 2) for n in DTYPES] if args.compile else ():
        fn = lambda x, w, b, s=key[0]: cudnn(x, w, b, s)  # noqa: E731
        compiled[key] = torch.compile(fn, dynamic=True)
    totals: dict = {}
    wins = []
    print(f"{'width':>5} {'batch':>5} {'dtype':>5} {'C':>5} {'HxW':>7} {'s':>1} | "
          f"{'cuDNN us':>8} {'compile':>8} {'ours us':>8} {'GB/s':>6} {'cuDNN':>6} "
          f"{'speedup':>7}  best config (block_c, h, w, warps); others us")  # fmt: skip
    for width, batch, name, c, size, stride, count in cases():
        dtype = DTYPES[name]
        out_size = (size - 1) // stride + 1
        nbytes = (batch * c * (size * size + out_size * out_size) + 10 * c) * dtype.itemsize
        copies = 1 if args.hot else max(1, min(MAX_COPIES, -(-3 * L2_BYTES // nbytes)))
        xs, w, b = operands(batch, c, size, dtype, copies)
        w9 = w.reshape(c, 9).contiguous()
        want = cudnn(xs[0].double(), w.double(), b.double(), stride)
        outs = [torch.empty_like(want, dtype=dtype) for _ in xs]
        t_cudnn = bench([lambda x=x: cudnn(x, w, b, stride) for x in xs])
        t_compiled = float("nan")
        if compiled:
            fn = compiled[(stride, name)]
            check(fn(xs[0], w, b), want, dtype)
            t_compiled = bench([lambda x=x: fn(x, w, b) for x in xs])
        ours = []
        for cfg in configs(batch, c, size, stride):
            outs[0].fill_(float("nan"))
            launch(xs[0], w9, b, outs[0], stride, cfg)
            check(outs[0], want, dtype)
            fns = [
                lambda x=x, o=o: launch(x, w9, b, o, stride, cfg)
                for x, o in zip(xs, outs, strict=True)
            ]
            ours.append((bench(fns), cfg))
        ours.sort(key=lambda r: r[0])
        t_ours, best = ours[0]
        speedup = t_cudnn / t_ours
        others = " ".join(f"{t:.1f}" for t, _ in ours[1:])
        print(f"{width:5.1f} {batch:5d} {name:>5} {c:5d} {size:3d}x{size:<3d} {stride:1d} | "
              f"{t_cudnn:8.1f} {t_compiled:8.1f} {t_ours:8.1f} {nbytes / t_ours / 1e3:6.0f} "
              f"{nbytes / t_cudnn / 1e3:6.0f} {speedup:7.2f}  "
              f"({best.block_c}, {best.block_h}, {best.block_w}, {best.num_warps}); {others}",
              flush=True)  # fmt: skip
        key = (width, batch, name)
        sums = totals.setdefault(key, [0.0, 0.0, 0.0, 0, 0])
        sums[0] += count * t_cudnn
        sums[1] += count * t_compiled
        sums[2] += count * t_ours
        sums[3] += count if speedup > WIN else 0
        sums[4] += count
        if speedup > WIN:
            wins.append((name, batch, c, size, stride, round(speedup, 2)))

    print(f"\nsweep took {time.perf_counter() - start:.0f} s; "
          f"{'hot (one copy)' if args.hot else 'inputs rotated past L2'}; "
          f"{torch.cuda.get_device_name()}")  # fmt: skip
    print("MobileNetV1 224px, all 13 depthwise layers + bias + ReLU, microseconds:")
    print(f"{'width':>5} {'batch':>5} {'dtype':>5} | {'cuDNN':>8} {'compile':>8} {'ours':>8} "
          f"{'speedup':>7} {'layers won':>10}")  # fmt: skip
    for (width, batch, name), (t_c, t_comp, t_o, won, n) in totals.items():
        print(f"{width:5.1f} {batch:5d} {name:>5} | {t_c:8.1f} {t_comp:8.1f} {t_o:8.1f} "
              f"{t_c / t_o:7.2f} {won:>5d} of {n:<2d}")  # fmt: skip
    print("shapes where ours beats cuDNN by > 5% (dtype, batch, C, H, stride, speedup):")
    print(wins if wins else "none")


if __name__ == "__main__":
    main()
