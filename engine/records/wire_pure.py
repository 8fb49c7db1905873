"""Pure-Python twin of the native module kraftlog._wire (CRC-32C and varints).

Same functions, same arguments, same errors. Layouts: see csrc/wire.h.
"""

from __future__ import annotations

import crc32c as _crc32c

from kraftlog.errors import CorruptRecordError

IMPLEMENTATION = "pure"
_U64 = (1 << 64) - 1


def crc32c(data, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value`` (0 to start)."""
    return _crc32c.crc32c(data, value)


def crc32c_hardware() -> bool:
    return bool(_crc32c.hardware_based)


def decode_uvarint(buf, pos: int = 0, max_bytes: int = 10) -> tuple[int, int]:
    """Unsigned varint at ``pos``: returns (value, next position)."""
    if pos < 0:
        raise ValueError("negative position")
    view = memoryview(buf).cast("B") if not isinstance(buf, bytes | bytearray) else buf
    end = len(view)
    value = shift = 0
    for i in range(max_bytes):
        if pos + i >= end:
            raise CorruptRecordError("unsigned varint runs past the end of the buffer", position=pos)
        b = view[pos + i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value & _U64, pos + i + 1
        shift += 7
    raise CorruptRecordError("unsigned varint is longer than its maximum size", position=pos)


def decode_varint(buf, pos: int = 0, max_bytes: int = 10) -> tuple[int, int]:
    """Zig-zag signed varint/varlong at ``pos``: returns (value, next position)."""
    raw, nxt = decode_uvarint(buf, pos, max_bytes)
    return (raw >> 1) ^ -(raw & 1), nxt


def encode_uvarint(value: int) -> bytes:
    """Bytes of the unsigned varint ``value`` (0 <= value < 2**64)."""
    if not 0 <= value <= _U64:
        raise OverflowError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _zigzag(value: int) -> int:
    if not -(1 << 63) <= value < (1 << 63):
        raise OverflowError(f"varint out of range: {value}")
    return ((value << 1) ^ (value >> 63)) & _U64


def encode_varint(value: int) -> bytes:
    """Bytes of the zig-zag varint/varlong ``value`` (-2**63 <= value < 2**63)."""
    return encode_uvarint(_zigzag(value))


def size_of_uvarint(value: int) -> int:
    if not 0 <= value <= _U64:
        raise OverflowError(f"unsigned varint out of range: {value}")
    return max(1, (value.bit_length() + 6) // 7)


def size_of_varint(value: int) -> int:
    return size_of_uvarint(_zigzag(value))
