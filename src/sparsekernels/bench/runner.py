"""One benchmark run: ceilings, then every case of the chosen suites, then the files."""

from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import torch
from rich.console import Console

from . import harness, metadata, suites
from .ceilings import measure_ceilings
from .harness import Row, Timer
from .output import JsonlWriter, LiveReport, default_out_dir, summary_markdown
from .providers import Provider, providers_for

# (warmup, repetition) budgets in ms: do_bench's defaults on CUDA, shorter on the CPU path.
TIMING_MS = {"cuda": (25.0, 100.0), "cpu": (5.0, 30.0)}


@dataclass
class RunConfig:
    suites: list[str]
    device: torch.device
    dtypes: tuple[torch.dtype, ...] | None = None
    out: Path | None = None
    dlmc: Path | None = None
    limit: int | None = None
    match: tuple[str, ...] = ()  # only cases whose name contains one of these
    providers: set[str] | None = None  # only these names ('sk' = every backend of ours)
    argv: list[str] | None = None
    plots: bool = True
    compare: Path | None = None  # an earlier results.jsonl: our previous version as a peer
    extra: tuple[Provider, ...] = field(default=())  # more contenders (tests, experiments)


@dataclass
class RunResult:
    meta: dict
    rows: list[Row]
    out_dir: Path
    files: list[Path]


def run(config: RunConfig, console: Console | None = None) -> RunResult:
    console = console or Console()
    device = torch.device(config.device)
    warmup_ms, rep_ms = TIMING_MS["cuda" if device.type == "cuda" else "cpu"]
    timer = Timer(device, warmup_ms=warmup_ms, rep_ms=rep_ms)
    ctx = suites.Context(device, config.dtypes, config.dlmc, config.limit)
    cases = suites.build(config.suites, ctx)  # before any device work: a bad suite fails fast
    if config.match:
        cases = [c for c in cases if any(text in c.name for text in config.match)]
        if not cases:
            raise ValueError(f"no case's name contains any of {list(config.match)}")

    earlier = None
    if config.compare is not None:  # (read first: the output may be written over it)
        from .compare import previous_times

        earlier = previous_times(Path(config.compare))
    meta = metadata.run_metadata(device, config.argv)
    meta["suites"] = list(config.suites)
    console.print(
        f"[bold]sparsekernels bench[/]: {len(cases)} cases on {meta['device']}; "
        "measuring ceilings..."
    )
    dtypes = sorted({c.dtype for c in cases}, key=str)
    meta["ceilings"] = measure_ceilings(timer, dtypes)
    out_dir = Path(config.out) if config.out is not None else default_out_dir(meta, config.suites)
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = out_dir / "results.jsonl"
    writer = JsonlWriter(jsonl, meta)

    rows: list[Row] = []
    try:
        with LiveReport(len(cases), console) as live, warnings.catch_warnings():
            # torch warns once per process that sparse CSR is beta: noise in a results table.
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly")
            for i in range(len(cases)):
                case, cases[i] = cases[i], None  # drop each case's loaded data once it has run
                live.start(case.name)
                # seeded by the case, not its place in the run: a subset (--match) draws the
                # same data, so --compare finds the same densities
                seed = zlib.crc32(case.name.encode()) % 2**31
                case_rows = harness.run_case(
                    case, providers_for(case, config.providers, config.extra), timer, seed=seed
                )
                writer.write(case_rows)
                live.add(case_rows)
                rows += case_rows
    finally:
        writer.close()

    files = [jsonl, out_dir / "summary.md"]
    summary = summary_markdown(meta, rows)
    if config.compare is not None:
        from .compare import compare_markdown

        summary += "\n" + compare_markdown(config.compare, rows, meta["device"], earlier)
    files[1].write_text(summary)
    if any(r.op == "e2e_train_curve" for r in rows):
        import json

        from .e2e import loss_curves

        files.append(out_dir / "loss_curves.json")
        files[-1].write_text(json.dumps(loss_curves(rows), indent=1))
    if config.plots:
        from .plots import plot_roofline, plot_speedups  # matplotlib only when plotting

        files += plot_speedups(rows, out_dir) + plot_roofline(rows, meta["ceilings"], out_dir)
    console.print(f"wrote {len(rows)} rows and {len(files) - 1} more files to {out_dir}")
    return RunResult(meta, rows, out_dir, files)
