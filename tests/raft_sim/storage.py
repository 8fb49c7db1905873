"""In-memory storage for the raft simulator: a ReplicatedLog that loses unflushed data when its
node is killed, a quorum-state store, a snapshot store and a fake clock.

The log keeps two copies: ``live`` (what the running node sees) and ``durable`` (what survives
a kill, taken at every flush). A kill may also model a torn write: when everything since the
last flush only appended, a random whole-batch prefix of the unflushed tail survives too (a
torn last batch fails its CRC and recovery drops it, so only whole batches remain). Flushed
data is never lost: losing fsynced data is "wiping" a node, which the simulator does only to
observers (see tests/raft_sim/cluster.py).
"""

from __future__ import annotations

import bisect
import errno

from kraftlog.errors import CorruptRecordError
from kraftlog.raft.protocols import LogAppendInfo
from kraftlog.raft.types import ElectionState, LogBatch, OffsetAndEpoch


class FakeClock:
    def __init__(self, now_ms: int = 0):
        self.now_ms = now_ms

    def milliseconds(self) -> int:
        return self.now_ms


class _LogState:
    __slots__ = ("batches", "bases", "start", "start_epoch")

    def __init__(self, batches=(), start=0, start_epoch=0):
        self.batches: list[LogBatch] = list(batches)
        self.bases: list[int] = [b.base_offset for b in self.batches]
        self.start = start
        self.start_epoch = start_epoch

    def copy(self) -> _LogState:
        return _LogState(self.batches, self.start, self.start_epoch)

    @property
    def end(self) -> int:
        return self.batches[-1].next_offset if self.batches else self.start


class MemLog:
    """ReplicatedLog in memory (raft/protocols.py), with a crash model."""

    def __init__(self):
        self.live = _LogState()
        self.durable = _LogState()
        self._hw = 0
        self._flushed = 0
        self._only_appended = True  # since the last flush: nothing but appends
        # injected faults (the simulator sets them): the next flush fails with this errno; while
        # ``full``, every append fails with ENOSPC and leaves the log as it was
        self.flush_error: int | None = None
        self.full = False

    def _check_space(self) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "injected: no space left on device")

    # -- appends ------------------------------------------------------------------------

    def _push(self, batch: LogBatch) -> None:
        self.live.batches.append(batch)
        self.live.bases.append(batch.base_offset)

    def append_as_leader(self, records, epoch: int, *, control: bool = False) -> LogAppendInfo:
        if not records:
            raise ValueError("empty batch")
        if epoch < self.last_fetched_epoch():
            raise ValueError(f"append at epoch {epoch} below the log's last epoch {self.last_fetched_epoch()}")
        self._check_space()
        batch = LogBatch(self.live.end, epoch, tuple(records), control)
        self._push(batch)
        return LogAppendInfo(batch.base_offset, batch.last_offset)

    def append_as_follower(self, batches, epoch: int) -> LogAppendInfo:
        first = batches[0].base_offset
        if first != self.live.end:
            raise ValueError(f"follower append at {first} but the log ends at {self.live.end}")
        self._check_space()
        last_epoch = self.last_fetched_epoch()
        for b in batches:
            if b.base_offset != self.live.end or b.epoch < last_epoch or b.epoch > epoch or not b.records:
                raise ValueError(f"bad follower batch at {b.base_offset} epoch {b.epoch}")
            self._push(b)
            last_epoch = b.epoch
        return LogAppendInfo(first, self.live.end - 1)

    # -- reads ----------------------------------------------------------------------------

    def read(self, start_offset: int, max_bytes: int, *, until_offset: int | None = None) -> tuple[LogBatch, ...]:
        st = self.live
        if start_offset < st.start:
            raise ValueError(f"read at {start_offset} below the log start {st.start}")
        i = bisect.bisect_right(st.bases, start_offset) - 1
        if i < 0:
            i = 0
        out, size = [], 0
        for b in st.batches[i:]:
            if b.next_offset <= start_offset:
                continue
            if out and size + b.size_bytes() > max_bytes:
                break
            out.append(b)
            size += b.size_bytes()
        return tuple(out)

    def start_offset(self) -> int:
        return self.live.start

    def end_offset(self) -> int:
        return self.live.end

    def last_fetched_epoch(self) -> int:
        return self.live.batches[-1].epoch if self.live.batches else self.live.start_epoch

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        st = self.live
        if epoch < st.start_epoch:
            return OffsetAndEpoch(st.start, st.start_epoch)
        found = st.start_epoch
        for b in reversed(st.batches):  # epochs ascend along the log
            if b.epoch <= epoch:
                found = b.epoch
                break
        for b in st.batches:
            if b.epoch > found:
                return OffsetAndEpoch(b.base_offset, found)
        return OffsetAndEpoch(st.end, found)

    # -- truncation and start -------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        st = self.live
        if offset < st.start:
            raise ValueError(f"truncate to {offset} below the log start {st.start}")
        if offset >= st.end:
            return
        keep = []
        for b in st.batches:
            if b.next_offset <= offset:
                keep.append(b)
            elif b.base_offset < offset:
                keep.append(LogBatch(b.base_offset, b.epoch, b.records[: offset - b.base_offset], b.control))
        self.live = _LogState(keep, st.start, st.start_epoch)
        self._flushed = min(self._flushed, offset)
        self._only_appended = False

    def truncate_fully_and_start_at(self, offset: int, epoch: int) -> None:
        self.live = _LogState((), offset, epoch)
        self._flushed = min(self._flushed, offset)
        self._only_appended = False

    def delete_before(self, offset: int, epoch: int) -> bool:
        st = self.live
        if offset <= st.start or offset > st.end:
            return False
        keep = []
        for b in st.batches:
            if b.base_offset >= offset:
                keep.append(b)
            elif b.next_offset > offset:
                keep.append(LogBatch(offset, b.epoch, b.records[offset - b.base_offset:], b.control))
        self.live = _LogState(keep, offset, epoch)
        self._only_appended = False
        return True

    def update_high_watermark(self, offset: int) -> None:
        self._hw = offset

    def high_watermark(self) -> int:
        return self._hw

    def flush(self) -> None:
        if self.flush_error is not None:  # an injected fsync failure: nothing more is durable
            code, self.flush_error = self.flush_error, None
            raise OSError(code, f"injected flush failure ({errno.errorcode[code]})")
        self.durable = self.live.copy()
        self._flushed = self.live.end
        self._only_appended = True

    def last_flushed_offset(self) -> int:
        return self._flushed

    # -- simulator hooks --------------------------------------------------------------------------

    @property
    def durable_end(self) -> int:
        return self.durable.end

    def crash(self, rng, torn_tail: bool) -> None:
        """The node died: keep the durable copy, plus (torn_tail) some unflushed whole batches
        when everything since the flush was appends."""
        extra = []
        if torn_tail and self._only_appended and self.live.start == self.durable.start:
            tail = self.live.batches[len(self.durable.batches):]
            extra = tail[: rng.randrange(0, len(tail) + 1)]
        self.live = _LogState(self.durable.batches + extra, self.durable.start, self.durable.start_epoch)
        self.durable = self.live.copy()
        self._flushed = self.live.end
        self._hw = 0
        self._only_appended = True


class MemQuorumStore:
    """QuorumStateStore; asserts on every write that the persisted epoch never decreases and
    that a vote never changes within an epoch (simulator invariants)."""

    def __init__(self):
        self.state: ElectionState | None = None
        self.writes = 0
        self.write_error: int | None = None  # injected: the next write fails with this errno

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        if self.write_error is not None:  # the old state stays, as after a failed rename
            code, self.write_error = self.write_error, None
            raise OSError(code, f"injected quorum-state write failure ({errno.errorcode[code]})")
        old = self.state
        if old is not None:
            assert state.epoch >= old.epoch, f"persisted epoch went back from {old.epoch} to {state.epoch}"
            if state.epoch == old.epoch and old.voted_id != -1:
                assert state.voted_id == old.voted_id, f"vote changed in epoch {old.epoch}: {old} -> {state}"
        self.state = state
        self.writes += 1

    def clear(self) -> None:
        self.state = None


class MemSnapshotStore:
    """SnapshotStore; finished snapshots survive kills, partial ones do not."""

    def __init__(self):
        self.finished: dict[OffsetAndEpoch, bytes] = {}
        self.partial: dict[OffsetAndEpoch, bytearray] = {}

    def snapshot_ids(self):
        return sorted(self.finished)

    def latest_snapshot_id(self):
        return max(self.finished) if self.finished else None

    def size(self, snapshot_id):
        data = self.finished.get(snapshot_id)
        return None if data is None else len(data)

    def read_chunk(self, snapshot_id, position: int, max_bytes: int) -> bytes:
        return self.finished[snapshot_id][position: position + max_bytes]

    def write_chunk(self, snapshot_id, position: int, data: bytes) -> None:
        if position == 0:
            self.partial[snapshot_id] = bytearray()
        buf = self.partial[snapshot_id]
        if position != len(buf):
            raise ValueError(f"snapshot chunk at {position} but {len(buf)} bytes written")
        buf += data

    def finish(self, snapshot_id, size: int) -> None:
        buf = self.partial.pop(snapshot_id)
        if len(buf) != size:
            raise CorruptRecordError(f"snapshot {snapshot_id} has {len(buf)} bytes, expected {size}")
        self.finished[snapshot_id] = bytes(buf)

    def abort(self, snapshot_id) -> None:
        self.partial.pop(snapshot_id, None)

    def delete_before(self, snapshot_id) -> None:
        for sid in [s for s in self.finished if s.offset < snapshot_id.offset]:
            del self.finished[sid]

    def crash(self) -> None:
        self.partial.clear()
