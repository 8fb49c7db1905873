"""Record batch v2 codec: the pure-Python twin of the native module kraftlog._batch.

Same functions, same arguments, same results and the same error texts as the native module. The
Python-level pieces both implementations share (the result types, the problem texts, header
encoding, compression and the control-record helpers) are defined here once; the native module
imports them, so only the byte-walking differs between the two.

Batch header layout: engine/records/layout.py. Records section (after the 61-byte header), one
record after another, ``recordCount`` of them, nothing after the last:

    length          varint   bytes of the record after this field
    attributes      int8     unused by Kafka, kept as written
    timestampDelta  varlong  record timestamp - baseTimestamp
    offsetDelta     varint   record offset - baseOffset, within 0..lastOffsetDelta
    keyLength       varint   -1 = null key
    key             bytes
    valueLength     varint   -1 = null value
    value           bytes
    headerCount     varint
    headers         headerCount x (keyLength varint >= 0, key UTF-8, valueLength varint (-1 null), value)

varint = zig-zag int32 in at most 5 bytes; varlong = zig-zag int64 in at most 10 (csrc/wire.h).
With a compression codec the whole records section is one compressed block and recordCount still
counts records (engine/records/compression.py: the codecs and their inflation bound).
"""

from __future__ import annotations

import operator
import struct
import time
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import crc32c as _crc32c
import numpy as np

from kraftlog.engine.records import compression
from kraftlog.engine.records.compression import COMPRESSION_CODECS
from kraftlog.engine.records.layout import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CODEC_NONE,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
)
from kraftlog.errors import CorruptRecordError, UnsupportedCodecError

IMPLEMENTATION = "pure"

# Control record types (the `type` in a control record's key), as Kafka numbers them.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
CONTROL_LEADER_CHANGE = 2
CONTROL_SNAPSHOT_HEADER = 3
CONTROL_SNAPSHOT_FOOTER = 4
CONTROL_KRAFT_VERSION = 5
CONTROL_KRAFT_VOTERS = 6
CONTROL_KEY = struct.Struct(">hh")  # control record key: version i16, type i16
CONTROL_KEY_VERSION = 0

# Decompression-bomb guard: a compressed records section inflates to at most MAX_INFLATED_BYTES.
# A record takes at least 7 bytes (length, attributes, timestampDelta, offsetDelta, key length,
# value length, header count: one byte each), which bounds recordCount by the records' size
# before anything is allocated.
MIN_RECORD_SIZE_BYTES = 7
# Columns address `data` with int32 offsets; Kafka segments stay below 2 GiB for the same reason.
MAX_COLUMN_DATA_BYTES = (1 << 31) - 1
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
_U64 = (1 << 64) - 1

# Problem codes: one table of texts for the native module and this twin. Batch-level problems
# first; record-level ones are prefixed with the record's index in the batch.
P_TRUNCATED_HEADER = 1
P_MAGIC = 2
P_BATCH_LENGTH = 3
P_NEGATIVE = 4
P_OFFSET_OVERFLOW = 5
P_TRUNCATED_BATCH = 6
P_CRC = 7
# 8 was "unsupported compression codec": now UnsupportedCodecError, not a corrupt batch
P_COUNT = 9
P_TRAILING = 10
P_VARINT = 11
P_RANGE = 12
P_LENGTH_PAST = 13
P_FIELD_PAST = 14
P_ATTRIBUTES = 15
P_SIZE = 16
P_OFFSET_DELTA = 17
P_TIMESTAMP = 18
P_HEADER_UTF8 = 19
P_CHANGED = 20  # native only: a mutable buffer was rewritten while being decoded without the GIL
FIRST_RECORD_PROBLEM = P_VARINT
LAST_RECORD_PROBLEM = P_HEADER_UTF8

# Record fields named in problem texts, by index.
F_LENGTH, F_TIMESTAMP, F_OFFSET, F_KEY, F_VALUE, F_HEADER_COUNT, F_HEADER_KEY, F_HEADER_VALUE = range(8)
FIELD_NAMES = ("length", "timestamp delta", "offset delta", "key length", "value length",
               "header count", "header key length", "header value length")

_TEXTS = {
    P_TRUNCATED_HEADER: "truncated batch header: {v1} of 61 bytes",
    P_MAGIC: "unsupported batch magic {v1}",
    P_BATCH_LENGTH: "batch length {v1} is smaller than a header",
    P_NEGATIVE: "negative lastOffsetDelta or recordCount",
    P_OFFSET_OVERFLOW: "batch offsets overflow int64",
    P_TRUNCATED_BATCH: "truncated batch: {v1} bytes declared, {v2} available",
    P_CRC: "CRC mismatch: stored {v1:#010x}, computed {v2:#010x}",
    P_COUNT: "record count {v1} cannot fit in {v2} bytes of records",
    P_TRAILING: "{v1} bytes after the last record",
    P_VARINT: "malformed {field} varint",
    P_RANGE: "{field} {v1} out of range",
    P_LENGTH_PAST: "length {v1} runs past the end of the records ({v2} bytes left)",
    P_FIELD_PAST: "{field} {v1} runs past the end of the record",
    P_ATTRIBUTES: "attributes byte runs past the end of the record",
    P_SIZE: "length {v1} but its fields take {v2} bytes",
    P_OFFSET_DELTA: "offset delta {v1} outside 0..{v2}",
    P_TIMESTAMP: "timestamp overflows int64",
    P_HEADER_UTF8: "header key is not valid UTF-8",
    P_CHANGED: "batch changed while it was being decoded",
}


def problem_text(code: int, index: int = 0, field: int = 0, v1: int = 0, v2: int = 0) -> str:
    """The reason text of a problem code (shared by both implementations)."""
    text = _TEXTS[code].format(field=FIELD_NAMES[field], v1=v1, v2=v2)
    return f"record {index}: {text}" if FIRST_RECORD_PROBLEM <= code <= LAST_RECORD_PROBLEM else text


# Internal: a decoding problem, turned into CorruptRecordError with the batch's position (the
# codecs raise it too).
_Problem = compression.Problem


class _RecordProblem(Exception):
    def __init__(self, code: int, field: int = 0, v1: int = 0, v2: int = 0):
        super().__init__(code)
        self.args4 = (code, field, v1, v2)


class Record(NamedTuple):
    """One record: for building (offset ignored) and for slow-path iteration (all fields filled)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None  # None -> the batch's base timestamp
    offset: int = -1  # filled when decoding


class BatchColumns(NamedTuple):
    """Decoded records of one or more batches as columns, without per-record objects.

    Record ``i``'s key is ``data[key_offsets[i] : key_offsets[i] + key_lengths[i]]`` (null when the
    length is -1), its value likewise; offsets are byte positions in ``data``. ``data`` is the
    buffer that was decoded when no batch was compressed (zero copy: an mmap'd segment stays the
    mmap), else a new bytes object (see decode_columns / decode_columns_many). For a null key or
    value the offset is where its bytes would have started.

    Batch-level arrays have one entry per batch; the records of batch ``b`` are rows
    ``batch_record_starts[b] : batch_record_starts[b + 1]``. A batch whose ``batch_attributes``
    has CONTROL_BIT set holds control records (key = control_record_key(...)).
    """

    offsets: np.ndarray  # int64
    timestamps: np.ndarray  # int64, ms; LOG_APPEND_TIME batches report their maxTimestamp
    key_offsets: np.ndarray  # int32
    key_lengths: np.ndarray  # int32, -1 = null
    value_offsets: np.ndarray  # int32
    value_lengths: np.ndarray  # int32, -1 = null
    header_counts: np.ndarray  # int32 (headers are not decoded here: use iter_records)
    data: object
    batch_positions: np.ndarray  # int64, position of each batch in the decoded buffer
    batch_base_offsets: np.ndarray  # int64
    batch_last_offsets: np.ndarray  # int64
    batch_leader_epochs: np.ndarray  # int32
    batch_attributes: np.ndarray  # int16
    batch_record_starts: np.ndarray  # int64, batch count + 1 entries

    @property
    def record_count(self) -> int:
        return len(self.offsets)

    def key(self, i: int) -> bytes | None:
        n = int(self.key_lengths[i])
        return None if n < 0 else bytes(self.data[int(self.key_offsets[i]):int(self.key_offsets[i]) + n])

    def value(self, i: int) -> bytes | None:
        n = int(self.value_lengths[i])
        return None if n < 0 else bytes(self.data[int(self.value_offsets[i]):int(self.value_offsets[i]) + n])


class ScanResult(NamedTuple):
    """What scan_batches found: one array entry per valid batch, then where and why it stopped.

    ``valid_end`` is the position just after the last valid batch (``start`` when none).
    ``error_position``/``error_reason`` are None when the scan reached ``end`` exactly; otherwise
    they name the first batch that is not valid. Reasons starting with "truncated" mean the bytes
    ended inside a header or a batch (the usual state of a log's tail after a crash).
    """

    positions: np.ndarray  # int64
    base_offsets: np.ndarray  # int64
    last_offsets: np.ndarray  # int64
    partition_leader_epochs: np.ndarray  # int32
    max_timestamps: np.ndarray  # int64
    size_bytes: np.ndarray  # int64
    record_counts: np.ndarray  # int32 (as the headers declare; not checked against the records)
    attributes: np.ndarray  # int16
    valid_end: int
    error_position: int | None
    error_reason: str | None

    @property
    def batch_count(self) -> int:
        return len(self.positions)


# ---------------------------------------------------------------------------------------------
# Control records


def control_record_key(control_type: int, version: int = CONTROL_KEY_VERSION) -> bytes:
    """Key of a control record: version i16, type i16."""
    return CONTROL_KEY.pack(version, control_type)


def parse_control_record_key(key) -> tuple[int, int]:
    """(control_type, version) of a control record key; CorruptRecordError when it is not one."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError(f"control record key must have {CONTROL_KEY.size} bytes, got "
                                 f"{'null' if key is None else len(key)}")
    version, control_type = CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(f"negative control record key version {version}")
    return control_type, version


def build_control_batch(control_type: int, value: bytes, *, base_offset: int = 0,
                        partition_leader_epoch: int = 0, timestamp_ms: int | None = None) -> bytes:
    """A control batch (control bit set) holding one control record of ``control_type``."""
    return build_batch([Record(control_record_key(control_type), value, (), timestamp_ms)],
                       base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
                       is_control=True, base_timestamp_ms=timestamp_ms)


# ---------------------------------------------------------------------------------------------
# Shared build helpers (argument checks, headers, compression): used by the native module too


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def check_build_args(count: int, base_offset: int, partition_leader_epoch: int, codec: int,
                     producer_id: int, producer_epoch: int, base_sequence: int) -> None:
    """Programmer errors in build arguments: raise ValueError/OverflowError."""
    if count <= 0:
        raise ValueError("a batch needs at least one record")
    if count > INT32_MAX:
        raise ValueError(f"too many records for one batch: {count}")
    if codec != CODEC_NONE and codec not in COMPRESSION_CODECS:
        raise ValueError(f"unsupported compression codec {codec}: 0 none, 1 gzip, 2 snappy, 3 lz4 or 4 zstd")
    _check_int("base_offset", base_offset, 64)
    if base_offset + count - 1 > INT64_MAX:
        raise OverflowError("the batch's last offset overflows int64")
    _check_int("partition_leader_epoch", partition_leader_epoch, 32)
    _check_int("producer_id", producer_id, 64)
    _check_int("producer_epoch", producer_epoch, 16)
    _check_int("base_sequence", base_sequence, 32)


def _check_int(name: str, value: int, bits: int) -> None:
    value = operator.index(value)
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        raise OverflowError(f"{name} {value} does not fit in int{bits}")


def to_int64(value) -> int:
    value = operator.index(value)
    if not INT64_MIN <= value <= INT64_MAX:
        raise OverflowError(f"timestamp {value} does not fit in int64")
    return value


def as_bytes(obj) -> bytes | None:
    """A key or value as bytes: None stays None, other buffers are copied."""
    if obj is None or type(obj) is bytes:
        return obj
    if isinstance(obj, bytes):
        return bytes(obj)
    return memoryview(obj).tobytes()


def encode_headers(headers) -> bytes:
    """The headers block of a record: count varint, then (key, value) pairs."""
    out = bytearray()
    items = list(headers)
    _put_varint(out, len(items))
    for item in items:
        if len(item) != 2:
            raise ValueError(f"a header is a (key, value) pair, got {item!r}")
        key, value = item
        if key is None:
            raise ValueError("header keys cannot be null")
        key_bytes = key.encode("utf-8") if isinstance(key, str) else as_bytes(key)
        _put_varint(out, len(key_bytes))
        out += key_bytes
        value = as_bytes(value)
        if value is None:
            out.append(1)  # zig-zag -1
        else:
            _put_varint(out, len(value))
            out += value
    return bytes(out)


def compress_batch(batch) -> bytes:
    """Turn an uncompressed batch (attributes already carrying its codec) into its compressed form:
    the records section becomes one compressed block; batchLength and the CRC are rewritten."""
    codec = struct.unpack_from(">h", batch, ATTRIBUTES_OFFSET)[0] & CODEC_MASK
    out = bytearray(memoryview(batch)[:HEADER_SIZE])
    out += compression.deflate(codec, memoryview(batch)[HEADER_SIZE:])
    struct.pack_into(">i", out, LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    struct.pack_into(">I", out, CRC_OFFSET, _crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def decompress_records(codec: int, section, position: int, path: str | None = None) -> bytes:
    """The records section of a batch at ``position`` compressed with ``codec``, inflated within
    MAX_INFLATED_BYTES. UnsupportedCodecError for codecs 5-7; _Problem when it does not inflate."""
    if codec not in COMPRESSION_CODECS:
        raise UnsupportedCodecError(codec, position=position, path=path)
    return compression.inflate(codec, section)


# ---------------------------------------------------------------------------------------------
# Building


def _put_varint(out: bytearray, value: int) -> None:
    raw = ((value << 1) ^ (value >> 63)) & _U64
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def _header_bytes(count: int, base_offset: int, partition_leader_epoch: int, attributes: int,
                  base_ts: int, max_ts: int, producer_id: int, producer_epoch: int,
                  base_sequence: int, records_size: int) -> bytearray:
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(out, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + records_size,
                     partition_leader_epoch, MAGIC, 0, attributes, count - 1, base_ts, max_ts,
                     producer_id, producer_epoch, base_sequence, count)
    return out


def _finish(header: bytearray, records: bytearray, codec: int) -> bytes:
    if len(header) + len(records) - LOG_OVERHEAD > INT32_MAX:
        raise ValueError("batch too large: batchLength does not fit in int32")
    batch = header + records
    struct.pack_into(">I", batch, CRC_OFFSET, _crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch) if codec == CODEC_NONE else compress_batch(batch)


def _attributes(codec: int, is_control: bool, is_transactional: bool) -> int:
    return codec | (CONTROL_BIT if is_control else 0) | (TRANSACTIONAL_BIT if is_transactional else 0)


def build_batch(records: Sequence[Record | tuple], *, base_offset: int = 0, partition_leader_epoch: int = 0,
                codec: int = CODEC_NONE, is_control: bool = False, is_transactional: bool = False,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                base_timestamp_ms: int | None = None) -> bytes:
    """One batch holding ``records`` (Record or tuples (key, value[, headers[, timestamp_ms]])).

    Offsets are base_offset, base_offset + 1, ...; the base timestamp is ``base_timestamp_ms``, else
    the first record timestamp given, else now; records without a timestamp take the base one.
    """
    records = list(records)
    check_build_args(len(records), base_offset, partition_leader_epoch, codec, producer_id,
                     producer_epoch, base_sequence)
    for rec in records:
        if not isinstance(rec, tuple) or not 2 <= len(rec) <= 5:
            raise TypeError(f"a record is a Record or a tuple (key, value[, headers[, timestamp_ms]]), got {rec!r}")
    stamps = [None if len(rec) < 4 or rec[3] is None else to_int64(rec[3]) for rec in records]
    base = base_timestamp_ms
    if base is None:
        base = next((t for t in stamps if t is not None), None)
    base = now_ms() if base is None else to_int64(base)
    body = bytearray()
    out = bytearray()
    max_ts = INT64_MIN
    for i, rec in enumerate(records):
        ts = base if stamps[i] is None else stamps[i]
        max_ts = max(max_ts, ts)
        delta = ts - base
        if not INT64_MIN <= delta <= INT64_MAX:
            raise OverflowError(f"timestamp delta {delta} does not fit in int64")
        body.clear()
        body.append(0)  # record attributes
        _put_varint(body, delta)
        _put_varint(body, i)
        for field in (as_bytes(rec[0]), as_bytes(rec[1])):
            if field is None:
                body.append(1)
            else:
                _put_varint(body, len(field))
                body += field
        headers = rec[2] if len(rec) > 2 else ()
        body += encode_headers(headers) if headers else b"\x00"
        _put_varint(out, len(body))
        out += body
    header = _header_bytes(len(records), base_offset, partition_leader_epoch,
                           _attributes(codec, is_control, is_transactional), base, max_ts,
                           producer_id, producer_epoch, base_sequence, len(out))
    return _finish(header, out, codec)


def build_batch_from_values(values: Sequence[bytes], *, base_offset: int = 0, partition_leader_epoch: int = 0,
                            codec: int = CODEC_NONE, is_control: bool = False, is_transactional: bool = False,
                            producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                            base_timestamp_ms: int | None = None, timestamp_ms: int | None = None) -> bytes:
    """Fast path of build_batch for the shape metadata records have: null keys, no headers, every
    record at ``timestamp_ms`` (default: the base timestamp, default now)."""
    values = list(values)
    check_build_args(len(values), base_offset, partition_leader_epoch, codec, producer_id,
                     producer_epoch, base_sequence)
    if base_timestamp_ms is None:
        base_timestamp_ms = timestamp_ms
    base = now_ms() if base_timestamp_ms is None else to_int64(base_timestamp_ms)
    ts = base if timestamp_ms is None else to_int64(timestamp_ms)
    delta = ts - base
    if not INT64_MIN <= delta <= INT64_MAX:
        raise OverflowError(f"timestamp delta {delta} does not fit in int64")
    prefix = bytearray(b"\x00")
    _put_varint(prefix, delta)
    out = bytearray()
    body = bytearray()
    for i, value in enumerate(values):
        value = as_bytes(value)
        body[:] = prefix
        _put_varint(body, i)
        body.append(1)  # null key
        if value is None:
            body.append(1)
        else:
            _put_varint(body, len(value))
            body += value
        body.append(0)  # no headers
        _put_varint(out, len(body))
        out += body
    header = _header_bytes(len(values), base_offset, partition_leader_epoch,
                           _attributes(codec, is_control, is_transactional), base, ts,
                           producer_id, producer_epoch, base_sequence, len(out))
    return _finish(header, out, codec)


# ---------------------------------------------------------------------------------------------
# Reading: header checks


def _end_of(buf, end: int | None) -> int:
    size = len(buf) if not isinstance(buf, memoryview) else buf.nbytes
    if end is None:
        return size
    if not 0 <= end <= size:
        raise ValueError(f"end {end} outside the buffer (0..{size})")
    return end


def _check_header(buf, pos: int, end: int, verify_crc: bool) -> tuple[tuple | None, int, int, int]:
    """(header fields, 0, 0, 0) when the batch at ``pos`` is whole and valid, else
    (None, problem code, v1, v2)."""
    avail = end - pos
    if avail < HEADER_SIZE:
        return None, P_TRUNCATED_HEADER, avail, 0
    fields = HEADER.unpack_from(buf, pos)
    base_offset, batch_length, _, magic, crc, _, last_delta, _, _, _, _, _, count = fields
    if magic != MAGIC:
        return None, P_MAGIC, magic, 0
    if batch_length < MIN_BATCH_LENGTH:
        return None, P_BATCH_LENGTH, batch_length, 0
    if last_delta < 0 or count < 0:
        return None, P_NEGATIVE, 0, 0
    if base_offset + last_delta > INT64_MAX:
        return None, P_OFFSET_OVERFLOW, 0, 0
    size = LOG_OVERHEAD + batch_length
    if size > avail:
        return None, P_TRUNCATED_BATCH, size, avail
    if verify_crc:
        computed = _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size])
        if computed != crc:
            return None, P_CRC, crc, computed
    return fields, 0, 0, 0


def _checked_header(buf, pos: int, end: int, path: str | None = None) -> tuple:
    if pos < 0:
        raise ValueError("negative position")
    if pos > end:
        raise ValueError(f"position {pos} outside the buffer (0..{end})")
    fields, code, v1, v2 = _check_header(buf, pos, end, True)
    if fields is None:
        raise CorruptRecordError(problem_text(code, v1=v1, v2=v2), position=pos, path=path)
    return fields


def validate_batch(buf, pos: int = 0, *, path: str | None = None) -> BatchHeader:
    """Check the batch at ``pos`` (header fields, whole within ``buf``, CRC); return its header.

    Raises CorruptRecordError (with ``position=pos`` and ``path``) naming what is wrong. Records
    are not walked: iter_records / decode_columns do that.
    """
    return BatchHeader._make(_checked_header(buf, pos, _end_of(buf, None), path))


# ---------------------------------------------------------------------------------------------
# Reading: records


def _varint(r, p: int, end: int, max_bytes: int, field: int) -> tuple[int, int]:
    raw = shift = 0
    for _ in range(max_bytes):
        if p >= end:
            raise _RecordProblem(P_VARINT, field)
        b = r[p]
        p += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= _U64
            return (raw >> 1) ^ -(raw & 1), p
        shift += 7
    raise _RecordProblem(P_VARINT, field)


def _length(r, p: int, end: int, field: int, nullable: bool) -> tuple[int, int]:
    """A length varint and the span it announces: (length, position after the bytes)."""
    n, p = _varint(r, p, end, 5, field)
    if n < (-1 if nullable else 0) or n > INT32_MAX:
        raise _RecordProblem(P_RANGE, field, n)
    if n > end - p:
        raise _RecordProblem(P_FIELD_PAST, field, n)
    return n, p + max(n, 0)


def _parse_record(r, p: int, n: int, base_ts: int, last_delta: int) -> tuple:
    """Walk one record at ``p`` (checking every length against the record and the records):
    (next position, timestamp, offset delta, key pos, key len, value pos, value len,
    header count, headers pos)."""
    length, q = _varint(r, p, n, 5, F_LENGTH)
    if length < 0 or length > INT32_MAX:
        raise _RecordProblem(P_RANGE, F_LENGTH, length)
    if length > n - q:
        raise _RecordProblem(P_LENGTH_PAST, 0, length, n - q)
    start, end = q, q + length
    if q >= end:
        raise _RecordProblem(P_ATTRIBUTES)
    q += 1
    ts_delta, q = _varint(r, q, end, 10, F_TIMESTAMP)
    ts = base_ts + ts_delta
    if not INT64_MIN <= ts <= INT64_MAX:
        raise _RecordProblem(P_TIMESTAMP)
    offset_delta, q = _varint(r, q, end, 5, F_OFFSET)
    if offset_delta < 0 or offset_delta > last_delta:
        raise _RecordProblem(P_OFFSET_DELTA, 0, offset_delta, last_delta)
    key_len, after = _length(r, q, end, F_KEY, True)
    key_pos, q = after - max(key_len, 0), after
    value_len, after = _length(r, q, end, F_VALUE, True)
    value_pos, q = after - max(value_len, 0), after
    header_count, q = _varint(r, q, end, 5, F_HEADER_COUNT)
    if header_count < 0 or header_count > end - q:
        raise _RecordProblem(P_RANGE, F_HEADER_COUNT, header_count)
    headers_pos = q
    for _ in range(header_count):
        _, q = _length(r, q, end, F_HEADER_KEY, False)
        _, q = _length(r, q, end, F_HEADER_VALUE, True)
    if q != end:
        raise _RecordProblem(P_SIZE, 0, length, q - start)
    return end, ts, offset_delta, key_pos, key_len, value_pos, value_len, header_count, headers_pos


def _decode_headers(r, q: int, count: int) -> tuple:
    headers = []
    for _ in range(count):  # structure already checked by _parse_record
        klen, q = _varint(r, q, len(r), 5, F_HEADER_KEY)
        try:
            key = bytes(r[q:q + klen]).decode("utf-8")
        except UnicodeDecodeError:
            raise _RecordProblem(P_HEADER_UTF8) from None
        q += klen
        vlen, q = _varint(r, q, len(r), 5, F_HEADER_VALUE)
        headers.append((key, None if vlen < 0 else bytes(r[q:q + vlen])))
        q += max(vlen, 0)
    return tuple(headers)


class _Section(NamedTuple):
    """A batch's records: bytes ``r`` holding them at ``r[p0:n]``, ``delta`` to add to a position in
    ``r`` to get the position in the columns' ``data``, and the header fields the walk needs."""

    r: object
    p0: int
    n: int
    delta: int
    count: int
    base_offset: int
    base_ts: int
    last_delta: int
    log_append_ts: int | None


def _records_section(buf, pos: int, fields: tuple) -> tuple[_Section, bytes | None]:
    """The records of a checked batch: (section, decompressed bytes or None)."""
    base_offset, batch_length, _, _, _, attributes, last_delta, base_ts, max_ts, _, _, _, count = fields
    codec = attributes & CODEC_MASK
    start, stop = pos + HEADER_SIZE, pos + LOG_OVERHEAD + batch_length
    if codec == CODEC_NONE:
        r, plain = memoryview(buf), None
    else:
        plain = decompress_records(codec, memoryview(buf)[start:stop], pos)
        r, start, stop = plain, 0, len(plain)
    if count * MIN_RECORD_SIZE_BYTES > stop - start:
        raise _Problem(problem_text(P_COUNT, v1=count, v2=stop - start))
    log_append_ts = max_ts if attributes & TIMESTAMP_TYPE_BIT else None
    return _Section(r, start, stop, 0, count, base_offset, base_ts, last_delta, log_append_ts), plain


def _walk(section: _Section, with_headers: bool) -> Iterator[tuple]:
    """Parse every record of ``section``; yields (parsed record, headers tuple or ())."""
    r, p, n = section.r, section.p0, section.n
    for i in range(section.count):
        try:
            rec = _parse_record(r, p, n, section.base_ts, section.last_delta)
            headers = _decode_headers(r, rec[8], rec[7]) if with_headers and rec[7] else ()
        except _RecordProblem as exc:
            code, field, v1, v2 = exc.args4
            raise _Problem(problem_text(code, i, field, v1, v2)) from None
        p = rec[0]
        yield rec, headers
    if p != n:
        raise _Problem(problem_text(P_TRAILING, v1=n - p))


def iter_records(buf, pos: int = 0) -> Iterator[Record]:
    """The records of the batch at ``pos`` as Record objects (slow path; offsets filled).

    The batch is validated (CRC included) and every record decoded before the first one is
    returned, so a corrupt batch raises CorruptRecordError here, never halfway through a loop.
    """
    fields = _checked_header(buf, pos, _end_of(buf, None))
    try:
        section, _ = _records_section(buf, pos, fields)
        r, out = section.r, []
        for rec, headers in _walk(section, True):
            ts = rec[1] if section.log_append_ts is None else section.log_append_ts
            key = None if rec[4] < 0 else bytes(r[rec[3]:rec[3] + rec[4]])
            value = None if rec[6] < 0 else bytes(r[rec[5]:rec[5] + rec[6]])
            out.append(Record(key, value, headers, ts, section.base_offset + rec[2]))
    except _Problem as exc:
        raise CorruptRecordError(exc.reason, position=pos) from None
    return iter(out)


_COLUMN_DTYPES = (np.int64, np.int64, np.int32, np.int32, np.int32, np.int32, np.int32)


def _append_columns(cols: list[list[int]], section: _Section) -> None:
    """Walk ``section`` fully, then append its rows to ``cols`` (nothing appended on a problem)."""
    got: list[tuple] = []
    delta, base_offset, log_append_ts = section.delta, section.base_offset, section.log_append_ts
    for rec, _ in _walk(section, False):
        ts = rec[1] if log_append_ts is None else log_append_ts
        got.append((base_offset + rec[2], ts, rec[3] + delta, rec[4], rec[5] + delta, rec[6], rec[7]))
    for col, values in zip(cols, zip(*got, strict=True), strict=False):
        col.extend(values)


def _check_column_span(limit: int) -> None:
    if limit > MAX_COLUMN_DATA_BYTES:
        raise ValueError(f"{limit} bytes of data are beyond the int32 column offsets: decode smaller regions")


def _columns(cols: list[list[int]], data, batches: list[tuple]) -> BatchColumns:
    arrays = [np.array(c, dtype=t) for c, t in zip(cols, _COLUMN_DTYPES, strict=True)]
    starts = np.zeros(len(batches) + 1, np.int64)
    starts[1:] = np.cumsum([b[5] for b in batches], dtype=np.int64)
    return BatchColumns(
        *arrays, data,
        np.array([b[0] for b in batches], np.int64), np.array([b[1] for b in batches], np.int64),
        np.array([b[2] for b in batches], np.int64), np.array([b[3] for b in batches], np.int32),
        np.array([b[4] for b in batches], np.int16), starts)


def _batch_row(pos: int, fields: tuple) -> tuple:
    """(position, base offset, last offset, leader epoch, attributes, record count)."""
    return (pos, fields[0], fields[0] + fields[6], fields[2], fields[5], fields[12])


def decode_columns(buf, pos: int = 0) -> BatchColumns:
    """The batch at ``pos`` (validated, CRC included) as columns, without per-record objects.

    ``data`` is ``buf`` itself for an uncompressed batch (offsets are positions in ``buf``), or
    the decompressed records section for a compressed batch (offsets are positions in it).
    """
    fields = _checked_header(buf, pos, _end_of(buf, None))
    cols: list[list[int]] = [[] for _ in _COLUMN_DTYPES]
    try:
        section, plain = _records_section(buf, pos, fields)
        _check_column_span(section.n)
        _append_columns(cols, section)
    except _Problem as exc:
        raise CorruptRecordError(exc.reason, position=pos) from None
    return _columns(cols, buf if plain is None else plain, [_batch_row(pos, fields)])


def decode_columns_many(buf, start: int = 0, end: int | None = None) -> BatchColumns:
    """Every batch in ``buf[start:end]`` (validated, CRC included) as one set of columns.

    The region must hold whole valid batches only (else CorruptRecordError naming the first bad
    one; scan_batches finds where a log's valid bytes end). ``data`` is ``buf`` itself when no
    batch is compressed; otherwise a new bytes object: ``buf[:end]`` followed by each compressed batch's
    decompressed records in batch order, so every offset still indexes ``data``.
    """
    end = _end_of(buf, end)
    if not 0 <= start <= end:
        raise ValueError(f"start {start} outside 0..{end}")
    cols: list[list[int]] = [[] for _ in _COLUMN_DTYPES]
    batches: list[tuple] = []
    parts: list[bytes] = []
    extra = end  # where the next decompressed section starts in data
    pos = start
    while pos < end:
        fields = _checked_header(buf, pos, end)
        try:
            section, plain = _records_section(buf, pos, fields)
            if plain is not None:
                section = section._replace(delta=extra)
            _check_column_span(section.n + section.delta)
            _append_columns(cols, section)
        except _Problem as exc:
            raise CorruptRecordError(exc.reason, position=pos) from None
        if plain is not None:
            parts.append(plain)
            extra += len(plain)
        batches.append(_batch_row(pos, fields))
        pos += LOG_OVERHEAD + fields[1]
    data = buf if not parts else bytes(memoryview(buf)[:end]) + b"".join(parts)
    return _columns(cols, data, batches)


def scan_batches(buf, start: int = 0, end: int | None = None, *, verify_crc: bool = True) -> ScanResult:
    """Walk consecutive batches from ``start``; stop at ``end`` or at the first invalid one.

    Checks headers, that each batch is whole, and (``verify_crc``) its CRC; records are not walked.
    This is what log recovery calls to find where a segment's valid bytes end.
    """
    end = _end_of(buf, end)
    if not 0 <= start <= end:
        raise ValueError(f"start {start} outside 0..{end}")
    rows = []
    pos, error_pos, reason = start, None, None
    while pos < end:
        fields, code, v1, v2 = _check_header(buf, pos, end, verify_crc)
        if fields is None:
            error_pos, reason = pos, problem_text(code, v1=v1, v2=v2)
            break
        size = LOG_OVERHEAD + fields[1]
        rows.append((pos, fields[0], fields[0] + fields[6], fields[2], fields[8], size, fields[12], fields[5]))
        pos += size
    cols = list(zip(*rows, strict=True)) if rows else [()] * 8
    dtypes = (np.int64, np.int64, np.int64, np.int32, np.int64, np.int64, np.int32, np.int16)
    arrays = [np.array(c, dtype=t) for c, t in zip(cols, dtypes, strict=True)]
    return ScanResult(*arrays, pos, error_pos, reason)
