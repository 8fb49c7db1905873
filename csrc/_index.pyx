# distutils: sources = csrc/crc32c.c
"""Native hot paths of the segmented log: index binary search, batch-header walks, index rebuild,
and the leader append's one pass over its batches (copy, CRC check and offset stamping).

Pure twin: kraftlog.engine.log.index_pure (same functions, same errors). Public module:
kraftlog.engine.log.index.

Layouts (all big-endian, as Kafka writes them):
    .index entry (8 bytes):      relativeOffset i32 | position i32
    .timeindex entry (12 bytes): timestamp i64     | relativeOffset i32
    batch header: see kraftlog.engine.records.layout (baseOffset i64 @0, batchLength i32 @8,
    partitionLeaderEpoch i32 @12, magic i8 @16, crc u32 @17, lastOffsetDelta i32 @23,
    maxTimestamp i64 @35). A batch occupies 12 + batchLength bytes.
"""

from libc.stdint cimport INT64_MAX, int32_t, int64_t, uint32_t, uint64_t
from cpython.pyport cimport PY_SSIZE_T_MAX
from libc.string cimport memcpy
from libc.errno cimport EINTR, EIO, errno
from posix.types cimport off_t
from posix.uio cimport iovec, pwritev
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.exc cimport PyErr_SetFromErrno

from kraftlog.errors import CorruptRecordError


from batch_header cimport (
    KL_ATTRIBUTES_AT, KL_BASE_OFFSET_AT, KL_BATCH_OK, KL_CRC_AT, KL_HEADER_SIZE, KL_LAST_OFFSET_DELTA_AT,
    KL_LEADER_EPOCH_AT, KL_LENGTH_AT, KL_MAX_TIMESTAMP_AT, kl_check_batch_header, kl_load_be32, kl_load_be64,
    kl_store_be32, kl_store_be64,
)

cdef extern from "crc32c.h":
    uint32_t kl_crc32c(uint32_t crc, const unsigned char *data, size_t n) nogil

IMPLEMENTATION = "native"

DEF OFFSET_ENTRY = 8
DEF TIME_ENTRY = 12
DEF FIELDS = 6  # check_batches: position, size, base_offset, last_offset_delta, max_timestamp, epoch
DEF COPY_CHUNK = 24576  # stamp_batches copies this much, then CRCs it while it is still in L1
DEF STAMP_BYTES = 16  # baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32: what a leader stamps
DEF IOV_BATCH = 512  # batches per pwritev: two iovecs each, within Linux's IOV_MAX of 1024


cdef inline void put_fields(int64_t *row, int64_t position, int64_t size, int64_t base_offset,
                            int64_t last_offset_delta, int64_t max_timestamp, int64_t epoch) noexcept nogil:
    """One batch's FIELDS-wide row of check_batches' output (the layout beside FIELDS above)."""
    row[0] = position
    row[1] = size
    row[2] = base_offset
    row[3] = last_offset_delta
    row[4] = max_timestamp
    row[5] = epoch


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
            if <int64_t><int32_t>kl_load_be32(p + mid * OFFSET_ENTRY) <= target:
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
            if <int64_t>kl_load_be64(p + mid * TIME_ENTRY) <= target:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
    return found


cdef inline int64_t last_offset_at(const unsigned char *batch) noexcept nogil:
    """baseOffset + lastOffsetDelta of the batch at ``batch`` (its header already checked)."""
    return (<int64_t>kl_load_be64(batch + KL_BASE_OFFSET_AT)
            + <int32_t>kl_load_be32(batch + KL_LAST_OFFSET_DELTA_AT))


cdef int64_t batch_size_at(const unsigned char *p, int64_t pos, int64_t end, bint assigned_offsets=True) noexcept nogil:
    """Size of the batch at ``pos`` when its header passes the one header check (batch_header.h)
    and it fits before ``end``; else -1. ``assigned_offsets`` is False for a batch being stamped
    (its baseOffset is replaced, and the stamper checks the offsets it assigns)."""
    cdef int64_t size
    if kl_check_batch_header(p + pos, end - pos, assigned_offsets, &size) != KL_BATCH_OK:
        return -1
    return size


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
            if last_offset_at(p + position) >= target_offset:
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
            if last_offset_at(p + position) >= limit_offset:
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
            last = last_offset_at(p + position)
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
                crc = kl_crc32c(0, p + pos + KL_ATTRIBUTES_AT, <size_t>(size - KL_ATTRIBUTES_AT))
                if crc != kl_load_be32(p + pos + KL_CRC_AT):
                    status = 2
                    break
            if n >= capacity:
                status = 3
                break
            put_fields(&out[n * FIELDS], pos, size, <int64_t>kl_load_be64(p + pos + KL_BASE_OFFSET_AT),
                       <int32_t>kl_load_be32(p + pos + KL_LAST_OFFSET_DELTA_AT),
                       <int64_t>kl_load_be64(p + pos + KL_MAX_TIMESTAMP_AT), <int32_t>kl_load_be32(p + pos + KL_LEADER_EPOCH_AT))
            n += 1
            pos += size
    if status == 1:
        raise CorruptRecordError("malformed or truncated batch header", position=pos)
    if status == 2:
        raise CorruptRecordError("batch CRC mismatch", position=pos)
    if status == 3:
        raise ValueError(f"more than {capacity} batches in one append")
    return n


cdef struct _IndexRun:
    # the sparse index rule's state over a walk of batches (build_indexes, index_run)
    int64_t base_offset
    int64_t interval_bytes
    int64_t since  # bytes written since the last offset entry
    int64_t max_ts
    int64_t max_ts_offset
    int64_t last_time_ts  # the last time entry's timestamp (-1: none)
    unsigned char *offset_out
    Py_ssize_t offset_cap  # entries offset_out holds
    Py_ssize_t n_off
    unsigned char *time_out
    Py_ssize_t time_cap
    Py_ssize_t n_time


cdef void _start_run(_IndexRun *r, int64_t base_offset, int64_t interval_bytes, int64_t since, int64_t max_ts,
                     int64_t max_ts_offset, int64_t last_time_ts, unsigned char[::1] offset_out,
                     unsigned char[::1] time_out) noexcept:
    r.base_offset, r.interval_bytes, r.since = base_offset, interval_bytes, since
    r.max_ts, r.max_ts_offset, r.last_time_ts = max_ts, max_ts_offset, last_time_ts
    r.offset_out = &offset_out[0] if offset_out.shape[0] else NULL
    r.offset_cap, r.n_off = offset_out.shape[0] // OFFSET_ENTRY, 0
    r.time_out = &time_out[0] if time_out.shape[0] else NULL
    r.time_cap, r.n_time = time_out.shape[0] // TIME_ENTRY, 0


cdef inline void _index_step(_IndexRun *r, int64_t position, int64_t size, int64_t last_offset,
                             int64_t max_timestamp) noexcept nogil:
    """One batch under the rule build_indexes' docstring gives."""
    if max_timestamp > r.max_ts:
        r.max_ts = max_timestamp
        r.max_ts_offset = last_offset
    if r.since > r.interval_bytes:
        if r.n_off < r.offset_cap:
            kl_store_be32(r.offset_out + r.n_off * OFFSET_ENTRY, <uint32_t>(last_offset - r.base_offset))
            kl_store_be32(r.offset_out + r.n_off * OFFSET_ENTRY + 4, <uint32_t>position)
            r.n_off += 1
        if r.n_time < r.time_cap and r.max_ts > r.last_time_ts:
            kl_store_be64(r.time_out + r.n_time * TIME_ENTRY, <uint64_t>r.max_ts)
            kl_store_be32(r.time_out + r.n_time * TIME_ENTRY + 8, <uint32_t>(r.max_ts_offset - r.base_offset))
            r.n_time += 1
            r.last_time_ts = r.max_ts
        r.since = 0
    r.since += size


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
    # a segment's walk from its start: nothing written, no timestamp, no time entry yet
    cdef _IndexRun r
    _start_run(&r, base_offset, index_interval_bytes, 0, -1, -1, -1, offset_buf, time_buf)
    with nogil:
        for i in range(n):
            _index_step(&r, positions[i], sizes[i], last_offsets[i], max_timestamps[i])
    return r.n_off, r.n_time, r.since, r.max_ts, r.max_ts_offset


def index_run(const int64_t[::1] fields, Py_ssize_t n, int64_t base_offset, int64_t index_interval_bytes,
              int64_t since, int64_t max_ts, int64_t max_ts_offset, int64_t last_time_ts,
              unsigned char[::1] offset_out, unsigned char[::1] time_out):
    """build_indexes' rule over an append's batches 0..n-1 as check_batches described them
    (``fields``: FIELDS int64 a batch, positions already in the segment), carrying on from the
    segment's state: ``since`` bytes since its last entry, its max timestamp and that
    timestamp's offset, and the timestamp of its last time entry (-1: none). A batch gets an
    offset entry (its last offset, its position) when more than ``index_interval_bytes`` were
    written since the previous one, and a time entry (max timestamp so far, the offset that
    reached it) at the same moment when that timestamp grew past the last time entry. Entries
    go to the output buffers until each is full (the room left in each index). Returns (offset
    entries, time entries, since, max timestamp, its offset, last time entry's timestamp)."""
    if n < 0 or n * FIELDS > fields.shape[0]:
        raise ValueError(f"{n} batches do not fit in {fields.shape[0]} fields")
    cdef Py_ssize_t i
    cdef const int64_t *row
    cdef _IndexRun r
    _start_run(&r, base_offset, index_interval_bytes, since, max_ts, max_ts_offset, last_time_ts, offset_out, time_out)
    with nogil:
        for i in range(n):
            row = &fields[i * FIELDS]  # position, size, base offset, last offset delta, max timestamp
            _index_step(&r, row[0], row[1], row[2] + row[3], row[4])
    return r.n_off, r.n_time, r.since, r.max_ts, r.max_ts_offset, r.last_time_ts


cdef int stamp_status_error(int status, int64_t pos, Py_ssize_t capacity) except -1:
    if status == 1:
        raise CorruptRecordError("malformed or truncated batch header", position=pos)
    if status == 2:
        raise CorruptRecordError("batch CRC mismatch", position=pos)
    if status == 3:
        raise ValueError(f"more than {capacity} batches in one append")
    if status == 4:
        raise ValueError(f"offsets assigned from the batch at {pos} overflow int64")
    return 0


cdef tuple stamp_into(const unsigned char *s, int64_t end, Py_buffer *dst, bint verify_crc, int64_t next_offset,
                      int32_t epoch, Py_buffer *out, Py_ssize_t slot, int64_t position):
    if end > dst.len:
        raise ValueError(f"{end} bytes of batches do not fit a write buffer of {dst.len} bytes")
    if slot < 0 or slot * FIELDS * 8 > out.len:
        raise ValueError(f"slot {slot} is outside the {out.len // (FIELDS * 8)} slots of out")
    cdef unsigned char *d = <unsigned char *>dst.buf
    cdef int64_t *o = <int64_t *>out.buf + slot * FIELDS
    cdef int64_t pos = 0, size, done, chunk, delta, ts, max_ts = -1
    cdef Py_ssize_t n = 0, capacity = out.len // (FIELDS * 8) - slot
    cdef uint32_t crc = 0
    cdef int status = 0  # 1 malformed, 2 crc, 3 capacity, 4 offset overflow
    with nogil:
        while pos < end:
            if end - pos < KL_HEADER_SIZE:
                status = 1
                break
            # Everything below is read from our copy, never from src again: another thread may
            # rewrite src meanwhile, but what is checked is exactly what will be written.
            memcpy(d + pos, s + pos, KL_HEADER_SIZE)
            size = batch_size_at(d, pos, end, False)
            if size < 0:
                status = 1
                break
            done = KL_HEADER_SIZE
            if verify_crc:
                crc = kl_crc32c(0, d + pos + KL_ATTRIBUTES_AT, KL_HEADER_SIZE - KL_ATTRIBUTES_AT)
            while done < size:
                chunk = size - done if size - done < COPY_CHUNK else COPY_CHUNK
                memcpy(d + pos + done, s + pos + done, <size_t>chunk)
                if verify_crc:
                    crc = kl_crc32c(crc, d + pos + done, <size_t>chunk)
                done += chunk
            if verify_crc and crc != kl_load_be32(d + pos + KL_CRC_AT):
                status = 2
                break
            if n >= capacity:
                status = 3
                break
            delta = <int32_t>kl_load_be32(d + pos + KL_LAST_OFFSET_DELTA_AT)
            if next_offset > INT64_MAX - delta - 1:
                status = 4
                break
            ts = <int64_t>kl_load_be64(d + pos + KL_MAX_TIMESTAMP_AT)
            kl_store_be64(d + pos + KL_BASE_OFFSET_AT, <uint64_t>next_offset)
            kl_store_be32(d + pos + KL_LEADER_EPOCH_AT, <uint32_t>epoch)
            put_fields(o + n * FIELDS, position + pos, size, next_offset, delta, ts, epoch)
            if ts > max_ts:
                max_ts = ts
            next_offset += delta + 1
            n += 1
            pos += size
    stamp_status_error(status, pos, capacity)
    return n, next_offset - 1, max_ts


def stamp_batches(src, dst, bint verify_crc, int64_t next_offset, int32_t epoch, out, Py_ssize_t slot=0,
                  int64_t position=0):
    """The leader's append in one pass: copy the batches filling ``src`` exactly into ``dst``,
    CRC-checking each copy (when ``verify_crc``) and stamping its baseOffset (offsets assigned
    from ``next_offset`` on) and partitionLeaderEpoch (``epoch``); both sit outside the CRC.

    ``out`` (int64, writable) receives check_batches' 6 fields per batch from slot ``slot`` on:
    position (+ ``position``: where the batches will sit in the segment), size, the stamped base
    offset, last offset delta, max timestamp, epoch. Returns (batch count, last offset assigned,
    max timestamp; -1 when no batch has one). Errors are check_batches' (CorruptRecordError with
    the position in ``src``; ValueError when ``out`` has no room), plus ValueError when ``dst``
    is too small or the offsets would overflow. ``src`` is never written; after an error ``dst``
    and ``out`` hold garbage.
    """
    cdef Py_buffer view, target, fields
    PyObject_GetBuffer(src, &view, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(dst, &target, PyBUF_SIMPLE | PyBUF_WRITABLE)
        try:
            PyObject_GetBuffer(out, &fields, PyBUF_SIMPLE | PyBUF_WRITABLE)
            try:
                return stamp_into(<const unsigned char *>view.buf, view.len, &target, verify_crc, next_offset,
                                  epoch, &fields, slot, position)
            finally:
                PyBuffer_Release(&fields)
        finally:
            PyBuffer_Release(&target)
    finally:
        PyBuffer_Release(&view)


cdef tuple stamp_headers_into(const unsigned char *s, int64_t end, Py_buffer *headers, bint verify_crc,
                              int64_t next_offset, int32_t epoch, Py_buffer *out, Py_ssize_t slot,
                              int64_t position, Py_ssize_t max_batches):
    cdef Py_ssize_t slots = out.len // (FIELDS * 8)
    if slot < 0 or slot > slots or headers.len < slots * STAMP_BYTES:
        raise ValueError(f"slot {slot} is outside the {slots} slots of out, or headers holds fewer")
    cdef unsigned char *h = <unsigned char *>headers.buf + slot * STAMP_BYTES
    cdef int64_t *o = <int64_t *>out.buf + slot * FIELDS
    cdef int64_t pos = 0, size, delta, ts, max_ts = -1
    cdef Py_ssize_t n = 0, capacity = slots - slot if slots - slot < max_batches else max_batches
    cdef int status = 0  # 1 malformed, 2 crc, 3 capacity, 4 offset overflow
    with nogil:
        while pos < end:
            size = batch_size_at(s, pos, end, False)
            if size < 0:
                status = 1
                break
            if verify_crc and kl_crc32c(0, s + pos + KL_ATTRIBUTES_AT, <size_t>(size - KL_ATTRIBUTES_AT)) != kl_load_be32(s + pos + KL_CRC_AT):
                status = 2
                break
            if n >= capacity:
                status = 3
                break
            delta = <int32_t>kl_load_be32(s + pos + KL_LAST_OFFSET_DELTA_AT)
            if next_offset > INT64_MAX - delta - 1:
                status = 4
                break
            ts = <int64_t>kl_load_be64(s + pos + KL_MAX_TIMESTAMP_AT)
            kl_store_be64(h + n * STAMP_BYTES + KL_BASE_OFFSET_AT, <uint64_t>next_offset)
            memcpy(h + n * STAMP_BYTES + KL_LENGTH_AT, s + pos + KL_LENGTH_AT, 4)  # batchLength, as is
            kl_store_be32(h + n * STAMP_BYTES + KL_LEADER_EPOCH_AT, <uint32_t>epoch)
            put_fields(o + n * FIELDS, position + pos, size, next_offset, delta, ts, epoch)
            if ts > max_ts:
                max_ts = ts
            next_offset += delta + 1
            n += 1
            pos += size
    stamp_status_error(status, pos, capacity)
    return n, next_offset - 1, max_ts


def stamp_headers(src, headers, bint verify_crc, int64_t next_offset, int32_t epoch, out, Py_ssize_t slot=0,
                  int64_t position=0):
    """stamp_batches without the copy, for a ``src`` nobody can change (bytes): the batches are
    checked (CRC included) in place, and each one's stamped first 16 bytes (baseOffset,
    batchLength, partitionLeaderEpoch) go to ``headers`` at 16 * slot; write_stamped then writes
    them with the rest of ``src``. ``out``, the result and the errors are stamp_batches'.
    """
    cdef Py_buffer view, head, fields
    PyObject_GetBuffer(src, &view, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(headers, &head, PyBUF_SIMPLE | PyBUF_WRITABLE)
        try:
            PyObject_GetBuffer(out, &fields, PyBUF_SIMPLE | PyBUF_WRITABLE)
            try:
                return stamp_headers_into(<const unsigned char *>view.buf, view.len, &head, verify_crc, next_offset,
                                          epoch, &fields, slot, position, PY_SSIZE_T_MAX)
            finally:
                PyBuffer_Release(&fields)
        finally:
            PyBuffer_Release(&head)
    finally:
        PyBuffer_Release(&view)


cdef int pwritev_all(int fd, iovec *iov, int count, int64_t position) noexcept nogil:
    """pwritev every byte of ``iov`` at ``position``, continuing after short writes (EINTR
    retried); 0, -1 with errno set, or -2 for a write that made no progress."""
    cdef ssize_t written
    while count > 0:
        written = pwritev(fd, iov, count, <off_t>position)
        if written < 0:
            if errno == EINTR:
                continue
            return -1
        if written == 0:
            return -2
        position += written
        while count > 0 and <size_t>written >= iov[0].iov_len:
            written -= iov[0].iov_len
            iov += 1
            count -= 1
        if count > 0:
            iov[0].iov_base = <char *>iov[0].iov_base + written
            iov[0].iov_len -= <size_t>written
    return 0


cdef int write_described(Py_buffer *view, Py_buffer *head, Py_buffer *fields, Py_ssize_t slot, Py_ssize_t n,
                         int fd, int64_t position) except -1:
    """Write the ``n`` batches described from ``slot`` on (positions from ``position``): per batch
    its 16 stamped bytes from ``head``, the rest from ``view``; one pwritev per IOV_BATCH batches,
    without the GIL. Every description is checked against the buffers before anything is written."""
    cdef iovec iov[IOV_BATCH * 2]
    cdef Py_ssize_t i, done = 0, k
    cdef int64_t rel, size, at = position, round_bytes
    cdef int64_t *o = <int64_t *>fields.buf
    cdef int rc = 0
    if slot < 0 or n < 0 or (slot + n) * FIELDS * 8 > fields.len or (slot + n) * STAMP_BYTES > head.len:
        raise ValueError(f"slots [{slot}, {slot + n}) are outside out or headers")
    for i in range(n):
        rel, size = o[(slot + i) * FIELDS] - position, o[(slot + i) * FIELDS + 1]
        if rel < 0 or size < STAMP_BYTES or rel + size > view.len:
            raise ValueError(f"batch {i} at {rel} (+{size}) is outside the {view.len} bytes of src")
    with nogil:
        while done < n and rc == 0:
            k = 0
            round_bytes = 0
            while k < IOV_BATCH and done + k < n:
                rel = o[(slot + done + k) * FIELDS] - position
                size = o[(slot + done + k) * FIELDS + 1]
                iov[2 * k].iov_base = <char *>head.buf + (slot + done + k) * STAMP_BYTES
                iov[2 * k].iov_len = STAMP_BYTES
                iov[2 * k + 1].iov_base = <char *>view.buf + rel + STAMP_BYTES
                iov[2 * k + 1].iov_len = <size_t>(size - STAMP_BYTES)
                round_bytes += size
                k += 1
            rc = pwritev_all(fd, iov, <int>(2 * k), at)  # the batches are contiguous from position
            at += round_bytes
            done += k
    if rc == -2:
        raise OSError(EIO, f"write to fd {fd} made no progress")
    if rc < 0:
        PyErr_SetFromErrno(OSError)
    return 0


def write_stamped(src, headers, out, Py_ssize_t slot, Py_ssize_t n, int fd, int64_t position):
    """Write the ``n`` batches that stamp_headers described from ``slot`` on at ``position`` of
    the file ``fd`` (the position stamp_headers was given): per batch its 16 stamped bytes from
    ``headers`` then the rest straight from ``src``, with one pwritev per 512 batches and the GIL
    released. Raises OSError (errno set) when a write fails; some bytes may then have reached the
    file, and the caller cuts it back."""
    cdef Py_buffer view, head, fields
    PyObject_GetBuffer(src, &view, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(headers, &head, PyBUF_SIMPLE)
        try:
            PyObject_GetBuffer(out, &fields, PyBUF_SIMPLE)
            try:
                write_described(&view, &head, &fields, slot, n, fd, position)
            finally:
                PyBuffer_Release(&fields)
        finally:
            PyBuffer_Release(&head)
    finally:
        PyBuffer_Release(&view)


def stamp_write(src, headers, bint verify_crc, int64_t next_offset, int32_t epoch, out, Py_ssize_t slot,
                int64_t position, int fd, int64_t max_last_offset, Py_ssize_t max_batches):
    """stamp_headers then write_stamped in one call (the append's hot path): nothing is written
    when a batch is invalid (the errors of stamp_batches; more than ``max_batches`` batches is
    one), and nothing either when the last offset would pass ``max_last_offset``: then the
    result's count is -1. Returns (batch count, last offset, max timestamp)."""
    cdef Py_buffer view, head, fields
    PyObject_GetBuffer(src, &view, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(headers, &head, PyBUF_SIMPLE | PyBUF_WRITABLE)
        try:
            PyObject_GetBuffer(out, &fields, PyBUF_SIMPLE | PyBUF_WRITABLE)
            try:
                n, last, max_ts = stamp_headers_into(<const unsigned char *>view.buf, view.len, &head, verify_crc,
                                                     next_offset, epoch, &fields, slot, position, max_batches)
                if last > max_last_offset:
                    return -1, last, max_ts
                write_described(&view, &head, &fields, slot, n, fd, position)
                return n, last, max_ts
            finally:
                PyBuffer_Release(&fields)
        finally:
            PyBuffer_Release(&head)
    finally:
        PyBuffer_Release(&view)
