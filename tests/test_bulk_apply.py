"""Proves that committed batches reach the metadata image in bulk without changing it: raft's
executor hands each run of consecutive commits to ``handle_commits`` in one call, in order, with
leader changes and snapshot loads between runs where the core put them; the image publisher's
bulk apply gives the same image as one replay per batch; a batch holding a FeatureLevelRecord is
applied on its own between bulk replays (a lowered metadata.version reloads the image before the
next record)."""

from __future__ import annotations

from kraftlog.engine.controller.controller import ImagePublisher
from kraftlog.engine.image import workload
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.batch import build_batch_from_values
from kraftlog.raft import wire
from kraftlog.raft.ready import Commit, LeaderChangeNotice, LoadSnapshot, deliver
from kraftlog.raft.types import LogBatch, OffsetAndEpoch


class Recorder:
    def __init__(self):
        self.calls = []

    def handle_commit(self, batch):
        self.calls.append(("one", batch.base_offset))

    def handle_commits(self, batches):
        self.calls.append(("run", tuple(b.base_offset for b in batches)))

    def handle_leader_change(self, leader_id, epoch):
        self.calls.append(("leader", leader_id))

    def handle_load_snapshot(self, snapshot_id, snapshots):
        self.calls.append(("snapshot", snapshot_id.offset))


def _commit(offset: int) -> Commit:
    return Commit(LogBatch(offset, 1, (b"x",)))


def test_runs_of_commits_go_in_one_call_and_other_deliveries_keep_their_place():
    deliveries = (LoadSnapshot(OffsetAndEpoch(10, 1)), _commit(10), _commit(11), _commit(12),
                  LeaderChangeNotice(2, 3), _commit(13), LeaderChangeNotice(1, 4), _commit(14), _commit(15))
    listener = Recorder()
    deliver(deliveries, listener, snapshots=None)
    assert listener.calls == [("snapshot", 10), ("run", (10, 11, 12)), ("leader", 2), ("one", 13), ("leader", 1),
                              ("run", (14, 15))]


def test_a_listener_without_bulk_gets_every_commit_one_by_one():
    class OneByOne(Recorder):
        handle_commits = None

    listener = OneByOne()
    deliver((_commit(0), _commit(1), LeaderChangeNotice(1, 1)), listener, snapshots=None)
    assert listener.calls == [("one", 0), ("one", 1), ("leader", 1)]


def _committed_batches(values: list[bytes], per_batch: int) -> list:
    raw = b"".join(build_batch_from_values(values[i:i + per_batch], base_offset=i)
                   for i in range(0, len(values), per_batch))
    return list(wire.split_batches(raw))


def test_bulk_apply_gives_the_image_of_one_replay_per_batch():
    shape = workload.WorkloadShape.scaled(2_000, replicas_per_broker=500)
    values = list(workload.generate(shape)) + list(workload.churn(shape, 3_000, seed=5))
    values = [v for v in values if codec.decode_record(v).record_type != "FeatureLevelRecord"]
    base = list(workload.generate(shape))[:1]  # metadata.version first, on its own
    batches = _committed_batches(base + values, 37)
    one, bulk = ImagePublisher(), ImagePublisher()
    for b in batches:
        one.handle_commit(b)
    bulk.handle_commit(batches[0])
    for at in range(1, len(batches), 50):
        bulk.handle_commits(batches[at:at + 50])
    assert bulk.next_offset == one.next_offset == batches[-1].next_offset
    assert bulk.image.topics.partition_count == one.image.topics.partition_count > 0
    for name in list(one.image.topics.topic_names())[:200]:
        assert list(bulk.image.topics.partitions_of(name)) == list(one.image.topics.partitions_of(name))
    assert bulk.image.cluster == one.image.cluster and dict(bulk.image.configs) == dict(one.image.configs)
    assert bulk.image.provenance == one.image.provenance


def test_a_batch_with_a_feature_level_change_is_applied_on_its_own():
    """The batches around it still go in bulk; the image is the one-by-one image."""
    shape = workload.WorkloadShape.scaled(200, replicas_per_broker=100)
    values = list(workload.generate(shape))
    level = values[0]  # metadata.version
    values = values[:60] + [level] + values[60:]  # a second FeatureLevelRecord mid-run
    batches = _committed_batches(values, 10)

    class Counting(ImagePublisher):
        singles = 0

        def handle_commit(self, batch):
            self.singles += 1
            super().handle_commit(batch)

    publisher = Counting()
    publisher.handle_commits(batches)  # batches 0 and 6 hold a FeatureLevelRecord
    assert publisher.singles == 2
    one_by_one = ImagePublisher()
    for b in batches:
        one_by_one.handle_commit(b)
    assert publisher.next_offset == one_by_one.next_offset == batches[-1].next_offset
    for name in one_by_one.image.topics.topic_names():
        assert list(publisher.image.topics.partitions_of(name)) == list(one_by_one.image.topics.partitions_of(name))
    assert publisher.image.features == one_by_one.image.features
