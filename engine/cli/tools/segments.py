"""A read-only look at a log directory: what `log verify`, `log repair` and `image` rely on.

Unlike ``Log.open`` (which truncates a torn tail, rebuilds indexes and rewrites the clean-shutdown
marker), nothing here writes: segments are memory-mapped read-only and CRC-scanned with the
native ``batch.scan_batches``. The scan stops at the first problem, in this order per segment
(segments in offset order): a batch whose base offset does not continue the log, an invalid batch
(bad header or CRC, or bytes cut short), a leader epoch lower than the batch before it, then the
segment's indexes. The checkpoint files are checked after the segments.

Index rules checked (the log's own, see engine/log/index.py): ``.index`` entries are
(relativeOffset i32, position i32), both strictly increasing, each position the start of a
batch whose last offset is base + relativeOffset; ``.timeindex`` entries are (timestamp i64,
relativeOffset i32), timestamps strictly increasing, each naming the last offset of a batch whose
max timestamp is that timestamp and the largest so far. Trailing all-zero entries are the unused
part of a pre-allocated index (an active segment, or a crash) and are not entries. An index that
disagrees with its log is a problem only when ``.clean-shutdown`` is present: without it the next
open rebuilds every index from the log, so a stale index is just a note.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kraftlog.engine.cli.tools.common import exists
from kraftlog.engine.log.epoch_cache import CHECKPOINT_NAME as EPOCH_CHECKPOINT_NAME
from kraftlog.engine.log.epoch_cache import LeaderEpochCache
from kraftlog.engine.log.fs import RealFileSystem
from kraftlog.engine.log.log import CLEAN_SHUTDOWN_NAME, LOG_START_CHECKPOINT_NAME
from kraftlog.engine.log.segment import (
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    is_preallocated_space,
    parse_segment_name,
    segment_name,
)
from kraftlog.engine.records import batch as batch_codec
from kraftlog.errors import KraftlogError, UndecodableRecordError, UnsupportedCodecError

OFFSET_ENTRY = np.dtype([("rel", ">i4"), ("pos", ">i4")])  # .index: relativeOffset i32 | position i32
TIME_ENTRY = np.dtype([("ts", ">i8"), ("rel", ">i4")])  # .timeindex: timestamp i64 | relativeOffset i32


def map_file(path: str):
    """A read-only map of the whole file (b"" for an empty one). Never written through."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if not size:
            return b""
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)


@dataclass
class Problem:
    """The first thing wrong in a directory. ``kind``: "log", "index" or "checkpoint"."""

    kind: str
    path: str
    position: int
    reason: str
    segment: int = -1  # index into LogDirScan.segments (-1 for checkpoint files)
    torn_tail: bool = False  # invalid bytes at the very end of the last segment (a crash's torn write)

    def describe(self) -> str:
        return f"{self.path}: position {self.position}: {self.reason}"


# Records are decoded in runs of whole batches of about this size, so a segment's columns (and, for
# compressed batches, their inflated records) are never all in memory at once.
DECODE_RUN_BYTES = 16 * 1024 * 1024


@dataclass
class Undecodable:
    """A CRC-valid batch whose records do not decode: corrupt records, or a codec that does not exist."""

    position: int
    base_offset: int
    reason: str
    unsupported_codec: bool


@dataclass
class SegmentScan:
    path: str
    base_offset: int
    file_size: int
    scan: object  # batch.ScanResult of the valid batches
    undecodable: list[Undecodable] = field(default_factory=list)  # filled with decode_records=True

    @property
    def batch_count(self) -> int:
        return int(self.scan.batch_count)

    @property
    def next_offset(self) -> int:
        return int(self.scan.last_offsets[-1]) + 1 if self.batch_count else self.base_offset

    @property
    def records(self) -> int:
        return int(np.sum(self.scan.record_counts, dtype=np.int64))


@dataclass
class LogDirScan:
    directory: str
    segments: list[SegmentScan] = field(default_factory=list)
    problem: Problem | None = None
    notes: list[str] = field(default_factory=list)
    clean_shutdown: bool = False
    start_offset_checkpoint: int | None = None

    @property
    def start_offset(self) -> int:
        first = self.segments[0].base_offset if self.segments else 0
        cp = self.start_offset_checkpoint
        return cp if cp is not None and cp >= first else first

    @property
    def end_offset(self) -> int:
        return self.segments[-1].next_offset if self.segments else 0

    @property
    def size_bytes(self) -> int:
        return sum(s.file_size for s in self.segments)

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments)


def segment_bases(directory: str) -> list[int]:
    return sorted(b for b in (parse_segment_name(n) for n in os.listdir(directory)) if b is not None)


def scan_log_dir(directory: str, *, check_indexes: bool = True, decode_records: bool = False,
                 on_segment: Callable[[SegmentScan], None] | None = None) -> LogDirScan:
    """Scan every segment of ``directory`` (read-only) up to the first problem. With
    ``decode_records`` every record of every valid batch is decoded too, and the batches whose
    records do not decode are listed on their segment (they are not a problem of the log's
    structure: recovery keeps them, readers refuse them)."""
    result = LogDirScan(directory, clean_shutdown=os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN_NAME)))
    bases = segment_bases(directory)
    expected: int | None = None
    last_epoch = -1
    for i, base in enumerate(bases):
        path = os.path.join(directory, segment_name(base) + ".log")
        buf = map_file(path)
        try:
            scan = batch_codec.scan_batches(buf, 0, len(buf), verify_crc=True)
            seg = SegmentScan(path, base, len(buf), scan)
            result.segments.append(seg)
            problem = _log_problem(seg, i, expected, last_epoch, is_last=i == len(bases) - 1, buf=buf)
            if decode_records:
                seg.undecodable = undecodable_batches(buf, scan)
        finally:
            if isinstance(buf, mmap.mmap):
                buf.close()
        if problem is None and check_indexes:
            problem = _index_problem(seg, i, result)
        if on_segment is not None:
            on_segment(seg)
        if problem is not None:
            result.problem = problem
            return result
        expected = seg.next_offset
        if seg.batch_count:
            last_epoch = int(scan.partition_leader_epochs[-1])
    result.problem = _checkpoint_problem(result)
    return result


def undecodable_batches(buf, scan) -> list[Undecodable]:
    """The valid batches of ``scan`` whose records do not decode (inflated, every record walked).

    Runs of batches decode together (the fast path); a run that fails is decoded batch by batch
    to name every bad batch in it."""
    out: list[Undecodable] = []
    positions, sizes = scan.positions, scan.size_bytes
    k = 0
    while k < scan.batch_count:
        start = int(positions[k])
        stop = k + max(1, int(np.searchsorted(positions[k:], start + DECODE_RUN_BYTES, side="left")))
        end = int(positions[stop - 1]) + int(sizes[stop - 1])
        try:
            batch_codec.decode_columns_many(buf, start, end)
        except UndecodableRecordError:
            for j in range(k, stop):
                try:
                    batch_codec.decode_columns(buf, int(positions[j]))
                except UndecodableRecordError as exc:
                    out.append(Undecodable(int(positions[j]), int(scan.base_offsets[j]), exc.reason,
                                           isinstance(exc, UnsupportedCodecError)))
        k = stop
    return out


def _log_problem(seg: SegmentScan, i: int, expected: int | None, last_epoch: int, *, is_last: bool,
                 buf) -> Problem | None:
    scan = seg.scan

    def at(position: int, reason: str, torn: bool = False) -> Problem:
        return Problem("log", seg.path, int(position), reason, i, torn)

    if expected is not None and seg.base_offset != expected:
        return at(0, f"segment starts at offset {seg.base_offset} but the previous segment ends at {expected}")
    n = seg.batch_count
    if n:
        bases, lasts = scan.base_offsets, scan.last_offsets
        if int(bases[0]) != seg.base_offset:
            return at(0, f"first batch has base offset {int(bases[0])}, the file name says {seg.base_offset}")
        gaps = np.flatnonzero(bases[1:] != lasts[:-1] + 1)
        if len(gaps):
            j = int(gaps[0]) + 1
            return at(scan.positions[j], f"batch base offset {int(bases[j])} does not follow the last offset "
                                         f"{int(lasts[j - 1])} of the batch before it")
    # zeros a live log reserved ahead of its appends are the end of the log, not damage
    reserved = scan.error_position is not None and is_last and \
        is_preallocated_space(memoryview(buf)[scan.error_position:seg.file_size])
    if scan.error_position is not None and not reserved:
        torn = is_last and str(scan.error_reason).startswith("truncated")
        what = "torn tail" if torn else "invalid batch"
        return at(scan.error_position, f"{what}: {scan.error_reason} "
                                       f"({seg.file_size - scan.error_position} bytes from here to the end of the file)",
                  torn)
    if n:
        epochs = np.asarray(scan.partition_leader_epochs, dtype=np.int64)
        prev = np.concatenate(([last_epoch], epochs[:-1]))
        down = np.flatnonzero(epochs < prev)
        if len(down):
            j = int(down[0])
            return at(scan.positions[j], f"batch leader epoch {int(epochs[j])} is lower than the epoch "
                                         f"{int(prev[j])} before it")
    return None


def _read_entries(path: str, dtype: np.dtype) -> np.ndarray | str:
    """The entries of an index file without its zero-filled pre-allocated tail, or a reason."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) % dtype.itemsize:
        return f"size {len(raw)} is not a multiple of the {dtype.itemsize}-byte entry"
    entries = np.frombuffer(raw, dtype=dtype)
    nonzero = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8).reshape(-1, dtype.itemsize).any(axis=1)) \
        if len(entries) else np.array([], dtype=np.int64)
    return entries[: int(nonzero[-1]) + 1] if len(nonzero) else entries[:0]


def _index_problem(seg: SegmentScan, i: int, result: LogDirScan) -> Problem | None:
    stem = os.path.join(os.path.dirname(seg.path), segment_name(seg.base_offset))
    for suffix, check in ((INDEX_SUFFIX, _check_offset_index), (TIME_INDEX_SUFFIX, _check_time_index)):
        path = stem + suffix
        if not exists(path):
            result.notes.append(f"{os.path.basename(path)} is missing (the next open rebuilds it)")
            continue
        entries = _read_entries(path, OFFSET_ENTRY if suffix == INDEX_SUFFIX else TIME_ENTRY)
        found = (0, entries) if isinstance(entries, str) else check(seg, entries)
        if found is None:
            continue
        slot, reason = found
        entry_size = OFFSET_ENTRY.itemsize if suffix == INDEX_SUFFIX else TIME_ENTRY.itemsize
        if not result.clean_shutdown:
            result.notes.append(f"{os.path.basename(path)} entry {slot}: {reason} (no clean shutdown: "
                                "the next open rebuilds it)")
            continue
        return Problem("index", path, slot * entry_size, f"entry {slot}: {reason}", i)
    return None


def _locate(sorted_values: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, int | None]:
    """Where each of ``wanted`` sits in ``sorted_values``, and the index of the first one that is
    not there (None when all are)."""
    j = np.searchsorted(sorted_values, wanted)
    inside = j < len(sorted_values)
    found = np.zeros(len(wanted), dtype=bool)
    found[inside] = sorted_values[j[inside]] == wanted[inside]
    return j, (None if found.all() else int(np.flatnonzero(~found)[0]))


def _check_offset_index(seg: SegmentScan, entries: np.ndarray) -> tuple[int, str] | None:
    if not len(entries):
        return None
    rel = entries["rel"].astype(np.int64)
    pos = entries["pos"].astype(np.int64)
    bad = np.flatnonzero((np.diff(rel) <= 0) | (np.diff(pos) <= 0))
    if len(bad):
        return int(bad[0]) + 1, "offsets or positions do not increase"
    j, k = _locate(np.asarray(seg.scan.positions, dtype=np.int64), pos)
    if k is not None:
        return k, f"position {int(pos[k])} is not the start of a batch"
    lasts = np.asarray(seg.scan.last_offsets, dtype=np.int64)[j]
    wrong = np.flatnonzero(lasts != seg.base_offset + rel)
    if len(wrong):
        k = int(wrong[0])
        return k, (f"offset {seg.base_offset + int(rel[k])} at position {int(pos[k])}, but the batch there ends "
                   f"at offset {int(lasts[k])}")
    return None


def _check_time_index(seg: SegmentScan, entries: np.ndarray) -> tuple[int, str] | None:
    if not len(entries):
        return None
    ts = entries["ts"].astype(np.int64)
    offsets = seg.base_offset + entries["rel"].astype(np.int64)
    bad = np.flatnonzero(np.diff(ts) <= 0)
    if len(bad):
        return int(bad[0]) + 1, "timestamps do not increase"
    j, k = _locate(np.asarray(seg.scan.last_offsets, dtype=np.int64), offsets)
    if k is not None:
        return k, f"offset {int(offsets[k])} is not the last offset of a batch"
    running = np.maximum.accumulate(np.asarray(seg.scan.max_timestamps, dtype=np.int64))[j]
    wrong = np.flatnonzero(running != ts)
    if len(wrong):
        k = int(wrong[0])
        return k, f"timestamp {int(ts[k])} at offset {int(offsets[k])}, but the log's max there is {int(running[k])}"
    return None


def _checkpoint_problem(result: LogDirScan) -> Problem | None:
    directory = result.directory
    try:
        LeaderEpochCache(RealFileSystem(), directory)  # reads and checks the file; writes nothing
    except KraftlogError as exc:
        return Problem("checkpoint", os.path.join(directory, EPOCH_CHECKPOINT_NAME), 0, str(getattr(exc, "reason", exc)))
    path = os.path.join(directory, LOG_START_CHECKPOINT_NAME)
    if os.path.exists(path):
        with open(path, "rb") as f:
            parts = f.read().decode("ascii", errors="replace").split()
        if len(parts) != 2 or parts[0] != "0" or not parts[1].isdigit():
            return Problem("checkpoint", path, 0, "not '0' and an offset")
        result.start_offset_checkpoint = int(parts[1])
    return None
