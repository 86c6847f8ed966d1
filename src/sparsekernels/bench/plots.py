"""PNG plots: speedup against sparsity per op, dtype and N, and a roofline per dtype."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers or in tests
import matplotlib.pyplot as plt  # noqa: E402

from .ceilings import copy_roof_gbps  # noqa: E402
from .harness import Row  # noqa: E402
from .output import baseline, geomean  # noqa: E402

MAX_PANELS = 8


def _n_bucket(values: Sequence[int]) -> dict[int, int]:
    """N -> panel key: every N when there are few, else powers of two (DLMC's many rn50 N)."""
    distinct = sorted(set(values))
    if len(distinct) <= MAX_PANELS:
        return {n: n for n in distinct}
    return {n: 2 ** round(math.log2(max(n, 1))) for n in distinct}


def plot_speedups(rows: Sequence[Row], out_dir: Path) -> list[Path]:
    """One PNG per (op, dtype): a panel per N, speedup over the op's baseline vs sparsity."""
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if r.status == "ok" and baseline(r.op) in r.speedup_vs:
            groups[(r.op, r.dtype)].append(r)
    paths = []
    for (op, dtype), group in sorted(groups.items()):
        buckets = _n_bucket([r.shape[2] for r in group])
        keys = sorted(set(buckets.values()))
        fig, axes = plt.subplots(
            1, len(keys), figsize=(4.2 * len(keys), 3.8), squeeze=False, sharey=True
        )
        providers = sorted({r.provider for r in group})
        colors = {p: plt.cm.tab10(i % 10) for i, p in enumerate(providers)}
        for ax, key in zip(axes[0], keys, strict=True):
            panel = [r for r in group if buckets[r.shape[2]] == key]
            for provider in providers:
                mine = [r for r in panel if r.provider == provider]
                if not mine:
                    continue
                x = [100 * (1 - r.density) for r in mine]
                y = [r.speedup_vs[baseline(op)] for r in mine]
                ax.scatter(x, y, s=14, alpha=0.6, color=colors[provider])
                by_x: dict[float, list[float]] = defaultdict(list)
                for xi, yi in zip(x, y, strict=True):
                    by_x[round(xi, 1)].append(yi)
                xs = sorted(by_x)
                ax.plot(
                    xs,
                    [geomean(by_x[v]) for v in xs],
                    color=colors[provider],
                    marker="o",
                    markersize=3,
                    label=provider,
                )
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_yscale("log")
            ax.set_xlabel("sparsity (%)")
            ax.set_xlim(0, 100)
            ax.set_title(
                f"N = {key}" if len(set(buckets.values())) == len(buckets) else f"N ~ {key}"
            )
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].set_ylabel(f"speedup over {baseline(op)} (time ratio)")
        axes[0][-1].legend(fontsize=7, loc="best")
        fig.suptitle(f"{op} {dtype}: speedup over {baseline(op)}")
        fig.tight_layout()
        path = out_dir / f"speedup-{op}-{dtype}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _compute_roofs(dtype: str, ceilings: dict) -> list[tuple[str, float]]:
    rates = ceilings.get("matmul_tflops", {})
    names = [dtype] + (["tf32"] if dtype == "fp32" else [])
    return [(f"dense {n}", rates[n]) for n in names if n in rates]


def plot_roofline(rows: Sequence[Row], ceilings: dict, out_dir: Path) -> list[Path]:
    """One PNG per dtype: every timed kernel at (FLOP/byte, TFLOP/s) under the measured roofs."""
    groups: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r.status == "ok" and r.tflops and r.bytes:
            groups[r.dtype].append(r)
    paths = []
    markers = {"spmm": "o", "linear": "s", "sddmm": "^", "softmax": "v", "attention": "D"}
    for dtype, group in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(9.5, 5.2))
        intensity = [r.flops / r.bytes for r in group]
        lo, hi = min(intensity) / 2, max(intensity) * 2
        roofs = _compute_roofs(dtype, ceilings)
        bandwidth = copy_roof_gbps(ceilings)
        xs = [lo * (hi / lo) ** (i / 100) for i in range(101)]
        for j, (label, peak) in enumerate(roofs or [("", math.inf)]):
            if bandwidth:
                ys = [min(peak, x * bandwidth / 1e3) for x in xs]
                ax.plot(
                    xs,
                    ys,
                    color="black",
                    linewidth=1.2,
                    linestyle="-" if j == 0 else "--",
                    label=f"roof: {bandwidth:.0f} GB/s, {label} {peak:.3g} TFLOP/s".strip(),
                )
        providers = sorted({r.provider for r in group})
        for i, provider in enumerate(providers):
            for op in sorted({r.op for r in group}):
                mine = [r for r in group if r.provider == provider and r.op == op]
                if mine:
                    ax.scatter(
                        [r.flops / r.bytes for r in mine],
                        [r.tflops for r in mine],
                        s=18,
                        alpha=0.7,
                        color=plt.cm.tab10(i % 10),
                        marker=markers.get(op, "o"),
                        label=f"{provider} {op}",
                    )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("useful FLOPs / fewest bytes moved")
        ax.set_ylabel("useful TFLOP/s")
        ax.set_title(f"roofline, {dtype} (ceilings measured in this run)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
        path = out_dir / f"roofline-{dtype}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths
