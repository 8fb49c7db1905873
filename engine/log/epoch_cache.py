"""Leader-epoch cache: which leader epoch started at which offset, persisted as Kafka does.

File ``leader-epoch-checkpoint`` (text, Kafka's CheckpointFile format, version 0):

    0                 version
    2                 number of entries
    1 0               epoch startOffset   (one line per entry, epochs and offsets increasing)
    3 57

Written to ``leader-epoch-checkpoint.tmp``, fsynced, renamed over the old file, directory fsynced,
so a crash leaves the old or the new list. The cache may run ahead of the log after a crash (an
epoch assigned at an offset whose data was lost); the log trims it with ``truncate_from_end``
when it recovers.

Invariant: epochs and start offsets both strictly increase. A newer epoch assigned at the same
start offset as the latest entry replaces it (that epoch never wrote a record).
"""

from __future__ import annotations

import bisect
import os

from kraftlog.engine.layout import LEADER_EPOCH_CHECKPOINT_NAME
from kraftlog.engine.log.errors import LogCorruptionError
from kraftlog.engine.log.fs import FileSystem, write_file_atomic

CHECKPOINT_NAME = LEADER_EPOCH_CHECKPOINT_NAME
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Ordered (epoch, start_offset) entries with Kafka's LeaderEpochFileCache semantics."""

    def __init__(self, fs: FileSystem, directory: str):
        self.fs = fs
        self.path = os.path.join(directory, CHECKPOINT_NAME)
        self._epochs: list[int] = []
        self._starts: list[int] = []
        if fs.exists(self.path):
            self._load()

    # -- persistence ----------------------------------------------------------------------------

    def _load(self) -> None:
        lines = self.fs.read_bytes(self.path).decode("ascii", errors="replace").splitlines()

        def bad(line_no: int, why: str) -> LogCorruptionError:
            return LogCorruptionError(f"leader-epoch-checkpoint line {line_no + 1}: {why}", path=self.path)

        if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
            raise bad(0, f"expected version {CHECKPOINT_VERSION}")
        try:
            count = int(lines[1])
        except ValueError:
            raise bad(1, "entry count is not an integer") from None
        if count < 0 or len(lines) != count + 2:
            raise bad(1, f"entry count {count} does not match {len(lines) - 2} entry lines")
        for i, line in enumerate(lines[2:], start=2):
            parts = line.split()
            if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
                raise bad(i, f"expected 'epoch startOffset', got {line!r}")
            epoch, start = int(parts[0]), int(parts[1])
            if epoch < 0 or start < 0 or (self._epochs and (epoch <= self._epochs[-1] or start <= self._starts[-1])):
                raise bad(i, f"entry {epoch} {start} is negative or out of order")
            self._epochs.append(epoch)
            self._starts.append(start)

    def _commit(self, epochs: list[int], starts: list[int]) -> None:
        """Persist the new entries, then adopt them (a failed write leaves the cache unchanged)."""
        lines = [str(CHECKPOINT_VERSION), str(len(epochs))]
        lines += [f"{e} {s}" for e, s in zip(epochs, starts, strict=True)]
        write_file_atomic(self.fs, self.path, ("\n".join(lines) + "\n").encode("ascii"))
        self._epochs, self._starts = epochs, starts

    # -- queries --------------------------------------------------------------------------------

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    @property
    def latest_start_offset(self) -> int | None:
        """Where the latest epoch starts (None when the cache is empty)."""
        return self._starts[-1] if self._starts else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch: the largest epoch <= ``requested_epoch``
        and the offset where the next epoch starts (the log end for the latest epoch).

        Unknown (undefined epoch, or larger than every known epoch) -> (-1, -1). An epoch below
        every known one answers (requested_epoch, first start offset), as Kafka does: the data
        before it is gone, and the follower must continue from there.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds ``offset`` (None before the first entry)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._epochs[i] if i >= 0 else None

    # -- changes (each persisted before returning) ------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns True when the cache changed.

        Kafka's rule: nothing changes when the latest entry is the same epoch at an offset <= this
        one; otherwise entries with an epoch >= ``epoch`` or a start >= ``start_offset`` are removed
        (they are no longer true) and the new entry is appended.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"leader epoch {epoch} and start offset {start_offset} must be >= 0")
        if self._epochs and self._epochs[-1] == epoch and self._starts[-1] <= start_offset:
            return False
        keep = len(self._epochs)
        while keep and (self._epochs[keep - 1] >= epoch or self._starts[keep - 1] >= start_offset):
            keep -= 1
        self._commit(self._epochs[:keep] + [epoch], self._starts[:keep] + [start_offset])
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries starting at or after ``end_offset`` (the log was truncated there)."""
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep < len(self._starts):
            self._commit(self._epochs[:keep], self._starts[:keep])

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly before ``start_offset``; the one holding it now starts there."""
        i = bisect.bisect_right(self._starts, start_offset) - 1
        if i < 0 or (i == 0 and self._starts[0] == start_offset):
            return
        self._commit(self._epochs[i:], [start_offset] + self._starts[i + 1:])

    def restore(self, entries: list[tuple[int, int]]) -> None:
        """Put back ``entries`` (from ``entries()``) after a failed operation changed the cache."""
        if entries != self.entries():
            self._commit([e for e, _ in entries], [s for _, s in entries])

    def clear(self) -> None:
        if self._epochs or not self.fs.exists(self.path):
            self._commit([], [])
