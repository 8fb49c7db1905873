"""Partition changes the active controller decides: leader elections and ISR changes, as
PartitionChangeRecords. Pure logic (an image in, record values out, no I/O), following Kafka's
PartitionChangeBuilder and ReplicationControlManager.generateLeaderAndIsrUpdates.

Two ways to the same answer:
    bulk     ``plan_changes`` over partition rows of the columnar TopicsImage: ISR removal and
             the election as numpy operations over whole columns (a broker fenced while leading
             10,000 partitions costs a few milliseconds, no per-partition Python object), records
             built from a byte template by ``encode_changes``.
    scalar   ``build_change`` for one PartitionRegistration, the builder's steps one by one. It is
             the reference the bulk path is tested against, and the path for what the bulk one
             does not do: AlterPartition, and partitions with eligible leader replicas (ELR).

Election (Kafka's ONLINE election, electAnyLeader): the current leader stays if it is still in
the target ISR and acceptable; else the first replica, in replica order, that is in the target ISR
and acceptable; else, with ELR enabled and an empty ISR, an ELR member (ELR rules below); else
NO_LEADER (-1). Acceptable = registered, unfenced, not in controlled shutdown, and not the broker
being removed; a broker being unfenced is acceptable although the image still shows it fenced.

ISR: the target ISR is the current one without the broker being removed. Without ELR an ISR is
never emptied: a partition whose only ISR member is removed keeps its ISR and gets leader -1.
Before metadata.version 3.6-IV0 an ISR shrink also bumps the leader epoch (KAFKA-15021), written
as Leader = the current leader.

ELR (KIP-966, when the eligible.leader.replicas.version feature is enabled): when the target ISR
falls below the topic's min ISR, the ELR becomes (current ELR + current ISR) - target ISR and the
ISR may become empty; a leader may then be elected from the ELR (that member becomes the ISR), and
the last leader of a leaderless partition is kept in LastKnownElr. Simplified: lists are sorted
(Kafka's come out of a HashSet), the unclean-shutdown exclusion and unclean elections are not
done, and the last known leader is elected only if acceptable (Kafka's check there only logs).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kraftlog.engine.image import versions
from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.image.topics import NO_LEADER, NO_LEADER_CHANGE, PartitionRegistration, TopicsImage
from kraftlog.engine.records import metadata as codec

ELR_FEATURE = "eligible.leader.replicas.version"  # Kafka's EligibleLeaderReplicasVersion.FEATURE_NAME
MIN_ISR_CONFIG = "min.insync.replicas"
EPOCH_BUMP_ON_SHRINK_BEFORE = versions.LEVELS["3.6-IV0"]  # MetadataVersion.isLeaderEpochBumpRequiredOnIsrShrink
RECOVERED, RECOVERING = 0, 1  # LeaderRecoveryState
TOPIC_RESOURCE_TYPE = 2
_API_PARTITION_CHANGE = 5
_MAX_TEMPLATE_ISR = 31  # the Isr tag's size (1 + 4n bytes) fits one uvarint byte up to here


@dataclass(frozen=True)
class Rules:
    """What an election needs to know about the cluster, fixed for one write."""

    acceptable: np.ndarray  # sorted int32 broker ids that may lead
    elr_enabled: bool = False
    bump_leader_epoch_on_shrink: bool = False
    record_version: int = 0  # PartitionChangeRecord version at this metadata.version
    min_isr: Callable[[str], int] = field(default=lambda name: 1)  # topic name -> effective min ISR

    def is_acceptable(self, broker: int) -> bool:
        i = int(np.searchsorted(self.acceptable, broker))
        return i < len(self.acceptable) and int(self.acceptable[i]) == broker


def rules_for(image: MetadataImage, *, remove: int = NO_LEADER, add: int = NO_LEADER,
              default_min_isr: int = 1) -> Rules:
    """Rules from the image: ``remove`` never leads (it is being fenced or shut down), ``add``
    may lead although the image still shows it fenced (it is being unfenced)."""
    ids = [b for b, reg in image.cluster.brokers.items()
           if b != remove and (b == add or (not reg.fenced and not reg.in_controlled_shutdown))]
    level = image.features.metadata_version or versions.LATEST
    configs = image.configs

    def min_isr(name: str) -> int:
        value = configs.get((TOPIC_RESOURCE_TYPE, name), {}).get(MIN_ISR_CONFIG)
        return int(value) if value is not None and value.lstrip("-").isdigit() else default_min_isr

    return Rules(acceptable=np.array(sorted(ids), dtype=np.int32),
                 elr_enabled=level >= versions.ELIGIBLE_LEADER_REPLICAS and image.features.level(ELR_FEATURE) >= 1,
                 bump_leader_epoch_on_shrink=level < EPOCH_BUMP_ON_SHRINK_BEFORE,
                 record_version=versions.partition_change_record_version(level), min_isr=min_isr)


# ---- finding partitions in the columns ------------------------------------------------------------


def _scan(topics: TopicsImage, predicate: Callable[[dict, int], np.ndarray]) -> np.ndarray:
    """Live partition rows (int64, ascending) where ``predicate(chunk arrays, rows)`` holds."""
    found = []
    base = 0
    for chunk in topics.partitions.chunks:
        a, n = chunk.arrays, chunk.rows
        live = (a["topic_row"][:n] >= 0) & (a["partition_id"][:n] >= 0)
        hits = np.flatnonzero(live & predicate(a, n))
        if len(hits):
            found.append(hits + base)
        base += n
    return np.concatenate(found).astype(np.int64) if found else np.zeros(0, dtype=np.int64)


def rows_with_isr_member(topics: TopicsImage, broker: int) -> np.ndarray:
    """Partitions whose ISR holds ``broker`` (Kafka's brokersToIsrs.partitionsWithBrokerInIsr)."""
    return _scan(topics, lambda a, n: (a["isr"][:n] == broker).any(axis=1))


def rows_led_by(topics: TopicsImage, broker: int) -> np.ndarray:
    return _scan(topics, lambda a, n: a["leader"][:n] == broker)


def rows_without_leader(topics: TopicsImage) -> np.ndarray:
    """Offline partitions (leader -1): the ones an unfenced broker may bring back."""
    return _scan(topics, lambda a, n: a["leader"][:n] == NO_LEADER)


def leads_any(topics: TopicsImage, broker: int) -> bool:
    """Kafka's brokersToIsrs.hasLeaderships: a live partition led by ``broker`` with ``broker`` in
    its ISR (Kafka tracks leaderships among ISR members only, so a leader outside its ISR, which
    no change here can move, does not hold a controlled shutdown back)."""
    for chunk in topics.partitions.chunks:
        a, n = chunk.arrays, chunk.rows
        led = (a["leader"][:n] == broker) & (a["topic_row"][:n] >= 0) & (a["partition_id"][:n] >= 0)
        if led.any() and (a["isr"][:n][led] == broker).any():
            return True
    return False


# ---- the planned changes --------------------------------------------------------------------------


@dataclass
class PartitionChanges:
    """PartitionChangeRecords to write: a columnar block (changes of Leader and/or Isr only) and
    ``extra`` records built one by one (their data dicts, Kafka field names)."""

    topic_hi: np.ndarray  # int64 halves of the topic id
    topic_lo: np.ndarray
    partition_id: np.ndarray  # int32
    leader: np.ndarray  # int32, NO_LEADER_CHANGE (-2) = unchanged
    isr: np.ndarray  # int32 [n, width], -1 padded
    isr_count: np.ndarray  # int32, -1 = Isr unchanged (null)
    record_version: int
    extra: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.partition_id) + len(self.extra)

    @classmethod
    def empty(cls, record_version: int) -> PartitionChanges:
        z32 = np.zeros(0, dtype=np.int32)
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), z32, z32, np.zeros((0, 1), np.int32), z32,
                   record_version)

    def records(self) -> list[dict]:
        """Every change as a record data dict (block first, then ``extra``): for tests and logs."""
        out = []
        for i in range(len(self.partition_id)):
            data = {"TopicId": _uuid(self.topic_hi[i], self.topic_lo[i]), "PartitionId": int(self.partition_id[i])}
            if self.isr_count[i] >= 0:
                data["Isr"] = [int(b) for b in self.isr[i, :self.isr_count[i]]]
            if self.leader[i] != NO_LEADER_CHANGE:
                data["Leader"] = int(self.leader[i])
            out.append(data)
        return out + list(self.extra)


def _uuid(hi, lo) -> uuid.UUID:
    return uuid.UUID(int=((int(hi) & ((1 << 64) - 1)) << 64) | (int(lo) & ((1 << 64) - 1)))


def _compact_without(lists: np.ndarray, broker: int) -> tuple[np.ndarray, np.ndarray]:
    """-1 padded rows with ``broker`` taken out (order kept): (lists, counts)."""
    keep = (lists >= 0) & (lists != broker)
    order = np.argsort(~keep, axis=1, kind="stable")  # kept entries first, in their order
    out = np.take_along_axis(lists, order, axis=1)
    counts = keep.sum(axis=1).astype(np.int32)
    out[np.arange(out.shape[1])[None, :] >= counts[:, None]] = -1
    return out, counts


def plan_changes(topics: TopicsImage, rows: np.ndarray, rules: Rules, *, remove: int = NO_LEADER) -> PartitionChanges:
    """Take ``remove`` out of the ISR of partition ``rows`` and elect leaders where needed (with
    ``remove`` = -1: elections only, e.g. offline partitions when a broker is unfenced).
    Partitions with ELR state, or all of them when ELR is enabled, go through ``build_change``."""
    rows = np.asarray(rows, dtype=np.int64)
    out = PartitionChanges.empty(rules.record_version)
    if not len(rows):
        return out
    p = topics.partitions
    elr_state = (p.gather(rows, "eligible_leader_replicas") >= 0).any(axis=1) | \
        (p.gather(rows, "last_known_elr") >= 0).any(axis=1)
    scalar = np.ones(len(rows), dtype=bool) if rules.elr_enabled else elr_state
    if scalar.any():
        out.extra = _scalar_changes(topics, rows[scalar], rules, remove)
        rows = rows[~scalar]
    if not len(rows):
        return out
    leader = p.gather(rows, "leader")
    replicas, isr = p.gather(rows, "replicas"), p.gather(rows, "isr")
    target, counts = _compact_without(isr, remove)
    old_counts = (isr >= 0).sum(axis=1).astype(np.int32)
    # Without ELR an ISR is never emptied: the one remaining member stays.
    emptied = counts == 0
    target[emptied] = isr[emptied]
    counts[emptied] = old_counts[emptied]
    isr_changed = counts != old_counts
    new_leader = _elect(leader, replicas, target, rules.acceptable)
    leader_changed = new_leader != leader
    record_leader = np.where(leader_changed, new_leader, NO_LEADER_CHANGE).astype(np.int32)
    if rules.bump_leader_epoch_on_shrink:
        record_leader = np.where(~leader_changed & isr_changed, leader, record_leader).astype(np.int32)
    changed = np.flatnonzero(leader_changed | isr_changed)
    trows = p.gather(rows[changed], "topic_row")
    out.topic_hi = topics.topics.gather(trows, "id_hi")
    out.topic_lo = topics.topics.gather(trows, "id_lo")
    out.partition_id = p.gather(rows[changed], "partition_id")
    out.leader = record_leader[changed]
    out.isr = target[changed]
    out.isr_count = np.where(isr_changed[changed], counts[changed], -1).astype(np.int32)
    return out


def _elect(leader: np.ndarray, replicas: np.ndarray, target_isr: np.ndarray, acceptable: np.ndarray) -> np.ndarray:
    """electAnyLeader over rows: keep a still-valid leader, else the first valid replica, else -1."""
    def valid(brokers: np.ndarray) -> np.ndarray:
        in_isr = (brokers[..., None] == target_isr.reshape(len(target_isr), *([1] * (brokers.ndim - 1)), -1)).any(-1)
        return in_isr & (brokers >= 0) & np.isin(brokers, acceptable)

    keep = valid(leader)
    ok = valid(replicas)
    first = ok.argmax(axis=1)
    chosen = np.where(ok.any(axis=1), replicas[np.arange(len(replicas)), first], NO_LEADER)
    return np.where(keep, leader, chosen).astype(np.int32)


def _scalar_changes(topics: TopicsImage, rows: np.ndarray, rules: Rules, remove: int) -> list[dict]:
    out = []
    for prow in rows.tolist():
        part = topics.registration(prow)
        if part is None:
            continue
        target = [b for b in part.isr if b != remove]
        data = build_change(part, target, rules)
        if data is not None:
            out.append(data)
    return out


# ---- one partition: Kafka's PartitionChangeBuilder ----------------------------------------------------


def build_change(part: PartitionRegistration, target_isr: Sequence[int], rules: Rules, *,
                 target_recovery_state: int | None = None,
                 is_acceptable: Callable[[int], bool] | None = None) -> dict | None:
    """The PartitionChangeRecord data that moves ``part`` to ``target_isr`` (and the leader the
    election picks), or None when nothing changes. Steps in PartitionChangeBuilder.build's order
    (no reassignment: replicas never change here)."""
    acceptable = is_acceptable or rules.is_acceptable
    isr = list(target_isr)
    elr, last_known = list(part.eligible_leader_replicas), list(part.last_known_elr)
    record: dict = {}
    if rules.elr_enabled:  # maybePopulateTargetElr
        if len(isr) >= rules.min_isr(part.topic_name):
            elr, last_known = [], []
        else:
            keep = set(isr)
            candidates = set(elr) | set(part.isr)
            elr = sorted(b for b in candidates if b not in keep)
            last_known = sorted(b for b in candidates | set(last_known) if b not in keep and b not in elr)
    leader, unclean = _elect_one(part, isr, elr, acceptable, rules.elr_enabled)  # tryElection
    if leader != part.leader:
        if leader in elr:
            isr = [leader]
            elr = [b for b in elr if b != leader]
        record["Leader"] = leader
        if unclean:  # only the last known leader here: the ISR becomes that leader alone
            record["Isr"] = [leader]
            if part.leader_recovery_state != RECOVERING:
                record["LeaderRecoveryState"] = RECOVERING
    if not rules.elr_enabled or unclean:  # maybeUpdateRecordElr
        elr = []
    if elr != list(part.eligible_leader_replicas):
        record["EligibleLeaderReplicas"] = elr
    if "Isr" not in record and (isr or rules.elr_enabled) and isr != list(part.isr):
        record["Isr"] = isr
    if rules.bump_leader_epoch_on_shrink and "Leader" not in record and "Isr" in record \
            and not set(part.isr) <= set(isr):
        record["Leader"] = part.leader  # triggerLeaderEpochBumpForIsrShrinkIfNeeded
    if rules.elr_enabled:  # maybeUpdateLastKnownLeader
        new_leader = record.get("Leader", NO_LEADER_CHANGE)
        if record.get("Isr") == [] and (len(part.last_known_elr) != 1 or part.last_known_elr[0] != part.leader):
            record["LastKnownElr"] = [part.leader]
        elif (new_leader >= 0 or (part.leader != NO_LEADER and new_leader != NO_LEADER)) and part.last_known_elr:
            record["LastKnownElr"] = []
    if target_recovery_state is not None and target_recovery_state != part.leader_recovery_state:
        record["LeaderRecoveryState"] = target_recovery_state
    if not record:
        return None
    if rules.record_version < 2:  # no ELR fields before PartitionChangeRecord v2 (they are empty there)
        record.pop("EligibleLeaderReplicas", None)
        record.pop("LastKnownElr", None)
        if not record:
            return None
    return {"TopicId": part.topic_id, "PartitionId": part.partition_id, **record}


def _elect_one(part: PartitionRegistration, isr: list[int], elr: list[int], acceptable,
               elr_enabled: bool) -> tuple[int, bool]:
    """(leader, unclean): electAnyLeader for one partition."""
    def valid(b: int) -> bool:
        return (b in isr or (not isr and b in elr)) and acceptable(b)

    if part.leader >= 0 and valid(part.leader):
        return part.leader, False
    for b in part.replicas:
        if valid(b):
            return b, False
    # canElectLastKnownLeader: ELR on, ISR and ELR empty, exactly one last known leader
    if elr_enabled and not isr and not elr and len(part.last_known_elr) == 1 and acceptable(part.last_known_elr[0]):
        return part.last_known_elr[0], True
    return NO_LEADER, False


# ---- record values ------------------------------------------------------------------------------------


def encode_changes(changes: PartitionChanges) -> list[bytes]:
    """Framed PartitionChangeRecord values, the block from numpy templates (one per shape), the
    extras through the generic codec. Byte layout of a block record (flexible versions):

        frame     01 05 <version>              uvarints: frame version, apiKey 5, record version
        PartitionId  int32 BE
        TopicId      16 bytes (most significant half first)
        tag count    uvarint (1 or 2)
        [Isr]        00 <size = 1 + 4n> <n + 1> n x int32 BE      tag 0, compact array
        [Leader]     01 04 int32 BE                                tag 1
    """
    version = changes.record_version
    n = len(changes.partition_id)
    out: list[bytes | None] = [None] * n
    has_isr = changes.isr_count >= 0
    has_leader = changes.leader != NO_LEADER_CHANGE
    wide = has_isr & (changes.isr_count > _MAX_TEMPLATE_ISR)
    for i in np.flatnonzero(wide).tolist():  # rare: ISRs longer than the template handles
        out[i] = codec.encode_record("PartitionChangeRecord", version, _block_record(changes, i))
    shape = np.where(has_isr, changes.isr_count + 1, 0).astype(np.int64) * 2 + has_leader
    shape[wide] = -1
    for key in np.unique(shape[shape >= 0]).tolist():
        idx = np.flatnonzero(shape == key)
        isr_n, leader = key // 2 - 1, bool(key & 1)
        values = _template(changes, idx, version, isr_n, leader)
        for j, i in enumerate(idx.tolist()):
            out[i] = values[j]
    out.extend(codec.encode_record("PartitionChangeRecord", version, data) for data in changes.extra)
    return out


def _template(changes: PartitionChanges, idx: np.ndarray, version: int, isr_n: int, leader: bool) -> list[bytes]:
    fields = [("frame", "u1", 3), ("pid", ">i4"), ("tid", ">i8", 2), ("tags", "u1")]
    if isr_n >= 0:
        fields += [("isr_head", "u1", 3), ("isr", ">i4", isr_n)] if isr_n else [("isr_head", "u1", 3)]
    if leader:
        fields += [("leader_head", "u1", 2), ("leader", ">i4")]
    layout = np.dtype(fields)
    rec = np.zeros(len(idx), dtype=layout)
    rec["frame"] = (1, _API_PARTITION_CHANGE, version)
    rec["pid"] = changes.partition_id[idx]
    rec["tid"][:, 0] = changes.topic_hi[idx]
    rec["tid"][:, 1] = changes.topic_lo[idx]
    rec["tags"] = int(isr_n >= 0) + int(leader)
    if isr_n >= 0:
        rec["isr_head"] = (0, 1 + 4 * isr_n, isr_n + 1)
        if isr_n:
            rec["isr"] = changes.isr[idx, :isr_n]
    if leader:
        rec["leader_head"] = (1, 4)
        rec["leader"] = changes.leader[idx]
    raw = rec.tobytes()
    size = layout.itemsize
    return [raw[k * size:(k + 1) * size] for k in range(len(idx))]


def _block_record(changes: PartitionChanges, i: int) -> dict:
    data = {"TopicId": _uuid(changes.topic_hi[i], changes.topic_lo[i]), "PartitionId": int(changes.partition_id[i])}
    if changes.isr_count[i] >= 0:
        data["Isr"] = [int(b) for b in changes.isr[i, :changes.isr_count[i]]]
    if changes.leader[i] != NO_LEADER_CHANGE:
        data["Leader"] = int(changes.leader[i])
    return data


# ---- the broker events ----------------------------------------------------------------------------------


def fence_changes(image: MetadataImage, broker: int, *, default_min_isr: int = 1) -> PartitionChanges:
    """A broker is fenced (or shuts down): it leaves every ISR it is in (unless it is the last
    member) and every leadership it holds (Kafka's handleBrokerFenced /
    handleBrokerInControlledShutdown)."""
    rules = rules_for(image, remove=broker, default_min_isr=default_min_isr)
    return plan_changes(image.topics, rows_with_isr_member(image.topics, broker), rules, remove=broker)


def unfence_changes(image: MetadataImage, broker: int, *, default_min_isr: int = 1) -> PartitionChanges:
    """A broker is unfenced: offline partitions (leader -1) elect a leader again, the broker
    counting as acceptable (Kafka's handleBrokerUnfenced)."""
    rules = rules_for(image, add=broker, default_min_isr=default_min_isr)
    return plan_changes(image.topics, rows_without_leader(image.topics), rules)


# ---- healing: ISR expansion, preferred leaders, ElectLeaders ----------------------------------------
#
# In a metadata-only cluster a replica holds no data to copy, so a replica whose broker is
# registered, unfenced and not shutting down is in sync by definition: the controller writes the
# ISR expansion Kafka's partition leader would ask for (AlterPartition) once the follower caught
# up. The preferred replica is the first of the replica list (Kafka's preferred leader).


def rows_missing_live_replicas(topics: TopicsImage, acceptable: np.ndarray) -> np.ndarray:
    """Partitions with a leader and an acceptable replica outside their ISR."""
    def predicate(a, n):
        replicas, isr = a["replicas"][:n], a["isr"][:n]
        in_isr = (replicas[:, :, None] == isr[:, None, :]).any(axis=2)
        missing = (replicas >= 0) & ~in_isr & np.isin(replicas, acceptable)
        return missing.any(axis=1) & (a["leader"][:n] >= 0)
    return _scan(topics, predicate)


def rows_with_replica_outside_isr(topics: TopicsImage, broker: int) -> np.ndarray:
    """Partitions with a leader where ``broker`` is a replica but not in the ISR."""
    return _scan(topics, lambda a, n: (a["replicas"][:n] == broker).any(axis=1)
                 & ~(a["isr"][:n] == broker).any(axis=1) & (a["leader"][:n] >= 0))


def expansion_changes(topics: TopicsImage, rows: np.ndarray, rules: Rules) -> PartitionChanges:
    """The ISR of partition ``rows`` grows by every acceptable replica outside it (appended in
    replica order); leaders stay. Partitions with ELR state, or all when ELR is enabled, go
    through ``build_change`` (its ELR rules apply to the grown ISR)."""
    rows = np.asarray(rows, dtype=np.int64)
    out = PartitionChanges.empty(rules.record_version)
    if not len(rows):
        return out
    p = topics.partitions
    scalar = _elr_rows(p, rows, rules)
    if scalar.any():
        out.extra = _scalar_expansions(topics, rows[scalar], rules)
        rows = rows[~scalar]
    if not len(rows):
        return out
    replicas, isr = p.gather(rows, "replicas"), p.gather(rows, "isr")
    in_isr = (replicas[:, :, None] == isr[:, None, :]).any(axis=2)
    missing = (replicas >= 0) & ~in_isr & np.isin(replicas, rules.acceptable)
    grown, counts = _compact_without(np.concatenate([isr, np.where(missing, replicas, -1)], axis=1), -2)
    changed = np.flatnonzero(missing.any(axis=1))
    trows = p.gather(rows[changed], "topic_row")
    out.topic_hi = topics.topics.gather(trows, "id_hi")
    out.topic_lo = topics.topics.gather(trows, "id_lo")
    out.partition_id = p.gather(rows[changed], "partition_id")
    out.leader = np.full(len(changed), NO_LEADER_CHANGE, dtype=np.int32)
    out.isr = grown[changed]
    out.isr_count = counts[changed]
    return out


def _elr_rows(p, rows: np.ndarray, rules: Rules) -> np.ndarray:
    """Rows the scalar builder takes: ELR state, or a RECOVERING leader (its ISR may not grow
    before it is RECOVERED; metadata-only, it has nothing to recover, so the change says so)."""
    if rules.elr_enabled:
        return np.ones(len(rows), dtype=bool)
    return (p.gather(rows, "eligible_leader_replicas") >= 0).any(axis=1) | \
        (p.gather(rows, "last_known_elr") >= 0).any(axis=1) | (p.gather(rows, "leader_recovery_state") == RECOVERING)


def _scalar_expansions(topics: TopicsImage, rows: np.ndarray, rules: Rules) -> list[dict]:
    out = []
    for prow in rows.tolist():
        part = topics.registration(prow)
        if part is None:
            continue
        target = list(part.isr) + [b for b in part.replicas if b not in part.isr and rules.is_acceptable(b)]
        data = build_change(part, target, rules, target_recovery_state=RECOVERED)
        if data is not None:
            out.append(data)
    return out


def expand_isr_changes(image: MetadataImage, broker: int, *, default_min_isr: int = 1) -> PartitionChanges:
    """``broker`` is being unfenced: it rejoins the ISR of every partition with a leader where it
    is a replica (metadata-only: nothing to copy first). With ``add=broker`` it counts as live."""
    rules = rules_for(image, add=broker, default_min_isr=default_min_isr)
    return expansion_changes(image.topics, rows_with_replica_outside_isr(image.topics, broker), rules)


def preferred_rows(topics: TopicsImage, acceptable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, preferred replica) of partitions whose preferred replica is acceptable and in the
    ISR but not the leader: Kafka's imbalanced partitions a preferred election moves."""
    def predicate(a, n):
        first = a["replicas"][:n, 0]
        in_isr = (a["isr"][:n] == first[:, None]).any(axis=1)
        return (first >= 0) & (a["leader"][:n] != first) & in_isr & np.isin(first, acceptable)
    rows = _scan(topics, predicate)
    return rows, topics.partitions.gather(rows, "replicas")[:, 0] if len(rows) else np.zeros(0, np.int32)


def imbalanced_brokers(topics: TopicsImage, percentage: int) -> np.ndarray:
    """Preferred replicas (broker ids) that lead at most ``100 - percentage`` % of the partitions
    they are preferred for, i.e. whose imbalance ratio is above
    ``leader.imbalance.per.broker.percentage``: Kafka's checkAndTriggerAutoLeaderRebalance."""
    preferred, led = [], []
    for chunk in topics.partitions.chunks:
        a, n = chunk.arrays, chunk.rows
        live = (a["topic_row"][:n] >= 0) & (a["partition_id"][:n] >= 0)
        first = a["replicas"][:n, 0][live]
        preferred.append(first)
        led.append(a["leader"][:n][live] == first)
    if not preferred:
        return np.zeros(0, dtype=np.int32)
    first, ok = np.concatenate(preferred), np.concatenate(led)
    brokers, inverse = np.unique(first, return_inverse=True)
    total = np.bincount(inverse, minlength=len(brokers))
    not_led = np.bincount(inverse, weights=~ok, minlength=len(brokers))
    return brokers[(brokers >= 0) & (not_led * 100 > total * percentage)].astype(np.int32)


def preferred_changes(image: MetadataImage, *, brokers: np.ndarray | None = None,
                      default_min_isr: int = 1) -> PartitionChanges:
    """Preferred-leader elections: every partition whose preferred replica is acceptable, in the
    ISR and not leading gets it as leader (only those preferring ``brokers`` when given)."""
    rules = rules_for(image, default_min_isr=default_min_isr)
    rows, first = preferred_rows(image.topics, rules.acceptable)
    if brokers is not None:
        rows, first = rows[np.isin(first, brokers)], first[np.isin(first, brokers)]
    return leader_changes(image.topics, rows, first.astype(np.int32), rules)


def leader_changes(topics: TopicsImage, rows: np.ndarray, leaders: np.ndarray, rules: Rules) -> PartitionChanges:
    """Leader = ``leaders[i]`` for partition ``rows[i]`` (the ISR unchanged): a block of Leader-only
    records."""
    out = PartitionChanges.empty(rules.record_version)
    if not len(rows):
        return out
    p = topics.partitions
    trows = p.gather(rows, "topic_row")
    out.topic_hi = topics.topics.gather(trows, "id_hi")
    out.topic_lo = topics.topics.gather(trows, "id_lo")
    out.partition_id = p.gather(rows, "partition_id")
    out.leader = np.asarray(leaders, dtype=np.int32)
    out.isr = np.full((len(rows), 1), -1, dtype=np.int32)
    out.isr_count = np.full(len(rows), -1, dtype=np.int32)
    return out


PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' ElectionType


def elect_one(part: PartitionRegistration, election_type: int, rules: Rules) -> tuple[dict | None, str | None]:
    """(the PartitionChangeRecord data, None) for one ElectLeaders partition, or (None, the Kafka
    error name): ELECTION_NOT_NEEDED when the preferred replica already leads (PREFERRED) or a
    leader exists (UNCLEAN); PREFERRED_LEADER_NOT_AVAILABLE when the preferred replica is not in
    the ISR or not acceptable; ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica can lead
    (Kafka's ReplicationControlManager.electLeader)."""
    preferred = part.replicas[0] if part.replicas else NO_LEADER
    if election_type == PREFERRED:
        if part.leader == preferred:
            return None, "election_not_needed"
        if preferred not in part.isr or not rules.is_acceptable(preferred):
            return None, "preferred_leader_not_available"
        return {"TopicId": part.topic_id, "PartitionId": part.partition_id, "Leader": preferred}, None
    if part.leader != NO_LEADER:
        return None, "election_not_needed"
    data = build_change(part, list(part.isr), rules)
    if data is not None and data.get("Leader", NO_LEADER) >= 0:
        return data, None
    # unclean: the first live replica leads with an ISR of itself. Kafka marks it RECOVERING until
    # the leader reports its log recovered; a metadata-only replica has no log to recover, so the
    # partition stays RECOVERED (else nothing would ever end the RECOVERING state)
    live = [b for b in part.replicas if rules.is_acceptable(b)]
    if not live:
        return None, "eligible_leaders_not_available"
    return {"TopicId": part.topic_id, "PartitionId": part.partition_id, "Leader": live[0], "Isr": [live[0]]}, None
