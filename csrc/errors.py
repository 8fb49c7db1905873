"""Typed errors shared by every layer.

Operating errors (bad input, corrupt bytes, full disk, unreachable peer) are subclasses of
KraftlogError and carry enough context (file, position, offset) to act on. Programmer errors
(wrong types, broken invariants) stay as the built-in exceptions and fail loudly.
"""

from __future__ import annotations

import copy


class KraftlogError(Exception):
    """Base of every operating error kraftlog raises."""


class UndecodableRecordError(KraftlogError):
    """Records that cannot be read: corrupt bytes (CorruptRecordError) or a codec that does not
    exist (UnsupportedCodecError). What a reader catches when either means "skip or stop here".

    ``position`` is the byte position within the buffer or file where decoding failed, when known;
    ``path`` names the file, when the bytes came from one.
    """

    def __init__(self, message: str, *, position: int | None = None, path: str | None = None):
        super().__init__(_placed(message, position, path))
        self.reason = message
        self.position = position
        self.path = path

    def moved(self, *, path: str, base_position: int) -> UndecodableRecordError:
        """The same error, about bytes that were read from ``path`` starting at ``base_position``."""
        clone = copy.copy(self)
        clone.path = path
        clone.position = None if self.position is None else base_position + self.position
        clone.args = (_placed(self.reason, clone.position, path),)
        return clone


def _placed(message: str, position: int | None, path: str | None) -> str:
    where = [] if path is None else [str(path)]
    if position is not None:
        where.append(f"position {position}")
    return f"{message} ({', '.join(where)})" if where else message


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
