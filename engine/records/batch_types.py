"""What the two implementations of the record batch v2 codec share: the result types, control
record keys, problem codes and their texts, and the build helpers (argument checks, headers,
compression).

The native module kraftlog._batch and its pure twin kraftlog.engine.records.batch_pure both import
these, so the two speak identically and only the byte walking is written twice. This module is
kept light on purpose: the native path imports it (``import kraftlog.engine.log.log`` must stay
cheap), so it imports neither the twin, nor numpy (only named in annotations), nor a compression
library or the crc32c package at module level (compression.py loads its codecs on first use).

Batch header layout: engine/records/layout.py; the records section: batch_pure's docstring.
"""

from __future__ import annotations

import operator
import struct
import time
from typing import TYPE_CHECKING, NamedTuple

from kraftlog.engine.records import compression, layout
from kraftlog.engine.records.compression import COMPRESSION_CODECS
from kraftlog.engine.records.layout import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CODEC_NONE,
    CRC_OFFSET,
    HEADER_SIZE,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
)
from kraftlog.engine.records.wire import crc32c
from kraftlog.errors import CorruptRecordError, UnsupportedCodecError

if TYPE_CHECKING:
    import numpy as np

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
# split_headers' rows by batch (one int64 array): what raft/wire.py's BatchRun keeps of each batch
SPLIT_ROWS = 6  # base offset, record count, partition leader epoch, attributes, position, size
MIN_RECORD_SIZE_BYTES = 7
# Columns address `data` with int32 offsets; Kafka segments stay below 2 GiB for the same reason.
MAX_COLUMN_DATA_BYTES = (1 << 31) - 1
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
U64_MASK = (1 << 64) - 1

# Problem codes: one table of texts for the native module and this twin. Batch-level problems
# first; record-level ones are prefixed with the record's index in the batch.
P_TRUNCATED_HEADER = layout.HEADER_TRUNCATED  # the header problems: layout.check_header_bytes'
P_MAGIC = layout.HEADER_BAD_MAGIC
P_BATCH_LENGTH = layout.HEADER_SHORT_LENGTH
P_NEGATIVE = layout.HEADER_NEGATIVE
P_OFFSET_OVERFLOW = layout.HEADER_OFFSET_OVERFLOW
P_TRUNCATED_BATCH = layout.BATCH_TRUNCATED
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


# A decoding problem, turned into CorruptRecordError with the batch's position by both
# implementations (the codecs raise it too).
DecodeProblem = compression.Problem

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


def put_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a zig-zag varint (csrc/wire.h)."""
    raw = ((value << 1) ^ (value >> 63)) & U64_MASK
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def encode_headers(headers) -> bytes:
    """The headers block of a record: count varint, then (key, value) pairs."""
    out = bytearray()
    items = list(headers)
    put_varint(out, len(items))
    for item in items:
        if len(item) != 2:
            raise ValueError(f"a header is a (key, value) pair, got {item!r}")
        key, value = item
        if key is None:
            raise ValueError("header keys cannot be null")
        key_bytes = key.encode("utf-8") if isinstance(key, str) else as_bytes(key)
        put_varint(out, len(key_bytes))
        out += key_bytes
        value = as_bytes(value)
        if value is None:
            out.append(1)  # zig-zag -1
        else:
            put_varint(out, len(value))
            out += value
    return bytes(out)


def compress_batch(batch) -> bytes:
    """Turn an uncompressed batch (attributes already carrying its codec) into its compressed form:
    the records section becomes one compressed block; batchLength and the CRC are rewritten."""
    codec = struct.unpack_from(">h", batch, ATTRIBUTES_OFFSET)[0] & CODEC_MASK
    out = bytearray(memoryview(batch)[:HEADER_SIZE])
    out += compression.deflate(codec, memoryview(batch)[HEADER_SIZE:])
    struct.pack_into(">i", out, LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def decompress_records(codec: int, section, position: int, path: str | None = None) -> bytes:
    """The records section of a batch at ``position`` compressed with ``codec``, inflated within
    MAX_INFLATED_BYTES. UnsupportedCodecError for codecs 5-7; DecodeProblem when it does not inflate."""
    if codec not in COMPRESSION_CODECS:
        raise UnsupportedCodecError(codec, position=position, path=path)
    return compression.inflate(codec, section)

