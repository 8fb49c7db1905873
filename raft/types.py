"""Small values shared by every raft module: offsets with epochs, log batches, the persisted
election state, Kafka error codes and raft's typed errors.

Conventions (KIP-595): epochs start at 0 (no leader ever) and a candidate bumps by one, so the
first elected leader has epoch 1. An offset is the position of one record; a batch covers
``base_offset .. last_offset`` and every record in it carries the batch's epoch. ``NO_ID`` (-1)
stands for "no node" in ids, exactly as on Kafka's wire.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from kraftlog.errors import KraftlogError

NO_ID = -1  # "unknown leader" / "no vote" on the wire (LeaderId, VotedId = -1)
NO_EPOCH = -1  # "unknown epoch"; also the HighWatermark value of a leader that has none yet


class OffsetAndEpoch(NamedTuple):
    """An end offset (exclusive) with the epoch of the record just before it.

    Used for snapshot ids (Kafka's SnapshotId{EndOffset, Epoch}), DivergingEpoch
    {Epoch, EndOffset} and the answers of ReplicatedLog.end_offset_for_epoch.
    """

    offset: int
    epoch: int


@dataclass(frozen=True, slots=True)
class LogBatch:
    """One batch of the replicated log: what a Kafka record batch v2 carries for raft.

    ``records`` are opaque payloads (a record's value); ``control`` marks a control batch
    (LeaderChange, see raft/control.py). The driver maps one LogBatch to one record batch
    (baseOffset, partitionLeaderEpoch, attributes bit 5) and back.
    """

    base_offset: int
    epoch: int
    records: tuple[bytes, ...]
    control: bool = False

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)

    def size_bytes(self) -> int:
        """Bytes this batch counts against a fetch's max_bytes (payloads plus a fixed header)."""
        return BATCH_OVERHEAD_BYTES + sum(len(r) for r in self.records)


# What a batch costs against max_bytes beyond its payloads: the v2 header (61 bytes) plus a
# few bytes of per-record framing, rounded. Only used to bound fetch and snapshot sizes.
BATCH_OVERHEAD_BYTES = 64


@dataclass(frozen=True, slots=True)
class ElectionState:
    """What the quorum-state store keeps (Kafka's quorum-state file: leaderEpoch, leaderId,
    votedId, currentVoters).

    Invariants: within one epoch ``voted_id`` may go from NO_ID to a node but never change
    after, and ``leader_id`` may go from NO_ID to a node but never change after; the epoch
    never decreases. raft/state.py checks them on every transition.
    """

    epoch: int
    leader_id: int = NO_ID
    voted_id: int = NO_ID
    voters: frozenset[int] = frozenset()


class Errors(IntEnum):
    """Kafka error codes the raft protocol uses (numbers from Kafka's Errors table)."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    BROKER_NOT_AVAILABLE = 8
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    OFFSET_NOT_AVAILABLE = 78
    INCONSISTENT_VOTER_SET = 94
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    INCONSISTENT_CLUSTER_ID = 104


class RaftError(KraftlogError):
    """Base of raft's operating errors."""


class NotLeaderError(RaftError):
    """An operation that only the leader may do (append, create a leader snapshot, describe the
    quorum) was asked of a node that is not the leader right now."""

    def __init__(self, node_id: int, epoch: int, leader_id: int):
        super().__init__(f"node {node_id} is not the leader of epoch {epoch} (leader: {leader_id})")
        self.node_id, self.epoch, self.leader_id = node_id, epoch, leader_id


class InvalidSnapshotError(RaftError):
    """A snapshot was asked for at an offset that is not committed or not in the log."""


class IllegalTransitionError(AssertionError):
    """A state transition the table in raft/state.py does not allow: a bug, never an
    operating condition, so it is an AssertionError and fails loudly."""


class SafetyViolationError(AssertionError):
    """The protocol was asked to do something that would break Raft safety (truncate below
    the high watermark, two leaders in one epoch, change a vote): a bug, fails loudly."""


class ClientBatch(Sequence):
    """A Produce's one record batch that the leader appends as the client wrote it (base offset
    and partitionLeaderEpoch stamped by the log; neither is under the CRC) instead of unpacking
    its values and building a new batch: batch.pass_through_count says which batches qualify
    (build_batch_from_values' shape, CRC checked). A Sequence of the values, so the core, the
    driver's queue and a log that keeps values (the simulator's MemLog) take it as any proposal;
    the values are decoded only when one is asked for. ``raw`` is bytes (the log's zero-copy
    append path takes bytes only); ``len`` is the record count."""

    __slots__ = ("_values", "count", "raw")

    def __init__(self, raw: bytes, count: int):
        self.raw = raw
        self.count = count
        self._values: list[bytes] | None = None

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        if self._values is None:
            # imported here: raft.types stays free of the codec for the core's importers; the
            # values are only wanted by a log that keeps values (the simulator's MemLog)
            from kraftlog.engine.records.batch import iter_records
            self._values = [record.value for record in iter_records(self.raw)]
        return self._values[index]

    def __repr__(self) -> str:
        return f"ClientBatch({self.count} records, {len(self.raw)} bytes)"


def fast_frozen_init(cls):
    """Give a frozen, slotted dataclass an ``__init__`` that stores each field through its slot's
    descriptor (a C call) instead of the generated ``object.__setattr__(self, name, value)`` per
    field: the same signature, defaults and values, and the instance is as frozen after it.

    Raft's messages, envelopes and Readies are frozen values, and a commit makes ~30 of them
    across the three nodes (a Ready per poll, an Envelope per message, the Fetch requests and
    answers): the generated frozen ``__init__`` cost ~1.5 us for a Ready and ~3-8 us for a
    FetchResponse here, about half of that through the descriptors. The generated one stays as
    ``__dataclass_init__`` (tests/test_fast_init.py builds every decorated class both ways).
    Classes with ``__post_init__``, default factories or non-init fields are refused."""
    params = cls.__dataclass_params__
    if not params.frozen or "__slots__" not in cls.__dict__ or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: fast_frozen_init takes a frozen, slotted dataclass without __post_init__")
    namespace: dict = {}
    args, lines = [], []
    for f in dataclasses.fields(cls):
        if not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: fast_frozen_init takes plain positional fields only")
        namespace[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = f.default
            args.append(f"{f.name}=_default_{f.name}")
        lines.append(f"    _set_{f.name}(self, {f.name})")
    exec(f"def __init__(self, {', '.join(args)}):\n" + "\n".join(lines or ["    pass"]) + "\n", namespace)  # noqa: S102
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__, init.__annotations__ = cls.__init__.__doc__, dict(cls.__init__.__annotations__)
    cls.__dataclass_init__ = cls.__init__
    cls.__init__ = init
    return cls
