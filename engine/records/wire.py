"""CRC-32C and Kafka varints: the native module when built, else its pure twin.

Everything outside this module imports these names from here, never kraftlog._wire directly.
"""

from kraftlog._accel import select

_impl = select("kraftlog._wire", "kraftlog.engine.records.wire_pure")

IMPLEMENTATION: str = _impl.IMPLEMENTATION
crc32c = _impl.crc32c
crc32c_hardware = _impl.crc32c_hardware
decode_uvarint = _impl.decode_uvarint
decode_varint = _impl.decode_varint
encode_uvarint = _impl.encode_uvarint
encode_varint = _impl.encode_varint
size_of_uvarint = _impl.size_of_uvarint
size_of_varint = _impl.size_of_varint

__all__ = [
    "IMPLEMENTATION", "crc32c", "crc32c_hardware", "decode_uvarint", "decode_varint",
    "encode_uvarint", "encode_varint", "size_of_uvarint", "size_of_varint",
]
