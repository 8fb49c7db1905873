"""Proves the client side of KIP-232: Metadata v12 answers carry each topic's epoch and the
answering image's offset in tagged fields that an independent decoder (kafka-python) skips while
reading the same brokers and topics; the staleness rule orders (topic epoch, leader epoch) as the
KIP says; a MetadataCache fed answers from every point of a metadata history, in any order, never
moves backwards and always accepts an answer at least as new as what it applied; the client
retries a stale node elsewhere with backoff, prefers the least loaded node, learns nodes, and
raises typed errors at its deadline; OffsetStore refuses older epochs and bad internal metadata.
One slow test runs three real controller processes and makes one of them lag with SIGSTOP.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import os
import random
import signal
import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import MetadataResponse as KafkaPythonMetadataResponse
from kio.schema.broker_heartbeat.v1 import response as hb_resp
from kio.schema.broker_registration.v4 import response as reg_resp
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer
from test_node_controller import (
    RACKS,
    NodeCluster,
    _ask,
    _heartbeat,
    _register_at_active,
    _registration,
    _topics,
    _until,
)

from kraftlog.engine.broker.metadata_answer import answer_metadata
from kraftlog.engine.client.metadata_client import (
    InvalidInternalMetadataError,
    LeaderNotAvailableError,
    MetadataCache,
    MetadataClient,
    MetadataResponseError,
    NoNodeAvailableError,
    OffsetStore,
    StaleMetadataError,
    UnknownTopicOrPartitionError,
    encode_internal_metadata,
    is_stale,
    topic_from_answer,
)
from kraftlog.engine.image.image import MetadataImage, Provenance
from kraftlog.engine.protocol.connection import ClientConnection, ClientError
from kraftlog.engine.protocol.metadata_response import NO_EPOCH, EpochMetadataResponse
from kraftlog.errors import CorruptRecordError, KraftlogError
from kraftlog.raft import wire
from kraftlog.raft.messages import DescribeQuorumRequest

# ---- building metadata histories ------------------------------------------------------------------------------


REPLICAS = (1, 2, 3)


class History:
    """A metadata log replayed record by record: ``images[k]`` is the image after the record at
    offset k (topic epochs are record offsets, as the loader gives them)."""

    def __init__(self):
        self.image = MetadataImage.empty()
        self.images: list[MetadataImage] = []
        self.ids: dict[str, uuid.UUID] = {}
        self.partitions: dict[str, int] = {}
        # The replicas' brokers: registered (a Metadata answer reports a leader only when it is a
        # registered broker, as Kafka's do) but fenced, so answers list only the brokers a test
        # registers with an address (`broker`), the nodes a client may learn.
        for broker_id in REPLICAS:
            self.broker(broker_id, 0, fenced=True)

    def _record(self, record_type: str, data: dict) -> None:
        offset = len(self.images)
        delta = self.image.delta()
        delta.replay(record_type, data, topic_epoch=offset)
        self.image = delta.apply(Provenance(offset, 1, 0))
        self.images.append(self.image)

    def broker(self, broker_id: int, port: int, *, fenced: bool = False) -> None:
        self._record("RegisterBrokerRecord", {
            "BrokerId": broker_id, "BrokerEpoch": len(self.images), "IncarnationId": uuid.uuid4(),
            "EndPoints": [{"Name": "PLAINTEXT", "Host": "127.0.0.1", "Port": port, "SecurityProtocol": 0}],
            "Features": [], "Rack": None, "Fenced": fenced})

    def create(self, name: str, partitions: int) -> None:
        self.ids[name] = uuid.uuid4()
        self.partitions[name] = 0
        self._record("TopicRecord", {"Name": name, "TopicId": self.ids[name]})
        for _ in range(partitions):
            self.grow(name)

    def grow(self, name: str) -> None:
        pid = self.partitions[name]
        self.partitions[name] += 1
        self._record("PartitionRecord", {
            "TopicId": self.ids[name], "PartitionId": pid, "Replicas": list(REPLICAS), "Isr": list(REPLICAS), "Leader": 1,
            "LeaderEpoch": 0, "PartitionEpoch": 0, "RemovingReplicas": [], "AddingReplicas": []})

    def elect(self, name: str, pid: int, leader: int) -> None:
        self._record("PartitionChangeRecord", {"TopicId": self.ids[name], "PartitionId": pid, "Leader": leader})

    def delete(self, name: str) -> None:
        self._record("RemoveTopicRecord", {"TopicId": self.ids.pop(name)})
        del self.partitions[name]


def _request(*names: str) -> md_req.MetadataRequest:
    topics = None if not names else tuple(md_req.MetadataRequestTopic(topic_id=None, name=n) for n in names)
    return md_req.MetadataRequest(topics=topics, include_topic_authorized_operations=False)


def _encode(entity) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


# ---- the tagged fields on the wire ----------------------------------------------------------------------------


def test_topic_epoch_and_image_offset_ride_in_tags_an_independent_decoder_skips():
    """kafka-python (its own Metadata v12 codec, generated from Kafka's JSON schema) reads our
    answer: same brokers, topics, partitions; it keeps our two tags as unknown tags holding the
    topic epoch and the image offset as int64. The tag bytes are laid out as KIP-482 says."""
    h = History()
    h.broker(1, 9001)
    h.create("orders", 2)
    h.elect("orders", 1, 2)
    h.create("audit", 1)
    image = h.image
    answer = answer_metadata(image, _request(), cluster_id="c1", controller_id=7)
    raw = _encode(answer)

    theirs = KafkaPythonMetadataResponse.decode(raw, version=12)
    assert [(b.node_id, b.host, b.port) for b in theirs.brokers] == [(1, "127.0.0.1", 9001)]
    assert (theirs.cluster_id, theirs.controller_id) == ("c1", 7)
    by_name = {t.name: t for t in theirs.topics}
    assert set(by_name) == {"orders", "audit"}
    for name in by_name:
        view = image.topics.topic(name)
        t = by_name[name]
        assert t.topic_id == view.topic_id
        assert t.unknown_tags == {"_10000": view.topic_epoch.to_bytes(8, "big", signed=True)}
        expected = {p.partition_id: (p.leader, p.leader_epoch, list(p.replicas), list(p.isr))
                    for p in image.topics.partitions_of(name)}
        assert {p.partition_index: (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes)
                for p in t.partitions} == expected
    assert by_name["orders"].partitions[1].leader_epoch == 1  # the election is visible
    assert theirs.unknown_tags == {"_10001": (len(h.images) - 1).to_bytes(8, "big", signed=True)}

    # KIP-482 layout of the topic's tag section: 1 field, tag 10000 (uvarint 0x90 0x4e), 8 bytes
    epoch = image.topics.topic("audit").topic_epoch
    assert bytes([1, 0x90, 0x4E, 8]) + epoch.to_bytes(8, "big") in raw

    # our kio reader gets the same values back
    ours, size = entity_reader(EpochMetadataResponse)(raw, 0)
    assert size == len(raw) and ours == answer
    assert {t.name: t.topic_epoch for t in ours.topics} == {n: image.topics.topic(n).topic_epoch for n in by_name}


def test_kio_plain_reader_refuses_our_tags_so_kio_readers_need_the_epoch_type():
    """kio's stock v12 type does not skip unknown tags (its reader raises): any kio reader of our
    answers must decode with EpochMetadataResponse (documented in metadata_answer.py)."""
    h = History()
    h.create("t", 1)
    raw = _encode(answer_metadata(h.image, _request(), cluster_id=None, controller_id=1))
    with pytest.raises(KeyError, match="10000|10001"):
        entity_reader(md_resp.MetadataResponse)(raw, 0)


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 3)), min_size=0, max_size=4),
       st.lists(st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=5),
                max_size=3))
def test_answers_round_trip_through_kio_and_kafka_python(layout, missing):
    """For generated clusters (topics with partitions and elections) and asked-for topics that do
    not exist: our reader returns the answer exactly; kafka-python reads the same topics, errors
    and epochs; a topic without an epoch (an unknown one) carries no tag."""
    h = History()
    names = []
    for k, (parts, elections) in enumerate(layout):
        names.append(f"t{k}")
        h.create(names[-1], parts)
        for e in range(elections):
            h.elect(names[-1], e % parts, 1 + e % 3)
    image = h.image if h.images else MetadataImage.empty()
    asked = names + [m for m in missing if m not in names]
    answer = answer_metadata(image, _request(*asked) if asked else _request(), cluster_id=None, controller_id=1)
    raw = _encode(answer)
    assert entity_reader(EpochMetadataResponse)(raw, 0) == (answer, len(raw))
    theirs = KafkaPythonMetadataResponse.decode(raw, version=12)
    assert [t.name for t in theirs.topics] == [t.name for t in answer.topics]
    for mine, t in zip(answer.topics, theirs.topics, strict=True):
        assert t.error_code == mine.error_code
        tag = None if mine.topic_epoch == NO_EPOCH else {"_10000": mine.topic_epoch.to_bytes(8, "big", signed=True)}
        assert t.unknown_tags == tag
        assert [p.leader_epoch for p in t.partitions] == [p.leader_epoch for p in mine.partitions]


# ---- the staleness rule ---------------------------------------------------------------------------------------

_epoch = st.integers(NO_EPOCH, 40)


@given(_epoch, _epoch, _epoch, _epoch)
def test_staleness_follows_topic_epoch_then_leader_epoch(cached_topic, cached_leader, topic, leader):
    """With both topic epochs known the rule is the lexicographic order of (topic epoch, leader
    epoch); with either unknown only leader epochs count; an equal pair is never stale."""
    stale = is_stale((cached_topic, cached_leader), (topic, leader))
    if NO_EPOCH not in (cached_topic, topic):
        assert stale == ((topic, leader) < (cached_topic, cached_leader))
    else:
        assert stale == (leader < cached_leader)
    assert not is_stale((topic, leader), (topic, leader))
    if stale:  # the order is antisymmetric
        assert not is_stale((topic, leader), (cached_topic, cached_leader))


_ops = st.lists(st.one_of(
    st.tuples(st.just("elect"), st.integers(0, 7), st.integers(1, 3)),
    st.just(("grow",)), st.just(("recreate",)), st.just(("delete",)), st.just(("other",))), max_size=14)


def _history_of(ops) -> History:
    h = History()
    h.create("t", 2)
    for op in ops:
        if op[0] == "elect" and "t" in h.ids:
            h.elect("t", op[1] % h.partitions["t"], op[2])
        elif op[0] == "grow" and "t" in h.ids:
            h.grow("t")
        elif op[0] == "recreate":
            if "t" in h.ids:
                h.delete("t")
            h.create("t", 1 + len(h.images) % 3)
        elif op[0] == "delete" and "t" in h.ids:
            h.delete("t")
        else:
            h.create(f"other-{len(h.images)}", 1)  # a change to another topic: moves offsets only
    return h


def _epochs(topic):
    return None if topic is None else (topic.topic_epoch, {p: q.leader_epoch for p, q in topic.partitions.items()})


@settings(max_examples=150)
@given(_ops, st.lists(st.integers(0, 10_000), min_size=1, max_size=25))
def test_cache_never_moves_backwards_and_accepts_anything_as_new(ops, picks):
    """Nodes at every point of one metadata history answer in random order. After every applied
    answer the cached topic equals that node's view and is not older than before (topic epoch up,
    or the same topic epoch and no leader epoch down); a deletion is applied only by a node that
    has replayed the topic's epoch; a deleted topic comes back only with a newer epoch; and an
    answer from a node at least as recent as every answer applied so far is never stale."""
    h = _history_of(ops)
    answers = [answer_metadata(img, _request("t"), cluster_id=None, controller_id=1) for img in h.images]
    cache = MetadataCache()
    newest_applied, deleted_at = -1, None
    for pick in picks:
        k = pick % len(answers)
        before = cache.topics.get("t")
        j = cache.judge(answers[k], ["t"], f"image@{k}")
        if k >= newest_applied:
            assert not j.stale, (k, newest_applied, j.stale)
        if j.stale:
            assert cache.topics.get("t") is before  # judging changes nothing
            continue
        cache.apply(j)
        newest_applied = max(newest_applied, k)
        after = cache.topics.get("t")
        truth = h.images[k].topics.topic("t")
        assert _epochs(after) == (None if truth is None else (truth.topic_epoch, {
            p.partition_id: p.leader_epoch for p in h.images[k].topics.partitions_of("t")}))
        if before is not None and after is not None:
            assert after.topic_epoch > before.topic_epoch or (
                after.topic_epoch == before.topic_epoch
                and all(after.partitions[p].leader_epoch >= q.leader_epoch for p, q in before.partitions.items()))
        if before is not None and after is None:
            assert k >= before.topic_epoch  # the deleting node had replayed the creation
            deleted_at = max(k, deleted_at or -1)
        if before is None and after is not None and deleted_at is not None:
            assert after.topic_epoch > deleted_at


# ---- the client against in-process nodes --------------------------------------------------------------------


class FakeNode:
    """A Metadata v12 server answering from ``image`` (swappable), optionally after ``delay_s``."""

    def __init__(self, image: MetadataImage, delay_s: float = 0.0, topic_error: ErrorCode | None = None):
        self.image, self.delay_s, self.topic_error = image, delay_s, topic_error
        self.requests = 0
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> FakeNode:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.address = self.server.sockets[0].getsockname()[:2]
        return self

    async def _serve(self, reader, writer) -> None:
        self._writers.append(writer)
        try:
            while True:
                (size,) = wire.SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                header, pos = entity_reader(RequestHeader)(frame, 0)
                body, _ = entity_reader(md_req.MetadataRequest)(frame, pos)
                self.requests += 1
                image = self.image  # what the node has replayed when the request arrives
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                answer = answer_metadata(image, body, cluster_id="c", controller_id=1)
                if self.topic_error is not None:
                    answer = dataclasses.replace(answer, topics=tuple(
                        dataclasses.replace(t, error_code=self.topic_error) for t in answer.topics))
                writer.write(wire.frame_response(header.correlation_id, answer))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        self.server.close()
        for w in self._writers:
            w.close()
        await self.server.wait_closed()


def _client(*nodes: FakeNode, **kw) -> MetadataClient:
    kw.setdefault("learn_nodes", False)
    kw.setdefault("rng", random.Random(7))
    return MetadataClient([n.address for n in nodes], refresh_backoff_ms=10, refresh_backoff_max_ms=80,
                          request_timeout_ms=1000, **kw)


def test_a_stale_node_is_refused_and_another_node_answers():
    """The client caches a leader change from a fresh node; a lagging node's answer (the old leader
    epoch) is refused, counted, leaves the cache alone, and the refresh is answered elsewhere."""
    h = History()
    h.create("t", 2)
    old = h.image
    h.elect("t", 0, 3)

    async def run():
        fresh, lagging = await FakeNode(h.image).start(), await FakeNode(old).start()
        async with _client(fresh, lagging) as client:
            await client.refresh(["t"], node=fresh.address)
            assert client.cached("t", 0).leader_epoch == 1 and client.cached("t", 0).leader == 3
            await client.refresh(["t"], node=lagging.address)
            assert (client.stats.answers_stale, client.stats.answers_accepted) == (1, 2)
            assert (lagging.requests, fresh.requests) == (1, 2)
            assert client.cached("t", 0).leader_epoch == 1 and client.cached("t", 0).leader == 3
            (stale,) = client.recent_stale
            assert (stale.topic, stale.partition, stale.cached, stale.answered) == \
                ("t", 0, (h.image.topics.topic("t").topic_epoch, 1), (old.topics.topic("t").topic_epoch, 0))
        await fresh.stop()
        await lagging.stop()

    asyncio.run(run())


def test_stale_until_the_deadline_raises_a_typed_error_naming_the_epochs():
    """Only a lagging node left (the fresh one is gone): StaleMetadataError (a KraftlogError) at
    the deadline names the topic, partition, cached and answered epochs; retries backed off."""
    h = History()
    h.create("t", 1)
    old = h.image
    h.elect("t", 0, 2)
    h.elect("t", 0, 3)

    async def run():
        fresh, lagging = await FakeNode(h.image).start(), await FakeNode(old).start()
        async with _client(fresh, lagging) as client:
            await client.refresh(["t"], node=fresh.address)
            await fresh.stop()
            loop = asyncio.get_running_loop()
            began = loop.time()
            with pytest.raises(StaleMetadataError) as info:
                await client.refresh(["t"], timeout_ms=400, node=lagging.address)
            assert 0.3 < loop.time() - began < 2.0
            err = info.value
            assert isinstance(err, KraftlogError)
            assert (err.topic, err.partition, err.cached_leader_epoch, err.answered_leader_epoch) == ("t", 0, 2, 0)
            assert err.cached_topic_epoch == err.answered_topic_epoch == old.topics.topic("t").topic_epoch
            assert "t-0" in str(err) and "leader epoch 2" in str(err) and "leader epoch 0" in str(err)
            assert f"({lagging.requests} stale answers)" in str(err)
            # backoff grows: far fewer requests than the deadline would allow without it (400 ms / 10 ms)
            assert 2 <= lagging.requests <= 12
            assert client.cached("t", 0).leader_epoch == 2
        await lagging.stop()

    asyncio.run(run())


def test_a_lagging_node_that_catches_up_is_accepted_on_retry():
    """With only the lagging node, the refresh retries until that node has replayed the change."""
    h = History()
    h.create("t", 1)
    old = h.image
    h.grow("t")  # a new partition: a higher topic epoch

    async def run():
        node = await FakeNode(h.image).start()
        async with _client(node) as client:
            await client.refresh(["t"])
            node.image = old
            loop = asyncio.get_running_loop()
            loop.call_later(0.15, setattr, node, "image", h.image)
            await client.refresh(["t"], timeout_ms=3000)
            assert client.stats.answers_stale >= 1 and client.stats.answers_accepted == 2
            assert sorted(client.cached("t").partitions) == [0, 1]
        await node.stop()

    asyncio.run(run())


def test_deletion_is_believed_only_from_a_node_that_replayed_the_creation():
    """A node whose image ends before the cached topic epoch says "unknown topic": stale. A node
    past it says so: the topic leaves the cache (leader_for raises), and a lagging node that
    still has the deleted topic cannot bring it back. (While a stale answer is checked, every
    node answers from the same lagging image: the refresh asks them all until its deadline, which
    is generous, and ends with the staleness whichever node answered first.)"""
    h = History()
    h.create("other", 1)
    before_t = h.image
    h.create("t", 1)
    with_t = h.image
    h.delete("t")

    async def run():
        nodes = lag, alive, gone = [await FakeNode(img).start() for img in (before_t, with_t, h.image)]

        async def refresh_from_every(image, match: str) -> None:
            kept = [n.image for n in nodes]
            for n in nodes:
                n.image = image
            with pytest.raises(StaleMetadataError, match=match):
                await client.refresh(["t"], timeout_ms=1000)
            for n, image in zip(nodes, kept, strict=True):
                n.image = image

        async with _client(lag, alive, gone) as client:
            await client.refresh(["t"], node=alive.address)
            epoch = client.cached("t").topic_epoch
            await refresh_from_every(lag.image, "before the topic's epoch")
            assert client.cached("t").topic_epoch == epoch
            await client.refresh(["t"], node=gone.address)
            assert client.cached("t") is None
            with pytest.raises(UnknownTopicOrPartitionError, match="'t' is not in the cluster"):
                await client.leader_for("t", 0)
            await refresh_from_every(alive.image, "absent at offset")
            assert client.cached("t") is None
        for n in (lag, alive, gone):
            await n.stop()

    asyncio.run(run())


def test_the_least_loaded_node_is_asked_and_nodes_are_learned():
    """While one node holds a request, the next refresh goes to the idle one (ties are random, so
    this is repeated); learn_nodes adds the brokers an accepted answer lists; leader_for answers."""
    async def run():
        slow = await FakeNode(MetadataImage.empty(), delay_s=0.2).start()
        idle = await FakeNode(MetadataImage.empty()).start()
        h = History()
        h.broker(11, slow.address[1])
        h.broker(12, idle.address[1])
        h.create("t", 2)
        slow.image = idle.image = h.image
        async with _client(slow, idle, rng=random.Random(3)) as client:
            for _ in range(4):
                held = asyncio.ensure_future(client.refresh(["t"], node=slow.address))
                await asyncio.sleep(0.02)
                served = idle.requests
                await client.refresh(["t"])
                assert idle.requests == served + 1
                await held
        learner = MetadataClient([idle.address], learn_nodes=True)
        async with learner:
            assert learner.nodes == [idle.address]
            p = await learner.leader_for("t", 1)
            assert (p.leader, p.leader_epoch, p.replicas) == (1, 0, (1, 2, 3))
            assert sorted(learner.nodes) == sorted([idle.address, slow.address])
            assert learner.addresses == {11: slow.address, 12: idle.address}
            with pytest.raises(UnknownTopicOrPartitionError, match="no partition 5"):
                await learner.leader_for("t", 5)
        await slow.stop()
        await idle.stop()

    asyncio.run(run())


def test_a_partition_without_leader_is_refreshed_then_reported():
    """leader_for refreshes a cached partition that has no leader and raises LeaderNotAvailableError
    if the cluster still has none; once a leader is elected the next call returns it."""
    h = History()
    h.create("t", 1)
    h.elect("t", 0, -1)
    leaderless = h.image
    h.elect("t", 0, 2)

    async def run():
        node = await FakeNode(leaderless).start()
        async with _client(node) as client:
            with pytest.raises(LeaderNotAvailableError, match="t-0 has no leader"):
                await client.leader_for("t", 0)
            node.image = h.image
            p = await client.leader_for("t", 0)
            assert (p.leader, p.leader_epoch) == (2, 2) and node.requests == 2
        await node.stop()

    asyncio.run(run())


def test_no_reachable_node_raises_no_node_available():
    """Every node refuses connections: NoNodeAvailableError names the nodes, within the deadline."""
    async def run():
        node = await FakeNode(MetadataImage.empty()).start()
        address = node.address
        await node.stop()
        client = MetadataClient([address], refresh_backoff_ms=10, refresh_backoff_max_ms=50)
        with pytest.raises(NoNodeAvailableError, match=f"{address[1]}"):
            await client.refresh(["t"], timeout_ms=300)
        assert client.stats.requests_failed >= 2
        await client.close()

    asyncio.run(run())


@pytest.mark.parametrize("code, retried", [(ErrorCode.leader_not_available, True),
                                           (ErrorCode.topic_authorization_failed, False)])
def test_topic_errors_are_retried_when_retriable_and_never_applied(code, retried):
    """A retriable topic error is asked again until the deadline, a non-retriable one raises at
    once; either way MetadataResponseError names the topic and the error, and nothing is cached."""
    h = History()
    h.create("t", 1)

    async def run():
        node = await FakeNode(h.image, topic_error=code).start()
        async with _client(node) as client:
            with pytest.raises(MetadataResponseError, match=f"t: {code.name}"):
                await client.refresh(["t"], timeout_ms=300)
            assert (node.requests > 1) == retried
            assert client.cached("t") is None and client.stats.answers_with_errors == node.requests
        await node.stop()

    asyncio.run(run())


# ---- offsets with epochs ----------------------------------------------------------------------------------------


def test_offsets_are_durable_with_versioned_internal_metadata(tmp_path):
    """A commit survives reopening; the file is versioned JSON and each offset's internal metadata
    is the documented versioned JSON string holding both epochs."""
    store = OffsetStore(tmp_path, "group/1")
    assert store.fetch_committed("t", 0) is None
    store.commit("t", 0, 42, topic_epoch=7, leader_epoch=3)
    store.commit("t", 1, 5, topic_epoch=7, leader_epoch=0)
    store.commit("t", 0, 40, topic_epoch=7, leader_epoch=3)  # same epochs: rewinding is allowed
    again = OffsetStore(tmp_path, "group/1")
    assert tuple(again.fetch_committed("t", 0)) == (40, 7, 3)
    assert tuple(again.fetch_committed("t", 1)) == (5, 7, 0)
    assert os.listdir(tmp_path) == ["group%2F1.offsets.json"]
    doc = json.loads((tmp_path / "group%2F1.offsets.json").read_text())
    assert doc["version"] == 1 and doc["group"] == "group/1"
    entry = next(e for e in doc["offsets"] if (e["topic"], e["partition"]) == ("t", 0))
    assert json.loads(entry["metadata"]) == {"version": 1, "topic_epoch": 7, "leader_epoch": 3}


@given(_epoch, _epoch, _epoch, _epoch)
def test_commits_and_seeks_with_older_epochs_are_refused(topic0, leader0, topic1, leader1):
    """After a commit at (topic0, leader0), a commit or seek at (topic1, leader1) is refused with
    InvalidInternalMetadataError exactly when that pair is older by the KIP's order."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        store = OffsetStore(d, "g")
        store.commit("t", 0, 10, topic_epoch=topic0, leader_epoch=leader0)
        older = NO_EPOCH not in (topic0, topic1) and (topic1, leader1) < (topic0, leader0) or (
            NO_EPOCH in (topic0, topic1) and leader1 < leader0)
        metadata = encode_internal_metadata(topic1, leader1)
        if older:
            with pytest.raises(InvalidInternalMetadataError, match="older than the committed"):
                store.seek("t", 0, 11, metadata)
            with pytest.raises(InvalidInternalMetadataError, match=f"topic epoch {topic1} leader epoch {leader1}"):
                store.commit("t", 0, 11, topic_epoch=topic1, leader_epoch=leader1)
            assert tuple(OffsetStore(d, "g").fetch_committed("t", 0)) == (10, topic0, leader0)
        else:
            assert tuple(store.seek("t", 0, 11, metadata)) == (11, topic1, leader1)
            store.commit("t", 0, 11, topic_epoch=topic1, leader_epoch=leader1)
            assert tuple(OffsetStore(d, "g").fetch_committed("t", 0)) == (11, topic1, leader1)


@pytest.mark.parametrize("metadata, why", [
    ("not json", "is not JSON"), ("[1, 2]", "has no version"), ('{"topic_epoch": 1}', "has no version"),
    ('{"version": 2, "topic_epoch": 1, "leader_epoch": 1}', "unknown version 2"),
    ('{"version": true, "topic_epoch": 1, "leader_epoch": 1}', "unknown version True"),
    ('{"version": 1, "topic_epoch": "1", "leader_epoch": 1}', "no valid epochs"),
    ('{"version": 1, "topic_epoch": 1}', "no valid epochs"),
])
def test_unparsable_internal_metadata_is_refused_naming_the_problem(tmp_path, metadata, why):
    """A seek whose metadata does not parse is refused; so is a stored offset whose metadata was
    damaged on disk (fetch and the next commit both say which partition and file)."""
    store = OffsetStore(tmp_path, "g")
    with pytest.raises(InvalidInternalMetadataError, match=why):
        store.seek("t", 0, 1, metadata)
    path = tmp_path / "g.offsets.json"
    path.write_text(json.dumps({"version": 1, "group": "g", "offsets": [
        {"topic": "t", "partition": 3, "offset": 9, "metadata": metadata}]}))
    damaged = OffsetStore(tmp_path, "g")
    with pytest.raises(InvalidInternalMetadataError, match=f"t-3 in {path}.*{why}|{why}"):
        damaged.fetch_committed("t", 3)
    with pytest.raises(InvalidInternalMetadataError, match="t-3"):
        damaged.commit("t", 3, 10, topic_epoch=1, leader_epoch=1)


@pytest.mark.parametrize("content, why", [
    (b'{"version": 1, "offs', "not JSON"), (b"\xff\xfe", "not JSON"), (b'{"version": 9, "offsets": []}', "version 1"),
    (b'{"version": 1}', "no offsets list"), (b'{"version": 1, "offsets": [{"topic": "t"}]}', "malformed entry"),
])
def test_a_corrupt_offsets_file_is_a_typed_error_with_its_path(tmp_path, content, why):
    """An offsets file that is not the documented layout raises CorruptRecordError naming it."""
    (tmp_path / "g.offsets.json").write_bytes(content)
    with pytest.raises(CorruptRecordError, match=why) as info:
        OffsetStore(tmp_path, "g")
    assert info.value.path == str(tmp_path / "g.offsets.json")


# ---- real controller processes, one of them lagging ---------------------------------------------------------


@pytest.mark.slow
def test_real_controllers_a_stopped_standby_answers_stale_and_is_never_applied(tmp_path):
    """Three `kraftlog node run` controllers. A standby is SIGSTOPped (after its pending fetch has
    been answered empty), a topic is created through the active controller and cached from it;
    the client's next refresh goes first to the stopped standby, which is then resumed: its answer
    comes from an image that has not replayed the topic (its image offset is below the topic
    epoch) and is refused; another node answers. Repeated for a few topics: at least one stale
    answer is seen, every one of them names the standby, and the cache never moves backwards."""
    cluster = NodeCluster(str(tmp_path))
    stopped: list[int] = []

    async def scenario():
        conns = {i: ClientConnection(*a) for i, a in cluster.addresses.items()}
        for c in conns.values():
            await c.open()
        incarnations = {b: uuid.uuid4() for b in RACKS}

        active, epoch101 = await _register_at_active(conns, _registration(101, incarnations[101]),
                                                     others_refuse=False)
        epochs = {101: epoch101}
        for b in (102, 103):
            epochs[b] = (await _ask(conns[active], 62, 4, _registration(b, incarnations[b]),
                                    reg_resp.BrokerRegistrationResponse)).broker_epoch

        async def beat_forever():
            while True:
                for b, e in epochs.items():
                    with contextlib.suppress(OSError, ClientError, TimeoutError):
                        await _ask(conns[active], 63, 1, _heartbeat(b, e), hb_resp.BrokerHeartbeatResponse, 1)
                await asyncio.sleep(0.2)

        beats = asyncio.get_running_loop().create_task(beat_forever())

        async def create(name):
            r = await _ask(conns[active], 19, 7, _topics((name, 3, 3)), ct_resp.CreateTopicsResponse)
            return r.topics[0].error_code == ErrorCode.none

        await _until(lambda: create("base"), 10, "brokers unfenced and a first topic created")
        standby = next(i for i in conns if i != active)
        pid = cluster.procs[standby].pid
        client = MetadataClient(list(cluster.addresses.values()), learn_nodes=False, refresh_backoff_ms=20,
                                refresh_backoff_max_ms=200, request_timeout_ms=5000, rng=random.Random(1))
        history = []  # cached epochs after every refresh
        try:
            await client.refresh(["base"], node=cluster.addresses[active])
            # the standby must have replayed "base" before it is first stopped: else its stale
            # answers name "base" too, and the test is about topics created while it is stopped
            await _until(lambda: _answers_fresh(cluster.addresses[active], cluster.addresses[standby], "base"), 30,
                         "the standby replayed the first topic")
            for round_ in range(5):
                name = f"lag-{round_}"
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
                # the standby's long-poll fetch must be answered (empty) before the topic exists,
                # else it carries the topic and the standby is not stale when it resumes
                await _until(lambda: _parked_fetch_answered(conns[active], standby), 30,
                             "the stopped standby's parked fetch answered")
                assert await create(name)
                await client.refresh([name, "base"], node=cluster.addresses[active])
                history.append(_cached_epochs(client))
                pending = asyncio.ensure_future(client.refresh([name, "base"], node=cluster.addresses[standby]))
                # the request must wait in the stopped standby's socket before it resumes
                await _until(lambda: asyncio.sleep(0, _written_to(client, cluster.addresses[standby])), 10,
                             "the refresh written to the stopped standby")
                os.kill(pid, signal.SIGCONT)
                stopped.remove(pid)
                await pending
                history.append(_cached_epochs(client))
                if client.stats.answers_stale:
                    break
            return client.stats, list(client.recent_stale), history, standby
        finally:
            beats.cancel()
            await client.close()
            for c in conns.values():
                await c.close()

    try:
        cluster.format()
        for i in cluster.socks:
            cluster.start(i)
        stats, stale, history, standby = asyncio.run(scenario())
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        cluster.close()
    assert stats.answers_stale >= 1, (stats, history)
    for s in stale:
        assert s.node.endswith(f":{cluster.addresses[standby][1]}") and s.partition is None
        assert s.topic.startswith("lag-") and "before the topic's epoch" in s.reason
    for earlier, later in zip(history, history[1:], strict=False):
        for topic, (topic_epoch, leaders) in earlier.items():
            now = later[topic]
            assert now[0] > topic_epoch or (now[0] == topic_epoch and all(
                now[1][p] >= e for p, e in leaders.items()))


FETCH_MAX_WAIT_MS = 200  # NodeCluster's --fetch-max-wait-ms: how long the leader parks a fetch


async def _parked_fetch_answered(leader: ClientConnection, follower: int) -> bool:
    """Whether the leader has answered ``follower``'s last fetch: it parks one for at most
    FETCH_MAX_WAIT_MS and answers the expired ones in the same pass that answers a DescribeQuorum,
    so a DescribeQuorum *sent* more than that after the fetch arrived proves it."""
    sent_ms = time.time() * 1000
    dq = wire.response_from_kio(await leader.request(
        55, 2, wire.request_to_kio(DescribeQuorumRequest()), wire.APIS[DescribeQuorumRequest].response,
        timeout_s=10))
    last = next(v.last_fetch_ms for v in dq.voters if v.replica_id == follower)
    return last > 0 and sent_ms - last > FETCH_MAX_WAIT_MS + 50


async def _answers_fresh(active, node, name: str) -> bool:
    """Whether ``node`` answers for ``name`` from an image that replayed it: a probe client caches
    the topic from the active controller, then asks ``node``, and sees no stale answer."""
    probe = MetadataClient([active, node], learn_nodes=False, request_timeout_ms=5000)
    try:
        await probe.refresh([name], node=active)
        await probe.refresh([name], node=node)
        return probe.stats.answers_stale == 0
    finally:
        await probe.close()


def _written_to(client: MetadataClient, address) -> bool:
    node = client._nodes.get(address)
    return node is not None and node.conn is not None and node.conn.in_flight > 0


def _cached_epochs(client: MetadataClient) -> dict:
    return {name: (t.topic_epoch, {p: q.leader_epoch for p, q in t.partitions.items()})
            for name, t in ((n, client.cached(n)) for n in client.cached_topics())}


def test_topic_from_answer_reads_kio_stock_answers_without_epochs():
    """An answer without our tags (a Kafka broker's) caches the topic with NO_EPOCH, so only
    leader epochs are compared for it."""
    topic = md_resp.MetadataResponseTopic(error_code=ErrorCode.none, name="t", topic_id=uuid.uuid4(), partitions=(
        md_resp.MetadataResponsePartition(error_code=ErrorCode.none, partition_index=0, leader_id=1, leader_epoch=4,
                                          replica_nodes=(1,), isr_nodes=(1,)),))
    t = topic_from_answer(topic)
    assert t.topic_epoch == NO_EPOCH and t.partitions[0].leader_epoch == 4
