"""The production-shaped workload: the reference base (workload.py) plus a tail that looks like a
real controller's log over time, in the batches a controller writes (one batch per controller
event, split at CONTROLLER_MAX_RECORDS_PER_BATCH records).

Simulated time runs from ``start_ms``; the tail ends when it holds ``tail_bytes`` of batches
(Kafka snapshots after metadata.log.max.record.bytes.between.snapshots, 20 MiB) or when
``duration_ms`` has passed (metadata.log.max.snapshot.interval.ms, 1 h), whichever comes first.
Events on the clock:

    every 500 ms      NoOpRecord (metadata.max.idle.interval.ms), a batch of its own
    rolling restart   one broker after another, every ROLL_INTERVAL_MS: controlled shutdown
                      (BrokerRegistrationChangeRecord InControlledShutdown, then its leaderships
                      moved and its ISR memberships dropped), fence, RegisterBrokerRecord with a
                      new epoch (its own offset, as Kafka's) and incarnation, unfence (plus an
                      election for partitions left leaderless), ISR expansion (one AlterPartition
                      event per leader broker)
    preferred leader  every 300 s (leader.imbalance.check.interval.seconds): leaders moved back to
                      the first replica, at most 1000 per event (Kafka's maxElectionsPerImbalance)
    zonal outage      at a sixth of the duration: every up broker of one rack is fenced by a
                      session timeout, each its own event; recovered OUTAGE_MS later
    ISR flaps         a few partitions lose a follower, which rejoins seconds later
    topics            creates with configs, deletes, and re-creates of a deleted name (no stale configs)
    the rest          ProducerIdsRecord blocks; client quotas, ACLs, SCRAM credentials, delegation
                      tokens (set and removed); feature level changes; controller failovers (a
                      LeaderChange control batch and a new epoch)

State is numpy arrays over the base's partition rows (replicas, ISR membership, leader, live), so
an event that touches tens of thousands of partitions is a few array operations, and its
PartitionChangeRecords come from one byte template per ISR length (``partition_change_values``,
checked against the generic codec in tests). Topics created in the tail are not moved by later
restarts (a simplification: their records would look like the base's).
"""

from __future__ import annotations

import heapq
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from kraftlog.engine.image import versions
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.image import TOPIC_RESOURCE_TYPE
from kraftlog.engine.records import batch as batch_codec
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.layout import HEADER_SIZE

DEFAULT_TAIL_BYTES = 20 << 20  # metadata.log.max.record.bytes.between.snapshots
DEFAULT_DURATION_MS = 3_600_000  # metadata.log.max.snapshot.interval.ms
NOOP_INTERVAL_MS = 500  # metadata.max.idle.interval.ms
PREFERRED_ELECTION_INTERVAL_MS = 300_000  # leader.imbalance.check.interval.seconds
MAX_ELECTIONS_PER_IMBALANCE = 1000  # Kafka's ReplicationControlManager batch of preferred elections
CONTROLLER_MAX_RECORDS_PER_BATCH = 10_000  # QuorumController's records per batch
ROLL_INTERVAL_MS = 45_000  # one broker restarted every this often
OUTAGE_MS = 300_000  # a zone stays down this long
START_MS = 1_700_000_000_000
# Bytes a record adds to its value inside a batch (length, attributes, timestamp and offset
# deltas, null key, value length, header count), about: only used to stop at tail_bytes.
RECORD_FRAMING_BYTES = 8
NO_LEADER = -1
LEADER_ID = 1  # the first active controller (the base log's LeaderChange names it)


class ControllerBatch(NamedTuple):
    """One batch of the tail: framed metadata record values, or one LeaderChange control value."""

    values: list[bytes]
    timestamp_ms: int
    epoch: int  # the controller's Raft epoch (the batch's partition leader epoch)
    control: bool = False


@dataclass(frozen=True)
class ProductionShape:
    base: wl.WorkloadShape
    tail_bytes: int = DEFAULT_TAIL_BYTES
    duration_ms: int = DEFAULT_DURATION_MS
    seed: int = 1
    start_ms: int = START_MS


# -- PartitionChangeRecord values, vectorised -------------------------------------------------------
def partition_change_values(version: int, topic_ids: np.ndarray, partition_ids: np.ndarray,
                            leaders: np.ndarray | None, isr: np.ndarray | None,
                            isr_count: np.ndarray | None) -> list[bytes]:
    """Framed PartitionChangeRecord values setting the Leader and / or the Isr of each row.

    ``topic_ids`` uint8[n,16]; ``isr`` int32[n,W] packed left with ``isr_count`` entries each.
    Layout (flexible; the lists are tagged fields, Isr tag 0 then Leader tag 1):
        frame(3: 1, 5, version) PartitionId i32, TopicId 16, tag count u8,
        [tag 0 u8, size u8 (1 + 4c), Isr (uvarint c+1, c x i32)], [tag 1 u8, size u8 (4), Leader i32]
    """
    n = len(partition_ids)
    out = np.empty(n, dtype=object)
    counts = isr_count if isr is not None else np.zeros(n, dtype=np.int64)
    for c in np.unique(counts).tolist():
        rows = np.flatnonzero(counts == c)
        fields = [("frame", "u1", 3), ("pid", ">i4"), ("tid", "u1", 16), ("tags", "u1")]
        if isr is not None:
            fields += [("isr_tag", "u1"), ("isr_size", "u1"), ("isr_len", "u1")]
            fields += [("isr", ">i4", c)] if c else []
        if leaders is not None:
            fields += [("leader_tag", "u1"), ("leader_size", "u1"), ("leader", ">i4")]
        rec = np.zeros(len(rows), dtype=np.dtype(fields))
        rec["frame"] = (1, 5, version)
        rec["pid"] = partition_ids[rows]
        rec["tid"] = topic_ids[rows]
        rec["tags"] = (isr is not None) + (leaders is not None)
        if isr is not None:
            rec["isr_tag"], rec["isr_size"], rec["isr_len"] = 0, 1 + 4 * c, c + 1
            if c:
                rec["isr"] = isr[rows, :c]
        if leaders is not None:
            rec["leader_tag"], rec["leader_size"], rec["leader"] = 1, 4, leaders[rows]
        raw, size = rec.tobytes(), rec.dtype.itemsize
        out[rows] = [raw[i * size:(i + 1) * size] for i in range(len(rows))]
    return out.tolist()


# -- the cluster's state ------------------------------------------------------------------------------
@dataclass
class _Partitions:
    """The base's partitions as arrays (row = topic * partitions_per_topic + partition)."""

    replicas: np.ndarray  # int32[P, RF]
    in_isr: np.ndarray  # bool[P, RF]
    leader: np.ndarray  # int32[P]
    live: np.ndarray  # bool[P]: the topic is not deleted
    topic_ids: np.ndarray  # uint8[T, 16]
    per_topic: int

    def isr_of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(isr int32[n, RF] packed left in replica order, count) of ``rows``."""
        mask = self.in_isr[rows]
        order = np.argsort(~mask, axis=1, kind="stable")
        packed = np.take_along_axis(self.replicas[rows], order, axis=1)
        count = mask.sum(axis=1)
        packed[np.arange(packed.shape[1])[None, :] >= count[:, None]] = -1
        return packed, count

    def ids(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.topic_ids[rows // self.per_topic], (rows % self.per_topic).astype(np.int32)


@dataclass
class _Broker:
    epoch: int
    incarnation: uuid.UUID
    fenced: bool = False
    in_controlled_shutdown: bool = False


@dataclass
class TailFacts:
    """What the generated tail leaves behind, for tests to check a replay against."""

    fenced: set[int] = field(default_factory=set)
    live_topics: dict[str, uuid.UUID] = field(default_factory=dict)  # topics created in the tail
    deleted: set[str] = field(default_factory=set)  # names deleted and not re-created
    recreated: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> its configs now
    records: int = 0
    batches: int = 0
    bytes: int = 0
    kinds: dict[str, int] = field(default_factory=dict)  # record type -> count


class ProductionTail:
    """Generates the tail of ``shape`` on top of the base workload whose records end at
    ``first_offset - 1``. Iterate ``batches()`` once; ``facts`` then describes the result."""

    def __init__(self, shape: ProductionShape, first_offset: int):
        base = shape.base
        self.shape, self.base = shape, base
        self.rng = random.Random(shape.seed)
        self.offset = first_offset
        self.now_ms = shape.start_ms
        self.epoch = 1
        self.controller = LEADER_ID
        self.facts = TailFacts()
        self.pc_version = versions.partition_change_record_version(base.metadata_version)
        self.rb_version = versions.register_broker_record_version(base.metadata_version)
        self.bc_version = versions.broker_registration_change_record_version(base.metadata_version)
        replicas = wl.assignment(base)
        tids = np.frombuffer(b"".join(wl.topic_id(base, t).bytes for t in range(base.topics)), np.uint8)
        self.parts = _Partitions(replicas, np.ones(replicas.shape, bool), replicas[:, 0].copy(),
                                 np.ones(len(replicas), bool), tids.reshape(-1, 16), base.partitions_per_topic)
        self.brokers = {b: _Broker(wl.base_broker_epoch(b), wl.base_incarnation(base, b)) for b in range(base.brokers)}
        self._events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self._out: list[ControllerBatch] = []
        self._next_topic = 0
        self._producer_id = 0
        self._deleted_names: list[str] = []
        self._acls: list[uuid.UUID] = []
        self._tokens: list[str] = []

    # -- the clock -------------------------------------------------------------------------------
    def at(self, when_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (when_ms, self._seq, action))

    def batches(self) -> Iterator[ControllerBatch]:
        shape = self.shape
        end_ms = shape.start_ms + shape.duration_ms
        self._schedule_all()
        while self._events and self.facts.bytes < shape.tail_bytes:
            when, _, action = heapq.heappop(self._events)
            if when > end_ms:
                break
            self.now_ms = when
            action()
            yield from self._out
            self._out.clear()

    def _schedule_all(self) -> None:
        start, duration = self.shape.start_ms, self.shape.duration_ms
        self.at(start, self._noop)
        self.at(start + 10_000, self._roll_next)
        self.at(start + PREFERRED_ELECTION_INTERVAL_MS, self._preferred_elections)
        self.at(start + duration // 6, self._zonal_outage)
        self.at(start + 2_000, self._isr_flap)
        self.at(start + 5_000, self._topic_op)
        self.at(start + 7_000, self._producer_ids)
        self.at(start + 9_000, self._admin_op)
        for fraction in (0.05, 0.5):
            self.at(start + int(duration * fraction), self._failover)
        for fraction, name, level in ((0.02, "transaction.version", 1), (0.3, "group.version", 1),
                                      (0.6, "transaction.version", 2)):
            self.at(start + int(duration * fraction), lambda n=name, v=level: self._feature(n, v))

    # -- writing ---------------------------------------------------------------------------------
    def emit(self, values: list[bytes], kind: str) -> None:
        """One controller event: its records in batches of at most CONTROLLER_MAX_RECORDS_PER_BATCH."""
        for i in range(0, len(values), CONTROLLER_MAX_RECORDS_PER_BATCH):
            chunk = values[i:i + CONTROLLER_MAX_RECORDS_PER_BATCH]
            self._out.append(ControllerBatch(chunk, self.now_ms, self.epoch))
            self.offset += len(chunk)
            self.facts.records += len(chunk)
            self.facts.batches += 1
            self.facts.bytes += HEADER_SIZE + sum(len(v) + RECORD_FRAMING_BYTES for v in chunk)
        self.facts.kinds[kind] = self.facts.kinds.get(kind, 0) + len(values)

    def record(self, name: str, data: dict, version: int = 0) -> bytes:
        return codec.encode_record(name, version, data, allow_loss=True)

    # -- periodic events -------------------------------------------------------------------------
    def _noop(self) -> None:
        self.emit([NOOP_VALUE], "NoOpRecord")
        self.at(self.now_ms + NOOP_INTERVAL_MS, self._noop)

    def _failover(self) -> None:
        """A new active controller: Raft writes a LeaderChange control record in its new epoch."""
        self.epoch += 1
        self.controller = 3000 + self.epoch % 3
        voters = [{"VoterId": 3000 + i} for i in range(3)]
        _, value = codec.encode_control("LeaderChangeMessage", 0, {"LeaderId": self.controller, "Voters": voters,
                                                                    "GrantingVoters": voters[:2]})
        self._out.append(ControllerBatch([value], self.now_ms, self.epoch, control=True))
        self.offset += 1
        self.facts.batches += 1
        self.facts.bytes += HEADER_SIZE + len(value) + RECORD_FRAMING_BYTES

    def _feature(self, name: str, level: int) -> None:
        self.emit([self.record("FeatureLevelRecord", {"Name": name, "FeatureLevel": level})], "FeatureLevelRecord")

    def _producer_ids(self) -> None:
        up = [b for b, s in self.brokers.items() if not s.fenced]
        if up:
            b = self.rng.choice(up)
            self._producer_id += 1000
            self.emit([self.record("ProducerIdsRecord", {"BrokerId": b, "BrokerEpoch": self.brokers[b].epoch,
                                                         "NextProducerId": self._producer_id})], "ProducerIdsRecord")
        self.at(self.now_ms + self.rng.randrange(5_000, 20_000), self._producer_ids)

    # -- broker lifecycle ------------------------------------------------------------------------
    def _roll_next(self, broker: int = 0) -> None:
        """Restart ``broker`` (unless it is down already), then the next one later."""
        if broker < self.base.brokers:
            if not self.brokers[broker].fenced:
                self._broker_down(broker, controlled=True)
                self.at(self.now_ms + 3_000, lambda: self._fence(broker))
                self.at(self.now_ms + 20_000, lambda: self._broker_up(broker))
            self.at(self.now_ms + ROLL_INTERVAL_MS, lambda: self._roll_next(broker + 1))

    def _zonal_outage(self) -> None:
        """Every up broker of one rack (a third of them) misses its session timeout."""
        zone = self.rng.randrange(3)
        down = [b for b, s in self.brokers.items() if b % 3 == zone and not s.fenced and not s.in_controlled_shutdown]
        for i, b in enumerate(down):
            self.at(self.now_ms + i * 5, lambda b=b: self._broker_down(b, controlled=False))
            self.at(self.now_ms + OUTAGE_MS + i * 50, lambda b=b: self._broker_up(b))

    def _change_record(self, b: int, **change) -> bytes:
        return self.record("BrokerRegistrationChangeRecord", {"BrokerId": b, "BrokerEpoch": self.brokers[b].epoch,
                                                              **change}, self.bc_version)

    def _broker_down(self, b: int, *, controlled: bool) -> None:
        """Controlled shutdown (the broker asks) or a session timeout (the controller fences): its
        leaderships move to another ISR member and it leaves every ISR (the last ISR member stays,
        leaderless), in the same event."""
        state = self.brokers[b]
        if state.fenced or state.in_controlled_shutdown:
            return  # already going down (a restart and an outage can meet)
        if controlled:
            state.in_controlled_shutdown = True
            head = [self._change_record(b, InControlledShutdown=1)]
        else:
            state.fenced = True
            head = [self._change_record(b, Fenced=1)]
        self.emit(head + self._leave_isr(b), "BrokerDown")

    def _leave_isr(self, b: int) -> list[bytes]:
        p = self.parts
        member = (p.replicas == b) & p.in_isr
        rows = np.flatnonzero(member.any(axis=1) & p.live)
        if not len(rows):
            return []
        last = p.in_isr[rows].sum(axis=1) == 1  # b is the only ISR member: the ISR stays, no leader
        shrink, alone = rows[~last], rows[last]
        p.in_isr[shrink] &= p.replicas[shrink] != b
        moved = shrink[p.leader[shrink] == b]
        isr, count = p.isr_of(moved)
        p.leader[moved] = isr[:, 0]
        orphaned = alone[p.leader[alone] == b]
        p.leader[orphaned] = NO_LEADER
        return (self._changes(moved, leaders=True, isr=True) + self._changes(np.setdiff1d(shrink, moved), isr=True)
                + self._changes(orphaned, leaders=True))

    def _changes(self, rows: np.ndarray, *, leaders: bool = False, isr: bool = False) -> list[bytes]:
        if not len(rows):
            return []
        p = self.parts
        tids, pids = p.ids(rows)
        packed, count = p.isr_of(rows) if isr else (None, None)
        return partition_change_values(self.pc_version, tids, pids, p.leader[rows] if leaders else None, packed, count)

    def _fence(self, b: int) -> None:
        if self.brokers[b].fenced:
            return
        self.brokers[b].fenced = True
        self.emit([self._change_record(b, Fenced=1)], "BrokerRegistrationChangeRecord")

    def _broker_up(self, b: int) -> None:
        """Re-registration (new epoch = its offset, new incarnation, fenced), then unfence and ISR expansion."""
        state = self.brokers[b]
        state.epoch, state.incarnation = self.offset, uuid.UUID(int=self.rng.getrandbits(128), version=4)
        state.fenced, state.in_controlled_shutdown = True, False
        data = wl.registration(b, epoch=state.epoch, incarnation=state.incarnation)
        self.emit([self.record("RegisterBrokerRecord", data, self.rb_version)], "RegisterBrokerRecord")
        self.at(self.now_ms + 2_000, lambda: self._unfence(b))

    def _unfence(self, b: int) -> None:
        p = self.parts
        self.brokers[b].fenced = False
        # Partitions left with b as their only ISR member and no leader elect it again.
        orphaned = np.flatnonzero((p.leader == NO_LEADER) & ((p.replicas == b) & p.in_isr).any(axis=1) & p.live)
        p.leader[orphaned] = b
        self.emit([self._change_record(b, Fenced=-1)] + self._changes(orphaned, leaders=True), "Unfence")
        self.at(self.now_ms + 3_000, lambda: self._expand_isr(b))

    def _expand_isr(self, b: int) -> None:
        """b caught up: each leader asks to add it (one AlterPartition event per leader broker)."""
        if self.brokers[b].fenced or self.brokers[b].in_controlled_shutdown:
            return
        p = self.parts
        out = (p.replicas == b) & ~p.in_isr
        rows = np.flatnonzero(out.any(axis=1) & p.live & (p.leader >= 0))
        p.in_isr[rows] |= p.replicas[rows] == b
        for leader in np.unique(p.leader[rows]).tolist():
            self.emit(self._changes(rows[p.leader[rows] == leader], isr=True), "AlterPartition")

    def _preferred_elections(self) -> None:
        p = self.parts
        first = p.replicas[:, 0]
        up = np.array([not self.brokers[b].fenced and not self.brokers[b].in_controlled_shutdown
                       for b in range(self.base.brokers)])
        rows = np.flatnonzero(p.live & (p.leader != first) & p.in_isr[:, 0] & up[first])
        for i in range(0, len(rows), MAX_ELECTIONS_PER_IMBALANCE):
            chunk = rows[i:i + MAX_ELECTIONS_PER_IMBALANCE]
            p.leader[chunk] = first[chunk]
            self.emit(self._changes(chunk, leaders=True), "PreferredElection")
        self.at(self.now_ms + PREFERRED_ELECTION_INTERVAL_MS, self._preferred_elections)

    def _isr_flap(self) -> None:
        """A few followers fall behind and are dropped from the ISR; they rejoin seconds later."""
        p = self.parts
        rows = np.unique(np.array([self.rng.randrange(len(p.leader)) for _ in range(self.rng.randrange(1, 20))]))
        rows = rows[p.live[rows] & (p.in_isr[rows].sum(axis=1) > 1) & (p.leader[rows] >= 0)]
        follower = p.in_isr[rows] & (p.replicas[rows] != p.leader[rows, None])
        col = np.argmax(follower, axis=1)
        rows, col = rows[follower.any(axis=1)], col[follower.any(axis=1)]
        if len(rows):
            p.in_isr[rows, col] = False
            self.emit(self._changes(rows, isr=True), "IsrShrink")
            self.at(self.now_ms + self.rng.randrange(2_000, 30_000), lambda: self._isr_rejoin(rows, col))
        self.at(self.now_ms + self.rng.randrange(1_000, 10_000), self._isr_flap)

    def _isr_rejoin(self, rows: np.ndarray, col: np.ndarray) -> None:
        p = self.parts
        up = np.array([not self.brokers[int(b)].fenced and not self.brokers[int(b)].in_controlled_shutdown
                       for b in p.replicas[rows, col]], dtype=bool)
        ok = up & p.live[rows] & ~p.in_isr[rows, col] & (p.leader[rows] >= 0)
        rows, col = rows[ok], col[ok]
        if len(rows):
            p.in_isr[rows, col] = True
            self.emit(self._changes(rows, isr=True), "IsrExpand")

    # -- topics ----------------------------------------------------------------------------------
    def _topic_op(self) -> None:
        roll = self.rng.random()
        if roll < 0.2 and self._deleted_names:
            name = self._deleted_names.pop(self.rng.randrange(len(self._deleted_names)))
            configs = {"retention.ms": str(self.rng.choice([3_600_000, 86_400_000]))}
            self._create(name, configs)
            self.facts.recreated[name] = configs
        elif roll < 0.45:
            self._delete()
        else:
            self._next_topic += 1
            self._create(f"prod-{self._next_topic:05d}", {"cleanup.policy": self.rng.choice(["compact", "delete"]),
                                                          "min.insync.replicas": "2"})
        self.at(self.now_ms + self.rng.randrange(5_000, 40_000), self._topic_op)

    def _create(self, name: str, configs: dict[str, str]) -> None:
        """CreateTopics: TopicRecord, its PartitionRecords on up brokers, its ConfigRecords, one batch."""
        tid = uuid.UUID(int=self.rng.getrandbits(128), version=4)
        up = sorted(b for b, s in self.brokers.items() if not s.fenced and not s.in_controlled_shutdown)
        rf = min(self.base.replication_factor, len(up))
        version = versions.partition_record_version(self.base.metadata_version)
        values = [self.record("TopicRecord", {"Name": name, "TopicId": tid})]
        start = self.rng.randrange(len(up))
        for pid in range(self.rng.randrange(1, 13)):
            replicas = [up[(start + pid + i) % len(up)] for i in range(rf)]
            values.append(self.record("PartitionRecord", {"TopicId": tid, "PartitionId": pid, "Replicas": replicas,
                                                          "Isr": replicas, "Leader": replicas[0]}, version))
        values += [self.record("ConfigRecord", {"ResourceType": TOPIC_RESOURCE_TYPE, "ResourceName": name, "Name": k,
                                                "Value": v}) for k, v in configs.items()]
        self.emit(values, "CreateTopics")
        self.facts.live_topics[name] = tid
        self.facts.deleted.discard(name)

    def _delete(self) -> None:
        """DeleteTopics: a RemoveTopicRecord (Kafka drops the configs with it, writing nothing else)."""
        created = sorted(self.facts.live_topics)
        if created and self.rng.random() < 0.7:
            name = self.rng.choice(created)
            tid = self.facts.live_topics.pop(name)
            self.facts.recreated.pop(name, None)
        else:
            t = self.rng.randrange(self.base.topics)
            rows = np.arange(t * self.parts.per_topic, (t + 1) * self.parts.per_topic)
            if not self.parts.live[rows[0]]:
                return
            self.parts.live[rows] = False
            name, tid = wl.topic_name(t), wl.topic_id(self.base, t)
        self._deleted_names.append(name)
        self.facts.deleted.add(name)
        self.emit([self.record("RemoveTopicRecord", {"TopicId": tid})], "RemoveTopicRecord")

    # -- security and quotas ---------------------------------------------------------------------
    def _admin_op(self) -> None:
        rng = self.rng
        kind = rng.randrange(4)
        user = f"user-{rng.randrange(50)}"
        if kind == 0:
            values = [self.record("ClientQuotaRecord", {"Entity": [{"EntityType": "user", "EntityName": user}],
                                                        "Key": "producer_byte_rate",
                                                        "Value": float(rng.choice([1 << 20, 10 << 20])),
                                                        "Remove": rng.random() < 0.3})]
        elif kind == 1:
            values = [self._acl_change()]
        elif kind == 2:
            mechanism = rng.choice([1, 2])
            if rng.random() < 0.3:
                values = [self.record("RemoveUserScramCredentialRecord", {"Name": user, "Mechanism": mechanism})]
            else:
                values = [self.record("UserScramCredentialRecord", {
                    "Name": user, "Mechanism": mechanism, "Salt": rng.randbytes(16), "StoredKey": rng.randbytes(32),
                    "ServerKey": rng.randbytes(32), "Iterations": 4096})]
        else:
            values = [self._token_change()]
        self.emit(values, "Admin")
        self.at(self.now_ms + rng.randrange(10_000, 60_000), self._admin_op)

    def _acl_change(self) -> bytes:
        if self._acls and self.rng.random() < 0.3:
            return self.record("RemoveAccessControlEntryRecord",
                               {"Id": self._acls.pop(self.rng.randrange(len(self._acls)))})
        acl = uuid.UUID(int=self.rng.getrandbits(128), version=4)
        self._acls.append(acl)
        return self.record("AccessControlEntryRecord", {
            "Id": acl, "ResourceType": 2, "ResourceName": wl.topic_name(self.rng.randrange(self.base.topics)),
            "PatternType": 3, "Principal": f"User:user-{self.rng.randrange(50)}", "Host": "*", "Operation": 3,
            "PermissionType": 3})

    def _token_change(self) -> bytes:
        if self._tokens and self.rng.random() < 0.3:
            return self.record("RemoveDelegationTokenRecord",
                               {"TokenId": self._tokens.pop(self.rng.randrange(len(self._tokens)))})
        token = f"token-{self.rng.getrandbits(48):012x}"
        self._tokens.append(token)
        return self.record("DelegationTokenRecord", {
            "Owner": "User:admin", "Requester": "User:admin", "Renewers": [], "IssueTimestamp": self.now_ms,
            "MaxTimestamp": self.now_ms + 7 * 86_400_000, "ExpirationTimestamp": self.now_ms + 86_400_000,
            "TokenId": token})

    def finish(self) -> TailFacts:
        self.facts.fenced = {b for b, s in self.brokers.items() if s.fenced}
        return self.facts


NOOP_VALUE = codec.encode_record("NoOpRecord", 0, {})


def encode_batches(batches, first_offset: int, *, with_epochs: bool = False) -> Iterator:
    """The record batches (bytes) of ``batches`` from ``first_offset`` on, as a controller appends
    them; ``with_epochs``: (bytes, epoch) pairs, for a log that stamps the epoch itself."""
    offset = first_offset
    for b in batches:
        if b.control:
            data = batch_codec.build_control_batch(batch_codec.CONTROL_LEADER_CHANGE, b.values[0], base_offset=offset,
                                                   partition_leader_epoch=b.epoch, timestamp_ms=b.timestamp_ms)
        else:
            data = batch_codec.build_batch_from_values(b.values, base_offset=offset, partition_leader_epoch=b.epoch,
                                                       timestamp_ms=b.timestamp_ms)
        offset += len(b.values)
        yield (data, b.epoch) if with_epochs else data


def production_log(shape: ProductionShape, *, records_per_batch: int = 1000) -> tuple[bytes, bytes, TailFacts]:
    """(base bytes, tail bytes, facts): the base workload in batches of ``records_per_batch`` from
    offset 0, then the tail's batches. For tests and benchmarks (gen writes a log directory)."""
    values = list(wl.generate(shape.base))
    base = b"".join(batch_codec.build_batch_from_values(values[i:i + records_per_batch], base_offset=i,
                                                        partition_leader_epoch=1, timestamp_ms=shape.start_ms)
                    for i in range(0, len(values), records_per_batch))
    tail = ProductionTail(shape, len(values))
    data = b"".join(encode_batches(tail.batches(), len(values)))
    return base, data, tail.finish()
