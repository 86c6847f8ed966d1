"""Our previous version as a peer: this run's times against an earlier results.jsonl.

The standards ask for a comparison with our previous version; re-running old code in the same
process is not possible, so the closest honest form is a committed earlier run on the same GPU,
matched case by case and provider by provider. The section says which file and commit it is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from .harness import Row, case_key
from .output import geomean, read_jsonl


def previous_times(path: Path) -> tuple[dict, dict[tuple[str, str], float]]:
    """(metadata, {(case, provider): time_ms}) of the ok rows of an earlier run."""
    meta, rows = read_jsonl(path)
    times = {
        (case_key(r), r["provider"]): r["time_ms"]
        for r in rows
        if r.get("status") == "ok" and r.get("time_ms")
    }
    return meta, times


def compare_markdown(
    path: Path, rows: Sequence[Row], device: str, earlier: tuple[dict, dict] | None = None
) -> str:
    """A markdown section: speedup of each of our providers over the same provider before
    (`earlier`: previous_times(path), read before this run wrote anything)."""
    meta, before = earlier if earlier is not None else previous_times(Path(path))
    lines = [
        "## Against our previous version",
        "",
        f"Earlier run: `{path}` ({meta.get('date', '?')}, commit {meta.get('commit') or '?'}, "
        f"{meta.get('device', '?')}). Speedup = earlier time / this time, same case and provider.",
        "",
    ]
    if meta.get("device") != device:
        lines += [f"(The earlier run was on {meta.get('device')}, this one on {device}.)", ""]
    ratios: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    pairs, unmatched, drift = [], [], []
    for r in rows:
        if r.status != "ok" or not r.time_ms:
            continue
        old = before.get((r.case, r.provider))
        if not r.ours:  # a peer's own change between the runs: the machine's drift
            if old:
                drift.append(old / r.time_ms)
            continue
        if old:
            ratios[(r.op, r.dtype, r.provider)].append(old / r.time_ms)
            pairs.append((old / r.time_ms, r))
        else:
            unmatched.append(r)
    if unmatched:  # (said, not dropped silently: another density or shape is another case)
        names = sorted({r.case for r in unmatched})
        shown = ", ".join(f"`{n}`" for n in names[:3]) + (", ..." if len(names) > 3 else "")
        lines += [f"{len(unmatched)} row(s) of ours had no match in the earlier run: {shown}", ""]
    if drift:
        lines += [
            f"Drift: the peers (dense, cuSPARSE, ...) ran {geomean(drift):.2f}x their earlier "
            f"time's speed over {len(drift)} rows; our speedups below include it.",
            "",
        ]
    if not pairs:
        return "\n".join(lines + ["No case of ours ran in both runs.", ""])
    lines += ["| op | dtype | provider | cases | geometric-mean speedup |", "|---|---|---|---|---|"]
    for (op, dtype, provider), values in sorted(ratios.items()):
        lines.append(f"| {op} | {dtype} | {provider} | {len(values)} | {geomean(values):.2f}x |")
    pairs.sort(key=lambda p: p[0])
    shown = pairs[:3] + pairs[-3:] if len(pairs) > 6 else pairs
    lines += ["", "| speedup | case | provider | now ms |", "|---|---|---|---|"]
    for ratio, r in shown:
        lines.append(f"| {ratio:.2f}x | {r.case} | {r.provider} | {r.time_ms:.4g} |")
    return "\n".join(lines + [""])
