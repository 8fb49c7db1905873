"""Timing helpers for the `kraftlog bench` rows: medians and spreads, never a single run.

Row modules (bench/rows_<area>.py) expose ROWS = {"row.name": fn} where fn(quick: bool) returns a
dict of the results.json row contract:
    {"name", "unit", "value", "spread", "peer", "peer_value", "ratio", "goal", "met"}
with optional "scale" (when --quick runs a row at a smaller size), "notes", and "skipped" (why a row
could not measure, e.g. its peer is not installed: reported as such, value None, not a failure).
value/peer_value are medians; ratio is ours over the peer's in the direction where higher is
better; met is the goal checked on this run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def measure(fn: Callable[[], object], *, repeat: int = 7, warmup: int = 1) -> tuple[float, float]:
    """Run ``fn`` ``warmup`` + ``repeat`` times; return (median seconds, spread seconds).

    The spread is the interquartile range when there are at least 4 samples, else max - min.
    """
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), spread(samples)


def spread(samples: list[float]) -> float:
    """The interquartile range of ``samples`` (at least 4), else max - min."""
    if len(samples) >= 4:
        q = statistics.quantiles(samples, n=4)
        return q[2] - q[0]
    return max(samples) - min(samples)


def row(name: str, unit: str, value: float, spread: float, *, peer: str | None, peer_value: float | None,
        higher_is_better: bool, goal: str, met: bool, **extra) -> dict:
    """Build one results.json row; ``ratio`` is ours over the peer's, oriented so higher is better."""
    ratio = None
    if peer_value and value:
        ratio = value / peer_value if higher_is_better else peer_value / value
    return {"name": name, "unit": unit, "value": value, "spread": spread, "peer": peer,
            "peer_value": peer_value, "ratio": ratio, "goal": goal, "met": bool(met), **extra}


def percentile(sorted_values: list[float], p: float) -> float:
    """The sample at percentile ``p`` (0-100) of an ascending list: nearest rank, no interpolation."""
    i = min(len(sorted_values) - 1, max(0, round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[i]
