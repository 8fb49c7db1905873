"""Proves the Spark pipeline's batch side on real Spark (local[2]): the `kraftlog` data source reads
every record of a multi-segment log directory as Arrow rows equal to the generic codec's decoding;
the distributed replay equals the single-node loader's image row for row (partitions with their
epochs, adding/removing replicas, ELR, last-known ELR and directories, topics with KIP-232 epochs,
brokers, features, configs) on a generated log with churn, deleted and re-created topics, replica
reassignments with and without directories, broker changes and transactions; a fleet of three clusters is
replayed per cluster; pushed-down filters prune rows exactly; a corrupt segment fails the job
naming the file and position, or with onCorrupt=skip is skipped and counted."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from kraftlog.engine.image.logload import load_log_dir
from kraftlog.engine.log.log import Log, LogConfig
from kraftlog.engine.pipeline import replay as rp
from kraftlog.engine.pipeline import sample
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.schema import uuid_to_kafka

pytestmark = pytest.mark.slow

PARTITIONS, CHURN = 2000, 2000
SEGMENT_BYTES = 96 << 10  # several segments = several input partitions


def _rec(name: str, version: int, data: dict) -> bytes:
    return codec.encode_record(name, version, data)


def extra_records() -> list[bytes]:
    """Cases the churn generator does not write: a topic deleted and re-created under the same name,
    a partition added later, leader -1 / recovery state / replica changes, broker registration
    changes, an unregistered broker, features set and removed, an aborted and a committed
    transaction, and a config deleted."""
    a, b, c = uuid.UUID(int=0xA1), uuid.UUID(int=0xB2), uuid.UUID(int=0xC3)
    part = {"Replicas": [0, 1, 2], "Isr": [0, 1, 2], "Leader": 0, "LeaderEpoch": 0, "PartitionEpoch": 0}
    out = [
        _rec("TopicRecord", 0, {"Name": "again", "TopicId": a}),
        _rec("PartitionRecord", 0, {"PartitionId": 0, "TopicId": a, **part}),
        _rec("PartitionChangeRecord", 0, {"PartitionId": 0, "TopicId": a, "Leader": 1}),
        _rec("RemoveTopicRecord", 0, {"TopicId": a}),
        _rec("TopicRecord", 0, {"Name": "again", "TopicId": b}),
        _rec("PartitionRecord", 0, {"PartitionId": 0, "TopicId": b, **part}),
        _rec("PartitionRecord", 0, {"PartitionId": 1, "TopicId": b, **part, "Leader": 2}),
        _rec("PartitionChangeRecord", 0, {"PartitionId": 0, "TopicId": b, "Leader": -1, "Isr": [1]}),
        _rec("PartitionChangeRecord", 0, {"PartitionId": 0, "TopicId": b, "LeaderRecoveryState": 1}),
        _rec("PartitionChangeRecord", 0, {"PartitionId": 1, "TopicId": b, "Replicas": [2, 0, 1, 3],
                                          "Isr": [2, 0]}),
        _rec("PartitionChangeRecord", 0, {"PartitionId": 0, "TopicId": b, "Leader": 2, "Isr": [1, 2]}),
        _rec("PartitionRecord", 0, {"PartitionId": 2, "TopicId": b, **part}),  # a partition added later
        _rec("PartitionChangeRecord", 0, {"PartitionId": 2, "TopicId": b, "Leader": -1, "Isr": []}),
        _rec("BrokerRegistrationChangeRecord", 1, {"BrokerId": 1, "BrokerEpoch": 101, "Fenced": 1}),
        _rec("BrokerRegistrationChangeRecord", 1, {"BrokerId": 2, "BrokerEpoch": 102, "InControlledShutdown": 1}),
        _rec("UnregisterBrokerRecord", 0, {"BrokerId": 4, "BrokerEpoch": 104}),
        _rec("FeatureLevelRecord", 0, {"Name": "kraft.version", "FeatureLevel": 1}),
        _rec("FeatureLevelRecord", 0, {"Name": "group.version", "FeatureLevel": 1}),
        _rec("FeatureLevelRecord", 0, {"Name": "group.version", "FeatureLevel": 0}),
        _rec("ConfigRecord", 0, {"ResourceType": 4, "ResourceName": "", "Name": "x", "Value": "1"}),
        _rec("ConfigRecord", 0, {"ResourceType": 4, "ResourceName": "", "Name": "x", "Value": None}),
        _rec("BeginTransactionRecord", 0, {"Name": "aborted"}),
        _rec("TopicRecord", 0, {"Name": "never", "TopicId": c}),
        _rec("PartitionRecord", 0, {"PartitionId": 0, "TopicId": c, **part}),
        _rec("AbortTransactionRecord", 0, {}),
        _rec("BeginTransactionRecord", 0, {"Name": "kept"}),
        _rec("PartitionChangeRecord", 0, {"PartitionId": 1, "TopicId": b, "Leader": 0}),
        _rec("EndTransactionRecord", 0, {}),
    ]
    return out + extras_records()


def extras_records() -> list[bytes]:
    """Partition fields only the ``json`` column carries: directories (set, all MIGRATING, mixed,
    carried over replica changes with UNASSIGNED for new replicas, set with and without a replica
    change), adding / removing replicas (kept across a replica change, cleared by an empty list),
    ELR and last-known ELR (set, emptied, reset by a new PartitionRecord), a change before the
    latest PartitionRecord (ignored), and one inside an aborted transaction (dropped)."""
    t = uuid.UUID(int=0xD4)
    d1, d2, d3 = (uuid.UUID(int=(0x5EED << 64) | k) for k in (1, 2, 3))
    m = uuid.UUID(int=0)  # Kafka's DirectoryId.MIGRATING
    part = {"TopicId": t, "Isr": [0], "Leader": 0, "LeaderEpoch": 0, "PartitionEpoch": 0}

    def change(pid: int, version: int, **fields) -> bytes:
        return _rec("PartitionChangeRecord", version, {"TopicId": t, "PartitionId": pid, **fields})

    return [
        _rec("TopicRecord", 0, {"Name": "extras", "TopicId": t}),
        _rec("PartitionRecord", 2, {**part, "PartitionId": 0, "Replicas": [0, 1, 2], "Directories": [d1, d2, d3],
                                    "EligibleLeaderReplicas": [1], "LastKnownElr": [2]}),
        _rec("PartitionRecord", 1, {**part, "PartitionId": 1, "Replicas": [1, 2, 3], "Directories": [m, m, m],
                                    "RemovingReplicas": [3], "AddingReplicas": [1]}),
        _rec("PartitionRecord", 2, {**part, "PartitionId": 2, "Replicas": [2, 3, 0], "Directories": [d1, m, d2]}),
        _rec("PartitionRecord", 2, {**part, "PartitionId": 3, "Replicas": [0, 1], "Directories": [d1, d2],
                                    "EligibleLeaderReplicas": [0]}),
        change(0, 2, Replicas=[0, 1, 3], AddingReplicas=[3], RemovingReplicas=[2]),  # carry: 3 -> UNASSIGNED
        change(0, 2, EligibleLeaderReplicas=[], LastKnownElr=[0, 1]),
        change(0, 1, Replicas=[1, 3], Isr=[1]),  # carry again; adding / removing stay
        change(1, 1, Replicas=[1, 2, 4]),  # all MIGRATING stays so
        change(1, 1, Directories=[d3, d3, d1], RemovingReplicas=[]),
        change(2, 1, Replicas=[2, 3, 5], Directories=[d2, d2, d2]),
        change(2, 1, Directories=[m, m, m]),
        change(2, 1, Replicas=[2, 3]),
        change(2, 0, Leader=3),
        change(3, 2, Directories=[d3, d3], EligibleLeaderReplicas=[1], Leader=1),
        _rec("PartitionRecord", 2, {**part, "PartitionId": 3, "Replicas": [1, 0], "Directories": [d2, d1]}),
        change(3, 2, LastKnownElr=[1]),
        _rec("BeginTransactionRecord", 0, {"Name": "aborted-extras"}),
        change(3, 2, Directories=[d3, d3], AddingReplicas=[4]),
        _rec("AbortTransactionRecord", 0, {}),
    ]


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    values = sample.workload_values(PARTITIONS, CHURN, replicas_per_broker=500) + extra_records()
    directory = tmp_path_factory.mktemp("fleet") / "cluster-a"
    sample.write_log_dir(directory, values, segment_bytes=SEGMENT_BYTES, per_batch=200)
    return str(directory), values


def image_tables(image) -> dict[str, set]:
    """The single-node image as the rows the Spark replay writes."""
    topics, partitions = set(), set()
    t = image.topics
    for name in t.topic_names():
        view = t.topic(name)
        tid = uuid_to_kafka(view.topic_id)
        topics.add((tid, name, view.partition_count, view.topic_epoch))
        for p in t.partitions_of(name):
            partitions.add((tid, name, p.partition_id, p.leader, p.leader_epoch, p.partition_epoch,
                            p.leader_recovery_state, tuple(p.replicas), tuple(p.isr), tuple(p.removing_replicas),
                            tuple(p.adding_replicas), tuple(p.eligible_leader_replicas), tuple(p.last_known_elr),
                            tuple(uuid_to_kafka(d) for d in p.directories)))
    brokers = {(b.broker_id, b.epoch, b.rack, b.fenced, b.in_controlled_shutdown)
               for b in image.cluster.brokers.values()}
    features = {(k, v) for k, v in image.features.finalized.items()}
    features.add(("metadata.version", image.features.metadata_version))
    configs = {(rt, rn, k, v) for (rt, rn), kv in image.configs.items() for k, v in kv.items()}
    return {"topics": topics, "partitions": partitions, "brokers": brokers, "features": features,
            "configs": configs}


COLUMNS = {
    "topics": ["topic_id", "topic_name", "partition_count", "topic_epoch"],
    "partitions": ["topic_id", "topic_name", "partition", "leader", "leader_epoch", "partition_epoch",
                   "leader_recovery_state", "replicas", "isr", "removing_replicas", "adding_replicas",
                   "eligible_leader_replicas", "last_known_elr", "directories"],
    "brokers": ["broker_id", "broker_epoch", "rack", "fenced", "in_controlled_shutdown"],
    "features": ["feature_name", "feature_level"],
    "configs": ["config_resource_type", "config_resource_name", "config_name", "config_value"],
}


def spark_tables(frames: dict) -> dict[str, dict[str, set]]:
    """cluster -> table -> rows (one collect per table for the whole fleet)."""
    out: dict[str, dict[str, set]] = {}
    for name, cols in COLUMNS.items():
        for r in frames[name].select("cluster", *cols).collect():
            row = tuple(tuple(v) if isinstance(v, list) else v for v in r[1:])
            out.setdefault(r.cluster, {n: set() for n in COLUMNS})[name].add(row)
    return out


def _kid(k: int) -> str:
    return uuid_to_kafka(uuid.UUID(int=(0x5EED << 64) | k))


UNASSIGNED = uuid_to_kafka(uuid.UUID(int=1))
# extras_records' final partitions worked out by hand from Kafka's PartitionRegistration.merge:
# partition -> (replicas, removing, adding, ELR, last-known ELR, directories)
EXTRAS_BY_KAFKA_RULES = {
    0: ((1, 3), (2,), (3,), (), (0, 1), (_kid(2), UNASSIGNED)),
    1: ((1, 2, 4), (), (1,), (), (), (_kid(3), _kid(3), _kid(1))),
    2: ((2, 3), (), (), (), (), ()),
    3: ((1, 0), (), (), (), (1,), (_kid(2), _kid(1))),
}


def extras_columns(partitions: set) -> dict:
    """The "extras" topic's rows (spark_tables form) as EXTRAS_BY_KAFKA_RULES values."""
    return {row[2]: (row[7], *row[9:]) for row in partitions if row[1] == "extras"}


def test_the_log_has_several_segments(log_dir):
    """The input really spreads over several segment files (so several Spark input partitions)."""
    directory, _ = log_dir
    assert len([n for n in os.listdir(directory) if n.endswith(".log")]) >= 4


def test_raw_rows_equal_the_generic_decoding(spark, log_dir):
    """Every record becomes one row, in offset order per cluster, with the generic codec's values."""
    directory, values = log_dir
    df = spark.read.format("kraftlog").option("splitBytes", 50_000).load(directory)
    rows = sorted(df.select("offset", "record_type", "record_version", "topic_id", "partition", "leader",
                            "isr", "broker_id", "fenced", "config_value", "cluster").collect())
    assert [r.offset for r in rows] == list(range(len(values)))
    assert {r.cluster for r in rows} == {"cluster-a"}
    for r in rows[::37]:
        rec = codec.decode_record(values[r.offset])
        d = rec.data
        assert (r.record_type, r.record_version) == (rec.record_type, rec.version)
        if "TopicId" in d:
            assert r.topic_id == uuid_to_kafka(d["TopicId"])
        if rec.record_type == "PartitionChangeRecord":
            assert r.partition == d["PartitionId"] and r.leader == d["Leader"]
            assert r.isr == (None if d["Isr"] is None else list(d["Isr"]))
        if rec.record_type in ("FenceBrokerRecord", "UnfenceBrokerRecord"):
            assert r.broker_id == d["Id"] and r.fenced == (rec.record_type == "FenceBrokerRecord")
        if rec.record_type == "ConfigRecord":
            assert r.config_value == d["Value"]


def test_pushdown_filters_select_exact_rows(spark, log_dir):
    """record_type / offset / cluster filters pushed into the reader keep exactly the matching rows."""
    directory, values = log_dir
    df = spark.read.format("kraftlog").load(directory)
    picked = df.where("record_type IN ('TopicRecord', 'RemoveTopicRecord') AND offset >= 100 AND offset < 3000 "
                      "AND cluster = 'cluster-a'")
    got = sorted(r.offset for r in picked.select("offset").collect())
    want = [i for i in range(100, 3000)
            if codec.decode_record(values[i]).record_type in ("TopicRecord", "RemoveTopicRecord")]
    assert got == want
    assert df.where("cluster = 'elsewhere'").count() == 0
    options = (spark.read.format("kraftlog").option("recordTypes", "FeatureLevelRecord").option("endOffset", 10)
               .load(directory))
    assert [r.offset for r in options.select("offset").collect()] == [0]


def test_distributed_replay_equals_the_single_node_loader(spark, log_dir, tmp_path):
    """Replay in Spark, written as Parquet and read back, equals load_log_dir's image row for row."""
    directory, _ = log_dir
    image = load_log_dir(directory)
    frames = rp.replay(rp.read_for_replay(spark, directory))
    counts = rp.write_replay(frames, str(tmp_path / "out"))
    back = {name: spark.read.parquet(str(tmp_path / "out" / name)) for name in rp.TABLES}
    want = image_tables(image)
    got = spark_tables(back)["cluster-a"]
    for name in rp.TABLES:
        assert got[name] == want[name], name
    assert counts["partitions"] == len(want["partitions"]) > PARTITIONS // 2
    names = {t[1] for t in got["topics"]}
    assert "again" in names and "never" not in names  # re-created topic kept, aborted one dropped
    assert extras_columns(got["partitions"]) == EXTRAS_BY_KAFKA_RULES
    frames["records"].unpersist()


def test_fleet_of_three_clusters_replays_per_cluster(spark, tmp_path):
    """A fleet directory of three log directories: one replay, each cluster equal to its own load."""
    fleet = tmp_path / "fleet"
    for k, name in enumerate(("east", "west", "north")):
        values = sample.workload_values(300 + 100 * k, 200, seed=k, replicas_per_broker=100)
        sample.write_log_dir(fleet / name, values, segment_bytes=SEGMENT_BYTES, per_batch=100)
    (fleet / "north" / "meta.properties").write_text("version=1\ncluster.id=north-id\nnode.id=1\n")
    frames = rp.replay(rp.read_for_replay(spark, str(fleet)))
    got = spark_tables(frames)
    assert set(got) == {"east", "west", "north-id"}
    for name, cluster in (("east", "east"), ("west", "west"), ("north", "north-id")):
        assert got[cluster] == image_tables(load_log_dir(fleet / name)), cluster
    frames["records"].unpersist()


def test_corrupt_segment_fails_with_file_and_position_or_is_skipped_and_counted(spark, tmp_path):
    """A flipped byte in a middle segment fails the job naming the segment and the batch position;
    with onCorrupt=skip the other rows are read and one __corrupt__ row counts the skipped bytes."""
    values = sample.workload_values(300, 100, replicas_per_broker=100)
    directory = tmp_path / "bad"
    sample.write_log_dir(directory, values, segment_bytes=16 << 10, per_batch=50)
    segments = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    victim = directory / segments[1]
    raw = bytearray(victim.read_bytes())
    scan = batch.scan_batches(bytes(raw), 0, len(raw))
    second = int(scan.positions[1])  # the second batch of the segment
    lost = int(scan.record_counts[1:].sum())  # a bad CRC: the rest of the segment cannot be trusted
    raw[second + 100] ^= 0xFF
    victim.write_bytes(bytes(raw))
    with pytest.raises(Exception) as failure:
        spark.read.format("kraftlog").load(str(directory)).count()
    message = str(failure.value)
    assert segments[1] in message and f"position {second}" in message
    skipped = spark.read.format("kraftlog").option("onCorrupt", "skip").load(str(directory))
    corrupt = skipped.where(f"record_type = '{rp.CORRUPT_RECORD_TYPE}'").collect()
    assert len(corrupt) == 1 and segments[1] in corrupt[0].json
    assert json.loads(corrupt[0].json)["skipped_bytes"] == len(raw) - second
    assert skipped.where("offset IS NOT NULL").count() == len(values) - lost


def test_log_start_offset_hides_deleted_records(spark, tmp_path):
    """Records below the log start offset (advanced by the log) are not rows."""
    values = sample.workload_values(300, 0, replicas_per_broker=100)
    directory = tmp_path / "started"
    sample.write_log_dir(directory, values, segment_bytes=8 << 10, per_batch=50)
    with Log.open(directory, LogConfig(segment_bytes=8 << 10)) as log:
        assert log.advance_start_offset(120)
        start = log.start_offset
    offsets = [r.offset for r in spark.read.format("kraftlog").load(str(directory)).select("offset").collect()]
    assert min(offsets) == start and len(offsets) == len(values) - start
