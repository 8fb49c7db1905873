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


# ---- PartitionChangeRecords applied in log order ------------------------------------------------
# Kafka's PartitionRegistration.merge per record, in the order the records were written: the
# partition epoch moves once per record, the leader epoch once per record naming a leader
# (NO_LEADER_CHANGE -2 leaves leader and leader epoch alone), leader recovery state -1 and list
# counts -1 leave their field alone. Written straight into the chunk arrays the caller owns (a
# column's chunks that no record writes may be None), so one pass in log order replaces the sort
# by row and the per-field "last writer wins" of the vectorised merge.


DEF NO_LEADER_CHANGE = -2


cdef inline int32_t *row_of32(ColumnPart *parts, Py_ssize_t nparts, int64_t row, int shift) noexcept nogil:
    cdef ColumnPart *part
    cdef Py_ssize_t local
    if locate(parts, nparts, row, shift, &part, &local) < 0:
        return NULL
    return <int32_t *>(part.data + local * part.stride0)


cdef inline int write_list(ColumnPart *parts, Py_ssize_t nparts, int64_t row, int shift, const int32_t *src,
                           Py_ssize_t width) noexcept nogil:
    # the row becomes src[0:width] (-1 padded), then -1 to the chunk's own width
    cdef ColumnPart *part
    cdef Py_ssize_t local, j
    cdef char *dst
    if locate(parts, nparts, row, shift, &part, &local) < 0 or part.ndim != 2 or part.width < width:
        return -1
    dst = part.data + local * part.stride0
    for j in range(width):
        (<int32_t *>(dst + j * part.stride1))[0] = src[j]
    for j in range(width, part.width):
        (<int32_t *>(dst + j * part.stride1))[0] = -1
    return 0


def apply_partition_changes(list partition_epoch, list leader_epoch, list leader_col, list recovery_col,
                            list isr_col, list replicas_col, const int64_t[::1] rows, const int32_t[::1] leader,
                            const int8_t[::1] recovery, const int32_t[:, ::1] isr, const int16_t[::1] isr_count,
                            const int32_t[:, ::1] replicas, const int16_t[::1] replica_count, int shift):
    """Apply change i (leader[i], recovery[i], isr[i] with isr_count[i], replicas[i] with
    replica_count[i]) to partition row rows[i], for i in log order; each list of chunk arrays is
    one column (partition_epoch, leader_epoch, leader int32; recovery int8; isr, replicas 2-D
    int32, as wide as the lists written). IndexError when a row to write lies in no given chunk."""
    cdef Py_ssize_t n = rows.shape[0], i, bad = -1
    if not (leader.shape[0] == recovery.shape[0] == isr_count.shape[0] == replica_count.shape[0] == n
            and isr.shape[0] == n and replicas.shape[0] == n):
        raise ValueError("every change column must have one value per row")
    cdef Py_ssize_t np_ = len(partition_epoch), nle = len(leader_epoch), nl = len(leader_col)
    cdef Py_ssize_t nr = len(recovery_col), ni = len(isr_col), nrep = len(replicas_col)
    cdef Py_ssize_t isr_width = isr.shape[1], replicas_width = replicas.shape[1]
    i32, i8 = np.dtype(np.int32), np.dtype(np.int8)
    cdef ColumnPart *pe = column_parts(partition_epoch, i32, True)
    cdef ColumnPart *le = NULL
    cdef ColumnPart *ld = NULL
    cdef ColumnPart *rc = NULL
    cdef ColumnPart *ip = NULL
    cdef ColumnPart *rp = NULL
    cdef int32_t *v
    cdef ColumnPart *part
    cdef Py_ssize_t local
    try:
        le = column_parts(leader_epoch, i32, True)
        ld = column_parts(leader_col, i32, True)
        rc = column_parts(recovery_col, i8, True)
        ip = column_parts(isr_col, i32, True)
        rp = column_parts(replicas_col, i32, True)
        with nogil:
            for i in range(n):
                v = row_of32(pe, np_, rows[i], shift)
                if v == NULL:
                    bad = i
                    break
                v[0] += 1
                if leader[i] != NO_LEADER_CHANGE:
                    v = row_of32(le, nle, rows[i], shift)
                    if v == NULL:
                        bad = i
                        break
                    v[0] += 1
                    v = row_of32(ld, nl, rows[i], shift)
                    if v == NULL:
                        bad = i
                        break
                    v[0] = leader[i]
                if recovery[i] != -1:
                    if locate(rc, nr, rows[i], shift, &part, &local) < 0:
                        bad = i
                        break
                    (<int8_t *>(part.data + local * part.stride0))[0] = recovery[i]
                if isr_count[i] >= 0 and write_list(ip, ni, rows[i], shift, &isr[i, 0] if isr_width else NULL,
                                                    isr_width) < 0:
                    bad = i
                    break
                if replica_count[i] >= 0 and write_list(rp, nrep, rows[i], shift,
                                                        &replicas[i, 0] if replicas_width else NULL,
                                                        replicas_width) < 0:
                    bad = i
                    break
    finally:
        free(pe)
        free(le)
        free(ld)
        free(rc)
        free(ip)
        free(rp)
    if bad >= 0:
        raise IndexError(f"change {bad}: row {rows[bad]} is not in the given (writable, wide enough) chunks")


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
