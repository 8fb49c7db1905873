"""Proves the records CreateTopics and CreatePartitions write (engine/controller/records_fast.py).

- the PartitionRecord template writes exactly the generic codec's bytes, for every record version,
  replica count (including counts past the template's one-byte lengths), ISR shape and directory;
  the TopicRecord writer too, for ASCII and non-ASCII names of any length;
- new replicas' directories follow Kafka's ClusterControlManager.defaultDir, with DirectoryId's
  reserved values (MIGRATING 0, UNASSIGNED 1, LOST 2), and the image reads them back (an image
  of MIGRATING-only partitions keeps no directories, the writer's default);
- the whole-request placement equals place_replicas topic by topic;
- an in-process controller's CreateTopics and CreatePartitions proposals decode to Kafka's records
  (TopicRecord, its partitions in order with leader = first ISR member, epochs 0, then configs),
  at a level with directories and one without.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import uuid
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.create_partitions.v3 import request as cp_req
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from kraftlog.engine.controller import records_fast as rf
from kraftlog.engine.controller.controller import (
    ControllerConfig,
    ImagePublisher,
    place_replicas,
    place_replicas_many,
    rack_interleaved,
)
from kraftlog.engine.image import versions
from kraftlog.engine.image.image import BrokerRegistration
from kraftlog.engine.image.topics import MIGRATING_DIRECTORY
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec
from kraftlog.raft.aio.driver import DriverConfig
from tests.test_controller_partitions import _InstantDriver, serve_active

LATEST = versions.LATEST
BEFORE_DIRECTORIES = versions.LEVELS["3.7-IV1"]
_uuids = st.integers(0, (1 << 128) - 1).map(lambda n: uuid.UUID(int=n))


# ---- the encoders against the generic codec ----------------------------------------------------------


@st.composite
def _partition_rows(draw):
    """(version, topic ids, partition ids, replicas, isr or None, directories or None)."""
    version = draw(st.sampled_from([0, 1, 2]))
    replication = draw(st.one_of(st.integers(1, 6), st.sampled_from([126, 127, 130])))
    n = draw(st.integers(1, 12 if replication > 6 else 40))
    topics = draw(st.lists(_uuids, min_size=1, max_size=4))
    topic_ids = np.frombuffer(b"".join(draw(st.sampled_from(topics)).bytes for _ in range(n)),
                              dtype=np.uint8).reshape(n, 16)
    partition_ids = np.array(draw(st.lists(st.integers(0, (1 << 31) - 1), min_size=n, max_size=n)), dtype=np.int32)
    brokers = st.integers(0, (1 << 31) - 1)  # broker ids are never negative (-1 pads ISR rows)
    replicas = np.array([draw(st.lists(brokers, min_size=replication, max_size=replication)) for _ in range(n)],
                        dtype=np.int32).reshape(n, replication)
    isr = None
    if draw(st.booleans()):  # an ISR other than the replicas: a prefix-packed, -1 padded subset
        isr = np.full((n, replication), -1, dtype=np.int32)
        for i in range(n):
            keep = draw(st.lists(st.booleans(), min_size=replication, max_size=replication))
            members = [int(b) for b, k in zip(replicas[i], keep, strict=True) if k] or [int(replicas[i, -1])]
            isr[i, :len(members)] = members
    directories = None
    if version >= 1:
        choices = [MIGRATING_DIRECTORY, rf.UNASSIGNED_DIRECTORY, *draw(st.lists(_uuids, min_size=1, max_size=3))]
        raw = b"".join(draw(st.sampled_from(choices)).bytes for _ in range(n * replication))
        directories = np.frombuffer(raw, dtype=np.uint8).reshape(n, 16 * replication)
    return version, topic_ids, partition_ids, replicas, isr, directories


def _expected(version, topic_ids, partition_ids, replicas, isr, directories) -> list[bytes]:
    """The generic codec's bytes for the same partitions, written from the field names up."""
    out = []
    for i in range(len(replicas)):
        members = [int(b) for b in (replicas[i] if isr is None else isr[i]) if isr is None or b >= 0]
        data = {"PartitionId": int(partition_ids[i]), "TopicId": uuid.UUID(bytes=topic_ids[i].tobytes()),
                "Replicas": [int(b) for b in replicas[i]], "Isr": members, "Leader": members[0],
                "LeaderEpoch": 0, "PartitionEpoch": 0}
        if version >= 1:
            row = directories[i].tobytes()
            data["Directories"] = [uuid.UUID(bytes=row[k:k + 16]) for k in range(0, len(row), 16)]
        out.append(codec.encode_record("PartitionRecord", version, data))
    return out


@settings(max_examples=120)
@given(rows=_partition_rows())
def test_partition_template_writes_the_generic_codec_bytes(rows):
    """Every record version, replica count (one-byte lengths and past them), ISR shape and
    directory mix encodes to exactly what codec.encode_record writes."""
    version, topic_ids, partition_ids, replicas, isr, directories = rows
    got = rf.partition_values(topic_ids, partition_ids, replicas, version, isr=isr, directories=directories)
    assert got == _expected(version, topic_ids, partition_ids, replicas, isr, directories)
    assert all(type(v) is bytes for v in got)


def test_partition_template_refuses_what_no_new_partition_has():
    """A v1+ record without directories, and a partition without ISR, are programmer errors."""
    ids = np.zeros((1, 16), dtype=np.uint8)
    with pytest.raises(ValueError, match="directories"):
        rf.partition_values(ids, [0], [[1, 2]], 1)
    with pytest.raises(ValueError, match="ISR"):
        rf.partition_values(ids, [0], [[1, 2]], 0, isr=np.array([[-1, -1]]))
    assert rf.partition_values(np.zeros((0, 16), dtype=np.uint8), [], np.zeros((0, 3)), 2) == []


@settings(max_examples=80)
@given(name=st.one_of(st.from_regex(r"[a-zA-Z0-9._-]{1,249}", fullmatch=True), st.text(min_size=1, max_size=200)),
       topic_id=_uuids)
def test_topic_value_writes_the_generic_codec_bytes(name, topic_id):
    """TopicRecord v0 for legal names up to 249 characters (two-byte lengths) and any Unicode text."""
    assert rf.topic_value(name, topic_id) == codec.encode_record("TopicRecord", 0, {"Name": name, "TopicId": topic_id})


# ---- directories ------------------------------------------------------------------------------------


def _broker(broker_id: int, log_dirs=()) -> BrokerRegistration:
    return BrokerRegistration(broker_id, 10 + broker_id, uuid.UUID(int=broker_id + 1), (), (), None, False, False,
                              log_dirs=tuple(log_dirs))


def test_default_directory_is_kafkas_default_dir():
    """Kafka's DirectoryId values (MIGRATING = Uuid(0, 0), UNASSIGNED = Uuid(0, 1), LOST = Uuid(0,
    2)) and defaultDir: one log dir -> that dir, none -> MIGRATING, several or unregistered ->
    UNASSIGNED; MIGRATING for every broker below 3.7-IV2."""
    assert (MIGRATING_DIRECTORY.int, rf.UNASSIGNED_DIRECTORY.int, rf.LOST_DIRECTORY.int) == (0, 1, 2)
    one, other = uuid.uuid4(), uuid.uuid4()
    assert rf.default_directory(_broker(1, [one]), LATEST) == one
    assert rf.default_directory(_broker(1, []), LATEST) == MIGRATING_DIRECTORY
    assert rf.default_directory(_broker(1, [one, other]), LATEST) == rf.UNASSIGNED_DIRECTORY
    assert rf.default_directory(None, LATEST) == rf.UNASSIGNED_DIRECTORY
    assert rf.default_directory(_broker(1, [one]), versions.DIRECTORY_ASSIGNMENT) == one
    for broker in (_broker(1, [one]), _broker(1, [one, other]), None):
        assert rf.default_directory(broker, BEFORE_DIRECTORIES) == MIGRATING_DIRECTORY


@settings(max_examples=60)
@given(dirs=st.dictionaries(st.integers(0, 50), st.lists(_uuids, max_size=3), max_size=8),
       replicas=st.lists(st.lists(st.integers(-1, 60), min_size=3, max_size=3), min_size=1, max_size=20),
       level=st.sampled_from([BEFORE_DIRECTORIES, LATEST]))
def test_directory_table_looks_up_default_directory(dirs, replicas, level):
    """The array lookup gives each replica default_directory of its broker (unknown ids too)."""
    brokers = {b: _broker(b, d) for b, d in dirs.items()}
    got = rf.DirectoryTable(brokers, level).lookup(np.array(replicas, dtype=np.int32))
    for row, rs in zip(got, replicas, strict=True):
        assert [uuid.UUID(bytes=row[16 * k:16 * k + 16].tobytes()) for k in range(3)] == \
            [rf.default_directory(brokers.get(b), level) for b in rs]


@settings(max_examples=60)
@given(order=st.lists(st.integers(0, 1000), min_size=1, max_size=9, unique=True), data=st.data())
def test_whole_request_placement_equals_place_replicas(order, data):
    """place_replicas_many is place_replicas topic by topic, concatenated."""
    replication = data.draw(st.integers(1, len(order)))
    counts = data.draw(st.lists(st.integers(1, 30), min_size=1, max_size=6))
    starts = data.draw(st.lists(st.integers(0, len(order) - 1), min_size=len(counts), max_size=len(counts)))
    got = place_replicas_many(order, counts, starts, replication)
    assert got.tolist() == [r for c, s in zip(counts, starts, strict=True) for r in place_replicas(order, c, replication, s)]
    with pytest.raises(ValueError):
        place_replicas_many(order, counts, starts, len(order) + 1)


# ---- an in-process controller ------------------------------------------------------------------------


SEED = 7
BROKER_DIRS = {101: [uuid.UUID(int=(1 << 100) + 101)], 102: [], 103: [uuid.uuid4(), uuid.uuid4()],
               104: [uuid.UUID(int=(1 << 100) + 104)]}


def _run(level: int, assign: bool, scenario) -> None:
    """``scenario(controller, driver)`` against a controller whose image holds ``level`` and the
    brokers of BROKER_DIRS (104 fenced), committing every proposal at once; ``assign``: its
    assign_default_directories."""
    values = [codec.encode_record("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": level})]
    for b, dirs in BROKER_DIRS.items():
        values.append(codec.encode_record("RegisterBrokerRecord", versions.register_broker_record_version(level), {
            "BrokerId": b, "IncarnationId": uuid.UUID(int=b), "BrokerEpoch": 10 + b, "EndPoints": [], "Features": [],
            "Rack": f"r{b % 2}", "Fenced": b == 104, "LogDirs": dirs}, allow_loss=True))

    async def main():
        publisher = ImagePublisher()
        raw = batch.build_batch_from_values(values, base_offset=0, timestamp_ms=0)
        publisher.handle_commit(SimpleNamespace(raw=raw, next_offset=len(values)))
        await serve_active(publisher, _InstantDriver(publisher, DriverConfig()), ControllerConfig(
            fence_check_interval_ms=600_000, assign_default_directories=assign), scenario, rng=random.Random(SEED))

    asyncio.run(main())


def _partition_data(topic_id, pid, replicas, isr, level, assign) -> tuple[int, dict]:
    """What Kafka's createTopic / createPartitions write for one new partition (directories:
    MIGRATING unless ``assign``)."""
    version = versions.partition_record_version(level)
    data = {"PartitionId": pid, "TopicId": topic_id, "Replicas": list(replicas), "Isr": list(isr),
            "Leader": isr[0], "LeaderEpoch": 0, "PartitionEpoch": 0}
    if version >= 1:
        data["Directories"] = [rf.default_directory(_broker(b, BROKER_DIRS[b]), level) if assign
                               else MIGRATING_DIRECTORY for b in replicas]
    return version, data


LEVELS_AND_ASSIGN = [(LATEST, True), (LATEST, False), (BEFORE_DIRECTORIES, True)]


@pytest.mark.parametrize(("level", "assign"), LEVELS_AND_ASSIGN)
def test_create_topics_proposes_kafkas_records(level, assign):
    """Three topics (one refused, one with a config, different RFs) in one CreateTopics: one proposal
    of TopicRecord, its PartitionRecords (placed as place_replicas places them with the
    controller's seeded starts), its ConfigRecords, per topic, byte for byte the generic codec's;
    the image then holds each replica's default directory."""
    specs = [("a", 4, 2, ()), ("bad/name", 1, 1, ()), ("b", 3, 3, (("cleanup.policy", "compact"),))]
    req = ct_req.CreateTopicsRequest(topics=tuple(
        ct_req.CreatableTopic(name=n, num_partitions=i32(p), replication_factor=i16(r), assignments=(),
                              configs=tuple(ct_req.CreatableTopicConfig(name=k, value=v) for k, v in c))
        for n, p, r, c in specs))

    async def scenario(controller, driver):
        image = controller.publisher.image
        order = rack_interleaved(image.cluster.live_brokers())
        answer = await controller.create_topics(req)
        codes = [t.error_code for t in answer.topics]
        assert codes == [ErrorCode.none, ErrorCode.invalid_topic_exception, ErrorCode.none]
        starts = random.Random(SEED)
        expected = []
        for (name, partitions, replication, configs), result in zip(specs, answer.topics, strict=True):
            if result.error_code != ErrorCode.none:
                continue
            topic_id = result.topic_id
            expected.append(codec.encode_record("TopicRecord", 0, {"Name": name, "TopicId": topic_id}))
            for pid, replicas in enumerate(place_replicas(order, partitions, replication, starts.randrange(len(order)))):
                expected.append(codec.encode_record("PartitionRecord", *_partition_data(topic_id, pid, replicas,
                                                                                         replicas, level, assign)))
            expected.extend(codec.encode_record("ConfigRecord", 0, {"ResourceType": 2, "ResourceName": name, "Name": k,
                                                                    "Value": v}) for k, v in configs)
        assert driver.proposals[-1] == expected
        image = controller.publisher.image
        for result in answer.topics[::2]:
            view = image.topics.topic(result.name)
            for pid in range(view.partition_count):
                part = image.topics.partition_by_id(view.topic_id, pid)
                _, data = _partition_data(view.topic_id, pid, part.replicas, part.isr, level, assign)
                dirs = data.get("Directories", [])
                assert list(part.directories) == ([] if all(d == MIGRATING_DIRECTORY for d in dirs) else dirs)

    _run(level, assign, scenario)


@pytest.mark.parametrize(("level", "assign"), LEVELS_AND_ASSIGN)
def test_create_partitions_proposes_kafkas_records(level, assign):
    """CreatePartitions placed by the controller and by a manual assignment naming a fenced broker
    (its ISR: the live replicas only): the proposal is the generic codec's bytes, in request order."""
    async def scenario(controller, driver):
        created = await controller.create_topics(ct_req.CreateTopicsRequest(topics=(
            ct_req.CreatableTopic(name="auto", num_partitions=i32(2), replication_factor=i16(2), assignments=(),
                                  configs=()),
            ct_req.CreatableTopic(name="manual", num_partitions=i32(1), replication_factor=i16(3), assignments=(),
                                  configs=()))))
        ids = {t.name: t.topic_id for t in created.topics}
        order = rack_interleaved(controller.publisher.image.cluster.live_brokers())
        starts = random.Random(SEED)
        for _ in created.topics:
            starts.randrange(len(order))
        manual = [[104, 101, 103], [102, 104, 101]]
        answer = await controller.create_partitions(cp_req.CreatePartitionsRequest(topics=(
            cp_req.CreatePartitionsTopic(name="auto", count=i32(5), assignments=None),
            cp_req.CreatePartitionsTopic(name="manual", count=i32(3), assignments=tuple(
                cp_req.CreatePartitionsAssignment(broker_ids=tuple(i32(b) for b in a)) for a in manual))),
            timeout=datetime.timedelta(seconds=1), validate_only=False))
        assert [r.error_code for r in answer.results] == [ErrorCode.none, ErrorCode.none]
        expected = []
        for k, replicas in enumerate(place_replicas(order, 3, 2, starts.randrange(len(order)))):
            expected.append(codec.encode_record("PartitionRecord", *_partition_data(ids["auto"], 2 + k, replicas,
                                                                                     replicas, level, assign)))
        for k, replicas in enumerate(manual):
            isr = [b for b in replicas if b != 104]
            expected.append(codec.encode_record("PartitionRecord", *_partition_data(ids["manual"], 1 + k, replicas,
                                                                                     isr, level, assign)))
        assert driver.proposals[-1] == expected

    _run(level, assign, scenario)


def test_concurrent_create_topics_are_group_committed_in_arrival_order():
    """Five CreateTopics that arrive while another writer holds the lock: they queue and are planned
    together in arrival order (a name an earlier request of the group creates is TOPIC_ALREADY_EXISTS
    for a later one, a validate-only request writes nothing), proposed together (one write for the
    group) with one proposal per writing request, and every answer matches the image."""
    names = [("g1", "g2"), ("g3",), ("g2", "g4"), ("g5",), ("g6",)]
    requests = [ct_req.CreateTopicsRequest(validate_only=(k == 3), topics=tuple(
        ct_req.CreatableTopic(name=n, num_partitions=i32(2), replication_factor=i16(1), assignments=(), configs=())
        for n in group)) for k, group in enumerate(names)]

    async def scenario(controller, driver):
        rounds = []
        inner = controller.executor.pipeline

        def counting(proposals):
            rounds.append(len(proposals))
            return inner(proposals)

        controller.executor.pipeline = counting
        await controller.create_topics(ct_req.CreateTopicsRequest(topics=()))  # bootstrap out of the way
        before = len(driver.proposals)
        async with controller.executor.lock:  # another writer: the requests queue behind it
            pending = [asyncio.ensure_future(controller.create_topics(r)) for r in requests]
            while len(controller._create_queue) < len(requests):
                await asyncio.sleep(0)
        answers = await asyncio.gather(*pending)
        codes = [[(t.name, t.error_code) for t in a.topics] for a in answers]
        ok, exists = ErrorCode.none, ErrorCode.topic_already_exists
        assert codes == [[("g1", ok), ("g2", ok)], [("g3", ok)], [("g2", exists), ("g4", ok)], [("g5", ok)],
                         [("g6", ok)]]
        assert rounds == [4]  # one write for the group; g5 was validate-only
        assert len(driver.proposals) - before == 4
        image = controller.publisher.image
        for answer in answers:
            for t in answer.topics:
                if t.error_code == ok and t.name != "g5":
                    assert image.topics.topic(t.name).topic_id == t.topic_id
        assert image.topics.topic("g5") is None

    _run(LATEST, False, scenario)
