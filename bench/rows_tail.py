"""Benchmark rows for replaying a real log's tail (issue #17): the production shape, not creations.

A restarting broker loads its latest snapshot, then replays the log after it: up to 20 MiB
(metadata.log.max.record.bytes.between.snapshots) of a controller's events, one batch each
(engine/image/production.py). Both rows apply a tail onto an image of the reference workload
(1M partitions with --full, 100k with --quick: the row says so in "scale") and measure records
per second through the Loader. The peer, measured in the same run on the same bytes and base
image, is the generic per-record path: each record decoded by the generic codec and replayed
through MetadataDelta.replay (what the loader falls back to for any record outside its bulk
runs), timed on a prefix of the tail and scaled.
"""

from __future__ import annotations

import time
from functools import cache

from kraftlog.bench.rows_image import loaded_image, partitions_for
from kraftlog.bench.timing import measure, row
from kraftlog.engine.image import production as pr
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.loader import Loader, decode
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec

TAIL_BYTES = pr.DEFAULT_TAIL_BYTES
NOOP_RECORDS = 300_000  # about 20 MiB of one-record NoOp batches (~42 h of a controller's idle heartbeats)
GENERIC_SAMPLE_RECORDS = 20_000  # the generic path is timed on a prefix this long and scaled


@cache
def production_tail(partitions: int) -> tuple[bytes, int]:
    """(bytes, records) of the production tail after the reference base of ``partitions``."""
    shape = pr.ProductionShape(wl.WorkloadShape.scaled(partitions), tail_bytes=TAIL_BYTES)
    base_records = shape.base.base_records
    tail = pr.ProductionTail(shape, base_records)
    data = b"".join(pr.encode_batches(tail.batches(), base_records))
    return data, tail.finish().records


@cache
def noop_tail(first_offset: int) -> bytes:
    """NOOP_RECORDS NoOpRecords, one per batch, 500 ms apart, as an idle controller writes them."""
    return b"".join(batch.build_batch_from_values([pr.NOOP_VALUE], base_offset=first_offset + i, partition_leader_epoch=1,
                                                  timestamp_ms=pr.START_MS + i * pr.NOOP_INTERVAL_MS)
                    for i in range(NOOP_RECORDS))


def generic_replay(image, buf: bytes, max_records: int) -> float:
    """Seconds the generic path would take over all of ``buf`` onto ``image``: the batches decoded
    (walk, CRC, value positions: the same column decode the loader does), then the first
    ``max_records`` records one by one through the generic codec and MetadataDelta.replay (and the
    delta applied), scaled to every record."""
    started = time.perf_counter()
    cols = decode(buf)
    decode_s = time.perf_counter() - started
    started = time.perf_counter()
    delta = image.delta()
    count = min(max_records, len(cols.offsets))
    for i in range(count):
        pos, length = int(cols.value_pos[i]), int(cols.value_len[i])
        record = codec.decode_record(cols.data, pos, pos + length)
        delta.replay(record.record_type, record.data, topic_epoch=int(cols.offsets[i]))
    delta.apply()
    return decode_s + (time.perf_counter() - started) * len(cols.offsets) / count


def _rate_row(name: str, quick: bool, buf: bytes, records: int, goal_per_s: float, goal: str, **extra) -> dict:
    n = partitions_for(quick)
    image = loaded_image(n)
    median, spread = measure(lambda: Loader(image).replay(buf), repeat=3, warmup=1)
    rate, peer_rate = records / median, records / generic_replay(image, buf, GENERIC_SAMPLE_RECORDS)
    spread_rate = rate - records / (median + spread)
    return row(name, "records/s", rate, spread_rate, peer="generic per-record replay (scaled from a prefix)",
               peer_value=peer_rate, higher_is_better=True, goal=goal,
               met=rate >= goal_per_s and rate / peer_rate >= 30, scale=None if n == 1_000_000 else n,
               records=records, tail_bytes=len(buf),
               notes=f"generic path: the column decode of every batch, then {GENERIC_SAMPLE_RECORDS:,} of "
                     f"{records:,} records one by one, scaled", **extra)


def tail_replay(quick: bool) -> dict:
    """The production tail (>= 20 MiB of controller events) applied onto the reference image."""
    buf, records = production_tail(partitions_for(quick))
    return _rate_row("image.tail_replay_records_per_s", quick, buf, records, 3e6,
                     ">= 3M records/s and >= 30x the generic path")


def noop_replay(quick: bool) -> dict:
    """A tail of NoOpRecords only (one per batch), applied onto the reference image."""
    image = loaded_image(partitions_for(quick))
    buf = noop_tail(image.provenance.offset + 1)
    return _rate_row("image.noop_replay_records_per_s", quick, buf, NOOP_RECORDS, 20e6,
                     ">= 20M records/s and >= 30x the generic path")


ROWS = {
    "image.tail_replay_records_per_s": tail_replay,
    "image.noop_replay_records_per_s": noop_replay,
}
