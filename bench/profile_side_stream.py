"""What the side stream costs on the production tail (issue 17's measurement): its native pass
against the per-record Python path, on the same tail.

    python -m kraftlog.bench.profile_side_stream [--partitions 100000] [--repeat 21]

The loader applies the side stream (broker registrations and changes, fences, features, producer
ids, quotas, ACLs, SCRAM, tokens) in one pass (loader.py ``_apply_side_stream``: kraftlog._side,
each record from its column row) and replays on its own only what the pass hands back. This
prints, for the production tail after the reference image:
- what the load's manifest says: the records the side pass applied (``side_records``) and those
  replayed one by one, by type (``single_types``);
- the side pass: the side stream applied alone onto a fresh delta of the image by the loader's
  ``_apply_side_stream``, timed whole; median over ``--repeat`` runs (and the pure twin's pass);
- the one-by-one path it replaced, on the same records: each replayed on its own from its column
  row (``_Context.replay_one``, what the loader did before the pass), each record timed; per
  type, the median over the runs;
- for scale, the tail's apply (``Loader.replay_decoded`` of the decoded tail) and its whole replay
  (decode included, what image.tail_replay_records_per_s times): median and spread.
Timed without a profiler: cProfile's cost per Python call makes these records look about three
times dearer than they are (measured: 6% of the apply under cProfile, ~2% without).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from kraftlog.bench.rows_image import loaded_image
from kraftlog.bench.rows_tail import production_tail
from kraftlog.bench.timing import measure
from kraftlog.engine.image import loader as ld
from kraftlog.engine.image import side, side_pure

DEFAULT_PARTITIONS = 100_000
DEFAULT_REPEAT = 21


def side_stream_indexes(cols) -> np.ndarray:
    """Record indexes of the side stream, in log order (as apply_columns picks them)."""
    return np.flatnonzero(ld._STREAM_OF_API_KEY[np.clip(cols.api_keys, 0, len(ld._STREAM_OF_API_KEY) - 1)]
                          == ld.SIDE_STREAM)


def replay_side_stream(image, cols, indexes: np.ndarray) -> tuple[ld.MetadataDelta, np.ndarray]:
    """The side stream alone onto a fresh delta of ``image``, record by record as the loader
    replays it; returns the delta and each record's nanoseconds."""
    delta = image.delta()
    ctx = ld._Context(delta, cols, ld.LoadManifest("log"), None, False, None)
    clock = time.perf_counter_ns
    spent_ns = np.empty(len(indexes), dtype=np.int64)
    for k, i in enumerate(indexes.tolist()):
        started = clock()
        ctx.replay_one(i)
        spent_ns[k] = clock() - started
    return delta, spent_ns


def side_pass(image, cols, indexes: np.ndarray) -> tuple[ld.MetadataDelta, int]:
    """The side stream alone onto a fresh delta of ``image`` as the loader applies it (the side
    pass, and on its own what it hands back); returns the delta and the nanoseconds taken."""
    delta = image.delta()
    ctx = ld._Context(delta, cols, ld.LoadManifest("log"), None, False, None)
    started = time.perf_counter_ns()
    ld._apply_side_stream(ctx, indexes)
    return delta, time.perf_counter_ns() - started


def side_pass_us(image, cols, repeat: int, *, twin: bool = False) -> float:
    """Median microseconds of the side pass over the tail's side stream (the pure twin's with ``twin``)."""
    indexes = side_stream_indexes(cols)
    native = side.apply_side_stream
    if twin:
        side.apply_side_stream = side_pure.apply_side_stream
    try:
        return float(np.median([side_pass(image, cols, indexes)[1] for _ in range(repeat)])) / 1e3
    finally:
        side.apply_side_stream = native


def side_stream_costs(image, cols, repeat: int) -> dict[str, tuple[int, float]]:
    """Side-stream record type -> (records, median microseconds per record) on the one-by-one path."""
    indexes = side_stream_indexes(cols)
    per_record_ns = np.median([replay_side_stream(image, cols, indexes)[1] for _ in range(repeat)], axis=0)
    kinds = cols.api_keys[indexes]
    return {ld._api_name(k): (int((kinds == k).sum()), float(per_record_ns[kinds == k].mean()) / 1e3)
            for k in np.unique(kinds).tolist()}


def load_manifest(image, buf: bytes) -> ld.LoadManifest:
    """The LoadManifest of the tail's load."""
    manifests = []
    ld.Loader(image, publishers=[lambda delta, new, manifest: manifests.append(manifest)]).replay(buf)
    return manifests[0]


def report(partitions: int, repeat: int) -> str:
    image = loaded_image(partitions)
    buf, records = production_tail(partitions)
    cols = ld.decode(buf)
    costs = side_stream_costs(image, cols, repeat)
    one_by_one_us = sum(count * us for count, us in costs.values())
    pass_us, twin_us = side_pass_us(image, cols, repeat), side_pass_us(image, cols, repeat, twin=True)
    apply_s, apply_spread_s = measure(lambda: ld.Loader(image).replay_decoded(cols), repeat=repeat)
    replay_s, replay_spread_s = measure(lambda: ld.Loader(image).replay(buf), repeat=repeat)
    manifest = load_manifest(image, buf)
    count = sum(c for c, _ in costs.values())
    lines = [f"production tail after {partitions:,} partitions: {records:,} records, {len(buf) / 2**20:.1f} MiB",
             f"the load: side pass applied {manifest.side_records}, replayed one by one: {manifest.single_types}",
             f"side stream: {count} records",
             f"  {'side pass (' + side.IMPLEMENTATION + '):':24s}{pass_us:7.0f} us ({pass_us / max(count, 1):.2f} us a record)",
             f"  {'side pass (pure twin):':24s}{twin_us:7.0f} us ({twin_us / max(count, 1):.2f} us a record)",
             f"  {'one by one (before):':24s}{one_by_one_us:7.0f} us, by type:",
             *(f"    {name:34s} {n:4d} x {us:6.2f} us = {n * us:6.0f} us"
               for name, (n, us) in sorted(costs.items(), key=lambda kv: -kv[1][0] * kv[1][1])),
             f"apply (decoded once): {apply_s * 1e3:.1f} ms (spread {apply_spread_s * 1e3:.1f}): the side pass is "
             f"{pass_us / 1e6 / apply_s:.1%} of it (one by one: {one_by_one_us / 1e6 / apply_s:.1%})",
             f"replay (decode + apply): {replay_s * 1e3:.1f} ms (spread {replay_spread_s * 1e3:.1f}): the side pass is "
             f"{pass_us / 1e6 / replay_s:.1%} of it (one by one: {one_by_one_us / 1e6 / replay_s:.1%})"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("--repeat", type=int, default=DEFAULT_REPEAT)
    args = parser.parse_args(argv)
    print(report(args.partitions, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
