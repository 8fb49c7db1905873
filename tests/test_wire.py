"""Proves the CRC-32C and varint primitives (native and twin) agree with independent implementations
(the crc32c package; kafka-python's varint codec) and reject malformed bytes with a typed error."""

from __future__ import annotations

import os

import crc32c as reference_crc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record import util as kafka_util

from kraftlog import _accel
from kraftlog.engine.records import wire
from kraftlog.engine.records import wire_pure as pure
from kraftlog.errors import CorruptRecordError

pytestmark = pytest.mark.twin


def test_the_expected_implementation_is_loaded():
    assert ("pure" if _accel.FORCE_PURE else "native") == wire.IMPLEMENTATION


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 4095, 4096 * 3 - 1, 4096 * 3, 4096 * 3 + 1, 4096 * 7 + 13, 1 << 20])
def test_crc32c_matches_the_crc32c_package(size):
    data = os.urandom(size)
    assert wire.crc32c(data) == reference_crc.crc32c(data)


@given(st.binary(max_size=40000), st.integers(0, 40000))
def test_crc32c_continues_across_chunks(data, cut):
    cut = min(cut, len(data))
    assert wire.crc32c(data[cut:], wire.crc32c(data[:cut])) == reference_crc.crc32c(data)


def test_crc32c_accepts_memoryview_slices_of_mmap_like_buffers():
    data = bytearray(os.urandom(10000))
    view = memoryview(data)[17:9000]
    assert wire.crc32c(view) == reference_crc.crc32c(bytes(view))


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_varint_round_trip_and_matches_kafka_python(value):
    encoded = wire.encode_varint(value)
    assert wire.decode_varint(encoded) == (value, len(encoded))
    assert wire.size_of_varint(value) == len(encoded)
    theirs = bytearray()
    kafka_util.encode_varint(value, theirs.append)
    assert bytes(theirs) == encoded
    assert encoded == pure.encode_varint(value)


@given(st.integers(0, (1 << 64) - 1))
def test_uvarint_round_trip(value):
    encoded = wire.encode_uvarint(value)
    assert wire.decode_uvarint(b"\x00" + encoded, 1) == (value, len(encoded) + 1)
    assert wire.size_of_uvarint(value) == len(encoded) == pure.size_of_uvarint(value)


@pytest.mark.parametrize("bad, max_bytes", [(b"", 10), (b"\x80", 10), (b"\xff\xff\xff", 10), (b"\x80" * 6, 5)])
def test_truncated_or_overlong_varints_raise_typed_errors(bad, max_bytes):
    for impl in (wire, pure):
        with pytest.raises(CorruptRecordError) as info:
            impl.decode_varint(bad, 0, max_bytes)
        assert info.value.position == 0


@given(st.binary(max_size=12), st.integers(1, 10))
def test_native_and_twin_agree_on_arbitrary_bytes(data, max_bytes):
    def outcome(impl):
        try:
            return impl.decode_uvarint(data, 0, max_bytes)
        except CorruptRecordError as exc:
            return ("error", exc.reason)

    assert outcome(wire) == outcome(pure)


def test_out_of_range_values_are_refused():
    for impl in (wire, pure):
        with pytest.raises(OverflowError):
            impl.encode_uvarint(-1)
        with pytest.raises(OverflowError):
            impl.encode_varint(1 << 63)
