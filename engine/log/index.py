"""Sparse offset and time indexes of a segment, memory-mapped, searched natively.

Native search/walk functions come from kraftlog._index when built, else the twin
kraftlog.engine.log.index_pure; everything outside this module imports them from here.

File layouts (big-endian, Kafka's OffsetIndex / TimeIndex):

    <base>.index      entries of 8 bytes:  relativeOffset i32 | position i32
    <base>.timeindex  entries of 12 bytes: timestamp i64      | relativeOffset i32

relativeOffset = offset - segment base offset. The offset index is *sparse*: an entry is added
for a batch only when more than ``index_interval_bytes`` of log were written since the previous
entry (the entry names the batch's last offset and the batch's file position), so a lookup
finds the greatest entry <= the wanted offset and the reader walks batch headers from there.
The time index holds (max timestamp so far, offset of the batch that had it), appended at the
same moments when the timestamp grew.

The active segment's index files are pre-allocated to ``max_index_bytes`` and mapped
read-write from their first entry on (an open and close without appends leaves them untouched);
the number of valid entries lives in memory. On a clean close (or a roll) the file is
trimmed to its valid entries, so on the next clean open ``entries = file size / entry size``. A
file left pre-allocated by a crash is never read: without the clean-shutdown marker every index is
rebuilt from the log (see recovery.py), as Kafka does.
"""

from __future__ import annotations

import mmap
import struct

from kraftlog._accel import select
from kraftlog.engine.log.errors import LogCorruptionError
from kraftlog.engine.log.fs import FileHandle, FileSystem

_impl = select("kraftlog._index", "kraftlog.engine.log.index_pure")

IMPLEMENTATION: str = _impl.IMPLEMENTATION
offset_index_search = _impl.offset_index_search
time_index_search = _impl.time_index_search
find_batch = _impl.find_batch
read_span = _impl.read_span
walk_batches = _impl.walk_batches
check_batches = _impl.check_batches
stamp_batches = _impl.stamp_batches
stamp_headers = _impl.stamp_headers
write_stamped = _impl.write_stamped
stamp_write = _impl.stamp_write
build_indexes = _impl.build_indexes
index_run = _impl.index_run

CHECK_FIELDS = 6  # check_batches: position, size, base_offset, last_offset_delta, max_timestamp, epoch

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _Index:
    """A pre-allocated, memory-mapped file of fixed-size entries; only ``entries`` are valid.

    The file is made writable (extended to ``max_entries`` and mapped read-write) only when an
    entry is first written, so opening and closing a log without appends leaves index files
    untouched: nothing to fsync. ``dirty`` says the file changed since it was last made durable.
    """

    entry = _OFFSET_ENTRY

    def __init__(self, fs: FileSystem, path: str, base_offset: int, max_index_bytes: int):
        self.fs = fs
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.entry.size)
        self.entries = 0
        self.writable = False
        self.dirty = False
        self.existed = fs.exists(path)  # a missing index is rebuilt, never assumed empty
        self._handle: FileHandle | None = fs.open(path, create=True)
        self._map = None
        self._last: tuple[int, int] | None = None  # (slot, key) last written: append's order check

    # -- mapping --------------------------------------------------------------------------------

    def load_trimmed(self) -> None:
        """Take the file as written by a clean close: every whole entry in it is valid."""
        size = self._handle.size()
        if size % self.entry.size:
            raise LogCorruptionError(f"index size {size} is not a multiple of {self.entry.size}", path=self.path)
        self.entries = min(size // self.entry.size, self.max_entries)
        self._last = None
        self._map_read_only()

    def adopt(self, expected) -> bool:
        """Keep the file, read-only and unchanged, when it holds exactly ``expected`` (a sealed
        index's bytes); False, with nothing changed, when it does not."""
        size = self._handle.size()
        if size != len(expected) or size > self.max_entries * self.entry.size:
            return False
        if size and self._handle.pread(size, 0) != expected:
            return False
        self._unmap()
        self.writable = False
        self.entries = size // self.entry.size
        self._last = None
        self._map_read_only()
        return True

    def write_entries(self, data) -> None:
        """Replace every entry with ``data`` (whole entries), in the writable file."""
        self.make_writable()
        self._map[:len(data)] = data
        self.entries = len(data) // self.entry.size
        self._last = None

    def make_writable(self) -> None:
        """Extend the file to its pre-allocated size and map it read-write (the active segment)."""
        if self.writable:
            return
        self._unmap()
        self._handle.truncate(self.max_entries * self.entry.size)
        self.dirty = True
        self._map = self._handle.map(self.max_entries * self.entry.size, writable=True)
        # The file is sparse past its entries: without this, the first fault (the first entry
        # written) reads ahead into it, zero-filling up to the device's read_ahead_kb of page
        # cache (8 MiB here: ~2.5 ms per index, 5 ms of a new segment's first append)
        if hasattr(self._map, "madvise") and hasattr(mmap, "MADV_RANDOM"):
            self._map.madvise(mmap.MADV_RANDOM)
        self.writable = True

    def seal(self) -> None:
        """Trim the file to its valid entries and map it read-only (segment rolled or closed).

        An index that was never made writable and already holds exactly its entries is left
        alone (no truncate, so nothing new to fsync)."""
        if not self.writable and self._handle.size() == self.entries * self.entry.size:
            return
        self._unmap()
        self._handle.truncate(self.entries * self.entry.size)
        self.dirty = True
        self.writable = False
        self._map_read_only()

    def _map_read_only(self) -> None:
        self._unmap()
        length = self.entries * self.entry.size
        self._map = self._handle.map(length) if length else None

    def _unmap(self) -> None:
        # No msync: the writes are in the page cache already (MAP_SHARED), and sync()'s fdatasync
        # writes back the mapped dirty pages too.
        if self._map is not None:
            self._map.close()
            self._map = None

    def sync(self) -> None:
        """Make the index durable when it changed (before the clean-shutdown marker is written)."""
        if self.dirty:
            self._handle.sync()
            self.dirty = False

    def close(self) -> None:
        self._unmap()
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def buffer(self):
        """The mapped bytes (only the first ``entries`` entries are meaningful), or b"" when empty."""
        return self._map if self._map is not None else b""

    def reset(self) -> None:
        self.entries = 0
        self._last = None

    def raw_entries(self) -> bytes:
        """The valid entries' bytes (tests compare rebuilt indexes with appended ones)."""
        return bytes(self._map[: self.entries * self.entry.size]) if self._map is not None else b""

    def _put(self, slot: int, a: int, b: int) -> None:
        if not self.writable:
            self.make_writable()
        self.entry.pack_into(self._map, slot * self.entry.size, a, b)
        self.dirty = True
        self._last = (slot, a)

    def _put_run(self, slot: int, flat: list[int]) -> None:
        """Entries slot, slot + 1, ... from ``flat`` (their fields in order), in one write."""
        k = len(flat) // 2
        if not self.writable:
            self.make_writable()
        size = self.entry.size
        fmt = ">" + self.entry.format.lstrip(">") * k
        self._map[slot * size:(slot + k) * size] = struct.pack(fmt, *flat)
        self.dirty = True
        self._last = (slot + k - 1, flat[-2])
        self.entries = slot + k

    @property
    def room(self) -> int:
        """Entries the file can still take."""
        return self.max_entries - self.entries

    def last_key(self, default: int) -> int:
        """The first field of the last entry (a relative offset, a timestamp), ``default`` when empty."""
        return self._last_key(self.entries - 1) if self.entries else default

    def put_entries(self, raw, k: int) -> None:
        """Append the ``k`` whole entries laid out at the start of ``raw`` (index_run's output), in
        one write; none: the file is left as it is."""
        if not k:
            return
        if not self.writable:
            self.make_writable()
        n, size = self.entries, self.entry.size
        self._map[n * size:(n + k) * size] = memoryview(raw)[:k * size]
        self.dirty = True
        self.entries = n + k
        self._last = None

    def _last_key(self, slot: int) -> int:
        """First field of entry ``slot`` (the last valid one), from the cache when it is fresh."""
        last = self._last
        return last[1] if last is not None and last[0] == slot else self._get(slot)[0]

    def _get(self, slot: int) -> tuple[int, int]:
        return self.entry.unpack_from(self._map, slot * self.entry.size)


class OffsetIndex(_Index):
    """``<base>.index``: sparse map offset -> file position of the batch holding it."""

    entry = _OFFSET_ENTRY

    def append(self, offset: int, position: int) -> bool:
        """Add (offset, position); returns False when the index is full. Offsets must grow."""
        n = self.entries
        if n >= self.max_entries:
            return False
        rel = offset - self.base_offset
        if n and rel <= self._last_key(n - 1):
            raise ValueError(f"index offset {offset} does not follow {self.last_entry()[0]} in {self.path}")
        self._put(n, rel, position)
        self.entries = n + 1
        return True

    def append_run(self, pairs: list[tuple[int, int]]) -> None:
        """``append`` of each (offset, position) in order, written in one go: a far follower's
        append indexes a few hundred entries at once. Stops at a full index, as append does."""
        n, base = self.entries, self.base_offset
        room = self.max_entries - n
        if len(pairs) > room:
            pairs = pairs[:room]
        if not pairs:
            return
        previous = self._last_key(n - 1) if n else -1
        flat = []
        for offset, position in pairs:
            rel = offset - base
            if rel <= previous:
                raise ValueError(f"index offset {offset} does not follow {base + previous} in {self.path}")
            flat += (rel, position)
            previous = rel
        self._put_run(n, flat)

    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry; (base offset, 0) when empty."""
        if not self.entries:
            return self.base_offset, 0
        rel, pos = self._get(self.entries - 1)
        return self.base_offset + rel, pos

    def lookup(self, offset: int) -> tuple[int, int]:
        """Greatest entry with offset <= ``offset`` as (offset, position); (base, 0) if none."""
        slot = offset_index_search(self.buffer, self.entries, offset - self.base_offset)
        if slot < 0:
            return self.base_offset, 0
        rel, pos = self._get(slot)
        return self.base_offset + rel, pos

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        self.entries = offset_index_search(self.buffer, self.entries, offset - self.base_offset - 1) + 1

    def check(self, segment_size: int) -> None:
        """Cheap consistency checks for a trusted (clean-shutdown) index; raises LogCorruptionError."""
        previous_rel = previous_pos = -1
        for slot in range(self.entries):
            rel, pos = self._get(slot)
            if rel <= previous_rel or pos <= previous_pos or pos >= segment_size or rel < 0:
                raise LogCorruptionError(f"offset index entry {slot} ({rel}, {pos}) is out of order",
                                         path=self.path, position=slot * self.entry.size)
            previous_rel, previous_pos = rel, pos


class TimeIndex(_Index):
    """``<base>.timeindex``: (max timestamp so far, offset) pairs, growing in both."""

    entry = _TIME_ENTRY

    def maybe_append_run(self, pairs: list[tuple[int, int]]) -> None:
        """``maybe_append`` of each (timestamp, offset) in order, written in one go."""
        n = self.entries
        room = self.max_entries - n
        latest = self._last_key(n - 1) if n else -1
        flat = []
        for timestamp, offset in pairs:
            if timestamp > latest and len(flat) < 2 * room:
                flat += (timestamp, offset - self.base_offset)
                latest = timestamp
        if flat:
            self._put_run(n, flat)

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add (timestamp, offset) when the timestamp grew past the last entry (-1 when empty)."""
        n = self.entries
        if n >= self.max_entries or timestamp <= (self._last_key(n - 1) if n else -1):
            return False
        self._put(n, timestamp, offset - self.base_offset)
        self.entries = n + 1
        return True

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry; (-1, base offset) when empty."""
        if not self.entries:
            return -1, self.base_offset
        ts, rel = self._get(self.entries - 1)
        return ts, self.base_offset + rel

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Greatest entry with timestamp <= ``timestamp`` as (timestamp, offset); (-1, base) if none."""
        slot = time_index_search(self.buffer, self.entries, timestamp)
        if slot < 0:
            return -1, self.base_offset
        ts, rel = self._get(slot)
        return ts, self.base_offset + rel

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset`` (offsets grow with the slots)."""
        while self.entries and self.last_entry()[1] >= offset:
            self.entries -= 1

    def check(self, next_offset: int) -> None:
        previous_ts, previous_rel = -1, -1
        for slot in range(self.entries):
            ts, rel = self._get(slot)
            if ts <= previous_ts or rel < previous_rel or self.base_offset + rel >= max(next_offset, self.base_offset + 1):
                raise LogCorruptionError(f"time index entry {slot} ({ts}, {rel}) is out of order",
                                         path=self.path, position=slot * self.entry.size)
            previous_ts, previous_rel = ts, rel
