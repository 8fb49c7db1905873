"""Load a metadata image from a log directory on disk: zero-copy mmap regions -> the loader.

The log is read a region at a time (``region_bytes``, whole batches, one segment per read) and
every region goes through the native column decoder into one delta, published once. Reads stop at
the log end (LOG_END) or at the high watermark (HIGH_WATERMARK: only committed records).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.image.loader import Loader, Progress
from kraftlog.engine.log.log import Isolation, Log, LogConfig
from kraftlog.engine.log.segment import segment_name
from kraftlog.errors import UndecodableRecordError

REGION_BYTES = 64 << 20


def log_regions(log: Log, start_offset: int, isolation: Isolation = Isolation.LOG_END,
                region_bytes: int = REGION_BYTES, *, cursor: list | None = None) -> Iterator[memoryview]:
    """Consecutive zero-copy regions of whole batches from ``start_offset`` to the readable end.
    ``cursor``, when given, holds the segment base offset and file position of the last region."""
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
        size = 12 + int.from_bytes(region[pos + 8:pos + 12], "big")
        last = int.from_bytes(region[pos:pos + 8], "big", signed=True) + int.from_bytes(region[pos + 23:pos + 27], "big")
        pos += size
    return last + 1


def load_log_dir(directory: str | os.PathLike, *, image: MetadataImage | None = None, start_offset: int | None = None,
                 isolation: Isolation = Isolation.LOG_END, progress: Progress | None = None,
                 config: LogConfig | None = None, skip_errors: bool = False) -> MetadataImage:
    """The image of ``image`` (default empty) plus every record of the log from ``start_offset``
    (default: the image's next offset, or the log start)."""
    loader = Loader(image, progress=progress, skip_errors=skip_errors)
    with Log.open(directory, config or LogConfig()) as log:
        first = start_offset
        if first is None:
            first = max(log.start_offset, loader.image.provenance.offset + 1)
        target = log.end_offset if isolation is Isolation.LOG_END else log.high_watermark
        cursor: list = []
        try:
            return loader.replay_regions(log_regions(log, first, isolation, cursor=cursor), path=str(directory),
                                         target_offset=target - 1)
        except UndecodableRecordError as exc:  # positions in a region: say the segment file and its position
            if not cursor:
                raise
            segment = os.path.join(os.fspath(directory), segment_name(cursor[0]) + ".log")
            raise exc.moved(path=segment, base_position=cursor[1]) from None
