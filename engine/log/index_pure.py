"""Pure-Python twin of the native module kraftlog._index (see csrc/_index.pyx for the layouts).

Same functions, same arguments, same results and errors.
"""

from __future__ import annotations

import errno
import os
import struct

from kraftlog.engine.records.layout import (
    ATTRIBUTES_OFFSET,
    HEADER_OK,
    LAST_OFFSET_DELTA_OFFSET,
    LEADER_EPOCH_OFFSET,
    LENGTH_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    check_header_bytes,
)
from kraftlog.engine.records.wire_pure import crc32c
from kraftlog.errors import CorruptRecordError

IMPLEMENTATION = "pure"

OFFSET_ENTRY = 8
TIME_ENTRY = 12
FIELDS = 6
STAMP_BYTES = 16  # baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32: what a leader stamps
_INT64_MAX = (1 << 63) - 1

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_OFFSET_ENTRY = struct.Struct(">ii")  # relativeOffset i32 | position i32
_TIME_ENTRY = struct.Struct(">qi")  # timestamp i64 | relativeOffset i32
# baseOffset i64 @0 | batchLength i32 @8 | partitionLeaderEpoch i32 @12 | magic i8 @16 | crc u32 @17
_PREFIX = struct.Struct(">qiibI")


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


def _batch_size_at(buf: memoryview, pos: int, end: int, assigned_offsets: bool = True) -> int:
    """Size of the batch at ``pos`` when its header passes the one header check and it fits
    before ``end``; else -1 (False ``assigned_offsets``: a batch being stamped)."""
    code, size = check_header_bytes(buf, pos, end, assigned_offsets)
    return size if code == HEADER_OK else -1


def _last_offset(buf: memoryview, pos: int) -> int:
    return _I64.unpack_from(buf, pos)[0] + _I32.unpack_from(buf, pos + LAST_OFFSET_DELTA_OFFSET)[0]


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
        if verify_crc and crc32c(view[pos + ATTRIBUTES_OFFSET:pos + size]) != crc:
            raise CorruptRecordError("batch CRC mismatch", position=pos)
        if n >= capacity:
            raise ValueError(f"more than {capacity} batches in one append")
        fields = (pos, size, base, _I32.unpack_from(view, pos + LAST_OFFSET_DELTA_OFFSET)[0],
                  _I64.unpack_from(view, pos + MAX_TIMESTAMP_OFFSET)[0], epoch)
        for j, value in enumerate(fields):
            out[n * FIELDS + j] = value
        n += 1
        pos += size
    return n


def _slots(out) -> tuple[memoryview, int]:
    fields = memoryview(out).cast("B")
    return fields.cast("q"), len(fields) // (FIELDS * 8)


def _stamp(view: memoryview, verify_crc: bool, next_offset: int, epoch: int, fields: memoryview, slot: int,
           position: int, capacity: int, put) -> tuple[int, int, int]:
    """The checks and descriptions shared by the stamping functions; ``put(i, pos, base)`` stamps
    batch ``i`` (at ``pos`` in ``view``) with ``base``."""
    pos = n = 0
    max_ts = -1
    while pos < len(view):
        size = _batch_size_at(view, pos, len(view), False)
        if size < 0:
            raise CorruptRecordError("malformed or truncated batch header", position=pos)
        crc = _PREFIX.unpack_from(view, pos)[4]
        if verify_crc and crc32c(view[pos + ATTRIBUTES_OFFSET:pos + size]) != crc:
            raise CorruptRecordError("batch CRC mismatch", position=pos)
        if n >= capacity:
            raise ValueError(f"more than {capacity} batches in one append")
        delta = _I32.unpack_from(view, pos + LAST_OFFSET_DELTA_OFFSET)[0]
        if next_offset + delta + 1 > _INT64_MAX:
            raise ValueError(f"offsets assigned from the batch at {pos} overflow int64")
        ts = _I64.unpack_from(view, pos + MAX_TIMESTAMP_OFFSET)[0]
        put(n, pos, next_offset)
        for j, value in enumerate((position + pos, size, next_offset, delta, ts, epoch)):
            fields[(slot + n) * FIELDS + j] = value
        max_ts = max(max_ts, ts)
        next_offset += delta + 1
        n += 1
        pos += size
    return n, next_offset - 1, max_ts


def stamp_batches(src, dst, verify_crc: bool, next_offset: int, epoch: int, out, slot: int = 0,
                  position: int = 0) -> tuple[int, int, int]:
    """The leader's append in one pass: copy ``src`` into ``dst``, check the copy as check_batches
    does, stamp each batch's baseOffset (from ``next_offset`` on) and partitionLeaderEpoch, and
    describe the batches into ``out`` from slot ``slot`` on (positions + ``position``).

    Returns (batch count, last offset assigned, max timestamp or -1). See the native docstring.
    """
    view = _bytes(src)
    target = memoryview(dst).cast("B")
    if len(view) > len(target):
        raise ValueError(f"{len(view)} bytes of batches do not fit a write buffer of {len(target)} bytes")
    fields, slots = _slots(out)
    if slot < 0 or slot > slots:
        raise ValueError(f"slot {slot} is outside the {slots} slots of out")
    target[:len(view)] = view  # checked below as copied, like the native pass
    copy = target[:len(view)]

    def put(_: int, pos: int, base: int) -> None:
        _I64.pack_into(copy, pos, base)  # baseOffset i64 @0
        _I32.pack_into(copy, pos + LEADER_EPOCH_OFFSET, epoch)

    return _stamp(copy, verify_crc, next_offset, epoch, fields, slot, position, slots - slot, put)


def _stamp_headers(src, headers, verify_crc: bool, next_offset: int, epoch: int, out, slot: int, position: int,
                   max_batches: int) -> tuple[int, int, int]:
    view = _bytes(src)
    head = memoryview(headers).cast("B")
    fields, slots = _slots(out)
    if slot < 0 or slot > slots or len(head) < slots * STAMP_BYTES:
        raise ValueError(f"slot {slot} is outside the {slots} slots of out, or headers holds fewer")

    def put(i: int, pos: int, base: int) -> None:
        at = (slot + i) * STAMP_BYTES
        _I64.pack_into(head, at, base)  # baseOffset i64 @0
        head[at + LENGTH_OFFSET:at + LEADER_EPOCH_OFFSET] = view[pos + LENGTH_OFFSET:pos + LEADER_EPOCH_OFFSET]  # batchLength, as is
        _I32.pack_into(head, at + LEADER_EPOCH_OFFSET, epoch)

    return _stamp(view, verify_crc, next_offset, epoch, fields, slot, position, min(slots - slot, max_batches), put)


def stamp_headers(src, headers, verify_crc: bool, next_offset: int, epoch: int, out, slot: int = 0,
                  position: int = 0) -> tuple[int, int, int]:
    """stamp_batches without the copy: each batch's stamped first 16 bytes go to ``headers`` at
    16 * slot (see the native docstring)."""
    return _stamp_headers(src, headers, verify_crc, next_offset, epoch, out, slot, position, _INT64_MAX)


def write_stamped(src, headers, out, slot: int, n: int, fd: int, position: int) -> None:
    """Write the ``n`` batches stamp_headers described from ``slot`` on at ``position`` of ``fd``:
    per batch its 16 stamped bytes, then the rest of it from ``src`` (see the native docstring)."""
    view, head = _bytes(src), memoryview(headers).cast("B")
    fields = memoryview(out).cast("B").cast("q")
    if slot < 0 or n < 0 or (slot + n) * FIELDS > len(fields) or (slot + n) * STAMP_BYTES > len(head):
        raise ValueError(f"slots [{slot}, {slot + n}) are outside out or headers")
    parts = []
    for i in range(n):
        rel, size = fields[(slot + i) * FIELDS] - position, fields[(slot + i) * FIELDS + 1]
        if rel < 0 or size < STAMP_BYTES or rel + size > len(view):
            raise ValueError(f"batch {i} at {rel} (+{size}) is outside the {len(view)} bytes of src")
        parts += [head[(slot + i) * STAMP_BYTES:(slot + i + 1) * STAMP_BYTES], view[rel + STAMP_BYTES:rel + size]]
    data = b"".join(parts)
    done = 0
    while done < len(data):
        written = os.pwrite(fd, data[done:], position + done)
        if not written:
            raise OSError(errno.EIO, f"write to fd {fd} made no progress")
        done += written


def stamp_write(src, headers, verify_crc: bool, next_offset: int, epoch: int, out, slot: int, position: int,
                fd: int, max_last_offset: int, max_batches: int) -> tuple[int, int, int]:
    """stamp_headers then write_stamped; nothing written (count -1) when the last offset would
    pass ``max_last_offset`` (see the native docstring)."""
    n, last, max_ts = _stamp_headers(src, headers, verify_crc, next_offset, epoch, out, slot, position, max_batches)
    if last > max_last_offset:
        return -1, last, max_ts
    write_stamped(src, headers, out, slot, n, fd, position)
    return n, last, max_ts


class _IndexRun:
    """The sparse index rule's state over a walk of batches (index_run, build_indexes), and its
    step: one batch under the rule build_indexes' native docstring gives."""

    def __init__(self, base_offset: int, interval_bytes: int, since: int, max_ts: int, max_ts_offset: int,
                 last_time_ts: int, offset_out, time_out):
        self.base_offset, self.interval_bytes, self.since = base_offset, interval_bytes, since
        self.max_ts, self.max_ts_offset, self.last_time_ts = max_ts, max_ts_offset, last_time_ts
        self.offset_out, self.offset_cap, self.n_off = offset_out, len(offset_out) // OFFSET_ENTRY, 0
        self.time_out, self.time_cap, self.n_time = time_out, len(time_out) // TIME_ENTRY, 0

    def step(self, position: int, size: int, last_offset: int, max_timestamp: int) -> None:
        if max_timestamp > self.max_ts:
            self.max_ts, self.max_ts_offset = max_timestamp, last_offset
        if self.since > self.interval_bytes:
            if self.n_off < self.offset_cap:
                _OFFSET_ENTRY.pack_into(self.offset_out, self.n_off * OFFSET_ENTRY, last_offset - self.base_offset,
                                        position)
                self.n_off += 1
            if self.n_time < self.time_cap and self.max_ts > self.last_time_ts:
                _TIME_ENTRY.pack_into(self.time_out, self.n_time * TIME_ENTRY, self.max_ts,
                                      self.max_ts_offset - self.base_offset)
                self.n_time += 1
                self.last_time_ts = self.max_ts
            self.since = 0
        self.since += size


def index_run(fields, n: int, base_offset: int, index_interval_bytes: int, since: int, max_ts: int,
              max_ts_offset: int, last_time_ts: int, offset_out, time_out) -> tuple[int, int, int, int, int, int]:
    """build_indexes' rule over an append's described batches, from the segment's state (see the native doc)."""
    if n < 0 or n * FIELDS > len(fields):
        raise ValueError(f"{n} batches do not fit in {len(fields)} fields")
    r = _IndexRun(base_offset, index_interval_bytes, since, max_ts, max_ts_offset, last_time_ts, offset_out, time_out)
    for i in range(n):
        position, size, base, delta, timestamp = (int(v) for v in fields[i * FIELDS:i * FIELDS + 5])
        r.step(position, size, base + delta, timestamp)
    return r.n_off, r.n_time, r.since, r.max_ts, r.max_ts_offset, r.last_time_ts


def build_indexes(positions, sizes, last_offsets, max_timestamps, base_offset: int, index_interval_bytes: int,
                  offset_buf, time_buf) -> tuple[int, int, int, int, int]:
    """Write the sparse .index and .timeindex entries of a segment's batches (see the native doc)."""
    n = len(positions)
    if len(sizes) != n or len(last_offsets) != n or len(max_timestamps) != n:
        raise ValueError("batch arrays differ in length")
    r = _IndexRun(base_offset, index_interval_bytes, 0, -1, -1, -1, offset_buf, time_buf)  # from a segment's start
    for i in range(n):
        r.step(int(positions[i]), int(sizes[i]), int(last_offsets[i]), int(max_timestamps[i]))
    return r.n_off, r.n_time, r.since, r.max_ts, r.max_ts_offset
