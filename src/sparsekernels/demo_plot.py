"""The demo's saved plot (demo.png): quality, retrieval, and bytes and time against dense."""

from __future__ import annotations

from pathlib import Path

import torch

SHORT = {"-": "", "magnitude": "mag", "wanda": "wanda", "sparsegpt": "sgpt"}  # bar labels


def plot(rows, path: Path, device: torch.device, dtype: torch.dtype, methods, target: float):
    """Three panels over demo.Row's: cosine to dense (mean and min, the target line), retrieval
    top-1, and weight bytes and time against dense (graphed time too where measured)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    def short(method: str) -> str:  # "sparsegpt+distill4" -> "sgpt+d4"
        head, _, epochs = method.partition("+distill")
        return SHORT[head] + (f"+d{epochs}" if _ else "")

    names = [f"{r.pattern} {short(r.method)}".strip() for r in rows]
    x = range(len(rows))
    dense = rows[0]
    fig, axes = plt.subplots(1, 3, figsize=(21, 4.8))
    ax = axes[0]
    shade = {"-": "tab:gray", "magnitude": "tab:blue", "wanda": "tab:cyan", "sparsegpt": "navy"}
    colors = [shade.get(r.method, "tab:olive") for r in rows]  # olive: distilled
    ax.bar(x, [r.cosine_mean for r in rows], color=colors)
    ax.scatter(x, [r.cosine_min for r in rows], color="black", marker="_", s=200, label="min")
    ax.axhline(target, color="tab:red", ls="--", lw=1, label=f"target {target}")
    ax.set(title="cosine similarity to dense embeddings", ylim=(0, 1.02))
    means = [Patch(color=shade[m], label=f"mean, {m}") for m in methods]
    ax.legend(handles=[*means, *ax.get_legend_handles_labels()[0]], loc="upper right", fontsize=8)
    ax = axes[1]
    ax.bar(x, [r.top1 for r in rows], color="tab:green", label="correct answer")
    ax.scatter(
        x,
        [r.agrees_with_dense for r in rows],
        color="black",
        marker="_",
        s=200,
        label="same as dense",
    )
    ax.set(title="retrieval top-1", ylim=(0, 1.05))
    ax.legend(loc="lower left", fontsize=8)
    ax = axes[2]
    series = [
        ([r.weight_bytes / dense.weight_bytes for r in rows], "tab:purple", "weight bytes"),
        (
            [r.held_bytes / dense.held_bytes if dense.held_bytes else float("nan") for r in rows],
            "tab:green",
            "held bytes, once run",
        ),
        (
            [r.seconds / (r.dense_seconds or dense.seconds) for r in rows],
            "tab:orange",
            "time, eager (all sentences)",
        ),
    ]
    if dense.graph_seconds is not None:  # CUDA: the kernels' time, the host's left out
        graphed = [
            r.graph_seconds / dense.graph_seconds if r.graph_seconds is not None else float("nan")
            for r in rows
        ]
        series.append((graphed, "tab:red", "time, CUDA graphs"))
    width = 0.8 / len(series)
    for j, (heights, color, label) in enumerate(series):
        offset = (j - (len(series) - 1) / 2) * width
        ax.bar([i + offset for i in x], heights, width, color=color, label=label)
    ax.axhline(1, color="black", lw=0.8)
    ax.set_yscale("log")
    tallest = max(max(heights) for heights, _, _ in series)
    ax.set_ylim(top=tallest * 8)  # room for the legend
    ax.set(
        title=f"vs dense ({device.type}, {str(dtype).removeprefix('torch.')})",
        ylabel="x dense (log)",
    )
    ax.legend(loc="upper left", fontsize=8)
    for ax in axes:
        ax.set_xticks(list(x), names, rotation=45, ha="right", fontsize=8)
    fig.suptitle(
        "all-MiniLM-L6-v2, encoder linear layers pruned one-shot by magnitude (mag), Wanda and "
        "SparseGPT (sgpt)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
