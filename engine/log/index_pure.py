"""Pure-Python twin of the native module kraftlog._index (see csrc/_index.pyx for the layouts).

Same functions, same arguments, same results and errors.
"""

from __future__ import annotations

import struct

from kraftlog.engine.records.wire_pure import crc32c
from kraftlog.errors import CorruptRecordError

IMPLEMENTATION = "pure"

HEADER_SIZE = 61
LOG_OVERHEAD = 12
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
OFFSET_ENTRY = 8
TIME_ENTRY = 12
FIELDS = 6

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_OFFSET_ENTRY = struct.Struct(">ii")  # relativeOffset i32 | position i32
_TIME_ENTRY = struct.Struct(">qi")  # timestamp i64 | relativeOffset i32
# baseOffset i64 @0 | batchLength i32 @8 | partitionLeaderEpoch i32 @12 | magic i8 @16 | crc u32 @17
_PREFIX = struct.Struct(">qiibI")
_LAST_DELTA_AT = 23
_MAX_TS_AT = 35


def _bytes(buf) -> memoryview:
    return memoryview(buf).cast("B")


def _check_entries(buf: memoryview, entries: int, entry_size: int) -> None:
    if entries < 0 or entries * entry_size > len(buf):
        raise ValueError(f"{entries} index entries do not fit in {len(buf)} bytes")


def _search(buf, entries: int, target: int, entry_size: int, key: struct.Struct) -> int:
    lo, hi, found = 0, entries - 1, -1
    while lo <= hi:
        mid = (lo + hi) // 2
        if key.unpack_from(buf, mid * entry_size)[0] <= target:
            found = mid
            lo = mid + 1
        else:
            hi = mid - 1
    return found


def offset_index_search(buf, entries: int, target: int) -> int:
    """Slot of the last .index entry whose relative offset is <= ``target``, or -1 if none."""
    view = _bytes(buf)
    _check_entries(view, entries, OFFSET_ENTRY)
    return _search(view, entries, target, OFFSET_ENTRY, _I32)


def time_index_search(buf, entries: int, target: int) -> int:
    """Slot of the last .timeindex entry whose timestamp is <= ``target``, or -1 if none."""
    view = _bytes(buf)
    _check_entries(view, entries, TIME_ENTRY)
    return _search(view, entries, target, TIME_ENTRY, _I64)


def _batch_size_at(buf: memoryview, pos: int, end: int) -> int:
    if end - pos < HEADER_SIZE:
        return -1
    _, length, _, magic, _ = _PREFIX.unpack_from(buf, pos)
    if length < MIN_BATCH_LENGTH or magic != 2 or length + LOG_OVERHEAD > end - pos:
        return -1
    if _I32.unpack_from(buf, pos + _LAST_DELTA_AT)[0] < 0:
        return -1
    return length + LOG_OVERHEAD


def _last_offset(buf: memoryview, pos: int) -> int:
    return _I64.unpack_from(buf, pos)[0] + _I32.unpack_from(buf, pos + _LAST_DELTA_AT)[0]


def _check_range(buf: memoryview, position: int, end: int) -> None:
    if position < 0 or end < position or end > len(buf):
        raise ValueError(f"range [{position}, {end}) is outside a buffer of {len(buf)} bytes")


def find_batch(buf, position: int, end: int, target_offset: int) -> int:
    """Position of the first batch in [position, end) whose last offset is >= ``target_offset``."""
    view = _bytes(buf)
    _check_range(view, position, end)
    while position < end:
        size = _batch_size_at(view, position, end)
        if size < 0:
            raise CorruptRecordError("malformed batch header while searching for an offset", position=position)
        if _last_offset(view, position) >= target_offset:
            break
        position += size
    return position


def read_span(buf, position: int, end: int, max_bytes: int, limit_offset: int, min_one: bool) -> int:
    """End position of the whole batches from ``position`` that fit in ``max_bytes``."""
    view = _bytes(buf)
    _check_range(view, position, end)
    start = position
    while position < end:
        size = _batch_size_at(view, position, end)
        if size < 0:
            raise CorruptRecordError("malformed batch header while reading", position=position)
        if _last_offset(view, position) >= limit_offset:
            break
        if position + size - start > max_bytes and not (min_one and position == start):
            break
        position += size
    return position


def walk_batches(buf, position: int, end: int) -> tuple[int, int]:
    """Follow batch headers (no CRC) from ``position``: returns (position reached, last offset)."""
    view = _bytes(buf)
    _check_range(view, position, end)
    last = -1
    while position < end:
        size = _batch_size_at(view, position, end)
        if size < 0:
            break
        last = _last_offset(view, position)
        position += size
    return position, last


def check_batches(buf, verify_crc: bool, out) -> int:
    """Validate the batches filling ``buf`` exactly and describe them into ``out`` (6 int64 each)."""
    view = _bytes(buf)
    end = len(view)
    pos = n = 0
    capacity = len(out) // FIELDS
    while pos < end:
        size = _batch_size_at(view, pos, end)
        if size < 0:
            raise CorruptRecordError("malformed or truncated batch header", position=pos)
        base, _, epoch, _, crc = _PREFIX.unpack_from(view, pos)
        if verify_crc and crc32c(view[pos + 21:pos + size]) != crc:
            raise CorruptRecordError("batch CRC mismatch", position=pos)
        if n >= capacity:
            raise ValueError(f"more than {capacity} batches in one append")
        fields = (pos, size, base, _I32.unpack_from(view, pos + _LAST_DELTA_AT)[0],
                  _I64.unpack_from(view, pos + _MAX_TS_AT)[0], epoch)
        for j, value in enumerate(fields):
            out[n * FIELDS + j] = value
        n += 1
        pos += size
    return n


def build_indexes(positions, sizes, last_offsets, max_timestamps, base_offset: int, index_interval_bytes: int,
                  offset_buf, time_buf) -> tuple[int, int, int, int, int]:
    """Write the sparse .index and .timeindex entries of a segment's batches (see the native doc)."""
    n = len(positions)
    if len(sizes) != n or len(last_offsets) != n or len(max_timestamps) != n:
        raise ValueError("batch arrays differ in length")
    off_cap, time_cap = len(offset_buf) // OFFSET_ENTRY, len(time_buf) // TIME_ENTRY
    n_off = n_time = since = 0
    max_ts = max_ts_offset = last_time_ts = -1
    for i in range(n):
        if max_timestamps[i] > max_ts:
            max_ts, max_ts_offset = int(max_timestamps[i]), int(last_offsets[i])
        if since > index_interval_bytes:
            if n_off < off_cap:
                _OFFSET_ENTRY.pack_into(offset_buf, n_off * OFFSET_ENTRY, int(last_offsets[i]) - base_offset,
                                        int(positions[i]))
                n_off += 1
            if n_time < time_cap and max_ts > last_time_ts:
                _TIME_ENTRY.pack_into(time_buf, n_time * TIME_ENTRY, max_ts, max_ts_offset - base_offset)
                n_time += 1
                last_time_ts = max_ts
            since = 0
        since += int(sizes[i])
    return n_off, n_time, since, max_ts, max_ts_offset
