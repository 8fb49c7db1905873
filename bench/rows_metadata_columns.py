"""Report row: decoding the reference snapshot shape into metadata columns.

The shape is Kafka's TopicsImageSnapshotLoadBenchmark: 100,000 TopicRecords, each followed by its
10 PartitionRecords (v0, replication factor 3, ISR = replicas, leaders round-robin over 300
brokers), in batches of 1000 records, uncompressed: 1.1 million records. The row times
``decode_metadata_region`` over the in-memory bytes, CRC checks included. The peer is the generic
codec (``metadata.decode_record`` per record, one dict each) timed on a 100,000-record sample and
scaled to the whole region (the full run would take minutes); the row says so in its notes.
"""

from __future__ import annotations

import functools
import struct
import uuid

from kraftlog.bench.timing import measure, row

TOPICS = 100_000
PARTITIONS_PER_TOPIC = 10
BROKERS = 300
REPLICATION_FACTOR = 3
RECORDS_PER_BATCH = 1000
GOAL_S = 0.15
PEER_SAMPLE_RECORDS = 100_000
QUICK_TOPICS = 10_000

_PARTITION = struct.Struct(">iQQb3ib3ibbiiib")
_TOPIC_ID = struct.Struct(">QQ")


def topic_id(t: int) -> uuid.UUID:
    """A deterministic, non-zero topic id for topic number ``t``."""
    return uuid.UUID(int=((0x5EED0000 + t) << 64) | (t * 0x9E3779B97F4A7C15 & ((1 << 64) - 1)) | 1)


def topic_value(t: int) -> bytes:
    """Framed TopicRecord v0 (frame 1, apiKey 2, version 0): Name, TopicId, no tags."""
    name = f"topic-{t:06d}".encode()
    return b"\x01\x02\x00" + bytes([len(name) + 1]) + name + topic_id(t).bytes + b"\x00"


def partition_value(t: int, p: int) -> bytes:
    """Framed PartitionRecord v0: PartitionId, TopicId, Replicas[3], Isr[3], no removing/adding
    replicas, Leader = first replica, LeaderEpoch 0, PartitionEpoch 0, no tags."""
    g = t * PARTITIONS_PER_TOPIC + p
    replicas = [(g + k) % BROKERS for k in range(REPLICATION_FACTOR)]
    tid = topic_id(t).int
    return b"\x01\x03\x00" + _PARTITION.pack(
        p, tid >> 64, tid & ((1 << 64) - 1), REPLICATION_FACTOR + 1, *replicas, REPLICATION_FACTOR + 1,
        *replicas, 1, 1, replicas[0], 0, 0, 0)


def reference_values(topics: int = TOPICS) -> list[bytes]:
    values = []
    for t in range(topics):
        values.append(topic_value(t))
        values.extend(partition_value(t, p) for p in range(PARTITIONS_PER_TOPIC))
    return values


@functools.lru_cache(maxsize=2)
def reference_region(topics: int = TOPICS) -> bytes:
    """The reference snapshot's record batches (cached: building takes a few seconds)."""
    from kraftlog.engine.records import batch

    values = reference_values(topics)
    out = bytearray()
    for start in range(0, len(values), RECORDS_PER_BATCH):
        out += batch.build_batch_from_values(values[start:start + RECORDS_PER_BATCH], base_offset=start,
                                             timestamp_ms=1_700_000_000_000)
    return bytes(out)


def decode_columns(region: bytes):
    from kraftlog.engine.records.metadata_columns import decode_metadata_region

    return decode_metadata_region(region)


def decode_generic(values: list[bytes]) -> int:
    """The peer: every value through the generic codec into a dict."""
    from kraftlog.engine.records.metadata import decode_record

    n = 0
    for value in values:
        decode_record(value)
        n += 1
    return n


def row_decode_columns(quick: bool) -> dict:
    from kraftlog.engine.records.metadata_columns import IMPLEMENTATION

    topics = QUICK_TOPICS if quick else TOPICS
    region = reference_region(topics)
    records = topics * (1 + PARTITIONS_PER_TOPIC)
    median, spread = measure(lambda: decode_columns(region), repeat=3 if quick else 7)
    sample = reference_values(PEER_SAMPLE_RECORDS // (1 + PARTITIONS_PER_TOPIC) + 1)[:PEER_SAMPLE_RECORDS]
    if quick:
        sample = sample[:records // 10]
    peer_median, _ = measure(lambda: decode_generic(sample), repeat=1 if quick else 3)
    peer_scaled = peer_median * records / len(sample)
    goal = GOAL_S * records / (TOPICS * (1 + PARTITIONS_PER_TOPIC))
    extra = {"scale": topics * PARTITIONS_PER_TOPIC} if quick else {}  # partitions decoded
    return row(
        "image.decode_columns_1m_s", "s", median, spread,
        peer="generic codec: decode_record per record into dicts", peer_value=peer_scaled,
        higher_is_better=False, goal=f"<= {GOAL_S} s for 100k topics + 1M partitions (scaled to the size run)",
        met=median <= goal,
        notes=(f"{records:,} records, {len(region):,} bytes, CRC checked, implementation {IMPLEMENTATION}; "
               f"{records / median:,.0f} records/s; peer timed on {len(sample):,} records and scaled "
               f"x{records / len(sample):.0f} ({len(sample) / peer_median:,.0f} records/s)"),
        **extra,
    )


ROWS = {"image.decode_columns_1m_s": row_decode_columns}
