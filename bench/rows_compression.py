"""Report rows: decoding compressed metadata batches beside the uncompressed ones, in the same run.

Data: the reference snapshot shape of rows_metadata_columns (TopicRecords each followed by 10
PartitionRecords, batches of 1000 records), once uncompressed and once per codec, every batch
compressed by our writer (gzip level 6, xerial snappy, lz4 frames level 9, zstd level 3: Kafka's
defaults). Each row times ``decode_metadata_region`` (CRC checks, inflation once per batch, the
native walkers on the inflated sections) over the compressed region and over the uncompressed
one, and reports records/s with the uncompressed path as the peer: the ratio is what a codec
costs the loader.

    codec.metadata.gzip / .snappy / .lz4 / .zstd    M records/s; goal >= 0.15x uncompressed
"""

from __future__ import annotations

import functools

from kraftlog.bench import rows_metadata_columns as ref
from kraftlog.bench.timing import measure, row

QUICK_TOPICS = 10_000  # 110,000 records
FULL_TOPICS = 100_000  # 1.1 million records
GOAL_RATIO = 0.15  # inflation runs in the codec libraries, one batch at a time on one core


@functools.lru_cache(maxsize=8)
def region(topics: int, codec: int) -> bytes:
    from kraftlog.engine.records import batch

    values = ref.reference_values(topics)
    out = bytearray()
    for start in range(0, len(values), ref.RECORDS_PER_BATCH):
        out += batch.build_batch_from_values(values[start:start + ref.RECORDS_PER_BATCH], base_offset=start,
                                             timestamp_ms=1_700_000_000_000, codec=codec)
    return bytes(out)


def _row(codec: int, quick: bool) -> dict:
    from kraftlog.engine.records.batch import CODEC_NAMES, CODEC_NONE
    from kraftlog.engine.records.metadata_columns import IMPLEMENTATION, decode_metadata_region

    topics = QUICK_TOPICS if quick else FULL_TOPICS
    n = topics * (1 + ref.PARTITIONS_PER_TOPIC)
    plain, packed = region(topics, CODEC_NONE), region(topics, codec)
    if len(decode_metadata_region(packed)) != n or len(decode_metadata_region(plain)) != n:
        raise RuntimeError("decode check failed")
    repeat = 5 if quick else 9
    ours, spread = measure(lambda: decode_metadata_region(packed), repeat=repeat)
    peer, _ = measure(lambda: decode_metadata_region(plain), repeat=repeat)
    rate, peer_rate = n / ours / 1e6, n / peer / 1e6
    name = CODEC_NAMES[codec]
    return row(f"codec.metadata.{name}", "M records/s", rate, rate * spread / ours,
               peer="the same records uncompressed, same run (decode_metadata_region)", peer_value=peer_rate,
               higher_is_better=True, goal=f">= {GOAL_RATIO}x uncompressed", met=rate >= GOAL_RATIO * peer_rate,
               notes=(f"{n:,} metadata records in batches of {ref.RECORDS_PER_BATCH}; {name} {len(packed):,} "
                      f"bytes vs {len(plain):,} uncompressed ({len(plain) / len(packed):.1f}x smaller); "
                      f"implementation {IMPLEMENTATION}"),
               **({"scale": f"{topics:,} topics"} if quick else {}))


def _rows() -> dict:
    from kraftlog.engine.records.compression import COMPRESSION_CODECS, codec_name

    return {f"codec.metadata.{codec_name(c)}": functools.partial(_row, c) for c in COMPRESSION_CODECS}


ROWS = _rows()
