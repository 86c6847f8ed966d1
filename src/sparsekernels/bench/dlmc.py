"""DLMC (Deep Learning Matrix Collection): find the .smtx matrices, extracting archives once.

A source folder holds either archives (`*.tar.xz`, as in the project's shared data) or
already extracted .smtx files (any DLMC checkout). Archives are extracted with tarfile into a
cache folder (default ~/.cache/sparsekernels/dlmc) and reused by later runs.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

_ARCHIVES = ("*.tar.xz", "*.tar.gz", "*.tar")
_BATCH_FILE = "rn50_batchsizes.txt"
_DONE = ".extracted"


@dataclass(frozen=True)
class Matrix:
    path: Path
    model: str  # 'transformer', 'rn50' or 'other'
    technique: str  # how it was pruned: 'magnitude_pruning', ...
    sparsity: float
    name: str  # the layer: file stem
    rows: int
    cols: int
    nnz: int
    root: Path | None = None  # the folder its path is laid out under (an extracted archive)

    @property
    def label(self) -> str:
        return f"{self.model}/{self.technique}/{self.sparsity:g}/{self.name}"


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sparsekernels" / "dlmc"


def default_source() -> Path | None:
    """The project's shared DLMC folder, looked for next to the repository and the cwd."""
    repo = Path(__file__).resolve().parents[3]
    for root in (repo, repo.parent, Path.cwd(), Path.cwd().parent):
        candidate = root / "shared" / "data" / "dlmc"
        if candidate.is_dir():
            return candidate
    return None


def _archive_stem(archive: Path) -> str:
    return re.sub(r"\.tar(\.\w+)?$", "", archive.name)


def extract(archive: Path, cache: Path) -> Path:
    """Extract `archive` into cache/<stem> once (atomically: a broken run leaves nothing)."""
    target = cache / _archive_stem(archive)
    if (target / _DONE).exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache))
    try:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):  # refuse links and absolute paths
                tar.extractall(tmp, filter="data")
            else:
                tar.extractall(tmp)  # noqa: S202 (Pythons before the filter argument)
        (tmp / _DONE).write_text(str(archive))
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _header(path: Path) -> tuple[int, int, int]:
    with path.open() as f:
        rows, cols, nnz = (int(v) for v in f.readline().replace(",", " ").split())
    return rows, cols, nnz


def _describe(path: Path, root: Path) -> Matrix:
    parts = (root.name, *path.relative_to(root).parts)  # an archive's name says its model
    model = next(
        (m for m in ("rn50", "transformer") if any(p.startswith(m) for p in parts)), "other"
    )
    try:
        sparsity = float(path.parent.name)
    except ValueError:
        sparsity = float("nan")
    technique = path.parent.parent.name if len(parts) >= 3 else "unknown"
    technique = re.sub(rf"^{model}_", "", technique)
    if technique == model:  # a checkout laid out model/technique/sparsity without the prefix
        technique = "unknown"
    rows, cols, nnz = _header(path)
    return Matrix(path, model, technique, sparsity, path.stem, rows, cols, nnz, root)


def find(
    source: Path | None = None, cache: Path | None = None
) -> tuple[list[Matrix], dict[str, int]]:
    """All matrices under `source` (archives extracted to `cache`) and the rn50 N per layer."""
    source = Path(source) if source is not None else default_source()
    if source is None or not source.is_dir():
        raise FileNotFoundError(
            "no DLMC folder found: pass --dlmc DIR "
            "(a folder of DLMC .tar.xz archives or of .smtx files)"
        )
    cache = Path(cache) if cache is not None else default_cache()
    roots = [extract(a, cache) for pattern in _ARCHIVES for a in sorted(source.glob(pattern))]
    roots = roots or [source]
    matrices = [_describe(p, root) for root in roots for p in sorted(root.rglob("*.smtx"))]
    if not matrices:
        raise FileNotFoundError(f"{source}: no DLMC archives or .smtx files")
    return matrices, batch_sizes([source, *roots])


def batch_sizes(folders: list[Path]) -> dict[str, int]:
    """rn50 layer -> N for one image (rn50_batchsizes.txt), from the first folder that has it."""
    for folder in folders:
        path = folder / _BATCH_FILE
        if path.exists():
            sizes = {}
            for line in path.read_text().splitlines():
                if "," in line:
                    name, n = line.rsplit(",", 1)
                    sizes[name.strip()] = int(n)
            return sizes
    return {}


def sample(matrices: list[Matrix], limit: int | None) -> list[Matrix]:
    """At most `limit` matrices per model, evenly spread over sparsity and layers."""
    if limit is None:
        return matrices
    picked = []
    for model in sorted({m.model for m in matrices}):
        group = sorted(
            (m for m in matrices if m.model == model), key=lambda m: (m.sparsity, m.label)
        )
        if len(group) <= limit:
            picked += group
        else:
            picked += [group[(i * len(group)) // limit] for i in range(limit)]
    return picked


def write_subset(
    dest: Path, limit: int, source: Path | None = None, cache: Path | None = None
) -> list[Matrix]:
    """Copy `sample(find(source), limit)` and the rn50 batch sizes into `dest`, laid out as
    find() reads them back (the same labels): a small folder to send to a GPU machine (24
    matrices a model: 18 MB)."""
    source = Path(source) if source is not None else default_source()
    matrices, _ = find(source, cache)
    chosen = sample(matrices, limit)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for folder in (source, *dict.fromkeys(m.root for m in matrices)):
        if (folder / _BATCH_FILE).exists():
            shutil.copy(folder / _BATCH_FILE, dest / _BATCH_FILE)
            break
    for m in chosen:
        target = dest / m.root.name / m.path.relative_to(m.root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(m.path, target)
    return chosen
