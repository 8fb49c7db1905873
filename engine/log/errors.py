"""Typed operating errors of the segmented log.

Every error here is a KraftlogError: the caller can act on it (fetch elsewhere, truncate, reopen,
free disk space). Programmer errors (a negative max_bytes, an offset below the high watermark
passed where it is forbidden) stay built-in exceptions.
"""

from __future__ import annotations

from kraftlog.errors import CorruptRecordError, KraftlogError


class LogError(KraftlogError):
    """Base of the log's operating errors."""


class OffsetOutOfRangeError(LogError):
    """A read asked for an offset this log does not hold and never will (KIP-392).

    Exactly one of ``too_small`` (below the log start offset: the data was deleted or moved to a
    snapshot) and ``too_large`` (above everything this replica knows of) is true. Both carry the
    log start offset and the high watermark so a reader can reset its position without a second
    round trip.
    """

    def __init__(self, offset: int, *, too_small: bool, log_start_offset: int, high_watermark: int,
                 log_end_offset: int, path: str | None = None):
        side = "below the log start offset" if too_small else "above the log end offset"
        where = f" in {path}" if path else ""
        super().__init__(f"offset {offset} is {side}{where} (log start {log_start_offset}, "
                         f"high watermark {high_watermark}, log end {log_end_offset})")
        self.offset = offset
        self.too_small = too_small
        self.too_large = not too_small
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark
        self.log_end_offset = log_end_offset


class OffsetNotAvailableError(LogError):
    """The offset exists in the replicated log but cannot be read here yet (KIP-392).

    Either it is above the high watermark while the read asked for committed data, or it is above
    this replica's log end but at or below a high watermark learnt from the leader. Retry later.
    """

    def __init__(self, offset: int, *, high_watermark: int, log_end_offset: int):
        super().__init__(f"offset {offset} is not available yet (high watermark {high_watermark}, "
                         f"log end {log_end_offset})")
        self.offset = offset
        self.high_watermark = high_watermark
        self.log_end_offset = log_end_offset


class LogCorruptionError(CorruptRecordError, LogError):
    """Bytes on disk that fail their checks where a torn tail cannot explain them.

    ``path`` is the segment (or checkpoint) file and ``position`` the byte position of the first
    bad batch (or line). Raised on open; never silently skipped.
    """


class InvalidAppendError(LogError):
    """An append whose batches are malformed, fail their CRC, or do not continue the log's offsets."""


class LogStorageError(LogError):
    """The file system failed an operation (full disk, I/O error, failed fsync or rename).

    The log was rolled back to its state before the failed operation, so it stays readable and the
    failed append is not visible. ``errno`` is the OSError's errno when there was one.
    """

    def __init__(self, message: str, *, path: str | None = None, errno: int | None = None):
        super().__init__(f"{message} ({path})" if path else message)
        self.path = path
        self.errno = errno


class LogOfflineError(LogError):
    """A storage error could not be rolled back; the log refuses writes until it is reopened.

    Reads of data appended before the failure still work. Reopening runs recovery, which restores
    a consistent prefix.
    """


class LogClosedError(LogError):
    """The log was closed; open it again to use it."""
