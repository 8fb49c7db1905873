"""Proves kraftlog's record batches interoperate with independent Kafka client codecs, record for
record: batches kraftlog writes (plain, gzip, snappy, lz4, zstd) are CRC-validated and read by
aiokafka (its C extension), kafka-python and kio's record reader; batches aiokafka's and
kafka-python's builders write with every codec are read by kraftlog (native and twin), as are
raw (unframed) snappy batches, which librdkafka may write.

kio (0.6) has a record-batch reader (kio.records.readers.read_batch) but no decompression: it reads
the records section as plain records, so it is checked on uncompressed batches only, and a test
below shows it cannot read a zstd batch. It also truncates record timestamps to whole seconds and
returns header keys as bytes, so those are compared in its terms.
"""

from __future__ import annotations

import struct

import cramjam
import crc32c
import pytest
from aiokafka.record import _crecords
from aiokafka.record import default_records as aiokafka_records
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record import default_records as kafka_records
from kio.records.readers import read_batch as kio_read_batch

from kraftlog.engine.records import batch
from kraftlog.engine.records import batch_pure as pure
from kraftlog.engine.records.layout import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
)

pytestmark = pytest.mark.twin

BASE_TS = 1_700_000_000_000
record = st.tuples(st.none() | st.binary(max_size=30), st.none() | st.binary(max_size=200),
                   st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)), max_size=2),
                   st.integers(BASE_TS, BASE_TS + 10**8))
records_st = st.lists(record, min_size=1, max_size=20)
CODECS = [batch.CODEC_NONE, batch.CODEC_GZIP, batch.CODEC_SNAPPY, batch.CODEC_LZ4, batch.CODEC_ZSTD]


def test_aiokafka_peer_is_its_c_extension():
    """The aiokafka reader/builder used here is the Cython one (not its pure-Python fallback)."""
    assert aiokafka_records.DefaultRecordBatch is _crecords.DefaultRecordBatch
    assert aiokafka_records.DefaultRecordBatchBuilder is _crecords.DefaultRecordBatchBuilder


def ours(records, codec, base_offset=0):
    return batch.build_batch([batch.Record(k, v, tuple(h), ts) for k, v, h, ts in records],
                             base_offset=base_offset, codec=codec)


def expected(records, base_offset=0):
    return [(base_offset + i, ts, k, v, [tuple(x) for x in h]) for i, (k, v, h, ts) in enumerate(records)]


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=40, deadline=None)
@given(records=records_st, base_offset=st.integers(0, 2**40))
def test_aiokafka_and_kafka_python_read_our_batches(codec, records, base_offset):
    buf = ours(records, codec, base_offset)
    for reader in (aiokafka_records.DefaultRecordBatch, kafka_records.DefaultRecordBatch):
        theirs = reader(bytearray(buf))
        assert theirs.validate_crc()
        assert theirs.compression_type == codec and theirs.next_offset == base_offset + len(records)
        got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
        assert got == expected(records, base_offset)


@settings(max_examples=40, deadline=None)
@given(records=records_st)
def test_kio_reads_our_uncompressed_batches(records):
    buf = ours(records, batch.CODEC_NONE)
    parsed, size = kio_read_batch(buf, 0)  # raises on a CRC mismatch
    assert size == len(buf) and parsed.crc == batch.validate_batch(buf).crc
    got = [(r.offset, int(r.timestamp.timestamp()), r.key, r.value,
            [(h.key, h.value) for h in r.headers]) for r in parsed.records]
    assert got == [(o, ts // 1000, k, v, [(hk.encode(), hv) for hk, hv in h])
                   for o, ts, k, v, h in expected(records)]


def test_kio_has_no_decompression():
    """kio reads a zstd batch's frame as if it were plain records, so it fails (or misreads)."""
    buf = ours([(None, b"v" * 100, [], BASE_TS)] * 3, batch.CODEC_ZSTD)
    try:
        parsed, _ = kio_read_batch(buf, 0)
    except Exception:  # noqa: BLE001 - any failure shows it cannot read zstd
        return
    assert [r.value for r in parsed.records] != [b"v" * 100] * 3


def aiokafka_build(records, codec):
    builder = aiokafka_records.DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 30)
    for i, (k, v, h, ts) in enumerate(records):
        builder.append(i, ts, k, v, list(h))
    return bytes(builder.build())


def kafka_python_build(records, codec):
    builder = kafka_records.DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 30)
    for i, (k, v, h, ts) in enumerate(records):
        builder.append(i, ts, k, v, list(h))
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("build", [aiokafka_build, kafka_python_build], ids=["aiokafka", "kafka-python"])
@settings(max_examples=40, deadline=None)
@given(records=records_st)
def test_we_read_batches_built_by_aiokafka_and_kafka_python(build, codec, records):
    # kafka-python stores a batch uncompressed when compression would not shrink it: one
    # compressible record makes sure the compressed cases really are compressed.
    records = [*records, (None, b"z" * 2000, [], BASE_TS)]
    buf = build(records, codec)
    want = expected(records)
    for impl in (batch, pure):
        head = impl.validate_batch(buf)
        assert head.codec == codec and head.record_count == len(records)
        got = [(r.offset, r.timestamp_ms, r.key, r.value, list(r.headers)) for r in impl.iter_records(buf)]
        assert got == want
        cols = impl.decode_columns(buf)
        assert [(int(cols.offsets[i]), int(cols.timestamps[i]), cols.key(i), cols.value(i))
                for i in range(cols.record_count)] == [w[:4] for w in want]
        assert impl.scan_batches(buf + buf).batch_count == 2


def test_kafka_python_reads_our_control_records():
    """kafka-python turns records of a control batch into ControlRecords with Kafka's key layout."""
    buf = batch.build_control_batch(batch.CONTROL_LEADER_CHANGE, b"\x00\x00\x00", base_offset=4, timestamp_ms=BASE_TS)
    theirs = kafka_records.DefaultRecordBatch(bytearray(buf))
    assert theirs.validate_crc() and theirs.is_control_batch
    (rec,) = list(theirs)
    assert isinstance(rec, kafka_records.ControlRecord)
    assert (rec.version, rec.type, rec.offset) == (0, batch.CONTROL_LEADER_CHANGE, 4)
    assert aiokafka_records.DefaultRecordBatch(bytearray(buf)).is_control_batch


def test_their_multi_batch_stream_scans_and_decodes():
    """A region of batches written by both peers with every codec, back to back, as a segment
    would hold them, decodes in one pass (native and twin)."""
    recs = [(None, b"value-%d" % i * 20, [], BASE_TS + i) for i in range(10)]
    region = b"".join(build(recs, codec) for codec in CODECS for build in (aiokafka_build, kafka_python_build))
    for impl in (batch, pure):
        scan = impl.scan_batches(region)
        assert scan.batch_count == 2 * len(CODECS) and scan.error_reason is None
        assert sorted(set((scan.attributes & 7).tolist())) == CODECS
        cols = impl.decode_columns_many(region)
        assert [cols.value(i) for i in range(cols.record_count)] == [r[1] for r in recs] * 2 * len(CODECS)


def raw_snappy_batch(records) -> bytes:
    """A batch whose records section is one raw snappy block (no xerial framing), CRC recomputed."""
    plain = bytearray(ours(records, batch.CODEC_NONE))
    section = bytes(cramjam.snappy.compress_raw(bytes(plain[HEADER_SIZE:])))
    out = plain[:HEADER_SIZE] + section
    struct.pack_into(">h", out, ATTRIBUTES_OFFSET, batch.CODEC_SNAPPY)
    struct.pack_into(">i", out, LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


@settings(max_examples=30, deadline=None)
@given(records=records_st)
def test_raw_snappy_batches_decode_as_librdkafka_writes_them(records):
    """Raw snappy (librdkafka's choice) decodes like xerial-framed snappy; aiokafka agrees."""
    buf = raw_snappy_batch(records)
    assert [r.value for r in aiokafka_records.DefaultRecordBatch(bytearray(buf))] == [r[1] for r in records]
    for impl in (batch, pure):
        got = [(r.offset, r.timestamp_ms, r.key, r.value, list(r.headers)) for r in impl.iter_records(buf)]
        assert got == expected(records)
        assert impl.decode_columns(buf).record_count == len(records)


def test_our_snappy_is_xerial_framed_and_lz4_has_independent_blocks():
    """What Kafka's Java readers need: xerial framing for snappy (SnappyInputStream), and an LZ4
    frame of independent blocks without a content checksum (KafkaLZ4BlockInputStream)."""
    values = [b"v" * 300] * 5
    snappy = batch.build_batch_from_values(values, codec=batch.CODEC_SNAPPY)
    assert snappy[HEADER_SIZE:HEADER_SIZE + 16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    lz4 = batch.build_batch_from_values(values, codec=batch.CODEC_LZ4)
    magic, flg = struct.unpack_from("<IB", lz4, HEADER_SIZE)
    assert magic == 0x184D2204 and flg & 0xC0 == 0x40 and flg & 0x20 and not flg & 0x04
