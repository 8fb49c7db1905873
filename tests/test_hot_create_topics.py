"""Proves engine/protocol/hot_create_topics.py is kio, faster: every CreateTopics v7 answer it
writes is byte for byte the frame kio writes for the same answer (and converts down to the older
versions as kio's does); every request it reads is what the old path (the length guard, then kio)
reads; every shape it does not own (tags, assignments, trailing bytes, nulls, odd bools, padded
varints, frames cut anywhere, lengths past the end, random damage) it leaves (None), and the old
path serves or refuses that frame as before; behind it kio never sees a length past the frame (a
child process survives mutated frames). In a NodeTransport: a frame it reads skips the guard, any
other is guarded, and the answers are the encoder's; against a real node, kafka-python (v7: this
path) and confluent-kafka (older versions) create topics.
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import struct
import subprocess
import sys
import uuid

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError
from kio.schema.create_topics.v5 import request as ct_req_v5
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from kraftlog.engine.cli import main as cli
from kraftlog.engine.node.localcluster import LocalCluster
from kraftlog.engine.node.node import NodeTransport, _parse
from kraftlog.engine.protocol import hot_create_topics as hot
from kraftlog.engine.protocol import older_versions
from kraftlog.engine.protocol.responses import create_response, created_result, topic_result
from kraftlog.raft import wire
from kraftlog.raft.aio import transport as transport_module
from kraftlog.raft.aio.transport import check_request_lengths
from tests.test_node_controller import CLUSTER_ID

pytestmark = pytest.mark.twin  # long names and counts go through the native varint writer (and its twin)

API_CREATE_TOPICS = 19

# names and values: any unicode; sometimes long enough (multi-byte UTF-8 past 127 bytes) for a
# 2-byte length
text = st.one_of(st.text(max_size=40), st.text(min_size=60, max_size=200))
configs = st.lists(st.builds(ct_req.CreatableTopicConfig, name=text, value=st.none() | text), max_size=4)
topics = st.builds(ct_req.CreatableTopic, name=text, num_partitions=st.integers(-(2**31), 2**31 - 1).map(i32),
                   replication_factor=st.integers(-(2**15), 2**15 - 1).map(i16), assignments=st.just(()),
                   configs=configs.map(tuple))
REQUESTS = st.builds(ct_req.CreateTopicsRequest, topics=st.lists(topics, max_size=6).map(tuple),
                     timeout=st.integers(0, 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms)),
                     validate_only=st.booleans())
CLIENT_IDS = st.none() | st.text(max_size=20)


def topic(name: str, partitions: int = 10, rf: int = 3, configs=()) -> ct_req.CreatableTopic:
    return ct_req.CreatableTopic(name=name, num_partitions=i32(partitions), replication_factor=i16(rf),
                                 assignments=(), configs=tuple(ct_req.CreatableTopicConfig(name=n, value=v)
                                                               for n, v in configs))


def request(*topics_: ct_req.CreatableTopic, validate_only: bool = False) -> ct_req.CreateTopicsRequest:
    return ct_req.CreateTopicsRequest(topics=topics_, timeout=datetime.timedelta(seconds=30),
                                      validate_only=validate_only)


def kio_frame(req, corr: int = 5, client_id: str | None = "adminclient-1") -> bytes:
    """A request frame (no size prefix) as kio writes it."""
    return wire.frame_request(API_CREATE_TOPICS, 7, corr, client_id, req)[4:]


def old_path(frame: bytes):
    """What the node makes of a CreateTopics v7 frame the hot decoder leaves (and made of every
    one before it): the length guard, then kio. (correlation id, body, trailing bytes), or
    WireFormatError."""
    check_request_lengths(frame)
    return _parse(frame, ct_req.CreateTopicsRequest, API_CREATE_TOPICS)


def outcome(frame: bytes):
    try:
        return "served", old_path(frame)
    except wire.WireFormatError as exc:
        return "refused", str(exc)


# 200 topics, long non-ASCII names, long values: every count and length a 2-byte varint
BIG = ct_req.CreateTopicsRequest(topics=tuple(topic(f"t{i}-" + "é" * 80, i, 3, [("retention.ms", "1" * 300)])
                                              for i in range(200)), validate_only=True)


# ---- requests ------------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(REQUESTS, st.integers(0, 2**31 - 1), CLIENT_IDS)
@example(request(), 0, None)  # no topics
@example(BIG, 7, "c" * 300)
def test_every_request_kio_writes_is_read_as_the_old_path_reads_it(req, corr, client_id):
    frame = kio_frame(req, corr, client_id)
    decoded = hot.decode_request(frame)
    assert decoded is not None
    corr_old, body_old, trailing = old_path(frame)
    assert trailing == 0 and decoded == (corr_old, body_old) == (corr, req)


def test_kafka_pythons_frames_are_ours():
    """kafka-python's admin client speaks CreateTopics v7 (confluent-kafka stops below it): the
    frames it writes, configs and all, are read here as the old path reads them."""
    from kafka.protocol.admin import CreateTopicsRequest as KafkaPythonCreateTopics

    theirs = KafkaPythonCreateTopics(version=7, topics=[("orders", 3, 2, [], [("retention.ms", "60000"), ("x", None)]),
                                                        ("audit", -1, -1, [], [])], timeout_ms=30000, validate_only=False)
    theirs.with_header(correlation_id=9, client_id="kafka-python")
    frame = theirs.encode(header=True)
    decoded = hot.decode_request(frame)
    assert decoded is not None and decoded == old_path(bytes(frame))[:2]
    assert [(t.name, t.num_partitions, [(c.name, c.value) for c in t.configs]) for t in decoded[1].topics] == [
        ("orders", 3, [("retention.ms", "60000"), ("x", None)]), ("audit", -1, [])]


def _damage(frame: bytes, at: int, replacement: bytes) -> bytes:
    return frame[:at] + replacement + frame[at + 1:]


ONE = kio_frame(request(topic("a", 1, 1, [("x", None), ("y", "1")])), client_id="c")
# byte positions in ONE: header 12 bytes (client id "c"), Topics count at 12, Name length at 13
TOPICS_AT, NAME_AT = 12, 13
ASSIGNED = kio_frame(ct_req.CreateTopicsRequest(topics=(ct_req.CreatableTopic(
    name="m", num_partitions=i32(-1), replication_factor=i16(-1), configs=(),
    assignments=(ct_req.CreatableReplicaAssignment(partition_index=i32(0), broker_ids=(i32(1),)),)),)))
NOT_OURS = {
    # shape: (frame, what the old path does with it)
    "manual assignments": (ASSIGNED, "served"),
    "a trailing byte": (ONE + b"\x00", "served"),
    "librdkafka's 4-byte placeholder": (ONE + b"\x00\x00\x00\x00", "served"),
    "an unknown request tag": (ONE[:-1] + b"\x01\x07\x02ab", "refused"),  # kio refuses unknown tags
    "a header tag": (ONE[:11] + b"\x01\x00\x00" + ONE[12:], "refused"),
    "a topic tag": (ONE[:-7] + b"\x01\x07\x00" + ONE[-6:], "refused"),
    "a config tag": (ONE[:-8] + b"\x01\x07\x00" + ONE[-7:], "refused"),
    "validate_only 2": (ONE[:-2] + b"\x02\x00", "refused"),
    "a null topic array": (ONE[:TOPICS_AT] + b"\x00" + ONE[-6:], "refused"),
    "a null name": (_damage(ONE, NAME_AT, b"\x00"), "refused"),
    "a name past the end": (_damage(ONE, NAME_AT, b"\x7f"), "refused"),
    "a topic count past the end": (_damage(ONE, TOPICS_AT, b"\xff\xff\xff\xff\x0f"), "refused"),
    "invalid UTF-8 in a name": (_damage(ONE, NAME_AT + 1, b"\xff"), "refused"),
    "a padded count varint": (_damage(ONE, TOPICS_AT, b"\x82\x00"), "served"),
    "a 4-byte length varint": (_damage(ONE, NAME_AT, b"\x82\x80\x80\x00"), "served"),
}


@pytest.mark.parametrize("name", list(NOT_OURS))
def test_shapes_it_does_not_own_are_left_to_the_old_path(name):
    """None, and the old path serves or refuses the frame as it did (its outcome is its own: named
    here so that a change in it is seen)."""
    frame, expected = NOT_OURS[name]
    assert hot.decode_request(frame) is None
    assert outcome(frame)[0] == expected, outcome(frame)


def test_a_frame_cut_anywhere_is_left_to_the_old_path_which_refuses_it():
    long = kio_frame(ct_req.CreateTopicsRequest(topics=BIG.topics[:2] + (topic("b"),)))  # 2-byte varints too
    for frame in (ONE, long):
        for cut in range(len(frame)):
            assert hot.decode_request(frame[:cut]) is None, cut
            assert outcome(frame[:cut])[0] == "refused", cut


EDITS = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=3)


@settings(max_examples=500)
@given(REQUESTS, EDITS, st.integers(0, 1 << 16), st.booleans())
def test_damaged_requests_are_left_to_the_old_path_or_read_as_it_reads_them(req, edits, cut, truncate):
    damaged = bytearray(kio_frame(req))
    for pos, byte in edits:
        damaged[pos % len(damaged)] = byte
    if truncate:
        damaged = damaged[:cut % len(damaged)]
    damaged = bytes(damaged)
    decoded = hot.decode_request(damaged)
    event("stepped aside" if decoded is None else "read")
    if decoded is not None:
        corr, body, trailing = old_path(damaged)  # what it reads, the old path serves, the same
        assert trailing == 0 and decoded == (corr, body)


_CRASH_FUZZ = r'''
import random, sys
from kraftlog.engine.protocol import hot_create_topics as hot
corpus = [bytes.fromhex(line) for line in open(sys.argv[1]).read().split()]
rng = random.Random(int(sys.argv[2]))
big = [b"\xff\xff\xff\xff\x0f", b"\xb1\x9b\xbf\xad\x75", b"\xff\xff\x7f", b"\xff\x7f", b"\x7f\xff\xff\xff"]
read = 0
for _ in range(int(sys.argv[3])):
    f = bytearray(rng.choice(corpus))
    for _ in range(rng.randrange(1, 3)):
        pos = rng.randrange(4, len(f) + 1)
        if rng.random() < 0.5:
            f[pos:pos + rng.randrange(0, 4)] = rng.choice(big)
        elif pos < len(f):
            f[pos] = rng.randrange(256)
    read += hot.decode_request(bytes(f)) is not None
print(read)
'''


def test_kio_never_sees_a_length_past_the_frame_behind_it(tmp_path):
    """In a child process (kio's native reader aborts the process on a huge array length, with no
    exception to catch; test_transport_hardening shows it still does): CreateTopics frames with
    huge varints and random bytes spliced in; the decoder hands kio only frames it checked, so
    the child lives. Some damaged frames are still well-formed and read (the check is not just
    refusing everything)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f.hex() for f in (ONE, kio_frame(BIG), kio_frame(request(topic("x"), topic("y"))))))
    script = tmp_path / "fuzz.py"
    script.write_text(_CRASH_FUZZ)
    run = subprocess.run([sys.executable, str(script), str(corpus), "11", "6000"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, f"kio aborted behind the hot decoder: {run.stderr[-2000:]}"
    assert int(run.stdout) > 100, run.stdout


# ---- answers -------------------------------------------------------------------------------------------


def to_kio(answer: hot.CreateTopicsAnswer) -> ct_resp.CreateTopicsResponse:
    """The kio value of ``answer``: what the controller built before (the reference)."""
    return ct_resp.CreateTopicsResponse(throttle_time=answer.throttle_time, topics=tuple(
        ct_resp.CreatableTopicResult(name=r.name, topic_id=r.topic_id, error_code=r.error_code,
                                     error_message=r.error_message, num_partitions=i32(r.num_partitions),
                                     replication_factor=i16(r.replication_factor), configs=r.configs)
        for r in answer.topics))


CODES = st.sampled_from(list(ErrorCode))
RESULTS = st.one_of(
    st.builds(created_result, text, st.uuids(), st.integers(-(2**31), 2**31 - 1), st.integers(-(2**15), 2**15 - 1)),
    st.builds(topic_result, text, CODES, st.none() | text),
    # what no handler builds today, but the encoder writes as kio does: a refusal with an id, an
    # empty config list or its own counts, a created topic with a message
    st.builds(hot.TopicResult, text, st.none() | st.uuids(), CODES, st.none() | text,
              st.integers(-(2**31), 2**31 - 1), st.integers(-(2**15), 2**15 - 1), st.none() | st.just(())))
ANSWERS = st.builds(hot.CreateTopicsAnswer, st.lists(RESULTS, max_size=8).map(tuple), st.integers(0, 2**31 - 1))


@settings(max_examples=400)
@given(ANSWERS, st.integers(-(2**31), 2**31 - 1))
@example(create_response([created_result(f"t{i}-" + "é" * 80, uuid.uuid4(), 10, 3) for i in range(200)]), 1)
def test_every_answer_is_kios_bytes(answer, corr):
    frame = hot.encode_response(corr, answer)
    assert frame == wire.frame_response(corr, to_kio(answer))


@settings(max_examples=100)
@given(ANSWERS, st.integers(2, 6))
def test_older_versions_convert_an_answer_as_they_convert_kios(answer, version):
    """older_versions.from_served reads the tuples by kio's field names: the same v2-v6 answer."""
    back = older_versions.response_type(API_CREATE_TOPICS, version)
    assert older_versions.from_served(answer, back) == older_versions.from_served(to_kio(answer), back)


def test_an_answer_with_configs_is_a_bug_not_a_frame():
    answer = hot.CreateTopicsAnswer((hot.TopicResult("t", None, ErrorCode.none, None, 1, 1, (object(),)),))
    with pytest.raises(ValueError, match="carries configs"):
        hot.encode_response(1, answer)


# ---- in a NodeTransport ------------------------------------------------------------------------------


def test_a_node_reads_its_shape_without_the_guard_and_guards_every_other(monkeypatch):
    """A CreateTopics v7 the decoder reads is handled without the length guard and answered with
    the encoder's bytes; one it leaves (trailing bytes, assignments, an older version) is walked
    by the guard first and answered as before (v5: kio's converted answer); a malformed one
    closes its connection."""
    walked = []
    guard = transport_module.check_request_lengths
    monkeypatch.setattr(transport_module, "check_request_lengths", lambda frame: walked.append(1) or guard(frame))
    topic_id = uuid.UUID(int=7)
    handled = []

    async def create_topics(req):
        handled.append(req)
        return create_response([created_result(t.name, topic_id, t.num_partitions, t.replication_factor)
                                for t in req.topics])

    def expected(req, corr: int) -> bytes:
        return hot.encode_response(corr, create_response([created_result(t.name, topic_id, t.num_partitions,
                                                                          t.replication_factor) for t in req.topics]))

    async def check():
        server = NodeTransport(1, {})
        server.publisher, server.controller = object(), object()  # only their presence is read here
        server._handlers = {API_CREATE_TOPICS: create_topics}

        async def send(payload: bytes) -> tuple[bytes, bool]:
            conn = server._new_inbound()
            written = []
            conn.transport = type("Sink", (), {"write": lambda self, data: written.append(data),
                                               "close": lambda self: None,
                                               "is_closing": lambda self: False})()
            walked[:] = []
            conn.data_received(struct.pack(">i", len(payload)) + payload)
            for _ in range(5):
                await asyncio.sleep(0)
            return b"".join(written), conn.closed

        req = request(topic("orders", 3, 2, [("retention.ms", "1000")]), topic("audit", 1, 1))
        assert await send(kio_frame(req, corr=11)) == (expected(req, 11), False)
        assert walked == [] and handled.pop() == req

        assert await send(kio_frame(req, corr=12) + b"\x00") == (expected(req, 12), False)
        assert walked == [1] and handled.pop() == req

        assigned_answer, closed = await send(ASSIGNED)
        assert walked == [1] and not closed and handled.pop().topics[0].assignments
        assert struct.unpack_from(">i", assigned_answer, 4)[0] == 5  # its correlation id: answered

        v5 = ct_req_v5.CreateTopicsRequest(topics=(ct_req_v5.CreatableTopic(
            name="old", num_partitions=i32(2), replication_factor=i16(1), assignments=(), configs=()),),
            timeout=datetime.timedelta(seconds=5), validate_only=False)
        answer, closed = await send(wire.frame_request(API_CREATE_TOPICS, 5, 13, "aiokafka", v5)[4:])
        assert walked == [1] and not closed and handled.pop().topics[0].name == "old"
        back = older_versions.response_type(API_CREATE_TOPICS, 5)
        converted = older_versions.from_served(create_response([created_result("old", topic_id, 2, 1)]), back)
        assert answer == wire.frame_response(13, converted)

        answer, closed = await send(ONE[:-3])
        assert walked == [1] and closed and answer == b"" and not handled

    asyncio.run(check())


# ---- against a real node ------------------------------------------------------------------------------


class _OneNode(LocalCluster):
    """One combined node process (broker and controller): the single-node default."""

    def command(self, i: int, listen_fd: int) -> list[str]:
        return [sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd)]


def _exchange(address, frame: bytes) -> bytes:
    """Send one request frame on a new connection; its answer (no size prefix), or b"" when the
    node closed the connection instead."""
    with socket.create_connection(address, timeout=30) as s:
        s.sendall(frame)
        head = s.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return b""
        (size,) = struct.unpack(">i", head)
        return s.recv(size, socket.MSG_WAITALL)


@pytest.mark.slow
def test_admin_clients_create_topics_on_a_real_node(tmp_path):
    """kafka-python's admin client (CreateTopics v7: the hot path, configs included) and
    confluent-kafka's (librdkafka: an older version, converted) create topics on a combined node;
    a second create answers TOPIC_ALREADY_EXISTS; a v7 frame with trailing bytes is answered by
    the old path, a truncated one closes its connection with one line."""
    from tests.test_confluent_kafka import _until

    confluent_admin = pytest.importorskip("confluent_kafka.admin")
    cluster = _OneNode(str(tmp_path), n=1)
    try:
        assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "1",
                         "--dir", cluster.dir_of(1)]) == 0
        cluster.start(1)
        host, port = cluster.addresses[1]
        bootstrap = f"{host}:{port}"

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
        try:
            def probe_created():  # the node's broker registered and unfenced: a topic can be placed
                try:
                    return admin.create_topics([NewTopic("probe", 1, 1)])["topics"][0]["error_code"] == 0
                except TopicAlreadyExistsError:
                    return True
            _until(probe_created, "a first topic created through kafka-python")
            result = admin.create_topics([NewTopic("orders", 3, 1, topic_configs={"retention.ms": "60000"}),
                                          NewTopic("audit", 1, 1)])
            assert {t["name"]: t["error_code"] for t in result["topics"]} == {"orders": 0, "audit": 0}
            with pytest.raises(TopicAlreadyExistsError):
                admin.create_topics([NewTopic("orders", 3, 1)])
            _until(lambda: {"orders", "audit"} <= set(admin.list_topics()), "kafka-python's topics listed")
        finally:
            admin.close()

        confluent = confluent_admin.AdminClient({"bootstrap.servers": bootstrap})
        futures = confluent.create_topics([confluent_admin.NewTopic("events", 2, 1)], request_timeout=60)
        futures["events"].result(timeout=60)
        _until(lambda: len(confluent.list_topics(timeout=30).topics["events"].partitions) == 2,
               "confluent-kafka's topic listed with its partitions")

        frame = wire.frame_request(API_CREATE_TOPICS, 7, 21, "raw", request(topic("raw", 1, 1)))
        answer = _exchange(cluster.addresses[1], struct.pack(">i", len(frame) - 3) + frame[4:] + b"\x00")
        corr, body = wire.parse_response(answer, ct_resp.CreateTopicsResponse)
        assert corr == 21 and [(t.name, t.error_code) for t in body.topics] == [("raw", ErrorCode.none)]
        assert _exchange(cluster.addresses[1], struct.pack(">i", len(frame) - 7) + frame[4:-3]) == b""
        _until(lambda: "malformed request (API 19" in cluster.stderr_of(1), "the truncated frame's one line")
        codes = cluster.stop_all()
        assert codes == {1: 0}, cluster.stderr_of(1)[-3000:]
    finally:
        cluster.close()
