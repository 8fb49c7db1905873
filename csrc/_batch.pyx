# distutils: sources = csrc/crc32c.c
"""Native record batch v2 codec. Pure twin: kraftlog.engine.records.batch_pure (same functions).

Layouts: the batch header is in engine/records/layout.py, the records section in the docstring
of batch_shared. The byte walking is C (nogil, every read bounded by the record, the records section
and the buffer); the Python-level pieces (result types, problem texts, header encoding, compression
(engine/records/compression.py: inflated once per batch, then walked here), argument checks) are
imported from engine/records/batch_types.py, as the twin imports them, so both speak identically.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t, INT32_MAX, INT64_MAX, INT64_MIN
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_CheckExact
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_FromLongLong, PyLong_CheckExact
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM, PyTuple_GET_SIZE, PyTuple_GET_ITEM, PyTuple_Check
from cpython.object cimport PyTypeObject
from cpython.unicode cimport PyUnicode_DecodeUTF8

from kraftlog.engine.records import batch_types as _shared
from kraftlog.engine.records.batch_types import BatchColumns, DecodeProblem, Record, ScanResult, control_record_key
from kraftlog.engine.records.layout import BatchHeader
from kraftlog.errors import CorruptRecordError, UnsupportedCodecError

IMPLEMENTATION = "native"

ctypedef const unsigned char uchar


from batch_header cimport (
    KL_ATTRIBUTES_AT, KL_BASE_OFFSET_AT, KL_BASE_SEQUENCE_AT, KL_BASE_TIMESTAMP_AT, KL_BATCH_BAD_MAGIC,
    KL_BATCH_NEGATIVE, KL_BATCH_OFFSET_OVERFLOW, KL_BATCH_OK, KL_BATCH_SHORT_LENGTH, KL_BATCH_TRUNCATED,
    KL_BATCH_TRUNCATED_HEADER, KL_CRC_AT, KL_HEADER_SIZE, KL_LAST_OFFSET_DELTA_AT, KL_LEADER_EPOCH_AT, KL_LENGTH_AT,
    KL_LOG_OVERHEAD, KL_MAGIC, KL_MAGIC_AT, KL_MAX_TIMESTAMP_AT, KL_MIN_BATCH_LENGTH, KL_PRODUCER_EPOCH_AT,
    KL_PRODUCER_ID_AT, KL_RECORD_COUNT_AT, kl_batch_header_problem, kl_load_be16, kl_load_be32, kl_load_be64,
    kl_store_be16, kl_store_be32, kl_store_be64,
)

cdef extern from "crc32c.h":
    uint32_t kl_crc32c(uint32_t crc, const unsigned char *data, size_t n) nogil

cdef extern from "wire.h":
    int64_t kl_read_varint(const unsigned char *buf, int64_t pos, int64_t end, int max_bytes, int64_t *out) nogil
    int kl_uvarint_size(uint64_t v) nogil
    uint64_t kl_zigzag(int64_t v) nogil
    int kl_write_uvarint(unsigned char *dst, uint64_t v) nogil

cdef extern from *:
    bint __builtin_sub_overflow(int64_t a, int64_t b, int64_t *res) nogil

cdef extern from "Python.h":
    # What the documented PyObject_GC_NewVar macro calls: allocate a GC object, not yet tracked.
    object gc_new_var "(PyObject *)_PyObject_GC_NewVar"(PyTypeObject *type, Py_ssize_t nitems)
    void PyObject_GC_Track(void *op)


# Problem codes and field numbers: the same numbers as the twin (checked at import below). Codes 1-6
# are the header problems: batch_header.h's KL_BATCH_* codes.
cdef enum:
    P_CRC = 7
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
    P_CHANGED = 20

cdef enum:
    F_LENGTH = 0
    F_TIMESTAMP = 1
    F_OFFSET = 2
    F_KEY = 3
    F_VALUE = 4
    F_HEADER_COUNT = 5
    F_HEADER_KEY = 6
    F_HEADER_VALUE = 7

cdef enum:
    MIN_RECORD_SIZE_BYTES = 7
    CODEC_MASK = 0x07
    CODEC_NONE = 0
    TIMESTAMP_TYPE_BIT = 0x08
    TRANSACTIONAL_BIT = 0x10
    CONTROL_BIT = 0x20

for _name, _value in (("P_CHANGED", P_CHANGED), ("P_HEADER_UTF8", P_HEADER_UTF8), ("P_TIMESTAMP", P_TIMESTAMP), ("P_COUNT", P_COUNT),
                      ("F_HEADER_VALUE", F_HEADER_VALUE), ("MIN_RECORD_SIZE_BYTES", MIN_RECORD_SIZE_BYTES),
                      ("P_VARINT", P_VARINT), ("P_CRC", P_CRC), ("P_TRUNCATED_HEADER", KL_BATCH_TRUNCATED_HEADER),
                      ("P_MAGIC", KL_BATCH_BAD_MAGIC), ("P_BATCH_LENGTH", KL_BATCH_SHORT_LENGTH),
                      ("P_NEGATIVE", KL_BATCH_NEGATIVE), ("P_OFFSET_OVERFLOW", KL_BATCH_OFFSET_OVERFLOW),
                      ("P_TRUNCATED_BATCH", KL_BATCH_TRUNCATED)):
    assert getattr(_shared, _name) == _value, _name

cdef int64_t MAX_COLUMN_DATA_BYTES = _shared.MAX_COLUMN_DATA_BYTES
_problem_text = _shared.problem_text
_Problem = DecodeProblem
_EMPTY = ()
cdef PyTypeObject *RECORD_TYPE = <PyTypeObject *>Record  # a tuple subclass: items inline


cdef struct Problem:
    int code
    int field
    int64_t index
    int64_t v1
    int64_t v2


cdef struct Hdr:
    int64_t base_offset
    int32_t batch_length
    int32_t leader_epoch
    int8_t magic
    uint32_t crc
    int16_t attributes
    int32_t last_offset_delta
    int64_t base_timestamp
    int64_t max_timestamp
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence
    int32_t record_count


cdef struct Fields:
    int64_t next           # position after the record
    int64_t timestamp      # baseTimestamp + timestampDelta
    int64_t offset_delta
    int64_t key_pos        # where the key bytes start (also when null)
    int64_t key_len        # -1 = null
    int64_t value_pos
    int64_t value_len
    int64_t header_count
    int64_t headers_pos


cdef struct Cols:
    int64_t *offsets
    int64_t *timestamps
    int32_t *key_off
    int32_t *key_len
    int32_t *value_off
    int32_t *value_len
    int32_t *header_count


cdef struct ScanOut:
    int64_t *positions
    int64_t *base_offsets
    int64_t *last_offsets
    int32_t *leader_epochs
    int64_t *max_timestamps
    int64_t *sizes
    int32_t *record_counts
    int16_t *attributes


cdef inline int fail(Problem *pr, int code, int field, int64_t v1, int64_t v2) noexcept nogil:
    pr.index = 0
    pr.code = code
    pr.field = field
    pr.v1 = v1
    pr.v2 = v2
    return -1


cdef object problem_error(Problem *pr, int64_t position, object path=None):
    return CorruptRecordError(_problem_text(pr.code, pr.index, pr.field, pr.v1, pr.v2),
                              position=position, path=path)


# ---------------------------------------------------------------------------------------------
# Header checks (see layout.py for the byte table)

cdef int check_header(uchar *b, int64_t pos, int64_t end, bint verify_crc, Hdr *h,
                      Problem *pr) noexcept nogil:
    """0 when the batch at pos is whole (within end) and valid, else -1 with pr filled. The header
    checks are batch_header.h's (kl_batch_header_problem on the fields read here), then the CRC
    when verify_crc."""
    cdef int64_t avail = end - pos
    cdef int64_t size = 0
    cdef uint32_t computed
    cdef uchar *p = b + pos
    if avail < KL_HEADER_SIZE:
        return fail(pr, KL_BATCH_TRUNCATED_HEADER, 0, avail, 0)
    read_header(p, h)
    cdef int code = kl_batch_header_problem(h.base_offset, h.batch_length, h.magic, h.last_offset_delta,
                                            h.record_count, avail, True, &size)
    if code == KL_BATCH_BAD_MAGIC:
        return fail(pr, code, 0, h.magic, 0)
    if code == KL_BATCH_SHORT_LENGTH:
        return fail(pr, code, 0, h.batch_length, 0)
    if code == KL_BATCH_TRUNCATED:
        return fail(pr, code, 0, size, avail)
    if code != KL_BATCH_OK:  # KL_BATCH_NEGATIVE, KL_BATCH_OFFSET_OVERFLOW
        return fail(pr, code, 0, 0, 0)
    if verify_crc:
        computed = kl_crc32c(0, p + KL_ATTRIBUTES_AT, <size_t>(size - KL_ATTRIBUTES_AT))
        if computed != h.crc:
            return fail(pr, P_CRC, 0, h.crc, computed)
    return 0


cdef inline void read_header(uchar *p, Hdr *h) noexcept nogil:
    """Every field of the KL_HEADER_SIZE bytes at p (the caller made sure they are there)."""
    h.base_offset = <int64_t>kl_load_be64(p + KL_BASE_OFFSET_AT)
    h.batch_length = <int32_t>kl_load_be32(p + KL_LENGTH_AT)
    h.leader_epoch = <int32_t>kl_load_be32(p + KL_LEADER_EPOCH_AT)
    h.magic = <int8_t>p[KL_MAGIC_AT]
    h.crc = kl_load_be32(p + KL_CRC_AT)
    h.attributes = <int16_t>kl_load_be16(p + KL_ATTRIBUTES_AT)
    h.last_offset_delta = <int32_t>kl_load_be32(p + KL_LAST_OFFSET_DELTA_AT)
    h.base_timestamp = <int64_t>kl_load_be64(p + KL_BASE_TIMESTAMP_AT)
    h.max_timestamp = <int64_t>kl_load_be64(p + KL_MAX_TIMESTAMP_AT)
    h.producer_id = <int64_t>kl_load_be64(p + KL_PRODUCER_ID_AT)
    h.producer_epoch = <int16_t>kl_load_be16(p + KL_PRODUCER_EPOCH_AT)
    h.base_sequence = <int32_t>kl_load_be32(p + KL_BASE_SEQUENCE_AT)
    h.record_count = <int32_t>kl_load_be32(p + KL_RECORD_COUNT_AT)


# ---------------------------------------------------------------------------------------------
# Records (layout in batch_pure's docstring)

cdef inline int64_t rd_varint(uchar *r, int64_t q, int64_t end, int max_bytes, int64_t *out) noexcept nogil:
    """kl_read_varint with the one-byte case inline (most record fields are one byte)."""
    cdef unsigned char b
    if q < end:
        b = r[q]
        if b < 0x80:
            out[0] = <int64_t>(b >> 1) ^ -<int64_t>(b & 1)
            return q + 1
    return kl_read_varint(r, q, end, max_bytes, out)


cdef inline int64_t read_span(uchar *r, int64_t q, int64_t end, int field, int64_t min_len,
                              int64_t *pos, int64_t *length, Problem *pr) noexcept nogil:
    """A length varint (>= min_len: -1 for nullable fields) and the bytes it announces, all
    within end: returns the position after the bytes, or -1 with pr filled."""
    cdef int64_t v
    q = rd_varint(r, q, end, 5, &v)
    if q < 0:
        return fail(pr, P_VARINT, field, 0, 0)
    if v < min_len or v > INT32_MAX:
        return fail(pr, P_RANGE, field, v, 0)
    if v > end - q:
        return fail(pr, P_FIELD_PAST, field, v, 0)
    pos[0] = q
    length[0] = v
    return q + (v if v > 0 else 0)


cdef int parse_record(uchar *r, int64_t p, int64_t n, int64_t base_ts, int64_t last_delta,
                      Fields *f, Problem *pr) noexcept nogil:
    """Walk the record at p; never reads at or past n nor past the record's own length."""
    cdef int64_t length, q, end, start, v, i, hpos, hlen
    q = rd_varint(r, p, n, 5, &length)                 # length varint
    if q < 0:
        return fail(pr, P_VARINT, F_LENGTH, 0, 0)
    if length < 0 or length > INT32_MAX:
        return fail(pr, P_RANGE, F_LENGTH, length, 0)
    if length > n - q:
        return fail(pr, P_LENGTH_PAST, 0, length, n - q)
    start = q
    end = q + length
    if q >= end:                                            # attributes int8
        return fail(pr, P_ATTRIBUTES, 0, 0, 0)
    q += 1
    q = rd_varint(r, q, end, 10, &v)                   # timestampDelta varlong
    if q < 0:
        return fail(pr, P_VARINT, F_TIMESTAMP, 0, 0)
    if (v > 0 and base_ts > INT64_MAX - v) or (v < 0 and base_ts < INT64_MIN - v):
        return fail(pr, P_TIMESTAMP, 0, 0, 0)
    f.timestamp = base_ts + v
    q = rd_varint(r, q, end, 5, &v)                    # offsetDelta varint
    if q < 0:
        return fail(pr, P_VARINT, F_OFFSET, 0, 0)
    if v < 0 or v > last_delta:
        return fail(pr, P_OFFSET_DELTA, 0, v, last_delta)
    f.offset_delta = v
    q = read_span(r, q, end, F_KEY, -1, &f.key_pos, &f.key_len, pr)        # key
    if q < 0:
        return -1
    q = read_span(r, q, end, F_VALUE, -1, &f.value_pos, &f.value_len, pr)  # value
    if q < 0:
        return -1
    q = rd_varint(r, q, end, 5, &v)                    # header count varint
    if q < 0:
        return fail(pr, P_VARINT, F_HEADER_COUNT, 0, 0)
    if v < 0 or v > end - q:
        return fail(pr, P_RANGE, F_HEADER_COUNT, v, 0)
    f.header_count = v
    f.headers_pos = q
    for i in range(v):                                      # headers: key (not null), value
        q = read_span(r, q, end, F_HEADER_KEY, 0, &hpos, &hlen, pr)
        if q < 0:
            return -1
        q = read_span(r, q, end, F_HEADER_VALUE, -1, &hpos, &hlen, pr)
        if q < 0:
            return -1
    if q != end:
        return fail(pr, P_SIZE, 0, length, q - start)
    f.next = end
    return 0


cdef int walk_columns(uchar *r, int64_t p, int64_t n, int64_t delta, Hdr *h, Cols *c, int64_t row,
                      Problem *pr) noexcept nogil:
    """Decode every record of one batch (records at r[p:n]) into rows row.. of the columns;
    key/value positions are shifted by delta (where r[0] sits in the columns' data)."""
    cdef Fields f
    cdef int64_t i
    cdef bint log_append = (h.attributes & TIMESTAMP_TYPE_BIT) != 0
    for i in range(h.record_count):
        if parse_record(r, p, n, h.base_timestamp, h.last_offset_delta, &f, pr) < 0:
            pr.index = i
            return -1
        c.offsets[row] = h.base_offset + f.offset_delta
        c.timestamps[row] = h.max_timestamp if log_append else f.timestamp
        c.key_off[row] = <int32_t>(f.key_pos + delta)
        c.key_len[row] = <int32_t>f.key_len
        c.value_off[row] = <int32_t>(f.value_pos + delta)
        c.value_len[row] = <int32_t>f.value_len
        c.header_count[row] = <int32_t>f.header_count
        row += 1
        p = f.next
    if p != n:
        return fail(pr, P_TRAILING, 0, n - p, 0)
    return 0


# ---------------------------------------------------------------------------------------------
# Python-facing helpers

cdef int64_t region_end(Py_buffer *view, object end) except -2:
    if end is None:
        return view.len
    cdef int64_t e = end
    if e < 0 or e > view.len:
        raise ValueError(f"end {e} outside the buffer (0..{view.len})")
    return e


cdef int check_position(int64_t pos, int64_t end) except -1:
    if pos < 0:
        raise ValueError("negative position")
    if pos > end:
        raise ValueError(f"position {pos} outside the buffer (0..{end})")
    return 0


cdef int checked_header(Py_buffer *view, int64_t pos, Hdr *h, object path) except -1:
    cdef Problem pr
    check_position(pos, view.len)
    if check_header(<uchar *>view.buf, pos, view.len, True, h, &pr) < 0:
        raise problem_error(&pr, pos, path)
    return 0


cdef class _Section:
    """Where a batch's records are: r[p:n] of `owner`'s bytes (the buffer or decompressed bytes)."""
    cdef uchar *r
    cdef int64_t p
    cdef int64_t n
    cdef object plain   # decompressed bytes (keeps r alive) or None


cdef _Section records_section(Py_buffer *view, object buf, int64_t pos, Hdr *h):
    """The records of a checked batch; raises _Problem (inflation, count) or UnsupportedCodecError."""
    cdef _Section s = _Section.__new__(_Section)
    cdef int codec = h.attributes & CODEC_MASK
    cdef int64_t start = pos + KL_HEADER_SIZE
    cdef int64_t stop = pos + KL_LOG_OVERHEAD + <int64_t>h.batch_length
    if codec == CODEC_NONE:
        s.plain = None
        s.r = <uchar *>view.buf
        s.p = start
        s.n = stop
    else:
        s.plain = _shared.decompress_records(codec, memoryview(buf)[start:stop], pos)
        s.r = <uchar *>PyBytes_AS_STRING(s.plain)
        s.p = 0
        s.n = PyBytes_GET_SIZE(s.plain)
    if <int64_t>h.record_count * MIN_RECORD_SIZE_BYTES > s.n - s.p:
        raise _Problem(_problem_text(P_COUNT, 0, 0, h.record_count, s.n - s.p))
    return s


cdef object header_tuple(Hdr *h):
    return BatchHeader(h.base_offset, h.batch_length, h.leader_epoch, h.magic, h.crc, h.attributes,
                       h.last_offset_delta, h.base_timestamp, h.max_timestamp, h.producer_id,
                       h.producer_epoch, h.base_sequence, h.record_count)


def validate_batch(buf, Py_ssize_t pos=0, *, path=None):
    """Check the batch at ``pos`` (header fields, whole within ``buf``, CRC); return its header."""
    cdef Py_buffer view
    cdef Hdr h
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        checked_header(&view, pos, &h, path)
    finally:
        PyBuffer_Release(&view)
    return header_tuple(&h)


cdef object new_record(object key, object value, object headers, object ts, object offset):
    """A Record without going through its Python-level __new__: allocate the tuple subclass and
    fill its five slots at once (nothing runs in between). A record without headers holds only
    bytes, ints and None, so it can never be part of a reference cycle: it stays untracked by
    the garbage collector (CPython untracks such plain tuples too), which keeps a list of many
    records from making collections walk every one of them."""
    rec = gc_new_var(RECORD_TYPE, 5)
    Py_INCREF(key)
    PyTuple_SET_ITEM(rec, 0, key)
    Py_INCREF(value)
    PyTuple_SET_ITEM(rec, 1, value)
    Py_INCREF(headers)
    PyTuple_SET_ITEM(rec, 2, headers)
    Py_INCREF(ts)
    PyTuple_SET_ITEM(rec, 3, ts)
    Py_INCREF(offset)
    PyTuple_SET_ITEM(rec, 4, offset)
    if headers is not _EMPTY:
        PyObject_GC_Track(<void *>rec)
    return rec


cdef object decode_headers(uchar *r, int64_t q, int64_t count, int64_t end, Problem *pr):
    """Headers of a record whose structure parse_record already checked; None on a key that is
    not UTF-8 (pr filled)."""
    cdef int64_t i, klen = 0, vlen = 0
    out = PyTuple_New(count)
    for i in range(count):
        q = kl_read_varint(r, q, end, 5, &klen)
        try:
            key = PyUnicode_DecodeUTF8(<const char *>(r + q), klen, NULL)
        except UnicodeDecodeError:
            fail(pr, P_HEADER_UTF8, 0, 0, 0)
            return None
        q += klen
        q = kl_read_varint(r, q, end, 5, &vlen)
        if vlen < 0:
            value = None
        else:
            value = PyBytes_FromStringAndSize(<const char *>(r + q), vlen)
            q += vlen
        item = (key, value)
        Py_INCREF(item)
        PyTuple_SET_ITEM(out, i, item)
    return out


cdef class _RecordIterator:
    """Records of one batch, built one at a time from a batch that iter_records fully checked.

    Holds a buffer export of the batch's bytes (or the decompressed bytes) until exhausted or
    freed, so the memory it reads stays valid. Every record is parsed again with all bounds
    checks, so bytes changed underneath (a mutable buffer) raise CorruptRecordError, never
    read out of bounds.
    """
    cdef Py_buffer view
    cdef bint pinned
    cdef object plain
    cdef uchar *r
    cdef int64_t p
    cdef int64_t n
    cdef Hdr h
    cdef int64_t index
    cdef int64_t position
    cdef object ts_obj
    cdef int64_t last_ts

    def __iter__(self):
        return self

    def __next__(self):
        cdef Fields f
        cdef Problem pr
        if self.index >= self.h.record_count:
            self.close()
            raise StopIteration
        if parse_record(self.r, self.p, self.n, self.h.base_timestamp, self.h.last_offset_delta, &f, &pr) < 0:
            pr.index = self.index
            raise problem_error(&pr, self.position)
        headers = _EMPTY
        if f.header_count:
            headers = decode_headers(self.r, f.headers_pos, f.header_count, self.n, &pr)
            if headers is None:
                pr.index = self.index
                raise problem_error(&pr, self.position)
        key = None if f.key_len < 0 else PyBytes_FromStringAndSize(<const char *>(self.r + f.key_pos), f.key_len)
        value = None if f.value_len < 0 else PyBytes_FromStringAndSize(<const char *>(self.r + f.value_pos), f.value_len)
        if self.h.attributes & TIMESTAMP_TYPE_BIT:  # LOG_APPEND_TIME: the batch's maxTimestamp
            f.timestamp = self.h.max_timestamp
        if self.ts_obj is None or f.timestamp != self.last_ts:  # records of a batch mostly share one
            self.ts_obj = PyLong_FromLongLong(f.timestamp)
            self.last_ts = f.timestamp
        self.index += 1
        self.p = f.next
        return new_record(key, value, headers, self.ts_obj, PyLong_FromLongLong(self.h.base_offset + f.offset_delta))

    cdef void close(self) noexcept:
        if self.pinned:
            self.pinned = False
            PyBuffer_Release(&self.view)
        self.plain = None
        self.r = NULL
        self.n = 0

    def __dealloc__(self):
        self.close()


cdef int check_records(uchar *r, int64_t p, int64_t n, Hdr *h, bint utf8, Problem *pr) except -2:
    """Walk every record (structure, and header keys' UTF-8 when utf8): 0, or -1 with pr."""
    cdef Fields f
    cdef int64_t i
    for i in range(h.record_count):
        if parse_record(r, p, n, h.base_timestamp, h.last_offset_delta, &f, pr) < 0:
            pr.index = i
            return -1
        if utf8 and f.header_count and decode_headers(r, f.headers_pos, f.header_count, n, pr) is None:
            pr.index = i
            return -1
        p = f.next
    if p != n:
        return fail(pr, P_TRAILING, 0, n - p, 0)
    return 0


def iter_records(buf, Py_ssize_t pos=0):
    """The records of the batch at ``pos`` as Record objects (slow path; offsets filled).

    The batch is validated (CRC included) and every record checked before this returns, so a
    corrupt batch raises CorruptRecordError here, never halfway through a loop; the Record
    objects are then built one at a time as the iterator advances.
    """
    cdef Hdr h
    cdef Problem pr
    cdef _Section s
    cdef _RecordIterator it = _RecordIterator.__new__(_RecordIterator)
    PyObject_GetBuffer(buf, &it.view, PyBUF_SIMPLE)
    it.pinned = True
    try:
        checked_header(&it.view, pos, &h, None)
        try:
            s = records_section(&it.view, buf, pos, &h)
        except _Problem as exc:
            raise CorruptRecordError(exc.reason, position=pos) from None
        if check_records(s.r, s.p, s.n, &h, True, &pr) < 0:
            raise problem_error(&pr, pos)
    except BaseException:
        it.close()
        raise
    if s.plain is not None:  # records live in the decompressed bytes: the batch is not needed
        it.close()
        it.plain = s.plain
    it.r, it.p, it.n = s.r, s.p, s.n
    it.h = h
    it.position = pos
    return it


def pass_through_count(buf):
    """The record count of ``buf`` when it is exactly one batch the leader may append as the
    client wrote it, else 0 (never raises on bad bytes: the caller unpacks, and that path names
    the problem). The rule is batch_pure.pass_through_count's docstring."""
    cdef Py_buffer view
    cdef Hdr h
    cdef Problem pr
    cdef Fields f
    cdef uchar *r
    cdef int64_t i, p, n, max_ts
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        r = <uchar *>view.buf
        if check_header(r, 0, view.len, True, &h, &pr) < 0:
            return 0
        n = KL_LOG_OVERHEAD + <int64_t>h.batch_length
        if (n != view.len or h.attributes != 0 or h.record_count < 1 or h.last_offset_delta != h.record_count - 1
                or h.producer_id != -1 or h.producer_epoch != -1 or h.base_sequence != -1):
            return 0
        p = KL_HEADER_SIZE
        max_ts = INT64_MIN
        for i in range(h.record_count):
            if parse_record(r, p, n, h.base_timestamp, h.last_offset_delta, &f, &pr) < 0:
                return 0
            if f.offset_delta != i or f.key_len != -1 or f.value_len < 0 or f.header_count != 0:
                return 0
            if f.timestamp > max_ts:
                max_ts = f.timestamp
            p = f.next
        if p != n or max_ts != h.max_timestamp:
            return 0
        return h.record_count
    finally:
        PyBuffer_Release(&view)


# ---------------------------------------------------------------------------------------------
# Columns

# numpy is imported by the first call that builds arrays (decode_columns, decode_columns_many,
# scan_batches), not with this module: importing the log stays cheap (bench row
# startup.import_log_s) and a process that never decodes never loads numpy.
np = None
_I64 = _I32 = _I16 = _EMPTY_ARRAY = _SCAN_DTYPES = None


cdef int load_numpy() except -1:
    global np, _I64, _I32, _I16, _EMPTY_ARRAY, _SCAN_DTYPES
    import numpy
    _I64 = numpy.dtype(numpy.int64)
    _I32 = numpy.dtype(numpy.int32)
    _I16 = numpy.dtype(numpy.int16)
    _EMPTY_ARRAY = numpy.empty
    _SCAN_DTYPES = (_I64, _I64, _I64, _I32, _I64, _I64, _I32, _I16)
    np = numpy
    return 0


cdef class _Pinned:
    """Writable pointers into freshly allocated numpy arrays, released together."""
    cdef Py_buffer views[8]
    cdef int count

    cdef void *pin(self, arr) except? NULL:
        PyObject_GetBuffer(arr, &self.views[self.count], PyBUF_WRITABLE)
        self.count += 1
        return self.views[self.count - 1].buf

    cdef void release(self) noexcept:
        while self.count:
            self.count -= 1
            PyBuffer_Release(&self.views[self.count])

    def __dealloc__(self):
        self.release()


cdef list new_columns(int64_t n, _Pinned pins, Cols *c):
    arrays = [_EMPTY_ARRAY(n, _I64), _EMPTY_ARRAY(n, _I64), _EMPTY_ARRAY(n, _I32), _EMPTY_ARRAY(n, _I32),
              _EMPTY_ARRAY(n, _I32), _EMPTY_ARRAY(n, _I32), _EMPTY_ARRAY(n, _I32)]
    c.offsets = <int64_t *>pins.pin(arrays[0])
    c.timestamps = <int64_t *>pins.pin(arrays[1])
    c.key_off = <int32_t *>pins.pin(arrays[2])
    c.key_len = <int32_t *>pins.pin(arrays[3])
    c.value_off = <int32_t *>pins.pin(arrays[4])
    c.value_len = <int32_t *>pins.pin(arrays[5])
    c.header_count = <int32_t *>pins.pin(arrays[6])
    return arrays


cdef int check_column_span(int64_t limit) except -1:
    if limit > MAX_COLUMN_DATA_BYTES:
        raise ValueError(f"{limit} bytes of data are beyond the int32 column offsets: decode smaller regions")
    return 0


def decode_columns(buf, Py_ssize_t pos=0):
    """The batch at ``pos`` (validated, CRC included) as columns, without per-record objects.

    ``data`` is ``buf`` itself for an uncompressed batch, or the decompressed records section.
    """
    cdef Py_buffer view
    cdef Hdr h
    cdef Problem pr
    cdef Cols c
    cdef _Section s
    cdef _Pinned pins = _Pinned()
    cdef int rc
    if np is None:
        load_numpy()
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        checked_header(&view, pos, &h, None)
        try:
            s = records_section(&view, buf, pos, &h)
        except _Problem as exc:
            raise CorruptRecordError(exc.reason, position=pos) from None
        check_column_span(s.n)
        arrays = new_columns(h.record_count, pins, &c)
        if s.n - s.p > 65536:  # let other threads run during a long walk
            with nogil:
                rc = walk_columns(s.r, s.p, s.n, 0, &h, &c, 0, &pr)
        else:
            rc = walk_columns(s.r, s.p, s.n, 0, &h, &c, 0, &pr)
        pins.release()
        if rc < 0:
            raise problem_error(&pr, pos)
    finally:
        PyBuffer_Release(&view)
    positions = _EMPTY_ARRAY(1, _I64)
    positions[0] = pos
    bases = _EMPTY_ARRAY(1, _I64)
    bases[0] = h.base_offset
    lasts = _EMPTY_ARRAY(1, _I64)
    lasts[0] = h.base_offset + h.last_offset_delta
    epochs = _EMPTY_ARRAY(1, _I32)
    epochs[0] = h.leader_epoch
    attrs = _EMPTY_ARRAY(1, _I16)
    attrs[0] = h.attributes
    starts = _EMPTY_ARRAY(2, _I64)
    starts[0] = 0
    starts[1] = h.record_count
    return BatchColumns(*arrays, buf if s.plain is None else s.plain, positions, bases, lasts, epochs,
                        attrs, starts)


# ---------------------------------------------------------------------------------------------
# Scanning a region of consecutive batches

cdef int scan_loop(uchar *b, int64_t *pos, int64_t end, bint verify_crc, ScanOut *o, int64_t *used,
                   int64_t cap, Problem *pr) noexcept nogil:
    """Fill o from *used up to cap: 0 = reached end, 1 = arrays full, -1 = invalid batch at *pos."""
    cdef Hdr h
    cdef int64_t k = used[0]
    cdef int64_t size
    while pos[0] < end:
        if k == cap:
            used[0] = k
            return 1
        if check_header(b, pos[0], end, verify_crc, &h, pr) < 0:
            used[0] = k
            return -1
        size = KL_LOG_OVERHEAD + <int64_t>h.batch_length
        o.positions[k] = pos[0]
        o.base_offsets[k] = h.base_offset
        o.last_offsets[k] = h.base_offset + h.last_offset_delta
        o.leader_epochs[k] = h.leader_epoch
        o.max_timestamps[k] = h.max_timestamp
        o.sizes[k] = size
        o.record_counts[k] = h.record_count
        o.attributes[k] = h.attributes
        k += 1
        pos[0] += size
    used[0] = k
    return 0


SCAN_FIRST_CAPACITY = 1024  # arrays start this long and double: no Python per batch


cdef tuple scan_region(Py_buffer *view, int64_t start, int64_t end, bint verify_crc):
    """(list of 8 arrays trimmed to the valid batches, stop position, problem text or None)."""
    cdef ScanOut o
    cdef Problem pr
    cdef _Pinned pins
    cdef int64_t used = 0, pos = start, cap
    cdef int status
    cdef int64_t most = (end - start) // KL_HEADER_SIZE + 1
    cap = most if most < SCAN_FIRST_CAPACITY else SCAN_FIRST_CAPACITY
    arrays = [_EMPTY_ARRAY(cap, dt) for dt in _SCAN_DTYPES]
    while True:
        pins = _Pinned()
        o.positions = <int64_t *>pins.pin(arrays[0])
        o.base_offsets = <int64_t *>pins.pin(arrays[1])
        o.last_offsets = <int64_t *>pins.pin(arrays[2])
        o.leader_epochs = <int32_t *>pins.pin(arrays[3])
        o.max_timestamps = <int64_t *>pins.pin(arrays[4])
        o.sizes = <int64_t *>pins.pin(arrays[5])
        o.record_counts = <int32_t *>pins.pin(arrays[6])
        o.attributes = <int16_t *>pins.pin(arrays[7])
        with nogil:
            status = scan_loop(<uchar *>view.buf, &pos, end, verify_crc, &o, &used, cap, &pr)
        pins.release()
        if status != 1:
            break
        cap = min(cap * 2, most)
        grown = []
        for arr in arrays:
            new = _EMPTY_ARRAY(cap, arr.dtype)
            new[:used] = arr
            grown.append(new)
        arrays = grown
    arrays = [arr[:used] for arr in arrays]
    reason = _problem_text(pr.code, 0, 0, pr.v1, pr.v2) if status < 0 else None
    return arrays, pos, reason


def scan_batches(buf, Py_ssize_t start=0, end=None, *, bint verify_crc=True):
    """Walk consecutive batches from ``start``; stop at ``end`` or at the first invalid one.

    One C loop (without the GIL) over headers and CRCs; records are not walked.
    """
    cdef Py_buffer view
    cdef int64_t e
    if np is None:
        load_numpy()
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        e = region_end(&view, end)
        if start < 0 or start > e:
            raise ValueError(f"start {start} outside 0..{e}")
        arrays, pos, reason = scan_region(&view, start, e, verify_crc)
    finally:
        PyBuffer_Release(&view)
    return ScanResult(*arrays, pos, None if reason is None else pos, reason)


SPLIT_ROWS = _shared.SPLIT_ROWS


def split_headers(buf):
    """The headers of ``buf``, whole record batches v2 that are dense (lastOffsetDelta + 1 ==
    recordCount) and continue each other, as one int64 array of SPLIT_ROWS rows by batch; None
    when any batch breaks a rule (scan_batches then names it). CRCs are not checked.

    raft/wire.py's split_batches on every message of a commit: one pass, one array (the general
    scan builds eight arrays and its checks run in Python; a commit made four of them)."""
    cdef Py_buffer view, out_view
    cdef Hdr h
    cdef Problem pr
    cdef int64_t pos = 0, n = 0, k, next_base = 0
    cdef int64_t *o
    cdef uchar *b
    if np is None:
        load_numpy()
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        b = <uchar *>view.buf
        while pos < view.len:
            if check_header(b, pos, view.len, False, &h, &pr) < 0 or h.last_offset_delta + 1 != h.record_count \
                    or (n and h.base_offset != next_base):
                return None
            next_base = h.base_offset + h.record_count
            pos += KL_LOG_OVERHEAD + <int64_t>h.batch_length
            n += 1
        out = _EMPTY_ARRAY((SPLIT_ROWS, n), _I64)
        PyObject_GetBuffer(out, &out_view, PyBUF_WRITABLE)
        o = <int64_t *>out_view.buf
        pos = 0
        for k in range(n):
            check_header(b, pos, view.len, False, &h, &pr)  # checked above: fills h
            o[k] = h.base_offset
            o[n + k] = h.record_count
            o[2 * n + k] = h.leader_epoch
            o[3 * n + k] = h.attributes
            o[4 * n + k] = pos
            o[5 * n + k] = KL_LOG_OVERHEAD + <int64_t>h.batch_length
            pos += o[5 * n + k]
        PyBuffer_Release(&out_view)
    finally:
        PyBuffer_Release(&view)
    return out


cdef int walk_many(Py_buffer *view, object plain_list, int64_t[:] pos_arr, int32_t[:] counts, int64_t limit,
                   Cols *c, int64_t[:] deltas, int64_t *failed, Problem *pr) except -2:
    """Decode batches 0..limit-1 (already checked, sections prepared) into the columns; returns 0,
    or -1 with failed/pr naming the first batch whose records are bad.

    Runs without the GIL, so another thread could rewrite a mutable buffer meanwhile: each header
    is checked again and must still declare the record count the columns were sized for."""
    cdef Hdr h
    cdef int64_t j, row = 0, p, n
    cdef uchar *r
    cdef int rc = 0
    cdef uchar **ptrs = <uchar **>malloc(sizeof(uchar *) * (limit + 1))
    cdef int64_t *ends = <int64_t *>malloc(sizeof(int64_t) * (limit + 1))
    if ptrs == NULL or ends == NULL:
        free(ptrs)
        free(ends)
        raise MemoryError()
    try:
        for j in range(limit):
            plain = plain_list[j]
            if plain is None:
                ptrs[j] = NULL
            else:
                ptrs[j] = <uchar *>PyBytes_AS_STRING(plain)
                ends[j] = PyBytes_GET_SIZE(plain)
        with nogil:
            for j in range(limit):
                if check_header(<uchar *>view.buf, pos_arr[j], view.len, False, &h, pr) < 0 or \
                        h.record_count != counts[j]:
                    fail(pr, P_CHANGED, 0, 0, 0)
                    failed[0] = j
                    rc = -1
                    break
                if ptrs[j] == NULL:
                    r = <uchar *>view.buf
                    p = pos_arr[j] + KL_HEADER_SIZE
                    n = pos_arr[j] + KL_LOG_OVERHEAD + <int64_t>h.batch_length
                else:
                    r = ptrs[j]
                    p = 0
                    n = ends[j]
                if walk_columns(r, p, n, deltas[j], &h, c, row, pr) < 0:
                    failed[0] = j
                    rc = -1
                    break
                row += h.record_count
    finally:
        free(ptrs)
        free(ends)
    return rc


def decode_columns_many(buf, Py_ssize_t start=0, end=None):
    """Every batch in ``buf[start:end]`` (validated, CRC included) as one set of columns.

    The region must hold whole valid batches only. ``data`` is ``buf`` itself when no batch is
    compressed, else ``buf[:end]`` followed by each compressed batch's decompressed records.
    """
    cdef Py_buffer view
    cdef int64_t e, limit, nb, j, failed = -1, extra, total
    cdef Problem pr
    cdef Cols c
    cdef Hdr h
    cdef _Pinned pins = _Pinned()
    if np is None:
        load_numpy()
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        e = region_end(&view, end)
        if start < 0 or start > e:
            raise ValueError(f"start {start} outside 0..{e}")
        arrays, stop, reason = scan_region(&view, start, e, True)
        positions, bases, lasts, epochs, _, sizes, counts, attrs = arrays
        nb = len(positions)
        # First batch with a problem found before its records are walked (so the error reported is
        # the first bad batch's, as when walking batch by batch): scan, codec/inflation, count, span.
        limit, late = nb, None
        if reason is not None:
            late = CorruptRecordError(reason, position=stop)
        codecs = attrs & CODEC_MASK
        records_bytes = sizes - KL_HEADER_SIZE
        bad = np.flatnonzero((codecs == CODEC_NONE) & (counts.astype(np.int64) * MIN_RECORD_SIZE_BYTES > records_bytes))
        if len(bad):
            limit = int(bad[0])
            late = CorruptRecordError(_problem_text(P_COUNT, 0, 0, int(counts[limit]), int(records_bytes[limit])),
                                      position=int(positions[limit]))
        plain_list = [None] * nb
        deltas = np.zeros(nb, np.int64)
        extra = e
        for j in np.flatnonzero(codecs[:limit] != CODEC_NONE).tolist():
            try:
                plain = _shared.decompress_records(int(codecs[j]), memoryview(buf)[positions[j] + KL_HEADER_SIZE:
                                                                                   positions[j] + sizes[j]],
                                                 int(positions[j]))
                if int(counts[j]) * MIN_RECORD_SIZE_BYTES > len(plain):
                    raise _Problem(_problem_text(P_COUNT, 0, 0, int(counts[j]), len(plain)))
            except _Problem as exc:
                limit, late = j, CorruptRecordError(exc.reason, position=int(positions[j]))
                break
            except UnsupportedCodecError as exc:
                limit, late = j, exc
                break
            plain_list[j] = plain
            deltas[j] = extra
            extra += len(plain)
        spans = np.where(codecs[:limit] == CODEC_NONE, positions[:limit] + sizes[:limit], deltas[:limit] +
                         np.array([0 if x is None else len(x) for x in plain_list[:limit]], np.int64))
        over = np.flatnonzero(spans > MAX_COLUMN_DATA_BYTES)
        if len(over):
            limit = int(over[0])
            late = ValueError(f"{int(spans[limit])} bytes of data are beyond the int32 column offsets: "
                              "decode smaller regions")
        total = int(counts[:limit].sum())
        columns = new_columns(total, pins, &c)
        rc = walk_many(&view, plain_list, positions, counts, limit, &c, deltas, &failed, &pr)
        pins.release()
        if rc < 0:
            raise problem_error(&pr, int(positions[failed]))
        if late is not None:
            raise late
    finally:
        PyBuffer_Release(&view)
    starts = np.zeros(nb + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    parts = [x for x in plain_list if x is not None]
    data = buf if not parts else bytes(memoryview(buf)[:e]) + b"".join(parts)
    return BatchColumns(*columns, data, positions, bases, lasts, epochs, attrs, starts)


# ---------------------------------------------------------------------------------------------
# Building

cdef struct Slot:
    const char *key        # NULL = null key
    int64_t key_len
    const char *value      # NULL = null value
    int64_t value_len
    const char *headers    # encoded headers block (count + pairs); NULL = no headers
    int64_t headers_len
    int64_t timestamp
    bint has_timestamp     # False: the record takes the base timestamp
    int64_t body           # bytes of the record after its length varint


cdef inline int set_span(object obj, const char **ptr, int64_t *length, list keep) except -1:
    """Point at a key's or value's bytes (None -> NULL); non-bytes buffers are copied to bytes
    first and kept alive in keep."""
    if obj is None:
        ptr[0] = NULL
        length[0] = -1
        return 0
    if not PyBytes_CheckExact(obj):
        obj = _shared.as_bytes(obj)
        keep.append(obj)
    ptr[0] = PyBytes_AS_STRING(obj)
    length[0] = PyBytes_GET_SIZE(obj)
    return 0


cdef inline int64_t span_size(int64_t length) noexcept nogil:
    if length < 0:
        return 1
    return kl_uvarint_size(kl_zigzag(length)) + length


cdef inline unsigned char *put_span(unsigned char *w, const char *ptr, int64_t length) noexcept nogil:
    if ptr == NULL:
        w[0] = 1  # zig-zag -1: null
        return w + 1
    w += kl_write_uvarint(w, kl_zigzag(length))
    memcpy(w, ptr, <size_t>length)
    return w + length


cdef void write_header(unsigned char *out, int64_t total, int64_t base_offset, int32_t leader_epoch,
                       int16_t attributes, int32_t count, int64_t base_ts, int64_t max_ts,
                       int64_t producer_id, int16_t producer_epoch, int32_t base_sequence) noexcept nogil:
    kl_store_be64(out + KL_BASE_OFFSET_AT, <uint64_t>base_offset)
    kl_store_be32(out + KL_LENGTH_AT, <uint32_t>(total - KL_LOG_OVERHEAD))
    kl_store_be32(out + KL_LEADER_EPOCH_AT, <uint32_t>leader_epoch)
    out[KL_MAGIC_AT] = KL_MAGIC
    kl_store_be16(out + KL_ATTRIBUTES_AT, <uint16_t>attributes)
    kl_store_be32(out + KL_LAST_OFFSET_DELTA_AT, <uint32_t>(count - 1))
    kl_store_be64(out + KL_BASE_TIMESTAMP_AT, <uint64_t>base_ts)
    kl_store_be64(out + KL_MAX_TIMESTAMP_AT, <uint64_t>max_ts)
    kl_store_be64(out + KL_PRODUCER_ID_AT, <uint64_t>producer_id)
    kl_store_be16(out + KL_PRODUCER_EPOCH_AT, <uint16_t>producer_epoch)
    kl_store_be32(out + KL_BASE_SEQUENCE_AT, <uint32_t>base_sequence)
    kl_store_be32(out + KL_RECORD_COUNT_AT, <uint32_t>count)
    kl_store_be32(out + KL_CRC_AT, kl_crc32c(0, out + KL_ATTRIBUTES_AT, <size_t>(total - KL_ATTRIBUTES_AT)))


cdef int64_t as_int64(object value) except? -1:
    if PyLong_CheckExact(value):
        return value  # OverflowError when out of range, as the twin
    return _shared.to_int64(value)


cdef int16_t attributes_of(int codec, bint is_control, bint is_transactional) noexcept:
    return <int16_t>(codec | (CONTROL_BIT if is_control else 0) | (TRANSACTIONAL_BIT if is_transactional else 0))


cdef object finish(object out, int64_t total, int codec):
    if codec != CODEC_NONE:
        return _shared.compress_batch(out)
    return out


cdef int64_t delta_of(int64_t ts, int64_t base) except? -1:
    cdef int64_t d
    if __builtin_sub_overflow(ts, base, &d):
        raise OverflowError(f"timestamp delta {(<object>ts) - (<object>base)} does not fit in int64")
    return d


def build_batch(records, *, base_offset=0, partition_leader_epoch=0, codec=CODEC_NONE, is_control=False,
                is_transactional=False, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                base_timestamp_ms=None):
    """One batch holding ``records`` (Record or tuples (key, value[, headers[, timestamp_ms]])).

    Sizes are computed first, then the batch is written once into a new bytes object.
    """
    # A tuple of our own keeps every record (and so the bytes the slots point into) alive even if
    # code run below (a header's or buffer's methods) changes the caller's list.
    seq = records if type(records) is tuple else tuple(records)
    cdef Py_ssize_t n = len(seq), i, m
    _shared.check_build_args(n, base_offset, partition_leader_epoch, codec, producer_id, producer_epoch,
                           base_sequence)
    cdef Slot *slots = <Slot *>malloc(sizeof(Slot) * n)
    if slots == NULL:
        raise MemoryError()
    cdef list keep = []
    cdef int64_t base, ts, max_ts = INT64_MIN, total = KL_HEADER_SIZE, body, delta
    cdef bint has_base = base_timestamp_ms is not None
    cdef unsigned char *w
    cdef unsigned char *start
    cdef bytes out
    try:
        if has_base:
            base = as_int64(base_timestamp_ms)
        for i in range(n):
            rec = seq[i]
            m = PyTuple_GET_SIZE(rec) if PyTuple_Check(rec) else 0
            if m < 2 or m > 5:
                raise TypeError(f"a record is a Record or a tuple (key, value[, headers[, timestamp_ms]]), got {rec!r}")
            stamp = <object>PyTuple_GET_ITEM(rec, 3) if m > 3 else None
            slots[i].headers = NULL
            slots[i].has_timestamp = stamp is not None
            if slots[i].has_timestamp:
                slots[i].timestamp = as_int64(stamp)
                if not has_base:
                    base, has_base = slots[i].timestamp, True
        if not has_base:
            base = _shared.now_ms()
        for i in range(n):
            rec = seq[i]
            m = PyTuple_GET_SIZE(rec)
            if not slots[i].has_timestamp:
                slots[i].timestamp = base
            ts = slots[i].timestamp
            if ts > max_ts:
                max_ts = ts
            delta = delta_of(ts, base)
            set_span(<object>PyTuple_GET_ITEM(rec, 0), &slots[i].key, &slots[i].key_len, keep)
            set_span(<object>PyTuple_GET_ITEM(rec, 1), &slots[i].value, &slots[i].value_len, keep)
            slots[i].headers_len = 1
            if m > 2:
                headers = <object>PyTuple_GET_ITEM(rec, 2)
                if headers:
                    blob = _shared.encode_headers(headers)
                    keep.append(blob)
                    slots[i].headers = PyBytes_AS_STRING(blob)
                    slots[i].headers_len = PyBytes_GET_SIZE(blob)
            body = (1 + kl_uvarint_size(kl_zigzag(delta)) + kl_uvarint_size(kl_zigzag(i)) +
                    span_size(slots[i].key_len) + span_size(slots[i].value_len) + slots[i].headers_len)
            slots[i].body = body
            total += kl_uvarint_size(kl_zigzag(body)) + body
        if total - KL_LOG_OVERHEAD > INT32_MAX:
            raise ValueError("batch too large: batchLength does not fit in int32")
        out = PyBytes_FromStringAndSize(NULL, total)
        start = <unsigned char *>PyBytes_AS_STRING(out)
        w = start + KL_HEADER_SIZE
        for i in range(n):
            w += kl_write_uvarint(w, kl_zigzag(slots[i].body))
            w[0] = 0                                            # record attributes
            w += 1
            w += kl_write_uvarint(w, kl_zigzag(slots[i].timestamp - base))
            w += kl_write_uvarint(w, kl_zigzag(i))
            w = put_span(w, slots[i].key, slots[i].key_len)
            w = put_span(w, slots[i].value, slots[i].value_len)
            if slots[i].headers == NULL:
                w[0] = 0
                w += 1
            else:
                memcpy(w, slots[i].headers, <size_t>slots[i].headers_len)
                w += slots[i].headers_len
        assert w == start + total
        write_header(start, total, base_offset, partition_leader_epoch,
                     attributes_of(codec, is_control, is_transactional), <int32_t>n, base, max_ts,
                     producer_id, producer_epoch, base_sequence)
    finally:
        free(slots)
    return finish(out, total, codec)


def build_batch_from_values(values, *, base_offset=0, partition_leader_epoch=0, codec=CODEC_NONE,
                            is_control=False, is_transactional=False, producer_id=-1, producer_epoch=-1,
                            base_sequence=-1, base_timestamp_ms=None, timestamp_ms=None):
    """Fast path of build_batch for the shape metadata records have: null keys, no headers, every
    record at ``timestamp_ms`` (default: the base timestamp, default now)."""
    seq = values if type(values) is tuple else tuple(values)  # owned: see build_batch
    cdef Py_ssize_t n = len(seq), i
    _shared.check_build_args(n, base_offset, partition_leader_epoch, codec, producer_id, producer_epoch,
                           base_sequence)
    if base_timestamp_ms is None:
        base_timestamp_ms = timestamp_ms
    cdef int64_t base = _shared.now_ms() if base_timestamp_ms is None else as_int64(base_timestamp_ms)
    cdef int64_t ts = base if timestamp_ms is None else as_int64(timestamp_ms)
    cdef int64_t delta = delta_of(ts, base)
    cdef int ts_size = kl_uvarint_size(kl_zigzag(delta))
    cdef int64_t total = KL_HEADER_SIZE, body
    cdef list keep = []
    cdef const char **ptrs = <const char **>malloc(sizeof(char *) * n)
    cdef int64_t *lens = <int64_t *>malloc(sizeof(int64_t) * n)
    cdef unsigned char *w
    cdef unsigned char *start
    cdef bytes out
    if ptrs == NULL or lens == NULL:
        free(ptrs)
        free(lens)
        raise MemoryError()
    try:
        for i in range(n):
            set_span(seq[i], &ptrs[i], &lens[i], keep)
            # attributes, timestampDelta, offsetDelta, null key, value, header count
            body = 1 + ts_size + kl_uvarint_size(kl_zigzag(i)) + 1 + span_size(lens[i]) + 1
            total += kl_uvarint_size(kl_zigzag(body)) + body
        if total - KL_LOG_OVERHEAD > INT32_MAX:
            raise ValueError("batch too large: batchLength does not fit in int32")
        out = PyBytes_FromStringAndSize(NULL, total)
        start = <unsigned char *>PyBytes_AS_STRING(out)
        w = start + KL_HEADER_SIZE
        for i in range(n):
            body = 1 + ts_size + kl_uvarint_size(kl_zigzag(i)) + 1 + span_size(lens[i]) + 1
            w += kl_write_uvarint(w, kl_zigzag(body))
            w[0] = 0
            w += 1
            w += kl_write_uvarint(w, kl_zigzag(delta))
            w += kl_write_uvarint(w, kl_zigzag(i))
            w[0] = 1                                           # null key
            w += 1
            w = put_span(w, ptrs[i], lens[i])
            w[0] = 0                                           # no headers
            w += 1
        assert w == start + total
        write_header(start, total, base_offset, partition_leader_epoch,
                     attributes_of(codec, is_control, is_transactional), <int32_t>n, base, ts,
                     producer_id, producer_epoch, base_sequence)
    finally:
        free(ptrs)
        free(lens)
    return finish(out, total, codec)


def build_control_batch(control_type, value, *, base_offset=0, partition_leader_epoch=0, timestamp_ms=None):
    """A control batch (control bit set) holding one control record of ``control_type``."""
    return build_batch([Record(control_record_key(control_type), value, (), timestamp_ms)],
                       base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
                       is_control=True, base_timestamp_ms=timestamp_ms)
