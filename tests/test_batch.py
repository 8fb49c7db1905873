"""Proves the record batch v2 codec (native and twin): batches built from records decode back to the
same records, headers and CRCs match independent readers (layout.parse_header, the crc32c package),
corrupt or truncated batches raise CorruptRecordError naming what and where, zstd is bounded, and the
native module and the twin produce identical bytes, results and error texts."""

from __future__ import annotations

import mmap
import struct

import crc32c as reference_crc
import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog import _accel
from kraftlog.engine.records import batch, compression
from kraftlog.engine.records import batch_pure as pure
from kraftlog.engine.records.layout import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    parse_header,
)
from kraftlog.errors import CorruptRecordError, UnsupportedCodecError

pytestmark = pytest.mark.twin

BASE_TS = 1_700_000_000_000
keys = st.none() | st.binary(max_size=24)
values = st.none() | st.binary(max_size=300)
header = st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=12))
headers = st.lists(header, max_size=3).map(tuple)
stamps = st.none() | st.integers(BASE_TS - 10**6, BASE_TS + 10**9)
records_st = st.lists(st.builds(batch.Record, keys, values, headers, stamps), min_size=1, max_size=25)
codecs = st.sampled_from([batch.CODEC_NONE, batch.CODEC_ZSTD])


def expected_records(records, base_offset, base_ts):
    """What decoding must return, derived from the inputs alone."""
    return [batch.Record(r.key, r.value, tuple(r.headers), base_ts if r.timestamp_ms is None else r.timestamp_ms,
                         base_offset + i) for i, r in enumerate(records)]


def fix_crc(buf: bytearray, pos: int = 0) -> bytearray:
    size = 12 + struct.unpack_from(">i", buf, pos + 8)[0]
    struct.pack_into(">I", buf, pos + CRC_OFFSET, reference_crc.crc32c(bytes(buf[pos + ATTRIBUTES_OFFSET:pos + size])))
    return buf


def columns_as_records(cols):
    """Records read back out of BatchColumns by slicing ``data`` (as a metadata decoder would)."""
    out = []
    for i in range(cols.record_count):
        out.append((int(cols.offsets[i]), int(cols.timestamps[i]), cols.key(i), cols.value(i)))
    return out


def test_the_expected_implementation_is_loaded():
    assert ("pure" if _accel.FORCE_PURE else "native") == batch.IMPLEMENTATION
    assert pure.IMPLEMENTATION == "pure"


@settings(max_examples=60, deadline=None)
@given(records_st, codecs, st.integers(0, 2**40), st.integers(-1, 2**20))
def test_round_trip_records_headers_and_header_fields(records, codec, base_offset, epoch):
    buf = batch.build_batch(records, base_offset=base_offset, partition_leader_epoch=epoch, codec=codec,
                            base_timestamp_ms=BASE_TS)
    head = parse_header(buf)  # the independent header reader
    stamps_given = [BASE_TS if r.timestamp_ms is None else r.timestamp_ms for r in records]
    assert (head.base_offset, head.partition_leader_epoch, head.record_count) == (base_offset, epoch, len(records))
    assert (head.last_offset_delta, head.base_timestamp, head.max_timestamp) == (len(records) - 1, BASE_TS, max(stamps_given))
    assert head.codec == codec and head.size_bytes == len(buf)
    assert head.crc == reference_crc.crc32c(buf[ATTRIBUTES_OFFSET:])
    assert batch.validate_batch(buf) == head
    want = expected_records(records, base_offset, BASE_TS)
    assert list(batch.iter_records(buf)) == want
    cols = batch.decode_columns(buf)
    assert columns_as_records(cols) == [(r.offset, r.timestamp_ms, r.key, r.value) for r in want]
    assert cols.header_counts.tolist() == [len(r.headers) for r in records]
    assert cols.batch_record_starts.tolist() == [0, len(records)]
    assert (cols.offsets.dtype, cols.key_lengths.dtype, cols.value_offsets.dtype) == (np.int64, np.int32, np.int32)
    if codec == batch.CODEC_NONE:
        assert cols.data is buf  # zero copy: offsets index the original buffer


@settings(max_examples=60, deadline=None)
@given(records_st, codecs, st.integers(0, 2**40), st.booleans(), st.booleans(),
       st.integers(-1, 2**31 - 1), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1))
def test_native_and_twin_build_identical_bytes(records, codec, base_offset, control, txn, pid, pepoch, seq):
    kwargs = dict(base_offset=base_offset, codec=codec, is_control=control, is_transactional=txn,
                  producer_id=pid, producer_epoch=pepoch, base_sequence=seq, base_timestamp_ms=BASE_TS)
    built = batch.build_batch(records, **kwargs)
    assert built == pure.build_batch(records, **kwargs)
    head = parse_header(built)
    assert head.is_control == control and head.is_transactional == txn
    assert (head.producer_id, head.producer_epoch, head.base_sequence) == (pid, pepoch, seq)
    vals = [r.value for r in records]
    del kwargs["base_timestamp_ms"]
    fast = batch.build_batch_from_values(vals, timestamp_ms=BASE_TS + 5, base_timestamp_ms=BASE_TS, **kwargs)
    assert fast == pure.build_batch_from_values(vals, timestamp_ms=BASE_TS + 5, base_timestamp_ms=BASE_TS, **kwargs)
    assert [(r.key, r.value, r.headers, r.timestamp_ms) for r in batch.iter_records(fast)] == \
        [(None, v, (), BASE_TS + 5) for v in vals]


def test_plain_tuples_and_default_timestamps():
    """Tuples build like Records; the first given timestamp is the base; others default to it."""
    buf = batch.build_batch([(b"k", b"v"), (None, b"w", (), 500), (b"x", None, [("h", b"1")])])
    got = list(batch.iter_records(buf))
    assert [r.timestamp_ms for r in got] == [500, 500, 500]
    assert got[2] == batch.Record(b"x", None, (("h", b"1"),), 500, 2)
    before = pure.now_ms()
    now_built = parse_header(batch.build_batch_from_values([b"a"]))
    assert before <= now_built.base_timestamp <= pure.now_ms()


def test_buffers_other_than_bytes_are_accepted_as_keys_and_values():
    records = [(bytearray(b"key"), memoryview(b"value")), (None, bytearray(b""))]
    buf = batch.build_batch(records, base_timestamp_ms=1)
    assert [(r.key, r.value) for r in batch.iter_records(buf)] == [(b"key", b"value"), (None, b"")]
    assert buf == pure.build_batch(records, base_timestamp_ms=1)


@pytest.mark.parametrize("impl", [batch, pure], ids=["public", "pure"])
def test_bad_build_arguments_are_programmer_errors(impl):
    with pytest.raises(ValueError):
        impl.build_batch([])
    with pytest.raises(ValueError):
        impl.build_batch([(None, b"x")], codec=5)
    with pytest.raises(OverflowError):
        impl.build_batch([(None, b"x")], producer_epoch=1 << 15)
    with pytest.raises(OverflowError):
        impl.build_batch([(None, b"x", (), 1 << 63)])
    with pytest.raises(OverflowError):
        impl.build_batch([(None, b"x", (), -(1 << 62)), (None, b"y", (), 1 << 62)])
    with pytest.raises(TypeError):
        impl.build_batch([b"not a tuple"])
    with pytest.raises(TypeError):
        impl.build_batch([(None, "text is not bytes")])
    with pytest.raises(ValueError):
        impl.build_batch([(None, b"x", [(None, b"null header key")])])
    with pytest.raises(TypeError):
        impl.build_batch_from_values([b"x"], timestamp_ms=1.5)


def test_control_batches_and_keys():
    buf = batch.build_control_batch(batch.CONTROL_SNAPSHOT_HEADER, b"\x00\x00payload", base_offset=7,
                                    partition_leader_epoch=3, timestamp_ms=99)
    head = batch.validate_batch(buf)
    assert head.is_control and head.attributes & CONTROL_BIT and head.base_offset == 7
    (rec,) = batch.iter_records(buf)
    assert rec.key == struct.pack(">hh", 0, 3) and rec.value == b"\x00\x00payload" and rec.offset == 7
    assert batch.parse_control_record_key(rec.key) == (batch.CONTROL_SNAPSHOT_HEADER, 0)
    assert batch.control_record_key(batch.CONTROL_KRAFT_VOTERS, 1) == b"\x00\x01\x00\x06"
    cols = batch.decode_columns(buf)
    assert cols.batch_attributes[0] & CONTROL_BIT
    assert (batch.CONTROL_ABORT, batch.CONTROL_COMMIT, batch.CONTROL_LEADER_CHANGE, batch.CONTROL_SNAPSHOT_FOOTER,
            batch.CONTROL_KRAFT_VERSION) == (0, 1, 2, 4, 5)
    for bad in (None, b"\x00\x00", b"\xff\xff\x00\x03"):
        with pytest.raises(CorruptRecordError):
            batch.parse_control_record_key(bad)


def test_log_append_time_batches_report_max_timestamp():
    """With the timestamp-type bit set, every record's timestamp is the batch's maxTimestamp (Kafka)."""
    buf = bytearray(batch.build_batch([(None, b"a", (), 10), (None, b"b", (), 20)]))
    attrs = struct.unpack_from(">h", buf, ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_BIT)
    struct.pack_into(">q", buf, 35, 777)
    fix_crc(buf)
    for impl in (batch, pure):
        assert [r.timestamp_ms for r in impl.iter_records(buf)] == [777, 777]
        assert impl.decode_columns(buf).timestamps.tolist() == [777, 777]


def test_transactional_bit():
    buf = batch.build_batch([(None, b"a")], is_transactional=True, producer_id=5, producer_epoch=1, base_sequence=0)
    assert parse_header(buf).attributes & TRANSACTIONAL_BIT


def problem(fn, *args, **kwargs):
    with pytest.raises(CorruptRecordError) as info:
        fn(*args, **kwargs)
    return info.value.reason, info.value.position


@pytest.mark.parametrize("mutate, reason_start", [
    (lambda b: b[:40], "truncated batch header"),
    (lambda b: b[:-1], "truncated batch"),
    (lambda b: b[:16] + b"\x01" + b[17:], "unsupported batch magic 1"),
    (lambda b: b[:8] + struct.pack(">i", 10) + b[12:], "batch length 10 is smaller"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "CRC mismatch"),
])
def test_corrupt_headers_and_crc_raise_with_position_and_path(mutate, reason_start):
    good = batch.build_batch([(b"k", b"v" * 50), (None, b"w")], base_timestamp_ms=1)
    bad = b"xyz" + mutate(good)
    for impl in (batch, pure):
        reason, position = problem(impl.validate_batch, bad, 3)
        assert reason.startswith(reason_start) and position == 3
        with pytest.raises(CorruptRecordError) as info:
            impl.validate_batch(bad, 3, path="/logs/00000000000000000000.log")
        assert "/logs/00000000000000000000.log" in str(info.value) and info.value.path.endswith(".log")
        for fn in (impl.iter_records, impl.decode_columns):
            assert problem(fn, bad, 3) == (reason, 3)
    assert problem(batch.validate_batch, bad, 3) == problem(pure.validate_batch, bad, 3)


def rebuild_records(records_bytes: bytes, count: int, last_delta: int | None = None) -> bytearray:
    """An uncompressed batch around hand-made record bytes, with a correct CRC."""
    buf = bytearray(batch.build_batch_from_values([b"x"], base_timestamp_ms=1000))
    buf[HEADER_SIZE:] = records_bytes
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">i", buf, 23, count - 1 if last_delta is None else last_delta)
    struct.pack_into(">i", buf, 57, count)
    return fix_crc(buf)


def varint(v: int) -> bytes:
    raw = (v << 1) ^ (v >> 63)
    raw &= (1 << 64) - 1
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    return bytes(out + bytes([raw]))


def record_bytes(body: bytes) -> bytes:
    return varint(len(body)) + body


@pytest.mark.parametrize("records, count, expect", [
    # body: attributes, tsDelta, offsetDelta, keyLen, key, valueLen, value, headerCount
    (record_bytes(b"\x00\x00\x00\x01\x02v\x00"), 1, None),
    (record_bytes(b"\x00\x00\x00\x01\x02v\x00") + b"\x00", 1, "1 bytes after the last record"),
    (record_bytes(b"\x00\x00\x04\x01\x02v\x00"), 1, "record 0: offset delta 2 outside 0..0"),
    (record_bytes(b"\x00\x00\x00\x05\x02v\x00"), 1, "record 0: key length -3 out of range"),
    (record_bytes(b"\x00\x00\x00\x01\x08v\x00"), 1, "record 0: value length 4 runs past the end of the record"),
    (record_bytes(b"\x00\x00\x00\x01\x02v\x00\x00"), 1, "record 0: length 8 but its fields take 7 bytes"),
    (record_bytes(b"\x00\x00\x00\x01\x02v\x03"), 1, "record 0: header count -2 out of range"),
    (record_bytes(b"\x00\x00\x00\x01\x02v\x02\x01\x00"), 1, "record 0: header key length -1 out of range"),
    (record_bytes(b"\x00\x00\x00\x01\x02v\x02\x02\xff\x01"), 1, "record 0: header key is not valid UTF-8"),
    (record_bytes(b"\x00\x00\x00\x01\x02v\x00") * 2, 3, "record count 3 cannot fit in 16 bytes of records"),
    (record_bytes(b"\x00\x00\x00\x01\x02v\x00") + b"\x00" * 6, 2, "record 1: attributes byte runs past the end of the record"),
    (record_bytes(b"\x00\x00\x00\x01\x02v\x00") + b"\x7e" + b"\x00" * 6, 2,
     "record 1: length 63 runs past the end of the records (6 bytes left)"),
    (record_bytes(b"\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00\x01\x00\x00"), 1, "record 0: malformed timestamp delta varint"),
    (record_bytes(b"\x00\xfe" + b"\xff" * 8 + b"\x01\x00\x01\x00\x00"), 1, "record 0: timestamp overflows int64"),
    (b"\xff\xff\xff\xff\x0f" + b"\x00" * 6, 1, "record 0: length -2147483648 out of range"),
    (record_bytes(b"\x00\x00\xff\xff\xff\xff\x0f\x01\x01\x00"), 1, "record 0: offset delta -2147483648 outside 0..0"),
])
def test_record_level_corruption_is_named(records, count, expect):
    """Structurally broken records inside a batch whose CRC is right (a buggy writer) are refused with
    the record's index and what is wrong; the same text from both implementations."""
    buf = rebuild_records(records, count)
    for impl in (batch, pure):
        if expect is None:
            assert [r.value for r in impl.iter_records(buf)] == [b"v"]
            continue
        assert problem(impl.iter_records, buf) == (expect, 0)
        if "UTF-8" in expect:  # columns do not decode header keys
            assert impl.decode_columns(buf).header_counts.tolist() == [1]
        else:
            assert problem(impl.decode_columns, buf) == (expect, 0)
            assert problem(impl.decode_columns_many, buf) == (expect, 0)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_codecs_that_do_not_exist_are_their_own_error_not_corrupt_records(codec):
    """Codec 5-7 in a CRC-valid batch: UnsupportedCodecError naming the codec and the batch's
    position, from every decoder (the header itself is fine: recovery keeps the batch)."""
    good = batch.build_batch_from_values([b"x"], base_timestamp_ms=1)
    buf = bytearray(good)
    struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, codec)
    fix_crc(buf)
    region = good + bytes(buf)
    for impl in (batch, pure):
        assert impl.validate_batch(buf).codec == codec
        for decode, args in ((impl.iter_records, (region, len(good))), (impl.decode_columns, (region, len(good))),
                             (impl.decode_columns_many, (region,))):
            with pytest.raises(UnsupportedCodecError) as info:
                decode(*args)
            assert not isinstance(info.value, CorruptRecordError)
            assert (info.value.codec, info.value.position) == (codec, len(good))
            assert f"compression codec {codec} is not supported" in str(info.value)


@pytest.mark.parametrize("codec", [batch.CODEC_GZIP, batch.CODEC_SNAPPY, batch.CODEC_LZ4, batch.CODEC_ZSTD])
def test_plain_records_labelled_compressed_are_corrupt(codec):
    """An uncompressed records section whose attributes claim a codec does not inflate: corrupt."""
    buf = bytearray(batch.build_batch_from_values([b"x" * 40], base_timestamp_ms=1))
    struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, codec)
    fix_crc(buf)
    for impl in (batch, pure):
        reason, position = problem(impl.iter_records, buf)
        assert position == 0 and batch.CODEC_NAMES[codec] in reason


def zstd_batch(frame: bytes, count: int = 1) -> bytearray:
    buf = bytearray(batch.build_batch_from_values([b"x"] * count, codec=batch.CODEC_ZSTD, base_timestamp_ms=1))
    buf[HEADER_SIZE:] = frame
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    return fix_crc(buf)


def test_zstd_frames_without_content_size_decode():
    """Java's zstd stream writes no content size; such batches decode within the output bound."""
    plain = batch.build_batch_from_values([b"abc", b"de"], base_timestamp_ms=1)[HEADER_SIZE:]
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(plain)
    assert zstandard.frame_content_size(frame) == -1
    for impl in (batch, pure):
        assert [r.value for r in impl.iter_records(zstd_batch(frame, 2))] == [b"abc", b"de"]


def test_zstd_decompression_bomb_is_refused_from_its_block_headers():
    big = compression.MAX_INFLATED_BYTES + 1024
    for content_size in (True, False):
        frame = zstandard.ZstdCompressor(write_content_size=content_size).compress(b"\x00" * big)
        assert len(frame) < 10_000
        for impl in (batch, pure):
            reason, _ = problem(impl.iter_records, zstd_batch(frame))
            assert f"{compression.MAX_INFLATED_BYTES}-byte limit" in reason


def test_zstd_frame_lying_about_its_content_size_is_refused():
    plain = batch.build_batch_from_values([b"abc"], base_timestamp_ms=1)[HEADER_SIZE:]
    frame = bytearray(zstandard.ZstdCompressor().compress(plain))
    params = zstandard.get_frame_parameters(frame)
    assert params.content_size == len(plain) and frame[4] & 0xC0 == 0  # 1-byte content size after the window byte
    frame[4 + 1 + (0 if frame[4] & 0x20 else 1)] = 0xFF  # claims 255 bytes, blocks hold 33 at most
    for impl in (batch, pure):
        reason, _ = problem(impl.iter_records, zstd_batch(bytes(frame)))
        assert "declares 255 bytes" in reason


@pytest.mark.parametrize("mangle, reason_part", [
    (lambda f: f + b"junk", "4 bytes after the zstd frame"),
    (lambda f: f[:-2], "zstd frame is truncated"),
    (lambda f: b"\x00" + f[1:], "do not start with a zstd frame"),
])
def test_bad_zstd_sections_are_corrupt(mangle, reason_part):
    plain = batch.build_batch_from_values([b"abc"], base_timestamp_ms=1)[HEADER_SIZE:]
    frame = zstandard.ZstdCompressor().compress(plain)
    for impl in (batch, pure):
        reason, _ = problem(impl.decode_columns, zstd_batch(mangle(frame)))
        assert reason_part in reason


def segment(n_batches: int = 5, codec_of=lambda i: batch.CODEC_NONE) -> tuple[bytes, list]:
    parts, want, offset = [], [], 0
    for i in range(n_batches):
        vals = [bytes([i]) * (j + 1) for j in range(i + 2)]
        parts.append(batch.build_batch_from_values(vals, base_offset=offset, codec=codec_of(i),
                                                   partition_leader_epoch=i, timestamp_ms=BASE_TS + i))
        want += [(offset + j, BASE_TS + i, None, v) for j, v in enumerate(vals)]
        offset += len(vals)
    return b"".join(parts), want


def assert_same(a, b):
    assert type(a) is type(b) and len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y)
        else:
            assert (bytes(x) if isinstance(x, bytes | bytearray | memoryview) else x) == \
                (bytes(y) if isinstance(y, bytes | bytearray | memoryview) else y)


@pytest.mark.parametrize("codec_of", [lambda i: batch.CODEC_NONE, lambda i: batch.CODEC_ZSTD * (i % 2)],
                         ids=["plain", "mixed"])
def test_decode_columns_many_concatenates_every_batch(codec_of):
    seg, want = segment(5, codec_of)
    prefix = b"\x00" * 13  # a region that does not start at 0
    buf = prefix + seg
    cols = batch.decode_columns_many(buf, len(prefix))
    assert columns_as_records(cols) == want
    assert cols.batch_record_starts.tolist() == [0, 2, 5, 9, 14, 20]
    assert cols.batch_leader_epochs.tolist() == [0, 1, 2, 3, 4]
    scan = batch.scan_batches(buf, len(prefix))
    assert cols.batch_positions.tolist() == scan.positions.tolist()
    if codec_of(1) == batch.CODEC_NONE:
        assert cols.data is buf
    assert_same(cols, pure.decode_columns_many(buf, len(prefix)))
    empty = batch.decode_columns_many(buf, len(prefix), len(prefix))
    assert empty.record_count == 0 and empty.batch_record_starts.tolist() == [0]


def test_decode_columns_many_refuses_a_partial_or_corrupt_batch():
    seg, _ = segment(3)
    second = batch.scan_batches(seg).positions[1]
    for impl in (batch, pure):
        assert problem(impl.decode_columns_many, seg, 0, len(seg) - 1)[1] == batch.scan_batches(seg).positions[2]
        bad = bytearray(seg)
        bad[second + 70] ^= 0xFF
        assert problem(impl.decode_columns_many, bytes(bad))[0].startswith("CRC mismatch")
        assert problem(impl.decode_columns_many, bytes(bad))[1] == second


def test_scan_batches_reports_valid_prefix_and_first_problem():
    seg, want = segment(4)
    full = batch.scan_batches(seg)
    assert full.error_reason is None and full.error_position is None and full.valid_end == len(seg)
    assert full.batch_count == 4
    assert full.base_offsets.tolist() == [0, 2, 5, 9] and full.last_offsets.tolist() == [1, 4, 8, 13]
    assert full.partition_leader_epochs.tolist() == [0, 1, 2, 3]
    assert full.max_timestamps.tolist() == [BASE_TS + i for i in range(4)]
    assert int(full.size_bytes.sum()) == len(seg) and full.record_counts.tolist() == [2, 3, 4, 5]
    torn = batch.scan_batches(seg + seg[:70])  # more than a header, less than a batch
    assert (torn.valid_end, torn.error_position) == (len(seg), len(seg))
    assert torn.error_reason.startswith("truncated batch:")
    bad = bytearray(seg)
    bad[full.positions[2] + 65] ^= 1
    broken = batch.scan_batches(bytes(bad))
    assert broken.batch_count == 2 and broken.valid_end == full.positions[2]
    assert broken.error_reason.startswith("CRC mismatch")
    assert batch.scan_batches(bytes(bad), verify_crc=False).error_reason is None
    limited = batch.scan_batches(seg, int(full.positions[1]), int(full.positions[3]))
    assert limited.positions.tolist() == full.positions[1:3].tolist() and limited.error_reason is None
    for args in [(seg + seg[:70],), (bytes(bad),), (bytes(bad), 0, None, False), (seg, 5)]:
        kwargs = {"verify_crc": args[3]} if len(args) > 3 else {}
        assert_same(batch.scan_batches(*args[:3], **kwargs), pure.scan_batches(*args[:3], **kwargs))


def test_scan_batches_grows_past_its_first_capacity():
    """More batches than the native scanner's first array capacity (1024)."""
    one = batch.build_batch_from_values([b"v"], timestamp_ms=1)
    seg = b"".join(batch.build_batch_from_values([b"v"], base_offset=i, timestamp_ms=1) for i in range(2500))
    scan = batch.scan_batches(seg)
    assert scan.batch_count == 2500 and scan.base_offsets.tolist() == list(range(2500))
    assert scan.valid_end == len(seg) == 2500 * len(one)


def test_bad_regions_and_positions_are_programmer_errors():
    seg, _ = segment(2)
    for impl in (batch, pure):
        with pytest.raises(ValueError):
            impl.scan_batches(seg, 0, len(seg) + 1)
        with pytest.raises(ValueError):
            impl.scan_batches(seg, 10, 5)
        with pytest.raises(ValueError):
            impl.validate_batch(seg, -1)
        with pytest.raises(ValueError):
            impl.decode_columns(seg, len(seg) + 1)


def test_decoding_from_an_mmap_keeps_it_as_data(tmp_path):
    seg, want = segment(3)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(seg)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        cols = batch.decode_columns_many(mm)
        assert cols.data is mm and columns_as_records(cols) == want
        first = batch.decode_columns(mm, 0)
        assert columns_as_records(first) == want[:2]
        assert batch.scan_batches(mm).valid_end == len(seg)
        assert [r.value for r in batch.iter_records(mm, int(batch.scan_batches(mm).positions[1]))] == \
            [w[3] for w in want[2:5]]
        del cols, first


def test_iterating_keeps_the_batch_alive_and_is_lazy():
    buf = bytearray(batch.build_batch_from_values([b"a", b"b"], timestamp_ms=3))
    it = batch.iter_records(buf)
    first = next(it)
    assert first == batch.Record(None, b"a", (), 3, 0)
    assert list(it) == [batch.Record(None, b"b", (), 3, 1)]
    buf.extend(b"x")  # resizable again once the iterator is exhausted
