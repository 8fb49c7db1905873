# distutils: sources = csrc/crc32c.c
"""Native CRC-32C and varints. Pure twin: kraftlog.engine.records.wire_pure (same functions)."""

from libc.stdint cimport int64_t, uint32_t, uint64_t

from kraftlog.errors import CorruptRecordError


cdef extern from "crc32c.h":
    uint32_t kl_crc32c(uint32_t crc, const unsigned char *data, size_t n) nogil
    int kl_crc32c_hardware() nogil

cdef extern from "wire.h":
    int KL_TRUNCATED
    int KL_OVERLONG
    int64_t kl_read_uvarint(const unsigned char *buf, int64_t pos, int64_t end, int max_bytes, uint64_t *out) nogil
    int64_t kl_read_varint(const unsigned char *buf, int64_t pos, int64_t end, int max_bytes, int64_t *out) nogil
    int kl_uvarint_size(uint64_t v) nogil
    uint64_t kl_zigzag(int64_t v) nogil
    int kl_write_uvarint(unsigned char *dst, uint64_t v) nogil

IMPLEMENTATION = "native"


def crc32c(const unsigned char[::1] data, unsigned int value=0):
    """CRC-32C of ``data``, continuing from ``value`` (0 to start)."""
    cdef uint32_t crc
    with nogil:
        crc = kl_crc32c(value, &data[0] if data.shape[0] else NULL, data.shape[0])
    return crc


def crc32c_hardware():
    """True when the SSE4.2 instruction computes the CRC."""
    return bool(kl_crc32c_hardware())


cdef _raise_varint(int64_t code, Py_ssize_t pos, str what):
    if code == KL_TRUNCATED:
        raise CorruptRecordError(f"{what} runs past the end of the buffer", position=pos)
    raise CorruptRecordError(f"{what} is longer than its maximum size", position=pos)


def decode_uvarint(const unsigned char[::1] buf, Py_ssize_t pos=0, int max_bytes=10):
    """Unsigned varint at ``pos``: returns (value, next position)."""
    cdef uint64_t value
    if pos < 0:
        raise ValueError("negative position")
    cdef int64_t nxt = kl_read_uvarint(&buf[0] if buf.shape[0] else NULL, pos, buf.shape[0], max_bytes, &value)
    if nxt < 0:
        _raise_varint(nxt, pos, "unsigned varint")
    return value, nxt


def decode_varint(const unsigned char[::1] buf, Py_ssize_t pos=0, int max_bytes=10):
    """Zig-zag signed varint/varlong at ``pos``: returns (value, next position)."""
    cdef int64_t value
    if pos < 0:
        raise ValueError("negative position")
    cdef int64_t nxt = kl_read_varint(&buf[0] if buf.shape[0] else NULL, pos, buf.shape[0], max_bytes, &value)
    if nxt < 0:
        _raise_varint(nxt, pos, "varint")
    return value, nxt


def encode_uvarint(uint64_t value):
    """Bytes of the unsigned varint ``value`` (0 <= value < 2**64)."""
    cdef unsigned char out[10]
    cdef int n = kl_write_uvarint(out, value)
    return out[:n]


def encode_varint(int64_t value):
    """Bytes of the zig-zag varint/varlong ``value`` (-2**63 <= value < 2**63)."""
    cdef unsigned char out[10]
    cdef int n = kl_write_uvarint(out, kl_zigzag(value))
    return out[:n]


def size_of_uvarint(uint64_t value):
    return kl_uvarint_size(value)


def size_of_varint(int64_t value):
    return kl_uvarint_size(kl_zigzag(value))
