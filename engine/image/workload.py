"""The reference metadata workload: Kafka's benchmark shape, scalable, with churn on top.

Shape (jmh TopicsImageSnapshotLoadBenchmark): ``topics`` topics x ``partitions_per_topic``
partitions, replication factor ``replication_factor``, brokers chosen so each holds
``replicas_per_broker`` replicas (100,000 x 10, RF 3, 10,000 per broker -> 300 brokers), replicas
and leaders assigned round-robin. ``generate`` yields the records in the order a controller would
write them: metadata.version, broker registrations and unfencing, then per topic its TopicRecord
and PartitionRecords; ``churn`` yields further changes (leader elections, ISR shrink / expand,
broker fence / unfence, topic deletes, config changes) drawn from a seeded RNG.

Records are framed metadata-record values (bytes). PartitionRecords of the base shape are built
from a byte template with numpy (fixed size when the RF is fixed), checked against the generic
codec in tests; everything else goes through the generic codec. The production shape (a
controller's tail over time on top of this base) is production.py.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from kraftlog.engine.image import versions
from kraftlog.engine.records import metadata as codec


@dataclass(frozen=True)
class WorkloadShape:
    topics: int = 100_000
    partitions_per_topic: int = 10
    replication_factor: int = 3
    replicas_per_broker: int = 10_000
    metadata_version: int = versions.LATEST
    seed: int = 0

    @property
    def partitions(self) -> int:
        return self.topics * self.partitions_per_topic

    @property
    def base_records(self) -> int:
        """Records ``generate`` yields: metadata.version, a registration and an unfence per broker,
        then each topic's TopicRecord and PartitionRecords."""
        return 1 + 2 * self.brokers + self.topics * (1 + self.partitions_per_topic)

    @property
    def brokers(self) -> int:
        """As Kafka's benchmark: replicas / replicas_per_broker, rounded down to a multiple of 3."""
        brokers = self.partitions * self.replication_factor // self.replicas_per_broker
        return max(self.replication_factor, brokers - brokers % 3)

    @classmethod
    def scaled(cls, partitions: int, **kw) -> WorkloadShape:
        """The reference shape for ``partitions`` partitions (10 per topic, 10,000 replicas per broker)."""
        per_topic = kw.pop("partitions_per_topic", 10)
        return cls(topics=max(1, partitions // per_topic), partitions_per_topic=per_topic, **kw)


def topic_id(shape: WorkloadShape, t: int) -> uuid.UUID:
    """Deterministic topic ids (version-4 shaped, seeded) so a workload is reproducible."""
    rng = random.Random(shape.seed * 1_000_003 + t)
    return uuid.UUID(int=rng.getrandbits(128), version=4)


def topic_name(t: int) -> str:
    return f"topic-{t:06d}"


def base_broker_epoch(b: int) -> int:
    """The epoch broker ``b`` registers at in the base workload."""
    return 100 + b


def base_incarnation(shape: WorkloadShape, b: int) -> uuid.UUID:
    return uuid.UUID(int=(shape.seed << 32) + b + 1)


def registration(b: int, *, epoch: int, incarnation: uuid.UUID, fenced: bool = True) -> dict:
    """RegisterBrokerRecord data of broker ``b`` (one listener, rack b mod 3)."""
    return {"BrokerId": b, "IncarnationId": incarnation, "BrokerEpoch": epoch,
            "EndPoints": [{"Name": "PLAINTEXT", "Host": f"broker-{b}.example", "Port": 9092, "SecurityProtocol": 0}],
            "Features": [{"Name": "metadata.version", "MinSupportedVersion": versions.MINIMUM_BOOTSTRAP,
                          "MaxSupportedVersion": versions.LATEST}],
            "Rack": f"rack-{b % 3}", "Fenced": fenced}


def broker_records(shape: WorkloadShape) -> Iterator[bytes]:
    rb_version = versions.register_broker_record_version(shape.metadata_version)
    for b in range(shape.brokers):
        yield codec.encode_record("RegisterBrokerRecord", rb_version, registration(
            b, epoch=base_broker_epoch(b), incarnation=base_incarnation(shape, b)), allow_loss=True)
    for b in range(shape.brokers):
        yield codec.encode_record("UnfenceBrokerRecord", 0, {"Id": b, "Epoch": base_broker_epoch(b)})


def assignment(shape: WorkloadShape) -> np.ndarray:
    """Replicas int32[partitions, RF], round-robin: partition i starts at broker i mod brokers."""
    p = np.arange(shape.partitions, dtype=np.int64)
    offsets = np.arange(shape.replication_factor, dtype=np.int64)
    return ((p[:, None] + offsets[None, :]) % shape.brokers).astype(np.int32)


def partition_values(shape: WorkloadShape, topic_ids: list[uuid.UUID], replicas: np.ndarray) -> list[bytes]:
    """Framed PartitionRecord values (leader = first replica, ISR = replicas, epochs 0), built with
    one numpy template: every value has the same layout when the RF is fixed and small.

    Layout (flexible version; frame uvarints 1, 3, version):
        frame(3) PartitionId i32, TopicId 16, Replicas (uvarint n+1, n x i32), Isr (same),
        RemovingReplicas (0x01 = empty), AddingReplicas (0x01), Leader i32, LeaderEpoch i32,
        PartitionEpoch i32, [v1+: Directories (uvarint n+1, n x 16 zero bytes = MIGRATING)],
        tagged fields count 0
    """
    rf = shape.replication_factor
    version = versions.partition_record_version(shape.metadata_version)
    if rf + 1 >= 0x80:
        raise ValueError("the template handles replication factors below 127")
    dirs = (1 + 16 * rf) if version >= 1 else 0
    fields = [("frame", "u1", 3), ("pid", ">i4"), ("tid", "u1", 16), ("rlen", "u1"), ("replicas", ">i4", rf),
              ("ilen", "u1"), ("isr", ">i4", rf), ("removing", "u1"), ("adding", "u1"), ("leader", ">i4"),
              ("leader_epoch", ">i4"), ("partition_epoch", ">i4")]
    if dirs:
        fields += [("dlen", "u1"), ("dirs", "u1", 16 * rf)]
    fields.append(("tags", "u1"))
    layout = np.dtype(fields)
    n = len(replicas)
    rec = np.zeros(n, dtype=layout)
    rec["frame"] = (1, 3, version)
    per_topic = shape.partitions_per_topic
    rec["pid"] = np.arange(n) % per_topic
    tids = np.frombuffer(b"".join(t.bytes for t in topic_ids), dtype=np.uint8).reshape(-1, 16)
    rec["tid"] = np.repeat(tids, per_topic, axis=0)[:n]
    rec["rlen"] = rf + 1
    rec["replicas"] = replicas
    rec["ilen"] = rf + 1
    rec["isr"] = replicas
    rec["removing"] = 1
    rec["adding"] = 1
    rec["leader"] = replicas[:, 0]
    if dirs:
        rec["dlen"] = rf + 1
    raw = rec.tobytes()
    size = layout.itemsize
    return [raw[i * size:(i + 1) * size] for i in range(n)]


def generate(shape: WorkloadShape) -> Iterator[bytes]:
    """Every record of the base workload in controller order (framed values)."""
    yield codec.encode_record("FeatureLevelRecord", 0, {"Name": "metadata.version",
                                                        "FeatureLevel": shape.metadata_version})
    yield from broker_records(shape)
    replicas = assignment(shape)
    block = 10_000  # topics per step: bounded memory for any size
    for first in range(0, shape.topics, block):
        last = min(first + block, shape.topics)
        ids = [topic_id(shape, t) for t in range(first, last)]
        values = partition_values(shape, ids, replicas[first * shape.partitions_per_topic:
                                                         last * shape.partitions_per_topic])
        per_topic = shape.partitions_per_topic
        for i, t in enumerate(range(first, last)):
            yield codec.encode_record("TopicRecord", 0, {"Name": topic_name(t), "TopicId": ids[i]})
            yield from values[i * per_topic:(i + 1) * per_topic]


def image_values(shape: WorkloadShape) -> list[bytes]:
    """The base workload as its image holds it once replayed (what write_image writes): the
    metadata.version, every broker registered unfenced (no UnfenceBrokerRecords), then each
    TopicRecord followed by its PartitionRecords. What a snapshot of ``generate`` contains."""
    values = list(generate(shape))
    n = shape.brokers
    version = versions.register_broker_record_version(shape.metadata_version)
    brokers = []
    for value in values[1:1 + n]:
        record = codec.decode_record(value)
        record.data["Fenced"] = False  # what the image holds after the UnfenceBrokerRecords
        brokers.append(codec.encode_record("RegisterBrokerRecord", version, record.data, allow_loss=True))
    return values[:1] + brokers + values[1 + 2 * n:]


def churn(shape: WorkloadShape, changes: int, *, seed: int = 1) -> Iterator[bytes]:
    """``changes`` records of churn on top of ``generate(shape)``, all valid against it in order."""
    rng = random.Random(seed)
    replicas = assignment(shape)
    n_topics = shape.topics
    isr: dict[int, list[int]] = {}
    deleted: set[int] = set()
    fenced: set[int] = set()
    version = versions.partition_change_record_version(shape.metadata_version)
    produced = 0
    while produced < changes:
        roll = rng.random()
        if roll < 0.45:  # leader election or ISR shrink / expand
            t = rng.randrange(n_topics)
            if t in deleted:
                continue
            p = rng.randrange(shape.partitions_per_topic)
            row = t * shape.partitions_per_topic + p
            full = [int(b) for b in replicas[row]]
            current = isr.get(row, full)
            data = {"TopicId": topic_id(shape, t), "PartitionId": p}
            if roll < 0.15:
                data["Leader"] = rng.choice(current)
            elif len(current) > 1 and roll < 0.30:
                shrunk = current[:-1]
                data["Isr"] = shrunk
                isr[row] = shrunk
            else:
                data["Isr"] = full
                isr[row] = full
            yield codec.encode_record("PartitionChangeRecord", version, data)
        elif roll < 0.60:  # broker fence / unfence
            b = rng.randrange(shape.brokers)
            kind = "UnfenceBrokerRecord" if b in fenced else "FenceBrokerRecord"
            fenced.symmetric_difference_update({b})
            yield codec.encode_record(kind, 0, {"Id": b, "Epoch": base_broker_epoch(b)})
        elif roll < 0.65:  # topic delete
            t = rng.randrange(n_topics)
            if t in deleted:
                continue
            deleted.add(t)
            yield codec.encode_record("RemoveTopicRecord", 0, {"TopicId": topic_id(shape, t)})
        else:  # config change
            t = rng.randrange(n_topics)
            value = None if rng.random() < 0.2 else str(rng.choice([3_600_000, 86_400_000, 604_800_000]))
            yield codec.encode_record("ConfigRecord", 0, {"ResourceType": 2, "ResourceName": topic_name(t),
                                                          "Name": "retention.ms", "Value": value})
        produced += 1
