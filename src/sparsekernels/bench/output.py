"""What a run leaves behind: a live terminal table, JSON lines, and a markdown summary.

results.jsonl: first line {"meta": {...}} (device, versions, date, command, ceilings), then one
row per line (harness.Row.to_dict). Results live in benchmarks/results/<gpu>/<suite>-<date>/.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .cases import AUTOMATIC_ROUTE
from .harness import Row

LIVE_ROWS = 24  # the table shows the latest rows; everything is in the JSONL file
_STATUS_STYLE = {
    "ok": "green",
    "wrong": "bold red",
    "error": "red",
    "unsupported": "dim",
    "skipped": "dim",
}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def default_out_dir(meta: dict, suites: Sequence[str], root: Path | None = None) -> Path:
    root = root if root is not None else Path.cwd() / "benchmarks" / "results"
    date = meta["date"].replace(":", "").replace("-", "").replace("+0000", "Z")
    return root / slug(meta["device"]) / f"{'+'.join(suites)}-{date}"


def baseline(op: str) -> str:
    """The peer every op's speedups are plotted against: what a user runs without sparsity."""
    return "sdpa" if op == "attention" else "dense"


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.{digits}g}"


# ============================================================================ live table
class LiveReport:
    """A progress bar over cases and a table of the latest rows; plain lines off a terminal."""

    def __init__(self, total: int, console: Console | None = None):
        self.console = console or Console()
        self.rows: list[Row] = []
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
        )
        self.task = self.progress.add_task("cases", total=total)
        self.live = (
            Live(self._render(), console=self.console, refresh_per_second=4)
            if self.console.is_terminal
            else None
        )

    def __enter__(self) -> LiveReport:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def start(self, case_name: str) -> None:
        self.progress.update(self.task, description=case_name)
        if self.live is not None:
            self.live.update(self._render())

    def add(self, rows: Iterable[Row]) -> None:
        rows = [r for r in rows if r.status != "unsupported" or r.ours]
        self.rows += rows
        self.progress.advance(self.task)
        if self.live is not None:
            self.live.update(self._render())
        else:
            for r in rows:
                self.console.print(_line(r), highlight=False, soft_wrap=True)

    def _render(self) -> Group:
        table = Table(box=None, pad_edge=False, header_style="bold")
        for name in (
            "op",
            "fmt",
            "pattern",
            "MxKxN",
            "density",
            "dtype",
            "provider",
            "status",
            "ms",
            "TFLOP/s",
            "GB/s",
            "vs base",
            "vs best peer",
        ):
            table.add_column(name, justify="right" if name in ("ms", "TFLOP/s", "GB/s") else "left")
        for r in self.rows[-LIVE_ROWS:]:
            table.add_row(
                r.op,
                r.format,
                r.pattern,
                "x".join(map(str, r.shape)),
                _fmt(r.density),
                r.dtype,
                r.provider,
                f"[{_STATUS_STYLE.get(r.status, '')}]{r.status}",
                _fmt(r.time_ms),
                _fmt(r.tflops),
                _fmt(r.gbps),
                _fmt(r.speedup_vs.get(baseline(r.op))),
                _fmt(_vs_best_peer(r)),
            )
        return Group(table, self.progress)


def _vs_best_peer(row: Row) -> float | None:
    """For our rows: the fastest peer's time over ours (> 1: we win)."""
    if not row.ours:
        return None
    peers = [v for k, v in row.speedup_vs.items() if not k.startswith("sk_")]
    return min(peers) if peers else None


def _line(r: Row) -> str:
    m, k, n = r.shape
    shape = f"{m}x{k}x{n}"
    text = (
        f"{r.op:9} {r.format:3} {r.pattern:14} {shape:16} {r.dtype:4} {r.provider:14} {r.status:11}"
    )
    if r.time_ms is not None:
        text += f" {r.time_ms:9.4f} ms {_fmt(r.tflops):>7} TFLOP/s {_fmt(r.gbps):>7} GB/s"
    elif r.error:
        text += f" {r.error[:100]}"
    return text


# ============================================================================ JSON lines
class JsonlWriter:
    """Writes the metadata line, then each row as soon as it exists (a crash keeps them)."""

    def __init__(self, path: Path, meta: dict):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("w")
        self._write({"meta": meta})

    def _write(self, obj: dict) -> None:
        self.file.write(json.dumps(obj, default=str) + "\n")
        self.file.flush()

    def write(self, rows: Iterable[Row]) -> None:
        for row in rows:
            self._write(row.to_dict())

    def close(self) -> None:
        self.file.close()


def read_jsonl(path: Path) -> tuple[dict, list[dict]]:
    """(metadata, rows) of a results.jsonl; a ValueError naming the file where it is not one."""
    try:
        text = Path(path).read_text()
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable results.jsonl ({error})") from None
    if not lines or not isinstance(lines[0], dict) or not isinstance(lines[0].get("meta"), dict):
        raise ValueError(f"{path}: not a results.jsonl (its first line must be the run's meta)")
    if not all(isinstance(line, dict) for line in lines[1:]):
        raise ValueError(f"{path}: not a results.jsonl (every row must be a JSON object)")
    return lines[0]["meta"], lines[1:]


# ============================================================================ markdown
def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def _by_case(rows: Iterable[Row]) -> dict[str, list[Row]]:
    cases: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        cases[r.case].append(r)
    return cases


def _speedup_matrix(rows: Sequence[Row]) -> list[str]:
    """Geometric-mean speedup of each provider (row) over each other (column), with counts."""
    names = sorted(
        {r.provider for r in rows if r.status == "ok"}, key=lambda n: (not n.startswith("sk_"), n)
    )
    if len(names) < 2:
        return ["(fewer than two providers timed)"]
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        for peer, value in r.speedup_vs.items():
            ratios[(r.provider, peer)].append(value)
    lines = ["| provider \\ vs | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for name in names:
        cells = []
        for peer in names:
            values = ratios.get((name, peer), [])
            cells.append(
                "" if name == peer or not values else f"{geomean(values):.2f}x ({len(values)})"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _automatic_route(rows: Sequence[Row]) -> list[str]:
    """The backend automatic dispatch picks (cases.AUTOMATIC_ROUTE) against each peer:
    what a user calling with backend=None gets, where the matrix above has every backend."""
    ratios: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.ours and r.status == "ok" and AUTOMATIC_ROUTE in r.note:
            for peer, value in r.speedup_vs.items():
                if not peer.startswith("sk_"):
                    ratios[peer].append(value)
    if not ratios:
        return []
    cells = [f"{p} {geomean(v):.2f}x ({len(v)})" for p, v in sorted(ratios.items())]
    return ["The automatic route (backend=None) against each peer: " + ", ".join(cells) + ".", ""]


def _extremes(rows: Sequence[Row], count: int = 3) -> list[str]:
    """Best and worst cases of our fastest backend against the fastest peer."""
    scored = []
    for case_rows in _by_case(rows).values():
        ours = [r for r in case_rows if r.ours and r.status == "ok"]
        peers = [r for r in case_rows if not r.ours and r.status == "ok"]
        if ours and peers:
            best, peer = min(ours, key=lambda r: r.time_ms), min(peers, key=lambda r: r.time_ms)
            scored.append((peer.time_ms / best.time_ms, best, peer))
    if not scored:
        return []
    scored.sort(key=lambda s: s[0], reverse=True)
    picks = scored if len(scored) <= 2 * count else scored[:count] + scored[-count:]
    lines = ["| ours vs fastest peer | case | ours | peer |", "|---|---|---|---|"]
    for ratio, best, peer in picks:
        m, k, n = best.shape
        where = (
            f"{best.format} {best.pattern} {m}x{k}x{n} d={best.density:.3g} {best.source}".strip()
        )
        lines.append(
            f"| {ratio:.2f}x | {where} | {best.provider} {best.time_ms:.4g} ms "
            f"| {peer.provider} {peer.time_ms:.4g} ms |"
        )
    return lines


def _e2e_section(rows: Sequence[Row]) -> list[str]:
    """Whole-model rows: throughput, peak memory, the weights' bytes held, and each as a ratio
    to the dense model."""
    timed = [r for r in rows if r.unit and r.status == "ok"]
    if not timed:
        return []
    dense = {r.case: r for r in timed if r.provider == "dense"}
    out = [
        "## End to end (whole models)",
        "",
        "| case | provider | throughput | peak MiB | speedup vs dense | dense memory / this "
        "| weights MiB | dense weights / this |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in timed:
        base = dense.get(r.case)
        memory = base.peak_mb / r.peak_mb if base and base.peak_mb and r.peak_mb else None
        held = base.held_mb / r.held_mb if base and base.held_mb and r.held_mb else None
        where = f"{r.op} {r.pattern} {'x'.join(map(str, r.shape))} b={r.batch} {r.dtype}"
        out.append(
            f"| {where} | {r.provider} | {_fmt(r.throughput, 4)} {r.unit} | {_fmt(r.peak_mb)} "
            f"| {_fmt(r.speedup_vs.get('dense'))} | {_fmt(memory)} | {_fmt(r.held_mb)} "
            f"| {_fmt(held)} |"
        )
    from .e2e import loss_curves

    for case, curves in loss_curves(rows).items():
        if "max_rel_diff" in curves:
            out += ["", f"Loss curves ({case}): max relative difference sparse vs masked-dense "
                    f"{curves['max_rel_diff']:.3g} (curves in loss_curves.json)"]  # fmt: skip
    return [*out, ""]


def _attention_memory_section(rows: Sequence[Row]) -> list[str]:
    """Peak memory of each attention case (CUDA runs record it): ours (the automatic route's
    row, else our fastest) against sdpa (flash: never stores the L x L scores, but ignores the
    pattern) and sdpa_mask (the pattern as a dense L x L mask, what a dense model must do to
    honour it). Issue 7's "attention memory" target is the last column."""
    out = []
    for case, group in _by_case(r for r in rows if r.op == "attention").items():
        done = {r.provider: r for r in group if r.status == "ok" and r.peak_mb}
        ours = [r for r in done.values() if r.ours]
        if not ours:
            continue
        routed = [r for r in ours if AUTOMATIC_ROUTE in r.note]
        mine = routed[0] if routed else min(ours, key=lambda r: r.time_ms)
        peers = [done.get(name) for name in ("sdpa", "sdpa_mask")]
        ratios = [_fmt(p.peak_mb / mine.peak_mb) if p else "-" for p in peers]
        mib = [_fmt(p.peak_mb) if p else "-" for p in peers]
        out.append(f"| {case} | {mine.provider} {_fmt(mine.peak_mb)} | {mib[0]} | {mib[1]} "
                   f"| {ratios[0]} | {ratios[1]} |")  # fmt: skip
    if not out:
        return []
    head = [
        "## Attention memory (peak MiB a warm call adds)",
        "",
        "| case | ours | sdpa | sdpa_mask | sdpa / ours | sdpa_mask / ours |",
        "|---|---|---|---|---|---|",
    ]
    return [*head, *out, ""]


def _strict_section(rows: Sequence[Row]) -> list[str]:
    """Passing rows past the strict bound (harness.strict_ratio), by provider: which providers
    round partial sums (a strict provider's rows past it are wrong, not passing)."""
    over: dict[str, list[float]] = defaultdict(list)
    measured: dict[str, int] = defaultdict(int)
    for r in rows:
        if r.status == "ok" and r.strict_err is not None:
            measured[r.provider] += 1
            if r.strict_err > 1:
                over[r.provider].append(r.strict_err)
    if not measured:
        return []
    out = [
        "## Strict bound (fp32 accumulation, one rounding)",
        "",
        "| provider | rows checked | past it | worst |",
        "|---|---|---|---|",
    ]
    for name in sorted(measured):
        worst = max(over[name], default=None)
        out.append(f"| {name} | {measured[name]} | {len(over[name])} | {_fmt(worst)} |")
    return [*out, ""]


def summary_markdown(meta: dict, rows: Sequence[Row]) -> str:
    out = [
        f"# sparsekernels bench on {meta['device']}",
        "",
        f"- command: `{meta['command']}`",
        f"- date (UTC): {meta['date']}, host: {meta['hostname']}",
        f"- torch {meta['torch']}, triton {meta['triton']}, CUDA {meta['cuda']}, "
        f"python {meta['python']}",
        "",
    ]
    ceilings = meta.get("ceilings") or {}
    if ceilings:
        out += [
            "## Ceilings (measured in this run)",
            "",
            "| what | value |",
            "|---|---|",
            f"| copy bandwidth (read+write) | {ceilings['copy_gbps']:.1f} GB/s |",
        ]
        for key, size in (("copy_gbps_graph_256mib", "256 MiB"), ("copy_gbps_graph_1gib", "1 GiB")):
            if key in ceilings:
                out += [f"| copy bandwidth, {size} as a CUDA graph | {ceilings[key]:.1f} GB/s |"]
        size = ceilings.get("matmul_size")
        out += [
            f"| dense matmul {size}^3 {k} | {v:.2f} TFLOP/s |"
            for k, v in ceilings.get("matmul_tflops", {}).items()
        ]
        out.append("")
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        groups[(r.op, r.dtype)].append(r)
    for (op, dtype), group in sorted(groups.items()):
        cases = len(_by_case(group))
        out += [
            f"## {op} {dtype} ({cases} cases)",
            "",
            "Geometric-mean speedup of each row over each column (number of cases in brackets):",
            "",
            *_speedup_matrix(group),
            "",
            *_automatic_route(group),
        ]
        extremes = _extremes(group)
        if extremes:
            out += ["Best and worst cases:", "", *extremes, ""]
    out += _e2e_section(rows)
    out += _attention_memory_section(rows)
    failed = [r for r in rows if r.status in ("wrong", "error")]
    if failed:
        out += [
            "## Wrong or failed",
            "",
            "| provider | case | status | error |",
            "|---|---|---|---|",
        ]
        out += [
            f"| {r.provider} | {r.case} | {r.status} | {r.error.replace('|', '/')[:200]} |"
            for r in failed
        ]
        out.append("")
    out += _strict_section(rows)
    counts = defaultdict(int)
    for r in rows:
        counts[r.status] += 1
    out.append("Rows by status: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return "\n".join(out) + "\n"
