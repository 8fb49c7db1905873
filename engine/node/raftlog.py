"""The engine's segmented log as raft's ReplicatedLog, and a file-backed SnapshotStore.

engine.node is the only place that wires engine and raft; neither imports the other. This
adapter maps raft's ``LogBatch`` (base offset, epoch, payloads, control flag) onto Kafka record
batches v2 in the engine log (``kraftlog.engine.log.log.Log``):

    raft                                   engine log
    append_as_leader(values, epoch)        build_batch_from_values -> Log.append_as_leader (stamps
                                           offset + partitionLeaderEpoch)
    append_as_leader(ClientBatch, epoch)   a Produce's batch as the client wrote it (raft/wire.py
                                           ClientBatch) -> Log.append_as_leader, stamped the same way
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
import struct
from collections.abc import Sequence

import numpy as np

from kraftlog.durable import replace_durably
from kraftlog.engine.layout import SNAPSHOT_FILE_NAME
from kraftlog.engine.log.errors import OffsetOutOfRangeError
from kraftlog.engine.log.log import Log, LogConfig
from kraftlog.engine.records import batch as batch_codec
from kraftlog.engine.records.layout import (
    BASE_OFFSET_OFFSET,
    HEADER,
    HEADER_SIZE,
    LEADER_EPOCH_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    SMALL_RUN_BATCHES,
)
from kraftlog.errors import CorruptRecordError, UndecodableRecordError
from kraftlog.raft.protocols import LogAppendInfo
from kraftlog.raft.types import LogBatch, OffsetAndEpoch
from kraftlog.raft.wire import BatchRun, ClientBatch, encode_batches, leader_change_value, split_batches

# The largest run kept as the tail memo: what one commit or one small pipelined Fetch appends. A
# follower's memo is a view of the Fetch answer it came in, so a bound keeps a catch-up's 8 MiB
# answers from being held after their append.
TAIL_MEMO_MAX_BYTES = 64 * 1024
_OFFSET = struct.Struct(">q")  # a batch's baseOffset
_EPOCH = struct.Struct(">i")  # its partitionLeaderEpoch
TAIL_MEMO_MAX_RUNS = 8

# raft decides when to fsync (flush policy off); the active segment's file is kept 4 MiB ahead of its
# data, so a commit's fdatasync writes only data, never a new file length (etcd's WAL does the same).
# A far follower's 8 MiB append starts for the disk every MiB while the rest is appended, so the
# flush before its next Fetch waits for less (a commit's append never reaches a MiB)
RAFT_LOG_CONFIG = LogConfig(flush_interval_messages=None, flush_interval_ms=None, preallocate_bytes=4 << 20,
                            writeback_bytes=1 << 20)


class EngineRaftLog:
    """ReplicatedLog (raft/protocols.py) over an engine ``Log`` in ``directory``."""

    def __init__(self, directory: str | os.PathLike, snapshots: FileSnapshotStore, config: LogConfig | None = None):
        self.log = Log(directory, config or RAFT_LOG_CONFIG)
        self.snapshots = snapshots
        self._start_epoch = self._epoch_of_start()
        self._tail = TailMemo()

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
        elif type(records) is ClientBatch:  # a Produce's batch, appended as the client wrote it
            built = records.raw
        else:
            built = batch_codec.build_batch_from_values(records)
        info = self.log.append_as_leader(built, epoch)
        if len(built) <= TAIL_MEMO_MAX_BYTES:
            self._tail.appended(_stamped_run(built, info.first_offset, info.last_offset, epoch))
        else:
            self._tail.clear()
        return LogAppendInfo(info.first_offset, info.last_offset)

    def append_as_follower(self, batches: Sequence[LogBatch], epoch: int) -> LogAppendInfo:
        last_epoch = self.last_fetched_epoch()
        # epochs never go down along the log nor above the leader's; no batch is empty
        run_epochs = getattr(batches, "epochs", None)
        if run_epochs is not None and len(batches) > SMALL_RUN_BATCHES:  # a long BatchRun: on its header arrays
            bad = (np.diff(run_epochs, prepend=last_epoch) < 0) | (run_epochs > epoch) | (batches.counts <= 0)
            first_bad = int(bad.argmax()) if bad.any() else -1
        else:
            pairs = zip(run_epochs, batches.counts, strict=True) if run_epochs is not None \
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
        # A run's slices are handed over as views of the Fetch answer: the log's pwrite is their
        # one copy (encode_batches would copy each slice into bytes first).
        step = self.log.config.max_batches_per_append
        as_run = isinstance(batches, BatchRun)
        first = None
        whole = len(batches) <= step  # a commit's append: one slice, the run itself (no slicing of its arrays)
        for at in range(0, len(batches), step):
            part = batches if whole else batches[at:at + step]
            info = self.log.append_as_follower(part.raw if as_run else encode_batches(part))
            first = info.first_offset if first is None else first
        if first is None:
            raise ValueError("an append needs at least one batch")
        # the fetched bytes are an immutable frame (the transport copies each one out of its buffer,
        # or lends a large one's own buffer, which it never refills: FrameConnection.lend_large_frames)
        if as_run:
            self._tail.appended(batches)
        else:
            self._tail.clear()
        return LogAppendInfo(first, info.last_offset)

    # ---- reads --------------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, *, until_offset: int | None = None) -> Sequence[LogBatch]:
        end = self.log.end_offset
        if start_offset == end:  # a caught-up fetcher's offset: nothing to read, no log call
            return ()
        tail = self._tail.read(start_offset, max_bytes, end, until_offset)
        if tail is not None:
            return tail
        try:
            info = self.log.read(start_offset, max_bytes)
        except OffsetOutOfRangeError as exc:
            raise ValueError(str(exc)) from None
        if not len(info.records):
            return ()
        try:
            run = split_batches(info.records, what=f"log {self.log.directory}")
        except UndecodableRecordError as exc:  # the log validated these on append: a bug or a broken disk
            raise AssertionError(f"the engine log returned broken batches: {exc}") from exc
        if run.next_offset == self.log.end_offset:
            self._tail.restart(run)
        return run

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
        # Every Fetch of a follower in step asks this of the latest epoch (the leader's check of
        # its log), and building the entry list was ~4% of a leader's CPU per commit: the latest
        # epoch with records at or below ``epoch`` ends at the log end.
        cache = self.log.epochs
        latest = cache.latest_epoch
        if latest is not None and self._start_epoch <= latest <= epoch and cache.latest_start_offset < end:
            return OffsetAndEpoch(end, latest)
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
        self._tail.clear()
        self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int, epoch: int) -> None:
        self._tail.clear()
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
        self._tail.clear()
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




class TailMemo:
    """The runs last appended (or read) at the log's end, contiguous, at most
    TAIL_MEMO_MAX_BYTES and TAIL_MEMO_MAX_RUNS of them: what raft reads again right away. A
    leader reads its newest batch for each follower's Fetch and again for its own delivery; a
    follower reads the batches it appended one or two Fetch answers ago for its delivery (the HW
    that commits a batch comes with the next one). Serving those from here skips the log read,
    whose segment map must be redone after every append.

    The runs describe the log's bytes while the log's end is where the last run ends: every
    append goes through ``appended`` (or ``clear``), every truncation and start move clears it.
    """

    __slots__ = ("_runs", "_size_bytes")

    def __init__(self) -> None:
        self._runs: list[BatchRun] = []
        self._size_bytes = 0

    def clear(self) -> None:
        self._runs.clear()
        self._size_bytes = 0

    def restart(self, run: BatchRun) -> None:
        self.clear()
        self.appended(run)

    def appended(self, run: BatchRun) -> None:
        """``run`` now ends the log (a follower's is a view of its Fetch answer: an immutable frame)."""
        runs, nbytes = self._runs, run.nbytes
        if nbytes > TAIL_MEMO_MAX_BYTES or not nbytes:
            self.clear()
            return
        if runs and runs[-1].next_offset != run.base_offset:
            self.clear()
        runs.append(run)
        self._size_bytes += nbytes
        while self._size_bytes > TAIL_MEMO_MAX_BYTES or len(runs) > TAIL_MEMO_MAX_RUNS:
            self._size_bytes -= runs.pop(0).nbytes

    def read(self, start_offset: int, max_bytes: int, log_end_offset: int,
             until_offset: int | None = None) -> BatchRun | None:
        """The batches from ``start_offset`` to the log's end (or only to the first run reaching
        ``until_offset``), when a run starts there and they fit ``max_bytes`` (else None: the
        log answers, cut to ``max_bytes`` as it cuts)."""
        runs = self._runs
        if not runs or runs[-1].next_offset != log_end_offset:
            return None
        for k in range(len(runs) - 1, -1, -1):  # newest first: most reads are of the newest run
            if runs[k].base_offset == start_offset:
                break
        else:
            return None
        if k == len(runs) - 1 or (until_offset is not None and runs[k].next_offset >= until_offset):
            run = runs[k]  # a follower's delivery of the batches the last high watermark committed
            return run if run.nbytes <= max_bytes else None
        if sum(r.nbytes for r in runs[k:]) > max_bytes:
            return None
        return split_batches(b"".join([r.raw for r in runs[k:]]))


def _stamped_run(built, base_offset: int, last_offset: int, epoch: int) -> BatchRun:
    """The one batch ``built`` as the log holds it: Log.append_as_leader writes it with its base
    offset and partitionLeaderEpoch stamped (neither is under the CRC) and leaves ``built`` as it was.

    Its header rows are known without a scan (one batch at position 0: the stamped base offset
    and epoch, its attributes and record count read from its header), so the run is made directly,
    the run split_batches makes of the same bytes (tests/test_raftlog_tail.py compares them). This
    is on a commit's path between the leader's log write and its first Fetch answer: the copy to
    bytes and the native scan it replaces were ~10% of that hop's Python. Bytes that are not one
    whole batch ending at ``last_offset`` take split_batches, which names what is wrong."""
    raw = bytearray(built)
    _OFFSET.pack_into(raw, BASE_OFFSET_OFFSET, base_offset)
    _EPOCH.pack_into(raw, LEADER_EPOCH_OFFSET, epoch)
    if len(raw) >= HEADER_SIZE:
        header = HEADER.unpack_from(raw)
        length, magic, attributes, last_delta, count = header[1], header[3], header[5], header[6], header[12]
        if length + LOG_OVERHEAD == len(raw) and magic == MAGIC and last_delta + 1 == count \
                and base_offset + count - 1 == last_offset:
            # a read-only view of a buffer nothing else holds: as immutable as bytes, one copy fewer
            return BatchRun(memoryview(raw).toreadonly(), [base_offset], [count], [epoch], [attributes], [0],
                            [len(raw)])
    return split_batches(bytes(raw))


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
