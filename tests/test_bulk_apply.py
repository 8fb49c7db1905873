"""Proves that committed batches reach the metadata image in bulk without changing it: raft's
executor hands each run of consecutive commits to ``handle_commits`` in one call, in order, with
leader changes and snapshot loads between runs where the core put them; the image publisher's
bulk apply gives the same image as one replay per batch; a batch that may lower metadata.version
is applied on its own between bulk replays (a lowered metadata.version reloads the image before
the next record), other feature level changes stay in the run. Runs (raft/wire.py BatchRun, what the engine log's reads and Fetch answers become):
``take`` agrees with the core's per-batch delivery rule, a run's bytes are its batches' bytes,
batches that do not continue each other are refused, a run replayed from its bytes gives the
per-batch image, and the core delivers a backlog from such a log as CommitRuns within budget."""

from __future__ import annotations

import pytest

from kraftlog.engine.controller.controller import ImagePublisher
from kraftlog.engine.image import workload
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.batch import build_batch_from_values
from kraftlog.errors import CorruptRecordError
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


def _metadata_version(level: int) -> bytes:
    return codec.encode_record("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": level})


@pytest.mark.parametrize("lowered", [False, True])
def test_only_a_batch_that_may_lower_metadata_version_is_applied_on_its_own(lowered):
    """A batch whose FeatureLevelRecord lowers metadata.version goes alone (a lowered version
    reloads the image before the next record); one that sets it again or raises it, or changes
    another feature, stays in the run. Either way the image is the one-by-one image."""
    shape = workload.WorkloadShape.scaled(200, replicas_per_broker=100)
    values = list(workload.generate(shape))
    level = codec.decode_record(values[0]).data["FeatureLevel"]  # values[0]: metadata.version
    other = codec.encode_record("FeatureLevelRecord", 0, {"Name": "kraft.version", "FeatureLevel": 1})
    mid = [_metadata_version(level - 1 if lowered else level), _metadata_version(level + 1), other]
    values = values[:60] + mid + values[60:]
    batches = _committed_batches(values, 10)  # batch 6 holds the three

    class Counting(ImagePublisher):
        singles = 0

        def handle_commit(self, batch):
            self.singles += 1
            super().handle_commit(batch)

    publisher = Counting()
    publisher.handle_commits(batches)
    assert publisher.singles == (1 if lowered else 0)
    one_by_one = ImagePublisher()
    for b in batches:
        one_by_one.handle_commit(b)
    assert publisher.next_offset == one_by_one.next_offset == batches[-1].next_offset
    for name in one_by_one.image.topics.topic_names():
        assert list(publisher.image.topics.partitions_of(name)) == list(one_by_one.image.topics.partitions_of(name))
    assert publisher.image.features == one_by_one.image.features
    assert publisher.image.features.metadata_version == level + 1


# ---- runs: batches whose headers sit in arrays (raft/wire.py BatchRun) -----------------------------

def _run_of(counts: list[int]):
    raw = b"".join(build_batch_from_values([b"r%d" % k] * n, base_offset=sum(counts[:k]), partition_leader_epoch=1 + k // 3)
                   for k, n in enumerate(counts))
    return raw, wire.split_batches(raw)


@pytest.mark.parametrize("counts", [[1] * 9, [3, 1, 4, 1, 5, 9, 2, 6], [7]])
def test_a_run_takes_what_fits_as_the_per_batch_loop_would(counts):
    """take() agrees with the per-batch rule of the core's delivery loop, for every bound."""
    raw, run = _run_of(counts)
    batches = list(run)
    assert [b.base_offset for b in batches] == [sum(counts[:k]) for k in range(len(counts))]
    assert bytes(run.raw) == raw and run.next_offset == sum(counts) and run.record_count == sum(counts)
    for end in range(sum(counts) + 2):
        for max_batches in (1, 2, len(counts)):
            for max_records in (1, 3, 100):
                taken, records = 0, 0
                for b in batches:  # the core's rule: stop at the end, the batch budget, the record budget
                    if b.next_offset > end or taken == max_batches or records >= max_records:
                        break
                    taken, records = taken + 1, records + len(b.records)
                assert run.take(end, max_batches, max_records) == taken
                head = run[:taken]
                assert bytes(head.raw) == b"".join(bytes(b.raw) for b in batches[:taken])


def test_a_run_refuses_batches_that_do_not_continue_each_other():
    raw = build_batch_from_values([b"a"], base_offset=0) + build_batch_from_values([b"b"], base_offset=5)
    with pytest.raises(CorruptRecordError, match="does not continue"):
        wire.split_batches(raw)


def test_a_run_delivered_in_bulk_gives_the_image_of_one_replay_per_batch():
    """ImagePublisher.handle_commit_run (the run's bytes as they lie in the log) equals the
    per-batch replay; with a FeatureLevelRecord inside it still applies that batch on its own."""
    shape = workload.WorkloadShape.scaled(1_000, replicas_per_broker=300)
    values = list(workload.generate(shape))
    raw = b"".join(build_batch_from_values(values[i:i + 7], base_offset=i) for i in range(0, len(values), 7))
    run = wire.split_batches(raw)
    one, bulk = ImagePublisher(), ImagePublisher()
    for b in run:
        one.handle_commit(b)
    bulk.handle_commit_run(run[:1])  # metadata.version: through handle_commits
    bulk.handle_commit_run(run[1:])
    assert bulk.next_offset == one.next_offset == run.next_offset
    for name in list(one.image.topics.topic_names())[:100]:
        assert list(bulk.image.topics.partitions_of(name)) == list(one.image.topics.partitions_of(name))
    assert bulk.image.cluster == one.image.cluster and bulk.image.features == one.image.features


def test_the_core_delivers_runs_from_a_log_that_reads_runs(tmp_path):
    """A single voter over the engine log (whose reads are runs) delivers its backlog as CommitRuns
    within the record budget, every offset once and in order, and leads only after it."""
    import dataclasses
    import random

    from raft_sim.storage import FakeClock

    from kraftlog.engine.node.raftlog import EngineRaftLog, FileSnapshotStore
    from kraftlog.raft.core import RaftConfig, RaftCore
    from kraftlog.raft.ready import CommitRun
    from kraftlog.raft.types import ElectionState

    class _Quorum:
        state = ElectionState(1, voters=frozenset({1}))

        def read(self):
            return self.state

        def write(self, state):
            self.state = state

    log = EngineRaftLog(tmp_path / "log", FileSnapshotStore(tmp_path / "snapshots"))
    for k in range(300):
        log.append_as_leader([b"v%d" % k] * (1 + k % 4), 1)
    log.flush()
    clock = FakeClock(1000)
    config = dataclasses.replace(RaftConfig(election_timeout_ms=100), deliveries_max_records=100)
    core = RaftCore(node_id=1, voters={1}, cluster_id=None, clock=clock, rng=random.Random(1), log=log,
                    quorum_store=_Quorum(), snapshots=FileSnapshotStore(tmp_path / "snapshots"), config=config)
    delivered, notices = [], []
    for _ in range(200):
        ready = core.poll()
        if ready.flush_log:
            log.flush()
        for d in ready.deliveries:
            if type(d) is CommitRun:
                assert d.batches.record_count <= 100 + 3  # the budget, plus the batch that crossed it
                delivered.extend(b.base_offset for b in d.batches)
            elif type(d) is LeaderChangeNotice:
                notices.append(len(delivered))
        clock.now_ms += 100
    ends = [b.next_offset for b in log.read(0, 1 << 30)]
    assert delivered == [0] + ends[:-1] and notices and notices[0] >= 300
    log.close()
