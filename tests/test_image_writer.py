"""Proves the image writer and the workload generator: the generator's numpy-built PartitionRecords are
byte-identical to the generic codec's; an image written at its metadata.version and replayed gives
the same image; record versions follow metadata.version; metadata.version names parse or fail
with a clear error."""

from __future__ import annotations

import uuid

import pytest

from kraftlog.engine.image import versions
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.image.writer import write_image
from kraftlog.engine.records import metadata as codec


def replay(values, epochs_from=0):
    delta = MetadataImage.empty().delta()
    for i, value in enumerate(values):
        record = codec.decode_record(value)
        delta.replay(record.record_type, record.data, topic_epoch=epochs_from + i)
    return delta.apply()


@pytest.mark.parametrize("level", [versions.parse("3.3-IV0"), versions.parse("3.7-IV2"), versions.LATEST])
def test_generated_records_match_the_generic_codec_byte_for_byte(level):
    shape = wl.WorkloadShape.scaled(400, replication_factor=3, replicas_per_broker=100, metadata_version=level)
    values = list(wl.generate(shape))
    decoded = [codec.decode_record(v) for v in values]
    assert all(codec.encode_record(r.record_type, r.version, r.data) == v for r, v in zip(decoded, values, strict=True))
    parts = [r for r in decoded if r.record_type == "PartitionRecord"]
    assert len(parts) == 400 and {r.version for r in parts} == {versions.partition_record_version(level)}
    assert parts[3].data["Leader"] == parts[3].data["Replicas"][0] and parts[3].data["Isr"] == parts[3].data["Replicas"]
    assert shape.brokers == 12


def test_reference_shape_has_300_brokers_and_round_robin_leaders():
    shape = wl.WorkloadShape()
    assert (shape.partitions, shape.brokers) == (1_000_000, 300)
    replicas = wl.assignment(shape)
    counts = [int((replicas == b).sum()) for b in range(shape.brokers)]
    assert sum(counts) == 3_000_000 and max(counts) - min(counts) <= shape.replication_factor
    assert list(replicas[:3, 0]) == [0, 1, 2]


def test_written_image_replays_to_the_same_image():
    shape = wl.WorkloadShape.scaled(500, replicas_per_broker=200)
    image = replay(list(wl.generate(shape)) + list(wl.churn(shape, 400, seed=3)))
    written = write_image(image)
    again = replay(written.values)
    for name in image.topics.topic_names():
        # A generic replay of the written records gives topics the epochs it is told; the
        # loader reads ours from the tagged field (tests/test_image_loader.py).
        assert ([p._replace(topic_epoch=0) for p in image.topics.partitions_of(name)]
                == [p._replace(topic_epoch=0) for p in again.topics.partitions_of(name)])
    assert again.cluster == image.cluster and dict(again.configs) == dict(image.configs)
    assert again.features == image.features
    assert written.records[0][0] == 12  # FeatureLevelRecord (metadata.version) comes first


def test_topic_epochs_ride_in_a_tagged_field_that_the_codec_preserves():
    delta = MetadataImage.empty().delta()
    delta.replay("FeatureLevelRecord", {"Name": "metadata.version", "FeatureLevel": 26})
    delta.replay("TopicRecord", {"Name": "t", "TopicId": uuid.uuid4()}, topic_epoch=1234)
    (topic,) = [codec.decode_record(v) for v in write_image(delta.apply()).values if v[1] == 2]
    assert int.from_bytes(topic.data[codec.UNKNOWN_TAGS][10_000], "big") == 1234


@pytest.mark.parametrize("text, level", [("3.7-IV0", 15), ("4.1-IV0", 26), ("3.7", 19), ("26", 26), (17, 17)])
def test_metadata_version_names_parse(text, level):
    assert versions.parse(text) == level


@pytest.mark.parametrize("bad", ["3.2-IV9", "banana", "99", 0])
def test_unknown_metadata_versions_fail_clearly(bad):
    with pytest.raises(versions.UnknownMetadataVersionError, match="unknown metadata.version"):
        versions.parse(bad)


def test_writing_below_the_bootstrap_level_is_refused():
    with pytest.raises(versions.UnknownMetadataVersionError, match="below 3.3-IV0"):
        write_image(MetadataImage.empty(), 3)


@pytest.mark.parametrize("level", [versions.parse("3.3-IV0"), versions.parse("3.7-IV2"), versions.LATEST])
def test_column_encoded_partitions_equal_the_generic_codec(level):
    """The fast path (numpy templates over the columns) writes exactly what the generic codec writes,
    including shrunk ISRs, leaderless partitions and partitions that need the generic path."""
    shape = wl.WorkloadShape.scaled(600, replicas_per_broker=150, metadata_version=level)
    values = list(wl.generate(shape)) + list(wl.churn(shape, 600, seed=11))
    tid = uuid.uuid4()
    values += [codec.encode_record("TopicRecord", 0, {"Name": "odd", "TopicId": tid}),
               codec.encode_record("PartitionRecord", versions.partition_record_version(level),
                                   {"TopicId": tid, "PartitionId": 0, "Replicas": [1, 2], "Isr": [], "Leader": -1,
                                    "LeaderRecoveryState": 1, "AddingReplicas": [2]})]
    # directories as Kafka 3.7+ controllers assign them (one per replica, some UNASSIGNED), next to
    # all-MIGRATING ones: the fast path from v1, the generic path (and its loss report) below
    dirs = [uuid.uuid4(), uuid.uuid4(), uuid.UUID(int=1)]
    did = uuid.uuid4()
    values.append(codec.encode_record("TopicRecord", 0, {"Name": "placed", "TopicId": did}))
    values += [codec.encode_record("PartitionRecord", 1, {
        "TopicId": did, "PartitionId": p, "Replicas": [1, 2, 3][:1 + p % 3], "Isr": [1, 2, 3][:1 + p % 2],
        "Leader": 1, "Directories": [dirs[(p + k) % 3] for k in range(1 + p % 3)] if p % 4 else []})
        for p in range(12)]
    image = replay(values)
    fast, slow = write_image(image), write_image(image, fast=False)
    assert fast.records == slow.records and fast.losses == slow.losses


def test_plain_partition_values_parse_back_and_others_are_refused():
    """parse_plain_partition reads exactly the template's layout and refuses anything else."""
    from kraftlog.engine.image.writer import parse_plain_partition

    for level in (versions.parse("3.3-IV0"), versions.parse("3.7-IV2"), versions.LATEST):
        shape = wl.WorkloadShape.scaled(300, replicas_per_broker=100, metadata_version=level)
        image = replay(list(wl.generate(shape)) + list(wl.churn(shape, 300, seed=5)))
        for value in write_image(image).values:
            if value[1] != 3:
                assert parse_plain_partition(value) is None
                continue
            d = codec.decode_record(value).data
            parsed = parse_plain_partition(value)
            assert parsed == (d["PartitionId"], d["TopicId"].bytes, tuple(d["Replicas"]), tuple(d["Isr"]), d["Leader"],
                              d["LeaderEpoch"], d["PartitionEpoch"])
    tid = uuid.uuid4()
    odd = [codec.encode_record("PartitionRecord", 2, {"TopicId": tid, "PartitionId": 0, "Replicas": [1], "Isr": [1],
                                                      "Leader": 1, "LeaderRecoveryState": 1}),
           codec.encode_record("PartitionRecord", 1, {"TopicId": tid, "PartitionId": 0, "Replicas": [1], "Isr": [1],
                                                      "Leader": 1, "Directories": [uuid.uuid4()]}),
           codec.encode_record("PartitionRecord", 0, {"TopicId": tid, "PartitionId": 0, "Replicas": [1, 2], "Isr": [1],
                                                      "Leader": 1, "AddingReplicas": [2]})]
    assert [parse_plain_partition(v) for v in odd] == [None, None, None]
