# distutils: sources = csrc/crc32c.c
"""Native hot paths of the segmented log: index binary search, batch-header walks, index rebuild.

Pure twin: kraftlog.engine.log.index_pure (same functions, same errors). Public module:
kraftlog.engine.log.index.

Layouts (all big-endian, as Kafka writes them):
    .index entry (8 bytes):      relativeOffset i32 | position i32
    .timeindex entry (12 bytes): timestamp i64     | relativeOffset i32
    batch header: see kraftlog.engine.records.layout (baseOffset i64 @0, batchLength i32 @8,
    partitionLeaderEpoch i32 @12, magic i8 @16, crc u32 @17, lastOffsetDelta i32 @23,
    maxTimestamp i64 @35). A batch occupies 12 + batchLength bytes.
"""

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from kraftlog.errors import CorruptRecordError


cdef extern from "crc32c.h":
    uint32_t kl_crc32c(uint32_t crc, const unsigned char *data, size_t n) nogil

IMPLEMENTATION = "native"

DEF HEADER_SIZE = 61
DEF LOG_OVERHEAD = 12
DEF MIN_BATCH_LENGTH = 49  # HEADER_SIZE - LOG_OVERHEAD
DEF OFFSET_ENTRY = 8
DEF TIME_ENTRY = 12
DEF FIELDS = 6  # check_batches: position, size, base_offset, last_offset_delta, max_timestamp, epoch


cdef inline uint32_t be_u32(const unsigned char *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline int64_t be_i64(const unsigned char *p) noexcept nogil:
    return <int64_t>((<uint64_t>be_u32(p) << 32) | <uint64_t>be_u32(p + 4))


cdef inline void put_u32(unsigned char *p, uint32_t v) noexcept nogil:
    p[0] = <unsigned char>(v >> 24)
    p[1] = <unsigned char>(v >> 16)
    p[2] = <unsigned char>(v >> 8)
    p[3] = <unsigned char>v


cdef inline void put_i64(unsigned char *p, int64_t v) noexcept nogil:
    put_u32(p, <uint32_t>(<uint64_t>v >> 32))
    put_u32(p + 4, <uint32_t>(<uint64_t>v & 0xFFFFFFFFu))


cdef int check_entries(const unsigned char[::1] buf, Py_ssize_t entries, Py_ssize_t entry_size) except -1:
    if entries < 0 or entries * entry_size > buf.shape[0]:
        raise ValueError(f"{entries} index entries do not fit in {buf.shape[0]} bytes")
    return 0


def offset_index_search(const unsigned char[::1] buf, Py_ssize_t entries, int64_t target):
    """Slot of the last .index entry whose relative offset is <= ``target``, or -1 if none."""
    check_entries(buf, entries, OFFSET_ENTRY)
    cdef Py_ssize_t lo = 0, hi = entries - 1, mid, found = -1
    cdef const unsigned char *p = &buf[0] if buf.shape[0] else NULL
    with nogil:
        while lo <= hi:
            mid = lo + (hi - lo) // 2
            if <int64_t><int32_t>be_u32(p + mid * OFFSET_ENTRY) <= target:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
    return found


def time_index_search(const unsigned char[::1] buf, Py_ssize_t entries, int64_t target):
    """Slot of the last .timeindex entry whose timestamp is <= ``target``, or -1 if none."""
    check_entries(buf, entries, TIME_ENTRY)
    cdef Py_ssize_t lo = 0, hi = entries - 1, mid, found = -1
    cdef const unsigned char *p = &buf[0] if buf.shape[0] else NULL
    with nogil:
        while lo <= hi:
            mid = lo + (hi - lo) // 2
            if be_i64(p + mid * TIME_ENTRY) <= target:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
    return found


cdef int64_t batch_size_at(const unsigned char *p, int64_t pos, int64_t end) noexcept nogil:
    """Size of the batch at ``pos`` when its header is sane and it fits before ``end``; else -1."""
    if end - pos < HEADER_SIZE:
        return -1
    cdef int32_t length = <int32_t>be_u32(p + pos + 8)
    if length < MIN_BATCH_LENGTH or p[pos + 16] != 2:
        return -1
    if <int64_t>length + LOG_OVERHEAD > end - pos:
        return -1
    if <int32_t>be_u32(p + pos + 23) < 0:
        return -1
    return <int64_t>length + LOG_OVERHEAD


cdef int check_range(const unsigned char[::1] buf, int64_t position, int64_t end) except -1:
    if position < 0 or end < position or end > buf.shape[0]:
        raise ValueError(f"range [{position}, {end}) is outside a buffer of {buf.shape[0]} bytes")
    return 0


def find_batch(const unsigned char[::1] buf, int64_t position, int64_t end, int64_t target_offset):
    """Position of the first batch in [position, end) whose last offset is >= ``target_offset``.

    Returns ``end`` when no batch qualifies. Raises CorruptRecordError on a malformed header.
    """
    check_range(buf, position, end)
    cdef const unsigned char *p = &buf[0] if buf.shape[0] else NULL
    cdef int64_t size, bad = -1
    with nogil:
        while position < end:
            size = batch_size_at(p, position, end)
            if size < 0:
                bad = position
                break
            if be_i64(p + position) + <int32_t>be_u32(p + position + 23) >= target_offset:
                break
            position += size
    if bad >= 0:
        raise CorruptRecordError("malformed batch header while searching for an offset", position=bad)
    return position


def read_span(const unsigned char[::1] buf, int64_t position, int64_t end, int64_t max_bytes,
              int64_t limit_offset, bint min_one):
    """End position of the whole batches from ``position`` that fit in ``max_bytes``.

    Stops before a batch whose last offset is >= ``limit_offset`` (the high watermark or log end)
    and at ``end``. With ``min_one`` the first batch is returned even when it exceeds max_bytes.
    """
    check_range(buf, position, end)
    cdef const unsigned char *p = &buf[0] if buf.shape[0] else NULL
    cdef int64_t start = position, size, bad = -1
    with nogil:
        while position < end:
            size = batch_size_at(p, position, end)
            if size < 0:
                bad = position
                break
            if be_i64(p + position) + <int32_t>be_u32(p + position + 23) >= limit_offset:
                break
            if position + size - start > max_bytes and not (min_one and position == start):
                break
            position += size
    if bad >= 0:
        raise CorruptRecordError("malformed batch header while reading", position=bad)
    return position


def walk_batches(const unsigned char[::1] buf, int64_t position, int64_t end):
    """Follow batch headers (no CRC) from ``position``: returns (position reached, last offset).

    The walk stops at ``end`` or at the first header that is malformed or runs past ``end``;
    the last offset is that of the last whole batch walked, or -1 when none was.
    """
    check_range(buf, position, end)
    cdef const unsigned char *p = &buf[0] if buf.shape[0] else NULL
    cdef int64_t size, last = -1
    with nogil:
        while position < end:
            size = batch_size_at(p, position, end)
            if size < 0:
                break
            last = be_i64(p + position) + <int32_t>be_u32(p + position + 23)
            position += size
    return position, last


def check_batches(const unsigned char[::1] buf, bint verify_crc, int64_t[::1] out):
    """Validate the batches filling ``buf`` exactly and describe them into ``out``.

    ``out`` receives 6 int64 per batch: position, size, base_offset, last_offset_delta,
    max_timestamp, partition_leader_epoch. Returns the batch count. Raises CorruptRecordError on a
    malformed header, a CRC mismatch (when ``verify_crc``), trailing bytes, or more batches than
    ``out`` holds (ValueError).
    """
    cdef const unsigned char *p = &buf[0] if buf.shape[0] else NULL
    cdef int64_t end = buf.shape[0], pos = 0, size
    cdef Py_ssize_t n = 0, capacity = out.shape[0] // FIELDS
    cdef uint32_t crc
    cdef int status = 0  # 1 malformed, 2 crc, 3 capacity
    with nogil:
        while pos < end:
            size = batch_size_at(p, pos, end)
            if size < 0:
                status = 1
                break
            if verify_crc:
                crc = kl_crc32c(0, p + pos + 21, <size_t>(size - 21))
                if crc != be_u32(p + pos + 17):
                    status = 2
                    break
            if n >= capacity:
                status = 3
                break
            out[n * FIELDS + 0] = pos
            out[n * FIELDS + 1] = size
            out[n * FIELDS + 2] = be_i64(p + pos)
            out[n * FIELDS + 3] = <int32_t>be_u32(p + pos + 23)
            out[n * FIELDS + 4] = be_i64(p + pos + 35)
            out[n * FIELDS + 5] = <int32_t>be_u32(p + pos + 12)
            n += 1
            pos += size
    if status == 1:
        raise CorruptRecordError("malformed or truncated batch header", position=pos)
    if status == 2:
        raise CorruptRecordError("batch CRC mismatch", position=pos)
    if status == 3:
        raise ValueError(f"more than {capacity} batches in one append")
    return n


def build_indexes(const int64_t[::1] positions, const int64_t[::1] sizes, const int64_t[::1] last_offsets,
                  const int64_t[::1] max_timestamps, int64_t base_offset, int64_t index_interval_bytes,
                  unsigned char[::1] offset_buf, unsigned char[::1] time_buf):
    """Write the sparse .index and .timeindex entries of a segment's batches, as Kafka does.

    Rule (Kafka LogSegment.recover): walking batches in order, a batch gets an index entry
    (its last offset, its position) when more than ``index_interval_bytes`` were written since
    the previous entry; a time entry (max timestamp so far, its batch's last offset) is added at
    the same moment if that timestamp grew past the last time entry (an empty time index counts as
    timestamp -1, so batches without timestamps add none). Entries stop when a buffer is full.
    Returns (offset entries, time entries, bytes since the last entry, max timestamp,
    offset of the max timestamp); max timestamp is -1 and its offset -1 for no batches.
    """
    cdef Py_ssize_t n = positions.shape[0], i
    if sizes.shape[0] != n or last_offsets.shape[0] != n or max_timestamps.shape[0] != n:
        raise ValueError("batch arrays differ in length")
    cdef Py_ssize_t off_cap = offset_buf.shape[0] // OFFSET_ENTRY, time_cap = time_buf.shape[0] // TIME_ENTRY
    cdef Py_ssize_t n_off = 0, n_time = 0
    cdef int64_t since = 0, max_ts = -1, max_ts_offset = -1, last_time_ts = -1
    cdef unsigned char *ob = &offset_buf[0] if offset_buf.shape[0] else NULL
    cdef unsigned char *tb = &time_buf[0] if time_buf.shape[0] else NULL
    with nogil:
        for i in range(n):
            if max_timestamps[i] > max_ts:
                max_ts = max_timestamps[i]
                max_ts_offset = last_offsets[i]
            if since > index_interval_bytes:
                if n_off < off_cap:
                    put_u32(ob + n_off * OFFSET_ENTRY, <uint32_t>(last_offsets[i] - base_offset))
                    put_u32(ob + n_off * OFFSET_ENTRY + 4, <uint32_t>positions[i])
                    n_off += 1
                if n_time < time_cap and max_ts > last_time_ts:
                    put_i64(tb + n_time * TIME_ENTRY, max_ts)
                    put_u32(tb + n_time * TIME_ENTRY + 8, <uint32_t>(max_ts_offset - base_offset))
                    n_time += 1
                    last_time_ts = max_ts
                since = 0
            since += sizes[i]
    return n_off, n_time, since, max_ts, max_ts_offset
