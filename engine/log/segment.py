"""One log segment: ``<20-digit base offset>.log`` plus its ``.index`` and ``.timeindex``.

The ``.log`` file is a plain concatenation of record batches v2 (layout:
kraftlog.engine.records.layout); the segment's base offset is its first offset. Writes are
positional vectored writes at ``size`` (the valid length, kept in memory); reads are zero-copy
memoryviews of a read-only memory map of the file.

Memory maps and truncation. A reader may hold a memoryview of a batch for as long as it likes.
Truncating a file under a live map would make those views fault (SIGBUS) when touched, so before
shrinking the file the segment closes every map it made; when one is still exported (a reader
holds a view), it instead copies the surviving prefix to ``<name>.log.swap``, fsyncs it and
renames it over the ``.log``: the old inode lives on, unlinked, for as long as the views do.
Deleting a segment is an unlink, which mapped views survive the same way.
"""

from __future__ import annotations

import os
import struct

from kraftlog.engine.log.fs import FileSystem
from kraftlog.engine.log.index import OffsetIndex, TimeIndex, find_batch, read_span, walk_batches

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
_BASE_OFFSET = struct.Struct(">q")


def segment_name(base_offset: int) -> str:
    """Kafka's file name stem: the base offset as 20 decimal digits."""
    return f"{base_offset:020d}"


def parse_segment_name(name: str) -> int | None:
    """Base offset of ``<20 digits>.log``, or None for any other name."""
    stem, dot, suffix = name.partition(".")
    if dot and "." + suffix == LOG_SUFFIX and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class Segment:
    """A segment's files and in-memory state. Not thread-safe: the Log serialises access.

    State kept in memory (rebuilt on open, never read from disk without checks):
      size                          valid bytes of the .log (the file may be longer after a crash)
      next_offset                   last offset in the segment + 1 (base offset when empty)
      max_timestamp, offset_of_max_timestamp
      bytes_since_last_index_entry  for the sparse-index rule (index.py)
    """

    def __init__(self, fs: FileSystem, directory: str, base_offset: int, *, index_interval_bytes: int,
                 max_index_bytes: int, create: bool = False):
        self.fs = fs
        self.directory = directory
        self.base_offset = base_offset
        stem = os.path.join(directory, segment_name(base_offset))
        self.log_path = stem + LOG_SUFFIX
        self.index_interval_bytes = index_interval_bytes
        self._handle = fs.open(self.log_path, create=create)
        self.size = self._handle.size()
        self.offset_index = OffsetIndex(fs, stem + INDEX_SUFFIX, base_offset, max_index_bytes)
        self.time_index = TimeIndex(fs, stem + TIME_INDEX_SUFFIX, base_offset, max_index_bytes)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.bytes_since_last_index_entry = 0
        self.first_append_ms: int | None = None
        self.dirty = False  # bytes written since the last fsync
        self.indexes_dirty = False  # index files changed since they were last made durable
        self._map = None
        self._mapped = 0
        self._retired: list = []  # older maps that a reader still held a view of

    # -- reading ------------------------------------------------------------------------------

    def buffer(self):
        """A read-only map covering the segment's ``size`` valid bytes (b"" when empty)."""
        if self.size > self._mapped:
            self._retire_map()
            self._map = self._handle.map(self.size)
            self._mapped = self.size
        return self._map if self._map is not None else b""

    def scan_buffer(self, file_size: int):
        """A map of the first ``file_size`` bytes pre-faulted for a sequential scan (recovery)."""
        self._retire_map()
        if not file_size:
            return b""
        self._map = self._handle.map(file_size, populate=True)
        self._mapped = file_size
        return self._map

    def position_of(self, offset: int) -> int:
        """Position of the first batch whose last offset is >= ``offset`` (``size`` if none)."""
        _, position = self.offset_index.lookup(offset)
        if position >= self.size:
            position = 0  # an index entry past the valid bytes cannot be used
        return find_batch(self.buffer(), position, self.size, offset)

    def read(self, offset: int, max_bytes: int, limit_offset: int, min_one: bool) -> tuple[memoryview, int]:
        """Whole batches from the one holding ``offset``: (view, position). Empty view if none."""
        buf = self.buffer()
        position = self.position_of(offset)
        end = read_span(buf, position, self.size, max_bytes, limit_offset, min_one)
        return memoryview(buf)[position:end], position

    def read_file_tail(self, start: int, end: int) -> bytes:
        """Copy of ``[start, end)`` of the file, through the file system (not the map)."""
        return self._handle.pread(end - start, start)

    def file_size(self) -> int:
        return self._handle.size()

    # -- writing ------------------------------------------------------------------------------

    def write(self, buffers, nbytes: int) -> None:
        """Write ``nbytes`` of ``buffers`` at the end. On OSError the caller calls ``rollback``."""
        self._handle.pwritev(buffers, self.size)
        self.dirty = True

    def commit_batch(self, position: int, size: int, last_offset: int, max_timestamp: int) -> None:
        """Account for a batch now written at ``position``: indexes, max timestamp, end."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += size
        self.size = position + size
        self.next_offset = last_offset + 1

    def rollback(self) -> None:
        """Cut the file back to ``size`` after a failed write (raises OSError if that fails too)."""
        self._handle.truncate(self.size)

    def sync(self) -> None:
        if self.dirty:
            self._handle.sync()
            self.dirty = False

    @property
    def index_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    # -- state after recovery or truncation ---------------------------------------------------

    def reset_index_state(self) -> None:
        """Derive in-memory index state from the indexes (after a load, rebuild or truncation)."""
        self.max_timestamp, offset = self.time_index.last_entry()
        self.offset_of_max_timestamp = offset if self.max_timestamp >= 0 else -1
        last_indexed_position = self.offset_index.last_entry()[1] if self.offset_index.entries else 0
        self.bytes_since_last_index_entry = self.size - last_indexed_position

    def walk_tail(self) -> tuple[int, int]:
        """Walk headers from the last index entry: (position reached, last offset or -1)."""
        start = self.offset_index.last_entry()[1] if self.offset_index.entries else 0
        if start >= self.size:
            return start, -1
        return walk_batches(self.buffer(), start, self.size)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns the bytes removed.

        Like Kafka, a batch holding ``offset`` goes whole: the new end is that batch's base.
        """
        position = self.position_of(offset)
        if position >= self.size:
            return 0
        if position:
            new_next = _BASE_OFFSET.unpack_from(self.buffer(), position)[0]
        else:
            new_next = self.base_offset
        removed = self.size - position
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.truncate_file(position)
        self.next_offset = new_next
        self.reset_index_state()
        return removed

    def truncate_file(self, size: int) -> None:
        """Shrink the .log to ``size`` safely for readers holding views (see the module doc)."""
        if self._release_maps():
            self._handle.truncate(size)
        else:
            self._swap_prefix(size)
        self.size = size
        self.dirty = True

    def _swap_prefix(self, size: int) -> None:
        swap = self.log_path + SWAP_SUFFIX
        out = self.fs.open(swap, create=True)
        try:
            out.truncate(0)
            chunk_bytes = 1 << 20
            for start in range(0, size, chunk_bytes):
                out.pwritev([self._handle.pread(min(chunk_bytes, size - start), start)], start)
            out.sync()
        finally:
            out.close()
        self.fs.rename(swap, self.log_path)
        self.fs.sync_dir(self.directory)
        self._handle.close()
        self._handle = self.fs.open(self.log_path)
        self._map, self._mapped, self._retired = None, 0, []

    def _retire_map(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                self._retired.append(self._map)
        self._map, self._mapped = None, 0

    def _release_maps(self) -> bool:
        """Close every map; False when a reader still holds a view of one."""
        self._retire_map()
        alive = []
        for old in self._retired:
            try:
                old.close()
            except BufferError:
                alive.append(old)
        self._retired = alive
        return not alive

    # -- life cycle ---------------------------------------------------------------------------

    def make_active(self) -> None:
        self.indexes_dirty = True
        self.offset_index.make_writable()
        self.time_index.make_writable()

    def seal(self) -> None:
        """The segment stops taking appends: final time entry (as Kafka), trim the indexes."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.seal()
        self.time_index.seal()

    def sync_indexes(self) -> None:
        if self.indexes_dirty:
            self.offset_index.sync()
            self.time_index.sync()
            self.indexes_dirty = False

    def close(self) -> None:
        self._release_maps()
        self._retired = []
        self.offset_index.close()
        self.time_index.close()
        self._handle.close()

    def delete(self) -> None:
        """Close and remove the three files (rename to .deleted first so a crash leaves no half)."""
        self.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            if self.fs.exists(path):
                self.fs.rename(path, path + DELETED_SUFFIX)
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            if self.fs.exists(path + DELETED_SUFFIX):
                self.fs.remove(path + DELETED_SUFFIX)
