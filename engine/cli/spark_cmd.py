"""`kraftlog spark replay|history`: fleet-scale replay and analytics of metadata logs on Spark.

pyspark is imported only when a subcommand runs, so `kraftlog --version` stays fast. Local mode
(local[*]) by default; `--master` names a cluster. The Python workers run this interpreter
(PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON default to sys.executable; see docs/SPARK.md).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

from kraftlog.errors import KraftlogError

# Our errors as Spark reports them from a Python worker: "<module>.<Name>: <message>" in its text.
_OUR_ERRORS = ("CorruptRecordError", "PipelineInputError")


class SparkJobError(KraftlogError):
    """A Spark job over metadata logs failed for an operating reason (bad bytes, bad input path)."""


@contextlib.contextmanager
def _job_errors():
    """Turn a failed job whose cause is one of our typed errors into one line naming file and position."""
    try:
        yield
    except KraftlogError:
        raise
    except Exception as exc:
        for line in str(exc).splitlines():
            for name in _OUR_ERRORS:
                if f"{name}: " in line:
                    raise SparkJobError(line.split(f"{name}: ", 1)[1].strip()) from exc
        raise


def register(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "Example: kraftlog spark replay /data/fleet --out /data/images"
    sub = parser.add_subparsers(dest="spark_command", metavar="SUBCOMMAND", required=True)
    replay = sub.add_parser("replay", help="the final partitions/topics/brokers/features/configs of every "
                                           "cluster, computed in Spark, written as Parquet",
                            epilog="Example: kraftlog spark replay /data/c1 /data/c2 --out images --master local[2]")
    _common(replay)
    replay.set_defaults(run=run_replay)
    history = sub.add_parser("history", help="leader elections, ISR shrinks/expands, leaderless partitions, "
                                             "topic churn and fenced intervals, as Parquet plus summary.txt",
                             epilog="Example: kraftlog spark history /data/fleet --out history")
    _common(history)
    history.set_defaults(run=run_history)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", help="log directories, fleet directories (one sub-directory per cluster) "
                                            "or .checkpoint snapshot files")
    p.add_argument("--out", required=True, help="output directory (one Parquet directory per table)")
    p.add_argument("--master", default=None, help="Spark master URL (default local[*]; under spark-submit its "
                                                  "--master)")
    p.add_argument("--on-corrupt", choices=("fail", "skip"), default="fail",
                   help="a corrupt batch fails the job (default) or is skipped and counted")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark settings")
    p.add_argument("--quiet", action="store_true", help="no summary on stdout")


def _session(args):
    """(session, owned): a session already active in this process (embedding, tests) is reused and
    left running; one made here is stopped when the command ends."""
    from pyspark.sql import SparkSession

    from kraftlog.engine.pipeline.session import spark_session

    owned = SparkSession.getActiveSession() is None

    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"kraftlog spark: error: --conf wants KEY=VALUE, got {item!r}")
        conf[key] = value
    return spark_session(args.master, app_name=f"kraftlog spark {args.spark_command}", conf=conf), owned


def run_replay(args: argparse.Namespace) -> int:
    from kraftlog.engine.pipeline import replay as rp

    spark, owned = _session(args)
    try:
        with _job_errors():
            started = time.perf_counter()
            raw = rp.read_for_replay(spark, args.paths, on_corrupt=args.on_corrupt)
            frames = rp.replay(raw)
            counts = rp.write_replay(frames, args.out)
            corrupt = rp.corrupt_count(raw) if args.on_corrupt == "skip" else 0
            frames["records"].unpersist()
    finally:
        if owned:
            spark.stop()
    if not args.quiet:
        tables = ", ".join(f"{name} {n}" for name, n in counts.items())
        print(f"replayed in {time.perf_counter() - started:.1f} s -> {args.out}: {tables}")
        if corrupt:
            print(f"skipped {corrupt} corrupt region(s): see the rows with record_type __corrupt__")
    return 0


def run_history(args: argparse.Namespace) -> int:
    from kraftlog.engine.pipeline import history as hist

    spark, owned = _session(args)
    try:
        with _job_errors():
            raw = hist.read_for_history(spark, args.paths, on_corrupt=args.on_corrupt)
            frames = hist.history(raw)
            text = hist.write_history(frames, args.out)
            frames["records"].unpersist()
    finally:
        if owned:
            spark.stop()
    if not args.quiet:
        sys.stdout.write(text)
    return 0
