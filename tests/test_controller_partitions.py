"""Proves the controller's partition side (issue #7).

Fast, in-process (engine/controller/replication.py, pure):
- the bulk plan (numpy over the image's columns) makes exactly the records Kafka's
  PartitionChangeBuilder steps make one partition at a time (build_change), on generated clusters,
  with and without the pre-3.6 leader-epoch bump on ISR shrink;
- the template encoder writes the generic codec's bytes exactly;
- Kafka's election rules on hand-made cases: replica order decides, fenced and shutting-down
  brokers never lead, the last ISR member stays, an unfenced broker revives offline partitions,
  and the ELR (KIP-966) rules through fence -> fence -> unfence;
- replaying the records bumps the leader epoch only where the leader changed and the partition
  epoch on every change.

Slow, with three real `kraftlog node run` controller processes (the test plays the brokers over
the wire): a broker that stops heartbeating loses its leaderships and ISR places in the proposal
that fences it, and brings its offline partitions and ISR places back when unfenced; a controlled shutdown moves
leaders away before should_shut_down; DeleteTopics, CreatePartitions and AlterPartition succeed
and answer each documented error, and a standby answers NOT_CONTROLLER.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
import uuid
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.alter_partition.v3 import request as ap_req
from kio.schema.alter_partition.v3 import response as ap_resp
from kio.schema.broker_heartbeat.v1 import response as hb_resp
from kio.schema.broker_registration.v4 import response as reg_resp
from kio.schema.create_partitions.v3 import request as cp_req
from kio.schema.create_partitions.v3 import response as cp_resp
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.delete_topics.v6 import request as dt_req
from kio.schema.delete_topics.v6 import response as dt_resp
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req
from kio.static.primitive import i8, i32, i64

from kraftlog.engine.controller import replication as rp
from kraftlog.engine.controller.controller import Controller, ControllerConfig, ImagePublisher
from kraftlog.engine.image import versions, workload
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.image.topics import uuid_to_halves
from kraftlog.engine.protocol.connection import ClientConnection, ClientError
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec
from kraftlog.raft.aio.driver import DriverConfig
from kraftlog.raft.state import Role
from tests.test_node_controller import (
    SESSION_TIMEOUT_MS,
    NodeCluster,
    _ask,
    _heartbeat,
    _register_at_active,
    _registration,
    _topics,
    _until,
)

try:  # the controller's Metadata answer carries tagged fields kio's plain reader refuses
    from kraftlog.engine.protocol.metadata_response import EpochMetadataResponse as MetadataAnswer
except ImportError:  # pragma: no cover - before that answer existed
    from kio.schema.metadata.v12.response import MetadataResponse as MetadataAnswer

LATEST = versions.LATEST
BEFORE_3_6 = versions.LEVELS["3.5-IV2"]


# ---- building small images --------------------------------------------------------------------------


def _image(partitions, *, brokers=None, level=LATEST, elr=False, min_isr=None):
    """An image with brokers {id: "live" | "fenced" | "shutdown"} (default 0..5 live) and one topic
    "t" holding ``partitions``: (replicas, isr, leader) or (replicas, isr, leader, elr, last_known_elr)."""
    brokers = brokers if brokers is not None else {b: "live" for b in range(6)}
    topic_id = uuid.UUID(int=0x1234_5678_9ABC_DEF0_1111_2222_3333_4444)
    values = [codec.encode_record("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": level})]
    if elr:
        values.append(codec.encode_record("FeatureLevelRecord", 0, {"Name": rp.ELR_FEATURE, "FeatureLevel": 1}))
    for b, state in brokers.items():
        values.append(codec.encode_record("RegisterBrokerRecord", versions.register_broker_record_version(level), {
            "BrokerId": b, "IncarnationId": uuid.UUID(int=b + 1), "BrokerEpoch": 10 + b, "EndPoints": [],
            "Features": [], "Rack": None, "Fenced": state == "fenced"}, allow_loss=True))
        if state == "shutdown":
            values.append(codec.encode_record("BrokerRegistrationChangeRecord", 1, {
                "BrokerId": b, "BrokerEpoch": 10 + b, "InControlledShutdown": 1}))
    values.append(codec.encode_record("TopicRecord", 0, {"Name": "t", "TopicId": topic_id}))
    if min_isr is not None:
        values.append(codec.encode_record("ConfigRecord", 0, {"ResourceType": 2, "ResourceName": "t",
                                                              "Name": rp.MIN_ISR_CONFIG, "Value": str(min_isr)}))
    pr_version = versions.partition_record_version(level)
    for pid, spec in enumerate(partitions):
        replicas, isr, leader = spec[:3]
        data = {"PartitionId": pid, "TopicId": topic_id, "Replicas": list(replicas), "Isr": list(isr),
                "Leader": leader, "LeaderEpoch": 5, "PartitionEpoch": 7}
        if len(spec) > 3:
            data["EligibleLeaderReplicas"], data["LastKnownElr"] = list(spec[3]), list(spec[4])
        values.append(codec.encode_record("PartitionRecord", pr_version, data))
    return _replay(Loader(), values)


def _replay(loader: Loader, values: list[bytes]):
    base = loader.image.provenance.offset + 1
    return loader.replay(batch.build_batch_from_values(values, base_offset=base, timestamp_ms=0))


def _changes(image, broker: int, event: str) -> list[dict]:
    changes = rp.fence_changes(image, broker) if event == "fence" else rp.unfence_changes(image, broker)
    return sorted(changes.records(), key=lambda d: d["PartitionId"])


def _strip(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "TopicId"} for r in records]


# ---- Kafka's rules on hand-made cases ----------------------------------------------------------------


def test_fenced_leader_hands_over_in_replica_order_and_leaves_the_isr():
    """The new leader is the first *replica* (not ISR entry) in the shrunk ISR that is live; a
    follower leaving the ISR changes no leader (and, from 3.6-IV0, no leader epoch)."""
    image = _image([((1, 2, 3), (3, 2, 1), 1),     # 1 leads: 2 comes before 3 in replica order
                    ((2, 1, 3), (2, 1, 3), 2),     # 1 follows: ISR shrinks only
                    ((4, 5), (4, 5), 4)])          # 1 absent: untouched
    assert _strip(_changes(image, 1, "fence")) == [
        {"PartitionId": 0, "Isr": [3, 2], "Leader": 2},
        {"PartitionId": 1, "Isr": [2, 3]}]


def test_before_3_6_an_isr_shrink_bumps_the_leader_epoch():
    """KAFKA-15021: below metadata.version 3.6-IV0 the shrink is written with Leader = the
    current leader, so the leader epoch moves too."""
    image = _image([((2, 1, 3), (2, 1, 3), 2)], level=BEFORE_3_6)
    assert _strip(_changes(image, 1, "fence")) == [{"PartitionId": 0, "Isr": [2, 3], "Leader": 2}]


def test_fenced_and_shutting_down_brokers_never_lead():
    """Replica 2 is fenced and 3 is shutting down: the leadership goes to 4, the next live ISR member."""
    image = _image([((1, 2, 3, 4), (1, 2, 3, 4), 1)],
                   brokers={1: "live", 2: "fenced", 3: "shutdown", 4: "live"})
    assert _strip(_changes(image, 1, "fence")) == [{"PartitionId": 0, "Isr": [2, 3, 4], "Leader": 4}]


def test_last_isr_member_stays_and_the_partition_goes_offline():
    """Without ELR an ISR is never emptied: leader -1, ISR kept; and no live ISR member at all
    also leaves the partition without a leader (the ISR still shrinks)."""
    image = _image([((1, 2), (1,), 1), ((1, 2), (1, 2), 1)], brokers={1: "live", 2: "fenced"})
    assert _strip(_changes(image, 1, "fence")) == [
        {"PartitionId": 0, "Leader": -1},
        {"PartitionId": 1, "Isr": [2], "Leader": -1}]


def test_unfenced_broker_brings_offline_partitions_back():
    """Kafka's handleBrokerUnfenced: leader -1 partitions elect again, the broker being unfenced
    counting as live; partitions with a leader are left alone (no move back)."""
    image = _image([((1, 2), (1,), -1), ((2, 3), (2, 3), 3), ((3, 1), (3,), -1)],
                   brokers={1: "fenced", 2: "live", 3: "fenced"})
    assert _strip(_changes(image, 1, "unfence")) == [{"PartitionId": 0, "Leader": 1}]


def test_elr_rules_through_fence_fence_unfence():
    """KIP-966 with min.insync.replicas 2 (the expected records follow Kafka's builder steps):
    fencing the leader of ISR [1, 2] keeps 1 as an eligible leader; fencing 2 empties the ISR,
    records 2 as the last known leader and both in the ELR; unfencing 1 elects it from the ELR
    (it becomes the ISR) and clears the last known leader."""
    loader = Loader()
    base = _image([((1, 2, 3), (1, 2), 1)], brokers={1: "live", 2: "live", 3: "fenced"}, elr=True, min_isr=2)
    loader.image = base
    first = _strip(_changes(base, 1, "fence"))
    assert first == [{"PartitionId": 0, "Leader": 2, "Isr": [2], "EligibleLeaderReplicas": [1]}]
    step = _apply(loader, rp.fence_changes(base, 1), fence=1)
    second = _strip(_changes(step, 2, "fence"))
    assert second == [{"PartitionId": 0, "Leader": -1, "Isr": [], "EligibleLeaderReplicas": [1, 2],
                       "LastKnownElr": [2]}]
    step = _apply(loader, rp.fence_changes(step, 2), fence=2)
    third = _strip(_changes(step, 1, "unfence"))
    assert third == [{"PartitionId": 0, "Leader": 1, "Isr": [1], "EligibleLeaderReplicas": [2], "LastKnownElr": []}]


def _apply(loader: Loader, changes: rp.PartitionChanges, *, fence: int):
    """Replay the changes and then the FenceBrokerRecord, as the controller writes them."""
    values = rp.encode_changes(changes) + [codec.encode_record("FenceBrokerRecord", 0, {"Id": fence,
                                                                                       "Epoch": 10 + fence})]
    return _replay(loader, values)


def test_replay_bumps_leader_epoch_on_leader_change_and_partition_epoch_on_every_change():
    """The image applies the records as Kafka's PartitionRegistration.merge: leader epoch +1 only
    where the leader changed, partition epoch +1 on every changed partition, others untouched."""
    loader = Loader()
    before = _image([((1, 2, 3), (1, 2, 3), 1), ((2, 1, 3), (2, 1, 3), 2), ((4, 5), (4, 5), 4)])
    loader.image = before
    after = _replay(loader, rp.encode_changes(rp.fence_changes(before, 1)))
    old = before.topics.partitions_of("t")
    new = after.topics.partitions_of("t")
    assert [(p.leader, p.leader_epoch, p.partition_epoch, p.isr) for p in new] == [
        (2, old[0].leader_epoch + 1, old[0].partition_epoch + 1, (2, 3)),
        (2, old[1].leader_epoch, old[1].partition_epoch + 1, (2, 3)),
        (4, old[2].leader_epoch, old[2].partition_epoch, (4, 5))]


# ---- the bulk plan against the one-partition builder --------------------------------------------------


@st.composite
def _clusters(draw):
    states = draw(st.lists(st.sampled_from(["live", "live", "fenced", "shutdown"]), min_size=6, max_size=6))
    brokers = dict(enumerate(states))
    partitions = []
    for _ in range(draw(st.integers(1, 40))):
        replicas = draw(st.permutations(range(6)))[:draw(st.integers(1, 5))]
        isr = draw(st.permutations(replicas))[:draw(st.integers(1, len(replicas)))]
        leader = draw(st.sampled_from([*isr, -1]))
        partitions.append((tuple(replicas), tuple(isr), leader))
    return brokers, partitions


@settings(max_examples=60)
@given(cluster=_clusters(), broker=st.integers(0, 5), event=st.sampled_from(["fence", "unfence"]),
       level=st.sampled_from([BEFORE_3_6, LATEST]))
def test_bulk_plan_equals_the_partition_builder(cluster, broker, event, level):
    """plan_changes over all rows == build_change per partition (Kafka's builder order), and the
    template bytes == the generic codec's bytes."""
    brokers, partitions = cluster
    image = _image(partitions, brokers=brokers, level=level)
    remove = broker if event == "fence" else -1
    rules = rp.rules_for(image, remove=remove, add=broker if event == "unfence" else -1)
    rows = image.topics.live_partition_rows()
    bulk = rp.plan_changes(image.topics, rows, rules, remove=remove)
    assert not bulk.extra  # no ELR here: everything went the bulk way
    expected = []
    for row in rows.tolist():
        part = image.topics.registration(row)
        change = rp.build_change(part, [b for b in part.isr if b != remove], rules)
        if change is not None:
            expected.append(change)
    assert bulk.records() == expected
    assert rp.encode_changes(bulk) == [codec.encode_record("PartitionChangeRecord", rules.record_version, d)
                                       for d in expected]


@settings(max_examples=40)
@given(rows=st.lists(st.tuples(st.integers(-2, 9), st.lists(st.integers(0, 1 << 20), max_size=40),
                               st.booleans(), st.integers(0, (1 << 31) - 1)), min_size=1, max_size=30),
       version=st.sampled_from([0, 1, 2]))
def test_encoder_writes_the_generic_codec_bytes(rows, version):
    """Every block shape (Leader or not, Isr null / empty / short / longer than the template's
    31) encodes to exactly what codec.encode_record writes."""
    rows = [r for r in rows if r[0] != -2 or r[2]]  # a block record changes something
    if not rows:
        return
    width = max(1, *(len(r[1]) for r in rows))
    isr = np.full((len(rows), width), -1, dtype=np.int32)
    for i, r in enumerate(rows):
        isr[i, :len(r[1])] = r[1]
    ids = [uuid.UUID(int=(r[3] * 0x9E3779B97F4A7C15 * 0x100000001B3) % (1 << 128)) for r in rows]
    halves = np.array([uuid_to_halves(u) for u in ids], dtype=np.int64)
    changes = rp.PartitionChanges(
        topic_hi=halves[:, 0], topic_lo=halves[:, 1], partition_id=np.arange(len(rows), dtype=np.int32) * 7,
        leader=np.array([r[0] for r in rows], dtype=np.int32), isr=isr,
        isr_count=np.array([len(r[1]) if r[2] else -1 for r in rows], dtype=np.int32), record_version=version)
    records = changes.records()
    assert [d["TopicId"] for d in records] == ids
    assert rp.encode_changes(changes) == [codec.encode_record("PartitionChangeRecord", version, d) for d in records]


def test_row_scans_match_the_registrations():
    """rows_with_isr_member / rows_led_by / rows_without_leader / leads_any agree with a plain
    walk over every partition registration (a deleted topic's rows are not live; leads_any counts
    leaderships among ISR members only, as Kafka's BrokersToIsrs)."""
    image = _image([((1, 2), (1, 2), 1), ((2, 3), (3,), 3), ((3, 1), (3, 1), -1), ((1,), (1,), -1),
                    ((4, 2), (2,), 4)])  # a leader outside its ISR is no leadership for Kafka's hasLeaderships
    parts = {image.topics.registration(int(r)).partition_id: image.topics.registration(int(r))
             for r in image.topics.live_partition_rows()}
    pid = {int(r): image.topics.registration(int(r)).partition_id for r in image.topics.live_partition_rows()}
    for b in range(5):
        assert [pid[int(r)] for r in rp.rows_with_isr_member(image.topics, b)] == \
            [p for p, reg in parts.items() if b in reg.isr]
        assert [pid[int(r)] for r in rp.rows_led_by(image.topics, b)] == [p for p, reg in parts.items() if reg.leader == b]
        assert rp.leads_any(image.topics, b) == any(reg.leader == b and b in reg.isr for reg in parts.values())
    assert [pid[int(r)] for r in rp.rows_without_leader(image.topics)] == [2, 3]
    loader = Loader()
    loader.image = image
    gone = _replay(loader, [codec.encode_record("RemoveTopicRecord", 0, {"TopicId": parts[0].topic_id})])
    assert len(rp.rows_with_isr_member(gone.topics, 1)) == 0 and not rp.leads_any(gone.topics, 1)


# ---- the controller in-process: proposals, their order and split ----------------------------------


class _InstantDriver:
    """A RaftDriver stand-in that commits each proposal at once into the publisher (one batch per
    proposal, as the real driver appends them) and keeps what was proposed."""

    def __init__(self, publisher: ImagePublisher, config: DriverConfig):
        self.core = SimpleNamespace(role=Role.LEADER, epoch=1)
        self.config = config
        self.publisher = publisher
        self.end = publisher.next_offset
        self.log = SimpleNamespace(end_offset=lambda: self.end)
        self.proposals: list[list[bytes]] = []

    def propose(self, values):
        base = self.end
        self.end += len(values)
        self.proposals.append(list(values))
        raw = batch.build_batch_from_values(values, base_offset=base, timestamp_ms=0)
        self.publisher.handle_commit(SimpleNamespace(raw=raw, next_offset=self.end))
        future = asyncio.get_running_loop().create_future()
        future.set_result((base, self.end - 1))
        return future


async def serve_active(publisher: ImagePublisher, driver, config: ControllerConfig, scenario, *, rng) -> None:
    """``scenario(controller, driver)`` against node 1's controller over ``publisher`` and
    ``driver``, once it is active (leader in epoch 1); the controller is closed after."""
    controller = Controller(1, None, driver, publisher, config, rng=rng)
    publisher._on_leader_change = controller.on_leader_change
    publisher.handle_leader_change(1, 1)
    await asyncio.sleep(0)
    try:
        await scenario(controller, driver)
    finally:
        await controller.close()


def _record_type(value: bytes) -> str:
    """The record type, with Kafka's fencing records told apart from other registration changes."""
    record = codec.decode_record(value)
    if record.record_type == "BrokerRegistrationChangeRecord" and record.data.get("Fenced") in (1, -1):
        return "Fence" if record.data["Fenced"] == 1 else "Unfence"
    return {"FenceBrokerRecord": "Fence", "UnfenceBrokerRecord": "Unfence"}.get(record.record_type,
                                                                               record.record_type)


def test_fencing_a_broker_leading_10k_partitions_splits_proposals_and_fences_last():
    """30,000 partitions on 3 brokers (each leads 10,000, follows 20,000): a heartbeat asking to
    be fenced writes 30,000 PartitionChangeRecords in proposals of at most 10,000 records, the
    fencing record (BrokerRegistrationChangeRecord Fenced=1, as Kafka from 3.3-IV2) last; the computation takes well under a second; then a controlled shutdown
    of broker 1 writes BrokerRegistrationChangeRecord first, answers should_shut_down only after
    the other active broker reported the shutdown offset, and fences it."""
    shape = workload.WorkloadShape(topics=3000, partitions_per_topic=10, replicas_per_broker=30_000)
    assert shape.brokers == 3
    values = list(workload.generate(shape))

    async def scenario():
        publisher = ImagePublisher()
        for start in range(0, len(values), 5000):
            chunk = values[start:start + 5000]
            raw = batch.build_batch_from_values(chunk, base_offset=start, timestamp_ms=0)
            publisher.handle_commit(SimpleNamespace(raw=raw, next_offset=start + len(chunk)))
        driver = _InstantDriver(publisher, DriverConfig(max_batch_records=10_000))
        controller = Controller(1, None, driver, publisher, ControllerConfig(fence_check_interval_ms=60_000))
        publisher._on_leader_change = controller.on_leader_change
        publisher.handle_leader_change(1, 1)
        await asyncio.sleep(0)
        assert controller.is_active
        try:
            started = time.process_time()
            records = controller._fence_records(publisher.image.cluster.brokers[0])
            assert time.process_time() - started < 1.0
            assert len(records) == 30_001
            answer = await controller.heartbeat(dataclasses.replace(_heartbeat(0, 100), want_fence=True))
            assert (answer.error_code, answer.is_fenced, answer.should_shut_down) == (ErrorCode.none, True, False)
            sizes = [len(p) for p in driver.proposals]
            assert sizes == [10_000, 10_000, 10_000, 1]
            kinds = [_record_type(v) for p in driver.proposals for v in p]
            assert set(kinds[:-1]) == {"PartitionChangeRecord"} and kinds[-1] == "Fence"
            assert codec.decode_record(driver.proposals[-1][-1]).record_type == "BrokerRegistrationChangeRecord"
            image = publisher.image
            assert not rp.leads_any(image.topics, 0) and len(rp.rows_with_isr_member(image.topics, 0)) == 0
            assert image.cluster.brokers[0].fenced

            # controlled shutdown of broker 1 (it leads 10,000 + what broker 0 handed over)
            driver.proposals.clear()
            shut = dataclasses.replace(_heartbeat(1, 101), want_shut_down=True, current_metadata_offset=i64(0))
            answer = await controller.heartbeat(shut)
            assert (answer.is_fenced, answer.should_shut_down) == (False, False)
            kinds = [_record_type(v) for p in driver.proposals for v in p]
            assert kinds[0] == "BrokerRegistrationChangeRecord" and set(kinds[1:]) == {"PartitionChangeRecord"}
            image = publisher.image
            assert image.cluster.brokers[1].in_controlled_shutdown and not rp.leads_any(image.topics, 1)
            answer = await controller.heartbeat(shut)  # broker 2 has not reported the new offset yet
            assert (answer.is_fenced, answer.should_shut_down) == (False, False)
            caught_up = dataclasses.replace(_heartbeat(2, 102), current_metadata_offset=i64(driver.end))
            assert (await controller.heartbeat(caught_up)).is_fenced is False
            answer = await controller.heartbeat(shut)
            assert (answer.is_fenced, answer.should_shut_down) == (True, True)
            assert publisher.image.cluster.brokers[1].fenced
            assert _record_type(driver.proposals[-1][-1]) == "Fence"
        finally:
            await controller.close()

    asyncio.run(scenario())


def test_fencing_records_follow_the_metadata_version():
    """Kafka fences and unfences with BrokerRegistrationChangeRecord from 3.3-IV2 and with
    Fence/UnfenceBrokerRecord before; the fencing record comes after the partition changes, the
    unfencing one before the elections it allows."""
    for level, fence_type in ((versions.LEVELS["3.3-IV1"], "FenceBrokerRecord"),
                              (versions.LEVELS["3.3-IV2"], "BrokerRegistrationChangeRecord")):
        image = _image([((1, 2), (1, 2), 1), ((1, 2), (1,), -1)], brokers={1: "fenced", 2: "live"}, level=level)
        publisher = ImagePublisher()
        publisher.loader.image = image
        controller = Controller(1, None, SimpleNamespace(core=None), publisher)
        fence = controller._fence_records(image.cluster.brokers[2])
        assert [codec.decode_record(v).record_type for v in fence] == ["PartitionChangeRecord", fence_type]
        assert _record_type(fence[-1]) == "Fence"
        unfence = controller._unfence_records(image.cluster.brokers[1])
        assert [_record_type(v) for v in unfence] == ["Unfence", "PartitionChangeRecord"]
        assert codec.decode_record(unfence[1]).data["Leader"] == 1


# ---- real controller processes ---------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path):
    yield from NodeCluster(str(tmp_path)).running()


class _Brokers:
    """The test playing brokers: registration on the active controller, heartbeats every 0.2 s
    from the ones in ``beating`` (their last answers in ``answers``)."""

    def __init__(self, conns: dict[int, ClientConnection]):
        self.conns = conns
        self.active = -1
        self.epochs: dict[int, int] = {}
        self.beating: set[int] = set()
        self.answers: dict[int, hb_resp.BrokerHeartbeatResponse] = {}
        self._task: asyncio.Task | None = None

    async def register(self, ids) -> None:
        self.active, self.epochs[ids[0]] = await _register_at_active(self.conns, _register_request(ids[0]))
        for b in ids[1:]:
            r = await _ask(self.conn, 62, 4, _register_request(b), reg_resp.BrokerRegistrationResponse)
            assert r.error_code == ErrorCode.none, r
            self.epochs[b] = r.broker_epoch
        self.beating = set(ids)
        self._task = asyncio.get_running_loop().create_task(self._beat())
        await _until(lambda: asyncio.sleep(0, all(b in self.answers and not self.answers[b].is_fenced for b in ids)),
                     10, "every broker unfenced")

    @property
    def conn(self) -> ClientConnection:
        return self.conns[self.active]

    @property
    def standby(self) -> ClientConnection:
        return next(c for i, c in self.conns.items() if i != self.active)

    async def _beat(self) -> None:
        while True:
            for b in sorted(self.beating):
                try:
                    r = await _ask(self.conn, 63, 1, _heartbeat(b, self.epochs[b]), hb_resp.BrokerHeartbeatResponse, 2)
                except (OSError, ClientError, TimeoutError):
                    continue
                if r.error_code == ErrorCode.none:
                    self.answers[b] = r
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for conn in self.conns.values():
            await conn.close()


def _register_request(broker_id: int):
    """_registration for 101..103; 104 is a copy of 101's on its own rack."""
    if broker_id in (101, 102, 103):
        return _registration(broker_id, uuid.uuid4())
    return dataclasses.replace(_registration(101, uuid.uuid4()), broker_id=i32(broker_id), rack=f"rack-{broker_id}")


async def _open(cluster) -> _Brokers:
    conns = {}
    for i, (host, port) in cluster.addresses.items():
        conns[i] = ClientConnection(host, port)
        await conns[i].open()
    return _Brokers(conns)


async def _metadata(conn: ClientConnection):
    return await _ask(conn, 3, 12, md_req.MetadataRequest(topics=None, include_topic_authorized_operations=False),
                      MetadataAnswer)


def _state(md) -> dict[tuple[str, int], tuple[int, int, tuple[int, ...], tuple[int, ...]]]:
    """(topic, partition) -> (leader, leader epoch, ISR, replicas) from a Metadata answer."""
    return {(t.name, p.partition_index): (p.leader_id, p.leader_epoch, tuple(p.isr_nodes), tuple(p.replica_nodes))
            for t in md.topics for p in t.partitions}


async def _state_when(conn, predicate, what: str, timeout_s: float = 10):
    async def check():
        md = await _metadata(conn)
        return md if predicate(md) else None

    md = await _until(check, timeout_s, what)
    return md, _state(md)


def _live(md) -> set[int]:
    return {b.node_id for b in md.brokers}


@pytest.mark.slow
def test_silent_broker_loses_leaderships_and_controlled_shutdown_moves_them(cluster):
    """Four brokers, topics "moves" (12 x RF 3) and "solo" (8 x RF 1), on a real quorum:
    broker 104 stops heartbeating -> fenced; where it led, the first live replica of the shrunk ISR
    leads with leader epoch + 1; where it followed, only the ISR shrinks (same leader epoch, as at
    metadata.version >= 3.6); where it was the only ISR member, leader -1 and the ISR stays.
    Heartbeating again unfences it: its offline partitions come back to it (epoch + 1) and it
    rejoins every other ISR it left (same leader epoch; a metadata-only replica has nothing to
    copy); no leader moves back (preferred leaders return every leader.imbalance.check.interval,
    300 s here). Then broker 103 asks to shut down: the first answer keeps it running and
    unfenced while its leaderships move (it leaves every ISR it shares); a later answer says
    should_shut_down and is_fenced."""

    async def scenario():
        brokers = await _open(cluster)
        try:
            await brokers.register((101, 102, 103, 104))
            created = await _ask(brokers.conn, 19, 7, _topics(("moves", 12, 3), ("solo", 8, 1)),
                                 ct_resp.CreateTopicsResponse)
            assert [t.error_code for t in created.topics] == [ErrorCode.none, ErrorCode.none]
            _, before = await _state_when(brokers.conn, lambda md: len(_state(md)) == 20, "20 partitions")
            assert any(v[0] == 104 for k, v in before.items() if k[0] == "moves")
            assert any(v[0] == 104 for k, v in before.items() if k[0] == "solo")
            assert any(104 in v[2] and v[0] != 104 for v in before.values())

            brokers.beating.discard(104)
            _, fenced = await _state_when(brokers.conn, lambda md: 104 not in _live(md), "104 fenced",
                                         SESSION_TIMEOUT_MS / 1000 + 10)
            for key, (leader, epoch, isr, replicas) in before.items():
                new_isr = tuple(b for b in isr if b != 104) or isr
                if 104 not in isr:
                    expected = (leader, epoch, isr, replicas)
                elif new_isr == isr:  # 104 was the only ISR member
                    expected = (-1, epoch + 1, isr, replicas)
                elif leader == 104:
                    expected = (next(r for r in replicas if r in new_isr), epoch + 1, new_isr, replicas)
                else:
                    expected = (leader, epoch, new_isr, replicas)
                assert fenced[key] == expected, (key, before[key])

            brokers.beating.add(104)
            _, back = await _state_when(brokers.conn, lambda md: 104 in _live(md), "104 unfenced", 20)
            for key, (leader, epoch, isr, replicas) in fenced.items():
                if leader == -1:
                    expected = (104, epoch + 1, isr, replicas)
                elif 104 in replicas and 104 not in isr:
                    expected = (leader, epoch, (*isr, 104), replicas)
                else:
                    expected = (leader, epoch, isr, replicas)
                assert back[key] == expected, key

            brokers.beating.discard(103)
            leading = [k for k, v in back.items() if v[0] == 103]
            assert leading
            shut = dataclasses.replace(_heartbeat(103, brokers.epochs[103]), want_shut_down=True)
            first = await _ask(brokers.conn, 63, 1, shut, hb_resp.BrokerHeartbeatResponse)
            assert (first.error_code, first.is_fenced, first.should_shut_down) == (ErrorCode.none, False, False)
            md, moved = await _state_when(brokers.conn, lambda md: 103 not in _live(md), "103 shutting down")
            for key, (leader, epoch, isr, replicas) in back.items():
                if isr == (103,):
                    assert moved[key] == (-1, epoch + 1, isr, replicas), key
                elif 103 in isr:
                    assert 103 not in moved[key][2] and moved[key][0] != 103, key
                    assert moved[key][1] == epoch + (leader == 103), key
                else:
                    assert moved[key] == back[key], key

            async def shut_down():
                r = await _ask(brokers.conn, 63, 1, shut, hb_resp.BrokerHeartbeatResponse)
                return r if r.should_shut_down else None

            final = await _until(shut_down, 5, "should_shut_down for 103")
            assert final.is_fenced and final.error_code == ErrorCode.none
        finally:
            await brokers.close()

    asyncio.run(scenario())


_TIMEOUT = datetime.timedelta(seconds=5)


def _delete(*entries: tuple[str | None, uuid.UUID | None]) -> dt_req.DeleteTopicsRequest:
    return dt_req.DeleteTopicsRequest(topics=tuple(
        dt_req.DeleteTopicState(name=n, topic_id=t or uuid.UUID(int=0)) for n, t in entries), timeout=_TIMEOUT)


def _grow(*specs, validate_only: bool = False) -> cp_req.CreatePartitionsRequest:
    """specs: (name, count) or (name, count, [[broker ids], ...])."""
    return cp_req.CreatePartitionsRequest(topics=tuple(
        cp_req.CreatePartitionsTopic(name=s[0], count=i32(s[1]), assignments=None if len(s) < 3 else tuple(
            cp_req.CreatePartitionsAssignment(broker_ids=tuple(i32(b) for b in a)) for a in s[2]))
        for s in specs), timeout=_TIMEOUT, validate_only=validate_only)


def _alter(broker: int, broker_epoch: int, topic_id: uuid.UUID, index: int, leader_epoch: int, partition_epoch: int,
           isr: list[tuple[int, int]]) -> ap_req.AlterPartitionRequest:
    return ap_req.AlterPartitionRequest(broker_id=i32(broker), broker_epoch=i64(broker_epoch), topics=(
        ap_req.TopicData(topic_id=topic_id, partitions=(ap_req.PartitionData(
            partition_index=i32(index), leader_epoch=i32(leader_epoch), leader_recovery_state=i8(0),
            partition_epoch=i32(partition_epoch),
            new_isr_with_epochs=tuple(ap_req.BrokerState(broker_id=i32(b), broker_epoch=i64(e)) for b, e in isr)),)),))


@pytest.mark.slow
def test_delete_topics_create_partitions_alter_partition(cluster):
    """DeleteTopics v6 by name and by id (RemoveTopicRecord) with every documented refusal;
    CreatePartitions v3 (placed and manual, validate_only) with its refusals; AlterPartition v3
    from a partition leader (ISR shrink and expand answered with the new state) with its
    refusals; and a standby answering NOT_CONTROLLER to all three."""

    async def scenario():
        brokers = await _open(cluster)
        try:
            await brokers.register((101, 102, 103))
            created = await _ask(brokers.conn, 19, 7, _topics(("keep", 3, 3), ("gone", 1, 1), ("by-id", 2, 2)),
                                 ct_resp.CreateTopicsResponse)
            ids = {t.name: t.topic_id for t in created.topics}
            assert all(t.error_code == ErrorCode.none for t in created.topics)

            # ---- DeleteTopics
            r = await _ask(brokers.standby, 20, 6, _delete(("gone", None)), dt_resp.DeleteTopicsResponse)
            assert [x.error_code for x in r.responses] == [ErrorCode.not_controller]
            stranger = uuid.uuid4()
            r = await _ask(brokers.conn, 20, 6, _delete(
                ("gone", None), (None, ids["by-id"]), ("nope", None), (None, stranger), ("twice", None), ("twice", None),
                (None, None), ("keep", ids["keep"])), dt_resp.DeleteTopicsResponse)
            got = [(x.name, x.topic_id, x.error_code, x.error_message) for x in r.responses]
            zero = None  # kio reads the zero uuid (Kafka: no id) as None
            assert got == [
                ("gone", ids["gone"], ErrorCode.none, None),
                ("by-id", ids["by-id"], ErrorCode.none, None),
                ("nope", zero, ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."),
                (None, stranger, ErrorCode.unknown_topic_id, "This server does not host this topic ID."),
                ("twice", zero, ErrorCode.invalid_request, "Duplicate topic name."),
                (None, zero, ErrorCode.invalid_request, "Neither topic name nor id were specified."),
                ("keep", ids["keep"], ErrorCode.invalid_request, "You may not specify both topic name and topic id.")]
            r = await _ask(brokers.conn, 20, 6, _delete(("keep", None), (None, ids["keep"])),
                           dt_resp.DeleteTopicsResponse)
            assert [x.error_code for x in r.responses] == [ErrorCode.invalid_request, ErrorCode.none]
            assert r.responses[0].error_message == "The provided topic name maps to an ID that was already supplied."
            md = await _metadata(brokers.conn)
            assert {t.name for t in md.topics} == set()
            again = await _ask(brokers.conn, 19, 7, _topics(("gone", 1, 1), ("t", 2, 3)), ct_resp.CreateTopicsResponse)
            assert [t.error_code for t in again.topics] == [ErrorCode.none, ErrorCode.none]
            assert again.topics[0].topic_id != ids["gone"]
            tid = again.topics[1].topic_id

            # ---- CreatePartitions
            r = await _ask(brokers.standby, 37, 3, _grow(("t", 4)), cp_resp.CreatePartitionsResponse)
            assert [x.error_code for x in r.results] == [ErrorCode.not_controller]
            r = await _ask(brokers.conn, 37, 3, _grow(("t", 9), validate_only=True), cp_resp.CreatePartitionsResponse)
            assert [x.error_code for x in r.results] == [ErrorCode.none]
            _, state = await _state_when(brokers.conn, lambda md: True, "metadata")
            assert sorted(k[1] for k in state if k[0] == "t") == [0, 1]  # validate_only wrote nothing
            r = await _ask(brokers.conn, 37, 3, _grow(("t", 4), ("gone", 3, [[101], [103]]), ("gone", 3),
                                                      ("nope", 2)), cp_resp.CreatePartitionsResponse)
            assert [(x.name, x.error_code) for x in r.results] == [
                ("t", ErrorCode.none), ("gone", ErrorCode.invalid_request), ("nope", ErrorCode.unknown_topic_or_partition)]
            r = await _ask(brokers.conn, 37, 3, _grow(("t", 4), ("gone", 3, [[101], [103]])),
                           cp_resp.CreatePartitionsResponse)
            assert [(x.error_code, x.error_message) for x in r.results] == [
                (ErrorCode.invalid_partitions, "Topic already has 4 partition(s)."), (ErrorCode.none, None)]
            r = await _ask(brokers.conn, 37, 3, _grow(("t", 3), ("gone", 5, [[101, 102], [102]]), ("gone-too", 1)),
                           cp_resp.CreatePartitionsResponse)
            assert [x.error_code for x in r.results] == [ErrorCode.invalid_partitions,
                                                         ErrorCode.invalid_replica_assignment,
                                                         ErrorCode.unknown_topic_or_partition]
            r = await _ask(brokers.conn, 37, 3, _grow(("gone", 4, [[104]]), ("t", 6, [[101, 102, 103]])),
                           cp_resp.CreatePartitionsResponse)
            assert [x.error_code for x in r.results] == [ErrorCode.invalid_replica_assignment] * 2
            _, state = await _state_when(brokers.conn, lambda md: len(_state(md)) == 7, "t x 4 + gone x 3")
            for p in range(4):
                leader, epoch, isr, replicas = state[("t", p)]
                assert len(set(replicas)) == 3 and isr == replicas and leader == replicas[0] and epoch == 0
            assert [state[("gone", p)][3] for p in (1, 2)] == [(101,), (103,)]
            assert [state[("gone", p)][0] for p in (1, 2)] == [101, 103]

            # ---- AlterPartition, from the leader of t-0
            leader, epoch, isr, replicas = state[("t", 0)]
            follower, other = [b for b in replicas if b != leader]
            ep = brokers.epochs
            shrink = _alter(leader, ep[leader], tid, 0, epoch, 0, [(leader, ep[leader]), (follower, ep[follower])])
            r = await _ask(brokers.standby, 56, 3, shrink, ap_resp.AlterPartitionResponse)
            assert r.error_code == ErrorCode.not_controller
            stale = dataclasses.replace(shrink, broker_epoch=i64(ep[leader] + 1000))
            r = await _ask(brokers.conn, 56, 3, stale, ap_resp.AlterPartitionResponse)
            assert (r.error_code, r.topics) == (ErrorCode.stale_broker_epoch, ())
            r = await _ask(brokers.conn, 56, 3, shrink, ap_resp.AlterPartitionResponse)
            (part,) = r.topics[0].partitions
            assert (r.error_code, r.topics[0].topic_id) == (ErrorCode.none, tid)
            assert (part.error_code, part.leader_id, part.leader_epoch, part.isr, part.partition_epoch) == \
                (ErrorCode.none, leader, epoch, (leader, follower), 1)
            _, state = await _state_when(brokers.conn, lambda md: True, "metadata")
            assert state[("t", 0)] == (leader, epoch, (leader, follower), replicas)

            async def one(request) -> ErrorCode:
                answer = await _ask(brokers.conn, 56, 3, request, ap_resp.AlterPartitionResponse)
                assert answer.error_code == ErrorCode.none, answer
                return answer.topics[0].partitions[0].error_code

            full = [(leader, ep[leader]), (follower, ep[follower]), (other, ep[other])]
            assert await one(shrink) == ErrorCode.invalid_update_version  # partition epoch 0 is gone
            assert await one(_alter(leader, ep[leader], tid, 0, epoch - 1, 1, full)) == ErrorCode.fenced_leader_epoch
            assert await one(_alter(leader, ep[leader], tid, 0, epoch + 1, 1, full)) == ErrorCode.not_controller
            assert await one(_alter(follower, ep[follower], tid, 0, epoch, 1, full)) == ErrorCode.invalid_request
            assert await one(_alter(leader, ep[leader], tid, 0, epoch, 1, full[1:])) == ErrorCode.invalid_request
            assert await one(_alter(leader, ep[leader], tid, 9, epoch, 1, full)) == ErrorCode.unknown_topic_or_partition
            assert await one(_alter(leader, ep[leader], uuid.uuid4(), 0, epoch, 1, full)) == ErrorCode.unknown_topic_id
            wrong = full[:2] + [(other, ep[other] + 1)]
            assert await one(_alter(leader, ep[leader], tid, 0, epoch, 1, wrong)) == ErrorCode.ineligible_replica
            answer = await _ask(brokers.conn, 56, 3, _alter(leader, ep[leader], tid, 0, epoch, 1, full),
                                ap_resp.AlterPartitionResponse)
            part = answer.topics[0].partitions[0]
            assert (part.error_code, part.isr, part.partition_epoch, part.leader_epoch) == \
                (ErrorCode.none, (leader, follower, other), 2, epoch)

            # a broker that asks to be fenced leaves the ISR and may not join one
            brokers.beating.discard(other)
            fence = dataclasses.replace(_heartbeat(other, ep[other]), want_fence=True)
            r = await _ask(brokers.conn, 63, 1, fence, hb_resp.BrokerHeartbeatResponse)
            assert (r.is_fenced, r.should_shut_down) == (True, False)
            _, state = await _state_when(brokers.conn, lambda md: other not in _live(md), "fenced")
            assert state[("t", 0)] == (leader, epoch, (leader, follower), replicas)
            assert await one(_alter(leader, ep[leader], tid, 0, epoch, 3, full)) == ErrorCode.ineligible_replica
        finally:
            await brokers.close()

    asyncio.run(scenario())


def test_managers_plan_without_an_event_loop():
    """Control managers are pure functions of the image (writes.py): DeleteTopics and
    CreatePartitions plans give the records and the answer with no loop, no lock, no Raft."""
    from kraftlog.engine.controller.writes import ControllerResult

    keep, gone = uuid.uuid4(), uuid.uuid4()
    publisher = ImagePublisher()
    registrations = [codec.encode_record("RegisterBrokerRecord", 3, {
        "BrokerId": b, "IncarnationId": uuid.uuid4(), "BrokerEpoch": b, "Fenced": False}) for b in (1, 2)]
    values = [codec.encode_record("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": 26}),
              *registrations,
              codec.encode_record("TopicRecord", 0, {"Name": "keep", "TopicId": keep}),
              codec.encode_record("PartitionRecord", 0, {"PartitionId": 0, "TopicId": keep, "Replicas": [1, 2],
                                                         "Isr": [1, 2], "Leader": 1}),
              codec.encode_record("TopicRecord", 0, {"Name": "gone", "TopicId": gone})]
    publisher.handle_commits(_batches_of(values))
    controller = Controller(1, None, driver=None, publisher=publisher)
    image = publisher.image

    deletion = controller.plan_delete_topics(image, _delete(("gone", None), ("nope", None)))
    assert isinstance(deletion, ControllerResult) and deletion.atomic
    assert [codec.decode_record(r).data["TopicId"] for r in deletion.records] == [gone]
    answer = deletion.after(image)
    assert [(x.name, x.error_code) for x in answer.responses] == [
        ("gone", ErrorCode.none), ("nope", ErrorCode.unknown_topic_or_partition)]

    growth = controller.plan_create_partitions(image, _grow(("keep", 3), ("nope", 1)))
    added = [codec.decode_record(r).data for r in growth.records]
    assert [(d["TopicId"], d["PartitionId"]) for d in added] == [(keep, 1), (keep, 2)]
    assert {tuple(d["Replicas"]) for d in added} <= {(1, 2), (2, 1)}
    assert [(x.name, x.error_code) for x in growth.response.results] == [
        ("keep", ErrorCode.none), ("nope", ErrorCode.unknown_topic_or_partition)]
    assert not controller.plan_create_partitions(image, _grow(("keep", 3), validate_only=True)).records


def _batches_of(values: list[bytes]) -> list:
    """Committed batches of ``values``, one record each, from offset 0 (as the log reads them back)."""
    from kraftlog.engine.records.batch import build_batch_from_values
    from kraftlog.raft import wire

    return list(wire.split_batches(b"".join(build_batch_from_values([v], base_offset=i) for i, v in enumerate(values))))
