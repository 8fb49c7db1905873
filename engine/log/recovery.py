"""Opening a segment: trust it after a clean shutdown, or CRC-check and rebuild it after a crash.

Policy (``RecoveryMode``, after tikv/raft-engine's setting of the same name):

- ``TOLERATE_TAIL_CORRUPTION`` (default): in the *last* segment, bytes after the last valid batch
  are a torn tail (a write cut by the crash) and are truncated.
- ``STRICT``: any invalid byte anywhere raises LogCorruptionError; nothing is truncated.

In both modes a bad batch that a torn tail cannot explain raises LogCorruptionError naming the
file and position, never skipped: a bad batch in a non-last segment, a bad batch followed by a
valid one (its header is intact, and a batch with a good CRC starts right after it), and a valid
batch whose offsets do not continue the log (the base offset is outside the CRC).

The scan reads each segment with pread into one reused buffer of a few MiB and runs the record
codec's scan_batches over it (scan_segment): the same verdict as one scan over the whole file,
without the cost of mapping it. Indexes are rebuilt from the scan with the same sparse rule the
append path uses, in the form a seal leaves, so a rebuilt index is byte-identical to the one the
appends wrote (tests check this); when the files already hold those bytes they are kept as they
are: recovery of a log nothing changed writes no index, and nothing needs an fsync.
"""

from __future__ import annotations

import enum
import struct

from kraftlog.engine.log.errors import LogCorruptionError
from kraftlog.engine.log.index import build_indexes
from kraftlog.engine.log.segment import Segment, is_preallocated_space
from kraftlog.engine.records import batch as batch_codec
from kraftlog.engine.records.batch import ScanResult
from kraftlog.engine.records.layout import (
    HEADER_SIZE,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
)

# numpy is imported inside the functions that take a scan's arrays (the scan loaded it already),
# so importing the log does not load it (bench row startup.import_log_s).
# Recovery's pread size: large enough that the per-chunk cost (one scan_batches call, ~15 us)
# is small beside the read and the CRC (~400 us per 4 MiB), small enough to stay in the last-level
# cache, so the CRC reads what the kernel's copy just wrote there. Measured here: 1 MiB 7.0 GB/s,
# 2 MiB 7.3, 4 MiB 7.5-7.9 (CPU time, 256 MiB segment in the page cache).
SCAN_CHUNK_BYTES = 4 << 20
_CUT_BY_THE_END = "truncated"  # scan_batches' reasons for bytes that end inside a header or a batch
_TIME_ENTRY = struct.Struct(">qi")  # .timeindex entry: timestamp i64 | relativeOffset i32


class RecoveryMode(enum.Enum):
    """What recovery may repair when it finds invalid bytes (see the module docstring)."""

    STRICT = "strict"
    TOLERATE_TAIL_CORRUPTION = "tolerate_tail_corruption"


def load_clean(seg: Segment) -> bool:
    """Open a segment written by a clean close; False when it does not look clean after all.

    Trusts the trimmed indexes after cheap checks; the segment's end offset comes from walking
    the batch headers after the last index entry (at most about index_interval_bytes of them), so
    the caller can check that each segment ends where the next one starts.
    """
    seg.size = seg.file_size()
    if seg.size and not (seg.offset_index.existed and seg.time_index.existed):
        return False
    try:
        seg.offset_index.load_trimmed()
        seg.time_index.load_trimmed()
        seg.offset_index.check(seg.size)
    except LogCorruptionError:
        return False
    reached, last_offset = seg.walk_tail()
    if reached != seg.size or (seg.size and last_offset < 0):
        return False
    seg.next_offset = last_offset + 1 if last_offset >= 0 else seg.base_offset
    try:
        seg.time_index.check(seg.next_offset)
    except LogCorruptionError:
        return False
    seg.reset_index_state()
    return True


def recover(seg: Segment, *, is_last: bool, mode: RecoveryMode, expected_base_offset: int | None,
            buffer: bytearray | None = None):
    """CRC-check every batch of ``seg``, truncate a torn tail (last segment, tolerant mode) and
    rebuild both indexes. Returns the ScanResult of the valid batches.

    ``expected_base_offset`` is where the previous segment ended (None for the first segment):
    the first batch must start there, and every batch must continue the one before it.
    ``buffer`` is the scan's reused read buffer (one of SCAN_CHUNK_BYTES is made when None).
    """
    file_size = seg.file_size()
    scan = scan_segment(seg, file_size, buffer if buffer is not None else bytearray(SCAN_CHUNK_BYTES))
    _check_offsets(seg, scan, expected_base_offset)
    if scan.error_position is not None:
        if is_last and _only_zeros(seg, scan.valid_end, file_size):
            seg.preallocated_bytes_cut = file_size - scan.valid_end  # space reserved ahead, never data
        else:
            _judge_bad_tail(seg, file_size, scan, is_last=is_last, mode=mode)
        seg.truncate_file(scan.valid_end)
    seg.size = scan.valid_end
    seg.next_offset = int(scan.last_offsets[-1]) + 1 if scan.batch_count else seg.base_offset
    rebuild_indexes(seg, scan)
    return scan


def scan_segment(seg: Segment, file_size: int, buffer: bytearray) -> ScanResult:
    """scan_batches over the segment's first ``file_size`` bytes, read with pread into ``buffer``.

    The same result as one scan_batches over the whole file (same batches, same first invalid
    position and reason), without mapping the file (a populated map of a 256 MiB segment cost
    ~40 ms to build and ~10 ms to tear down, more than the CRC): each chunk is read into the
    reused buffer and scanned; a batch cut by the chunk's end is carried to the buffer's start and
    scanned whole with the next chunk; a batch larger than the buffer is checked through a plain
    map of the file.
    """
    parts: list[ScanResult] = []
    base = filled = 0  # the buffer holds the file's bytes [base, base + filled)
    view = memoryview(buffer)
    while True:
        want = min(len(buffer), file_size - base) - filled
        if want > 0:
            got = seg.read_into(view[filled:filled + want], base + filled)
            filled += got
            if got < want:
                file_size = base + filled  # the file shrank under us: its end is where reading stopped
        at_end = base + filled >= file_size
        scan = batch_codec.scan_batches(buffer, 0, filled)
        parts.append(_shifted(scan, base))
        stop = scan.error_position
        if stop is None and at_end:
            return _merged(parts, base + filled, None, None)
        if stop is None:
            base, filled = base + filled, 0
            continue
        if at_end or not scan.error_reason.startswith(_CUT_BY_THE_END):
            return _merged(parts, base + stop, base + stop, scan.error_reason)
        if stop == 0:  # one batch larger than the whole buffer
            big = _scan_one_mapped(seg, base, file_size)
            parts.append(big)
            if big.error_position is not None:
                return _merged(parts, big.valid_end, big.error_position, big.error_reason)
            base, filled = big.valid_end, 0
            continue
        view[:filled - stop] = view[stop:filled]  # carry the cut batch's first bytes (a memmove)
        base, filled = base + stop, filled - stop


def _scan_one_mapped(seg: Segment, position: int, file_size: int) -> ScanResult:
    """scan_batches of the one batch at ``position`` (its header is whole: it was cut only by
    the buffer's end), through a map of the file; positions are the file's."""
    buf = seg.map_file(file_size)
    length = int.from_bytes(buf[position + LENGTH_OFFSET:position + LENGTH_OFFSET + 4], "big", signed=True)
    return batch_codec.scan_batches(buf, position, min(position + LOG_OVERHEAD + length, file_size))


def _shifted(scan: ScanResult, base: int) -> ScanResult:
    if not base or not scan.batch_count:
        return scan
    return scan._replace(positions=scan.positions + base)


def _merged(parts: list[ScanResult], valid_end: int, error_position: int | None,
            error_reason: str | None) -> ScanResult:
    """One ScanResult of consecutive parts (positions already the file's)."""
    import numpy as np
    parts = [p for p in parts if p.batch_count] or parts[:1]
    if len(parts) == 1:
        columns = parts[0][:8]
    else:
        columns = [np.concatenate([p[i] for p in parts]) for i in range(8)]
    return ScanResult(*columns, valid_end, error_position, error_reason)


def _check_offsets(seg: Segment, scan, expected_base_offset: int | None) -> None:
    import numpy as np
    if not scan.batch_count:
        return
    bases, lasts = scan.base_offsets, scan.last_offsets
    first_expected = seg.base_offset if expected_base_offset is None else expected_base_offset
    if expected_base_offset is not None and seg.base_offset != expected_base_offset:
        raise LogCorruptionError(f"segment starts at offset {seg.base_offset} but the previous one ends at "
                                 f"{expected_base_offset}", path=seg.log_path, position=0)
    if bases[0] != first_expected:
        raise LogCorruptionError(f"first batch has base offset {bases[0]}, expected {first_expected}",
                                 path=seg.log_path, position=0)
    gaps = np.nonzero(bases[1:] != lasts[:-1] + 1)[0]
    if len(gaps):
        i = int(gaps[0]) + 1
        raise LogCorruptionError(f"batch base offset {bases[i]} does not follow last offset {lasts[i - 1]}",
                                 path=seg.log_path, position=int(scan.positions[i]))
    if int(lasts[-1]) - seg.base_offset > 0x7FFFFFFF:
        raise LogCorruptionError("offsets overflow the segment's 32-bit relative offsets",
                                 path=seg.log_path, position=int(scan.positions[-1]))


def _only_zeros(seg: Segment, start: int, end: int) -> bool:
    """Whether the file's bytes ``[start, end)`` are all zero: the preallocated space after the
    last append (log.py), not a torn batch, which starts with its non-zero offset and length."""
    chunk_bytes = 1 << 20
    return all(is_preallocated_space(seg.read_file_tail(at, min(end, at + chunk_bytes)))
               for at in range(start, end, chunk_bytes))


def _judge_bad_tail(seg: Segment, file_size: int, scan, *, is_last: bool, mode: RecoveryMode) -> None:
    """Raise unless the invalid bytes are a torn tail that ``mode`` lets us truncate."""
    position, reason = scan.error_position, scan.error_reason
    if not is_last:
        raise LogCorruptionError(f"invalid batch in a segment that is not the last ({reason})",
                                 path=seg.log_path, position=position)
    if _followed_by_valid_batch(seg, position, file_size):
        raise LogCorruptionError(f"invalid batch followed by valid data ({reason})",
                                 path=seg.log_path, position=position)
    if mode is RecoveryMode.STRICT:
        raise LogCorruptionError(f"invalid tail of {file_size - position} bytes ({reason}); "
                                 "STRICT recovery does not truncate", path=seg.log_path, position=position)


def _followed_by_valid_batch(seg: Segment, position: int, file_size: int) -> bool:
    """True when the bad batch's header is intact and a CRC-valid batch starts right after it."""
    if file_size - position < HEADER_SIZE:
        return False
    view = memoryview(seg.map_file(file_size))
    length = int.from_bytes(view[position + LENGTH_OFFSET:position + LENGTH_OFFSET + 4], "big", signed=True)
    if length < MIN_BATCH_LENGTH or view[position + MAGIC_OFFSET] != MAGIC:
        return False
    nxt = position + LOG_OVERHEAD + length
    if nxt + HEADER_SIZE > file_size:
        return False
    after = batch_codec.scan_batches(view, nxt, file_size, verify_crc=True)
    return after.batch_count > 0


def rebuild_indexes(seg: Segment, scan) -> None:
    """Rebuild ``.index`` / ``.timeindex`` from the scanned batches (the append path's rule), in
    their sealed form (with the final time entry a seal adds).

    When the files already hold exactly those bytes (the usual case: the crash, or a lost
    clean-shutdown marker, came after the segment was sealed) they are kept as they are, read-only
    and not dirty: recovery then writes nothing, and the close after it has nothing to fsync.
    """
    import numpy as np
    off_cap, time_cap = seg.offset_index.max_entries, seg.time_index.max_entries
    n = scan.batch_count
    offset_buf = bytearray(8 * min(off_cap, n))
    time_buf = bytearray(12 * min(time_cap, n + 1))  # + 1: the seal's final entry
    n_off, n_time, _, max_ts, max_ts_offset = build_indexes(
        np.ascontiguousarray(scan.positions, dtype=np.int64),
        np.ascontiguousarray(scan.size_bytes, dtype=np.int64),
        np.ascontiguousarray(scan.last_offsets, dtype=np.int64),
        np.ascontiguousarray(scan.max_timestamps, dtype=np.int64),
        seg.base_offset, seg.index_interval_bytes, offset_buf, time_buf)
    last_time_ts = int.from_bytes(time_buf[12 * n_time - 12:12 * n_time - 4], "big", signed=True) if n_time else -1
    if max_ts > last_time_ts and n_time < time_cap:  # what seal() appends (Kafka's final time entry)
        _TIME_ENTRY.pack_into(time_buf, 12 * n_time, max_ts, max_ts_offset - seg.base_offset)
        n_time += 1
    offset_bytes, time_bytes = memoryview(offset_buf)[:8 * n_off], memoryview(time_buf)[:12 * n_time]
    seg.offset_index.reset()
    seg.time_index.reset()
    if not (seg.offset_index.adopt(offset_bytes) and seg.time_index.adopt(time_bytes)):
        seg.offset_index.write_entries(offset_bytes)
        seg.time_index.write_entries(time_bytes)
    seg.reset_index_state()
    seg.max_timestamp, seg.offset_of_max_timestamp = max_ts, max_ts_offset
