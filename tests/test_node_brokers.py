"""Proves the broker role end to end with real processes on loopback: 3 controllers + 3 brokers
(`kraftlog node run --process-roles broker`, Raft observers).

- brokers register with the active controller, catch up, get unfenced, and answer Metadata v12
  from their own images (1,000 topics created through the controller appear on every broker,
  with leader epochs);
- every node writes periodic snapshots into its LMDB store and advances its log start;
- a broker restarted (SIGTERM: controlled shutdown, exit 0) loads its own snapshot and fetches
  only what is new;
- a broker killed and left far behind (the controllers' log start moved past its log end)
  catches up through FetchSnapshot;
- a broker whose heartbeats stop (SIGSTOP) is fenced and left out of metadata answers, its
  leaderships move to other ISR members with higher leader epochs, and it comes back unfenced
  after SIGCONT;
- Prometheus metrics and OffsetsForLeaderEpoch are served;
- a config file with Kafka's setting names starts a node.
Every process is killed in a finalizer whatever happens.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import re
import signal
import subprocess
import sys

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req
from kio.schema.metadata.v12 import response as md_resp
from kio.static.primitive import i16, i32

from kraftlog.engine.cli import main as cli
from kraftlog.engine.node.localcluster import wait_until as _until
from kraftlog.engine.protocol.connection import ClientConnection, ClientError
from kraftlog.engine.protocol.metadata_response import EpochMetadataResponse
from kraftlog.errors import KraftlogError
from tests.test_node_controller import CLUSTER_ID, NodeCluster, _ask

pytestmark = pytest.mark.slow

BROKERS = (101, 102, 103)
RACKS = {101: "rack-a", 102: "rack-b", 103: "rack-c"}
# long enough that a loaded machine does not expire a live broker's session (a spurious fence moved
# leaderships away before the SIGSTOP step measured them); the SIGSTOP fencing waits this out
SESSION_TIMEOUT_MS = 6000
SNAPSHOT_BYTES = 64 << 10  # small, so the scenario writes many snapshots


class BrokerCluster(NodeCluster):
    """3 controller processes (ids 1-3) and 3 broker processes (ids 101-103)."""

    def __init__(self, directory: str):
        super().__init__(directory, 3, observers=BROKERS)

    def command(self, i: int, listen_fd: int) -> list[str]:
        roles = ["--process-roles", "broker", "--rack", RACKS[i]] if i in BROKERS else ["--rack", RACKS[100 + i]]
        if i in (1, 101):
            roles += ["--metrics-port", "0"]
        return [sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd),
                "--election-timeout-ms", "300", "--fetch-timeout-ms", "600", "--request-timeout-ms", "400",
                "--fetch-max-wait-ms", "200", "--session-timeout-ms", str(SESSION_TIMEOUT_MS),
                "--heartbeat-interval-ms", "200", "--snapshot-max-new-bytes", str(SNAPSHOT_BYTES),
                "--leader-imbalance-check-interval-seconds", "1", *roles]


@pytest.fixture
def cluster(tmp_path):
    yield from BrokerCluster(str(tmp_path)).running()


class Conns:
    """One connection per node, reopened when a node restarted."""

    def __init__(self, cluster: BrokerCluster):
        self.cluster = cluster
        self.conns: dict[int, ClientConnection] = {}

    async def get(self, i: int) -> ClientConnection:
        conn = self.conns.get(i)
        if conn is None or not conn.alive:
            conn = self.conns[i] = ClientConnection(*self.cluster.addresses[i])
            await conn.open()
        return conn

    async def metadata(self, i: int) -> md_resp.MetadataResponse:
        req = md_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False)
        return await _ask(await self.get(i), 3, 12, req, EpochMetadataResponse, 5)

    async def close(self) -> None:
        for conn in self.conns.values():
            await conn.close()


def _live(md: md_resp.MetadataResponse) -> set[int]:
    return {int(b.node_id) for b in md.brokers}


async def _create(conns: Conns, names: list[str], partitions: int, rf: int) -> None:
    """CreateTopics at whichever controller is active (NOT_CONTROLLER elsewhere)."""
    req = ct_req.CreateTopicsRequest(topics=tuple(
        ct_req.CreatableTopic(name=n, num_partitions=i32(partitions), replication_factor=i16(rf), assignments=(),
                              configs=()) for n in names))

    async def attempt():
        for i in (1, 2, 3):
            try:
                r = await _ask(await conns.get(i), 19, 7, req, ct_resp.CreateTopicsResponse, 20)
            except (OSError, ClientError, TimeoutError):
                continue
            codes = {t.error_code for t in r.topics}
            if codes == {ErrorCode.none}:
                return True
            assert codes <= {ErrorCode.not_controller}, [(t.name, t.error_code, t.error_message) for t in r.topics]
        return False

    await _until(attempt, 30, f"topics {names[0]}.. created")


def _snapshot_lines(cluster: BrokerCluster, i: int, what: str) -> int:
    return len(re.findall(what, cluster.stderr_of(i)))


def test_brokers_pull_metadata_restart_from_snapshots_and_get_fenced(cluster):
    """The whole broker scenario of the module docstring."""

    async def scenario():
        conns = Conns(cluster)
        try:
            # every broker registers and gets unfenced; a broker serves Metadata and forwards the
            # clients' controller APIs (CreateTopics 19, ...), but not the brokers' own (62, 63, 56)
            await _until(lambda: _all_live(conns, 101, set(BROKERS)), 20, "three live brokers")
            versions = await _ask(await conns.get(101), 18, 3, ApiVersionsRequest(
                client_software_name="t", client_software_version="0"), ApiVersionsResponse)
            keys = {k.api_key for k in versions.api_keys}
            assert {3, 19, 20, 37, 57} <= keys and not {56, 62, 63} & keys

            # 1,000 topics (10 requests of 100), each visible on every broker with leader epochs
            names = [f"t{n:04d}" for n in range(1000)]
            for k in range(0, 1000, 100):
                await _create(conns, names[k:k + 100], 3, 3)
            for b in BROKERS:
                md = await _until(lambda b=b: _has_topics(conns, b, 1000), 20, f"broker {b} sees 1000 topics")
                parts = [p for t in md.topics for p in t.partitions]
                assert len(parts) == 3000
                assert all(int(p.leader_epoch) >= 0 and int(p.leader_id) in BROKERS for p in parts)
                assert int(md.controller_id) in BROKERS  # KIP-590: a live broker, which forwards

            # `quorum describe --bootstrap-server <a broker>`: the broker forwards DescribeQuorum to
            # the active controller; the brokers are the observers
            h, p = cluster.addresses[102]
            out = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "kraftlog.engine.cli.main",
                                                           "quorum", "describe", "--status", "--bootstrap-server",
                                                           f"{h}:{p}"], capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            status = dict(line.split(":", 1) for line in out.stdout.splitlines())
            assert status["LeaderId"].strip() in ("1", "2", "3") and status["CurrentVoters"].strip() == "[1,2,3]"
            observers = status["CurrentObservers"].strip().strip("[]").split(",")
            assert sorted(map(int, observers)) == list(BROKERS), out.stdout

            # Prometheus metrics on broker 101 and controller 1, read over HTTP
            broker_metrics = await _scrape(cluster, 101)
            assert broker_metrics["kraftlog_broker_state"] == 3.0  # Running
            assert broker_metrics["kraftlog_current_metadata_version"] == 26.0
            assert broker_metrics["kraftlog_image_offset"] > 1000
            assert broker_metrics['kraftlog_requests_total{api="Metadata"}'] >= 3
            assert broker_metrics["kraftlog_raft_high_watermark"] >= broker_metrics["kraftlog_image_offset"]
            # KIP-392: broker 101 (rack-a) reads the metadata log from controller 1, the voter of its rack
            # (the leader when 1 leads, else the follower the leader names as its preferred replica)
            async def fetches_from_own_rack():
                return (await _scrape(cluster, 101))["kraftlog_raft_fetch_source_id"] == 1.0
            await _until(fetches_from_own_rack, 15, "broker 101 fetching from controller 1 (rack-a)")
            controller_metrics = await _scrape(cluster, 1)
            assert controller_metrics["kraftlog_broker_state"] == -1.0  # no broker role
            assert controller_metrics["kraftlog_raft_current_leader"] in (1.0, 2.0, 3.0)
            assert 'kraftlog_raft_current_state{state="leader"}' in controller_metrics \
                or 'kraftlog_raft_current_state{state="follower"}' in controller_metrics

            # OffsetsForLeaderEpoch over the wire on a broker: a consumer's end of the current
            # epoch never passes the broker's high watermark; an unknown partition is refused
            from kio.schema.offset_for_leader_epoch.v4 import request as oe_req
            from kio.schema.offset_for_leader_epoch.v4 import response as oe_resp

            epoch = int(broker_metrics["kraftlog_raft_current_epoch"])
            ask = oe_req.OffsetForLeaderEpochRequest(replica_id=i32(-1), topics=(oe_req.OffsetForLeaderTopic(
                topic="__cluster_metadata", partitions=(
                    oe_req.OffsetForLeaderPartition(partition=i32(0), current_leader_epoch=i32(epoch),
                                                    leader_epoch=i32(epoch)),
                    oe_req.OffsetForLeaderPartition(partition=i32(5), current_leader_epoch=i32(-1),
                                                    leader_epoch=i32(epoch)))),))
            r = await _ask(await conns.get(101), 23, 4, ask, oe_resp.OffsetForLeaderEpochResponse)
            current, unknown = r.topics[0].partitions
            assert current.error_code == ErrorCode.none and int(current.leader_epoch) == epoch
            after = await _scrape(cluster, 101)
            assert broker_metrics["kraftlog_image_offset"] < int(current.end_offset) \
                <= after["kraftlog_raft_high_watermark"]
            assert unknown.error_code == ErrorCode.unknown_topic_or_partition

            # broker 102 stops heartbeating (SIGSTOP): fenced, left out of metadata answers, and its
            # leaderships move to other ISR members with a higher leader epoch. First every
            # partition is led by its preferred replica (partitions heal: a broker fenced by a
            # stall earlier has its leaderships back)
            md = await _until(lambda: _preferred_led(conns, 101), 30, "every partition led by its preferred replica")
            before = {(t.name, int(p.partition_index)): (int(p.leader_id), int(p.leader_epoch))
                      for t in md.topics for p in t.partitions}
            led_by_102 = {k for k, (leader, _) in before.items() if leader == 102}
            assert len(led_by_102) > 100
            os.kill(cluster.procs[102].pid, signal.SIGSTOP)
            try:
                fenced = await _until(lambda: _all_live(conns, 101, {101, 103}), 30, "broker 102 fenced")
                # the fence and the leader moves are one ordered write: by the time the broker is
                # out of the answers, every partition it led has a new leader
                after = {(t.name, int(p.partition_index)): (int(p.leader_id), int(p.leader_epoch), p.isr_nodes)
                         for t in fenced.topics for p in t.partitions}
                for k in led_by_102:
                    leader, epoch, isr = after[k]
                    assert leader in (101, 103) and epoch > before[k][1] and 102 not in isr, (k, after[k])
            finally:
                os.kill(cluster.procs[102].pid, signal.SIGCONT)
            await _until(lambda: _all_live(conns, 101, set(BROKERS)), 20, "broker 102 unfenced after SIGCONT")

            # snapshots were written on controllers and brokers, and their logs start past 0
            for i in (1, 2, 3, *BROKERS):
                await _until(lambda i=i: asyncio.sleep(0, _snapshot_lines(cluster, i, r"snapshot \d+-\d+ written")),
                             10, f"node {i} wrote a snapshot")

            # restart broker 101: controlled shutdown (exit 0), then it loads its own snapshot
            cluster.procs[101].send_signal(signal.SIGTERM)
            assert cluster.procs[101].wait(20) == 0, cluster.stderr_of(101)[-3000:]
            cluster.procs.pop(101).err_file.close()
            assert "controlled shutdown not confirmed" not in cluster.stderr_of(101)
            loaded_before = _snapshot_lines(cluster, 101, r"loaded snapshot")
            cluster.start(101)
            await _until(lambda: _has_topics(conns, 101, 1000), 20, "restarted broker 101 sees 1000 topics")
            assert _snapshot_lines(cluster, 101, r"loaded snapshot") == loaded_before + 1

            # broker 103 killed; the controllers move their log start far past its log end;
            # on restart it must fetch a snapshot from a voter to catch up
            cluster.kill(103)
            more = [f"u{n:04d}" for n in range(300)]
            for k in range(0, 300, 100):
                await _create(conns, more[k:k + 100], 3, 2)
            own = set(re.findall(r"snapshot (\d+-\d+) written", cluster.stderr_of(103)))
            cluster.start(103)
            # Kafka's initial catch-up: the restarted broker's first Metadata answer waits until the
            # controller says it caught up (past its new registration), so it already has every topic
            first = await _ask(await conns.get(103), 3, 12, md_req.MetadataRequest(
                topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False),
                EpochMetadataResponse, 60)
            assert len(first.topics) == 1300
            loaded = set(re.findall(r"loaded snapshot (\d+-\d+)", cluster.stderr_of(103)))
            assert loaded - own, f"broker 103 loaded only its own snapshots {loaded} (written: {own})"
            await _until(lambda: _all_live(conns, 102, set(BROKERS)), 20, "broker 103 unfenced again")

        finally:
            await conns.close()

    asyncio.run(scenario())
    # brokers first (their controlled shutdown needs an active controller), then the controllers
    for i in (*BROKERS, 1, 2, 3):
        cluster.procs[i].send_signal(signal.SIGTERM)
        assert cluster.procs[i].wait(20) == 0, cluster.stderr_of(i)[-3000:]
    for i in list(cluster.procs):
        cluster.procs.pop(i).err_file.close()
    # the tool reads a node directory whose log starts past 0 from the node's LMDB snapshot + log
    for i in (1, 101, 103):
        out = subprocess.run([sys.executable, "-m", "kraftlog.engine.cli.main", "image", "show", "--json",
                              cluster.dir_of(i)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "which this image does not include" not in out.stderr
        facts = json.loads(out.stdout)
        assert (facts["topics"], facts["partitions"], facts["brokers"]) == (1300, 3900, 3), facts


async def _scrape(cluster: BrokerCluster, i: int) -> dict[str, float]:
    """GET /metrics of node ``i`` (its port is in its log), parsed to {sample with labels: value}."""
    port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", cluster.stderr_of(i)).group(1))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200"), head
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


async def _all_live(conns: Conns, at: int, expected: set[int]):
    md = await conns.metadata(at)
    return md if _live(md) == expected else None


async def _preferred_led(conns: Conns, at: int):
    md = await conns.metadata(at)
    return md if all(int(p.leader_id) == int(p.replica_nodes[0]) for t in md.topics for p in t.partitions) else None


async def _has_topics(conns: Conns, at: int, count: int):
    md = await conns.metadata(at)
    return md if len(md.topics) == count and all(t.error_code == ErrorCode.none for t in md.topics) else None


def test_config_file_with_kafka_names_starts_a_single_node(tmp_path):
    """A properties file (node.id, process.roles, controller.quorum.voters, log.dirs, listeners)
    runs a combined node that bootstraps, registers itself as a broker and is unfenced; a missing
    setting is one clear line."""
    port = _free_port()

    async def check():
        conn = ClientConnection("127.0.0.1", port)
        await conn.open()
        try:
            req = md_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False)

            async def registered():
                md = await _ask(conn, 3, 12, req, EpochMetadataResponse, 5)
                return md if _live(md) == {1} else None

            md = await _until(registered, 20, "the combined node registered and unfenced")
            assert int(md.controller_id) == 1 and md.cluster_id == CLUSTER_ID
        finally:
            await conn.close()

    _run_with_config(tmp_path, f"# single node\nnode.id=1\nprocess.roles=broker,controller\n"
                               f"controller.quorum.voters=1@127.0.0.1:{port}\nlog.dirs={{dir}}\n"
                               f"listeners=PLAINTEXT://127.0.0.1:{port}\nbroker.heartbeat.interval.ms=200\n",
                     port, check)

    missing = tmp_path / "missing.properties"
    missing.write_text("node.id=1\n")
    r = subprocess.run([sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--config", str(missing)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert r.stderr.strip().count("\n") == 0 and "--controller-quorum-voters is required" in r.stderr


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_with_config(tmp_path, properties: str, ready_port: int, check) -> str:
    """Format node 1, run `kraftlog node run --config` with ``properties`` ({dir}: its directory)
    until READY on ``ready_port``, run ``check()``, then SIGTERM it: exit 0; returns its stderr."""
    d = str(tmp_path / "n1")
    assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "1", "--dir", d]) == 0
    config = tmp_path / "server.properties"
    config.write_text(properties.replace("{dir}", d))
    proc = subprocess.Popen([sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--config",
                             str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().startswith(b"READY node=1 port=%d" % ready_port)
        asyncio.run(check())
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()[-3000:]
    return err.decode()


def test_kafkas_own_combined_configuration_starts_a_working_node(tmp_path):
    """Kafka's KRaft server.properties for a combined node: two listeners split by
    controller.listener.names (the quorum on CONTROLLER, clients on PLAINTEXT, which the broker
    registers), the quorum timeouts and num.partitions / default.replication.factor honoured, an
    unknown key named once in a warning."""
    from kio.schema.create_topics.v7 import request as ct_req

    broker_port, controller_port = _free_port(), _free_port()

    async def check():
        conn = ClientConnection("127.0.0.1", broker_port)  # a client on the broker listener
        await conn.open()
        try:
            async def created():
                req = ct_req.CreateTopicsRequest(timeout=datetime.timedelta(seconds=10), validate_only=False,
                                                 topics=(ct_req.CreatableTopic(
                                                     name="defaults", num_partitions=i32(-1),
                                                     replication_factor=i16(-1), assignments=(), configs=()),))
                answer = await _ask(conn, 19, 7, req, ct_resp.CreateTopicsResponse, 10)
                code = answer.topics[0].error_code
                return code in (ErrorCode.none, ErrorCode.topic_already_exists)

            await _until(created, 30, "a topic created with -1/-1 through the broker listener")
            req = md_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                         include_topic_authorized_operations=False)
            md = await _ask(conn, 3, 12, req, EpochMetadataResponse, 10)
            assert [(b.node_id, b.port) for b in md.brokers] == [(1, broker_port)]
            (topic,) = [t for t in md.topics if t.name == "defaults"]
            assert len(topic.partitions) == 3 and all(len(p.replica_nodes) == 1 for p in topic.partitions)
        finally:
            await conn.close()

    err = _run_with_config(
        tmp_path, f"process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{controller_port}\n"
                  f"listeners=PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}\n"
                  "controller.listener.names=CONTROLLER\ncontroller.quorum.election.timeout.ms=400\n"
                  "log.dirs={dir}\nnum.partitions=3\ndefault.replication.factor=1\n"
                  "group.initial.rebalance.delay.ms=0\nbroker.heartbeat.interval.ms=200\n",
        controller_port, check)
    warnings = [line for line in err.splitlines() if "not used" in line]
    assert len(warnings) == 1 and "group.initial.rebalance.delay.ms" in warnings[0]


def test_active_controller_killed_mid_write_and_a_client_facing_lagging_brokers(cluster):
    """SIGKILL of the active controller while CreateTopics requests stream in: a new active
    controller answers within the bound, and every topic a controller acknowledged is on every
    broker afterwards (no committed record lost). Then brokers lag on purpose (SIGSTOP/SIGCONT in
    bursts) while topics are created and a MetadataClient refreshes from all of them: every answer
    it applies is at least as new as its cache, topic by topic and partition by partition."""
    from kraftlog.engine.client.metadata_client import MetadataClient
    from kraftlog.engine.node.raftnode import RaftClient

    election_timeout_ms = 300  # BrokerCluster's --election-timeout-ms

    async def scenario():
        conns = Conns(cluster)
        raft = RaftClient(cluster.voters)
        try:
            await _until(lambda: _all_live(conns, 101, set(BROKERS)), 20, "three live brokers")
            acknowledged: list[str] = []
            stop = asyncio.Event()
            dead: set[int] = set()  # the killed controller: its socket (held by this test) never answers
            last_good = [1]

            async def writer():
                n = 0
                while not stop.is_set():
                    name = f"w{n:05d}"
                    req = ct_req.CreateTopicsRequest(topics=(ct_req.CreatableTopic(
                        name=name, num_partitions=i32(2), replication_factor=i16(2), assignments=(), configs=()),))
                    for i in [last_good[0]] + [i for i in (1, 2, 3) if i != last_good[0]]:
                        if i in dead:
                            continue
                        try:
                            r = await _ask(await conns.get(i), 19, 7, req, ct_resp.CreateTopicsResponse, 2)
                        except (OSError, ClientError, TimeoutError):
                            continue
                        code = r.topics[0].error_code
                        if code in (ErrorCode.none, ErrorCode.topic_already_exists):
                            acknowledged.append(name)
                            last_good[0] = i
                            n += 1
                            break
                    else:
                        await asyncio.sleep(0.01)

            task = asyncio.get_running_loop().create_task(writer())
            await _until(lambda: asyncio.sleep(0, len(acknowledged) >= 30), 20, "30 topics acknowledged")
            active = (await raft.describe_quorum()).leader_id
            before = len(acknowledged)
            dead.add(active)
            cluster.kill(active)
            killed = asyncio.get_running_loop().time()
            await _until(lambda: asyncio.sleep(0, len(acknowledged) > before), 20, "a topic after the kill")
            failover_s = asyncio.get_running_loop().time() - killed
            try:
                await _until(lambda: asyncio.sleep(0, len(acknowledged) >= before + 30), 20, "30 more topics")
            finally:
                stop.set()
                await asyncio.wait_for(task, 10)
            assert failover_s < 10 * election_timeout_ms / 1000, failover_s
            cluster.start(active)  # the killed controller rejoins as a standby
            conns.conns.pop(active, None)
            for b in BROKERS:
                async def has_all(b=b):
                    md = await conns.metadata(b)
                    return {t.name for t in md.topics} >= set(acknowledged)
                await _until(has_all, 20, f"broker {b} holding every acknowledged topic")

            # brokers lag on purpose; the client must never apply an answer older than its cache
            client = MetadataClient([cluster.addresses[b] for b in BROKERS], learn_nodes=False,
                                    refresh_backoff_ms=10, refresh_backoff_max_ms=50, request_timeout_ms=500)
            seen: dict[tuple[str, int], tuple[int, int]] = {}
            lagging = asyncio.Event()

            async def lag():
                while not lagging.is_set():
                    for b in (102, 103):
                        os.kill(cluster.procs[b].pid, signal.SIGSTOP)
                    await asyncio.sleep(0.15)
                    for b in (102, 103):
                        os.kill(cluster.procs[b].pid, signal.SIGCONT)
                    await asyncio.sleep(0.03)

            lagger = asyncio.get_running_loop().create_task(lag())
            try:
                names = []
                for k in range(12):
                    names.append(f"lag{k:02d}")
                    await _create(conns, [names[-1]], 2, 2)

                    async def on_steady_broker(name=names[-1]):
                        md = await conns.metadata(BROKERS[0])  # the one broker that is never stopped
                        return any(t.name == name for t in md.topics)
                    # so that at least one answer per topic can name it (the count checked below)
                    await _until(on_steady_broker, 20, f"broker {BROKERS[0]} holding {names[-1]}")
                    for b in BROKERS:
                        try:
                            await client.refresh(names, node=cluster.addresses[b], timeout_ms=3000)
                        except KraftlogError:
                            continue  # stayed stale or unreachable until the deadline: nothing applied
                        for name in names:
                            topic = client.cached(name)
                            if topic is None:
                                continue
                            for pid in range(2):
                                part = client.cached(name, pid)
                                now = (topic.topic_epoch, part.leader_epoch)
                                assert now >= seen.get((name, pid), now), (name, pid, seen[(name, pid)], now)
                                seen[(name, pid)] = now
            finally:
                lagging.set()
                await lagger
                for b in (102, 103):
                    os.kill(cluster.procs[b].pid, signal.SIGCONT)
                await client.close()
            assert client.stats.answers_accepted > 0 and len(seen) == 24, (client.stats, len(seen))
        finally:
            await raft.close()
            await conns.close()

    asyncio.run(scenario())
