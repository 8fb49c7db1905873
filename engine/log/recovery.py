"""Opening a segment: trust it after a clean shutdown, or CRC-check and rebuild it after a crash.

Policy (``RecoveryMode``, after tikv/raft-engine's setting of the same name):

- ``TOLERATE_TAIL_CORRUPTION`` (default): in the *last* segment, bytes after the last valid batch
  are a torn tail (a write cut by the crash) and are truncated.
- ``STRICT``: any invalid byte anywhere raises LogCorruptionError; nothing is truncated.

In both modes a bad batch that a torn tail cannot explain raises LogCorruptionError naming the
file and position, never skipped: a bad batch in a non-last segment, a bad batch followed by a
valid one (its header is intact, and a batch with a good CRC starts right after it), and a valid
batch whose offsets do not continue the log (the base offset is outside the CRC).

Indexes are rebuilt from the scan with the same sparse rule the append path uses, so a
rebuilt index is byte-identical to the one the appends wrote (tests check this).
"""

from __future__ import annotations

import enum

import numpy as np

from kraftlog.engine.log.errors import LogCorruptionError
from kraftlog.engine.log.index import build_indexes
from kraftlog.engine.log.segment import Segment
from kraftlog.engine.records import batch as batch_codec
from kraftlog.engine.records.layout import HEADER_SIZE, LOG_OVERHEAD, MAGIC, MIN_BATCH_LENGTH


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


def recover(seg: Segment, *, is_last: bool, mode: RecoveryMode, expected_base_offset: int | None):
    """CRC-check every batch of ``seg``, truncate a torn tail (last segment, tolerant mode) and
    rebuild both indexes. Returns the ScanResult of the valid batches.

    ``expected_base_offset`` is where the previous segment ended (None for the first segment):
    the first batch must start there, and every batch must continue the one before it.
    """
    file_size = seg.file_size()
    buf = seg.scan_buffer(file_size)
    scan = batch_codec.scan_batches(buf, 0, file_size, verify_crc=True)
    _check_offsets(seg, scan, expected_base_offset)
    if scan.error_position is not None:
        _judge_bad_tail(seg, buf, file_size, scan, is_last=is_last, mode=mode)
        seg.truncate_file(scan.valid_end)
    del buf
    seg.size = scan.valid_end
    seg.next_offset = int(scan.last_offsets[-1]) + 1 if scan.batch_count else seg.base_offset
    rebuild_indexes(seg, scan)
    return scan


def _check_offsets(seg: Segment, scan, expected_base_offset: int | None) -> None:
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


def _judge_bad_tail(seg: Segment, buf, file_size: int, scan, *, is_last: bool, mode: RecoveryMode) -> None:
    """Raise unless the invalid bytes are a torn tail that ``mode`` lets us truncate."""
    position, reason = scan.error_position, scan.error_reason
    if not is_last:
        raise LogCorruptionError(f"invalid batch in a segment that is not the last ({reason})",
                                 path=seg.log_path, position=position)
    if _followed_by_valid_batch(buf, position, file_size):
        raise LogCorruptionError(f"invalid batch followed by valid data ({reason})",
                                 path=seg.log_path, position=position)
    if mode is RecoveryMode.STRICT:
        raise LogCorruptionError(f"invalid tail of {file_size - position} bytes ({reason}); "
                                 "STRICT recovery does not truncate", path=seg.log_path, position=position)


def _followed_by_valid_batch(buf, position: int, file_size: int) -> bool:
    """True when the bad batch's header is intact and a CRC-valid batch starts right after it."""
    if file_size - position < HEADER_SIZE:
        return False
    view = memoryview(buf)
    length = int.from_bytes(view[position + 8:position + 12], "big", signed=True)
    if length < MIN_BATCH_LENGTH or view[position + 16] != MAGIC:
        return False
    nxt = position + LOG_OVERHEAD + length
    if nxt + HEADER_SIZE > file_size:
        return False
    after = batch_codec.scan_batches(buf, nxt, file_size, verify_crc=True)
    return after.batch_count > 0


def rebuild_indexes(seg: Segment, scan) -> None:
    """Rewrite ``.index`` / ``.timeindex`` from the scanned batches (the append path's rule)."""
    seg.offset_index.reset()
    seg.time_index.reset()
    seg.make_active()
    n_off, n_time, _, max_ts, max_ts_offset = build_indexes(
        np.ascontiguousarray(scan.positions, dtype=np.int64),
        np.ascontiguousarray(scan.size_bytes, dtype=np.int64),
        np.ascontiguousarray(scan.last_offsets, dtype=np.int64),
        np.ascontiguousarray(scan.max_timestamps, dtype=np.int64),
        seg.base_offset, seg.index_interval_bytes, seg.offset_index.buffer, seg.time_index.buffer)
    seg.offset_index.entries = n_off
    seg.time_index.entries = n_time
    seg.reset_index_state()
    seg.max_timestamp, seg.offset_of_max_timestamp = max_ts, max_ts_offset
    seg.bytes_since_last_index_entry = seg.size - (seg.offset_index.last_entry()[1] if n_off else 0)
    seg.indexes_dirty = True
