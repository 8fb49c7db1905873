"""Proves the batch decoders (native and twin) survive hostile bytes: random buffers and mutated valid
batches (bit flips, overwrites, truncation, insertion; with the CRC left stale and with it fixed up so
the record walker sees the damage; plain and zstd) only ever raise CorruptRecordError, finish in
bounded time, return records consistent with the bytes when they succeed, and that the native module
and the twin give the same result or the same error text and position for every input."""

from __future__ import annotations

import struct

import crc32c as reference_crc
import numpy as np
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from kraftlog.engine.records import batch
from kraftlog.engine.records import batch_pure as pure
from kraftlog.engine.records.layout import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE
from kraftlog.errors import CorruptRecordError, UnsupportedCodecError

pytestmark = pytest.mark.twin

FUZZ = settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def normalize(result):
    if isinstance(result, tuple) and hasattr(result, "_fields"):  # BatchHeader, BatchColumns, ScanResult
        return tuple(normalize(x) for x in result)
    if isinstance(result, np.ndarray):
        return (str(result.dtype), result.tolist())
    if isinstance(result, bytes | bytearray | memoryview):
        return bytes(result)
    return result


def outcome(fn, *args):
    """("ok", normalized result), ("corrupt", reason, position) or ("codec", reason, position) for a
    codec that does not exist; any other exception fails."""
    try:
        result = fn(*args)
        if fn.__name__ == "iter_records":
            result = [tuple(r) for r in result]
    except CorruptRecordError as exc:
        return ("corrupt", exc.reason, exc.position)
    except UnsupportedCodecError as exc:
        return ("codec", exc.reason, exc.position)
    return ("ok", normalize(result))


def check_consistent(buf, pos, records, cols):
    """A successful decode must describe the bytes: counts, offset range, iterator == columns."""
    head = pure.validate_batch(buf, pos)
    assert len(records) == cols.record_count == head.record_count
    data_len = len(cols.data)
    for i, rec in enumerate(records):
        assert head.base_offset <= rec[4] <= head.last_offset
        for off, n in ((cols.key_offsets[i], cols.key_lengths[i]), (cols.value_offsets[i], cols.value_lengths[i])):
            assert n == -1 or 0 <= off <= off + n <= data_len
        assert (int(cols.offsets[i]), int(cols.timestamps[i]), cols.key(i), cols.value(i)) == \
            (rec[4], rec[3], rec[0], rec[1])


def compare_all(buf, pos=0):
    """Every decoder, native and twin, on the same bytes: identical outcomes."""
    results = {}
    for name in ("validate_batch", "iter_records", "decode_columns"):
        mine, twin = outcome(getattr(batch, name), buf, pos), outcome(getattr(pure, name), buf, pos)
        assert mine == twin, name
        results[name] = mine
    for name in ("scan_batches", "decode_columns_many"):
        mine, twin = outcome(getattr(batch, name), buf, pos), outcome(getattr(pure, name), buf, pos)
        assert mine == twin, name
    kind = results["iter_records"]
    event(kind[0] if kind[0] == "ok" else "".join(c for c in kind[1] if not c.isdigit())[:40])
    if results["iter_records"][0] == "ok":
        assert results["decode_columns"][0] == "ok"
        check_consistent(buf, pos, results["iter_records"][1], batch.decode_columns(buf, pos))
    return results


def fix_crc(buf: bytearray, pos: int = 0) -> None:
    """Recompute the stored CRC (when the batch length is plausible) so the damage reaches the walker."""
    if len(buf) - pos < HEADER_SIZE:
        return
    size = min(12 + struct.unpack_from(">i", buf, pos + 8)[0], len(buf) - pos)
    if size > ATTRIBUTES_OFFSET:
        struct.pack_into(">I", buf, pos + CRC_OFFSET, reference_crc.crc32c(bytes(buf[pos + ATTRIBUTES_OFFSET:pos + size])))


record = st.builds(batch.Record, st.none() | st.binary(max_size=12), st.none() | st.binary(max_size=40),
                   st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2).map(tuple),
                   st.none() | st.integers(0, 2**45))
valid_batches = st.builds(
    lambda recs, codec, base: batch.build_batch(recs, codec=codec, base_offset=base, base_timestamp_ms=10**12),
    st.lists(record, min_size=1, max_size=8), st.sampled_from([batch.CODEC_NONE, batch.CODEC_ZSTD]),
    st.integers(0, 2**62))


@FUZZ
@given(st.binary(max_size=400), st.integers(0, 3))
def test_random_bytes_only_raise_typed_errors(data, pos):
    pos = min(pos, len(data))
    compare_all(data, pos)


def varint(v: int) -> bytes:
    raw = ((v << 1) ^ (v >> 63)) & ((1 << 64) - 1)
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    return bytes(out + bytes([raw]))


# Record-like soup: mostly small varints (lengths, deltas, counts) with raw bytes between them.
token = st.one_of(st.integers(-3, 70).map(varint), st.binary(min_size=1, max_size=4),
                  st.integers(-2**40, 2**40).map(varint))
soup = st.lists(token, min_size=4, max_size=60).map(b"".join)


@FUZZ
@given(st.sampled_from([0, 0, 0, 8, 0x20, 4]) | st.integers(-2**15, 2**15 - 1),
       st.integers(0, 6) | st.integers(-2**31, 2**31 - 1), st.integers(0, 3) | st.integers(0, 12),
       st.integers(-2**63, 2**63 - 1), soup)
def test_plausible_headers_over_record_soup_reach_the_walker(attributes, last_delta, count, base_ts, records):
    """A whole batch with a right CRC whose header fields and record bytes are made up."""
    head = struct.pack(">qiibIhiqqqhii", 2**40, HEADER_SIZE - 12 + len(records), 0, 2, 0, attributes,
                       last_delta, base_ts, base_ts, -1, -1, -1, count)
    buf = bytearray(head + records)
    fix_crc(buf)
    compare_all(bytes(buf))


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("overwrite"), st.integers(0, 10**6), st.binary(min_size=1, max_size=6)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(b"")),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=6)),
)


def mutate(buf: bytes, mutations, records_only: bool) -> bytearray:
    out = bytearray(buf)
    lo = HEADER_SIZE if records_only and len(out) > HEADER_SIZE else 0
    for kind, where, what in mutations:
        span = max(len(out) - lo, 1)
        at = lo + where % span
        if kind == "flip" and at < len(out):
            out[at] ^= what
        elif kind == "overwrite":
            out[at:at + len(what)] = what
        elif kind == "truncate":
            del out[at:]
        elif kind == "insert":
            out[at:at] = what
    return out


@FUZZ
@given(valid_batches, st.lists(mutation, min_size=1, max_size=4), st.booleans(), st.booleans())
def test_mutated_batches_are_refused_or_read_consistently(buf, mutations, records_only, crc_fixed):
    bad = mutate(buf, mutations, records_only)
    if crc_fixed:
        fix_crc(bad)
    compare_all(bytes(bad))


@FUZZ
@given(valid_batches, st.lists(mutation, min_size=1, max_size=3), st.integers(0, 2))
def test_mutations_inside_a_segment_stop_scans_at_the_damaged_batch(buf, mutations, which):
    """Three batches back to back, one damaged (CRC fixed): the scan and the many-decoder name it."""
    parts = [bytearray(buf) for _ in range(3)]
    parts[which] = mutate(buf, mutations, True)
    fix_crc(parts[which])
    region = bytes(b"".join(parts))
    scan_mine, scan_twin = outcome(batch.scan_batches, region), outcome(pure.scan_batches, region)
    assert scan_mine == scan_twin
    many_mine, many_twin = outcome(batch.decode_columns_many, region), outcome(pure.decode_columns_many, region)
    assert many_mine == many_twin
    if many_mine[0] != "ok":
        assert many_mine[2] <= sum(len(p) for p in parts[:which + 1])  # never past the damaged batch


@pytest.mark.parametrize("codec", [batch.CODEC_GZIP, batch.CODEC_SNAPPY, batch.CODEC_LZ4, batch.CODEC_ZSTD])
@FUZZ
@given(st.lists(st.binary(max_size=30), min_size=1, max_size=20), st.lists(mutation, min_size=1, max_size=3))
@example(values=[b""], mutations=[("flip", 4, 8)])  # a frame header zstd's content-size probe refuses
def test_mutated_compressed_records_are_refused_or_read_consistently(codec, values, mutations):
    """Damage inside the compressed records (CRC fixed): codec errors and walker errors stay typed."""
    buf = batch.build_batch_from_values(values * 3, codec=codec, timestamp_ms=1)
    bad = mutate(buf, mutations, True)
    struct.pack_into(">i", bad, 8, len(bad) - 12)
    fix_crc(bad)
    compare_all(bytes(bad))
