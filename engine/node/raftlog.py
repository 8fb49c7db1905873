"""The engine's segmented log as raft's ReplicatedLog, and a file-backed SnapshotStore.

engine.node is the only place that wires engine and raft; neither imports the other. This
adapter maps raft's ``LogBatch`` (base offset, epoch, payloads, control flag) onto Kafka record
batches v2 in the engine log (``kraftlog.engine.log.log.Log``):

    raft                                   engine log
    append_as_leader(values, epoch)        build_batch_from_values -> Log.append_as_leader (stamps
                                           offset + partitionLeaderEpoch)
    append_as_leader([lc], epoch, control) Kafka control batch: key (0, 2), value = LeaderChangeMessage
                                           v0 (engine.records.metadata.encode_control); the core's
                                           interim encoding (raft/control.py) is converted here
    append_as_follower(batches, epoch)     the fetched bytes as they came (WireBatch.raw), else built
    read(offset, max_bytes)                Log.read -> a BatchRun (raft/wire.py): a zero-copy view of
                                           the segment map with the headers in arrays; a WireBatch
                                           per batch only on access, records decoded lazily
    truncate_to / delete_before            Log.truncate_to / Log.advance_start_offset
    truncate_fully_and_start_at(o, e)      Log.truncate_fully_and_start_at(o)
    flush / last_flushed_offset            Log.flush / Log.last_flushed_offset (the log's own flush
                                           policy is off: raft decides when to fsync)

Epochs: the engine keeps Kafka's leader-epoch cache; raft's answers differ from Kafka's
OffsetsForLeaderEpoch in two places, so they are computed here from the cache entries: an epoch
above every known one answers (log end, latest epoch) instead of "undefined", and the *start
epoch* (the epoch of the snapshot the log starts after, 0 for a log starting at 0) counts as a
known epoch at the log start. The start epoch is not in the engine log: it is the epoch of the
snapshot at ``start_offset`` (read from the snapshot store at open), which raft guarantees
exists whenever the log start is above 0.

Limitation: raft's ``truncate_to``/``delete_before`` may name an offset inside a batch; the
engine log drops (or keeps) whole batches. Raft only truncates at epoch boundaries and the
driver's state machine snapshots at batch ends, so the offsets used are batch boundaries; a
snapshot inside a batch raises ValueError here rather than leaving a batch that straddles the
log start.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

import numpy as np

from kraftlog.durable import replace_durably
from kraftlog.engine.layout import SNAPSHOT_FILE_NAME
from kraftlog.engine.log.errors import OffsetOutOfRangeError
from kraftlog.engine.log.log import Log, LogConfig
from kraftlog.engine.records import batch as batch_codec
from kraftlog.engine.records.layout import SMALL_RUN_BATCHES
from kraftlog.errors import CorruptRecordError, UndecodableRecordError
from kraftlog.raft.protocols import LogAppendInfo
from kraftlog.raft.types import LogBatch, OffsetAndEpoch
from kraftlog.raft.wire import encode_batches, leader_change_value, split_batches

RAFT_LOG_CONFIG = LogConfig(flush_interval_messages=None, flush_interval_ms=None)


class EngineRaftLog:
    """ReplicatedLog (raft/protocols.py) over an engine ``Log`` in ``directory``."""

    def __init__(self, directory: str | os.PathLike, snapshots: FileSnapshotStore, config: LogConfig | None = None):
        self.log = Log(directory, config or RAFT_LOG_CONFIG)
        self.snapshots = snapshots
        self._start_epoch = self._epoch_of_start()

    def _epoch_of_start(self) -> int:
        start = self.log.start_offset
        if start == 0:
            return 0
        for sid in self.snapshots.snapshot_ids():
            if sid.offset == start:
                return sid.epoch
        entries = self.log.epoch_entries()
        return entries[0][0] if entries else 0

    def close(self) -> None:
        self.log.close()

    # ---- appends ------------------------------------------------------------------------------

    def append_as_leader(self, records: Sequence[bytes], epoch: int, *, control: bool = False) -> LogAppendInfo:
        if not records:
            raise ValueError("empty batch")
        if epoch < self.last_fetched_epoch():
            raise ValueError(f"append at epoch {epoch} below the log's last epoch {self.last_fetched_epoch()}")
        if control:
            if len(records) != 1:
                raise ValueError("a control batch holds exactly one LeaderChange record")
            built = batch_codec.build_control_batch(batch_codec.CONTROL_LEADER_CHANGE, leader_change_value(records[0]))
        else:
            built = batch_codec.build_batch_from_values(records)
        info = self.log.append_as_leader(built, epoch)
        return LogAppendInfo(info.first_offset, info.last_offset)

    def append_as_follower(self, batches: Sequence[LogBatch], epoch: int) -> LogAppendInfo:
        last_epoch = self.last_fetched_epoch()
        # epochs never go down along the log nor above the leader's; no batch is empty
        run_epochs = getattr(batches, "epochs", None)
        if run_epochs is not None and len(batches) > SMALL_RUN_BATCHES:  # a long BatchRun: on its header arrays
            bad = (np.diff(run_epochs, prepend=last_epoch) < 0) | (run_epochs > epoch) | (batches.counts <= 0)
            first_bad = int(bad.argmax()) if bad.any() else -1
        else:
            pairs = zip(run_epochs.tolist(), batches.counts.tolist(), strict=True) if run_epochs is not None \
                else ((b.epoch, len(b.records)) for b in batches)
            first_bad = -1
            for k, (batch_epoch, count) in enumerate(pairs):
                if batch_epoch < last_epoch or batch_epoch > epoch or count <= 0:
                    first_bad = k
                    break
                last_epoch = batch_epoch
        if first_bad >= 0:
            b = batches[first_bad]
            raise ValueError(f"bad follower batch at {b.base_offset} epoch {b.epoch} (log epoch "
                             f"{self.last_fetched_epoch()}, leader epoch {epoch})")
        # A Fetch answer may carry fetch_max_bytes of small batches (8 MiB: ~90,000 one-record
        # batches), more than one log append takes (max_batches_per_append): append in slices, so
        # a follower any distance behind catches up. A slice that fails leaves the earlier ones
        # appended, which is a valid (shorter) log; nothing is durable before the next flush.
        step = self.log.config.max_batches_per_append
        first = None
        for at in range(0, len(batches), step):
            info = self.log.append_as_follower(encode_batches(batches[at:at + step]))
            first = info.first_offset if first is None else first
        if first is None:
            raise ValueError("an append needs at least one batch")
        return LogAppendInfo(first, info.last_offset)

    # ---- reads --------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int) -> Sequence[LogBatch]:
        try:
            info = self.log.read(start_offset, max_bytes)
        except OffsetOutOfRangeError as exc:
            raise ValueError(str(exc)) from None
        if not len(info.records):
            return ()
        try:
            return split_batches(info.records, what=f"log {self.log.directory}")
        except UndecodableRecordError as exc:  # the log validated these on append: a bug or a broken disk
            raise AssertionError(f"the engine log returned broken batches: {exc}") from exc

    def start_offset(self) -> int:
        return self.log.start_offset

    def end_offset(self) -> int:
        return self.log.end_offset

    def _epochs(self) -> list[tuple[int, int]]:
        """(epoch, start offset) of the epochs that have records, ascending."""
        end = self.log.end_offset
        return [(e, s) for e, s in self.log.epoch_entries() if s < end]

    def last_fetched_epoch(self) -> int:
        if self.log.end_offset == self.log.start_offset:
            return self._start_epoch
        latest = self.log.latest_epoch
        return self._start_epoch if latest is None else max(latest, self._start_epoch)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        start, end = self.log.start_offset, self.log.end_offset
        if epoch < self._start_epoch:
            return OffsetAndEpoch(start, self._start_epoch)
        entries = self._epochs()
        found = self._start_epoch
        for e, _ in entries:
            if e <= epoch:
                found = max(found, e)
        for e, s in entries:
            if e > found:
                return OffsetAndEpoch(s, found)
        return OffsetAndEpoch(end, found)

    # ---- truncation and start ---------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        if offset < self.log.start_offset:
            raise ValueError(f"truncate to {offset} below the log start {self.log.start_offset}")
        self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int, epoch: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self._start_epoch = epoch

    def delete_before(self, offset: int, epoch: int) -> bool:
        log = self.log
        if offset <= log.start_offset or offset > log.end_offset:
            return False
        if offset < log.end_offset:
            first = self.read(offset, 1)
            if first and first[0].base_offset != offset:
                raise ValueError(f"log start {offset} would fall inside the batch at {first[0].base_offset}")
        moved = log.advance_start_offset(offset)
        if moved:
            self._start_epoch = epoch
        return moved

    # ---- high watermark and flushing ----------------------------------------------------------------

    def update_high_watermark(self, offset: int) -> None:
        self.log.update_high_watermark(offset)

    def high_watermark(self) -> int:
        return self.log.high_watermark

    def flush(self) -> None:
        self.log.flush()

    def last_flushed_offset(self) -> int:
        return self.log.last_flushed_offset




class FileSnapshotStore:
    """SnapshotStore (raft/protocols.py) as files named like Kafka's checkpoints:
    ``<end offset %020d>-<epoch %010d>.checkpoint``, written as ``.part`` and renamed when
    finished (after fsync of the file and the directory). The bytes are the state machine's,
    opaque here. Used by the bare raft node (raftnode.py: its counting state machine has no image);
    metadata nodes (node.py) use engine/snapshot's LMDB store, which speaks the same protocol."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        for name in os.listdir(self.directory):
            if name.endswith(".part"):
                os.remove(os.path.join(self.directory, name))  # an interrupted fetch or write

    def _path(self, sid: OffsetAndEpoch, part: bool = False) -> str:
        name = f"{sid.offset:020d}-{sid.epoch:010d}.checkpoint"
        return os.path.join(self.directory, name + (".part" if part else ""))

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        out = []
        for name in os.listdir(self.directory):
            m = SNAPSHOT_FILE_NAME.match(name)
            if m:
                out.append(OffsetAndEpoch(int(m.group(1)), int(m.group(2))))
        return sorted(out)

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        ids = self.snapshot_ids()
        return ids[-1] if ids else None

    def size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        try:
            return os.path.getsize(self._path(snapshot_id))
        except FileNotFoundError:
            return None

    def read_chunk(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        with open(self._path(snapshot_id), "rb") as f:
            f.seek(position)
            return f.read(max_bytes)

    def write_chunk(self, snapshot_id: OffsetAndEpoch, position: int, data: bytes) -> None:
        path = self._path(snapshot_id, part=True)
        if position == 0:
            with open(path, "wb") as f:
                f.write(data)
            return
        have = os.path.getsize(path) if os.path.exists(path) else -1
        if have != position:
            raise ValueError(f"snapshot chunk at {position} but {have} bytes written")
        with open(path, "ab") as f:
            f.write(data)

    def finish(self, snapshot_id: OffsetAndEpoch, size: int) -> None:
        part = self._path(snapshot_id, part=True)
        have = os.path.getsize(part) if os.path.exists(part) else -1
        if have != size:
            self.abort(snapshot_id)
            raise CorruptRecordError(f"snapshot {snapshot_id} has {have} bytes, expected {size}", path=part)
        fd = os.open(part, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        replace_durably(part, self._path(snapshot_id))

    def abort(self, snapshot_id: OffsetAndEpoch) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._path(snapshot_id, part=True))

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        for sid in self.snapshot_ids():
            if sid.offset < snapshot_id.offset:
                os.remove(self._path(sid))
