"""The topics and partitions image: column tables, hash indexes, and the delta that edits them.

Layout (all in copy-on-write chunks, see table.py):
    topics table     one row per topic ever created in this image's lifetime (until compaction):
                     id_hi/id_lo (Kafka's Uuid as two signed 64-bit halves), first_row and
                     partition_count (the topic's partitions are the contiguous partition rows
                     first_row .. first_row + partition_count - 1, partition p at first_row + p),
                     topic_epoch, live
    topic names      per topics chunk, a tuple of str (copied on write with its chunk)
    partitions table topic_row, partition_id (-1 = a hole: a partition id never created), leader,
                     leader_epoch, partition_epoch, leader_recovery_state, replicas, isr (list
                     columns), and sparse list columns removing_replicas, adding_replicas,
                     eligible_leader_replicas, last_known_elr, directories (indexes into
                     ``directory_ids``; empty = every replica's directory is MIGRATING, Kafka's
                     default)
    name index       name -> topic row (live topics only); id index: id -> topic row (live only)

Invariants:
- a partition row r is live iff topic_row[r] >= 0; rows of deleted topics and rows a topic moved
  away from (when it grew and had to relocate to the end of the table) have topic_row = -1;
- a live topic t owns exactly the rows first_row[t] .. first_row[t] + partition_count[t] - 1;
- KIP-232 topic epoch: the log offset of the last record that created the topic or one of its
  partitions (creation and expansion; a global counter: every later change has a higher offset). Deleting a topic needs no stored epoch,
  since any re-creation comes at a higher offset. Snapshots carry each topic's epoch in a tagged
  field of its TopicRecord (TOPIC_EPOCH_TAG); a snapshot without it gives its topics the
  snapshot's end offset.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from kraftlog.engine.image import index as hindex
from kraftlog.engine.image.table import CHUNK_MASK, CHUNK_SHIFT, Chunk, ChunkedTable, Column, TableWriter
from kraftlog.engine.records.metadata_columns import CHANGE_LIST_COUNTS
from kraftlog.errors import KraftlogError

NO_LEADER = -1
NO_LEADER_CHANGE = -2
MIGRATING_DIRECTORY = uuid.UUID(int=0)  # Kafka's DirectoryId.MIGRATING = Uuid(0, 0)
UNASSIGNED_DIRECTORY = uuid.UUID(int=1)  # Kafka's DirectoryId.UNASSIGNED = Uuid(0, 1): a new replica's
TOPIC_EPOCH_TAG = 10_000  # our tagged field on TopicRecord in snapshots; Kafka ignores unknown tags
# The tagged-field section of a TopicRecord carrying only our epoch: count 1 | uvarint(TOPIC_EPOCH_TAG)
# (10000 = 90 4e) | size 8 | the int64 epoch, big-endian. Plain (Kafka's) TopicRecords end with count 0.
TOPIC_EPOCH_TAGS_HEAD = bytes([1, 0x80 | (TOPIC_EPOCH_TAG & 0x7F), TOPIC_EPOCH_TAG >> 7, 8])
_EPOCH_TAIL_BYTES = len(TOPIC_EPOCH_TAGS_HEAD) + 8


def topic_epoch_tags(epoch: int) -> bytes:
    """The tagged-field section of a TopicRecord: our epoch, or none (a negative ``epoch``)."""
    return b"\x00" if epoch < 0 else TOPIC_EPOCH_TAGS_HEAD + epoch.to_bytes(8, "big", signed=True)


def topic_record_epochs(data: np.ndarray, value_pos: np.ndarray, value_len: np.ndarray, name_lengths: np.ndarray,
                        default: int) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised over TopicRecord v0 values in ``data`` (uint8): (epochs, other). A value is
    frame (1, 2, 0) | Name (uvarint length + 1, bytes) | TopicId (16) | tagged fields. epochs[i]
    is the tagged epoch where the tags are exactly ours, else ``default``; other[i] marks values
    whose tags are something else (the caller decodes those with the generic codec, or refuses)."""
    name_lengths = name_lengths.astype(np.int64)
    sizes = value_len.astype(np.int64)
    plain_size = 3 + np.where(name_lengths + 1 < 0x80, 1, 2) + name_lengths + 16 + 1
    epochs = np.full(len(sizes), default, dtype=np.int64)
    tagged = np.flatnonzero(sizes != plain_size)
    other = np.zeros(len(sizes), dtype=bool)
    if not len(tagged):
        return epochs, other
    long_enough = sizes[tagged] == plain_size[tagged] - 1 + _EPOCH_TAIL_BYTES
    ends = value_pos[tagged].astype(np.int64) + np.where(long_enough, sizes[tagged], _EPOCH_TAIL_BYTES)
    tails = data[ends[:, None] - _EPOCH_TAIL_BYTES + np.arange(_EPOCH_TAIL_BYTES)[None, :]]
    ours = long_enough & (tails[:, :4] == np.frombuffer(TOPIC_EPOCH_TAGS_HEAD, dtype=np.uint8)).all(axis=1)
    epochs[tagged[ours]] = np.ascontiguousarray(tails[ours, 4:]).view(">i8").ravel()
    other[tagged[~ours]] = True
    return epochs, other

_I32, _I64, _I8 = np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.int8)

TOPIC_COLUMNS = (
    Column("id_hi", _I64),
    Column("id_lo", _I64),
    Column("first_row", _I32, fill=-1),
    Column("partition_count", _I32),
    Column("topic_epoch", _I64, fill=-1),
    Column("live", np.dtype(np.bool_)),
)

LIST_FIELDS = ("replicas", "isr", "removing_replicas", "adding_replicas", "eligible_leader_replicas",
               "last_known_elr")
PARTITION_COLUMNS = (
    Column("topic_row", _I32, fill=-1),
    Column("partition_id", _I32, fill=-1),
    Column("leader", _I32, fill=NO_LEADER),
    Column("leader_epoch", _I32),
    Column("partition_epoch", _I32),
    Column("leader_recovery_state", _I8),
    Column("replicas", _I32, width=3),
    Column("isr", _I32, width=3),
    Column("removing_replicas", _I32, width=1, sparse=True),
    Column("adding_replicas", _I32, width=1, sparse=True),
    Column("eligible_leader_replicas", _I32, width=1, sparse=True),
    Column("last_known_elr", _I32, width=1, sparse=True),
    Column("directories", _I32, width=3, sparse=True),
)


class MetadataReplayError(KraftlogError):
    """A record that cannot apply to the image (e.g. a partition of an unknown topic)."""


def uuid_to_halves(value: uuid.UUID) -> tuple[int, int]:
    """Kafka's Uuid halves (most, least significant) as signed 64-bit integers."""
    n = value.int
    hi, lo = n >> 64, n & ((1 << 64) - 1)
    return (hi - (1 << 64) if hi >= 1 << 63 else hi), (lo - (1 << 64) if lo >= 1 << 63 else lo)


def halves_to_uuid(hi: int, lo: int) -> uuid.UUID:
    return uuid.UUID(int=((int(hi) & ((1 << 64) - 1)) << 64) | (int(lo) & ((1 << 64) - 1)))


class PartitionRegistration(NamedTuple):
    """One partition as the image holds it (built on lookup; the image itself stores columns).

    A NamedTuple because lookups build one per call: it is the cheapest immutable record. The
    topic id is kept as Kafka's two 64-bit halves and turned into a UUID only when asked for.
    """

    topic_id_halves: tuple[int, int]
    topic_name: str
    partition_id: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    leader_recovery_state: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    directories: tuple[uuid.UUID, ...] = ()  # empty: every replica's directory is MIGRATING
    topic_epoch: int = -1

    @property
    def topic_id(self) -> uuid.UUID:
        return halves_to_uuid(*self.topic_id_halves)


@dataclass(frozen=True, slots=True)
class TopicView:
    topic_id: uuid.UUID
    name: str
    partition_count: int
    topic_epoch: int


@dataclass(frozen=True)
class TopicsImage:
    topics: ChunkedTable
    names: tuple[tuple[str, ...], ...]
    partitions: ChunkedTable
    name_index: hindex.HashIndex
    id_index: hindex.HashIndex
    directory_ids: tuple[uuid.UUID, ...] = (MIGRATING_DIRECTORY,)
    live_topics: int = 0

    @classmethod
    def empty(cls) -> TopicsImage:
        return cls(ChunkedTable(TOPIC_COLUMNS), (), ChunkedTable(PARTITION_COLUMNS), hindex.HashIndex.empty(),
                   hindex.HashIndex.empty())

    # -- lookups -------------------------------------------------------------------------------
    def topic_name(self, row: int) -> str:
        return self.names[row >> CHUNK_SHIFT][row & CHUNK_MASK]

    def topic_row(self, name: str) -> int | None:
        for row in self.name_index.candidates(hindex.hash_name(name.encode())):
            if self.names[row >> CHUNK_SHIFT][row & CHUNK_MASK] == name:
                return row
        return None

    def topic_row_by_id(self, topic_id: uuid.UUID) -> int | None:
        hi, lo = uuid_to_halves(topic_id)
        h = int(hindex.hash_ids(np.array([hi], dtype=np.int64), np.array([lo], dtype=np.int64))[0])
        for row in self.id_index.candidates(h):
            if int(self.topics.get(row, "id_hi")) == hi and int(self.topics.get(row, "id_lo")) == lo:
                return row
        return None

    def topic(self, name: str) -> TopicView | None:
        row = self.topic_row(name)
        return None if row is None else self._topic_view(row)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicView | None:
        row = self.topic_row_by_id(topic_id)
        return None if row is None else self._topic_view(row)

    def _topic_view(self, row: int) -> TopicView:
        chunk, local = self.topics.chunk_of(row)
        a = chunk.arrays
        return TopicView(halves_to_uuid(a["id_hi"][local], a["id_lo"][local]), self.topic_name(row),
                         int(a["partition_count"][local]), int(a["topic_epoch"][local]))

    def partition(self, topic_name: str, partition_id: int) -> PartitionRegistration | None:
        """One partition by (topic name, partition id): the hot path, one native call (probe the name
        index, verify the name, read the topic row and the partition row)."""
        fields = _lookup_partition(self.name_index.spec, self.names, topic_name, self.topics.chunks,
                                   self.partitions.chunks, partition_id, self.directory_ids, _make_spec)
        return None if fields is None else _new_tuple(PartitionRegistration, fields)

    def partition_by_id(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        row = self.topic_row_by_id(topic_id)
        return None if row is None else self._partition_of(row, partition_id)

    def _partition_of(self, topic_row: int, partition_id: int) -> PartitionRegistration | None:
        topic = hindex.read_row(_topic_spec(self.topics.chunks[topic_row >> CHUNK_SHIFT]), topic_row & CHUNK_MASK)
        if not 0 <= partition_id < topic[4]:
            return None
        return self._registration(topic[3] + partition_id, topic, self.topic_name(topic_row))

    def registration(self, prow: int) -> PartitionRegistration | None:
        """The partition at partition row ``prow``, or None for a dead row or a hole."""
        if not 0 <= prow < self.partitions.rows:
            raise IndexError(f"partition row {prow} out of range")
        topic_row = hindex.read_row(_partition_spec(self.partitions.chunks[prow >> CHUNK_SHIFT]), prow & CHUNK_MASK)[0]
        if topic_row < 0:
            return None
        topic = hindex.read_row(_topic_spec(self.topics.chunks[topic_row >> CHUNK_SHIFT]), topic_row & CHUNK_MASK)
        return self._registration(prow, topic, self.topic_name(topic_row))

    def _registration(self, prow: int, topic: tuple, name: str) -> PartitionRegistration | None:
        """Build the registration of ``prow`` given its topic's row values (id_hi, id_lo, epoch, ...)."""
        v = hindex.read_row(_partition_spec(self.partitions.chunks[prow >> CHUNK_SHIFT]), prow & CHUNK_MASK)
        # v: topic_row, partition_id, leader, leader_epoch, partition_epoch, leader_recovery_state,
        #    replicas, isr, removing, adding, elr, last_known_elr, directory codes
        if v[0] < 0 or v[1] < 0:
            return None
        directories = tuple(self.directory_ids[i] for i in v[12]) if v[12] else ()
        # tuple.__new__ skips the NamedTuple's generated __new__ (a third of a lookup); the field
        # order is PartitionRegistration's.
        return _new_tuple(PartitionRegistration, ((topic[0], topic[1]), name, v[1], v[2], v[3], v[4], v[5], v[6],
                                                  v[7], v[8], v[9], v[10], v[11], directories, topic[2]))

    def topic_names(self) -> Iterator[str]:
        """Names of live topics, in topic-row order."""
        live = self.topics.column("live")
        for row in np.flatnonzero(live):
            yield self.topic_name(int(row))

    def partitions_of(self, topic_name: str) -> list[PartitionRegistration]:
        row = self.topic_row(topic_name)
        if row is None:
            return []
        count = int(self.topics.get(row, "partition_count"))
        first = int(self.topics.get(row, "first_row"))
        return [r for r in (self.registration(first + p) for p in range(count)) if r is not None]

    def live_partition_rows(self) -> np.ndarray:
        topic_rows = self.partitions.column("topic_row")
        pids = self.partitions.column("partition_id")
        return np.flatnonzero((topic_rows >= 0) & (pids >= 0))

    @property
    def partition_count(self) -> int:
        return len(self.live_partition_rows())

    def nbytes(self) -> int:
        seen: set[int] = set()
        names = sum(len(n) + 57 for chunk in self.names for n in chunk)  # str objects, approximately
        return (self.topics.nbytes(seen) + self.partitions.nbytes(seen) + names
                + self.name_index.nbytes + self.id_index.nbytes)

    def delta(self) -> TopicsDelta:
        return TopicsDelta(self)


_new_tuple = tuple.__new__
_read_row = hindex.read_row
_hash_name = hindex.hash_name
_candidates = hindex.candidates_raw
_lookup_partition = hindex.lookup_partition
assert CHUNK_SHIFT == 12, "lookup_partition (csrc/_image.pyx) addresses rows in chunks of 4096"


def _make_spec(chunk, kind: int) -> tuple:
    return _topic_spec(chunk) if kind == 0 else _partition_spec(chunk)

# the columns a PartitionChangeRecord writes, in the order apply_changes (csrc/_image.pyx) takes them
_CHANGED_COLUMNS = ("partition_epoch", "leader_epoch", "leader", "leader_recovery_state", *LIST_FIELDS)
_SCALARS = ("topic_row", "partition_id", "leader", "leader_epoch", "partition_epoch", "leader_recovery_state")
_LISTS = ("replicas", "isr", "removing_replicas", "adding_replicas", "eligible_leader_replicas", "last_known_elr",
          "directories")


def _partition_spec(chunk: Chunk) -> tuple:
    """Row-reader spec of a published partitions chunk (made once, kept on the chunk)."""
    spec = chunk.spec
    if spec is None:
        spec = chunk.spec = hindex.row_spec([chunk.arrays[n] for n in _SCALARS], [chunk.arrays[n] for n in _LISTS])
    return spec


def _topic_spec(chunk: Chunk) -> tuple:
    spec = chunk.spec
    if spec is None:
        spec = chunk.spec = hindex.row_spec(
            [chunk.arrays[n] for n in ("id_hi", "id_lo", "topic_epoch", "first_row", "partition_count")], [])
    return spec


class TopicsChanges:
    """What a delta really changed, kept compact: topic and partition rows are append-only, so
    every row at or past the base image's row counts was made by this delta; older partition rows
    it wrote are listed as arrays. Resolved against the new image on demand."""

    def __init__(self, base_topic_rows: int, base_partition_rows: int):
        self.base_topic_rows = base_topic_rows
        self.base_partition_rows = base_partition_rows
        self.topic_rows = base_topic_rows  # rows made by this delta: [base_topic_rows, topic_rows)
        self.partition_rows = base_partition_rows
        self.old_rows_written: list[np.ndarray] = []
        self.deleted_topics: dict[uuid.UUID, str] = {}  # existed in the base image, deleted here

    def __bool__(self) -> bool:
        return (self.topic_rows > self.base_topic_rows or self.partition_rows > self.base_partition_rows
                or bool(self.old_rows_written) or bool(self.deleted_topics))

    def wrote(self, rows) -> None:
        rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        old = rows[rows < self.base_partition_rows]
        if len(old):
            self.old_rows_written.append(old)

    def created_topics(self, image: TopicsImage) -> set[uuid.UUID]:
        """Ids of topics this delta created that are still live in ``image``."""
        rows = np.arange(self.base_topic_rows, self.topic_rows)
        live = rows[image.topics.gather(rows, "live")] if len(rows) else rows
        hi, lo = image.topics.gather(live, "id_hi"), image.topics.gather(live, "id_lo")
        return {halves_to_uuid(a, b) for a, b in zip(hi.tolist(), lo.tolist(), strict=True)}

    def changed_partition_rows(self, image: TopicsImage) -> np.ndarray:
        """Live partition rows of ``image`` this delta created or wrote, sorted."""
        rows = np.concatenate([np.arange(self.base_partition_rows, self.partition_rows, dtype=np.int64),
                               *self.old_rows_written])
        rows = np.unique(rows)
        if not len(rows):
            return rows
        keep = (image.partitions.gather(rows, "topic_row") >= 0) & (image.partitions.gather(rows, "partition_id") >= 0)
        return rows[keep]


FEW_DISTINCT_IDS = 32  # up to this many distinct ids, distinct_ids compares instead of sorting


def distinct_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct rows of ``ids`` (uint8 [n, 16], contiguous) in order of first appearance,
    for each row the index of its distinct row). A CreateTopics' directories are a few ids (one
    per broker) repeated thousands of times: one vectorised comparison per distinct id costs a
    fifth of the sort np.unique does on 16-byte voids (which was a quarter of a standby
    controller's CPU replaying CreateTopics). Past FEW_DISTINCT_IDS (a cluster of many log
    dirs), a sort after all."""
    halves = ids.view(np.uint64).reshape(-1, 2)
    hi, lo = halves[:, 0], halves[:, 1]
    which = np.full(len(ids), -1, np.int64)
    firsts: list[int] = []
    row = 0
    while row >= 0:
        if len(firsts) == FEW_DISTINCT_IDS:
            distinct, inverse = np.unique(ids.view(np.dtype((np.void, 16))).ravel(), return_inverse=True)
            return distinct.view(np.uint8).reshape(-1, 16), inverse.ravel()
        which[(hi == hi[row]) & (lo == lo[row])] = len(firsts)
        firsts.append(row)
        todo = which < 0
        row = int(todo.argmax()) if todo.any() else -1
    return ids[firsts], which


class TopicsDelta:
    """Edits a TopicsImage in replay order; ``apply()`` returns the next image (sharing chunks)."""

    def __init__(self, base: TopicsImage):
        self.base = base
        self.topics: TableWriter = base.topics.writer()
        self.partitions: TableWriter = base.partitions.writer()
        self._names = list(base.names)
        self._name_index: hindex.HashIndex | None = None
        self._id_index: hindex.HashIndex | None = None
        self.directory_ids = list(base.directory_ids)
        self._directory_index = {d: i for i, d in enumerate(self.directory_ids)}
        self.live_topics = base.live_topics
        self.changes = TopicsChanges(base.topics.rows, base.partitions.rows)

    # -- indexes, copied on first write ---------------------------------------------------------
    @property
    def name_index(self) -> hindex.HashIndex:
        if self._name_index is None:
            self._name_index = self.base.name_index.mutable_copy()
        return self._name_index

    @property
    def id_index(self) -> hindex.HashIndex:
        if self._id_index is None:
            self._id_index = self.base.id_index.mutable_copy()
        return self._id_index

    def _index_view(self, which: str) -> hindex.HashIndex:
        own = self._name_index if which == "name" else self._id_index
        return own if own is not None else (self.base.name_index if which == "name" else self.base.id_index)

    def topic_name(self, row: int) -> str:
        return self._names[row >> CHUNK_SHIFT][row & CHUNK_MASK]

    def topic_row(self, name: str) -> int | None:
        for row in self._index_view("name").candidates(hindex.hash_name(name.encode())):
            if self.topic_name(row) == name:
                return row
        return None

    def topic_row_by_id(self, topic_id: uuid.UUID) -> int | None:
        hi, lo = uuid_to_halves(topic_id)
        for row in self._index_view("id").candidates(_id_hash(hi, lo)):
            if int(self.topics.get(row, "id_hi")) == hi and int(self.topics.get(row, "id_lo")) == lo:
                return row
        return None

    def _require_topic(self, topic_id: uuid.UUID, what: str) -> int:
        row = self.topic_row_by_id(topic_id)
        if row is None:
            raise MetadataReplayError(f"{what} for unknown topic id {topic_id}")
        return row

    # -- names, copied per chunk ------------------------------------------------------------------
    def _append_name(self, row: int, name: str) -> None:
        self._append_names(row, [name])

    def _append_names(self, first_row: int, names: Sequence[str]) -> None:
        """Names of topic rows first_row.. (appended in order); each chunk's tuple is rebuilt once."""
        done = 0
        while done < len(names):
            row = first_row + done
            chunk_index, local = row >> CHUNK_SHIFT, row & CHUNK_MASK
            take = min(len(names) - done, (1 << CHUNK_SHIFT) - local)
            part = tuple(names[done:done + take])
            if chunk_index == len(self._names):
                self._names.append(part)
            else:
                self._names[chunk_index] = self._names[chunk_index] + part
            done += take

    # -- scalar replay ----------------------------------------------------------------------------
    def replay_topic(self, topic_id: uuid.UUID, name: str, topic_epoch: int) -> None:
        """TopicRecord: create a topic (its partitions follow as PartitionRecords)."""
        existing = self.topic_row(name)
        if existing is not None:
            if self.topic_row_by_id(topic_id) == existing:
                return  # the same topic again: nothing changes
            raise MetadataReplayError(f"topic {name!r} already exists with another id")
        if self.topic_row_by_id(topic_id) is not None:
            raise MetadataReplayError(f"topic id {topic_id} already exists under another name")
        hi, lo = uuid_to_halves(topic_id)
        row = self.topics.append({"id_hi": [hi], "id_lo": [lo], "first_row": [-1], "partition_count": [0],
                                  "topic_epoch": [topic_epoch], "live": [True]})
        self._append_name(row, name)
        self.name_index.insert(hindex.hash_name(name.encode()), row)
        self.id_index.insert(_id_hash(hi, lo), row)
        self.live_topics += 1
        self.changes.topic_rows = self.topics.rows

    def replay_remove_topic(self, topic_id: uuid.UUID) -> str:
        """RemoveTopicRecord: the topic and all its partitions go; returns its name (the caller
        drops the name's configs, as Kafka's MetadataDelta does)."""
        row = self._require_topic(topic_id, "RemoveTopicRecord")
        name = self.topic_name(row)
        first, count = int(self.topics.get(row, "first_row")), int(self.topics.get(row, "partition_count"))
        if count:
            rows = np.arange(first, first + count, dtype=np.int64)
            self.partitions.set_many(rows, "topic_row", np.full(count, -1, dtype=np.int32))
        self.topics.set(row, "live", False)
        hi, lo = uuid_to_halves(topic_id)
        self.name_index.remove(hindex.hash_name(name.encode()), row)
        self.id_index.remove(_id_hash(hi, lo), row)
        self.live_topics -= 1
        if row < self.changes.base_topic_rows:  # else created and deleted within this delta: no trace
            self.changes.deleted_topics[topic_id] = name
        return name

    def replay_partition(self, topic_id: uuid.UUID, partition_id: int, *, replicas: Sequence[int],
                         isr: Sequence[int], leader: int, leader_epoch: int, partition_epoch: int,
                         leader_recovery_state: int = 0, removing_replicas: Sequence[int] = (),
                         adding_replicas: Sequence[int] = (), directories: Sequence[uuid.UUID] = (),
                         eligible_leader_replicas: Sequence[int] | None = None,
                         last_known_elr: Sequence[int] | None = None, topic_epoch: int | None = None) -> None:
        """PartitionRecord: create (or replace) one partition. A new partition id moves the topic
        epoch to ``topic_epoch`` when given (None when loading a snapshot: epochs come with topics)."""
        if partition_id < 0:
            raise MetadataReplayError(f"PartitionRecord with negative partition id {partition_id}")
        trow = self._require_topic(topic_id, "PartitionRecord")
        prow = self._partition_row_for(trow, partition_id, topic_epoch)
        p = self.partitions
        p.set(prow, "topic_row", trow)
        p.set(prow, "partition_id", partition_id)
        p.set(prow, "leader", leader)
        p.set(prow, "leader_epoch", leader_epoch)
        p.set(prow, "partition_epoch", partition_epoch)
        p.set(prow, "leader_recovery_state", leader_recovery_state)
        for name, values in (("replicas", replicas), ("isr", isr), ("removing_replicas", removing_replicas),
                             ("adding_replicas", adding_replicas),
                             ("eligible_leader_replicas", eligible_leader_replicas or ()),
                             ("last_known_elr", last_known_elr or ())):
            self._set_list(prow, name, values)
        self._set_directories(prow, directories, len(replicas))
        self.changes.wrote(prow)

    def _set_list(self, prow: int, name: str, values: Sequence[int]) -> None:
        if values or not _is_default_list(self.partitions, prow, name):
            self.partitions.set_list(prow, name, list(values))

    def _set_directories(self, prow: int, directories: Sequence[uuid.UUID], replica_count: int) -> None:
        if not directories or all(d == MIGRATING_DIRECTORY for d in directories):
            self._set_list(prow, "directories", ())
            return
        if len(directories) != replica_count:
            raise MetadataReplayError("the lengths of replicas and directories do not match")
        self.partitions.set_list(prow, "directories", [self._directory_code(d) for d in directories])

    def _directory_codes(self, directories: np.ndarray | None, counts: np.ndarray | None) -> np.ndarray | None:
        """Directory ids (uint8 [n, W*16], the first counts[r] of row r) as codes into
        ``directory_ids`` (int32 [n, W], -1 padded: a row without any is stored empty, as
        _set_directories stores an all-MIGRATING list); None when no row has any."""
        if directories is None or counts is None or not counts.any():
            return None
        width = directories.shape[1] // 16
        if (counts == width).all():  # every replica has its directory (a CreateTopics): no gather
            distinct, which = distinct_ids(np.ascontiguousarray(directories).reshape(-1, 16))
            return self._codes_of(distinct)[which].reshape(len(counts), width)
        present = np.arange(width)[None, :] < counts[:, None].astype(np.int64)
        distinct, which = distinct_ids(np.ascontiguousarray(directories.reshape(len(counts), width, 16)[present]))
        codes = np.full((len(counts), width), -1, np.int32)
        codes[present] = self._codes_of(distinct)[which]
        return codes

    def _codes_of(self, distinct: np.ndarray) -> np.ndarray:
        return np.array([self._directory_code(uuid.UUID(bytes=d.tobytes())) for d in distinct], np.int32)

    def _directory_code(self, directory: uuid.UUID) -> int:
        code = self._directory_index.get(directory)
        if code is None:
            code = len(self.directory_ids)
            self.directory_ids.append(directory)
            self._directory_index[directory] = code
        return code

    def _partition_row_for(self, trow: int, partition_id: int, topic_epoch: int | None) -> int:
        """The row of (topic, partition id), growing the topic's run when the id is new."""
        first, count = int(self.topics.get(trow, "first_row")), int(self.topics.get(trow, "partition_count"))
        if partition_id < count:
            prow = first + partition_id
            if topic_epoch is not None and int(self.partitions.get(prow, "partition_id")) < 0:
                # a hole left by a higher id that came first: this record creates the partition
                # (as the bulk path, which sorts a creation's partitions, counts it)
                self.topics.set(trow, "topic_epoch", topic_epoch)
            return prow
        new_count = partition_id + 1
        at_end = count == 0 or first + count == self.partitions.rows
        if at_end:
            start = self.partitions.rows if count == 0 else first
            grow = new_count - count
            self.partitions.append({"topic_row": np.full(grow, trow, dtype=np.int32),
                                    "partition_id": np.full(grow, -1, dtype=np.int32)})
            self.changes.partition_rows = self.partitions.rows
        else:
            start = self._relocate(trow, first, count, new_count)
        self.topics.set(trow, "first_row", start)
        self.topics.set(trow, "partition_count", new_count)
        if topic_epoch is not None:
            self.topics.set(trow, "topic_epoch", topic_epoch)  # a new partition (KIP-232)
        return start + partition_id

    def _relocate(self, trow: int, first: int, count: int, new_count: int) -> int:
        """Move a topic's rows to the end of the table (with room for new ids); old rows die."""
        old_rows = np.arange(first, first + count, dtype=np.int64)
        moved = {c: self._gather_partitions(old_rows, c) for c in self.partitions.columns}
        grow = new_count - count
        for name, values in moved.items():
            if values.ndim == 2:
                pad = np.full((grow, values.shape[1]), -1, dtype=values.dtype)
            else:
                pad = np.full(grow, -1 if name == "partition_id" else 0, dtype=values.dtype)
                if name == "topic_row":
                    pad[:] = trow
            moved[name] = np.concatenate([values, pad])
        start = self.partitions.append(moved)
        self.partitions.set_many(old_rows, "topic_row", np.full(count, -1, dtype=np.int32))
        self.changes.partition_rows = self.partitions.rows
        return start

    def replay_partition_change(self, topic_id: uuid.UUID, partition_id: int, *, leader: int = NO_LEADER_CHANGE,
                                isr: Sequence[int] | None = None, replicas: Sequence[int] | None = None,
                                removing_replicas: Sequence[int] | None = None,
                                adding_replicas: Sequence[int] | None = None, leader_recovery_state: int = -1,
                                directories: Sequence[uuid.UUID] | None = None,
                                eligible_leader_replicas: Sequence[int] | None = None,
                                last_known_elr: Sequence[int] | None = None) -> None:
        """PartitionChangeRecord, merged the way Kafka's PartitionRegistration.merge does: null lists
        and -2 / -1 markers mean unchanged; a leader change bumps the leader epoch; the partition
        epoch always moves by one."""
        trow = self._require_topic(topic_id, "PartitionChangeRecord")
        count = int(self.topics.get(trow, "partition_count"))
        first = int(self.topics.get(trow, "first_row"))
        prow = first + partition_id
        if not 0 <= partition_id < count or int(self.partitions.get(prow, "partition_id")) < 0:
            raise MetadataReplayError(f"PartitionChangeRecord for unknown partition {topic_id}:{partition_id}")
        p = self.partitions
        old_replicas = p.get_list(prow, "replicas")
        for name, values in (("replicas", replicas), ("isr", isr), ("removing_replicas", removing_replicas),
                             ("adding_replicas", adding_replicas),
                             ("eligible_leader_replicas", eligible_leader_replicas),
                             ("last_known_elr", last_known_elr)):
            if values is not None:
                self._set_list(prow, name, values)
        if directories:
            self._set_directories(prow, directories, len(replicas if replicas is not None else old_replicas))
        elif replicas is not None:
            self._carry_directories(prow, old_replicas, replicas)
        if leader != NO_LEADER_CHANGE:
            p.set(prow, "leader", leader)
            p.set(prow, "leader_epoch", int(p.get(prow, "leader_epoch")) + 1)
        if leader_recovery_state != -1:
            p.set(prow, "leader_recovery_state", leader_recovery_state)
        p.set(prow, "partition_epoch", int(p.get(prow, "partition_epoch")) + 1)
        self.changes.wrote(prow)

    def _carry_directories(self, prow: int, old_replicas: Sequence[int], new_replicas: Sequence[int]) -> None:
        """Replicas changed without directories: a kept replica keeps its directory, a new one gets
        UNASSIGNED (Kafka's DirectoryId.createDirectoriesFrom)."""
        codes = self.partitions.get_list(prow, "directories")
        if not codes and set(new_replicas) <= set(old_replicas):
            return  # all MIGRATING before and no new replica: all MIGRATING still (stored as empty)
        dirs = [self.directory_ids[c] for c in codes] if codes else [MIGRATING_DIRECTORY] * len(old_replicas)
        old = dict(zip(old_replicas, dirs, strict=False))
        self._set_directories(prow, [old.get(r, UNASSIGNED_DIRECTORY) for r in new_replicas], len(new_replicas))

    # -- vectorised replay -----------------------------------------------------------------------
    def topic_id_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """id_hi, id_lo of every topic row as seen by this delta (for bulk id lookups)."""
        view = self.topics.view()
        return view.column("id_hi"), view.column("id_lo")

    def bulk_create(self, *, id_hi: np.ndarray, id_lo: np.ndarray, names: Sequence[str], name_hashes: np.ndarray,
                    topic_epochs: np.ndarray, partitions: dict[str, np.ndarray],
                    partition_epochs: np.ndarray | None = None) -> bool:
        """TopicRecords followed by their PartitionRecords, in the shape snapshots and CreateTopics
        write them, applied as whole columns. ``partitions`` holds topic_hi, topic_lo,
        partition_id, leader, leader_epoch, partition_epoch, leader_recovery_state and the 2-D
        replicas / isr arrays (-1 padded), and optionally directories (uint8 [n, W*16], the
        replicas' directory ids) with directory_count (0: none, all MIGRATING). Returns False,
        changing nothing, when the input is not in that shape (an existing or repeated topic, a
        partition of another topic, a duplicate or missing partition id); the caller then
        replays record by record. ``partition_epochs``
        (aligned with the partitions; log replay: their offsets) raise each topic's epoch to its
        last new partition, as the scalar path does."""
        count = len(id_hi)
        if count == 0:
            return False
        ordered = np.sort(name_hashes)
        if (ordered[1:] == ordered[:-1]).any():
            return False  # a repeated name (or a 64-bit hash collision): the scalar path decides
        if not self._all_new(id_hi, id_lo, names, name_hashes):
            return False
        local = hindex.HashIndex.build(hindex.hash_ids(id_hi, id_lo), np.arange(count, dtype=np.int32))
        owner = local.lookup_ids(id_hi, id_lo, partitions["topic_hi"], partitions["topic_lo"])
        if len(owner) and owner.min() < 0:
            return False
        pids = partitions["partition_id"]
        if partition_epochs is not None and len(owner):
            topic_epochs = np.array(topic_epochs, dtype=np.int64, copy=True)
            np.maximum.at(topic_epochs, owner, partition_epochs.astype(np.int64))
        if not _in_topic_order(owner, pids):  # snapshots and CreateTopics write them in order
            order = np.lexsort((pids, owner))
            owner, pids = owner[order], pids[order]
            partitions = {k: v[order] for k, v in partitions.items()}
            if not _in_topic_order(owner, pids):
                return False  # a repeated partition id
        per_topic = np.bincount(owner, minlength=count).astype(np.int32)
        starts = np.concatenate([[0], np.cumsum(per_topic)[:-1]]).astype(np.int64)
        if not _dense_partition_ids(pids, per_topic, starts):
            return False  # duplicate or missing partition ids
        first_topic_row = self.topics.rows
        base_prow = self.partitions.rows
        first_row = np.where(per_topic > 0, base_prow + starts, -1).astype(np.int32)
        self.topics.append({"id_hi": id_hi, "id_lo": id_lo, "first_row": first_row,
                            "partition_count": per_topic, "topic_epoch": topic_epochs,
                            "live": np.ones(count, dtype=np.bool_)})
        self._append_names(first_topic_row, names)
        topic_rows = np.arange(first_topic_row, first_topic_row + count, dtype=np.int32)
        self.name_index.insert_many(name_hashes, topic_rows)
        self.id_index.insert_many(hindex.hash_ids(id_hi, id_lo), topic_rows)
        directories = self._directory_codes(partitions.get("directories"), partitions.get("directory_count"))
        self.partitions.append({
            "topic_row": (owner + first_topic_row).astype(np.int32),
            **{k: partitions[k] for k in ("partition_id", "leader", "leader_epoch", "partition_epoch",
                                          "leader_recovery_state", "replicas", "isr")},
            **({} if directories is None else {"directories": directories}),
        })
        self.live_topics += count
        self.changes.topic_rows = self.topics.rows
        self.changes.partition_rows = self.partitions.rows
        return True

    def _all_new(self, id_hi: np.ndarray, id_lo: np.ndarray, names: Sequence[str], name_hashes: np.ndarray) -> bool:
        if self.topics.rows == 0:
            return True
        hi, lo = self.topic_id_columns()
        if (self._index_view("id").lookup_ids(hi, lo, id_hi, id_lo) >= 0).any():
            return False
        maybe = np.flatnonzero(self._index_view("name").first_candidates(name_hashes) >= 0)
        return all(self.topic_row(names[i]) is None for i in maybe)

    @staticmethod
    def stream_tables(cols) -> tuple:
        """The decoded region's tables as apply_stream takes them (built once per region): the
        partition_changes, configs, remove_topics, topics and partitions tables' columns."""
        changes, g, removes, topics, parts = (cols.partition_changes, cols.configs, cols.remove_topics, cols.topics,
                                              cols.partitions)
        return (
            (_CHANGED_COLUMNS, changes.record_index, changes.topic_id.view(np.int64), changes.partition_id,
             changes.leader, changes.leader_recovery_state, tuple(getattr(changes, name) for name in LIST_FIELDS),
             tuple(getattr(changes, CHANGE_LIST_COUNTS[name]) for name in LIST_FIELDS), changes.extras.view(np.uint8)),
            (g.record_index, g.resource_type, g.value_null.view(np.uint8), g.extras.view(np.uint8),
             np.frombuffer(g.config_blob, np.uint8), g.resource_name_offsets, g.name_offsets, g.value_offsets),
            (removes.record_index, removes.topic_id.view(np.int64), removes.extras.view(np.uint8)),
            (topics.record_index, topics.topic_id.view(np.int64), topics.extras.view(np.uint8),
             np.frombuffer(topics.name_blob, np.uint8), topics.name_offsets),
            (parts.record_index, parts.topic_id.view(np.int64), parts.partition_id, parts.leader, parts.leader_epoch,
             parts.partition_epoch, parts.leader_recovery_state, parts.replicas, parts.replica_count, parts.isr,
             parts.isr_count, parts.directory_count, parts.extras.view(np.uint8)))

    def apply_stream(self, tables: tuple, configs, api_keys: np.ndarray, kind_rows: np.ndarray, order: np.ndarray,
                     start: int, *, offsets: np.ndarray | None, bulk_min_records: int) -> tuple[int, bool, bool]:
        """The topic stream of a decoded region (record indexes ``order[start:]``, in log order;
        ``tables``: its stream_tables) applied in one native pass: PartitionChangeRecords
        (apply_changes in csrc/_image.pyx), ConfigRecords, RemoveTopicRecords, TopicRecords and PartitionRecords the
        columns hold whole, until the first record the pass does not apply (see
        apply_topic_stream in csrc/_image.pyx: one with extras, one that would fail, a creation of
        ``bulk_min_records`` records or more, a shape left to the scalar path). ``configs``: the
        MetadataDelta's configs, which a ConfigRecord edits and a RemoveTopicRecord drops its
        topic's of. ``offsets``: the records' offsets (their KIP-232 epochs), None when loading a
        snapshot (its creations are left to bulk_create). Returns (where it stopped in ``order``,
        whether the topics changed, whether the configs changed)."""
        p, t = self.partitions, self.topics
        if len(tables[2][0]) or (offsets is not None and len(tables[3][0])):
            names, ids = self.name_index, self.id_index  # the pass writes them: the delta's copies, made now
        else:
            names, ids = self._index_view("name"), self._index_view("id")
        target = (p.chunk_arrays, t.chunk_arrays, p.owned_arrays, p.own_column, t.owned_arrays, t.own_column,
                  p.native_room, t.native_room, p.native_appended, t.native_appended, p.rows, t.rows, self._names,
                  names, ids, self.changes.base_topic_rows,
                  self.changes.deleted_topics, offsets, bulk_min_records)
        written = np.empty(len(order) - start, np.int64)
        stop, count, removed, created, grown, configs_changed = hindex.apply_topic_stream(
            target, *tables, configs, api_keys, kind_rows, order, start, written, CHUNK_SHIFT)
        if count:
            self.changes.wrote(written[:count])
        self.live_topics += created - removed
        self.changes.topic_rows, self.changes.partition_rows = t.rows, p.rows
        return stop, bool(count or removed or created or grown), configs_changed

    def _gather_partitions(self, rows: np.ndarray, name: str) -> np.ndarray:
        return self.partitions.view().gather(rows, name)

    # -- apply ----------------------------------------------------------------------------------
    def apply(self) -> TopicsImage:
        base = self.base
        return TopicsImage(
            topics=self.topics.freeze(),
            names=tuple(self._names),
            partitions=self.partitions.freeze(),
            name_index=self._name_index.freeze() if self._name_index is not None else base.name_index,
            id_index=self._id_index.freeze() if self._id_index is not None else base.id_index,
            directory_ids=tuple(self.directory_ids),
            live_topics=self.live_topics,
        )


def _in_topic_order(owner: np.ndarray, pids: np.ndarray) -> bool:
    """True when the partitions are sorted by (owner, partition id), no pair repeated, where the
    lexsort it spares costs ~25 ms at 1M partitions. On the int32 columns as they are (64-bit
    keys would be four 8 MB temporaries)."""
    if len(owner) < 2:
        return True
    next_owner = np.diff(owner)
    return bool(((next_owner > 0) | ((next_owner == 0) & (pids[1:] > pids[:-1]))).all())


def _dense_partition_ids(pids: np.ndarray, per_topic: np.ndarray, starts: np.ndarray) -> bool:
    """True when each topic's partitions, in strictly rising (owner, id) order (_in_topic_order),
    have ids exactly 0..count-1: then it is enough that the first id per topic is 0 and the last
    count - 1. Checked on the topics' ends, not against a per-partition expectation (two 1M-row
    temporaries, ~25 ms of fresh pages at 1M partitions)."""
    if not len(pids):
        return True
    has = per_topic > 0
    first, counts = starts[has], per_topic[has]
    return bool((pids[first] == 0).all() and (pids[first + counts - 1] == counts - 1).all())


def _is_default_list(writer: TableWriter, prow: int, name: str) -> bool:
    return not writer.get_list(prow, name)


def _id_hash(hi: int, lo: int) -> int:
    return int(hindex.hash_ids(np.array([hi], dtype=np.int64), np.array([lo], dtype=np.int64))[0])
