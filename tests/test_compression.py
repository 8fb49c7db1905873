"""Proves every Kafka codec round-trips through both batch implementations and the columnar metadata
decoder, and that each one's inflation is bounded: a records section that would inflate past
MAX_INFLATED_BYTES is refused as a CorruptRecordError naming the limit (before the output is
allocated, for the codecs whose headers say their size), and so are truncated or padded sections.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.engine.records import batch, compression, metadata_columns_pure
from kraftlog.engine.records import batch_pure as pure
from kraftlog.engine.records import metadata_columns as mc
from kraftlog.engine.records.layout import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
)
from kraftlog.engine.records.metadata import encode_record
from kraftlog.errors import CorruptRecordError

pytestmark = pytest.mark.twin

CODECS = [batch.CODEC_GZIP, batch.CODEC_SNAPPY, batch.CODEC_LZ4, batch.CODEC_ZSTD]
IMPLS = [batch, pure]


def with_section(codec: int, section: bytes, count: int = 1) -> bytes:
    """A batch of ``count`` records whose records section is ``section`` under ``codec``."""
    out = bytearray(batch.build_batch_from_values([b"x"] * count, base_timestamp_ms=1)[:HEADER_SIZE]) + section
    struct.pack_into(">h", out, ATTRIBUTES_OFFSET, codec)
    struct.pack_into(">i", out, LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


def reason_of(fn, *args) -> str:
    with pytest.raises(CorruptRecordError) as info:
        fn(*args)
    return info.value.reason


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.none() | st.binary(max_size=3000), min_size=1, max_size=30))
def test_every_codec_round_trips_through_both_implementations(codec, values):
    for build in IMPLS:
        buf = build.build_batch_from_values(values, codec=codec, base_timestamp_ms=7)
        assert batch.validate_batch(buf).codec == codec
        for impl in IMPLS:
            assert [r.value for r in impl.iter_records(buf)] == values
            cols = impl.decode_columns_many(buf + buf)
            assert [cols.value(i) for i in range(cols.record_count)] == values * 2


@pytest.mark.parametrize("codec", CODECS)
def test_native_and_twin_write_the_same_compressed_bytes(codec):
    values = [b"value-%d" % i * 30 for i in range(50)]
    assert (batch.build_batch_from_values(values, codec=codec, base_timestamp_ms=1)
            == pure.build_batch_from_values(values, codec=codec, base_timestamp_ms=1))


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_metadata_batches_decode_into_the_same_columns(codec):
    """The columnar decoder (native and twin) inflates each batch once and gives the same rows as
    for the uncompressed batch."""
    values = [encode_record("FeatureLevelRecord", 0, {"Name": f"feature-{i}", "FeatureLevel": i}) for i in range(40)]
    plain = batch.build_batch_from_values(values, base_timestamp_ms=1)
    packed = batch.build_batch_from_values(values, base_offset=40, codec=codec, base_timestamp_ms=1)
    for impl in (mc.implementation_module, metadata_columns_pure):
        cols = mc.decode_region_with(impl, plain + packed)
        assert cols.offsets.tolist() == list(range(80))
        assert cols.features.feature_level.tolist() == list(range(40)) * 2
        assert [bytes(cols.value(i)) for i in range(80)] == values * 2


def test_a_gzip_bomb_is_refused_at_the_limit():
    """64 MiB + 1 KiB of zeros gzip to about 64 KiB: refused with the limit named, never whole."""
    deflater = zlib.compressobj(6, zlib.DEFLATED, 31)
    section = deflater.compress(b"\0" * (compression.MAX_INFLATED_BYTES + 1024)) + deflater.flush()
    assert len(section) < 100_000
    buf = with_section(batch.CODEC_GZIP, section)
    for impl in IMPLS:
        assert f"{compression.MAX_INFLATED_BYTES}-byte limit" in reason_of(impl.iter_records, buf)
    with pytest.raises(CorruptRecordError, match="limit"):
        mc.decode_metadata_region(buf)


def test_a_snappy_length_prefix_past_the_limit_is_refused_before_inflating():
    """A raw snappy block says its size first: one claiming more than the limit is refused on
    that alone (here a 6-byte block claiming 4 GiB)."""
    lying = b"\xff\xff\xff\xff\x0f\x00"
    for section in (lying, b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, len(lying)) + lying):
        buf = with_section(batch.CODEC_SNAPPY, section)
        for impl in IMPLS:
            assert "limit" in reason_of(impl.iter_records, buf)


@pytest.mark.parametrize("codec", CODECS)
def test_the_limit_holds_for_every_codec_on_every_path(codec, monkeypatch):
    """With the limit lowered below a batch's records, every decoder refuses it, naming the codec."""
    values = [b"y" * 500] * 20
    buf = batch.build_batch_from_values(values, codec=codec, base_timestamp_ms=1)
    monkeypatch.setattr(compression, "MAX_INFLATED_BYTES", 2000)
    name = batch.CODEC_NAMES[codec]
    for impl in IMPLS:
        for decode in (impl.iter_records, impl.decode_columns, impl.decode_columns_many):
            reason = reason_of(decode, buf)
            assert name in reason and "2000-byte limit" in reason, reason
    with pytest.raises(CorruptRecordError, match=f"{name} records would decompress past the 2000-byte limit"):
        mc.decode_metadata_region(buf)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("mangle", [lambda s: s[:-3], lambda s: s + b"junk", lambda s: s[:len(s) // 2]],
                         ids=["cut3", "padded", "halved"])
def test_cut_or_padded_sections_are_corrupt_not_crashes(codec, mangle):
    values = [b"record %d " % i * 40 for i in range(30)]
    good = batch.build_batch_from_values(values, codec=codec, base_timestamp_ms=1)
    bad = with_section(codec, mangle(good[HEADER_SIZE:]), len(values))
    for impl in IMPLS:
        reason_of(impl.iter_records, bad)
        reason_of(impl.decode_columns_many, bad)


def test_concatenated_gzip_members_decode_as_javas_reader_does():
    """Java's GZIPInputStream reads a section of several gzip members as one stream: so do we."""
    values = [b"a" * 10, b"b" * 20]
    records = batch.build_batch_from_values(values, base_timestamp_ms=1)[HEADER_SIZE:]
    half = len(records) // 2
    members = []
    for part in (records[:half], records[half:]):
        deflater = zlib.compressobj(6, zlib.DEFLATED, 31)
        members.append(deflater.compress(part) + deflater.flush())
    section = b"".join(members)
    for impl in IMPLS:
        assert [r.value for r in impl.iter_records(with_section(batch.CODEC_GZIP, section, 2))] == values


def test_lz4_frame_with_block_checksums_and_content_size_decodes():
    """Frame options other writers use (python-lz4: content size, block checksums) are read."""
    lz4_frame = pytest.importorskip("lz4.frame")
    values = [b"c" * 100] * 10
    records = batch.build_batch_from_values(values, base_timestamp_ms=1)[HEADER_SIZE:]
    section = lz4_frame.compress(records, store_size=True, block_checksum=True, content_checksum=True)
    for impl in IMPLS:
        assert [r.value for r in impl.iter_records(with_section(batch.CODEC_LZ4, section, 10))] == values
    assert bytes(cramjam.lz4.decompress(section)) == records
