# The decoders' string and bytes columns (a blob with int64 offsets: item k is
# blob[offsets[k]:offsets[k + 1]]), read by the native appliers (_image.pyx's topic-stream pass,
# _side.pyx's side-stream pass). Inline, so nothing here exists at run time and no module imports
# another; the offsets are checked against the blob before any byte is read.

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint8_t


cdef inline const char *blob_span(const uint8_t[::1] blob, const int64_t[::1] offsets, int64_t k,
                                  Py_ssize_t *size) except NULL:
    # item k's first byte (and its size); IndexError / ValueError when the offsets do not fit
    if k < 0 or k + 1 >= offsets.shape[0]:
        raise IndexError(f"string {k} is not among the blob's {offsets.shape[0] - 1}")
    cdef int64_t lo = offsets[k], hi = offsets[k + 1]
    if lo < 0 or hi < lo or hi > blob.shape[0]:
        raise ValueError(f"string {k}: offsets {lo}..{hi} run outside the blob")
    size[0] = hi - lo
    if hi == lo:
        return b""  # an empty item of a possibly empty blob: no address in it to take
    return <const char *>&blob[0] + lo


cdef inline str blob_text(const uint8_t[::1] blob, const int64_t[::1] offsets, int64_t k):
    # item k as text (the decoders checked it is UTF-8)
    cdef Py_ssize_t size
    cdef const char *p = blob_span(blob, offsets, k, &size)
    return PyUnicode_DecodeUTF8(p, size, "strict") if size else ""


cdef inline bytes blob_bytes(const uint8_t[::1] blob, const int64_t[::1] offsets, int64_t k):
    # item k as bytes (SCRAM salts and keys)
    cdef Py_ssize_t size
    cdef const char *p = blob_span(blob, offsets, k, &size)
    return PyBytes_FromStringAndSize(p, size)
