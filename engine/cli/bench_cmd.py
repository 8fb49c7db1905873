"""`kraftlog bench`: the benchmark report (see kraftlog.bench.report)."""

from __future__ import annotations

import argparse


def register(parser: argparse.ArgumentParser) -> None:
    from kraftlog.bench.report import add_arguments

    add_arguments(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.epilog = "Example: kraftlog bench --quick --only codec --out bench-results"
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kraftlog.bench.report import run_from_args

    try:
        return run_from_args(args)
    except LookupError as exc:
        raise SystemExit(f"kraftlog bench: error: {exc.args[0]}") from None
