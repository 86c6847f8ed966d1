"""Command line of `sparsekernels bench` (also `python -m sparsekernels.bench`).

Examples:
    python -m sparsekernels.bench --quick
    python -m sparsekernels.bench --suite llm --suite nm --dtype bf16
    python -m sparsekernels.bench --suite dlmc --limit 20 --dtype fp32,bf16
    python -m sparsekernels.bench --suite attention --providers sk,sdpa --out /tmp/run
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from .info import info

__all__ = ["main", "info", "build_parser"]

_DTYPE_ALIASES = {
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
}


def _split(values: list[str] | None) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    from .suites import SUITES

    parser = argparse.ArgumentParser(
        prog="sparsekernels bench",
        description="Time every op of sparsekernels against every peer (dense, cuSPARSE, "
        "cuSPARSELt, torch's Triton BSR, SDPA), checked against float64 first.",
    )
    parser.add_argument(
        "--suite",
        action="append",
        metavar="NAME",
        help=f"suite to run, repeatable: {', '.join(SUITES)}",
    )
    parser.add_argument("--quick", action="store_true", help="every op once (under 3 minutes)")
    parser.add_argument(
        "--dtype",
        action="append",
        metavar="LIST",
        help="fp32, fp16, bf16 (comma list or repeated); default per suite",
    )
    parser.add_argument(
        "--out", type=Path, help="output folder (default benchmarks/results/<gpu>/<suite>-<date>/)"
    )
    parser.add_argument(
        "--dlmc",
        type=Path,
        metavar="DIR",
        help="DLMC folder: .tar.xz archives or extracted .smtx files",
    )
    parser.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="dlmc: at most N matrices per model; other suites: at most N cases, evenly spread",
    )
    parser.add_argument(
        "--match",
        action="append",
        metavar="TEXT",
        help="only the cases whose name (as the log prints it) contains TEXT (repeatable)",
    )
    parser.add_argument(
        "--providers",
        action="append",
        metavar="LIST",
        help="only these providers (comma list; 'sk' = all of ours). Naming one "
        "of ours forces it (e.g. sk_triton on CPU with TRITON_INTERPRET=1)",
    )
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), help="default: cuda when available, else cpu"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="JSONL",
        help="an earlier results.jsonl: adds our speedup over that version to summary.md",
    )
    return parser


def _parse(argv: list[str] | None) -> tuple[argparse.Namespace, int | None]:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits on --help and on errors; we return instead
        return argparse.Namespace(), int(exit_.code or 0)
    dtypes = []
    for name in _split(args.dtype):
        if name.lower() not in _DTYPE_ALIASES:
            parser.print_usage(sys.stderr)
            print(f"error: unknown dtype {name!r}; choose fp32, fp16 or bf16", file=sys.stderr)
            return args, 2
        dtypes.append(_DTYPE_ALIASES[name.lower()])
    args.dtypes = dtypes
    if args.compare is not None and not args.compare.is_file():
        print(f"error: --compare {args.compare}: no such results file", file=sys.stderr)
        return args, 2
    if args.compare is not None:
        from .compare import previous_times

        try:
            previous_times(args.compare)
        except ValueError as error:
            print(f"error: --compare {error}", file=sys.stderr)
            return args, 2
    if args.out is not None:
        if args.compare is not None and (
            (args.out / "results.jsonl").resolve() == args.compare.resolve()
        ):
            print("error: --compare is the results file this run writes: copy it first",
                  file=sys.stderr)  # fmt: skip
            return args, 2
        try:  # (before any device work: a path that cannot be written fails now)
            args.out.mkdir(parents=True, exist_ok=True)
            probe = args.out / ".sparsekernels-write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as error:
            print(f"error: --out {args.out}: cannot write there ({error})", file=sys.stderr)
            return args, 2
    if args.dlmc is not None and not args.dlmc.is_dir():
        print(f"error: --dlmc {args.dlmc}: not a folder", file=sys.stderr)
        return args, 2
    if args.limit is not None and args.limit < 1:
        print("error: --limit must be at least 1", file=sys.stderr)
        return args, 2
    return args, None


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every provider of ours was right, 1 when one was wrong or
    failed, 2 for a bad command line."""
    args, code = _parse(argv)
    if code is not None:
        return code
    from .cases import DTYPES
    from .providers import known_names
    from .runner import RunConfig, run

    names = list(dict.fromkeys(_split(args.suite) + (["quick"] if args.quick else [])))
    names = names or ["quick"]
    only = set(_split(args.providers)) or None
    unknown = sorted(only - set(known_names())) if only else []
    if unknown:
        print(
            f"error: unknown providers {unknown}; known: {', '.join(known_names())}",
            file=sys.stderr,
        )
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but no CUDA device is visible", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    config = RunConfig(
        suites=names,
        device=device,
        dtypes=tuple(DTYPES[d] for d in args.dtypes) or None,
        out=args.out,
        dlmc=args.dlmc,
        limit=args.limit,
        match=tuple(args.match or ()),
        providers=only,
        argv=list(sys.argv[1:] if argv is None else argv),
        plots=not args.no_plots,
        compare=args.compare,
    )
    try:
        result = run(config)
    except (ValueError, FileNotFoundError, NotImplementedError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    bad = [r for r in result.rows if r.ours and r.status in ("wrong", "error")]
    for r in bad:
        print(f"{r.status}: {r.provider} on {r.case}: {r.error}", file=sys.stderr)
    return 1 if bad else 0
