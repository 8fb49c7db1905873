"""Typed errors shared by every layer.

Operating errors (bad input, corrupt bytes, full disk, unreachable peer) are subclasses of
KraftlogError and carry enough context (file, position, offset) to act on. Programmer errors
(wrong types, broken invariants) stay as the built-in exceptions and fail loudly.
"""

from __future__ import annotations


class KraftlogError(Exception):
    """Base of every operating error kraftlog raises."""


class CorruptRecordError(KraftlogError):
    """Bytes that do not decode as what they claim to be.

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


class ExtensionNotLoadedError(KraftlogError):
    """A native module was required (KRAFTLOG_REQUIRE_EXTENSIONS=1) but could not be imported."""
