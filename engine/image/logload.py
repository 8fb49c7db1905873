"""Load a metadata image from a log directory on disk: zero-copy mmap regions -> the loader.

Nothing here writes: a broker loading its image, a tool, or a read-only copy of a log directory
all read it the same way. ``Log.open`` is not used, because opening a log is a write (it creates
missing ``.index`` / ``.timeindex`` files and ``leader-epoch-checkpoint``, removes
``.clean-shutdown`` and truncates a torn tail). Instead every ``<base offset>.log`` is mapped
read-only and its batch headers scanned (``batch.scan_batches``); what Log.open would truncate
(invalid bytes at the end of the last segment: a crash's torn write) is left out, an invalid batch
anywhere else raises CorruptRecordError. The log start is the first segment's base offset, raised
by ``log-start-offset-checkpoint`` when present (as Log.open reads it).

The log is read a region at a time (``region_bytes`` of whole batches, within one segment) and
every region goes through the native column decoder into one delta, published once.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator

import numpy as np

from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.image.loader import Loader, Progress
from kraftlog.engine.log.log import LOG_START_CHECKPOINT_NAME, Isolation, Log
from kraftlog.engine.log.segment import LOG_SUFFIX, parse_segment_name, segment_name
from kraftlog.engine.records import batch
from kraftlog.engine.records.layout import (
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
)
from kraftlog.errors import CorruptRecordError, UndecodableRecordError

REGION_BYTES = 64 << 20


def log_regions(log: Log, start_offset: int, isolation: Isolation = Isolation.LOG_END,
                region_bytes: int = REGION_BYTES, *, cursor: list | None = None) -> Iterator[memoryview]:
    """Consecutive zero-copy regions of whole batches of an open ``log`` from ``start_offset`` to
    the readable end. ``cursor``, when given, holds the segment base offset and file position of
    the last region."""
    offset = start_offset
    end = log.end_offset if isolation is Isolation.LOG_END else log.high_watermark
    while offset < end:
        info = log.read(offset, region_bytes, isolation)
        records = info.records
        if not len(records):
            return
        if cursor is not None:
            cursor[:] = [info.segment_base_offset, info.position]
        yield records
        offset = _next_offset(records)


def _next_offset(region: memoryview) -> int:
    """The offset after the last batch of a region of whole batches (walks batch headers only)."""
    pos, last = 0, -1
    while pos < len(region):
        size = LOG_OVERHEAD + int.from_bytes(region[pos + LENGTH_OFFSET:pos + LENGTH_OFFSET + 4], "big")
        last = (int.from_bytes(region[pos:pos + 8], "big", signed=True)
                + int.from_bytes(region[pos + LAST_OFFSET_DELTA_OFFSET:pos + LAST_OFFSET_DELTA_OFFSET + 4], "big"))
        pos += size
    return last + 1


class _Segment:
    """One ``.log`` file mapped read-only, with the batches worth reading (the valid prefix)."""

    def __init__(self, path: str, is_last: bool):
        self.path = path
        self.data = _map_read_only(path)
        scan = batch.scan_batches(self.data, 0, len(self.data), verify_crc=is_last)
        # Only the last segment may end in invalid bytes (Log.open truncates them); the CRCs of the
        # others are checked when their records are decoded.
        if scan.error_position is not None and not is_last:
            raise CorruptRecordError(scan.error_reason, position=scan.error_position, path=path)
        self.positions, self.sizes, self.last_offsets = scan.positions, scan.size_bytes, scan.last_offsets

    def regions(self, start_offset: int, region_bytes: int, cursor: list) -> Iterator[memoryview]:
        """Regions of whole batches from the batch holding ``start_offset`` on, each of at most
        ``region_bytes`` (or one batch when a batch is larger); ``cursor`` is set to the file and
        position of each before it is yielded."""
        first = int(np.searchsorted(self.last_offsets, start_offset))
        view = memoryview(self.data)
        ends = self.positions + self.sizes
        while first < len(self.positions):
            begin = int(self.positions[first])
            last = max(first, int(np.searchsorted(ends, begin + region_bytes, side="right")) - 1)
            cursor[:] = [self.path, begin]
            yield view[begin:int(ends[last])]
            first = last + 1


def _map_read_only(path: str):
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) if size else b""


def _log_start_offset(directory: str, first_base_offset: int) -> int:
    """Log.open's log start: the first segment's base, raised by log-start-offset-checkpoint
    ("0\\n<offset>\\n")."""
    path = os.path.join(directory, LOG_START_CHECKPOINT_NAME)
    if not os.path.exists(path):
        return first_base_offset
    with open(path, "rb") as f:
        lines = f.read().decode("ascii", errors="replace").split()
    if len(lines) != 2 or lines[0] != "0" or not lines[1].isdigit():
        raise CorruptRecordError("log-start-offset-checkpoint is not '0' and an offset", position=0, path=path)
    return max(first_base_offset, int(lines[1]))


class ReadOnlyLogDir:
    """A log directory's segments, mapped read-only: ``start_offset`` / ``end_offset`` as Log.open
    would find them, and ``regions`` to read."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = os.fspath(directory)
        bases = sorted(b for b in (parse_segment_name(n) for n in os.listdir(self.directory)) if b is not None)
        segments = [_Segment(os.path.join(self.directory, segment_name(base) + LOG_SUFFIX), i == len(bases) - 1)
                    for i, base in enumerate(bases)]
        self.segments = [s for s in segments if len(s.last_offsets)]
        self.start_offset = _log_start_offset(self.directory, bases[0] if bases else 0)
        end = int(self.segments[-1].last_offsets[-1]) + 1 if self.segments else 0
        self.end_offset = max(self.start_offset, end)

    def regions(self, start_offset: int, region_bytes: int = REGION_BYTES, *,
                cursor: list | None = None) -> Iterator[memoryview]:
        """Whole batches from the one holding ``start_offset`` to the end, in regions. ``cursor``,
        when given, holds the segment file and position of the last region."""
        cursor = [] if cursor is None else cursor
        for segment in self.segments:
            if int(segment.last_offsets[-1]) >= start_offset:
                yield from segment.regions(start_offset, region_bytes, cursor)


def load_log_dir(directory: str | os.PathLike, *, image: MetadataImage | None = None, start_offset: int | None = None,
                 progress: Progress | None = None, skip_errors: bool = False) -> MetadataImage:
    """The image of ``image`` (default empty) plus every record of the log from ``start_offset``
    (default: the image's next offset, or the log start). Writes nothing to ``directory``."""
    loader = Loader(image, progress=progress, skip_errors=skip_errors)
    log = ReadOnlyLogDir(directory)
    first = start_offset if start_offset is not None else max(log.start_offset, loader.image.provenance.offset + 1)
    cursor: list = []
    try:
        return loader.replay_regions(log.regions(first, cursor=cursor), path=log.directory,
                                     target_offset=log.end_offset - 1)
    except UndecodableRecordError as exc:  # positions in a region: say the segment file and its position
        if not cursor:
            raise
        raise exc.moved(path=cursor[0], base_position=cursor[1]) from None
