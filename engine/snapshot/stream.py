"""The snapshot byte stream: exactly the bytes of Kafka's ``%020d-%010d.checkpoint`` file.

A stream is record batches v2, nothing else (Kafka's RecordsSnapshotWriter):

    batch 0     control batch, base offset 0: SnapshotHeaderRecord first (Version,
                LastContainedLogTimestamp); Kafka may add KRaftVersion / Voters records after it
    batch 1..   the image's metadata records, offsets 1, 2, ... (in Kafka's image order)
    last batch  control batch: SnapshotFooterRecord last (Version)

Every batch carries the snapshot's epoch as its partition leader epoch (Kafka's accumulator is
created with snapshotId.epoch()). Batches hold at most ``batch_target_bytes`` of record values
(at least one record each), far under Kafka's 8 MiB KRaft batch limit.

``validate_stream`` is what import and transfer run before anything is stored: every batch whole
and CRC-valid, offsets strictly increasing from 0, header first, footer last, no header or footer
anywhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.layout import CONTROL_BIT
from kraftlog.engine.snapshot.errors import SnapshotCorruptError
from kraftlog.engine.snapshot.layout import SnapshotId
from kraftlog.errors import CorruptRecordError, UndecodableRecordError

HEADER_VERSION = 0  # Kafka's SNAPSHOT_HEADER_CURRENT_VERSION
FOOTER_VERSION = 0  # Kafka's SNAPSHOT_FOOTER_CURRENT_VERSION
# Bytes a record adds to its value inside a batch (length, attributes, deltas, null key, value
# length, header count): only used to split values into batches of about the target size.
RECORD_FRAMING_BYTES = 8


class StreamInfo(NamedTuple):
    """What validate_stream found; arrays have one entry per batch."""

    positions: np.ndarray  # int64
    sizes: np.ndarray  # int64
    base_offsets: np.ndarray  # int64
    attributes: np.ndarray  # int16
    record_count: int
    last_contained_log_timestamp_ms: int

    @property
    def batch_count(self) -> int:
        return len(self.positions)

    @property
    def compressed(self) -> bool:
        return bool((self.attributes & 0x07).any())


def header_value(last_contained_log_timestamp_ms: int) -> bytes:
    return codec.encode_control(batch.CONTROL_SNAPSHOT_HEADER, HEADER_VERSION, {
        "LastContainedLogTimestamp": last_contained_log_timestamp_ms})[1]


def footer_value() -> bytes:
    return codec.encode_control(batch.CONTROL_SNAPSHOT_FOOTER, FOOTER_VERSION, {})[1]


def split_points(values: Sequence[bytes], batch_target_bytes: int) -> list[int]:
    """Indexes where each batch of ``values`` ends: about ``batch_target_bytes`` each, >= 1 record."""
    if not len(values):
        return []
    sizes = np.fromiter(map(len, values), dtype=np.int64, count=len(values)) + RECORD_FRAMING_BYTES
    ends = np.cumsum(sizes)
    cuts = np.searchsorted(ends, np.arange(batch_target_bytes, int(ends[-1]), batch_target_bytes), side="right")
    points = np.unique(np.append(np.maximum(cuts, 1), len(values)))
    return points.tolist()


def build_stream(values: Sequence[bytes], snapshot_id: SnapshotId, *, last_contained_log_timestamp_ms: int,
                 batch_target_bytes: int, timestamp_ms: int | None = None) -> list[bytes]:
    """The batches of the snapshot holding ``values`` (framed metadata record values), in order."""
    epoch = snapshot_id.epoch
    out = [batch.build_control_batch(batch.CONTROL_SNAPSHOT_HEADER, header_value(last_contained_log_timestamp_ms),
                                     base_offset=0, partition_leader_epoch=epoch, timestamp_ms=timestamp_ms)]
    start = 0
    for end in split_points(values, batch_target_bytes):
        out.append(batch.build_batch_from_values(values[start:end], base_offset=1 + start, partition_leader_epoch=epoch,
                                                 timestamp_ms=timestamp_ms))
        start = end
    out.append(batch.build_control_batch(batch.CONTROL_SNAPSHOT_FOOTER, footer_value(), base_offset=1 + len(values),
                                         partition_leader_epoch=epoch, timestamp_ms=timestamp_ms))
    return out


def validate_stream(buf, *, snapshot_id: SnapshotId | None = None, path: str | None = None) -> StreamInfo:
    """Check ``buf`` is a whole snapshot stream (see the module docstring); raise SnapshotCorruptError
    naming the snapshot, the broken batch and its position otherwise."""
    scan = batch.scan_batches(buf, 0, None, verify_crc=True)

    def broken(what: str, reason: str, position: int | None) -> SnapshotCorruptError:
        return SnapshotCorruptError(snapshot_id, what, reason, position=position, path=path)

    if scan.error_position is not None:
        raise broken(f"batch at {scan.error_position}", scan.error_reason, scan.error_position)
    if scan.batch_count < 2:
        raise broken("stream", f"{scan.batch_count} record batch(es): a snapshot needs a header and a footer batch", 0)
    if int(scan.base_offsets[0]) != 0:
        raise broken("batch at 0", f"base offset {int(scan.base_offsets[0])}: a snapshot starts at offset 0", 0)
    behind = np.flatnonzero(scan.base_offsets[1:] <= scan.last_offsets[:-1])
    if len(behind):
        pos = int(scan.positions[behind[0] + 1])
        raise broken(f"batch at {pos}", "offsets do not increase", pos)
    control = (scan.attributes & CONTROL_BIT) != 0
    first, last = 0, scan.batch_count - 1
    if not control[first] or not control[last]:
        which = first if not control[first] else last
        pos = int(scan.positions[which])
        raise broken(f"batch at {pos}", "a snapshot's first and last batches are control batches", pos)
    last_ts = _check_control_batches(buf, scan, np.flatnonzero(control).tolist(), broken)
    return StreamInfo(scan.positions, scan.size_bytes, scan.base_offsets, scan.attributes,
                      int(scan.record_counts.sum()), last_ts)


def _check_control_batches(buf, scan, control_batches: list[int], broken) -> int:
    """Header exactly at the first record, footer exactly at the last, neither elsewhere; returns the
    header's LastContainedLogTimestamp."""
    last_ts = -1
    final = scan.batch_count - 1
    for b in control_batches:
        pos = int(scan.positions[b])
        try:
            records = list(batch.iter_records(buf, pos))
            types = [codec.control_type_of(r.key) for r in records]
        except UndecodableRecordError as exc:
            raise broken(f"batch at {pos}", exc.reason, pos) from None
        for i, control_type in enumerate(types):
            is_first, is_last = b == 0 and i == 0, b == final and i == len(types) - 1
            if control_type == batch.CONTROL_SNAPSHOT_HEADER and not is_first:
                raise broken(f"batch at {pos}", "SnapshotHeader record that is not the first record", pos)
            if control_type == batch.CONTROL_SNAPSHOT_FOOTER and not is_last:
                raise broken(f"batch at {pos}", "SnapshotFooter record that is not the last record", pos)
            if is_first and control_type != batch.CONTROL_SNAPSHOT_HEADER:
                raise broken(f"batch at {pos}", f"first record is control type {control_type}, not SnapshotHeader", pos)
            if is_last and control_type != batch.CONTROL_SNAPSHOT_FOOTER:
                raise broken(f"batch at {pos}", f"last record is control type {control_type}, not SnapshotFooter", pos)
            if is_first or is_last:
                try:
                    decoded = codec.decode_control(records[i].key, records[i].value)
                except CorruptRecordError as exc:
                    raise broken(f"batch at {pos}", f"undecodable {'header' if is_first else 'footer'}: {exc.reason}",
                                 pos) from None
                if is_first:
                    last_ts = int(decoded.data["LastContainedLogTimestamp"])
    return last_ts
