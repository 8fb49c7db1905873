"""ImageWriter: an image back out as metadata records at a chosen metadata.version, with a loss report.

The order is the one Kafka's image writer uses, so a snapshot loads the same way anywhere:
features (metadata.version first, then the ZK migration state), cluster (brokers, then controllers), topics (each TopicRecord
followed by its PartitionRecords), configs, client quotas, producer ids, ACLs, SCRAM credentials,
delegation tokens. Record versions come from versions.py for the target level.

Loss: writing at a lower metadata.version drops fields the lower record versions lack. Every
dropped field that held a non-default value is reported (record type, entity, field names) —
the KIP-1155 SAFE_DOWNGRADE refuses when the report is not empty; UNSAFE_DOWNGRADE writes anyway
and logs it. Kafka's own rule for directories is kept: directories that are all MIGRATING are
the default and lose nothing.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from kraftlog.engine.image import versions
from kraftlog.engine.image.image import METADATA_VERSION, MetadataImage, thaw
from kraftlog.engine.image.topics import MIGRATING_DIRECTORY, TOPIC_EPOCH_TAG, TopicsImage, topic_epoch_tags
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records import wire

API_KEYS = {name: schema.api_key for name, schema in codec.RECORD_TYPES.items()}


@dataclass(frozen=True)
class Loss:
    record_type: str
    entity: str
    fields: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.record_type} {self.entity}: {', '.join(self.fields)}"


@dataclass
class ImageWrite:
    """The records of an image at one metadata.version, as framed values in write order.

    A framed value starts with uvarints frameVersion (1), apiKey, version; every apiKey and version
    we write is below 128, so they are the value's second and third bytes (read back on demand
    rather than kept in lists beside a million values)."""

    metadata_version: int
    values: list[bytes] = field(default_factory=list)
    losses: list[Loss] = field(default_factory=list)

    @property
    def records(self) -> list[tuple[int, int, bytes]]:
        """(api key, version, framed value) per record."""
        return [(value[1], value[2], value) for value in self.values]

    def add(self, api_key: int, version: int, value: bytes) -> None:
        assert value[1] == api_key and value[2] == version, "frame bytes disagree with the record type"
        self.values.append(value)


def write_image(image: MetadataImage, metadata_version: int | None = None, *,
                with_topic_epochs: bool = True, fast: bool = True) -> ImageWrite:
    """Every record of ``image`` at ``metadata_version`` (default: the image's own). ``fast=False``
    encodes every record with the generic codec (the reference the fast path is tested against)."""
    level = image.features.metadata_version if metadata_version is None else metadata_version
    if level < versions.MINIMUM_BOOTSTRAP:
        raise versions.UnknownMetadataVersionError(
            f"cannot write an image at metadata.version {level}: below {versions.name(versions.MINIMUM_BOOTSTRAP)}")
    out = ImageWrite(level)
    for name, version, entity, data in _records(image, level, with_topic_epochs, fast, out):
        lost = codec.fields_lost(name, data, version)
        if lost:
            out.losses.append(Loss(name, entity, tuple(lost)))
        out.add(API_KEYS[name], version, codec.encode_record(name, version, data, allow_loss=True))
    return out


def _records(image: MetadataImage, level: int, with_topic_epochs: bool, fast: bool,
             out: ImageWrite) -> Iterator[tuple[str, int, str, dict]]:
    """Records to encode with the generic codec, in order; the topics section is written straight
    into ``out`` (it needs no generic encoding for the common shapes)."""
    yield "FeatureLevelRecord", 0, METADATA_VERSION, {"Name": METADATA_VERSION, "FeatureLevel": level}
    for name, feature_level in sorted(image.features.finalized.items()):
        yield "FeatureLevelRecord", 0, name, {"Name": name, "FeatureLevel": feature_level}
    yield from _zk_migration_state(image, level, out)
    yield from _cluster(image, level)
    yield from _topics(image.topics, level, with_topic_epochs, fast, out)
    for (resource_type, resource_name), configs in sorted(image.configs.items()):
        for key, value in sorted(configs.items()):
            yield "ConfigRecord", 0, f"{resource_type}:{resource_name}", {
                "ResourceType": resource_type, "ResourceName": resource_name, "Name": key, "Value": value}
    for entity, quotas in sorted(image.client_quotas.items(), key=lambda kv: str(kv[0])):
        for key, value in sorted(quotas.items()):
            yield "ClientQuotaRecord", 0, str(entity), {
                "Entity": [{"EntityType": t, "EntityName": n} for t, n in entity], "Key": key, "Value": value,
                "Remove": False}
    p = image.producer_ids
    if p.next_producer_id >= 0:
        yield "ProducerIdsRecord", 0, "producer ids", {
            "BrokerId": p.broker_id, "BrokerEpoch": p.broker_epoch, "NextProducerId": p.next_producer_id}
    for acl_id, data in sorted(image.acls.items(), key=lambda kv: str(kv[0])):
        yield "AccessControlEntryRecord", 0, str(acl_id), thaw(data)
    for key, data in sorted(image.scram.items()):
        yield "UserScramCredentialRecord", 0, f"{key[0]}/{key[1]}", thaw(data)
    for token_id, data in sorted(image.delegation_tokens.items()):
        yield "DelegationTokenRecord", 0, token_id, thaw(data)


def _zk_migration_state(image: MetadataImage, level: int, out: ImageWrite):
    """The ZK migration state the image keeps, right after the features (Kafka's FeaturesImage
    writes it there from 3.4-IV0 on); below that level a state other than NONE (0) is a loss."""
    state = image.zk_migration_state
    if state is None:
        return
    if level >= versions.ZK_MIGRATION:
        yield "ZkMigrationStateRecord", 0, "zk migration", {"ZkMigrationState": state}
    elif state:
        out.losses.append(Loss("ZkMigrationStateRecord", "zk migration", ("ZkMigrationState",)))


def _cluster(image: MetadataImage, level: int):
    broker_version = versions.register_broker_record_version(level)
    for broker_id, b in sorted(image.cluster.brokers.items()):
        yield "RegisterBrokerRecord", broker_version, f"broker {broker_id}", {
            "BrokerId": b.broker_id, "IsMigratingZkBroker": b.is_migrating_zk_broker,
            "IncarnationId": b.incarnation_id, "BrokerEpoch": b.epoch,
            "EndPoints": [{"Name": e.name, "Host": e.host, "Port": e.port, "SecurityProtocol": e.security_protocol}
                          for e in b.endpoints],
            "Features": [{"Name": n, "MinSupportedVersion": lo, "MaxSupportedVersion": hi}
                         for n, lo, hi in b.supported_features],
            "Rack": b.rack, "Fenced": b.fenced, "InControlledShutdown": b.in_controlled_shutdown,
            "LogDirs": list(b.log_dirs)}
    for controller_id, c in sorted(image.cluster.controllers.items()):
        data = {"ControllerId": c.controller_id, "IncarnationId": c.incarnation_id,
                "ZkMigrationReady": c.zk_migration_ready,
                "EndPoints": [{"Name": e.name, "Host": e.host, "Port": e.port, "SecurityProtocol": e.security_protocol}
                              for e in c.endpoints],
                "Features": [{"Name": n, "MinSupportedVersion": lo, "MaxSupportedVersion": hi}
                             for n, lo, hi in c.supported_features]}
        if level >= versions.CONTROLLER_REGISTRATION:
            yield "RegisterControllerRecord", 0, f"controller {controller_id}", data


def _topics(topics: TopicsImage, level: int, with_topic_epochs: bool, fast: bool, out: ImageWrite):
    """TopicRecord then its PartitionRecords, per live topic in row order. TopicRecords and plain
    partitions (no extras) are encoded here directly; the rest are yielded for the generic codec
    (and its loss check), which appends them to ``out`` in place, so the order is kept."""
    version = versions.partition_record_version(level)
    plain = _encode_plain_partitions(topics, version) if fast else [None] * topics.partitions.rows
    table = topics.topics
    live = np.flatnonzero(table.column("live"))
    ids = np.stack([table.gather(live, "id_hi"), table.gather(live, "id_lo")], axis=1).astype(">i8").tobytes()
    firsts = table.gather(live, "first_row").tolist()
    counts = table.gather(live, "partition_count").tolist()
    epochs = table.gather(live, "topic_epoch").tolist()
    values = out.values
    for k, row in enumerate(live.tolist()):
        name = topics.topic_name(row)
        topic_id = ids[16 * k:16 * k + 16]
        if fast:
            values.append(_topic_value(name, topic_id, epochs[k] if with_topic_epochs else -1))
        else:
            data = {"Name": name, "TopicId": uuid.UUID(bytes=topic_id)}
            if with_topic_epochs and epochs[k] >= 0:
                data[codec.UNKNOWN_TAGS] = {TOPIC_EPOCH_TAG: epochs[k].to_bytes(8, "big", signed=True)}
            yield "TopicRecord", 0, f"topic {name}", data
        first = firsts[k]
        encoded = plain[first:first + counts[k]]
        if None not in encoded:  # the common case: every partition pre-encoded
            values.extend(encoded)
            continue
        for prow in range(first, first + counts[k]):
            value = plain[prow]
            if value is not None:
                values.append(value)
                continue
            reg = topics.registration(prow)
            if reg is not None:
                yield "PartitionRecord", version, f"partition {name}-{reg.partition_id}", _partition_data(reg, version)


def _topic_value(name: str, topic_id: bytes, epoch: int) -> bytes:
    """A framed TopicRecord v0: frame 01 02 00 | Name (uvarint len+1, UTF-8) | TopicId 16 | tagged
    fields: none, or exactly our topic epoch (01 | tag 10000 = 90 4e | size 08 | int64)."""
    encoded = name.encode()
    length = wire.encode_uvarint(len(encoded) + 1)
    tags = topic_epoch_tags(epoch)
    return b"\x01\x02\x00" + length + encoded + topic_id + tags


def _encode_plain_partitions(topics: TopicsImage, version: int) -> list[bytes | None]:
    """Indexed by partition row: the framed PartitionRecord value of every live partition whose record is
    fully described by its fixed columns (no removing/adding replicas, ELR, the default leader
    recovery state; directories only from v1, one per replica): one numpy template per (replica
    count, ISR count).

    Layout (flexible version): frame uvarints 1, 3, version | PartitionId i32 | TopicId 16 |
    Replicas uvarint(n+1), n x i32 | Isr (same) | RemovingReplicas 0x01 | AddingReplicas 0x01 |
    Leader i32 | LeaderEpoch i32 | PartitionEpoch i32 | [v1+: Directories uvarint(n+1), n x 16
    bytes (all zero: MIGRATING)] | tagged fields 0x00 (LeaderRecoveryState 0 and empty ELR are not
    written). Every partition a Kafka 3.7+ controller (and ours) creates has directories, so they
    must ride here: the generic codec costs ~15 us a partition, 1.5 s per snapshot at 100k.
    """
    t = topics.partitions
    by_row = np.full(t.rows, None, dtype=object)
    rows = topics.live_partition_rows()
    if not len(rows):
        return by_row.tolist()
    sparse = ("removing_replicas", "adding_replicas", "eligible_leader_replicas", "last_known_elr")

    def column(name: str) -> np.ndarray:  # whole columns: one concatenation beats a per-chunk gather here
        return t.column(name)[rows]

    plain = column("leader_recovery_state") == 0
    for name in sparse:
        plain &= (column(name) < 0).all(axis=1)
    replicas, codes = column("replicas"), column("directories")
    if codes.shape[1] < replicas.shape[1]:  # codes[:, :r] below must be r wide (-1: MIGRATING)
        codes = np.pad(codes, ((0, 0), (0, replicas.shape[1] - codes.shape[1])), constant_values=-1)
    rcount, dcount = (replicas >= 0).sum(axis=1), (codes >= 0).sum(axis=1)
    # below v1 a directory other than MIGRATING is a loss the generic codec reports
    plain &= (dcount == 0) if version < 1 else ((dcount == 0) | (dcount == rcount))
    rows, replicas, rcount, codes, dcount = rows[plain], replicas[plain], rcount[plain], codes[plain], dcount[plain]
    isr = column("isr")
    icount = (isr >= 0).sum(axis=1)
    topic_rows = column("topic_row")
    id_hi, id_lo = topics.topics.column("id_hi")[topic_rows], topics.topics.column("id_lo")[topic_rows]
    ids = np.stack([id_hi, id_lo], axis=1).astype(">i8").view(np.uint8).reshape(-1, 16)
    columns = {name: column(name) for name in ("partition_id", "leader", "leader_epoch", "partition_epoch")}
    directory_bytes = _directory_bytes(topics.directory_ids) if version >= 1 and dcount.any() else None
    for r, i in sorted(set(zip(rcount.tolist(), icount.tolist(), strict=True))):
        if not r or not i or r + 1 >= 0x80 or i + 1 >= 0x80:
            continue  # empty lists or multi-byte lengths: the generic codec handles these rare shapes
        sel = np.flatnonzero((rcount == r) & (icount == i))
        directories = None
        if directory_bytes is not None:  # codes -> 16 bytes each; no codes (-1) -> MIGRATING (zeros)
            directories = directory_bytes[codes[sel, :r]].reshape(len(sel), 16 * r)
        by_row[rows[sel]] = partition_record_values(
            version, ids[sel], columns["partition_id"][sel], replicas[sel, :r], isr[sel, :i], columns["leader"][sel],
            leader_epochs=columns["leader_epoch"][sel], partition_epochs=columns["partition_epoch"][sel],
            directories=directories)
    return by_row.tolist()


def _directory_bytes(directory_ids) -> np.ndarray:
    """uint8 [len(directory_ids) + 1, 16]: row k the UUID of directory code k, and the last row
    (what a code of -1, "none", indexes) MIGRATING's zero bytes."""
    table = np.zeros((len(directory_ids) + 1, 16), dtype=np.uint8)
    for k, directory in enumerate(directory_ids):
        table[k] = np.frombuffer(directory.bytes, dtype=np.uint8)
    table[-1] = np.frombuffer(MIGRATING_DIRECTORY.bytes, dtype=np.uint8)
    return table


def partition_record_values(version: int, topic_ids, partition_ids, replicas, isr, leaders, *, leader_epochs=0,
                            partition_epochs=0, directories=None) -> list[bytes]:
    """Framed PartitionRecord values for rows of one shape, in one numpy pass: ``replicas`` int
    [n, R] and ``isr`` int [n, I] at their exact widths (1..126: one-byte compact lengths),
    ``topic_ids`` uint8 [n, 16], ``directories`` uint8 [n, 16 R] (v1+; None: MIGRATING, zero
    bytes). No removing / adding replicas, recovery state 0, no ELR: byte for byte what
    ``codec.encode_record`` writes for such a partition (the writer's and the controller's tests
    check it). Used by the image writer and by the controller's CreateTopics (records_fast)."""
    r, i = replicas.shape[1], isr.shape[1]
    fields = [("frame", "u1", 3), ("pid", ">i4"), ("tid", "u1", 16), ("rlen", "u1"), ("replicas", ">i4", (r,)),
              ("ilen", "u1"), ("isr", ">i4", (i,)), ("removing", "u1"), ("adding", "u1"), ("leader", ">i4"),
              ("leader_epoch", ">i4"), ("partition_epoch", ">i4")]
    if version >= 1:
        fields += [("dlen", "u1"), ("dirs", "u1", (16 * r,))]
    fields.append(("tags", "u1"))
    layout = np.dtype(fields)
    rec = np.zeros(len(partition_ids), dtype=layout)
    rec["frame"] = (1, 3, version)  # frame version 1, apiKey 3 (PartitionRecord), record version
    rec["pid"] = partition_ids
    rec["tid"] = topic_ids
    rec["rlen"], rec["ilen"], rec["removing"], rec["adding"] = r + 1, i + 1, 1, 1
    rec["replicas"] = replicas
    rec["isr"] = isr
    rec["leader"] = leaders
    rec["leader_epoch"] = leader_epochs
    rec["partition_epoch"] = partition_epochs
    if version >= 1:
        rec["dlen"] = r + 1
        if directories is not None:
            rec["dirs"] = directories
    # A void view turns each fixed-size record into a bytes value in C (an "S" view would strip
    # the trailing tagged-fields 0x00).
    return rec.view(f"V{layout.itemsize}").tolist()


def _partition_data(reg, version: int) -> dict:
    data = {
        "PartitionId": reg.partition_id, "TopicId": reg.topic_id, "Replicas": list(reg.replicas),
        "Isr": list(reg.isr), "RemovingReplicas": list(reg.removing_replicas),
        "AddingReplicas": list(reg.adding_replicas), "Leader": reg.leader,
        "LeaderRecoveryState": reg.leader_recovery_state, "LeaderEpoch": reg.leader_epoch,
        "PartitionEpoch": reg.partition_epoch,
    }
    directories = list(reg.directories)
    if version >= 1:
        data["Directories"] = directories or [MIGRATING_DIRECTORY] * len(reg.replicas)
    elif any(d != MIGRATING_DIRECTORY for d in directories):
        data["Directories"] = directories  # reported as lost by fields_lost
    # ELR fields are tagged and written only when non-empty, as Kafka does.
    if reg.eligible_leader_replicas:
        data["EligibleLeaderReplicas"] = list(reg.eligible_leader_replicas)
    if reg.last_known_elr:
        data["LastKnownElr"] = list(reg.last_known_elr)
    return data


_PLAIN_HEAD = struct.Struct(">i16s")  # PartitionId, TopicId after the 3 frame bytes


def parse_plain_partition(value) -> tuple | None:
    """The inverse of the plain PartitionRecord template (see _encode_plain_partitions): for a value
    in exactly that layout, (partition_id, topic id bytes, replicas, isr, leader, leader_epoch,
    partition_epoch); None for any other value (the caller then uses the generic codec)."""
    n = len(value)
    if n < 3 + 20 + 2 or value[0] != 1 or value[1] != 3 or value[2] > 2:
        return None
    version = value[2]
    pos = 23
    r = value[pos] - 1
    if not 0 < r < 0x7F:
        return None
    i_at = pos + 1 + 4 * r
    if i_at >= n:
        return None
    i = value[i_at] - 1
    if not 0 < i < 0x7F:
        return None
    tail = i_at + 1 + 4 * i  # removing, adding, leader, epochs
    dirs = 1 + 16 * r if version >= 1 else 0
    if n != tail + 2 + 12 + dirs + 1 or value[tail] != 1 or value[tail + 1] != 1 or value[n - 1] != 0:
        return None
    if dirs and (value[tail + 14] != r + 1 or any(value[tail + 15:n - 1])):
        return None  # directories other than MIGRATING: not the plain shape
    pid, tid = _PLAIN_HEAD.unpack_from(value, 3)
    replicas = struct.unpack_from(f">{r}i", value, pos + 1)
    isr = struct.unpack_from(f">{i}i", value, i_at + 1)
    leader, leader_epoch, partition_epoch = struct.unpack_from(">iii", value, tail + 2)
    return pid, tid, replicas, isr, leader, leader_epoch, partition_epoch
