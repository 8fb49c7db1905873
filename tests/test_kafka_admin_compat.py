"""Kafka admin clients that are not ours (kafka-python's KafkaAdminClient, which speaks the newest
versions, and aiokafka's AIOKafkaAdminClient, which stops at ApiVersions v0-v2, Metadata v5,
CreateTopics v3, DeleteTopics v3: engine/protocol/older_versions.py) against a live cluster,
bootstrapped at a broker, the way a Kafka user would point them: 3 controller processes + 2 broker
processes on loopback.

- Metadata names a live broker as ControllerId (KIP-590), so the admin client sends CreateTopics,
  CreatePartitions and DeleteTopics to a broker, which forwards them to the active controller;
  its answers (created, already exists, bad replication factor, grown, deleted) come back unchanged;
- the forwarding follows a new active controller after the old one is SIGKILLed;
- with every controller unreachable the broker answers REQUEST_TIMED_OUT naming why, in bounded time;
- a partition whose only replica's broker is fenced is answered as Kafka's brokers answer it:
  LEADER_NOT_AVAILABLE, leader -1, the replica listed offline.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import signal
import socket
import struct
import sys
import time

import pytest
from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import InvalidReplicationFactorError, TopicAlreadyExistsError
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from kraftlog.engine.cli import main as cli
from kraftlog.engine.node.raftnode import RaftClient
from kraftlog.engine.protocol.connection import ClientConnection
from kraftlog.raft import wire
from tests.test_node_controller import CLUSTER_ID, NodeCluster, _ask

pytestmark = pytest.mark.slow

BROKERS = (101, 102)
# 30 heartbeats (200 ms): a loaded 2-core machine never fences a live broker by accident
SESSION_TIMEOUT_MS = 6000
LEADER_NOT_AVAILABLE = 5


class AdminCluster(NodeCluster):
    """Controllers 1-3 and brokers 101-102."""

    def __init__(self, directory: str):
        super().__init__(directory, 3, observers=BROKERS)

    def command(self, i: int, listen_fd: int) -> list[str]:
        roles = ["--process-roles", "broker"] if i in BROKERS else []
        return [sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd),
                "--election-timeout-ms", "300", "--fetch-timeout-ms", "600", "--request-timeout-ms", "400",
                "--fetch-max-wait-ms", "200", "--session-timeout-ms", str(SESSION_TIMEOUT_MS),
                "--heartbeat-interval-ms", "200", *roles]

    def format(self) -> None:
        for i in self.socks:
            assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", str(i),
                             "--dir", self.dir_of(i)]) == 0


@pytest.fixture
def cluster(tmp_path):
    yield from AdminCluster(str(tmp_path)).running()


def _poll(predicate, timeout_s: float, what: str):
    end = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < end:
        last = predicate()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout_s} s (last: {last!r})")


def _admin(cluster: AdminCluster, broker: int) -> KafkaAdminClient:
    """An admin client bootstrapped at ``broker`` once both brokers are registered and unfenced
    (a client that bootstrapped earlier keeps a broker list without the late one until its next
    metadata refresh, and may be told to send to it meanwhile)."""
    host, port = cluster.addresses[broker]

    def registered():
        probe = KafkaAdminClient(bootstrap_servers=f"{host}:{port}", request_timeout_ms=2_000)
        try:
            return {b["broker_id"] for b in probe.describe_cluster()["brokers"]} == set(BROKERS)
        finally:
            probe.close()
    _poll(registered, 20, "both brokers registered and unfenced")
    return KafkaAdminClient(bootstrap_servers=f"{host}:{port}", request_timeout_ms=10_000)


def _partitions(admin: KafkaAdminClient, topic: str) -> list[dict]:
    (described,) = admin.describe_topics([topic])
    return sorted(described["partitions"], key=lambda p: p["partition_index"])


def _active_controller(cluster: AdminCluster) -> int:
    async def ask():
        client = RaftClient(cluster.voters)
        try:
            return (await client.describe_quorum()).leader_id
        finally:
            await client.close()
    return asyncio.run(ask())


def test_kafka_admin_client_through_a_broker(cluster):
    admin = _admin(cluster, 101)
    try:
        described = admin.describe_cluster()
        assert described["cluster_id"] == CLUSTER_ID
        assert described["controller_id"] in BROKERS  # not a controller: clients cannot reach those

        result = admin.create_topics([NewTopic("orders", 3, 2), NewTopic("audit", 1, 1)])
        assert {t["name"]: t["error_code"] for t in result["topics"]} == {"orders": 0, "audit": 0}
        _poll(lambda: {"orders", "audit"} <= set(admin.list_topics()), 10, "the new topics listed")
        parts = _partitions(admin, "orders")
        assert [p["partition_index"] for p in parts] == [0, 1, 2]
        for p in parts:
            assert p["error_code"] == 0 and p["leader_id"] in BROKERS and sorted(p["replica_nodes"]) == [101, 102]
            assert p["offline_replicas"] == []

        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("orders", 3, 2)])
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics([NewTopic("too-wide", 1, 3)])  # 3 replicas, 2 brokers

        grown = admin.create_partitions({"orders": NewPartitions(5)})
        assert [r.error_code for r in grown.results] == [0]
        _poll(lambda: len(_partitions(admin, "orders")) == 5, 10, "orders grown to 5 partitions")

        deleted = admin.delete_topics(["audit"])
        assert [t["error_code"] for t in deleted["topics"]] == [0]
        _poll(lambda: "audit" not in admin.list_topics(), 10, "audit gone")

        # the active controller dies: the broker forwards to the next one
        active = _active_controller(cluster)
        cluster.kill(active)
        result = admin.create_topics([NewTopic("after-failover", 2, 2)])
        assert [t["error_code"] for t in result["topics"]] == [0]
        _poll(lambda: "after-failover" in admin.list_topics(), 10, "a topic created after the failover")
    finally:
        admin.close()


def _metadata_from(cluster: AdminCluster, broker: int, topic: str):
    """Metadata v12 for ``topic`` from ``broker`` alone, decoded by kafka-python (an admin client
    would also ask the other broker, which a test may have stopped)."""
    from kafka.protocol.metadata import MetadataResponse as KafkaPythonMetadataResponse
    from kio.schema.metadata.v12 import request as md_req

    req = md_req.MetadataRequest(topics=(md_req.MetadataRequestTopic(topic_id=None, name=topic),),
                                 allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with socket.create_connection(cluster.addresses[broker], timeout=5) as sock:
        sock.sendall(wire.frame_request(3, 12, 7, "test", req))
        size = struct.unpack(">i", _read_exactly(sock, 4))[0]
        frame = _read_exactly(sock, size)
    assert struct.unpack_from(">i", frame, 0)[0] == 7 and frame[4] == 0  # header v1: correlation id, no tags
    (t,) = KafkaPythonMetadataResponse.decode(frame[5:], version=12).topics
    return sorted(t.partitions, key=lambda p: p.partition_index)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "connection closed mid-answer"
        out += chunk
    return out


def test_fenced_only_replica_gives_leader_not_available(cluster):
    admin = _admin(cluster, 101)
    try:
        # two partitions of one replica each: the controller puts one on each broker
        admin.create_topics([NewTopic("single", 2, 1)])
    finally:
        admin.close()
    parts = _poll(lambda: len(_metadata_from(cluster, 101, "single")) == 2 and _metadata_from(cluster, 101, "single"),
                  10, "the topic on broker 101")
    on_102 = next(p.partition_index for p in parts if p.replica_nodes == [102])
    os.kill(cluster.procs[102].pid, signal.SIGSTOP)  # heartbeats stop: fenced after the session timeout
    try:
        def leaderless():
            p = _metadata_from(cluster, 101, "single")[on_102]
            return p if p.leader_id == -1 else None
        p = _poll(leaderless, 60, "the partition on the fenced broker without a leader")
        assert p.error_code == LEADER_NOT_AVAILABLE and p.offline_replicas == [102] and p.replica_nodes == [102]
        other = _metadata_from(cluster, 101, "single")[1 - on_102]
        assert other.error_code == 0 and other.leader_id == 101 and other.offline_replicas == []
    finally:
        os.kill(cluster.procs[102].pid, signal.SIGCONT)
    _poll(lambda: _metadata_from(cluster, 101, "single")[on_102].leader_id == 102, 60, "102 leads again")
    assert _metadata_from(cluster, 101, "single")[on_102].error_code == 0


def test_forwarding_with_no_controller_reachable_times_out_with_a_reason(cluster):
    async def check():
        conn = ClientConnection(*cluster.addresses[101])
        await conn.open()
        try:
            async def registered():
                md = await _ask(conn, 3, 12, _metadata_request(), _metadata_response(), 5)
                return {int(b.node_id) for b in md.brokers} == set(BROKERS)
            from kraftlog.engine.node.localcluster import wait_until
            await wait_until(registered, 20, "both brokers registered")
            for c in (1, 2, 3):
                os.kill(cluster.procs[c].pid, signal.SIGSTOP)
            try:
                req = ct_req.CreateTopicsRequest(
                    topics=(ct_req.CreatableTopic(name="nowhere", num_partitions=i32(1), replication_factor=i16(1),
                                                  assignments=(), configs=()),),
                    timeout=datetime.timedelta(milliseconds=300), validate_only=False)
                started = time.monotonic()
                resp = await _ask(conn, 19, 7, req, ct_resp.CreateTopicsResponse, 30)
                elapsed = time.monotonic() - started
            finally:
                for c in (1, 2, 3):
                    os.kill(cluster.procs[c].pid, signal.SIGCONT)
            (topic,) = resp.topics
            assert topic.name == "nowhere" and topic.error_code is ErrorCode.request_timed_out
            assert "no active controller answered" in topic.error_message
            assert elapsed < 10, elapsed  # three controllers, one bounded attempt each
        finally:
            await conn.close()

    asyncio.run(check())


def _metadata_request():
    from kio.schema.metadata.v12 import request as md_req
    return md_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)


def _metadata_response():
    from kraftlog.engine.protocol.metadata_response import EpochMetadataResponse
    return EpochMetadataResponse


def test_aiokafka_admin_client_through_a_broker_at_older_versions(cluster):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewPartitions as AioNewPartitions
    from aiokafka.admin import NewTopic as AioNewTopic

    _admin(cluster, 102).close()  # both brokers registered and unfenced
    host, port = cluster.addresses[102]

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=f"{host}:{port}", request_timeout_ms=10_000)
        await admin.start()
        try:
            created = await admin.create_topics([AioNewTopic("legacy", 3, 2)])  # CreateTopics v3
            assert [(t[0], t[1]) for t in created.topic_errors] == [("legacy", 0)]
            again = await admin.create_topics([AioNewTopic("legacy", 3, 2)])
            assert [t[1] for t in again.topic_errors] == [36]  # TOPIC_ALREADY_EXISTS
            while "legacy" not in await admin.list_topics():
                await asyncio.sleep(0.05)
            (described,) = await admin.describe_topics(["legacy"])  # Metadata v5
            assert described["error_code"] == 0 and len(described["partitions"]) == 3
            assert all(p["leader"] in BROKERS and sorted(p["replicas"]) == [101, 102] for p in described["partitions"])
            grown = await admin.create_partitions({"legacy": AioNewPartitions(4)})
            assert [t[1] for t in grown.topic_errors] == [0]
            deleted = await admin.delete_topics(["legacy"])  # DeleteTopics v3: topic names
            assert [tuple(t) for t in deleted.topic_error_codes] == [("legacy", 0)]
            while "legacy" in await admin.list_topics():
                await asyncio.sleep(0.05)
        finally:
            await admin.close()

    asyncio.run(asyncio.wait_for(run(), 60))
