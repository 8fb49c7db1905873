"""The segmented log: Kafka's on-disk partition log, shaped as the Raft layer's ReplicatedLog.

Directory layout (one log per directory)::

    00000000000000000000.log        record batches v2, offsets from the file's base offset
    00000000000000000000.index      sparse offset index   (index.py)
    00000000000000000000.timeindex  time index            (index.py)
    00000000000000004711.log ...    later segments, each starting where the previous ends
    leader-epoch-checkpoint         epoch -> start offset (epoch_cache.py)
    log-start-offset-checkpoint     "0\\n<log start offset>\\n", when it is above the first segment's base
    .clean-shutdown                 present only between a clean close and the next open

Offsets: ``start_offset <= high_watermark <= end_offset`` (the high watermark is clamped into
that range; a higher one learnt from a leader is remembered for KIP-392 answers). Every
segment starts at the end offset of the one before it; offsets are contiguous.

Thread safety: one writer at a time is assumed, and every public method takes the log's lock,
so calls from several threads are serialised and safe. Reads may run while another thread
appends: a read sees the log as of the moment it took the lock. Views returned by ``read`` are
zero-copy memoryviews of a read-only memory map; they stay valid (and keep their bytes) even
after the log is truncated, the segment deleted or the log closed, because the log never
shrinks a file under a live map (segment.py).

Durability: an append is durable once ``last_flushed_offset`` passes it. ``LogConfig`` says
when the log fsyncs on its own: after every append (``flush_interval_messages=1``, the
default), or group commit: once ``flush_interval_messages`` messages or ``flush_interval_ms``
have accumulated, checked at each append and by ``flush_if_due()`` (there is no background
thread; call it from your loop when appends may pause). After a crash, only the segments before
the last one count as flushed when the log opens (the crash may have been the process only,
leaving the last segment's bytes in the page cache, unsynced); the next flush covers the rest.

Appends defer their index work: the batches' descriptions wait in a reused array and are
indexed in bulk (``_index_pending``) before anything reads the indexes; see LogConfig's
max_batches_per_append for the bound.

Failure: an append whose write or fsync fails is rolled back (the file is cut back, the indexes
and end offset never moved) and raises LogStorageError; the next append may succeed. If the
rollback itself fails, or a group-commit fsync fails (acknowledged appends may not be durable),
the log goes offline: reads keep working, writes raise LogOfflineError until it is reopened,
which recovers a consistent prefix.
"""

from __future__ import annotations

import array
import bisect
import contextlib
import dataclasses
import enum
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

from kraftlog.engine.layout import LOG_START_CHECKPOINT_NAME
from kraftlog.engine.log import batch_fields, recovery
from kraftlog.engine.log.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from kraftlog.engine.log.errors import (
    InvalidAppendError,
    LogClosedError,
    LogCorruptionError,
    LogOfflineError,
    LogStorageError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
)
from kraftlog.engine.log.fs import FileSystem, RealFileSystem, write_file_atomic
from kraftlog.engine.log.index import (
    CHECK_FIELDS,
    check_batches,
    stamp_batches,
    stamp_headers,
    stamp_write,
    write_stamped,
)
from kraftlog.engine.log.recovery import RecoveryMode
from kraftlog.engine.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    Segment,
    parse_segment_name,
    segment_name,
)
from kraftlog.engine.log.writeback import Writeback
from kraftlog.engine.records.layout import (
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
)
from kraftlog.errors import CorruptRecordError

# numpy is imported inside the functions that take a scan's arrays (the scan loaded it already),
# so importing the log does not load it (bench row startup.import_log_s).
_log = logging.getLogger("kraftlog.log")

CLEAN_SHUTDOWN_NAME = ".clean-shutdown"
MAX_SEGMENT_BYTES = (1 << 31) - 1  # .index positions are i32
MAX_RELATIVE_OFFSET = (1 << 31) - 1  # .index relative offsets are i32


class Isolation(enum.Enum):
    """How far a read may see."""

    LOG_END = "log_end"  # everything appended (the leader replicating to followers)
    HIGH_WATERMARK = "high_watermark"  # committed data only (state machines, consumers)


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Options of a log directory. Sizes in bytes, times in milliseconds.

    segment_bytes             roll to a new segment before a segment would exceed this
    segment_ms                roll when the active segment's first append is older than this
    index_interval_bytes      bytes of log between two sparse index entries (Kafka: 4096)
    max_index_bytes           pre-allocated size of each index file; a full index rolls the segment
    flush_interval_messages   fsync once this many offsets are unflushed (1: every append; None: never by count)
    flush_interval_ms         fsync once the oldest unflushed append is this old (None: never by time)
    recovery_mode             what recovery may truncate after a crash (recovery.RecoveryMode)
    verify_crc_on_append      CRC-check every batch handed to an append (on by default; off skips ~2.5 us / 64 KiB)
    max_batches_per_append    limit on the batches one append call may carry, and on the appended batches
                              whose index work waits (indexed in bulk at this many, or before any read)
    preallocate_bytes         keep the active segment's file this much longer than its data (0: off;
                              Kafka's log.preallocate reserves a whole segment): fsyncs of appends into
                              reserved space do not change the file's length. Cut at a roll and a clean
                              close; after a crash, recovery cuts the zeros without calling them torn
    writeback_bytes           once appends wrote this many bytes since the last flush, start them for
                              the disk on a thread of their own (0: off; Linux only), so the flush after
                              a long append waits for less (writeback.py; only a hint: flush alone
                              makes anything durable)
    """

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    max_index_bytes: int = 10 * 1024 * 1024
    flush_interval_messages: int | None = 1
    flush_interval_ms: int | None = None
    recovery_mode: RecoveryMode = RecoveryMode.TOLERATE_TAIL_CORRUPTION
    verify_crc_on_append: bool = True
    max_batches_per_append: int = 4096
    preallocate_bytes: int = 0
    writeback_bytes: int = 0

    def __post_init__(self) -> None:
        if not 64 <= self.segment_bytes <= MAX_SEGMENT_BYTES:
            raise ValueError(f"segment_bytes must be in [64, {MAX_SEGMENT_BYTES}], got {self.segment_bytes}")
        if self.segment_ms <= 0 or self.index_interval_bytes < 0 or self.max_index_bytes < 12:
            raise ValueError("segment_ms must be > 0, index_interval_bytes >= 0, max_index_bytes >= 12")
        if self.flush_interval_messages is not None and self.flush_interval_messages < 1:
            raise ValueError("flush_interval_messages must be >= 1 or None")
        if self.flush_interval_ms is not None and self.flush_interval_ms < 0:
            raise ValueError("flush_interval_ms must be >= 0 or None")
        if self.max_batches_per_append < 1:
            raise ValueError("max_batches_per_append must be >= 1")
        if not 0 <= self.preallocate_bytes <= MAX_SEGMENT_BYTES:
            raise ValueError(f"preallocate_bytes must be in [0, {MAX_SEGMENT_BYTES}], got {self.preallocate_bytes}")
        if self.writeback_bytes < 0:
            raise ValueError(f"writeback_bytes must be >= 0, got {self.writeback_bytes}")


@dataclasses.dataclass(frozen=True)
class LogAppendInfo:
    """What an append wrote: offsets ``first_offset..last_offset`` in ``batch_count`` batches."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    batch_count: int
    size_bytes: int


@dataclasses.dataclass(frozen=True)
class LogFetchInfo:
    """The answer to a read: whole batches, zero-copy, from one segment.

    ``records`` starts with the batch holding ``start_offset`` (its base may be lower) and may
    be empty. ``position`` is its byte position in the segment ``segment_base_offset``.
    """

    records: memoryview
    start_offset: int
    segment_base_offset: int
    position: int
    log_start_offset: int
    high_watermark: int
    log_end_offset: int


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Log:
    """A segmented, Kafka-format log in one directory. See the module docstring.

    Open with ``Log(directory, LogConfig(...))`` (or ``Log.open``); use as a context manager or
    call ``close()``: a clean close lets the next open skip the CRC scan.
    """

    def __init__(self, directory: str | os.PathLike, config: LogConfig | None = None, *,
                 fs: FileSystem | None = None, clock_ms: Callable[[], int] = _monotonic_ms):
        self.directory = os.fspath(directory)
        self.config = config or LogConfig()
        self.fs = fs or RealFileSystem()
        self._clock_ms = clock_ms
        self._lock = threading.RLock()
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._closed = False
        self._offline: str | None = None
        # Batch descriptions (CHECK_FIELDS int64 each): the pending batches, then the append being
        # checked; twice max_batches_per_append, as the pending ones are indexed at that many.
        self._scratch = array.array("q", bytes(8 * CHECK_FIELDS * 2 * self.config.max_batches_per_append))
        self._headers = bytearray(16 * 2 * self.config.max_batches_per_append)  # stamp_headers' output, per slot
        self._pending = 0  # batches appended to the active segment and not yet indexed
        self._pending_limit = 1  # index them before this many are pending (see _index_pending)
        self._index_room = 1  # entries the active segment's indexes could take at the last _index_pending
        self._write_buffer = bytearray(0)  # leader appends are stamped here (grown, reused)
        self._dir_dirty = False
        # the background writeback (LogConfig.writeback_bytes): real files only, whose fsync errors
        # Linux reports to every descriptor (writeback.py says why that matters)
        self._writeback = Writeback() if self.config.writeback_bytes and sys.platform == "linux" \
            and isinstance(self.fs, RealFileSystem) else None
        self._written_since_writeback = 0
        self.recovered_unclean = False
        self.truncated_bytes_on_open = 0
        self._open()

    @classmethod
    def open(cls, directory: str | os.PathLike, config: LogConfig | None = None, **kwargs) -> Log:
        """Same as the constructor."""
        return cls(directory, config, **kwargs)

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ================================================================ opening and recovery

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _open(self) -> None:
        fs = self.fs
        fs.makedirs(self.directory)
        bases = self._clean_directory()
        clean = fs.exists(self._path(CLEAN_SHUTDOWN_NAME))
        self.recovered_unclean = not clean
        self.epochs = LeaderEpochCache(fs, self.directory)
        start_checkpoint = self._read_start_checkpoint()
        try:
            scans = self._load_segments(bases, clean)
        except BaseException:
            for seg in self._segments:
                seg.close()
            raise
        if not self._segments:
            self._add_segment(start_checkpoint or 0)
        end = self._segments[-1].next_offset
        first = self._segments[0].base_offset
        self._start = start_checkpoint if start_checkpoint is not None and first <= start_checkpoint <= end else first
        self._end = end
        self._hw = self._start
        self._segments[-1].make_active()
        self._segments[-1].first_append_ms = self._clock_ms() if self._segments[-1].size else None
        self._recover_epochs(scans)
        self._delete_segments_below_start()
        self._init_flush_state(clean)
        self._report_recovery(scans)
        if clean:
            # The marker's removal must be durable before anything changes the log: a stale marker
            # would let the next open trust indexes and skip the CRC scan of bytes written since.
            fs.remove(self._path(CLEAN_SHUTDOWN_NAME))
            fs.sync_dir(self.directory)

    def _init_flush_state(self, clean: bool) -> None:
        """What is durable on open. After a clean close, everything (it was fsynced before the
        marker). After a crash, every segment but the last (a roll fsyncs first), but not the last
        one's bytes, length nor directory entry: the crash may have been the process only, leaving
        them in the page cache (a torn tail this open or an earlier one cut off included: empty,
        the segment may still come back longer after a power loss). Recovery does not fsync them (an
        fsync costs milliseconds even when there is nothing to write); they count as unflushed and
        the next flush, or the close before writing the marker, makes them durable."""
        last = self._segments[-1]
        self._flushed = self._end
        self._unflushed_messages = 0
        self._oldest_unflushed_ms: int | None = None
        if clean:
            return
        last.dirty = True
        self._dir_dirty = True
        if not last.size:
            return
        self._flushed = min(self._end, max(self._start, last.base_offset))
        self._unflushed_messages = self._end - self._flushed
        self._oldest_unflushed_ms = self._clock_ms()

    def _clean_directory(self) -> list[int]:
        """Remove leftovers of interrupted operations; return the segment base offsets, sorted."""
        names = self.fs.listdir(self.directory)
        bases = sorted(b for b in (parse_segment_name(n) for n in names) if b is not None)
        stems = {segment_name(b) for b in bases}
        for name in names:
            leftover = name.endswith((DELETED_SUFFIX, SWAP_SUFFIX, ".tmp"))
            orphan = name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)) and name.split(".")[0] not in stems
            if leftover or orphan:
                self.fs.remove(self._path(name))
        return bases

    def _load_segments(self, bases: list[int], clean: bool) -> list:
        cfg, scans, buffer = self.config, [], None
        for base in bases:
            seg = Segment(self.fs, self.directory, base, index_interval_bytes=cfg.index_interval_bytes,
                          max_index_bytes=cfg.max_index_bytes)
            self._segments.append(seg)
            self._bases.append(base)
        expected = None
        for i, seg in enumerate(self._segments):
            is_last = i == len(self._segments) - 1
            nxt = None if is_last else self._segments[i + 1].base_offset
            if clean and recovery.load_clean(seg):
                scans.append(None)
            else:
                self.recovered_unclean = True
                before = seg.file_size()
                if buffer is None:
                    buffer = bytearray(recovery.SCAN_CHUNK_BYTES)  # reused by every segment's scan
                scans.append(recovery.recover(seg, is_last=is_last, mode=cfg.recovery_mode,
                                              expected_base_offset=expected, buffer=buffer))
                self.truncated_bytes_on_open += before - seg.size - seg.preallocated_bytes_cut
                if not is_last:
                    seg.seal()
            if not is_last and seg.next_offset != nxt:
                raise LogCorruptionError(f"segment ends at offset {seg.next_offset} but the next one starts at {nxt}",
                                         path=seg.log_path, position=seg.size)
            expected = seg.next_offset
        return scans

    def _report_recovery(self, scans: list) -> None:
        """One line for what an open repaired (Kafka warns on each): segments CRC-checked and
        indexes rebuilt after an unclean shutdown, and a torn or corrupt tail cut off."""
        checked = sum(scan is not None for scan in scans)
        if self.truncated_bytes_on_open:
            _log.warning("%s: truncated %d byte(s) of torn or corrupt tail on open; the log now ends at offset %d "
                         "(%d segment(s) CRC-checked, their indexes rebuilt)", self.directory,
                         self.truncated_bytes_on_open, self._end, checked)
        elif checked:
            _log.info("%s: no clean shutdown marker: %d segment(s) CRC-checked and their indexes rebuilt; the log "
                      "ends at offset %d", self.directory, checked, self._end)

    def _recover_epochs(self, scans: list) -> None:
        """Trim the epoch cache to the log; after a crash, add epochs found in the batches."""
        import numpy as np
        cache = self.epochs
        cache.truncate_from_end(self._end)
        for scan in scans:
            if scan is None or not scan.batch_count:
                continue
            epochs = np.asarray(scan.partition_leader_epochs, dtype=np.int64)
            latest = cache.latest_epoch if cache.latest_epoch is not None else -1
            running = np.maximum.accumulate(np.concatenate(([latest], epochs)))
            for i in np.nonzero(epochs > running[:-1])[0]:
                cache.assign(int(epochs[i]), int(scan.base_offsets[i]))
        cache.truncate_from_start(self._start)

    def _read_start_checkpoint(self) -> int | None:
        path = self._path(LOG_START_CHECKPOINT_NAME)
        if not self.fs.exists(path):
            return None
        lines = self.fs.read_bytes(path).decode("ascii", errors="replace").split()
        if len(lines) != 2 or lines[0] != "0" or not lines[1].isdigit():
            raise LogCorruptionError("log-start-offset-checkpoint is not '0' and an offset", path=path, position=0)
        return int(lines[1])

    def _write_start_checkpoint(self, offset: int) -> None:
        write_file_atomic(self.fs, self._path(LOG_START_CHECKPOINT_NAME), f"0\n{offset}\n".encode("ascii"))

    def _delete_segments_below_start(self) -> None:
        while len(self._segments) > 1 and self._segments[1].base_offset <= self._start:
            self._bases.pop(0)
            self._segments.pop(0).delete()

    # ================================================================ properties (ReplicatedLog)

    @property
    def start_offset(self) -> int:
        """First offset held (the log start offset); equals end_offset when the log is empty."""
        return self._start

    @property
    def end_offset(self) -> int:
        """Last offset appended + 1 (the log end offset)."""
        return self._end

    @property
    def high_watermark(self) -> int:
        """Committed offsets are < high_watermark; clamped into [start_offset, end_offset]."""
        return min(max(self._hw, self._start), self._end)

    @property
    def last_flushed_offset(self) -> int:
        """Offsets below this are durable."""
        return self._flushed

    @property
    def latest_epoch(self) -> int | None:
        """Latest leader epoch in the epoch cache, None when it is empty."""
        return self.epochs.latest_epoch

    @property
    def last_fetched_epoch(self) -> int:
        """Kafka's lastFetchedEpoch: the latest epoch, 0 for an empty cache (the primordial epoch)."""
        latest = self.epochs.latest_epoch
        return 0 if latest is None else latest

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def segment_base_offsets(self) -> list[int]:
        with self._lock:
            return list(self._bases)

    def epoch_entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return self.epochs.entries()

    # ================================================================ appending

    def append_as_leader(self, batches, epoch: int) -> LogAppendInfo:
        """Append as the leader of ``epoch``: assign offsets from end_offset and stamp ``epoch``.

        ``batches`` is bytes-like (one or more record batches v2, as built by
        kraftlog.engine.records.batch; their base offsets and leader epochs are overwritten,
        which the CRC does not cover) or a sequence of records / values to build one batch from
        (``Record`` or ``(key, value, ...)`` tuples via build_batch; ``bytes`` values via
        build_batch_from_values). The caller's buffer is never modified.
        """
        if epoch < 0:
            raise ValueError(f"leader epoch must be >= 0, got {epoch}")
        with self._lock:
            if self._closed or self._offline is not None:
                self._check_writable()
            if type(batches) is bytes and self._segments[-1].fd is not None:
                info = self._append_bytes(batches, epoch)
                if info is not None:
                    return info
            return self._append_leader(batches, epoch)

    def _append_bytes(self, batches: bytes, epoch: int) -> LogAppendInfo | None:
        """The hot path: pre-built batches as bytes (nobody can change them), in the current epoch,
        into an active segment that needs no roll. One native call CRC-checks them in place and
        writes them with their stamped first 16 bytes (stamp_write: no copy, no Python per batch).
        None, with nothing written, when the general path must run instead. Kept flat on purpose:
        at 64 KiB per append every Python step here is ~0.3% of the append's cost."""
        seg, cfg = self._segments[-1], self.config
        size, nbytes = seg.size, len(batches)
        latest = self.epochs.latest_epoch
        now = self._clock_ms()
        started = seg.first_append_ms
        if (latest is None or epoch > latest or not size or not seg.indexes_writable or not self._index_room
                or size + nbytes > cfg.segment_bytes or started is None or now - started >= cfg.segment_ms
                or (cfg.preallocate_bytes and size + nbytes > seg.allocated)):
            return None
        slot = self._pending
        if slot >= self._pending_limit:
            slot = self._index_pending()
            if not self._index_room:
                return None
        first_offset = self._end
        try:
            n, last_offset, max_ts = stamp_write(batches, self._headers, cfg.verify_crc_on_append, first_offset,
                                                 epoch, self._scratch, slot, size, seg.fd,
                                                 seg.base_offset + MAX_RELATIVE_OFFSET, cfg.max_batches_per_append)
        except (CorruptRecordError, ValueError) as exc:
            raise InvalidAppendError(f"cannot append: {exc}") from None
        except OSError as exc:
            self._undo_append(seg, None, exc)
        if n <= 0:
            if not n:
                raise InvalidAppendError("an append needs at least one batch")
            return None  # its offsets would overflow the segment's relative offsets: the general path rolls
        seg.dirty = True
        seg.size = size + nbytes
        seg.next_offset = self._end = last_offset + 1
        self._pending = slot + n
        self._unflushed_messages += last_offset + 1 - first_offset
        if self._oldest_unflushed_ms is None:
            self._oldest_unflushed_ms = now
        every = cfg.flush_interval_messages
        if every is not None or cfg.flush_interval_ms is not None:
            self._apply_flush_policy(seg, first_offset, None, now)
        return _append_info(first_offset, last_offset, max_ts, n, nbytes)

    def _append_leader(self, batches, epoch: int) -> LogAppendInfo:
        """append_as_leader's general path (any bytes-like or records, new epochs, rolls)."""
        if type(batches) is bytes:
            nbytes = len(batches)
        elif isinstance(batches, bytearray | memoryview) or hasattr(batches, "__buffer__"):
            nbytes = memoryview(batches).nbytes
        else:
            batches = self._build_batch(batches, epoch)
            nbytes = len(batches)
        slot = self._pending
        if slot >= self._pending_limit:
            slot = self._index_pending()
        cfg, seg = self.config, self._segments[-1]
        # bytes nobody can change, and a file descriptor: the batches are CRC-checked in place
        # and written straight from the caller's bytes with their stamped first 16 bytes (one
        # native pass, then one native pwritev): no copy. Otherwise one native pass copies them
        # into the reused write buffer, CRC-checking the copy while it is in L1 and stamping
        # offsets/epoch there (what is checked is what is written), then one pwrite. Both
        # describe the batches into the pending slots, and never touch the caller's buffer.
        direct = type(batches) is bytes and seg.fd is not None
        try:
            if direct:
                n, last_offset, max_ts = stamp_headers(batches, self._headers, cfg.verify_crc_on_append,
                                                       self._end, epoch, self._scratch, slot, seg.size)
                data = batches
            else:
                data = self._write_buffer
                if len(data) < nbytes:
                    data = self._write_buffer = bytearray(nbytes)
                n, last_offset, max_ts = stamp_batches(batches, data, cfg.verify_crc_on_append, self._end,
                                                       epoch, self._scratch, slot, seg.size)
                if len(data) != nbytes:
                    data = memoryview(data)[:nbytes]
        except (CorruptRecordError, ValueError) as exc:
            raise InvalidAppendError(f"cannot append: {exc}") from None
        if not 0 < n <= cfg.max_batches_per_append:
            raise InvalidAppendError("an append needs at least one batch" if not n else
                                     f"cannot append: more than {cfg.max_batches_per_append} batches in one append")
        latest = self.epochs.latest_epoch
        new_epochs = [(epoch, self._end)] if latest is None or epoch > latest else None
        return self._append(data, nbytes, slot, n, last_offset, max_ts, new_epochs, direct)

    def append_as_follower(self, batches) -> LogAppendInfo:
        """Append batches replicated from the leader, keeping their offsets and leader epochs.

        The first batch must start at end_offset and each batch must continue the one before.
        """
        with self._lock:
            self._check_writable()
            view = memoryview(batches).cast("B")
            self._index_pending()  # check_batches describes into slot 0 on
            n = self._check(view)
            last_offset, max_ts, epochs = batch_fields.continue_log(
                self._scratch, n, self._segments[-1].size, self._end, self.epochs.latest_epoch)
            return self._append(view, len(view), 0, n, last_offset, max_ts, epochs or None, False)

    def _build_batch(self, items, epoch: int) -> bytes:
        from kraftlog.engine.records import batch as batch_codec

        items = list(items)
        if not items:
            raise InvalidAppendError("an append needs at least one record")
        if all(isinstance(v, bytes | bytearray | memoryview) for v in items):
            return batch_codec.build_batch_from_values(items, base_offset=self._end, partition_leader_epoch=epoch)
        return batch_codec.build_batch(items, base_offset=self._end, partition_leader_epoch=epoch)

    def _check(self, view: memoryview) -> int:
        try:
            n = check_batches(view, self.config.verify_crc_on_append,
                              memoryview(self._scratch)[:CHECK_FIELDS * self.config.max_batches_per_append])
        except (CorruptRecordError, ValueError) as exc:
            raise InvalidAppendError(f"cannot append: {exc}") from None
        if n == 0:
            raise InvalidAppendError("an append needs at least one batch")
        return n

    def _check_writable(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")
        if self._offline is not None:
            raise LogOfflineError(f"log {self.directory} is offline after an earlier failure "
                                  f"({self._offline}); reopen it to recover")

    def _append(self, data, nbytes: int, slot: int, n: int, last_offset: int, max_ts: int,
                new_epochs: list | None, direct: bool) -> LogAppendInfo:
        """Write ``data``: the ``n`` checked batches described in ``self._scratch`` from ``slot``
        on (position in the active segment, size, base offset, last offset delta, max timestamp,
        epoch; CHECK_FIELDS each), ending at ``last_offset``; when ``direct``, their stamped first
        16 bytes are in ``self._headers`` (stamp_headers). ``new_epochs`` are the (epoch, start
        offset) pairs newer than the cache's latest. Rolls, writes, applies the flush policy; the
        batches join the pending ones, indexed later (see _index_pending)."""
        first_offset = self._end
        now = self._clock_ms()
        seg, cfg = self._segments[-1], self.config
        if seg.size == 0:
            if last_offset - seg.base_offset > MAX_RELATIVE_OFFSET:
                raise InvalidAppendError(f"append spans more than {MAX_RELATIVE_OFFSET} offsets")
        elif (seg.size + nbytes > cfg.segment_bytes or last_offset - seg.base_offset > MAX_RELATIVE_OFFSET
                or (seg.first_append_ms is not None and now - seg.first_append_ms >= cfg.segment_ms)
                or not self._index_room):
            seg, slot = self._roll_before(slot, n)
        position = seg.size
        old_epochs = None
        try:
            if new_epochs is not None:
                old_epochs = self.epochs.entries()
                for epoch, start in new_epochs:
                    self.epochs.assign(epoch, start)
            if not seg.indexes_writable:
                seg.prepare_write()
            if cfg.preallocate_bytes:
                seg.preallocate(position + nbytes,
                                max(0, min(cfg.preallocate_bytes, cfg.segment_bytes - position - nbytes)))
            if direct:
                seg.dirty = True
                write_stamped(data, self._headers, self._scratch, slot, n, seg.fd, position)
            else:
                seg.write(data)
        except OSError as exc:
            self._undo_append(seg, old_epochs, exc)
        seg.size = position + nbytes
        seg.next_offset = last_offset + 1
        self._pending = slot + n
        self._end = last_offset + 1
        return self._after_write(seg, first_offset, last_offset, max_ts, n, nbytes, old_epochs, now)

    def _after_write(self, seg: Segment, first_offset: int, last_offset: int, max_ts: int, n: int, nbytes: int,
                     old_epochs: list | None, now: int) -> LogAppendInfo:
        """The append's bytes are written and accounted: the flush policy, then the answer."""
        if seg.first_append_ms is None:
            seg.first_append_ms = now
        self._unflushed_messages += last_offset + 1 - first_offset
        if self._oldest_unflushed_ms is None:
            self._oldest_unflushed_ms = now
        self._apply_flush_policy(seg, first_offset, old_epochs, now)
        if self._writeback is not None:
            self._request_writeback(seg, nbytes)
        return _append_info(first_offset, last_offset, max_ts, n, nbytes)

    def _request_writeback(self, seg: Segment, nbytes: int) -> None:
        self._written_since_writeback += nbytes
        if self._written_since_writeback >= self.config.writeback_bytes and self._writeback.request(seg.log_path):
            self._written_since_writeback = 0

    def _apply_flush_policy(self, seg: Segment, first_offset: int, old_epochs: list | None, now: int) -> None:
        """fsync now when LogConfig says so (every append, or a group-commit bound reached)."""
        if self.config.flush_interval_messages == 1:
            try:
                self._sync_all()
            except OSError as exc:
                self._rollback_unsynced_append(seg, first_offset, old_epochs, exc)
        elif self._flush_due(now):
            self._flush_or_go_offline()

    def _roll_before(self, slot: int, n: int) -> tuple[Segment, int]:
        """Roll for an append whose ``n`` batches are described from ``slot`` on (positions in the
        old segment): they move to slot 0 with positions in the new, empty segment."""
        old_size = self._segments[-1].size
        seg = self._roll()  # indexes the pending batches first, into the old segment
        scratch, headers = self._scratch, self._headers
        for i in range(n):
            src, dst = (slot + i) * CHECK_FIELDS, i * CHECK_FIELDS
            scratch[dst:dst + CHECK_FIELDS] = scratch[src:src + CHECK_FIELDS]
            scratch[dst] -= old_size
            headers[16 * i:16 * i + 16] = headers[16 * (slot + i):16 * (slot + i) + 16]
        return seg, 0

    def _index_pending(self) -> int:
        """Index the pending batches into the active segment (returns the free slot: 0).

        Appends defer their index work (entries, max timestamp): they describe their batches into
        ``self._scratch`` slots and this indexes up to max_batches_per_append of them at once. It
        runs before anything reads the active segment's indexes or max timestamp: reads, time
        lookups, truncation, a roll, the close; and when the pending slots are full or could fill
        the index (each batch adds at most one entry per index), so a full index is always seen.
        """
        seg = self._segments[-1]
        if self._pending:
            n, self._pending = self._pending, 0
            seg.commit_batches(self._scratch, n)
        # Pending batches never outnumber the entries the indexes can still take, so between two
        # calls an index cannot fill up unseen: "no room" here is exactly "index full".
        self._index_room = seg.index_room
        self._pending_limit = max(1, min(self.config.max_batches_per_append, self._index_room))
        return 0

    def _undo_append(self, seg: Segment, old_epochs: list | None, exc: OSError):
        try:
            seg.rollback()
            if old_epochs is not None:
                self.epochs.restore(old_epochs)
        except OSError as second:
            self._offline = f"{exc}; rollback failed: {second}"
            raise LogOfflineError(f"append to {seg.log_path} failed ({exc}) and could not be rolled back "
                                  f"({second}); the log is offline until reopened") from exc
        raise LogStorageError(f"append failed: {exc.strerror or exc}", path=seg.log_path, errno=exc.errno) from exc

    def _rollback_unsynced_append(self, seg: Segment, old_end: int, old_epochs: list | None,
                                  exc: OSError) -> None:
        """fsync-per-append failed: make the append invisible again (it was never acknowledged)."""
        try:
            self._index_pending()
            seg.truncate_to(old_end)
            self._end = seg.next_offset
            if old_epochs is not None:
                self.epochs.restore(old_epochs)
        except OSError as second:
            self._offline = f"{exc}; rollback failed: {second}"
            raise LogOfflineError(f"fsync of {seg.log_path} failed ({exc}) and the append could not be "
                                  f"rolled back ({second}); the log is offline until reopened") from exc
        raise LogStorageError(f"fsync failed, append rolled back: {exc.strerror or exc}",
                              path=seg.log_path, errno=exc.errno) from exc

    def _flush_due(self, now: int) -> bool:
        cfg = self.config
        if cfg.flush_interval_messages is not None and self._unflushed_messages >= cfg.flush_interval_messages:
            return True
        return (cfg.flush_interval_ms is not None and self._oldest_unflushed_ms is not None
                and now - self._oldest_unflushed_ms >= cfg.flush_interval_ms)

    # ================================================================ rolling

    def _roll(self) -> Segment:
        """Start a new active segment at end_offset; the old one is sealed (indexes trimmed).

        Everything is fsynced first, whatever the flush policy: a segment that is not the last is
        then always whole on disk, so recovery can call any invalid byte in it corruption.
        """
        old = self._segments[-1]
        self._index_pending()
        try:
            old.trim()  # before the new segment exists: only the last segment may end in zeros
        except OSError as exc:
            raise LogStorageError(f"could not roll a new segment at offset {self._end}: {exc.strerror or exc}",
                                  path=old.log_path, errno=exc.errno) from exc
        self._flush_or_go_offline()
        try:
            new = self._create_segment(self._end)
            old.seal()
        except OSError as exc:
            raise LogStorageError(f"could not roll a new segment at offset {self._end}: {exc.strerror or exc}",
                                  path=old.log_path, errno=exc.errno) from exc
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._index_pending()
        return new

    def _create_segment(self, base_offset: int) -> Segment:
        cfg = self.config
        seg = Segment(self.fs, self.directory, base_offset, index_interval_bytes=cfg.index_interval_bytes,
                      max_index_bytes=cfg.max_index_bytes, create=True)
        seg.next_offset = base_offset
        try:
            seg.truncate_file(0)
            seg.make_active()
        except OSError:
            _delete_quietly(seg)
            raise
        self._dir_dirty = True
        return seg

    def _add_segment(self, base_offset: int) -> Segment:
        seg = self._create_segment(base_offset)
        self._segments.append(seg)
        self._bases.append(base_offset)
        return seg

    # ================================================================ flushing

    def flush(self) -> None:
        """fsync everything appended (and new segment files' directory entries)."""
        with self._lock:
            if self._closed:
                raise LogClosedError(f"log {self.directory} is closed")
            self._flush_or_go_offline()

    def flush_if_due(self) -> bool:
        """Flush when the flush policy's bound has been reached; returns True when it flushed."""
        with self._lock:
            if self._closed or self._flushed == self._end or not self._flush_due(self._clock_ms()):
                return False
            self._flush_or_go_offline()
            return True

    def _sync_all(self) -> None:
        for seg in reversed(self._segments):
            if not seg.dirty:
                break  # only the newest segments can hold unflushed bytes
            seg.sync()
        if self._dir_dirty:
            self.fs.sync_dir(self.directory)
            self._dir_dirty = False
        self._flushed = self._end
        self._unflushed_messages = 0
        self._oldest_unflushed_ms = None
        self._written_since_writeback = 0

    def _flush_or_go_offline(self) -> None:
        try:
            self._sync_all()
        except OSError as exc:
            self._offline = f"fsync failed: {exc}"
            raise LogOfflineError(f"fsync in {self.directory} failed ({exc}); appends since offset "
                                  f"{self._flushed} may not be durable; the log is offline until reopened") from exc

    # ================================================================ reading

    def read(self, start_offset: int, max_bytes: int = 1 << 20, isolation: Isolation = Isolation.LOG_END, *,
             min_one_batch: bool = True) -> LogFetchInfo:
        """Whole batches from the one holding ``start_offset``, at most ``max_bytes`` (at least one
        batch when ``min_one_batch``), from a single segment, as a zero-copy memoryview.

        KIP-392 answers: below start_offset -> OffsetOutOfRangeError(too_small); above the
        readable end (high watermark for HIGH_WATERMARK isolation) but at or below what is known
        to exist (the log end, or a higher high watermark learnt from the leader) ->
        OffsetNotAvailableError; above that -> OffsetOutOfRangeError(too_large). Reading exactly
        at the readable end returns no records.
        """
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        with self._lock:
            if self._closed:
                raise LogClosedError(f"log {self.directory} is closed")
            if self._pending:
                self._index_pending()
            limit = self._readable_end(start_offset, isolation)
            i = bisect.bisect_right(self._bases, start_offset) - 1
            while True:
                seg = self._segments[i]
                if start_offset >= limit:
                    view, position = memoryview(b""), seg.size
                else:
                    view, position = seg.read(start_offset, max_bytes, limit, min_one_batch)
                if len(view) or i == len(self._segments) - 1 or start_offset >= limit:
                    break
                i += 1  # the offset lies past this segment's last batch: the next one holds it
            return LogFetchInfo(view, start_offset, seg.base_offset, position, self._start, self.high_watermark,
                                self._end)

    def _readable_end(self, offset: int, isolation: Isolation) -> int:
        """The exclusive offset limit of a read at ``offset``, after the KIP-392 checks."""
        hw = self.high_watermark
        if offset < self._start:
            raise OffsetOutOfRangeError(offset, too_small=True, log_start_offset=self._start, high_watermark=hw,
                                        log_end_offset=self._end, path=self.directory)
        limit = self._end if isolation is Isolation.LOG_END else hw
        if offset <= limit:
            return limit
        if offset <= max(self._end, self._hw):
            raise OffsetNotAvailableError(offset, high_watermark=hw, log_end_offset=self._end)
        raise OffsetOutOfRangeError(offset, too_small=False, log_start_offset=self._start, high_watermark=hw,
                                    log_end_offset=self._end, path=self.directory)

    def batches(self, start_offset: int | None = None, isolation: Isolation = Isolation.LOG_END, *,
                max_bytes_per_read: int = 1 << 20) -> Iterator[memoryview]:
        """Every batch from the one holding ``start_offset`` (default: the log start) to the
        readable end, one zero-copy memoryview per batch. The end is fixed when iteration starts."""
        offset = self._start if start_offset is None else start_offset
        with self._lock:
            limit = self._readable_end(offset, isolation)
        while offset < limit:
            info = self.read(offset, max_bytes_per_read, isolation)
            records = info.records
            if not len(records):
                break
            pos = 0
            while pos < len(records):
                size = LOG_OVERHEAD + int.from_bytes(records[pos + LENGTH_OFFSET:pos + LENGTH_OFFSET + 4], "big")
                batch = records[pos:pos + size]
                offset = (int.from_bytes(batch[:8], "big", signed=True)
                          + int.from_bytes(batch[LAST_OFFSET_DELTA_OFFSET:LAST_OFFSET_DELTA_OFFSET + 4], "big") + 1)
                pos += size
                if offset > limit:
                    return
                yield batch

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """First offset of the first batch whose max timestamp is >= ``timestamp_ms``, or None.

        Uses the time index to skip segments and batches (Kafka's ListOffsets by timestamp).
        """
        with self._lock:
            if self._pending:
                self._index_pending()
            for seg in self._segments:
                if seg.max_timestamp < timestamp_ms:
                    continue
                _, offset = seg.time_index.lookup(timestamp_ms - 1)
                position = seg.position_of(max(offset, self._start))
                buf = seg.buffer()
                while position < seg.size:
                    size = LOG_OVERHEAD + int.from_bytes(buf[position + LENGTH_OFFSET:position + LENGTH_OFFSET + 4], "big")
                    max_ts = buf[position + MAX_TIMESTAMP_OFFSET:position + MAX_TIMESTAMP_OFFSET + 8]
                    if int.from_bytes(max_ts, "big", signed=True) >= timestamp_ms:
                        base = int.from_bytes(buf[position:position + 8], "big", signed=True)
                        return max(base, self._start)
                    position += size
            return None

    # ================================================================ epochs (ReplicatedLog)

    def initialize_leader_epoch(self, epoch: int) -> None:
        """A new leader of ``epoch`` starts at end_offset (persisted before returning)."""
        with self._lock:
            self._check_writable()
            self.epochs.assign(epoch, self._end)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest known epoch <= ``epoch``, the offset where it ended).

        The latest epoch ends at end_offset; unknown (the cache is empty, or ``epoch`` is larger
        than every known epoch, or -1) -> (-1, -1).
        """
        with self._lock:
            found_epoch, offset = self.epochs.end_offset_for(epoch, self._end)
            if offset == UNDEFINED_EPOCH_OFFSET:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            return found_epoch, offset

    # ================================================================ high watermark

    def update_high_watermark(self, offset: int) -> None:
        """Set the high watermark. An offset above end_offset (learnt from the leader) is kept for
        KIP-392 answers; ``high_watermark`` reports it clamped to [start_offset, end_offset]."""
        if offset < 0:
            raise ValueError(f"high watermark must be >= 0, got {offset}")
        with self._lock:
            self._hw = offset

    # ================================================================ truncation and deletion

    def truncate_to(self, offset: int) -> None:
        """Remove every offset >= ``offset`` (a batch holding ``offset`` goes whole, as in Kafka).

        Below start_offset this is truncate_fully_and_start_at(offset). The high watermark and the
        epoch cache are trimmed to the new end; the truncation is fsynced before returning.
        """
        with self._lock:
            self._check_writable()
            if offset >= self._end:
                return
            if offset < self._start:
                self.truncate_fully_and_start_at(offset)
                return
            self._index_pending()
            try:
                while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                    self._bases.pop()
                    self._segments.pop().delete()
                seg = self._segments[-1]
                seg.make_active()
                seg.truncate_to(offset)
                seg.sync()
                self.fs.sync_dir(self.directory)
            except OSError as exc:
                self._offline = f"truncation failed: {exc}"
                raise LogOfflineError(f"truncating {self.directory} to {offset} failed ({exc}); "
                                      "the log is offline until reopened") from exc
            self._end = seg.next_offset
            self._hw = min(self._hw, self._end)
            self._flushed = min(self._flushed, self._end)
            self.epochs.truncate_from_end(self._end)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the empty log at ``offset`` (after installing a
        snapshot whose end is past this log). start = end = high watermark = ``offset``; the
        epoch cache is cleared."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        with self._lock:
            self._check_writable()
            self._pending = 0  # their segment is going away
            try:
                while self._segments:
                    self._bases.pop()
                    self._segments.pop().delete()
                self._add_segment(offset)
                self.fs.sync_dir(self.directory)
                self._write_start_checkpoint(offset)
                self.epochs.clear()
            except OSError as exc:
                self._offline = f"full truncation failed: {exc}"
                raise LogOfflineError(f"truncating {self.directory} fully failed ({exc}); "
                                      "the log is offline until reopened") from exc
            self._start = self._end = self._hw = self._flushed = offset
            self._dir_dirty = False
            self._index_pending()

    def advance_start_offset(self, offset: int) -> bool:
        """Raise the log start offset (data below it was moved to a snapshot) and delete the
        segments that lie wholly below it. Returns True when the start offset moved."""
        with self._lock:
            self._check_writable()
            if offset <= self._start:
                return False
            if offset > self._end:
                raise ValueError(f"log start {offset} beyond the log end {self._end}; "
                                 "use truncate_fully_and_start_at")
            try:
                self._write_start_checkpoint(offset)
                self._start = offset
                self.epochs.truncate_from_start(offset)
                self._delete_segments_below_start()
            except OSError as exc:
                raise LogStorageError(f"advancing the log start to {offset} failed: {exc.strerror or exc}",
                                      path=self.directory, errno=exc.errno) from exc
            self._hw = max(self._hw, offset)
            return True

    # ================================================================ closing

    def close(self) -> None:
        """Flush, trim the indexes, and mark the directory clean; idempotent.

        If the log is offline (an earlier write failed), or an index entry was found pointing to
        the wrong batch, it closes without the clean marker, so the next open recovers (and
        rebuilds the indexes).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._offline is None:
                    self._close_cleanly(vouch=not any(seg.index_mismatch for seg in self._segments))
            except OSError as exc:
                raise LogStorageError(f"closing {self.directory} failed: {exc.strerror or exc}; the next open "
                                      "will recover", path=self.directory, errno=exc.errno) from exc
            finally:
                for seg in self._segments:
                    seg.close()
                if self._writeback is not None:
                    self._writeback.close()

    def _close_cleanly(self, *, vouch: bool = True) -> None:
        """Data, then changed indexes, durable; only then (``vouch``: no index entry was found
        pointing to the wrong batch) the marker that vouches for them."""
        self._index_pending()
        self._segments[-1].trim()  # a clean open trusts the file's length
        self._sync_all()
        self._segments[-1].seal()
        for seg in self._segments:
            seg.sync_indexes()  # a no-op for indexes nothing changed (e.g. kept as they were by recovery)
        if not vouch:
            return
        # Empty, so it cannot be torn: created in place (no temporary file to fsync). The directory
        # fsync makes it durable; without it a power loss would only cost the next open a scan.
        self.fs.open(self._path(CLEAN_SHUTDOWN_NAME), create=True).close()
        self.fs.sync_dir(self.directory)

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return (f"Log({self.directory!r}, start={self._start}, hw={self.high_watermark}, end={self._end}, "
                f"segments={len(self._segments)})")


_new_append_info = object.__new__


def _append_info(first_offset: int, last_offset: int, max_timestamp: int, batch_count: int,
                 size_bytes: int) -> LogAppendInfo:
    """LogAppendInfo without the frozen dataclass's __init__ (five object.__setattr__ calls, about
    half a microsecond on the append hot path); the result is an ordinary frozen instance."""
    info = _new_append_info(LogAppendInfo)
    info.__dict__.update(first_offset=first_offset, last_offset=last_offset, max_timestamp=max_timestamp,
                         batch_count=batch_count, size_bytes=size_bytes)
    return info


def _delete_quietly(seg: Segment) -> None:
    """Best-effort removal of a segment whose creation failed half-way."""
    with contextlib.suppress(OSError):
        seg.delete()
