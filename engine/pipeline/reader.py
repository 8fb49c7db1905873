"""Reading one split: mmap the file, decode its region with the native decoders, yield Arrow batches.

Corruption: by default (``on_corrupt="fail"``) a bad batch or record raises CorruptRecordError
naming the file and the byte position, which fails the Spark task and the job. With
``on_corrupt="skip"`` the good batches before it are still returned, the bad bytes are skipped
(one bad CRC-valid batch; or, after a bad header or CRC, the rest of the split, since nothing
marks where the next batch starts) and a marker row (record_type ``__corrupt__``, json = path,
position, reason, skipped bytes) is returned in their place: counted, never silently dropped.
A torn last batch at the end of a directory's last segment is the live end of the log (a writer
mid-append, which recovery would truncate), not corruption: reading stops before it.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from kraftlog.engine.log.segment import is_preallocated_space
from kraftlog.engine.pipeline.inputs import Split
from kraftlog.engine.pipeline.rows import ARROW_SCHEMA, RowFilter, corrupt_row, to_record_batch
from kraftlog.engine.records import batch, metadata_columns
from kraftlog.errors import CorruptRecordError, KraftlogError, UndecodableRecordError

ARROW_BATCH_ROWS_MAX = 1 << 17  # rows per Arrow batch handed to Spark (bounds the JVM's buffers)
ON_CORRUPT = ("fail", "skip")


def _map(path: str):
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return None, 0
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ), size


def readable_end(buf, start: int, end: int) -> int:
    """End of the whole batches in buf[start:end] when a torn batch may follow them."""
    scan = batch.scan_batches(buf, start, end, verify_crc=False)
    if scan.error_reason is not None and (scan.error_reason.startswith("truncated") or
                                          is_preallocated_space(memoryview(buf)[scan.valid_end:end])):
        return scan.valid_end
    return end


def decode(buf, start: int, end: int, path: str):
    """(MetadataColumns, batch headers) of the whole batches in buf[start:end]."""
    try:
        cols = metadata_columns.decode_metadata_region(buf, start, end, path=path)
    except UndecodableRecordError:
        raise
    except KraftlogError as exc:  # a decompression limit, say: still bad bytes at a place
        raise CorruptRecordError(str(exc), path=path, position=start) from exc
    headers = metadata_columns.walk_batches(memoryview(buf), start, end, False, path)
    return cols, headers


def read_split(split: Split, row_filter: RowFilter | None = None, *, on_corrupt: str = "fail",
               schema: pa.Schema = ARROW_SCHEMA, end_position: int | None = None) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the rows of ``split`` that ``row_filter`` keeps (offsets below the log
    start are never rows). ``end_position`` overrides the split's end (streaming reads)."""
    if on_corrupt not in ON_CORRUPT:
        raise ValueError(f"on_corrupt must be one of {ON_CORRUPT}, not {on_corrupt!r}")
    buf, size = _map(split.path)
    if buf is None:
        return
    end = end_position if end_position is not None else (size if split.end < 0 else min(split.end, size))
    if split.tail:
        end = readable_end(buf, split.start, end)
    row_filter = _with_log_start(row_filter, split.min_offset if split.kind == "log" else 0)
    pos = split.start
    while pos < end:
        try:
            cols, headers = decode(buf, pos, end, split.path)
        except UndecodableRecordError as exc:
            if on_corrupt == "fail":
                raise
            good_end, bad_end = _bad_range(buf, pos, end, exc)
            if good_end > pos:
                cols, headers = decode(buf, pos, good_end, split.path)
                yield from _slices(to_record_batch(cols, headers, split.cluster, row_filter=row_filter, schema=schema))
            yield corrupt_row(split.cluster, split.path, good_end, exc.reason, bad_end - good_end, schema)
            pos = bad_end
            continue
        yield from _slices(to_record_batch(cols, headers, split.cluster, row_filter=row_filter, schema=schema))
        return


def _bad_range(buf, start: int, end: int, exc: UndecodableRecordError) -> tuple[int, int]:
    """[good end, bad end): the bytes to skip after an UndecodableRecordError in buf[start:end]."""
    scan = batch.scan_batches(buf, start, end, verify_crc=True)
    if scan.error_position is not None:
        return scan.valid_end, end  # a bad header or CRC: the next batch start is unknown
    position = exc.position if exc.position is not None else start
    k = max(int(np.searchsorted(scan.positions, position, side="right")) - 1, 0)
    first = int(scan.positions[k])
    return first, first + int(scan.size_bytes[k])


def _with_log_start(row_filter: RowFilter | None, log_start: int) -> RowFilter | None:
    if log_start <= 0:
        return row_filter
    if row_filter is None:
        return RowFilter(low=log_start)
    low = log_start if row_filter.low is None else max(row_filter.low, log_start)
    return RowFilter(row_filter.api_keys, low, row_filter.high)


def _slices(record_batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    n = record_batch.num_rows
    if n <= ARROW_BATCH_ROWS_MAX:
        if n:
            yield record_batch
        return
    for first in range(0, n, ARROW_BATCH_ROWS_MAX):
        yield record_batch.slice(first, ARROW_BATCH_ROWS_MAX)
