"""One log segment: ``<20-digit base offset>.log`` plus its ``.index`` and ``.timeindex``.

The ``.log`` file is a plain concatenation of record batches v2 (layout:
kraftlog.engine.records.layout); the segment's base offset is its first offset. Writes go at
``size`` (the valid length, kept in memory): through the handle's pwrite, or, for the leader's
hot path, natively through the handle's descriptor (``fd``, when it has one: log.py). Reads are
zero-copy memoryviews of a read-only memory map of the file; recovery reads with pread instead
(recovery.py) and maps only for its rare paths.

Memory maps and truncation. A reader may hold a memoryview of a batch for as long as it likes.
Truncating a file under a live map would make those views fault (SIGBUS) when touched, so before
shrinking the file the segment closes every map it made; when one is still exported (a reader
holds a view), it instead copies the surviving prefix to ``<name>.log.swap``, fsyncs it and
renames it over the ``.log``: the old inode lives on, unlinked, for as long as the views do.
Deleting a segment is an unlink, which mapped views survive the same way.
"""

from __future__ import annotations

import logging
import os
import struct

from kraftlog.engine.log import batch_fields
from kraftlog.engine.log.fs import FileSystem
from kraftlog.engine.log.index import OffsetIndex, TimeIndex, find_batch, index_run, read_span, walk_batches
from kraftlog.engine.records.layout import HEADER_SIZE, LAST_OFFSET_DELTA_OFFSET, SMALL_RUN_BATCHES

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
_BASE_OFFSET = struct.Struct(">q")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_log = logging.getLogger("kraftlog.log")


def _descriptor(handle) -> int | None:
    """The OS file descriptor of a handle that has one (RealFileHandle.fileno), else None: the
    leader append then writes through the handle's pwrite instead of natively."""
    fileno = getattr(handle, "fileno", None)
    return fileno() if fileno is not None else None


def is_preallocated_space(data) -> bool:
    """Whether ``data``, bytes after the last whole batch of a log's last segment, is space the
    log reserved ahead of its appends (LogConfig.preallocate_bytes) and a crash left: all zeros.
    Not a torn batch, which starts with its non-zero length; readers treat it as the log's end."""
    view = memoryview(data).cast("B")
    return bytes(view).count(0) == len(view)


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
      allocated                     the .log's length while it is preallocated past ``size`` (log.py)
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
        self.fd = _descriptor(self._handle)
        self.size = self._handle.size()
        self.allocated = self.size
        self.preallocated_bytes_cut = 0  # zeros after the last batch that recovery cut (not a torn tail)
        self.offset_index = OffsetIndex(fs, stem + INDEX_SUFFIX, base_offset, max_index_bytes)
        self.time_index = TimeIndex(fs, stem + TIME_INDEX_SUFFIX, base_offset, max_index_bytes)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.bytes_since_last_index_entry = 0
        self.first_append_ms: int | None = None
        self.index_mismatch = False  # an index entry pointed to the wrong batch: do not vouch for it at close
        self.dirty = False  # bytes written since the last fsync (or, after a crash, maybe never fsynced)
        self.indexes_writable = False  # both made writable by prepare_write (cleared by seal)
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

    def map_file(self, file_size: int):
        """A map of the first ``file_size`` bytes, valid or not (recovery's rare paths: a batch
        larger than the scan buffer, looking past a bad batch); it stays the segment's map."""
        self._retire_map()
        if not file_size:
            return b""
        self._map = self._handle.map(file_size)
        self._mapped = file_size
        return self._map

    def read_into(self, buffer, position: int) -> int:
        """Read file bytes at ``position`` into ``buffer`` (recovery's scan); returns the count."""
        read_into = getattr(self._handle, "pread_into", None)
        if read_into is not None:
            return read_into(buffer, position)
        data = self._handle.pread(len(buffer), position)  # a FileHandle from before pread_into
        buffer[:len(data)] = data
        return len(data)

    def position_of(self, offset: int) -> int:
        """Position of the first batch whose last offset is >= ``offset`` (``size`` if none).

        An index entry (last offset of a batch -> its position) is checked against the batch it
        points to before it is trusted: a wrong position would silently skip or repeat batches.
        One that does not match is logged, the search starts at the segment's first batch, and
        ``index_mismatch`` keeps the log from vouching for its indexes at close (the next open
        rebuilds them)."""
        entry, position = self.offset_index.lookup(offset)
        if position >= self.size:
            position = 0  # an index entry past the valid bytes cannot be used
        elif position and not self._ends_at(position, entry):
            if not self.index_mismatch:
                _log.warning("%s: index entry (offset %d -> position %d) does not point to a batch ending at that "
                             "offset; searching from the segment start, the indexes are rebuilt at the next open",
                             self.log_path, entry, position)
            self.index_mismatch = True
            position = 0
        return find_batch(self.buffer(), position, self.size, offset)

    def _ends_at(self, position: int, last_offset: int) -> bool:
        """Whether a batch header at ``position`` says its last offset is ``last_offset``."""
        if position + HEADER_SIZE > self.size:
            return False
        buf = self.buffer()
        (base,) = _BASE_OFFSET.unpack_from(buf, position)
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(buf, position + LAST_OFFSET_DELTA_OFFSET)
        return base + delta == last_offset

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

    def write(self, data) -> None:
        """Write the bytes-like ``data`` at the end. On OSError the caller calls ``rollback``."""
        pwrite = getattr(self._handle, "pwrite", None)
        if pwrite is not None:
            pwrite(data, self.size)
        else:  # a FileHandle from before pwrite
            self._handle.pwritev([data], self.size)
        self.dirty = True

    def commit_batches(self, fields, n: int) -> None:
        """Index ``n`` batches already written (the log defers this; size and next_offset moved at
        the write), described by ``fields`` slots 0..n-1 (check_batches' layout: position in this
        segment, size, base offset, last offset delta, max timestamp, epoch): index entries by the
        sparse rule, max timestamp, bytes since the last entry."""
        if n > SMALL_RUN_BATCHES:
            self._commit_run(fields, n)
            return
        entries, self.bytes_since_last_index_entry, self.max_timestamp, self.offset_of_max_timestamp = \
            batch_fields.index_entries(fields, n, self.index_interval_bytes, self.bytes_since_last_index_entry,
                                       self.max_timestamp, self.offset_of_max_timestamp)
        if len(entries) == 1:
            last, position, max_ts, max_ts_offset = entries[0]
            self.offset_index.append(last, position)
            self.time_index.maybe_append(max_ts, max_ts_offset)
        elif entries:
            self.offset_index.append_run([(e[0], e[1]) for e in entries])
            self.time_index.maybe_append_run([(e[2], e[3]) for e in entries])

    def _commit_run(self, fields, n: int) -> None:
        """commit_batches for a long run (a far follower's append: ~170 entries a 4,096-batch
        slice), in one native pass writing the entries as the index files lay them out (the
        per-entry Python of index_entries + append_run was ~4 ms of an 8 MiB Fetch answer)."""
        off, tim = self.offset_index, self.time_index
        off_out, time_out = bytearray(off.entry.size * min(n, off.room)), bytearray(tim.entry.size * min(n, tim.room))
        n_off, n_time, self.bytes_since_last_index_entry, self.max_timestamp, self.offset_of_max_timestamp, _ = \
            index_run(fields, n, self.base_offset, self.index_interval_bytes, self.bytes_since_last_index_entry,
                      self.max_timestamp, self.offset_of_max_timestamp, tim.last_key(-1), off_out, time_out)
        off.put_entries(off_out, n_off)
        tim.put_entries(time_out, n_time)

    def rollback(self) -> None:
        """Cut the file back to ``size`` after a failed write (raises OSError if that fails too)."""
        self._handle.truncate(self.size)
        self.allocated = self.size

    def preallocate(self, end: int, ahead_bytes: int) -> None:
        """Make the file at least ``end`` bytes long, reserving ``ahead_bytes`` more: appends then
        write into space the file already has, and an fdatasync flushes only their data, not a
        new length each time (~130 us against ~200 us and far shorter tails here; etcd
        preallocates its WAL for the same reason). The zeros past ``size`` are never valid data:
        ``trim`` cuts them at a roll and a clean close, recovery after a crash."""
        if end <= self.allocated:
            return
        allocate = getattr(self._handle, "allocate", None)
        if allocate is None:
            return
        allocate(end + ahead_bytes)
        self.allocated = end + ahead_bytes
        self.dirty = True  # the new length must be durable before what is written into it

    def trim(self) -> None:
        """Cut the preallocated zeros: the file ends at ``size`` again."""
        if self.allocated > self.size:
            self._handle.truncate(self.size)
            self.allocated = self.size
            self.dirty = True

    def sync(self) -> None:
        if self.dirty:
            self._handle.sync()
            self.dirty = False

    @property
    def index_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    @property
    def index_room(self) -> int:
        """Entries both indexes can still take (each batch adds at most one to each)."""
        oi, ti = self.offset_index, self.time_index
        return min(oi.max_entries - oi.entries, ti.max_entries - ti.entries)

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
        self.size = self.allocated = size
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
        self.fd = _descriptor(self._handle)
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
        """The segment takes appends again: its indexes become writable at their first entry."""

    def prepare_write(self) -> None:
        """Make both indexes writable before an append's bytes go out, so a failure to extend or
        map them fails the append cleanly instead of striking after the data was written."""
        self.offset_index.make_writable()
        self.time_index.make_writable()
        self.indexes_writable = True

    @property
    def indexes_dirty(self) -> bool:
        """Index files changed since they were last made durable."""
        return self.offset_index.dirty or self.time_index.dirty

    def seal(self) -> None:
        """The segment stops taking appends: final time entry (as Kafka), trim the indexes."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.seal()
        self.time_index.seal()
        self.indexes_writable = False

    def sync_indexes(self) -> None:
        self.offset_index.sync()
        self.time_index.sync()

    def close(self) -> None:
        self._release_maps()
        self._retired = []
        self.fd = None
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
