"""Typed errors shared by every layer.

Operating errors (bad input, corrupt bytes, full disk, unreachable peer) are subclasses of
KraftlogError and carry enough context (file, position, offset) to act on. Programmer errors
(wrong types, broken invariants) stay as the built-in exceptions and fail loudly.
"""

from __future__ import annotations


class KraftlogError(Exception):
    """Base of every operating error kraftlog raises."""


class UndecodableRecordError(KraftlogError):
    """Records that cannot be read: corrupt bytes (CorruptRecordError) or a codec that does not
    exist (UnsupportedCodecError). What a reader catches when either means "skip or stop here".

    ``position`` is the byte position within the buffer or file where decoding failed, when known;
    ``path`` names the file, when the bytes came from one.
    """

    def __init__(self, message: str, *, position: int | None = None, path: str | None = None):
        where = []
        if path is not None:
            where.append(str(path))
        if position is not None:
            where.append(f"position {position}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.reason = message
        self.position = position
        self.path = path


class CorruptRecordError(UndecodableRecordError):
    """Bytes that do not decode as what they claim to be."""


class UnsupportedCodecError(UndecodableRecordError):
    """A CRC-valid batch whose attributes name a compression codec that does not exist (5-7): the
    bytes are not known to be corrupt, no Kafka reader can inflate them either. ``position`` is
    the batch's."""

    def __init__(self, codec: int, *, position: int | None = None, path: str | None = None):
        super().__init__(f"compression codec {codec} is not supported (Kafka's codecs: 0 none, 1 gzip, "
                         "2 snappy, 3 lz4, 4 zstd)", position=position, path=path)
        self.codec = codec


class ExtensionNotLoadedError(KraftlogError):
    """A native module was required (KRAFTLOG_REQUIRE_EXTENSIONS=1) but could not be imported."""
