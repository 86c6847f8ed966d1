"""The benchmark harness: every op against every peer, checked, timed cold, written down.

Entry points: `main(argv) -> int` (the `bench` command) and `info() -> dict`. Layout:
cases (problems, float64 answers), providers (ours) and peers (torch's paths), harness
(check + time), ceilings, suites, dlmc, runner (one run), output (table, JSONL, markdown),
plots (PNG).
"""

from .cli import info, main

__all__ = ["main", "info"]
