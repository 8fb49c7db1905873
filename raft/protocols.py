"""The seams the core is given: clock, random numbers, the replicated log, the quorum-state
store, the snapshot store, the outbound channel and the listener.

Every side effect the protocol needs passes through one of these; the core itself never
touches a file, a socket or the wall clock. The engine's segmented log and LMDB snapshot store
satisfy ``ReplicatedLog`` and ``SnapshotStore`` structurally (they never import raft); the
simulator in tests/raft_sim/ satisfies all of them in memory.

Durability contract (the core relies on it; see raft/ready.py for the ordering):
    * ReplicatedLog appends and truncations change the log at once but are durable only after
      ``flush()``; ``last_flushed_offset()`` says how far. After a crash the log holds at least
      everything flushed and, beyond that, some prefix of what was appended later.
    * QuorumStateStore.write is durable and atomic when it returns (temp file, fsync, rename).
    * SnapshotStore.write_chunk/finish are durable when they return; a snapshot is visible in
      ``snapshot_ids()`` only after ``finish``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from kraftlog.raft.types import ElectionState, LogBatch, OffsetAndEpoch


class Clock(Protocol):
    """Monotonic milliseconds (the driver passes a real one; the simulator a fake one)."""

    def milliseconds(self) -> int: ...


class Rng(Protocol):
    """The subset of random.Random the core uses; seeded by the caller."""

    def randrange(self, start: int, stop: int) -> int: ...

    def getrandbits(self, k: int) -> int: ...


class LogAppendInfo(NamedTuple):
    first_offset: int
    last_offset: int


class ReplicatedLog(Protocol):
    """The log raft replicates, modelled on Kafka's raft ReplicatedLog.

    Offsets: ``start_offset() <= high_watermark() <= end_offset()`` is NOT promised (the
    high watermark is raft's to keep); ``start_offset() <= end_offset()`` always holds.
    Epochs: every batch has an epoch, and epochs never decrease along the log.
    """

    def append_as_leader(self, records: Sequence[bytes], epoch: int, *, control: bool = False) -> LogAppendInfo:
        """Append one batch at ``end_offset()`` with ``epoch`` (the leader's); return its
        offsets. Raises ValueError if ``epoch`` is below the log's last epoch."""
        ...

    def append_as_follower(self, batches: Sequence[LogBatch], epoch: int) -> LogAppendInfo:
        """Append batches fetched from the leader of ``epoch``; the first must start at
        ``end_offset()``, offsets must be contiguous and epochs must not exceed ``epoch``."""
        ...

    def read(self, start_offset: int, max_bytes: int, *, until_offset: int | None = None) -> tuple[LogBatch, ...]:
        """Whole batches from the one containing ``start_offset``, at least one if any exists,
        up to about ``max_bytes``. Empty at ``end_offset()``. Raises ValueError below
        ``start_offset()``. ``until_offset``: the caller needs no batch starting at or after it
        (a delivery up to the high watermark), so the read may stop there."""
        ...

    def start_offset(self) -> int: ...

    def end_offset(self) -> int: ...

    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch, or the start epoch (snapshot epoch, else 0) when empty."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """For the largest epoch E <= ``epoch`` known to the log (the start epoch counts, with
        the log start offset): (first offset of the next larger epoch, or end_offset(); E)."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop every record at ``offset`` and above. ``offset >= start_offset()``."""
        ...

    def truncate_fully_and_start_at(self, offset: int, epoch: int) -> None:
        """Drop everything; the log becomes empty with start = end = ``offset`` and start
        epoch ``epoch`` (after installing the snapshot (offset, epoch))."""
        ...

    def delete_before(self, offset: int, epoch: int) -> bool:
        """Advance the log start to ``offset`` (a snapshot (offset, epoch) covers what is
        dropped). False when ``offset`` is not above the current start or beyond the end."""
        ...

    def update_high_watermark(self, offset: int) -> None: ...

    def high_watermark(self) -> int: ...

    def flush(self) -> None: ...

    def last_flushed_offset(self) -> int: ...


class QuorumStateStore(Protocol):
    """Kafka's quorum-state file: the current ElectionState, written atomically."""

    def read(self) -> ElectionState | None: ...

    def write(self, state: ElectionState) -> None: ...

    def clear(self) -> None: ...


class SnapshotStore(Protocol):
    """Snapshots by id (end offset, epoch), readable and writable in chunks."""

    def snapshot_ids(self) -> Sequence[OffsetAndEpoch]:
        """Finished snapshots, ascending."""
        ...

    def latest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        """Byte size of a finished snapshot, None when there is no such snapshot."""
        ...

    def read_chunk(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes: ...

    def write_chunk(self, snapshot_id: OffsetAndEpoch, position: int, data: bytes) -> None:
        """Append to a snapshot being written; ``position`` must equal the bytes written so far
        (position 0 starts over)."""
        ...

    def finish(self, snapshot_id: OffsetAndEpoch, size: int) -> None:
        """Verify the written snapshot (it must be ``size`` bytes and whole) and make it
        visible. Raises kraftlog.errors.CorruptRecordError when it does not verify."""
        ...

    def abort(self, snapshot_id: OffsetAndEpoch) -> None:
        """Forget a partially written snapshot."""
        ...

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        """Delete finished snapshots older than ``snapshot_id``."""
        ...


class Channel(Protocol):
    """Outbound messages; delivery is best effort (the core retries)."""

    def send(self, envelope) -> None: ...


class Listener(Protocol):
    """The state machine fed by the log, called in log order."""

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, snapshots: SnapshotStore) -> None:
        """Replace all state with the snapshot; the next commit follows its end offset."""
        ...

    def handle_commit(self, batch: LogBatch) -> None:
        """One committed batch (data or control), offsets strictly increasing."""
        ...

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        """A new leader (or NO_ID for none) in ``epoch``. When the local node is the leader
        this comes only after every batch before the leader's first offset was committed."""
        ...
