"""Proves the loader: replaying a log through the column decoder gives exactly the image that replaying
every record through the generic codec gives (partitions, KIP-232 epochs, cluster, configs,
features); an image written at its metadata.version and loaded back as a snapshot is the same
image; bad records stop the load with their offset and type (or are skipped and counted); aborted
transactions leave no trace; publishers see every step in order; downgrades report lost fields."""

from __future__ import annotations

import os
import shutil
import uuid

import numpy as np
import pytest
from image_summary import summary

from kraftlog import _accel
from kraftlog.engine.image import versions
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.image.loader import Loader, MetadataLoadError
from kraftlog.engine.image.writer import write_image
from kraftlog.engine.records import batch, metadata_columns
from kraftlog.engine.records import metadata as codec

pytestmark = pytest.mark.twin


def test_the_expected_decoder_is_loaded():
    assert ("pure" if _accel.FORCE_PURE else "native") == metadata_columns.IMPLEMENTATION


def to_log(values: list[bytes], per_batch: int = 200, first_offset: int = 0) -> bytes:
    return b"".join(batch.build_batch_from_values(values[i:i + per_batch], base_offset=first_offset + i,
                                                  partition_leader_epoch=3)
                    for i in range(0, len(values), per_batch))


def replay_generic(values: list[bytes], image: MetadataImage | None = None, first_offset: int = 0) -> MetadataImage:
    delta = (image or MetadataImage.empty()).delta()
    for i, value in enumerate(values):
        record = codec.decode_record(value)
        delta.replay(record.record_type, record.data, topic_epoch=first_offset + i)
    return delta.apply()


@pytest.fixture(scope="module")
def workload():
    shape = wl.WorkloadShape.scaled(3000, replicas_per_broker=500)
    return shape, list(wl.generate(shape)), list(wl.churn(shape, 1500, seed=7))


def test_column_replay_equals_generic_replay(workload):
    shape, base, churn = workload
    loader = Loader()
    loader.replay(to_log(base))
    image = loader.replay(to_log(churn, per_batch=37, first_offset=len(base)))
    expected = replay_generic(churn, replay_generic(base), first_offset=len(base))
    assert summary(image) == summary(expected)
    assert image.provenance.offset == len(base) + len(churn) - 1 and image.provenance.epoch == 3
    assert image.topics.partition_count == expected.topics.partition_count > 0


def test_snapshot_round_trip_keeps_everything_including_topic_epochs(workload):
    shape, base, churn = workload
    image = replay_generic(base + churn)
    written = write_image(image)
    assert written.losses == []
    header = batch.build_control_batch(3, codec.encode_control(3, 0, {"Version": 0, "LastContainedLogTimestamp": 5})[1])
    body = to_log(written.values, per_batch=500, first_offset=1)
    loaded = Loader().load_snapshot(header + body, end_offset=len(base) + len(churn), epoch=3)
    assert summary(loaded) == summary(image)
    assert loaded.provenance.offset == len(base) + len(churn) - 1


def test_snapshot_without_topic_epoch_tags_uses_the_snapshot_offset(workload):
    image = replay_generic(workload[1])
    values = write_image(image, with_topic_epochs=False).values
    loaded = Loader().load_snapshot(to_log(values), end_offset=999_999, epoch=1)
    epochs = {loaded.topics.topic(n).topic_epoch for n in loaded.topics.topic_names()}
    assert epochs == {999_999}


def test_a_bad_record_stops_the_load_with_its_offset_and_type_or_is_skipped():
    tid = uuid.uuid4()
    values = [codec.encode_record("TopicRecord", 0, {"Name": "a", "TopicId": tid}),
              codec.encode_record("PartitionChangeRecord", 0, {"TopicId": uuid.uuid4(), "PartitionId": 0, "Leader": 1}),
              codec.encode_record("ConfigRecord", 0, {"ResourceType": 2, "ResourceName": "a", "Name": "x", "Value": "1"})]
    with pytest.raises(MetadataLoadError) as info:
        Loader().replay(to_log(values, first_offset=40))
    assert info.value.offset == 41 and info.value.record_type == "PartitionChangeRecord"
    assert "offset 41" in str(info.value) and "unknown topic" in str(info.value)
    manifests = []
    image = Loader(skip_errors=True, publishers=[lambda d, i, m: manifests.append(m)]).replay(
        to_log(values, first_offset=40))
    assert manifests[0].skipped_records == 1 and manifests[0].skipped[0][:2] == (41, "PartitionChangeRecord")
    assert image.configs[(2, "a")]["x"] == "1" and image.topics.topic("a").topic_id == tid


def test_aborted_transactions_leave_no_trace_and_open_ones_are_held_back():
    t1, t2, t3 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()

    def topic(name, tid):
        return codec.encode_record("TopicRecord", 0, {"Name": name, "TopicId": tid})

    values = [topic("kept", t1), codec.encode_record("BeginTransactionRecord", 0, {"Name": "x"}), topic("gone", t2),
              codec.encode_record("AbortTransactionRecord", 0, {}),
              codec.encode_record("BeginTransactionRecord", 0, {}), topic("later", t3)]
    manifests = []
    image = Loader(publishers=[lambda d, i, m: manifests.append(m)]).replay(to_log(values))
    assert list(image.topics.topic_names()) == ["kept"]
    assert manifests[0].pending_transaction_offset == 4


def test_publishers_see_each_step_in_order_and_deltas_hold_only_real_changes(workload):
    seen = []
    loader = Loader(publishers=[lambda d, i, m: seen.append((d, i, m))])
    loader.replay(to_log(workload[1]))
    same = codec.encode_record("FeatureLevelRecord", 0, {"Name": "metadata.version",
                                                         "FeatureLevel": workload[0].metadata_version})
    loader.replay(to_log([same], first_offset=len(workload[1])))
    assert len(seen) == 2 and seen[0][1] is not seen[1][1]
    assert seen[0][0].changed >= {"features", "cluster", "topics"}
    assert seen[1][0].is_empty  # replaying a record that changes nothing yields an empty delta
    assert seen[1][1].topics is seen[0][1].topics  # untouched parts are shared, not copied


def test_downgrade_loss_report_names_directories_and_elr():
    tid = uuid.uuid4()
    values = [codec.encode_record("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": 26}),
              codec.encode_record("TopicRecord", 0, {"Name": "a", "TopicId": tid}),
              codec.encode_record("PartitionRecord", 2, {"TopicId": tid, "PartitionId": 0, "Replicas": [1, 2],
                                                         "Isr": [1, 2], "Leader": 1,
                                                         "Directories": [uuid.uuid4(), uuid.uuid4()],
                                                         "EligibleLeaderReplicas": [2], "LastKnownElr": [1]}),
              codec.encode_record("PartitionRecord", 2, {"TopicId": tid, "PartitionId": 1, "Replicas": [1],
                                                         "Isr": [1], "Leader": 1})]
    image = Loader().replay(to_log(values))
    at_37 = write_image(image, versions.parse("3.7-IV0"))
    assert [(loss.record_type, loss.entity, loss.fields) for loss in at_37.losses] == [
        ("PartitionRecord", "partition a-0", ("Directories", "EligibleLeaderReplicas", "LastKnownElr"))]
    at_37_iv2 = write_image(image, versions.parse("3.7-IV2"))
    assert [loss.fields for loss in at_37_iv2.losses] == [("EligibleLeaderReplicas", "LastKnownElr")]
    assert write_image(image).losses == []
    # The image written at the lower version really lacks what the report names.
    reloaded = Loader().load_snapshot(to_log(at_37.values), end_offset=10, epoch=1)
    assert reloaded.topics.partition("a", 0).directories == () and reloaded.topics.partition("a", 0).eligible_leader_replicas == ()
    assert reloaded.features.metadata_version == 15


def test_delete_and_recreate_through_the_loader():
    old, new = uuid.uuid4(), uuid.uuid4()
    part = {"PartitionId": 0, "Replicas": [1], "Isr": [1], "Leader": 1}
    values = [codec.encode_record("TopicRecord", 0, {"Name": "t", "TopicId": old}),
              codec.encode_record("PartitionRecord", 0, {**part, "TopicId": old}),
              codec.encode_record("RemoveTopicRecord", 0, {"TopicId": old}),
              codec.encode_record("TopicRecord", 0, {"Name": "t", "TopicId": new}),
              codec.encode_record("PartitionRecord", 0, {**part, "TopicId": new, "Leader": 1, "LeaderEpoch": 9})]
    image = Loader().replay(to_log(values, per_batch=2))
    assert image.topics.topic("t").topic_id == new and image.topics.partition("t", 0).leader_epoch == 9
    assert image.topics.topic("t").topic_epoch == 4 and image.topics.topic_by_id(old) is None


def test_loading_a_log_directory_equals_replaying_its_bytes(workload, tmp_path):
    """Segments on disk (several, small), read as mmap regions, give the in-memory replay's image."""
    from kraftlog.engine.image.logload import load_log_dir
    from kraftlog.engine.log.log import Log, LogConfig

    shape, base, churn = workload
    buf = to_log(base + churn, per_batch=150)
    config = LogConfig(segment_bytes=64 << 10)
    with Log.open(tmp_path / "meta", config) as log:
        pos = 0
        while pos < len(buf):
            size = batch.validate_batch(buf, pos).size_bytes
            log.append_as_follower(buf[pos:pos + size])
            pos += size
        assert len(log.segment_base_offsets()) >= 4
    progress = []
    image = load_log_dir(tmp_path / "meta",
                         progress=lambda m: progress.append((m.last_offset, m.target_offset, m.records, m.records_per_s)))
    assert summary(image) == summary(Loader().replay(buf))
    total = len(base) + len(churn)
    assert len(progress) > 3 and progress[-1][:3] == (total - 1, total - 1, total)
    offsets = [p[0] for p in progress]
    assert offsets == sorted(offsets) and offsets[0] < offsets[-1] and all(p[3] > 0 for p in progress)
    # Resuming from an image only reads what is newer.
    half = Loader().replay(to_log(base, per_batch=150))
    assert summary(load_log_dir(tmp_path / "meta", image=half)) == summary(image)


def test_region_boundaries_inside_a_topic_keep_the_bulk_path(workload):
    """Regions cut at every batch (here 7 records) split topics from their partitions; only the split
    records go through the generic codec, and the image is the same."""
    shape, base, _ = workload
    batches = [to_log(base[i:i + 7], per_batch=7, first_offset=i) for i in range(0, len(base), 7)]
    regions = [b"".join(batches[i:i + 5]) for i in range(0, len(batches), 5)]
    manifests = []
    image = Loader(publishers=[lambda d, i, m: manifests.append(m)]).replay_regions(regions)
    assert summary(image) == summary(replay_generic(base))
    # at most one topic's partitions per region boundary, plus the brokers (not bulk records)
    assert manifests[0].generic_records <= len(regions) * shape.partitions_per_topic + 2 * shape.brokers + 1


def test_partition_records_with_directories_go_through_the_columns():
    """PartitionRecords with one directory per replica (as Kafka's controller writes them from
    3.7-IV2: a broker's log dir, UNASSIGNED, or MIGRATING mixed in) replay in bulk and give the
    generic codec's image, directory table included; a later replica change carries them over."""
    dirs = [uuid.UUID(int=(7 << 64) | b) for b in range(4)]
    unassigned, migrating = uuid.UUID(int=1), uuid.UUID(int=0)
    values = [codec.encode_record("FeatureLevelRecord", 0, {"Name": "metadata.version",
                                                            "FeatureLevel": versions.LATEST})]
    for t in range(20):
        topic_id = uuid.UUID(int=1000 + t)
        values.append(codec.encode_record("TopicRecord", 0, {"Name": f"t{t}", "TopicId": topic_id}))
        for p in range(5):
            replicas = [(t + p + k) % 4 for k in range(3)]
            directories = [dirs[r] for r in replicas]
            if p == 3:
                directories[1] = unassigned
            if p == 4 and t % 2:
                directories = [migrating] * 3  # all MIGRATING: stored as none
            elif p == 4:
                directories[2] = migrating
            values.append(codec.encode_record("PartitionRecord", 1, {
                "PartitionId": p, "TopicId": topic_id, "Replicas": replicas, "Isr": replicas, "Leader": replicas[0],
                "LeaderEpoch": 0, "PartitionEpoch": 0, "RemovingReplicas": [], "AddingReplicas": [],
                "Directories": directories}))
    values.append(codec.encode_record("PartitionChangeRecord", 1, {
        "PartitionId": 0, "TopicId": uuid.UUID(int=1000), "Replicas": [0, 1, 3], "Isr": [0, 1, 3]}))
    manifests = []
    loader = Loader(publishers=[lambda d, i, m: manifests.append(m)])
    image = loader.replay(to_log(values, per_batch=50))
    expected = replay_generic(values)
    assert summary(image) == summary(expected)
    p0 = image.topics.partition("t0", 0)
    assert p0.directories == (dirs[0], dirs[1], unassigned)  # kept, kept, new replica 3: UNASSIGNED
    assert image.topics.partition("t0", 1).directories == (dirs[1], dirs[2], dirs[3])
    assert image.topics.partition("t1", 4).directories == ()
    # the feature record and the one (short) change went through their columns too
    assert sum(m.generic_records for m in manifests) == 0


def _topic_log(name: str, tid: uuid.UUID, configs: dict[str, str] | None = None) -> list[bytes]:
    """A topic of one partition and its topic configs, as CreateTopics writes them."""
    return [codec.encode_record("TopicRecord", 0, {"Name": name, "TopicId": tid}),
            codec.encode_record("PartitionRecord", 0, {"TopicId": tid, "PartitionId": 0, "Replicas": [1],
                                                       "Isr": [1], "Leader": 1}),
            *(codec.encode_record("ConfigRecord", 0, {"ResourceType": 2, "ResourceName": name, "Name": k,
                                                      "Value": v}) for k, v in (configs or {}).items())]


def test_a_removed_topics_configs_go_with_it_and_a_recreated_name_starts_clean():
    """Kafka replays RemoveTopicRecord into the configs too: a re-created name inherits nothing,
    whether the delete and the re-create come in one load or two, and full replay equals snapshot + tail."""
    old, new, other = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    version = codec.encode_record("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": versions.LATEST})
    head = [version, *_topic_log("t", old, {"cleanup.policy": "compact"}), *_topic_log("u", other, {"retention.ms": "1"})]
    tail = [codec.encode_record("RemoveTopicRecord", 0, {"TopicId": old}), *_topic_log("t", new)]
    full = Loader().replay(to_log(head + tail))
    assert (2, "t") not in full.configs and dict(full.configs[(2, "u")]) == {"retention.ms": "1"}
    assert full.topics.topic("t").topic_id == new
    assert summary(replay_generic(head + tail)) == summary(full)
    loader = Loader()
    loader.replay(to_log(head))
    assert dict(loader.image.configs[(2, "t")]) == {"cleanup.policy": "compact"}
    assert summary(loader.replay(to_log(tail, first_offset=len(head)))) == summary(full)
    snapshot = to_log(write_image(replay_generic(head)).values, first_offset=1)
    restarted = Loader()
    restarted.load_snapshot(snapshot, end_offset=len(head), epoch=3)
    assert summary(restarted.replay(to_log(tail, first_offset=len(head)))) == summary(full)


def test_a_snapshot_image_takes_its_time_from_the_snapshot_header():
    """The provenance timestamp of a snapshot's image is the header's LastContainedLogTimestamp (the
    last covered log record's time), not when the snapshot's batches were written."""
    values = _topic_log("t", uuid.uuid4())
    header = batch.build_control_batch(3, codec.encode_control(3, 0, {"Version": 0, "LastContainedLogTimestamp": 1234})[1],
                                       timestamp_ms=9_000_000)
    body = batch.build_batch_from_values(values, base_offset=1, timestamp_ms=9_000_000)
    footer = batch.build_control_batch(4, codec.encode_control(4, 0, {"Version": 0})[1], base_offset=1 + len(values),
                                       timestamp_ms=9_000_001)
    image = Loader().load_snapshot(header + body + footer, end_offset=1 + len(values), epoch=2)
    assert image.provenance.timestamp_ms == 1234 and image.provenance.offset == len(values)
    # Batches without a header (bare values) keep the batches' time.
    bare = Loader().load_snapshot(body, end_offset=1 + len(values), epoch=2)
    assert bare.provenance.timestamp_ms == 9_000_000


def _directory_state(path) -> dict:
    """Every entry of a directory with its size and mtime (root ignores chmod, so this is the check)."""
    entries = {e.name: (e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(path)}
    return {"dir_mtime": os.stat(path).st_mtime_ns, "entries": entries}


def test_a_read_only_copy_of_a_log_directory_loads_and_nothing_is_written(workload, tmp_path):
    """load_log_dir reads a copy holding only the .log files (no indexes, no epoch checkpoint, no
    clean-shutdown marker) from a read-only directory, even with a torn tail, and changes nothing."""
    from kraftlog.engine.image.logload import load_log_dir
    from kraftlog.engine.log.log import Log, LogConfig

    shape, base, churn = workload
    buf = to_log(base + churn, per_batch=150)
    with Log.open(tmp_path / "meta", LogConfig(segment_bytes=64 << 10)) as log:
        pos = 0
        while pos < len(buf):
            size = batch.validate_batch(buf, pos).size_bytes
            log.append_as_follower(buf[pos:pos + size])
            pos += size
    copy = tmp_path / "copy"
    copy.mkdir()
    segments = sorted(n for n in os.listdir(tmp_path / "meta") if n.endswith(".log"))
    assert len(segments) >= 4
    for name in segments:
        shutil.copyfile(tmp_path / "meta" / name, copy / name)
    with open(copy / segments[-1], "ab") as f:
        f.write(to_log(churn[:5], first_offset=len(base) + len(churn))[:-7])  # a crash's torn write
    for name in segments:
        os.chmod(copy / name, 0o444)
    os.chmod(copy, 0o555)
    try:
        before = _directory_state(copy)
        image = load_log_dir(copy)
        assert _directory_state(copy) == before
    finally:
        os.chmod(copy, 0o755)
    assert summary(image) == summary(Loader().replay(buf))
    assert image.provenance.offset == len(base) + len(churn) - 1


def test_side_records_replay_in_their_own_order_and_a_bad_one_is_named_or_skipped(workload):
    """Broker records between partition changes apply as in log order (no topic record reads them);
    a bad one among them is reported by offset, or skipped and counted with the rest applied."""
    shape, base, churn = workload
    changes = [v for v in churn if codec.decode_record(v).record_type == "PartitionChangeRecord"][:40]
    fence = codec.encode_record("FenceBrokerRecord", 0, {"Id": 0, "Epoch": 100})
    bad = codec.encode_record("UnfenceBrokerRecord", 0, {"Id": 10_000, "Epoch": 1})  # no such broker
    noop = codec.encode_record("NoOpRecord", 0, {})
    tail = [*changes[:20], fence, noop, bad, noop, *changes[20:]]
    expected = replay_generic([*changes, fence], replay_generic(base), first_offset=len(base))
    with pytest.raises(MetadataLoadError) as info:
        loader = Loader()
        loader.replay(to_log(base))
        loader.replay(to_log(tail, per_batch=1, first_offset=len(base)))
    assert info.value.offset == len(base) + 22 and info.value.record_type == "UnfenceBrokerRecord"
    loader = Loader(skip_errors=True)
    loader.replay(to_log(base))
    image = loader.replay(to_log(tail, per_batch=1, first_offset=len(base)))
    assert summary(image) == summary(expected) and image.cluster.brokers[0].fenced


def test_topic_names_are_cut_from_the_decoded_blob_ascii_or_not():
    """The bulk path's names (native names_at and its twin): rows in any order, ASCII or UTF-8,
    empty names, the same names either way; bad UTF-8 and rows or offsets outside the blob refused."""
    from kraftlog.engine.image import index as hindex
    from kraftlog.engine.image import index_pure
    from kraftlog.engine.image.loader import _names_at

    for names in (["a", "topic-1", "", "b.c_d"], ["a", "tópico", "", "b"], [""]):
        blob = "".join(names).encode()
        offsets = np.cumsum([0] + [len(n.encode()) for n in names]).astype(np.int64)
        rows = np.array([len(names) - 1, 0, 0], dtype=np.int64)
        expected = [names[r] for r in rows.tolist()]
        assert _names_at(blob, offsets, rows) == expected
        assert index_pure.names_at(blob, offsets, rows.astype(np.int32)) == expected
    offsets = np.array([0, 2, 3], dtype=np.int64)
    for impl in (hindex, index_pure):
        with pytest.raises(UnicodeDecodeError):
            impl.names_at(b"\xff\xfeA", offsets, np.array([0], dtype=np.int32))
        with pytest.raises(IndexError, match="name 2"):
            impl.names_at(b"abc", offsets, np.array([2], dtype=np.int32))
        with pytest.raises(ValueError, match="outside the blob"):
            impl.names_at(b"ab", offsets, np.array([1], dtype=np.int32))


@pytest.mark.parametrize("fenced,version,in_shutdown", [(1, 0, None), (-1, 1, 1), (0, 1, 1), (1, 2, 0)])
def test_broker_changes_replay_from_the_columns_and_a_bad_one_is_named_or_skipped(workload, fenced, version,
                                                                                    in_shutdown):
    """A BrokerRegistrationChangeRecord (every fence, unfence and controlled shutdown of a
    production tail) replays from the decoded columns, not the generic codec, to what the
    generic replay gives; one for a stale broker epoch is reported by offset and type, or skipped
    and counted; one with a fencing value Kafka does not define still goes to the generic codec,
    which refuses it."""
    _, base, _ = workload
    data = {"BrokerId": 0, "BrokerEpoch": 100, "Fenced": fenced}
    if in_shutdown is not None:
        data["InControlledShutdown"] = in_shutdown
    change = codec.encode_record("BrokerRegistrationChangeRecord", version, data)
    stale = codec.encode_record("BrokerRegistrationChangeRecord", version, {**data, "BrokerEpoch": 99})
    undefined = codec.encode_record("BrokerRegistrationChangeRecord", 0, {"BrokerId": 0, "BrokerEpoch": 100,
                                                                          "Fenced": 5})
    expected = replay_generic([change], replay_generic(base), first_offset=len(base))
    manifests = []
    loader = Loader(skip_errors=True, publishers=[lambda d, i, m: manifests.append(m)])
    loader.replay(to_log(base))
    image = loader.replay(to_log([change, stale, undefined], first_offset=len(base)))
    assert summary(image) == summary(expected)
    assert image.cluster.brokers[0] == expected.cluster.brokers[0]
    assert manifests[-1].generic_records == 1  # only the undefined value
    assert [(o, t) for o, t, _ in manifests[-1].skipped] == [(len(base) + 1, "BrokerRegistrationChangeRecord"),
                                                              (len(base) + 2, "BrokerRegistrationChangeRecord")]
    with pytest.raises(MetadataLoadError) as info:
        loader = Loader()
        loader.replay(to_log(base))
        loader.replay(to_log([change, stale], first_offset=len(base)))
    assert info.value.offset == len(base) + 1 and "epoch" in str(info.value)


def test_side_and_topic_records_replay_from_the_columns_in_log_order(workload):
    """Configs, topic deletes, a short create (topic + partitions, directories too), producer ids,
    feature levels and fences replay from the decoded columns, in log order with the topic stream:
    a delete drops the name's configs and a re-created name starts with only its new ones; a
    record the columns do not hold whole (an unknown tag, adding replicas) still goes to the generic
    codec (counted there by type); a delete of an unknown topic id is reported by offset and type,
    or skipped and counted."""
    _, base, _ = workload
    first_topic = next(r.data for r in map(codec.decode_record, base) if r.record_type == "TopicRecord")
    name, old_id = first_topic["Name"], first_topic["TopicId"]
    new_id = uuid.UUID(int=0xABC)

    def config(key, value):
        return codec.encode_record("ConfigRecord", 0, {"ResourceType": 2, "ResourceName": name, "Name": key,
                                                       "Value": value})

    tail = [config("cleanup.policy", "compact"),
            codec.encode_record("RemoveTopicRecord", 0, {"TopicId": old_id}),
            codec.encode_record("TopicRecord", 0, {"Name": name, "TopicId": new_id}),
            *(codec.encode_record("PartitionRecord", 1, {
                "TopicId": new_id, "PartitionId": pid, "Replicas": [0, 1], "Isr": [1], "Leader": 1, "LeaderEpoch": 2,
                "PartitionEpoch": 3, "RemovingReplicas": [], "AddingReplicas": [1] if pid == 2 else [],
                "Directories": [uuid.UUID(int=pid + 5), uuid.UUID(int=9)] if pid else []}) for pid in range(3)),
            config("retention.ms", "5"), config("retention.ms", None), config("segment.ms", "7"),
            codec.encode_record("ProducerIdsRecord", 0, {"BrokerId": 2, "BrokerEpoch": 100, "NextProducerId": 4000}),
            codec.encode_record("ProducerIdsRecord", 0, {"BrokerId": 3, "BrokerEpoch": 100, "NextProducerId": 5000,
                                                         codec.UNKNOWN_TAGS: {7: b"x"}}),
            codec.encode_record("FeatureLevelRecord", 0, {"Name": "group.version", "FeatureLevel": 1}),
            codec.encode_record("FenceBrokerRecord", 0, {"Id": 0, "Epoch": 100})]
    missing = codec.encode_record("RemoveTopicRecord", 0, {"TopicId": uuid.UUID(int=0xDEAD)})
    expected = replay_generic(tail, replay_generic(base), first_offset=len(base))
    manifests = []
    loader = Loader(skip_errors=True, publishers=[lambda d, i, m: manifests.append(m)])
    loader.replay(to_log(base))
    image = loader.replay(to_log([*tail, missing], first_offset=len(base)))
    assert summary(image) == summary(expected)
    assert dict(image.configs[(2, name)]) == {"segment.ms": "7"}
    assert image.producer_ids == expected.producer_ids and image.producer_ids.next_producer_id == 5000
    assert image.features == expected.features and image.cluster.brokers[0].fenced
    assert image.topics.partition(name, 1).directories == (uuid.UUID(int=6), uuid.UUID(int=9))
    assert manifests[-1].generic_types == {"PartitionRecord": 1, "ProducerIdsRecord": 1}
    assert [(o, t) for o, t, _ in manifests[-1].skipped] == [(len(base) + len(tail), "RemoveTopicRecord")]
    with pytest.raises(MetadataLoadError) as info:
        loader = Loader()
        loader.replay(to_log(base))
        loader.replay(to_log([missing], first_offset=len(base)))
    assert info.value.offset == len(base) and info.value.record_type == "RemoveTopicRecord"
