"""`sparsekernels demo | bench | info` (also `python -m sparsekernels`)."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="sparsekernels", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo",
        help="prune a pre-trained sentence model to several patterns; quality, memory, speed",
    )
    demo.add_argument(
        "--device", choices=("cuda", "cpu"), default=None, help="default: cuda if present"
    )
    demo.add_argument("--tour", action="store_true", help="a short tour of the formats and ops")
    demo.add_argument(
        "--distill",
        type=int,
        default=0,
        metavar="EPOCHS",
        help="also train the SparseGPT models' kept values toward the dense model at 50%% and "
        "2:4 for EPOCHS epochs (35-50 s an epoch on a 2-core CPU)",
    )
    demo.add_argument(
        "--out", default="demo-output", metavar="DIR", help="where the table, plot and results "
        "go (default: ./demo-output; files there are replaced)",
    )  # fmt: skip
    commands.add_parser("bench", help="benchmark every op against its peers (see bench --help)")
    commands.add_parser("info", help="device, versions and which backends can run here")
    if argv[:1] == ["bench"]:
        from .bench.cli import main as bench_main

        return bench_main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "demo":
        if args.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                demo.error("--device cuda but no CUDA device is visible")
        if args.distill < 0:
            demo.error(f"--distill must be 0 or more epochs, got {args.distill}")
        if args.tour:
            if args.distill:
                demo.error("--distill applies to the demo, not to --tour")
            from .tour import run

            return run(args.device)
        from pathlib import Path

        from .demo import run

        out = Path(args.out)
        try:  # (before the minutes of work, not after them)
            out.mkdir(parents=True, exist_ok=True)
            (out / ".written").touch()
            (out / ".written").unlink()
        except OSError as error:
            demo.error(f"--out {args.out!r} cannot hold the results: {error}")
        return run(args.device, out_dir=out, distill_epochs=args.distill)
    from .bench.cli import info

    print(json.dumps(info(), indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
