"""Proves `kraftlog quorum describe` against a live 3-node quorum (real processes, loopback): the
status fields and replication rows of kafka-metadata-quorum, the leader found from any address,
and one clear error line when nothing answers."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest
from test_raft_cluster import ProcessCluster

from kraftlog.engine.node.raftnode import RaftClient

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quorum(tmp_path_factory):
    cluster = ProcessCluster(str(tmp_path_factory.mktemp("quorum")))
    try:
        for i in cluster.voters:
            cluster.start(i)

        async def commit():
            client = RaftClient(cluster.voters)
            try:
                for _ in range(3):
                    await client.propose([b"x" * 50] * 20, timeout_ms=15_000)
            finally:
                await client.close()

        asyncio.run(commit())
        yield cluster
    finally:
        cluster.close()


def kraftlog(*args):
    return subprocess.run([sys.executable, "-m", "kraftlog.engine.cli.main", *args], capture_output=True,
                          text=True, timeout=60)


def addresses(cluster, order):
    return ",".join(f"{cluster.voters[i][0]}:{cluster.voters[i][1]}" for i in order)


def test_status_names_the_leader_and_the_voters_from_any_address(quorum):
    for order in ([1, 2, 3], [3, 2, 1]):
        out = kraftlog("quorum", "describe", "--status", "--bootstrap-controller", addresses(quorum, order),
                       "--cluster-id", "test-cluster")
        assert out.returncode == 0, out.stderr
        fields = dict(line.split(":", 1) for line in out.stdout.splitlines())
        fields = {k: v.strip() for k, v in fields.items()}
        assert list(fields) == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                                "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"]
        assert fields["ClusterId"] == "test-cluster" and int(fields["LeaderId"]) in (1, 2, 3)
        assert int(fields["HighWatermark"]) >= 60 and int(fields["LeaderEpoch"]) >= 1
        assert fields["CurrentVoters"] == "[1,2,3]" and fields["CurrentObservers"] == "[]"


def test_replication_has_one_row_per_voter_with_the_leader_marked(quorum):
    out = kraftlog("quorum", "describe", "--replication", "--human-readable", "--bootstrap-server",
                   addresses(quorum, [2, 3, 1]))
    assert out.returncode == 0, out.stderr
    header, *rows = [line.split() for line in out.stdout.splitlines()]
    assert header == ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    assert sorted(r[0] for r in rows) == ["1", "2", "3"]
    assert [r[-1] for r in rows] == ["Leader", "Follower", "Follower"]  # Kafka's order: the leader first
    assert all(int(r[1]) >= 60 for r in rows) and all("ago" in " ".join(r) for r in rows)
    # Kafka's semantics: epoch milliseconds, so "N ms ago" against this machine's clock is small
    ages = [int(r[3]) for r in rows if r[-1] == "Follower"]
    assert all(0 <= age < 60_000 for age in ages), ages


def test_a_follower_alone_leads_the_tool_to_the_leader(quorum):
    """A follower's answer names the leader and (v2 Nodes) its endpoint: the tool asks there."""
    status = kraftlog("quorum", "describe", "--status", "--bootstrap-controller", addresses(quorum, [1, 2, 3]))
    leader = int(dict(line.split(":", 1) for line in status.stdout.splitlines())["LeaderId"])
    follower = next(i for i in (1, 2, 3) if i != leader)
    out = kraftlog("quorum", "describe", "--status", "--bootstrap-controller", addresses(quorum, [follower]))
    assert out.returncode == 0, out.stderr
    fields = {k: v.strip() for k, v in (line.split(":", 1) for line in out.stdout.splitlines())}
    assert int(fields["LeaderId"]) == leader
    # a bare Raft log node serves no Metadata: the cluster id is unknown unless given
    assert fields["ClusterId"].startswith("(unknown")


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_quorum_is_served_at_the_versions_kafkas_tools_ask(quorum, version):
    """Kafka 3.3-3.8's metadata-quorum tool asks v0/v1; v1 adds the timestamps, v2 the Nodes."""
    import importlib

    from kraftlog.engine.protocol.connection import ClientConnection

    req_mod = importlib.import_module(f"kio.schema.describe_quorum.v{version}.request")
    resp_mod = importlib.import_module(f"kio.schema.describe_quorum.v{version}.response")

    async def ask(i):
        conn = ClientConnection(*quorum.voters[i])
        await conn.open()
        try:
            req = req_mod.DescribeQuorumRequest(topics=(req_mod.TopicData(
                topic_name="__cluster_metadata", partitions=(req_mod.PartitionData(partition_index=0),)),))
            return await conn.request(55, version, req, resp_mod.DescribeQuorumResponse, timeout_s=30)
        finally:
            await conn.close()

    answers = [asyncio.run(ask(i)) for i in (1, 2, 3)]
    led = [a.topics[0].partitions[0] for a in answers if a.topics[0].partitions[0].error_code == 0]
    assert len(led) == 1  # only the leader describes the quorum
    p = led[0]
    assert sorted(v.replica_id for v in p.current_voters) == [1, 2, 3] and p.high_watermark >= 60
    if version >= 1:
        assert all(v.last_fetch_timestamp > 0 for v in p.current_voters)
    if version >= 2:
        nodes = {n.node_id: (n.listeners[0].host, n.listeners[0].port) for n in answers[0].nodes}
        assert nodes == {i: quorum.voters[i] for i in (1, 2, 3)}


def test_an_unreachable_quorum_is_one_error_line_naming_what_was_tried():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    out = kraftlog("quorum", "describe", "--status", "--bootstrap-controller", f"127.0.0.1:{port}", "--timeout-ms", "1500")
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in out.stderr and "Traceback" not in out.stderr
    bad = kraftlog("quorum", "describe", "--status", "--bootstrap-controller", "nonsense")
    assert bad.returncode == 1 and "bad address 'nonsense'" in bad.stderr


def test_status_reads_the_cluster_id_from_a_metadata_node(tmp_path):
    from tests.test_node_controller import CLUSTER_ID, NodeCluster

    cluster = NodeCluster(str(tmp_path), 1)
    try:
        cluster.format()
        cluster.start_all()
        host, port = cluster.addresses[1]
        out = kraftlog("quorum", "describe", "--status", "--bootstrap-controller", f"{host}:{port}")
        assert out.returncode == 0, out.stderr
        fields = {k: v.strip() for k, v in (line.split(":", 1) for line in out.stdout.splitlines())}
        assert fields["ClusterId"] == CLUSTER_ID and fields["LeaderId"] == "1"
    finally:
        cluster.close()
