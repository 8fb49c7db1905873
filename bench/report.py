"""The `kraftlog bench` report: run every benchmark row beside its peer, write Markdown, JSON, charts.

Rows come from the modules ``kraftlog.bench.rows_<area>``; each exposes ``ROWS = {name: fn}`` with
``fn(quick: bool) -> dict`` (the results.json row contract, see bench/timing.py) and may expose
``CHARTS = {name: fn}`` with ``fn(quick: bool) -> {"title", "xlabel", "ylabel", "series":
{label: [[x, y], ...]}, "log_x": bool}``. A row that raises is reported as failed with its error
and the run goes on; the exit status says whether every row ran and met its goal.

results.json is a stable contract other tools read:
    {"machine": {...}, "kraftlog_version": "...", "date": "...", "mode": "quick"|"full",
     "rows": [{"name", "unit", "value", "spread", "peer", "peer_value", "ratio", "goal", "met", ...}]}
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import importlib
import json
import os
import pkgutil
import platform
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import kraftlog.bench

ROW_KEYS = ("name", "unit", "value", "spread", "peer", "peer_value", "ratio", "goal", "met")


@dataclass
class Suite:
    rows: dict[str, Callable[[bool], dict]] = field(default_factory=dict)
    charts: dict[str, Callable[[bool], dict]] = field(default_factory=dict)


def discover(package=kraftlog.bench) -> Suite:
    """Collect ROWS and CHARTS from every ``rows_*`` module of ``package``, in name order."""
    suite = Suite()
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not info.name.startswith("rows_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for attr, target in (("ROWS", suite.rows), ("CHARTS", suite.charts)):
            for name, fn in getattr(module, attr, {}).items():
                if name in target:
                    raise ValueError(f"benchmark {name} is defined twice ({info.name})")
                target[name] = fn
    return suite


def select(names: Iterable[str], patterns: list[str] | None) -> list[str]:
    """Names matching any of ``patterns`` (shell globs, or a prefix like ``codec``); all when none."""
    names = list(names)
    if not patterns:
        return names
    chosen = [n for n in names if any(fnmatch.fnmatch(n, p) or n.startswith(p + ".") or n == p for p in patterns)]
    return chosen


def machine_facts() -> dict:
    facts = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    from kraftlog import _accel

    facts["native"] = _accel.load_all_native()
    return facts


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    return None


def check_row(result: dict, name: str) -> dict:
    """Refuse rows that break the contract: a missing key is a bug in the row, not a result."""
    missing = [k for k in ROW_KEYS if k not in result]
    if missing:
        raise ValueError(f"row {name} lacks {missing}")
    if result["name"] != name:
        raise ValueError(f"row registered as {name} calls itself {result['name']}")
    return result


def run_rows(suite: Suite, names: list[str], quick: bool, progress: Callable[[str], None]) -> list[dict]:
    rows = []
    for name in names:
        progress(f"running {name}")
        started = time.perf_counter()
        try:
            result = check_row(suite.rows[name](quick), name)
        except Exception as exc:  # a failing row is reported, the report goes on
            result = {k: None for k in ROW_KEYS} | {"name": name, "met": False,
                                                      "error": f"{type(exc).__name__}: {exc}",
                                                      "traceback": traceback.format_exc()}
        result["seconds"] = round(time.perf_counter() - started, 3)
        rows.append(result)
    return rows


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value == 0:
            return "0"
        magnitude = abs(value)
        if magnitude >= 100:
            return f"{value:,.0f}"
        if magnitude >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    return str(value)


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [
        f"# kraftlog bench ({report['mode']}), {report['date']}",
        "",
        f"kraftlog {report['kraftlog_version']} on {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, "
        f"Python {m['python']}",
        "",
        "| row | value | spread | unit | peer | peer value | ratio | goal | met |",
        "| --- | ---: | ---: | --- | --- | ---: | ---: | --- | --- |",
    ]
    for r in report["rows"]:
        scale = r.get("scale")
        name = r["name"] + (f" (scale {scale:,})" if isinstance(scale, int) else f" (scale {scale})" if scale else "")
        met = "ERROR: " + r["error"] if r.get("error") else "skipped: " + r["skipped"] if r.get("skipped") \
            else _fmt(r["met"])
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        lines.append(f"| {name} | {_fmt(r['value'])} | {_fmt(r['spread'])} | {r['unit'] or '-'} | "
                     f"{r['peer'] or '-'} | {_fmt(r['peer_value'])} | {ratio} | {r['goal'] or '-'} | {met} |")
    return "\n".join(lines) + "\n"


def draw_charts(suite: Suite, names: list[str], quick: bool, out_dir: Path) -> list[str]:
    """Render each selected chart to ``out_dir/<name>.png``; returns the files written."""
    if not names:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for name in names:
        spec = suite.charts[name](quick)
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        for label, points in spec["series"].items():
            xs, ys = zip(*points, strict=True) if points else ((), ())
            ax.plot(xs, ys, marker="o", label=label)
        if spec.get("log_x"):
            ax.set_xscale("log")
        if spec.get("log_y"):
            ax.set_yscale("log")
        ax.set_title(spec["title"])
        ax.set_xlabel(spec["xlabel"])
        ax.set_ylabel(spec["ylabel"])
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(str(path))
    return written


def run(*, quick: bool, only: list[str] | None, out_dir: Path, progress: Callable[[str], None] = lambda s: None,
        suite: Suite | None = None) -> dict:
    from kraftlog import __version__

    suite = suite or discover()
    names = select(suite.rows, only)
    if only and not names and not select(suite.charts, only):
        raise LookupError(f"no benchmark matches {only}; known: {', '.join(sorted(suite.rows))}")
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": machine_facts(),
        "kraftlog_version": __version__,
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": "quick" if quick else "full",
        "rows": run_rows(suite, names, quick, progress),
    }
    chart_names = select(suite.charts, only)
    report["charts"] = draw_charts(suite, chart_names, quick, out_dir)
    (out_dir / "results.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (out_dir / "results.md").write_text(markdown(report))
    return report


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kraftlog.bench")
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


def add_arguments(parser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", default=True,
                      help="smaller sizes where a row allows (the default; under 3 minutes on 2 cores)")
    mode.add_argument("--full", action="store_true", help="full sizes, including the 1M-partition rows")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="run rows matching NAME (glob or prefix, e.g. codec or 'log.*'); repeatable")
    parser.add_argument("--out", type=Path, default=Path("bench-results"), help="output folder (default bench-results)")
    parser.add_argument("--list", action="store_true", help="list the rows and charts, run nothing")


def run_from_args(args) -> int:
    if args.list:
        suite = discover()
        for name in suite.rows:
            print(name)
        for name in suite.charts:
            print(f"{name} (chart)")
        return 0
    quiet = getattr(args, "quiet", False)
    progress = (lambda s: None) if quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    report = run(quick=not args.full, only=args.only, out_dir=args.out, progress=progress)
    print(markdown(report), end="")
    print(f"\nwrote {args.out / 'results.json'}, {args.out / 'results.md'}"
          + "".join(f", {c}" for c in report["charts"]))
    failed = [r["name"] for r in report["rows"] if r.get("error")]
    if failed:
        print(f"rows that failed to run: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
