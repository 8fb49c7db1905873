"""Benchmarks: the reference snapshot shape (100k TopicRecords + 1M PartitionRecords, RF 3, batches of
1000) through decode_metadata_region, next to the generic codec (decode_record per record into a
dict) on a 100k-record sample of the same values. Run: pytest bench/test_bench_metadata_columns.py
--benchmark-only. Per record, divide the medians by the record counts in extra_info."""

from __future__ import annotations

import pytest

from kraftlog.bench import rows_metadata_columns as ref
from kraftlog.engine.records.metadata import decode_record, encode_record
from kraftlog.engine.records.metadata_columns import IMPLEMENTATION, decode_metadata_region

RECORDS = ref.TOPICS * (1 + ref.PARTITIONS_PER_TOPIC)


@pytest.fixture(scope="module")
def region() -> bytes:
    # The hand-packed reference values are exactly what the generic encoder writes.
    for t, p in ((0, 0), (12345, 7), (ref.TOPICS - 1, 9)):
        value = ref.partition_value(t, p)
        assert encode_record("PartitionRecord", 0, decode_record(value).data) == value
        value = ref.topic_value(t)
        assert encode_record("TopicRecord", 0, decode_record(value).data) == value
    return ref.reference_region()


def test_bench_decode_columns_1m(benchmark, region):
    """Ours: the whole 1.1M-record region into columns, CRCs checked."""
    benchmark.extra_info.update(records=RECORDS, bytes=len(region), implementation=IMPLEMENTATION)
    cols = benchmark.pedantic(decode_metadata_region, args=(region,), rounds=7, iterations=1, warmup_rounds=1)
    assert len(cols.partitions) == ref.TOPICS * ref.PARTITIONS_PER_TOPIC and len(cols.topics) == ref.TOPICS


def test_bench_generic_codec_100k_sample(benchmark):
    """Peer: the generic codec over the first 100k values (scale by RECORDS / 100k to compare)."""
    sample = ref.reference_values(ref.PEER_SAMPLE_RECORDS // (1 + ref.PARTITIONS_PER_TOPIC) + 1)
    sample = sample[:ref.PEER_SAMPLE_RECORDS]
    benchmark.extra_info.update(records=len(sample), scale_to_full=RECORDS / len(sample))
    n = benchmark.pedantic(ref.decode_generic, args=(sample,), rounds=3, iterations=1)
    assert n == len(sample)
