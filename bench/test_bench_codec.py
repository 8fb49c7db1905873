"""Micro benchmarks of the record batch codec beside its peers, on identical data (see
bench/rows_codec.py for the data and the report rows): encode and decode against aiokafka's Cython
codec, segment CRC against the crc32c package. Groups pair ours with the peer."""

from __future__ import annotations

import crc32c
import pytest

from kraftlog.bench import rows_codec as data
from kraftlog.engine.records import batch


@pytest.fixture(scope="module")
def peer_batch():
    data.aiokafka_classes()  # refuses to run against aiokafka's pure-Python fallback
    return data.peer_batch()


@pytest.mark.benchmark(group="encode 1000 x 100 B")
def test_encode_ours(benchmark):
    recs = data.records()
    out = benchmark(data.ours_encode, recs)
    assert batch.validate_batch(out).record_count == data.RECORDS_PER_BATCH


@pytest.mark.benchmark(group="encode 1000 x 100 B")
def test_encode_ours_from_values(benchmark):
    vals = data.values()
    out = benchmark(batch.build_batch_from_values, vals, timestamp_ms=data.TIMESTAMP_MS)
    assert batch.validate_batch(out).record_count == data.RECORDS_PER_BATCH


@pytest.mark.benchmark(group="encode 1000 x 100 B")
def test_encode_aiokafka(benchmark):
    vals = data.values()
    out = benchmark(data.aiokafka_encode, vals)
    assert batch.validate_batch(bytes(out)).record_count == data.RECORDS_PER_BATCH


@pytest.mark.benchmark(group="decode + CRC 1000 x 100 B")
def test_decode_columns_ours(benchmark, peer_batch):
    cols = benchmark(batch.decode_columns, peer_batch)
    assert cols.record_count == data.RECORDS_PER_BATCH


@pytest.mark.benchmark(group="decode + CRC 1000 x 100 B")
def test_iter_records_ours(benchmark, peer_batch):
    assert benchmark(data.ours_iter, peer_batch) == data.RECORDS_PER_BATCH


@pytest.mark.benchmark(group="decode + CRC 1000 x 100 B")
def test_decode_aiokafka(benchmark, peer_batch):
    assert benchmark(data.aiokafka_decode, peer_batch) == data.RECORDS_PER_BATCH


@pytest.mark.benchmark(group="decode region 10 x 1000")
def test_decode_columns_many_ours(benchmark):
    region = data.region(data.REGION_BATCHES)
    cols = benchmark(batch.decode_columns_many, region)
    assert cols.record_count == data.REGION_BATCHES * data.RECORDS_PER_BATCH


@pytest.mark.benchmark(group="segment CRC 16 MiB")
def test_scan_segment_ours(benchmark):
    seg = data.region(data.SEGMENT_BYTES // len(data.region(1)))
    assert benchmark(batch.scan_batches, seg).valid_end == len(seg)


@pytest.mark.benchmark(group="segment CRC 16 MiB")
def test_crc_segment_crc32c_package(benchmark):
    seg = data.region(data.SEGMENT_BYTES // len(data.region(1)))
    assert benchmark(crc32c.crc32c, seg) == crc32c.crc32c(seg)
