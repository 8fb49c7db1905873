"""Record batch v2 codec: the pure-Python twin of the native module kraftlog._batch.

Same functions, same arguments, same results and the same error texts as the native module. The
Python-level pieces both implementations share (the result types, the problem texts, header
encoding, compression and the control-record helpers) are defined once in batch_types.py, which
both import, so only the byte-walking differs between the two (and the native path never loads
this module).

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

import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import crc32c as _crc32c
import numpy as np

from kraftlog.engine.records.batch_types import (
    F_HEADER_COUNT,
    F_HEADER_KEY,
    F_HEADER_VALUE,
    F_KEY,
    F_LENGTH,
    F_OFFSET,
    F_TIMESTAMP,
    F_VALUE,
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    MAX_COLUMN_DATA_BYTES,
    MIN_RECORD_SIZE_BYTES,
    P_ATTRIBUTES,
    P_BATCH_LENGTH,
    P_COUNT,
    P_CRC,
    P_FIELD_PAST,
    P_HEADER_UTF8,
    P_LENGTH_PAST,
    P_MAGIC,
    P_OFFSET_DELTA,
    P_RANGE,
    P_SIZE,
    P_TIMESTAMP,
    P_TRAILING,
    P_TRUNCATED_BATCH,
    P_TRUNCATED_HEADER,
    P_VARINT,
    SPLIT_ROWS,
    U64_MASK,
    BatchColumns,
    DecodeProblem,
    Record,
    ScanResult,
    as_bytes,
    check_build_args,
    compress_batch,
    control_record_key,
    decompress_records,
    encode_headers,
    now_ms,
    problem_text,
    put_varint,
    to_int64,
)
from kraftlog.engine.records.layout import (
    ATTRIBUTES_OFFSET,
    CODEC_MASK,
    CODEC_NONE,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER,
    HEADER_OK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    check_header_bytes,
)
from kraftlog.errors import CorruptRecordError

IMPLEMENTATION = "pure"


class _RecordProblem(Exception):
    def __init__(self, code: int, field: int = 0, v1: int = 0, v2: int = 0):
        super().__init__(code)
        self.args4 = (code, field, v1, v2)


def build_control_batch(control_type: int, value: bytes, *, base_offset: int = 0,
                        partition_leader_epoch: int = 0, timestamp_ms: int | None = None) -> bytes:
    """A control batch (control bit set) holding one control record of ``control_type``."""
    return build_batch([Record(control_record_key(control_type), value, (), timestamp_ms)],
                       base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
                       is_control=True, base_timestamp_ms=timestamp_ms)


# ---------------------------------------------------------------------------------------------
# Building


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
        put_varint(body, delta)
        put_varint(body, i)
        for field in (as_bytes(rec[0]), as_bytes(rec[1])):
            if field is None:
                body.append(1)
            else:
                put_varint(body, len(field))
                body += field
        headers = rec[2] if len(rec) > 2 else ()
        body += encode_headers(headers) if headers else b"\x00"
        put_varint(out, len(body))
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
    put_varint(prefix, delta)
    out = bytearray()
    body = bytearray()
    for i, value in enumerate(values):
        value = as_bytes(value)
        body[:] = prefix
        put_varint(body, i)
        body.append(1)  # null key
        if value is None:
            body.append(1)
        else:
            put_varint(body, len(value))
            body += value
        body.append(0)  # no headers
        put_varint(out, len(body))
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
    (None, problem code, v1, v2). The header checks are layout.check_header_bytes'."""
    avail = end - pos
    code, size = check_header_bytes(buf, pos, end)
    if code == P_TRUNCATED_HEADER:
        return None, code, avail, 0
    fields = HEADER.unpack_from(buf, pos)
    if code == P_MAGIC:
        return None, code, fields[3], 0
    if code == P_BATCH_LENGTH:
        return None, code, fields[1], 0
    if code == P_TRUNCATED_BATCH:
        return None, code, size, avail
    if code != HEADER_OK:
        return None, code, 0, 0
    if verify_crc:
        computed = _crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size])
        if computed != fields[4]:
            return None, P_CRC, fields[4], computed
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
            raw &= U64_MASK
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


def pass_through_count(buf) -> int:
    """The record count of ``buf`` when it is exactly one batch the leader may append as the
    client wrote it (a Produce's batch: raft/wire.py ClientBatch), else 0; never raises on bad
    bytes (the caller then unpacks the values, and that path names the problem).

    Passes: the whole buffer is one batch v2 (batchLength fills it, nothing after), its header
    valid and its CRC right; attributes 0 (no compression, CreateTime, not transactional, not
    control); producerId, producerEpoch and baseSequence -1 (no idempotent producer state, which
    the log does not keep); recordCount >= 1 and lastOffsetDelta = recordCount - 1; every record
    well formed with offsetDelta = its index, a null key, a non-null value and no headers; and
    maxTimestamp = the largest record timestamp. That is the shape build_batch_from_values
    writes, so a passed batch reads back as the same values the unpack path would store (the
    timestamps are the client's, as Kafka keeps CreateTime). Base offset and partitionLeaderEpoch
    are not checked: the log stamps both (neither is under the CRC)."""
    view = memoryview(buf).cast("B")
    n = view.nbytes
    fields, code, _, _ = _check_header(view, 0, n, True)
    if fields is None:
        return 0
    (_, length, _, _, _, attributes, last_delta, base_ts, max_ts, producer_id, producer_epoch,
     base_sequence, count) = fields
    if (LOG_OVERHEAD + length != n or attributes != 0 or count < 1 or last_delta != count - 1
            or producer_id != -1 or producer_epoch != -1 or base_sequence != -1):
        return 0
    p, seen_ts = HEADER_SIZE, INT64_MIN
    try:
        for i in range(count):
            p, ts, offset_delta, _, key_len, _, value_len, header_count, _ = _parse_record(view, p, n, base_ts,
                                                                                        last_delta)
            if offset_delta != i or key_len != -1 or value_len < 0 or header_count:
                return 0
            seen_ts = max(seen_ts, ts)
    except _RecordProblem:
        return 0
    return count if p == n and seen_ts == max_ts else 0


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
        raise DecodeProblem(problem_text(P_COUNT, v1=count, v2=stop - start))
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
            raise DecodeProblem(problem_text(code, i, field, v1, v2)) from None
        p = rec[0]
        yield rec, headers
    if p != n:
        raise DecodeProblem(problem_text(P_TRAILING, v1=n - p))


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
    except DecodeProblem as exc:
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
    except DecodeProblem as exc:
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
        except DecodeProblem as exc:
            raise CorruptRecordError(exc.reason, position=pos) from None
        if plain is not None:
            parts.append(plain)
            extra += len(plain)
        batches.append(_batch_row(pos, fields))
        pos += LOG_OVERHEAD + fields[1]
    data = buf if not parts else bytes(memoryview(buf)[:end]) + b"".join(parts)
    return _columns(cols, data, batches)


def split_headers(buf):
    """The headers of ``buf``, whole record batches v2 that are dense (lastOffsetDelta + 1 ==
    recordCount) and continue each other, as one int64 array of SPLIT_ROWS rows by batch; None
    when any batch breaks a rule (scan_batches then names it). CRCs are not checked."""
    scan = scan_batches(buf, verify_crc=False)
    if scan.error_position is not None:
        return None
    bases, counts = scan.base_offsets, scan.record_counts.astype(np.int64)
    if (scan.last_offsets - bases + 1 != counts).any() or (bases[1:] != bases[:-1] + counts[:-1]).any():
        return None
    return np.stack([bases, counts, scan.partition_leader_epochs, scan.attributes, scan.positions,
                     scan.size_bytes]).astype(np.int64).reshape(SPLIT_ROWS, len(bases))


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
