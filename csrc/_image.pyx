"""Native open-addressing hash index over numpy slot arrays (topic name -> row, topic id -> row),
and the row gather / scatter of chunked column tables (engine/image/table.py).

Pure twin: kraftlog.engine.image.index_pure. The index owns no memory of its own: the caller holds
two arrays of the same power-of-two size S,
    slot_hash uint32[S]   the low 32 bits of the key's 64-bit hash
    slot_row  int32[S]    EMPTY (-1), TOMBSTONE (-2) or the row the key belongs to
so an image can copy them on write like any other column. Linear probing; a lookup walks from
hash & (S - 1) until an EMPTY slot. Hash matches are candidates only: the caller verifies the key
(names against the topics table, ids against the id columns, which lookup_ids does here).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

cimport numpy as cnp

import numpy as np

cnp.import_array()

IMPLEMENTATION = "native"
DEF EMPTY = -1
DEF TOMBSTONE = -2


cdef inline uint64_t mix64(uint64_t z) nogil:
    # splitmix64's finaliser: every input bit affects every output bit.
    z = (z ^ (z >> 30)) * <uint64_t>0xbf58476d1ce4e5b9ULL
    z = (z ^ (z >> 27)) * <uint64_t>0x94d049bb133111ebULL
    return z ^ (z >> 31)


cdef inline uint64_t fnv1a(const uint8_t *p, Py_ssize_t n) nogil:
    cdef uint64_t h = <uint64_t>0xcbf29ce484222325ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ p[i]) * <uint64_t>0x100000001b3ULL
    return mix64(h)


cdef inline uint64_t uuid_hash(int64_t hi, int64_t lo) nogil:
    return mix64(<uint64_t>hi ^ mix64(<uint64_t>lo))


def hash_name(const uint8_t[::1] name):
    """64-bit hash of a name's UTF-8 bytes."""
    return fnv1a(&name[0] if name.shape[0] else NULL, name.shape[0])


def hash_names(const uint8_t[::1] blob, const int64_t[::1] offsets):
    """Hashes of the names blob[offsets[i]:offsets[i+1]] as uint64[len(offsets) - 1]."""
    cdef Py_ssize_t n = offsets.shape[0] - 1, i
    out = np.empty(max(n, 0), dtype=np.uint64)
    cdef uint64_t[::1] o = out
    if n > 0 and (offsets[0] < 0 or offsets[n] > blob.shape[0]):
        raise ValueError("name offsets run outside the blob")
    with nogil:
        for i in range(n):
            o[i] = fnv1a(&blob[0] + offsets[i], offsets[i + 1] - offsets[i])
    return out


def hash_ids(const int64_t[::1] hi, const int64_t[::1] lo):
    """Hashes of the UUIDs (hi[i], lo[i]) as uint64[n]."""
    cdef Py_ssize_t n = hi.shape[0], i
    out = np.empty(n, dtype=np.uint64)
    cdef uint64_t[::1] o = out
    with nogil:
        for i in range(n):
            o[i] = uuid_hash(hi[i], lo[i])
    return out


def insert_many(uint32_t[::1] slot_hash, int32_t[::1] slot_row, const uint64_t[::1] hashes,
                const int32_t[::1] rows):
    """Insert (hash, row) pairs; raises MemoryError if the table is full (the caller grows it first)."""
    cdef Py_ssize_t size = slot_row.shape[0], i, probes
    cdef uint64_t mask = size - 1
    cdef uint64_t s
    if size & (size - 1):
        raise ValueError("slot arrays must have a power-of-two size")
    with nogil:
        for i in range(hashes.shape[0]):
            s = hashes[i] & mask
            probes = 0
            while slot_row[s] >= 0:
                s = (s + 1) & mask
                probes += 1
                if probes >= size:
                    with gil:
                        raise MemoryError("hash index is full")
            slot_hash[s] = <uint32_t>hashes[i]
            slot_row[s] = rows[i]


def candidates(const uint32_t[::1] slot_hash, const int32_t[::1] slot_row, uint64_t h):
    """Rows whose slot hash matches ``h``, in probe order (usually zero or one)."""
    cdef Py_ssize_t size = slot_row.shape[0], probes = 0
    cdef uint64_t mask = size - 1, s = h & mask
    cdef uint32_t h32 = <uint32_t>h
    found = []
    while slot_row[s] != EMPTY and probes < size:
        if slot_row[s] >= 0 and slot_hash[s] == h32:
            found.append(slot_row[s])
        s = (s + 1) & mask
        probes += 1
    return found


def remove(uint32_t[::1] slot_hash, int32_t[::1] slot_row, uint64_t h, int32_t row):
    """Tombstone the slot holding ``row`` for hash ``h``; returns whether it was found."""
    cdef Py_ssize_t size = slot_row.shape[0], probes = 0
    cdef uint64_t mask = size - 1, s = h & mask
    while slot_row[s] != EMPTY and probes < size:
        if slot_row[s] == row:
            slot_row[s] = TOMBSTONE
            return True
        s = (s + 1) & mask
        probes += 1
    return False


def lookup_ids(const uint32_t[::1] slot_hash, const int32_t[::1] slot_row,
               const int64_t[::1] id_hi, const int64_t[::1] id_lo,
               const int64_t[:] query_hi, const int64_t[:] query_lo):
    """Row of each queried UUID (verified against id_hi/id_lo, indexed by row), -1 when absent.
    The queries may be strided (a column of a decoded [n, 2] id table) and are read in place."""
    cdef Py_ssize_t size = slot_row.shape[0], n = query_hi.shape[0], i, probes
    cdef uint64_t mask = size - 1, s, h
    cdef int32_t row, found
    cdef Py_ssize_t nrows = id_hi.shape[0]
    out = np.empty(n, dtype=np.int32)
    cdef int32_t[::1] o = out
    with nogil:
        for i in range(n):
            h = uuid_hash(query_hi[i], query_lo[i])
            s = h & mask
            found = -1
            probes = 0
            while probes < size:
                row = slot_row[s]
                if row == EMPTY:
                    break
                if row >= 0 and slot_hash[s] == <uint32_t>h and row < nrows \
                        and id_hi[row] == query_hi[i] and id_lo[row] == query_lo[i]:
                    found = row
                    break
                s = (s + 1) & mask
                probes += 1
            o[i] = found
    return out


def first_candidates(const uint32_t[::1] slot_hash, const int32_t[::1] slot_row, const uint64_t[::1] hashes):
    """For each hash, the first row whose slot hash matches, or -1 (callers verify the key)."""
    cdef Py_ssize_t size = slot_row.shape[0], n = hashes.shape[0], i, probes
    cdef uint64_t mask = size - 1, s
    cdef int32_t row, found
    out = np.empty(n, dtype=np.int32)
    cdef int32_t[::1] o = out
    with nogil:
        for i in range(n):
            s = hashes[i] & mask
            found = -1
            probes = 0
            while probes < size:
                row = slot_row[s]
                if row == EMPTY:
                    break
                if row >= 0 and slot_hash[s] == <uint32_t>hashes[i]:
                    found = row
                    break
                s = (s + 1) & mask
                probes += 1
            o[i] = found
    return out


# -- row reader ------------------------------------------------------------------------------------
# A published chunk never changes and keeps its arrays alive, so the base address of each column
# can be taken once (row_spec) and a whole row read later in one call (read_row) without touching
# numpy per field. A spec is (scalars, lists, keepalive):
#     scalars: ((address, row stride, item size), ...)   item size 1, 2, 4 or 8, signed
#     lists:   ((address, row stride, width), ...)        int32 rows padded with -1; width 0 when the
#                                                          column is a shared default (always empty)
from libc.stdint cimport int8_t, int16_t, intptr_t


def row_spec(scalars, lists):
    """The spec of a chunk's columns: 1-D ``scalars`` (any signed int type) and 2-D int32 ``lists``."""
    sspec = []
    for a in scalars:
        if a.ndim != 1 or a.dtype.kind != "i":
            raise ValueError("scalar columns must be 1-D signed integers")
        sspec.append((a.__array_interface__["data"][0], a.strides[0], a.dtype.itemsize))
    lspec = []
    for a in lists:
        if a.ndim != 2 or a.dtype.itemsize != 4:
            raise ValueError("list columns must be 2-D int32")
        if a.strides[0] == 0:
            lspec.append((0, 0, 0))
        else:
            if a.strides[1] != 4:
                raise ValueError("list rows must be contiguous")
            lspec.append((a.__array_interface__["data"][0], a.strides[0], a.shape[1]))
    return (tuple(sspec), tuple(lspec), (tuple(scalars), tuple(lists)))


cdef inline object _read_scalar(intptr_t addr, Py_ssize_t stride, int size, Py_ssize_t local):
    cdef const char *p = <const char *>addr + local * stride
    if size == 4:
        return (<const int32_t *>p)[0]
    if size == 8:
        return (<const int64_t *>p)[0]
    if size == 1:
        return (<const int8_t *>p)[0]
    return (<const int16_t *>p)[0]


def read_row(spec, Py_ssize_t local):
    """The row ``local`` as a flat tuple: every scalar, then every list as a tuple (-1s dropped)."""
    return _read_row(spec, local)


cdef tuple _read_row(spec, Py_ssize_t local):
    cdef tuple sspec = spec[0], lspec = spec[1]
    cdef Py_ssize_t ns = len(sspec), nl = len(lspec), i, j, width
    cdef const int32_t *row
    out = [None] * (ns + nl)
    for i in range(ns):
        s = sspec[i]
        out[i] = _read_scalar(<intptr_t>s[0], s[1], s[2], local)
    for i in range(nl):
        s = lspec[i]
        width = s[2]
        if width == 0:
            out[ns + i] = ()
            continue
        row = <const int32_t *>(<const char *><intptr_t>s[0] + local * <Py_ssize_t>s[1])
        j = 0
        while j < width and row[j] >= 0:
            j += 1
        out[ns + i] = tuple([row[k] for k in range(j)])
    return tuple(out)



# -- one-call partition lookup ---------------------------------------------------------------------
# index_spec: (address of slot_hash, address of slot_row, size, keepalive) of a published (never
# written again) name index. lookup_partition does in one call what TopicsImage.partition does:
# hash the name's UTF-8, probe, verify the name against the topic-name chunks, read the topic row
# (id_hi, id_lo, topic_epoch, first_row, partition_count) and the partition row, and return the
# registration's fields as one tuple (or None). Chunk specs come from chunk.spec, made by
# make_spec(chunk, kind) (0 topics, 1 partitions) the first time.
from cpython.unicode cimport PyUnicode_AsUTF8AndSize


def index_spec(slot_hash, slot_row):
    if slot_hash.dtype.itemsize != 4 or slot_row.dtype.itemsize != 4 or len(slot_hash) != len(slot_row):
        raise ValueError("slot arrays must be uint32/int32 of one length")
    return (slot_hash.__array_interface__["data"][0], slot_row.__array_interface__["data"][0], len(slot_row),
            (slot_hash, slot_row))


def lookup_partition(tuple ispec, tuple name_chunks, str name, tuple topic_chunks, tuple partition_chunks,
                     Py_ssize_t partition_id, tuple directory_ids, make_spec):
    cdef Py_ssize_t n
    cdef const char *utf8 = PyUnicode_AsUTF8AndSize(name, &n)
    cdef uint64_t h = fnv1a(<const uint8_t *>utf8, n)
    cdef const uint32_t *slot_hash = <const uint32_t *><intptr_t>ispec[0]
    cdef const int32_t *slot_row = <const int32_t *><intptr_t>ispec[1]
    cdef Py_ssize_t size = ispec[2], probes = 0
    cdef uint64_t mask = size - 1, s = h & mask
    cdef int32_t row = -1, r
    while probes < size:
        r = slot_row[s]
        if r == EMPTY:
            return None
        if r >= 0 and slot_hash[s] == <uint32_t>h and (<tuple>name_chunks[r >> 12])[r & 4095] == name:
            row = r
            break
        s = (s + 1) & mask
        probes += 1
    if row < 0:
        return None
    chunk = topic_chunks[row >> 12]
    spec = chunk.spec
    if spec is None:
        spec = make_spec(chunk, 0)
    cdef tuple t = _read_row(spec, row & 4095)
    if partition_id < 0 or partition_id >= <Py_ssize_t>t[4]:
        return None
    cdef Py_ssize_t prow = <Py_ssize_t>t[3] + partition_id
    chunk = partition_chunks[prow >> 12]
    spec = chunk.spec
    if spec is None:
        spec = make_spec(chunk, 1)
    cdef tuple v = _read_row(spec, prow & 4095)
    if <int32_t>v[0] < 0 or <int32_t>v[1] < 0:
        return None
    codes = v[12]
    directories = tuple([directory_ids[c] for c in codes]) if codes else ()
    return ((t[0], t[1]), name, v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], directories, t[2])


# ---- chunked tables: rows across chunks in one call ---------------------------------------------
# A column of a ChunkedTable is one array per chunk (1-D, or 2-D -1 padded lists whose width may
# differ from chunk to chunk; an untouched sparse column is a zero-stride broadcast). Row r lives in
# chunk r >> shift at r & (2**shift - 1). These two loops replace a numpy fancy-index per chunk.

cdef struct ColumnPart:
    char *data       # NULL: this chunk is not given (a row in it is an error)
    Py_ssize_t rows
    Py_ssize_t width  # 0 for a 1-D array
    int ndim
    Py_ssize_t stride0
    Py_ssize_t stride1


cdef ColumnPart *column_parts(list arrays, object dtype, bint writable) except NULL:
    # Through numpy's C API: a bulk step over a 1M-row table passes ~250 chunk arrays per call, and
    # reading each one's address from Python (__array_interface__) cost ~1 us, ~0.3 ms a call.
    cdef Py_ssize_t k, n = len(arrays)
    cdef cnp.ndarray a
    cdef ColumnPart *parts = <ColumnPart *>malloc(max(n, 1) * sizeof(ColumnPart))
    if parts == NULL:
        raise MemoryError()
    try:
        for k in range(n):
            item = arrays[k]
            if item is None:
                parts[k].data = NULL
                continue
            if not isinstance(item, cnp.ndarray):
                raise ValueError(f"chunk {k}: a {type(item).__name__} where an array was expected")
            a = <cnp.ndarray>item
            ndim = cnp.PyArray_NDIM(a)
            if ndim not in (1, 2) or (<object>cnp.PyArray_DESCR(a) is not dtype and a.dtype != dtype):
                raise ValueError(f"chunk {k}: a {a.ndim}-D {a.dtype} array where {dtype} was expected")
            if writable and not cnp.PyArray_ISWRITEABLE(a):
                raise ValueError(f"chunk {k}: the array is read-only")
            parts[k].data = <char *>cnp.PyArray_DATA(a)
            parts[k].rows = cnp.PyArray_DIM(a, 0)
            parts[k].stride0 = cnp.PyArray_STRIDE(a, 0)
            parts[k].width = cnp.PyArray_DIM(a, 1) if ndim == 2 else 0
            parts[k].ndim = ndim
            parts[k].stride1 = cnp.PyArray_STRIDE(a, 1) if ndim == 2 else 0
    except BaseException:
        free(parts)
        raise
    return parts


cdef int locate(ColumnPart *parts, Py_ssize_t nparts, int64_t row, int shift, ColumnPart **part,
                Py_ssize_t *local) noexcept nogil:
    cdef int64_t k = row >> shift
    if row < 0 or k >= nparts or parts[k].data == NULL:
        return -1
    local[0] = row & ((<int64_t>1 << shift) - 1)
    if local[0] >= parts[k].rows:
        return -1
    part[0] = &parts[k]
    return 0


def gather_rows(list arrays, const int64_t[::1] rows, out, int shift):
    """out[i] = the row rows[i] of the column whose chunk arrays are ``arrays`` (same dtype as
    ``out``, a C-contiguous 1-D or 2-D array; a list row narrower than ``out`` is -1 padded)."""
    if not out.flags.c_contiguous or out.ndim not in (1, 2) or out.shape[0] != rows.shape[0]:
        raise ValueError("out must be C-contiguous, 1-D or 2-D, one row per row asked")
    cdef ColumnPart *parts = column_parts(arrays, out.dtype, False)
    cdef char *o = <char *><size_t>out.__array_interface__["data"][0]
    cdef Py_ssize_t item = out.dtype.itemsize, width = out.shape[1] if out.ndim == 2 else 0
    cdef Py_ssize_t i, j, local, take, bad = -1, nparts = len(arrays), n = rows.shape[0]
    cdef int ndim = out.ndim
    cdef ColumnPart *part
    cdef char *dst
    with nogil:
        for i in range(n):
            if locate(parts, nparts, rows[i], shift, &part, &local) < 0 or part.ndim != ndim:
                bad = i
                break
            if ndim == 1:
                memcpy(o + i * item, part.data + local * part.stride0, item)
                continue
            dst = o + i * width * item
            take = part.width if part.width < width else width
            for j in range(take):
                memcpy(dst + j * item, part.data + local * part.stride0 + j * part.stride1, item)
            if take < width:
                memset(dst + take * item, 0xFF, (width - take) * item)  # PAD (-1)
    free(parts)
    if bad >= 0:
        raise IndexError(f"row {rows[bad]} is not in the given chunks (or its chunk's array is not {ndim}-D)")


def scatter_rows(list arrays, const int64_t[::1] rows, values, int shift):
    """The row rows[i] of the column whose (writable) chunk arrays are ``arrays`` becomes
    values[i] (same dtype, C-contiguous; a 2-D value is -1 padded to its chunk's width, which must
    hold it). In order: of repeated rows the last wins. Chunks no row lies in may be None."""
    if not values.flags.c_contiguous or values.ndim not in (1, 2) or values.shape[0] != rows.shape[0]:
        raise ValueError("values must be C-contiguous, 1-D or 2-D, one row per row written")
    cdef ColumnPart *parts = column_parts(arrays, values.dtype, True)
    cdef const char *v = <const char *><size_t>values.__array_interface__["data"][0]
    cdef Py_ssize_t item = values.dtype.itemsize, width = values.shape[1] if values.ndim == 2 else 0
    cdef Py_ssize_t i, j, local, bad = -1, narrow = -1, nparts = len(arrays), n = rows.shape[0]
    cdef int ndim = values.ndim
    cdef ColumnPart *part
    cdef char *dst
    with nogil:
        for i in range(n):
            if locate(parts, nparts, rows[i], shift, &part, &local) < 0:
                bad = i
                break
            if part.ndim != ndim or (ndim == 2 and part.width < width):
                narrow = i
                break
            if ndim == 1:
                memcpy(part.data + local * part.stride0, v + i * item, item)
                continue
            dst = part.data + local * part.stride0
            for j in range(width):
                memcpy(dst + j * part.stride1, v + (i * width + j) * item, item)
            for j in range(width, part.width):
                memset(dst + j * part.stride1, 0xFF, item)  # PAD (-1)
    free(parts)
    if bad >= 0:
        raise IndexError(f"row {rows[bad]} is not in the given chunks")
    if narrow >= 0:
        raise ValueError(f"row {rows[narrow]}: its chunk's array is not {ndim}-D or cannot hold a row of width {width}")


# ---- the topic stream's PartitionChangeRecords, one by one in log order ------------------------
# apply_changes walks the region's topic stream (``order``: record indexes in log order) from
# ``start`` and applies each PartitionChangeRecord straight from its decoded row (the
# partition_changes table of kraftlog._metadata) into the partitions table's chunk arrays, the
# way Kafka's PartitionRegistration.merge does: the partition epoch moves once per record; a
# leader (NO_LEADER_CHANGE -2 leaves leader and leader epoch alone) moves the leader epoch once;
# recovery state -1 and a list count -1 (null) leave their field alone. It stops at the first
# record it does not apply whole, and returns where: a record of another type, one with extras
# (ELR, adding/removing replicas, directories, unknown tags), one whose topic or partition is not
# in the image, or a replica change that would change directories (the partition has some, or a
# replica is new: Kafka's createDirectoriesFrom gives it UNASSIGNED). The caller replays that
# record on its own (which also reports a bad one) and calls again. Nothing of a record it stops
# at is written.
#
# Copy on write: the partitions' chunk arrays may be shared with published images. ``owned(name)``
# lists a written column's arrays the table writer owns (None in chunks it does not); the
# first write to another chunk calls own(name, chunk, width), which copies (or widens) that
# column's array there and returns it. So a pass copies exactly the chunks it writes, with one
# callback per (column, chunk) first touched, and none for chunks owned already.
#
# Topic id -> row: the delta's id index (slot arrays, see the top of this file), verified
# against the topics' id columns; the topic's partitions are rows first_row .. first_row +
# partition_count - 1 (engine/image/topics.py), a hole has partition_id -1.


DEF NO_LEADER_CHANGE = -2
DEF PARTITION_CHANGE_RECORD = 5  # apiKey
# the columns a PartitionChangeRecord writes, in the order of ``written_names`` / ``owned``: four
# scalars, then the six lists in the order of ``lists`` / ``list_counts`` (engine/image/topics.py LIST_FIELDS)
DEF W_PARTITION_EPOCH = 0
DEF W_LEADER_EPOCH = 1
DEF W_LEADER = 2
DEF W_RECOVERY = 3
DEF W_LISTS = 4
DEF N_LISTS = 6
DEF N_WRITTEN = 10
DEF L_REPLICAS = 0  # replicas 0, isr 1, removing 2, adding 3, ELR 4, last-known ELR 5 (topics.LIST_FIELDS)


cdef inline int16_t list_count(const int16_t *counts, int64_t row) noexcept nogil:
    return -1 if counts == NULL else counts[row]


cdef int set_part(ColumnPart *part, object item) except -1:
    cdef cnp.ndarray a = <cnp.ndarray>item
    part.data = <char *>cnp.PyArray_DATA(a)
    part.rows = cnp.PyArray_DIM(a, 0)
    part.ndim = cnp.PyArray_NDIM(a)
    part.stride0 = cnp.PyArray_STRIDE(a, 0)
    part.width = cnp.PyArray_DIM(a, 1) if part.ndim == 2 else 0
    part.stride1 = cnp.PyArray_STRIDE(a, 1) if part.ndim == 2 else 0
    return 0


cdef list current_arrays(list chunk_arrays, str name, list owned):
    # by chunk: the writer's own array where it owns one (it is also the chunk's), else the chunk's
    cdef Py_ssize_t k, n = len(chunk_arrays), no = len(owned) if owned is not None else 0
    out = [None] * n
    for k in range(n):
        item = owned[k] if k < no else None
        out[k] = item if item is not None else (<dict>chunk_arrays[k])[name]
    return out


cdef class _WrittenColumn:
    # one written column of the partitions table during a pass: its current arrays by chunk
    # (parts) and which of them the writer owns (writable in place)
    cdef ColumnPart *parts
    cdef uint8_t *owned
    cdef Py_ssize_t n
    cdef str name

    def __dealloc__(self):
        free(self.parts)
        free(self.owned)


cdef _WrittenColumn written_column(list chunk_arrays, str name, list owned, object dtype):
    cdef _WrittenColumn c = _WrittenColumn.__new__(_WrittenColumn)
    cdef Py_ssize_t k, no = len(owned)
    c.name, c.n = name, len(chunk_arrays)
    c.parts = column_parts(current_arrays(chunk_arrays, name, owned), dtype, False)
    c.owned = <uint8_t *>malloc(max(c.n, 1))
    if c.owned == NULL:
        raise MemoryError()
    for k in range(c.n):
        c.owned[k] = 1 if k < no and owned[k] is not None else 0
    return c


cdef int own_row(_WrittenColumn c, int64_t row, int shift, Py_ssize_t width, object own) except -1:
    # make the chunk of ``row`` writable (and at least ``width`` wide) in this column
    cdef int64_t k = row >> shift
    if c.owned[k] and (width == 0 or c.parts[k].width >= width):
        return 0
    set_part(&c.parts[k], own(c.name, k, width))
    c.owned[k] = 1
    return 0


cdef inline char *cell(ColumnPart *parts, Py_ssize_t nparts, int64_t row, int shift) noexcept nogil:
    # the address of ``row`` in its chunk (its first item for a list column), NULL when not given
    cdef ColumnPart *part
    cdef Py_ssize_t local
    if locate(parts, nparts, row, shift, &part, &local) < 0:
        return NULL
    return part.data + local * part.stride0


cdef inline int32_t list_item(ColumnPart *parts, int64_t row, int shift, Py_ssize_t j) noexcept nogil:
    # item j of a list row (a located row; -1 past the chunk's width)
    cdef ColumnPart *part = &parts[row >> shift]
    if j >= part.width:
        return -1
    return (<int32_t *>(part.data + (row & ((<int64_t>1 << shift) - 1)) * part.stride0 + j * part.stride1))[0]


cdef inline void write_list_row(ColumnPart *parts, int64_t row, int shift, const int32_t *src,
                                Py_ssize_t count) noexcept nogil:
    # the row (owned, at least ``count`` wide) becomes src[0:count], then -1 to its chunk's width
    cdef ColumnPart *part = &parts[row >> shift]
    cdef char *dst = part.data + (row & ((<int64_t>1 << shift) - 1)) * part.stride0
    cdef Py_ssize_t j
    for j in range(part.width):
        (<int32_t *>(dst + j * part.stride1))[0] = src[j] if j < count else -1


cdef int64_t find_topic(const uint32_t *slot_hash, const int32_t *slot_row, Py_ssize_t size, ColumnPart *id_hi,
                        ColumnPart *id_lo, Py_ssize_t ntopic_parts, int64_t hi, int64_t lo,
                        int shift) noexcept nogil:
    # the live topic row of id (hi, lo), or -1 (raw pointers: a memoryview argument costs its
    # acquisition count per call)
    cdef Py_ssize_t probes = 0
    cdef uint64_t mask = size - 1, h = uuid_hash(hi, lo), s = h & mask
    cdef int32_t row
    cdef char *a
    cdef char *b
    while probes < size:
        row = slot_row[s]
        if row == EMPTY:
            return -1
        if row >= 0 and slot_hash[s] == <uint32_t>h:
            a = cell(id_hi, ntopic_parts, row, shift)
            b = cell(id_lo, ntopic_parts, row, shift)
            if a != NULL and b != NULL and (<int64_t *>a)[0] == hi and (<int64_t *>b)[0] == lo:
                return row
        s = (s + 1) & mask
        probes += 1
    return -1


cdef bint keeps_directories(ColumnPart *directories, Py_ssize_t ndir, ColumnPart *replicas, int64_t prow,
                            int shift, const int32_t *new, Py_ssize_t count) noexcept nogil:
    # True when replacing the replicas of ``prow`` by new[0:count] leaves its directories as
    # they are: it has none (all MIGRATING, stored empty) and every new replica is an old one
    cdef Py_ssize_t i, j, width = replicas[prow >> shift].width
    cdef bint found
    if cell(directories, ndir, prow, shift) == NULL:
        return False
    if list_item(directories, prow, shift, 0) >= 0:
        return False
    for i in range(count):
        found = False
        if new[i] < 0:
            return False  # not a broker id (and not to be matched with a row's -1 padding)
        for j in range(width):
            if list_item(replicas, prow, shift, j) == new[i]:
                found = True
                break
        if not found:
            return False
    return True


def apply_changes(list partition_chunks, list topic_chunks, tuple written_names, owned, own,
                  const uint32_t[::1] slot_hash, const int32_t[::1] slot_row,
                  const int32_t[::1] record_index, const int64_t[:, ::1] topic_id, const int32_t[::1] partition_id,
                  const int32_t[::1] leader, const int8_t[::1] recovery, tuple lists, tuple list_counts,
                  const uint8_t[::1] extras, const int16_t[::1] api_keys, const int32_t[::1] kind_rows,
                  const int64_t[::1] order, Py_ssize_t start, int64_t[::1] written, int shift):
    """Apply the PartitionChangeRecords of ``order[start:]`` until the first record not applied
    whole (see above). ``partition_chunks`` / ``topic_chunks``: each chunk's dict of column
    arrays; ``written_names``: the ten written columns' names (partition_epoch, leader_epoch,
    leader, leader_recovery_state, then the six lists: replicas, isr, removing_replicas,
    adding_replicas, eligible_leader_replicas, last_known_elr); owned(name): that column's
    writer-owned arrays by chunk (asked once per call and column written). The change columns are the decoder's partition_changes table (topic_id as
    int64 [k, 2]; ``lists`` the six -1 padded int32 [k, w] list columns in that order,
    ``list_counts`` their int16 counts, -1 for null). Returns (stop, count): ``order[stop]`` is
    the record not applied (len(order) when all were), written[:count] the partition row of each
    applied record."""
    cdef Py_ssize_t n = order.shape[0], nrows = record_index.shape[0], pos = start, count = 0, c, j, stretch_end
    cdef Py_ssize_t nt = len(topic_chunks), np_ = len(partition_chunks)
    if not (topic_id.shape[0] == partition_id.shape[0] == leader.shape[0] == recovery.shape[0]
            == extras.shape[0] == nrows):
        raise ValueError("every change column must have one value per row")
    if written.shape[0] < n - start or api_keys.shape[0] != kind_rows.shape[0]:
        raise ValueError("written must hold a row per record from start; api_keys and kind_rows go together")
    if not 0 <= start <= n:
        raise ValueError(f"start {start} is outside the {n} records")
    if slot_row.shape[0] == 0 or slot_hash.shape[0] != slot_row.shape[0]:
        raise ValueError("slot arrays must be of one non-zero size")
    if len(written_names) != N_WRITTEN or len(lists) != N_LISTS \
            or len(list_counts) != N_LISTS:
        raise ValueError("ten written columns, six lists")
    # the six lists' rows: values[j] + row * width[j], count counts[j][row]; counts[j] NULL when the
    # count column is a shared -1 (zero stride: no record of the region carries the list)
    cdef const int32_t *values[N_LISTS]
    cdef const int16_t *counts[N_LISTS]
    cdef Py_ssize_t widths[N_LISTS]
    cdef const int32_t[:, ::1] lv
    cdef const int16_t[:] lc
    keep = []
    for j in range(N_LISTS):
        lv, lc = lists[j], list_counts[j]
        if lv.shape[0] != nrows or lc.shape[0] != nrows:
            raise ValueError("every change column must have one value per row")
        keep.append((lv, lc))
        widths[j] = lv.shape[1]
        values[j] = &lv[0, 0] if lv.shape[0] and lv.shape[1] else NULL
        if lc.shape[0] and lc.strides[0] != 0 and lc.strides[0] != sizeof(int16_t):
            raise ValueError("a list count column must be contiguous, or a shared -1")
        counts[j] = &lc[0] if lc.shape[0] and lc.strides[0] != 0 else NULL
    i32, i64, i8 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.int8)
    # The written columns are made after pass 1, and only when it found a stretch to apply (a
    # record handed back at once costs no look at every chunk of ten columns); a list's only when
    # a record of the stretch carries it (most regions change ISRs only). The lists' parts and
    # owned flags are C arrays: pass 2 touches no Python object per record unless a chunk is
    # first written.
    cdef list cols = [None] * N_WRITTEN
    cdef _WrittenColumn pe, le, ld, rc
    cdef ColumnPart *lparts[N_LISTS]
    cdef uint8_t *lowned[N_LISTS]
    cdef bint carried[N_LISTS]
    cdef _WrittenColumn made
    for j in range(N_LISTS):
        lparts[j] = NULL
        lowned[j] = NULL
        carried[j] = False
    cdef ColumnPart *pid_col = NULL
    cdef ColumnPart *dir_col = NULL
    cdef ColumnPart *t_hi = NULL
    cdef ColumnPart *t_lo = NULL
    cdef ColumnPart *t_first = NULL
    cdef ColumnPart *t_count = NULL
    cdef int64_t i, row, trow, prow
    cdef int32_t pid, first, pcount
    cdef int16_t k
    cdef bint fits
    cdef char *p
    cdef char *q
    try:
        pid_col = column_parts(current_arrays(partition_chunks, "partition_id", None), i32, False)
        dir_col = column_parts(current_arrays(partition_chunks, "directories", None), i32, False)
        t_hi = column_parts(current_arrays(topic_chunks, "id_hi", None), i64, False)
        t_lo = column_parts(current_arrays(topic_chunks, "id_lo", None), i64, False)
        t_first = column_parts(current_arrays(topic_chunks, "first_row", None), i32, False)
        t_count = column_parts(current_arrays(topic_chunks, "partition_count", None), i32, False)
        # Pass 1, the rows: the stretch of records from ``start`` that are PartitionChangeRecords
        # of live partitions held whole by the columns, each one's partition row in written[].
        # No change creates, moves or deletes a row, so the rows hold for the whole stretch; and
        # its lookups, independent of each other, overlap in the CPU (the writes of pass 2 chain).
        for pos in range(start, n):
            i = order[pos]
            if i < 0 or i >= api_keys.shape[0] or api_keys[i] != PARTITION_CHANGE_RECORD:
                break
            row = kind_rows[i]
            # kind_rows points into ``other`` for a version the columns do not decode: record_index tells
            if row < 0 or row >= nrows or record_index[row] != i or extras[row]:
                break
            trow = find_topic(&slot_hash[0], &slot_row[0], slot_row.shape[0], t_hi, t_lo, nt, topic_id[row, 0],
                              topic_id[row, 1], shift)
            if trow < 0:
                break
            p = cell(t_first, nt, trow, shift)
            q = cell(t_count, nt, trow, shift)
            if p == NULL or q == NULL:
                break
            first = (<int32_t *>p)[0]
            pcount = (<int32_t *>q)[0]
            pid = partition_id[row]
            if pid < 0 or pid >= pcount:
                break
            prow = <int64_t>first + pid
            p = cell(pid_col, np_, prow, shift)
            if p == NULL or (<int32_t *>p)[0] < 0:  # a hole: an id never created
                break
            fits = True
            for j in range(N_LISTS):
                if list_count(counts[j], row) > widths[j]:
                    fits = False
                elif list_count(counts[j], row) >= 0:
                    carried[j] = True
            if not fits:
                break
            written[pos - start] = prow
        else:
            pos = n
        stretch_end = pos
        if stretch_end == start:
            return (start, 0)
        for c in range(W_LISTS):
            cols[c] = written_column(partition_chunks, written_names[c], owned(written_names[c]),
                                     i8 if c == W_RECOVERY else i32)
        pe, le, ld, rc = cols[W_PARTITION_EPOCH], cols[W_LEADER_EPOCH], cols[W_LEADER], cols[W_RECOVERY]
        for j in range(N_LISTS):
            if carried[j]:
                made = written_column(partition_chunks, written_names[W_LISTS + j],
                                      owned(written_names[W_LISTS + j]), i32)
                cols[W_LISTS + j] = made
                lparts[j] = made.parts
                lowned[j] = made.owned
        # Pass 2, the merge, in log order.
        for pos in range(start, stretch_end):
            row = kind_rows[order[pos]]
            prow = written[pos - start]
            k = list_count(counts[L_REPLICAS], row)
            # the replicas a replica change compares with may come from an earlier record of the stretch
            if k >= 0 and not keeps_directories(dir_col, np_, lparts[L_REPLICAS], prow, shift,
                                                values[L_REPLICAS] + row * widths[L_REPLICAS], k):
                break
            # owned first (callbacks only on a chunk's first touch), then written: all or nothing
            if not pe.owned[prow >> shift]:
                own_row(pe, prow, shift, 0, own)
            if leader[row] != NO_LEADER_CHANGE and not (le.owned[prow >> shift] and ld.owned[prow >> shift]):
                own_row(le, prow, shift, 0, own)
                own_row(ld, prow, shift, 0, own)
            if recovery[row] != -1 and not rc.owned[prow >> shift]:
                own_row(rc, prow, shift, 0, own)
            for j in range(N_LISTS):
                k = list_count(counts[j], row)
                # an empty list onto an empty row changes nothing (and leaves a sparse chunk shared)
                if (k > 0 or (k == 0 and list_item(lparts[j], prow, shift, 0) >= 0)) \
                        and not (lowned[j][prow >> shift] and lparts[j][prow >> shift].width >= k):
                    own_row(<_WrittenColumn>cols[W_LISTS + j], prow, shift, k, own)
            (<int32_t *>cell(pe.parts, np_, prow, shift))[0] += 1
            if leader[row] != NO_LEADER_CHANGE:
                (<int32_t *>cell(le.parts, np_, prow, shift))[0] += 1
                (<int32_t *>cell(ld.parts, np_, prow, shift))[0] = leader[row]
            if recovery[row] != -1:
                (<int8_t *>cell(rc.parts, np_, prow, shift))[0] = recovery[row]
            for j in range(N_LISTS):
                k = list_count(counts[j], row)
                if k > 0 or (k == 0 and list_item(lparts[j], prow, shift, 0) >= 0):
                    write_list_row(lparts[j], prow, shift, values[j] + row * widths[j], k)
        else:
            pos = stretch_end
        count = pos - start
    finally:
        free(pid_col)
        free(dir_col)
        free(t_hi)
        free(t_lo)
        free(t_first)
        free(t_count)
    return (pos, count)


# ---- the whole topic stream in one pass, in log order ----------------------------------------------
# apply_topic_stream walks ``order`` from ``start`` like apply_changes, and applies every record of
# the topic stream the decoded columns hold whole, so the loader gets control back only at a record
# the pass does not apply: one with extras or of a version the columns do not decode, a record that
# would fail (the loader's replay raises the typed error, word for word), a PartitionChangeRecord
# apply_changes stops at, a creation long enough for the loader's vectorised step (a TopicRecord
# starting ``bulk_min_records`` or more TopicRecords and PartitionRecords in a row), or a shape the
# pass leaves to the scalar path (below). Nothing of a record it stops at is written.
#
# ConfigRecord: MetadataDelta.replay_config (Kafka's ConfigurationsDelta): (resource type, resource
# name) -> {name: value}; a null value deletes the key, a resource left without keys goes, the same
# value again changes nothing. ``configs`` is MetadataDelta.configs (a _MapDelta): its ``items``
# dict once owned, else its ``base`` mapping; ``writable()`` owns it, called on the first real
# change only, so a region of no-op configs leaves the delta's configs as they were. The values
# are MappingProxyType, built here.
#
# RemoveTopicRecord (TopicsDelta.replay_remove_topic and MetadataDelta.replay_remove_topic): the
# topic's partition rows get topic_row -1, its topic row live False, its name and id leave the
# delta's (mutable) indexes, a topic of the base image is listed in ``deleted`` (id -> name), and
# its configs (resource type TOPIC, its name) go with it. An unknown topic is handed back.
#
# TopicRecord (TopicsDelta.replay_topic): a new name and id get a topic row appended (no partitions
# yet, epoch = the record's offset: KIP-232), the name appended to its chunk's name tuple, both
# indexes an entry; the same name with the same id again changes nothing. Handed back: a name or
# id taken by another topic (an error), an index that would pass half full (Python grows it).
#
# PartitionRecord (TopicsDelta.replay_partition) of a partition id past the topic's last, for a
# topic whose rows end the partitions table (what a creation is, and CreatePartitions of the last
# topic): rows appended up to that id (ids skipped are holes, partition_id -1), the record's
# fields written, the topic's first_row / partition_count / epoch moved. Handed back: a partition
# that exists or fills a hole (replacing a row), a topic whose rows would move (TopicsDelta
# relocates them), a record with directories, rows that would cross into a new chunk.
#
# Appends write into the writer's last chunk: ``room(appended)`` (TableWriter.native_room) counts
# the rows the pass wrote so far, gives that chunk room for one more row (a new chunk when it is
# full; called only when a row will be written, so no chunk stays empty) with every column owned,
# and returns (the next row, the chunk's arrays); at the end ``appended(count)`` counts the rest.
# An owned array has room for a whole chunk and holds default values past the chunk's rows
# (TableWriter._column), so hole rows and a sparse column need no write. Rows of other chunks
# (a topic's first_row, a deleted topic's rows) are owned through own(name, chunk, width) on
# first touch, as in apply_changes.
DEF TOPIC_RECORD = 2  # apiKeys
DEF PARTITION_RECORD = 3
DEF CONFIG_RECORD = 4
DEF REMOVE_TOPIC_RECORD = 9
DEF TOPIC_RESOURCE_TYPE = 2  # Kafka's ConfigResource.Type.TOPIC
DEF NO_LEADER = -1
# ``target``, by position: the delta's tables and indexes (TopicsDelta.apply_stream)
DEF G_PARTITION_CHUNKS = 0  # the partitions writer's chunk_arrays (called before each change stretch)
DEF G_TOPIC_CHUNKS = 1
DEF G_PARTITION_OWNED = 2  # owned_arrays(name)
DEF G_PARTITION_OWN = 3  # own_column(name, chunk, width)
DEF G_TOPIC_OWNED = 4
DEF G_TOPIC_OWN = 5
DEF G_PARTITION_ROOM = 6  # native_room(appended) -> (next row, the last chunk's arrays)
DEF G_TOPIC_ROOM = 7
DEF G_PARTITION_APPENDED = 8  # native_appended(count)
DEF G_TOPIC_APPENDED = 9
DEF G_PARTITION_ROWS = 10  # the writers' row counts now
DEF G_TOPIC_ROWS = 11
DEF G_NAMES = 12  # the delta's topic names, a tuple per topics chunk
DEF G_NAME_INDEX = 13  # HashIndex objects (slot_hash, slot_row, used); mutable when the pass may write them
DEF G_ID_INDEX = 14
DEF G_BASE_TOPIC_ROWS = 15
DEF G_DELETED = 16  # TopicsChanges.deleted_topics
DEF G_OFFSETS = 17  # the records' offsets (int64), None for a snapshot (its creations: the bulk step)
DEF G_BULK_MIN_RECORDS = 18
DEF N_TARGET = 19
# the topic columns the pass reads and writes (_Pass.tcols), and the partition columns it appends
DEF T_ID_HI = 0
DEF T_ID_LO = 1
DEF T_FIRST = 2
DEF T_COUNT = 3
DEF T_EPOCH = 4
DEF T_LIVE = 5
DEF N_TCOLS = 6
DEF P_TOPIC_ROW = 0
DEF P_ID = 1
DEF P_LEADER = 2
DEF P_LEADER_EPOCH = 3
DEF P_PARTITION_EPOCH = 4
DEF P_RECOVERY = 5
DEF P_REPLICAS = 6
DEF P_ISR = 7
DEF N_PCOLS = 8
_TOPIC_COLUMNS = ("id_hi", "id_lo", "first_row", "partition_count", "topic_epoch", "live")
_APPENDED_COLUMNS = ("topic_row", "partition_id", "leader", "leader_epoch", "partition_epoch",
                     "leader_recovery_state", "replicas", "isr")

import uuid as _uuid_module

from cpython.unicode cimport PyUnicode_DecodeUTF8

cdef extern from "Python.h":
    object PyDictProxy_New(object mapping)

from blob cimport blob_text

_UUID = _uuid_module.UUID
_U64_MASK = (1 << 64) - 1
_TOPIC_DTYPES = (np.dtype(np.int64), np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.int32),
                 np.dtype(np.int64), np.dtype(np.bool_))
_APPENDED_DTYPES = (np.dtype(np.int32),) * 5 + (np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.int32))

# what a record handler returns
DEF APPLIED = 1
DEF UNCHANGED = 0
DEF HAND_BACK = -1


cdef inline bint whole_row(const int32_t[::1] record_index, const uint8_t[::1] extras, int64_t row,
                           int64_t i) noexcept nogil:
    # kind_rows points into ``other`` for a version the columns do not decode: record_index tells
    return 0 <= row < record_index.shape[0] and record_index[row] == i and not extras[row]


cdef dict writable_configs(configs):
    items = configs.items
    return configs.writable() if items is None else items


cdef bint put_config(configs, tuple key, str name, str value) except -1:
    # edited_config (engine/image/configs.py) into MetadataDelta.configs (value None: delete the
    # key), mirrored; True when the configs changed
    items = configs.items
    current = (configs.base if items is None else items).get(key)
    if value is None:
        if current is None or name not in current:
            return False
    elif current is not None and current.get(name) == value:
        return False
    cdef dict updated = {} if current is None else dict(current)
    if value is None:
        del updated[name]
    else:
        updated[name] = value
    if updated:
        writable_configs(configs)[key] = PyDictProxy_New(updated)
    else:
        del writable_configs(configs)[key]
    return True


cdef bint drop_configs(configs, tuple key) except -1:
    # the configs of ``key`` go, if it has any; True when it had
    items = configs.items
    if key not in (configs.base if items is None else items):
        return False
    del writable_configs(configs)[key]
    return True


cdef int tombstone(int32_t *slot_row, Py_ssize_t size, uint64_t h, int32_t row) except -1:
    # the slot holding ``row`` for hash ``h`` becomes TOMBSTONE (remove above; the delta's
    # mutable copy of the index: TopicsDelta.apply_stream owns them first)
    cdef Py_ssize_t probes = 0
    cdef uint64_t mask = size - 1, s = h & mask
    while slot_row[s] != EMPTY and probes < size:
        if slot_row[s] == row:
            slot_row[s] = TOMBSTONE
            return 0
        s = (s + 1) & mask
        probes += 1
    raise AssertionError(f"topic row {row} is not in its index")


cdef bint has_room(index) except -1:
    # HashIndex.insert grows the slots past half full; the pass leaves that to it
    return 2 * (<Py_ssize_t>index.used + 1) <= len(index.slot_row)


cdef int insert_slot(index, uint32_t *slot_hash, int32_t *slot_row, Py_ssize_t size, uint64_t h,
                     int32_t row) except -1:
    # HashIndex.insert without the growth (has_room first) into its slots (the delta's mutable
    # copy: TopicsDelta.apply_stream owns them first): linear probing to a free or dead slot
    cdef uint64_t mask = size - 1, s = h & mask
    while slot_row[s] >= 0:
        s = (s + 1) & mask
    slot_hash[s] = <uint32_t>h
    slot_row[s] = row
    index.used = index.used + 1
    return 0


cdef char *writable_cell(list owned, object own, str name, int64_t row, int shift) except NULL:
    # the address of ``row`` in the writer-owned array of ``name`` (owned through ``own`` on first touch)
    cdef int64_t k = row >> shift
    item = owned[k] if k < len(owned) else None
    if item is None:
        item = own(name, k, 0)
    cdef cnp.ndarray a = <cnp.ndarray>item
    if not cnp.PyArray_ISWRITEABLE(a) or cnp.PyArray_NDIM(a) != 1:
        raise ValueError(f"{name}: chunk {k} is not a writable 1-D array")
    return <char *>cnp.PyArray_DATA(a) + (row & ((<int64_t>1 << shift) - 1)) * cnp.PyArray_STRIDE(a, 0)


cdef class _Pass:
    # One apply_topic_stream call's state besides the change stretches. tcols: the topic columns
    # over every chunk (read by lookups, written on first touch through own), built at the first
    # record that needs them and again after the writer made room; pparts: the partitions' last
    # chunk (the only one rows are appended to), valid while p_room.
    cdef tuple target
    cdef int shift
    cdef list tcols
    cdef Py_ssize_t nt
    cdef bint t_room, p_room
    cdef ColumnPart pparts[N_PCOLS]
    cdef int64_t p_chunk, t_rows, p_rows, t_added, p_added
    cdef list topic_row_owned
    # names of the topic rows created by the pass, from row pending_row on: put into their chunks'
    # name tuples once, at the end (a tuple per topic would copy its chunk's names each time)
    cdef list pending
    cdef int64_t pending_row
    cdef int64_t removed, created, grown
    cdef bint configs_changed
    # the indexes' slots (no growth within a pass: an index that would grow hands its record back)
    cdef bint indexed
    cdef const uint32_t[::1] name_hash, id_hash
    cdef const int32_t[::1] name_row, id_row
    # the decoder's tables, each taken (and checked) at the first record of its kind: a memoryview
    # costs ~0.3 us to take, and most passes meet changes only
    cdef bint configs_loaded, removes_loaded, loaded
    cdef const int32_t[::1] g_rec, r_rec, t_rec, p_rec
    cdef const uint8_t[::1] g_null, g_extras, g_blob, r_extras, t_extras, p_extras
    cdef const int8_t[::1] g_type
    cdef const int64_t[::1] g_rname, g_name, g_value
    cdef const int64_t[:, ::1] r_tid, t_tid, p_tid
    cdef const uint8_t[::1] t_blob
    cdef const int64_t[::1] t_offsets
    cdef const int32_t[::1] p_pid, p_leader, p_leader_epoch, p_partition_epoch
    cdef const int8_t[::1] p_recovery
    cdef const int32_t[:, ::1] p_replicas, p_isr
    cdef const int16_t[::1] p_replica_count, p_isr_count, p_directory_count

    cdef bint load_configs(self, tuple config_args) except -1:
        if not self.configs_loaded:
            (self.g_rec, self.g_type, self.g_null, self.g_extras, self.g_blob, self.g_rname, self.g_name,
             self.g_value) = config_args
            if not (self.g_type.shape[0] == self.g_null.shape[0] == self.g_extras.shape[0] == self.g_rec.shape[0]
                    and self.g_rname.shape[0] == self.g_name.shape[0] == self.g_value.shape[0]
                    == self.g_rec.shape[0] + 1):
                raise ValueError("every config column must have one value per row")
            self.configs_loaded = True
        return True

    cdef bint load_removes(self, tuple remove_args) except -1:
        if not self.removes_loaded:
            self.r_rec, self.r_tid, self.r_extras = remove_args
            if not self.r_tid.shape[0] == self.r_extras.shape[0] == self.r_rec.shape[0]:
                raise ValueError("every remove column must have one value per row")
            self.removes_loaded = True
        return True

    cdef bint load(self, tuple topic_args, tuple partition_args) except -1:
        # the topics and partitions tables (a creation reads both)
        if self.loaded:
            return True
        self.t_rec, self.t_tid, self.t_extras, self.t_blob, self.t_offsets = topic_args
        (self.p_rec, self.p_tid, self.p_pid, self.p_leader, self.p_leader_epoch, self.p_partition_epoch,
         self.p_recovery, self.p_replicas, self.p_replica_count, self.p_isr, self.p_isr_count,
         self.p_directory_count, self.p_extras) = partition_args
        if not (self.t_tid.shape[0] == self.t_extras.shape[0] == self.t_rec.shape[0]
                and self.t_offsets.shape[0] == self.t_rec.shape[0] + 1
                and all([len(partition_args[j]) == self.p_rec.shape[0] for j in range(1, 13)])):
            raise ValueError("every topic / partition column must have one value per row")
        self.loaded = True
        return True

    cdef int index(self) except -1:
        if self.indexed:
            return 0
        names, ids = self.target[G_NAME_INDEX], self.target[G_ID_INDEX]
        self.name_hash, self.name_row, self.id_hash, self.id_row = names.slot_hash, names.slot_row, ids.slot_hash, \
            ids.slot_row
        if self.name_row.shape[0] == 0 or self.id_row.shape[0] == 0:
            raise ValueError("slot arrays must be of a non-zero size")
        self.indexed = True
        return 0

    cdef int build_topics(self) except -1:
        cdef Py_ssize_t c
        chunks = self.target[G_TOPIC_CHUNKS]()
        owned = self.target[G_TOPIC_OWNED]
        self.tcols = [written_column(chunks, _TOPIC_COLUMNS[c], owned(_TOPIC_COLUMNS[c]), _TOPIC_DTYPES[c])
                      for c in range(N_TCOLS)]
        self.nt = len(chunks)
        return 0

    cdef char *topic_cell(self, int c, int64_t trow, bint write) except NULL:
        # the address of topic row ``trow`` in column c (owned first when written); the row exists
        if self.tcols is None:
            self.build_topics()
        cdef _WrittenColumn col = <_WrittenColumn>self.tcols[c]
        if write:
            own_row(col, trow, self.shift, 0, self.target[G_TOPIC_OWN])
        cdef char *p = cell(col.parts, self.nt, trow, self.shift)
        if p == NULL:
            raise IndexError(f"topic row {trow} is not in the topics table")
        return p

    cdef int64_t find(self, int64_t hi, int64_t lo) except -2:
        # the live topic row of id (hi, lo), or -1
        if self.tcols is None:
            self.build_topics()
        self.index()
        return find_topic(&self.id_hash[0], &self.id_row[0], self.id_row.shape[0],
                          (<_WrittenColumn>self.tcols[T_ID_HI]).parts, (<_WrittenColumn>self.tcols[T_ID_LO]).parts,
                          self.nt, hi, lo, self.shift)

    cdef int64_t find_name(self, str name, uint64_t h) except -2:
        # the live topic row named ``name`` (hash h), or -1
        self.index()
        cdef Py_ssize_t size = self.name_row.shape[0], probes = 0
        cdef uint64_t mask = size - 1, s = h & mask
        cdef int32_t r
        while probes < size and self.name_row[s] != EMPTY:
            r = self.name_row[s]
            if r >= 0 and self.name_hash[s] == <uint32_t>h and self.name_of(r) == name:
                return r
            s = (s + 1) & mask
            probes += 1
        return -1

    cdef int make_topic_room(self) except -1:
        if not self.t_room:
            row, _ = self.target[G_TOPIC_ROOM](self.t_added)
            self.t_rows, self.t_added, self.t_room = row, 0, True
            self.build_topics()
        return 0

    cdef int make_partition_room(self) except -1:
        cdef Py_ssize_t c
        if self.p_room:
            return 0
        row, arrays = self.target[G_PARTITION_ROOM](self.p_added)
        self.p_rows, self.p_added = row, 0
        self.p_chunk = self.p_rows >> self.shift
        for c in range(N_PCOLS):
            set_part(&self.pparts[c], (<dict>arrays)[_APPENDED_COLUMNS[c]])
        self.p_room = True
        return 0

    cdef char *partition_cell(self, int c, int64_t prow, Py_ssize_t width) except NULL:
        # the address of appended row ``prow`` (in the last chunk) in column c, at least ``width`` wide
        cdef ColumnPart *part = &self.pparts[c]
        if part.ndim == 2 and part.width < width:
            set_part(part, self.target[G_PARTITION_OWN](_APPENDED_COLUMNS[c], self.p_chunk, width))
        if not (prow >> self.shift) == self.p_chunk:
            raise AssertionError(f"partition row {prow} is not in the last chunk")
        return part.data + (prow & ((<int64_t>1 << self.shift) - 1)) * part.stride0

    cdef str name_of(self, int64_t trow):
        if self.pending is not None and trow >= self.pending_row:
            return <str>self.pending[trow - self.pending_row]
        return <str>(<tuple>(<list>self.target[G_NAMES])[trow >> self.shift])[trow & ((<int64_t>1 << self.shift) - 1)]

    cdef int flush_names(self) except -1:
        # TopicsDelta._append_names: each chunk's tuple rebuilt once
        cdef list names = self.target[G_NAMES]
        cdef Py_ssize_t done = 0, take, k, n
        cdef int64_t row
        if self.pending is None:
            return 0
        n = len(self.pending)
        while done < n:
            row = self.pending_row + done
            k = row >> self.shift
            take = min(n - done, (1 << self.shift) - (row & ((<int64_t>1 << self.shift) - 1)))
            part = tuple(self.pending[done:done + take])
            if k == len(names):
                names.append(part)
            else:
                names[k] = (<tuple>names[k]) + part
            done += take
        self.pending = None
        return 0

    cdef int finish(self) except -1:
        # the names and rows appended by the pass, into the delta and the writers
        self.flush_names()
        if self.t_added:
            self.target[G_TOPIC_APPENDED](self.t_added)
            self.t_added = 0
        if self.p_added:
            self.target[G_PARTITION_APPENDED](self.p_added)
            self.p_added = 0
        return 0


cdef int drop_topic(_Pass s, configs, int64_t trow, int64_t hi, int64_t lo) except -1:
    # RemoveTopicRecord of the live topic row ``trow``
    cdef int64_t r
    cdef Py_ssize_t size
    cdef int32_t first = (<int32_t *>s.topic_cell(T_FIRST, trow, False))[0]
    cdef int32_t pcount = (<int32_t *>s.topic_cell(T_COUNT, trow, False))[0]
    if s.topic_row_owned is None:
        s.topic_row_owned = s.target[G_PARTITION_OWNED]("topic_row")
    for r in range(first, first + pcount):
        (<int32_t *>writable_cell(s.topic_row_owned, s.target[G_PARTITION_OWN], "topic_row", r, s.shift))[0] = -1
    (<uint8_t *>s.topic_cell(T_LIVE, trow, True))[0] = 0
    cdef str name = s.name_of(trow)
    cdef const char *utf8 = PyUnicode_AsUTF8AndSize(name, &size)
    s.index()
    tombstone(<int32_t *>&s.name_row[0], s.name_row.shape[0], fnv1a(<const uint8_t *>utf8, size), <int32_t>trow)
    tombstone(<int32_t *>&s.id_row[0], s.id_row.shape[0], uuid_hash(hi, lo), <int32_t>trow)
    if trow < <int64_t>s.target[G_BASE_TOPIC_ROWS]:  # else created and deleted in this delta: no trace
        (<dict>s.target[G_DELETED])[_UUID(int=((hi & _U64_MASK) << 64) | (lo & _U64_MASK))] = name
    if drop_configs(configs, (TOPIC_RESOURCE_TYPE, name)):
        s.configs_changed = True
    s.removed += 1
    return 0


cdef int create_topic(_Pass s, int64_t row, int64_t offset) except -2:
    # TopicRecord of row ``row`` of the decoder's topics table (s.load first)
    cdef int64_t hi = s.t_tid[row, 0], lo = s.t_tid[row, 1], lo_at = s.t_offsets[row], hi_at = s.t_offsets[row + 1]
    cdef int64_t trow, existing
    cdef str name = blob_text(s.t_blob, s.t_offsets, row)  # checks the offsets
    cdef uint64_t h = fnv1a(&s.t_blob[0] + lo_at if hi_at > lo_at else NULL, hi_at - lo_at)
    existing = s.find_name(name, h)
    if existing >= 0:
        if s.find(hi, lo) == existing:
            return UNCHANGED  # the same topic again
        return HAND_BACK  # the name is another topic's: the scalar path raises
    if s.find(hi, lo) >= 0 or not has_room(s.target[G_NAME_INDEX]) or not has_room(s.target[G_ID_INDEX]):
        return HAND_BACK
    s.make_topic_room()
    trow = s.t_rows
    (<int64_t *>s.topic_cell(T_ID_HI, trow, True))[0] = hi
    (<int64_t *>s.topic_cell(T_ID_LO, trow, True))[0] = lo
    (<int32_t *>s.topic_cell(T_FIRST, trow, True))[0] = -1
    (<int32_t *>s.topic_cell(T_COUNT, trow, True))[0] = 0
    (<int64_t *>s.topic_cell(T_EPOCH, trow, True))[0] = offset
    (<uint8_t *>s.topic_cell(T_LIVE, trow, True))[0] = 1
    if s.pending is None:
        s.pending, s.pending_row = [], trow
    s.pending.append(name)
    insert_slot(s.target[G_NAME_INDEX], <uint32_t *>&s.name_hash[0], <int32_t *>&s.name_row[0], s.name_row.shape[0],
                h, <int32_t>trow)
    insert_slot(s.target[G_ID_INDEX], <uint32_t *>&s.id_hash[0], <int32_t *>&s.id_row[0], s.id_row.shape[0],
                uuid_hash(hi, lo), <int32_t>trow)
    s.t_rows += 1
    s.t_added += 1
    s.t_room = (s.t_rows & ((<int64_t>1 << s.shift) - 1)) != 0  # a full chunk: room again next time
    s.created += 1
    return APPLIED


cdef int create_partition(_Pass s, int64_t row, int64_t offset) except -2:
    # PartitionRecord of row ``row`` of the decoder's partitions table (s.load first): a new id
    # past the topic's last
    cdef int32_t pid = s.p_pid[row], first, count
    cdef int64_t trow, start, prow, r, grow
    cdef Py_ssize_t nrep = s.p_replica_count[row], nisr = s.p_isr_count[row]
    cdef int64_t mask = (<int64_t>1 << s.shift) - 1
    if pid < 0 or s.p_directory_count[row] != 0 or not 0 <= nrep <= s.p_replicas.shape[1] \
            or not 0 <= nisr <= s.p_isr.shape[1]:
        return HAND_BACK
    trow = s.find(s.p_tid[row, 0], s.p_tid[row, 1])
    if trow < 0:
        return HAND_BACK  # an unknown topic: the scalar path raises
    first = (<int32_t *>s.topic_cell(T_FIRST, trow, False))[0]
    count = (<int32_t *>s.topic_cell(T_COUNT, trow, False))[0]
    if pid < count or not (count == 0 or first + count == s.p_rows):
        return HAND_BACK  # a row replaced or a hole filled; or the topic's rows would move
    grow = pid + 1 - count
    if (s.p_rows & mask) + grow > (mask + 1):
        return HAND_BACK  # the rows would cross into another chunk
    s.make_partition_room()
    start = s.p_rows
    for r in range(start, start + grow):
        (<int32_t *>s.partition_cell(P_TOPIC_ROW, r, 0))[0] = <int32_t>trow
        (<int32_t *>s.partition_cell(P_ID, r, 0))[0] = -1
        (<int32_t *>s.partition_cell(P_LEADER, r, 0))[0] = NO_LEADER
        (<int32_t *>s.partition_cell(P_LEADER_EPOCH, r, 0))[0] = 0
        (<int32_t *>s.partition_cell(P_PARTITION_EPOCH, r, 0))[0] = 0
        (<int8_t *>s.partition_cell(P_RECOVERY, r, 0))[0] = 0
        write_row_list(s, P_REPLICAS, r, NULL, 0)
        write_row_list(s, P_ISR, r, NULL, 0)
    prow = start + grow - 1
    (<int32_t *>s.partition_cell(P_ID, prow, 0))[0] = pid
    (<int32_t *>s.partition_cell(P_LEADER, prow, 0))[0] = s.p_leader[row]
    (<int32_t *>s.partition_cell(P_LEADER_EPOCH, prow, 0))[0] = s.p_leader_epoch[row]
    (<int32_t *>s.partition_cell(P_PARTITION_EPOCH, prow, 0))[0] = s.p_partition_epoch[row]
    (<int8_t *>s.partition_cell(P_RECOVERY, prow, 0))[0] = s.p_recovery[row]
    write_row_list(s, P_REPLICAS, prow, &s.p_replicas[row, 0] if s.p_replicas.shape[1] else NULL, nrep)
    write_row_list(s, P_ISR, prow, &s.p_isr[row, 0] if s.p_isr.shape[1] else NULL, nisr)
    s.p_rows += grow
    s.p_added += grow
    s.p_room = (s.p_rows & mask) != 0  # a full chunk: room again next time
    if count == 0:
        (<int32_t *>s.topic_cell(T_FIRST, trow, True))[0] = <int32_t>start
    (<int32_t *>s.topic_cell(T_COUNT, trow, True))[0] = pid + 1
    (<int64_t *>s.topic_cell(T_EPOCH, trow, True))[0] = offset  # a new partition (KIP-232)
    s.grown += 1
    return APPLIED


cdef int write_row_list(_Pass s, int c, int64_t prow, const int32_t *values, Py_ssize_t count) except -1:
    # an appended row's list column: values[0:count], then -1 to its chunk's width
    cdef char *p = s.partition_cell(c, prow, count)
    cdef ColumnPart *part = &s.pparts[c]
    cdef Py_ssize_t j
    for j in range(part.width):
        (<int32_t *>(p + j * part.stride1))[0] = values[j] if j < count else -1
    return 0


cdef Py_ssize_t creation_end(const int16_t[::1] api_keys, const int64_t[::1] order, Py_ssize_t pos) noexcept:
    # the end of the run of TopicRecords and PartitionRecords from ``pos`` (the loader's creation run)
    cdef Py_ssize_t n = order.shape[0]
    cdef int64_t i
    while pos < n:
        i = order[pos]
        if i < 0 or i >= api_keys.shape[0] or not (api_keys[i] == TOPIC_RECORD or api_keys[i] == PARTITION_RECORD):
            break
        pos += 1
    return pos


def apply_topic_stream(tuple target, tuple change_args, tuple config_args, tuple remove_args, tuple topic_args,
                       tuple partition_args, configs, const int16_t[::1] api_keys, const int32_t[::1] kind_rows,
                       const int64_t[::1] order, Py_ssize_t start, written, int shift):
    """Apply ``order[start:]`` (see above) until the first record not applied whole.
    ``target``: the delta's tables and indexes (G_* above: TopicsDelta.apply_stream builds it).
    ``change_args``: apply_changes' arguments after the id index (the decoder's partition_changes
    table: record_index .. extras), headed by written_names. ``config_args``: the decoder's configs
    table (record_index, resource_type, value_null, extras, config_blob, resource_name_offsets,
    name_offsets, value_offsets). ``remove_args``: its remove_topics table (record_index, topic_id
    as int64 [k, 2], extras). ``topic_args``: its topics table (record_index, topic_id, extras,
    name_blob as uint8, name_offsets). ``partition_args``: its partitions table (record_index,
    topic_id, partition_id, leader, leader_epoch, partition_epoch, leader_recovery_state, replicas,
    replica_count, isr, isr_count, directory_count, extras). ``configs``: MetadataDelta.configs.
    Returns (stop, count, removed, created, grown, configs_changed): order[stop] the record not
    applied (len(order) when all were), written[:count] the partition rows the changes wrote, the
    topics deleted and created, the PartitionRecords applied."""
    cdef Py_ssize_t n = order.shape[0], pos = start, count = 0, applied, stop
    if not 0 <= start <= n:
        raise ValueError(f"start {start} is outside the {n} records")
    if len(written) < n - start or api_keys.shape[0] != kind_rows.shape[0]:
        raise ValueError("written must hold a row per record from start; api_keys and kind_rows go together")
    if len(target) != N_TARGET or len(change_args) != 9 or len(config_args) != 8 or len(remove_args) != 3 \
            or len(topic_args) != 5 or len(partition_args) != 13:
        raise ValueError("19 target entries; 9 change, 8 config, 3 remove, 5 topic, 13 partition arguments")
    cdef const int64_t[::1] offsets
    cdef bint creating = target[G_OFFSETS] is not None
    if creating:
        offsets = target[G_OFFSETS]
        if offsets.shape[0] != api_keys.shape[0]:
            raise ValueError("one offset per record")
    cdef Py_ssize_t bulk_min = target[G_BULK_MIN_RECORDS]
    cdef _Pass s = _Pass.__new__(_Pass)
    s.target, s.shift = target, shift
    s.t_rows, s.p_rows = target[G_TOPIC_ROWS], target[G_PARTITION_ROWS]
    cdef int64_t i, row, trow
    cdef int16_t kind
    try:
        while pos < n:
            i = order[pos]
            if i < 0 or i >= api_keys.shape[0]:
                break
            row = kind_rows[i]
            kind = api_keys[i]
            if kind == PARTITION_CHANGE_RECORD:
                ids = target[G_ID_INDEX]
                stop, applied = apply_changes(
                    target[G_PARTITION_CHUNKS](), target[G_TOPIC_CHUNKS](), change_args[0],
                    target[G_PARTITION_OWNED], target[G_PARTITION_OWN], ids.slot_hash, ids.slot_row,
                    *change_args[1:], api_keys, kind_rows, order, pos, written[count:] if count else written, shift)
                count += applied
                if stop == pos:
                    break
                s.p_room = False  # it may have widened a list column of the last chunk (a new array)
                pos = stop
                continue
            if kind == CONFIG_RECORD and s.load_configs(config_args) and whole_row(s.g_rec, s.g_extras, row, i):
                if put_config(configs, (s.g_type[row], blob_text(s.g_blob, s.g_rname, row)),
                              blob_text(s.g_blob, s.g_name, row),
                              None if s.g_null[row] else blob_text(s.g_blob, s.g_value, row)):
                    s.configs_changed = True
            elif kind == REMOVE_TOPIC_RECORD and s.load_removes(remove_args) \
                    and whole_row(s.r_rec, s.r_extras, row, i):
                trow = s.find(s.r_tid[row, 0], s.r_tid[row, 1])
                if trow < 0:
                    break  # an unknown topic: the loader's replay reports it
                drop_topic(s, configs, trow, s.r_tid[row, 0], s.r_tid[row, 1])
            elif kind == TOPIC_RECORD and creating and s.load(topic_args, partition_args) \
                    and whole_row(s.t_rec, s.t_extras, row, i):
                if creation_end(api_keys, order, pos) - pos >= bulk_min:
                    break  # the loader's vectorised step
                if create_topic(s, row, offsets[i]) == HAND_BACK:
                    break
            elif kind == PARTITION_RECORD and creating and s.load(topic_args, partition_args) \
                    and whole_row(s.p_rec, s.p_extras, row, i):
                if create_partition(s, row, offsets[i]) == HAND_BACK:
                    break
            else:
                break
            pos += 1
    finally:
        s.finish()
    return (pos, count, s.removed, s.created, s.grown, s.configs_changed)


# ---- topic names out of a decoded names blob --------------------------------------------------------
from cpython.unicode cimport PyUnicode_DecodeUTF8


def names_at(const uint8_t[::1] blob, const int64_t[::1] offsets, const int32_t[::1] rows):
    """[blob[offsets[r]:offsets[r + 1]] decoded as UTF-8 for r in rows]: a 1M-partition snapshot's
    100k topic names in one call (UnicodeDecodeError as bytes.decode gives it)."""
    cdef Py_ssize_t n = rows.shape[0], i, nb = offsets.shape[0] - 1, size = blob.shape[0]
    cdef int64_t lo, hi
    cdef int32_t r
    cdef char nothing = 0  # an empty blob holds only empty names
    cdef const char *base = <const char *>&blob[0] if size else &nothing
    out = [None] * n
    for i in range(n):
        r = rows[i]
        if r < 0 or r >= nb:
            raise IndexError(f"name {r} is not among the blob's {nb}")
        lo, hi = offsets[r], offsets[r + 1]
        if lo < 0 or hi < lo or hi > size:
            raise ValueError(f"name {r}: offsets {lo}..{hi} run outside the blob")
        out[i] = PyUnicode_DecodeUTF8(base + lo, hi - lo, "strict")
    return out
