"""What the side stream costs on the production tail (issue 17's measurement, repeatable before
anyone moves it off the per-record Python path).

    python -m kraftlog.bench.profile_side_stream [--partitions 100000] [--repeat 21]

The loader replays the side stream (broker registrations and changes, fences, features, producer
ids, quotas, ACLs, SCRAM, tokens) one record at a time from its column row (loader.py,
``_Context.replay_one``). This prints, for the production tail after the reference image:
- the records replayed one by one, by type (the load's ``LoadManifest.single_types``);
- each side-stream type's cost: the side stream replayed alone onto a fresh delta of the image, in
  log order as the loader does, each record timed; per record, the median over ``--repeat`` runs;
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


def side_stream_costs(image, cols, repeat: int) -> dict[str, tuple[int, float]]:
    """Side-stream record type -> (records, median microseconds per record)."""
    indexes = side_stream_indexes(cols)
    per_record_ns = np.median([replay_side_stream(image, cols, indexes)[1] for _ in range(repeat)], axis=0)
    kinds = cols.api_keys[indexes]
    return {ld._api_name(k): (int((kinds == k).sum()), float(per_record_ns[kinds == k].mean()) / 1e3)
            for k in np.unique(kinds).tolist()}


def single_types(image, buf: bytes) -> dict[str, int]:
    """LoadManifest.single_types of the tail's load."""
    manifests = []
    ld.Loader(image, publishers=[lambda delta, new, manifest: manifests.append(manifest)]).replay(buf)
    return manifests[0].single_types


def report(partitions: int, repeat: int) -> str:
    image = loaded_image(partitions)
    buf, records = production_tail(partitions)
    cols = ld.decode(buf)
    costs = side_stream_costs(image, cols, repeat)
    side_us = sum(count * us for count, us in costs.values())
    apply_s, apply_spread_s = measure(lambda: ld.Loader(image).replay_decoded(cols), repeat=repeat)
    replay_s, replay_spread_s = measure(lambda: ld.Loader(image).replay(buf), repeat=repeat)
    lines = [f"production tail after {partitions:,} partitions: {records:,} records, {len(buf) / 2**20:.1f} MiB",
             f"replayed one by one: {single_types(image, buf)}",
             f"side stream: {sum(c for c, _ in costs.values())} records, {side_us:.0f} us",
             *(f"  {name:34s} {count:4d} x {us:6.2f} us = {count * us:6.0f} us"
               for name, (count, us) in sorted(costs.items(), key=lambda kv: -kv[1][0] * kv[1][1])),
             f"apply (decoded once): {apply_s * 1e3:.1f} ms (spread {apply_spread_s * 1e3:.1f}): "
             f"the side stream is {side_us / 1e6 / apply_s:.1%} of it",
             f"replay (decode + apply): {replay_s * 1e3:.1f} ms (spread {replay_spread_s * 1e3:.1f}): "
             f"the side stream is {side_us / 1e6 / replay_s:.1%} of it"]
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
