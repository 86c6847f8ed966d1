"""Rewrite a results folder's summary.md from its results.jsonl, as the harness writes it.

A device call brings back only a few files, so runs may return results.jsonl alone (or a
tarball); this rebuilds the summary here, with the comparison the run was given (--compare in
its recorded command) when that file is in this checkout.
    python benchmarks/summarize.py benchmarks/results/nvidia-h200/DATE/at-COMMIT/dlmc
"""

import sys
from pathlib import Path

from sparsekernels.bench.compare import compare_markdown
from sparsekernels.bench.harness import Row
from sparsekernels.bench.output import read_jsonl, summary_markdown


def main(folder: Path) -> None:
    meta, records = read_jsonl(folder / "results.jsonl")
    rows = [Row.from_dict(r) for r in records]
    summary = summary_markdown(meta, rows)
    argv = meta.get("argv", [])
    if "--compare" in argv:
        previous = Path(argv[argv.index("--compare") + 1])
        if previous.is_file():
            summary += "\n" + compare_markdown(previous, rows, meta["device"])
    (folder / "summary.md").write_text(summary)
    print(f"wrote {folder / 'summary.md'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
