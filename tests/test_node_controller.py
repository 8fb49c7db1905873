"""Proves the controller role end to end: three `kraftlog node run` processes on loopback
(ephemeral ports handed over with --listen-fd) elect an active controller that bootstraps
metadata.version, registers brokers (fenced), unfences them on heartbeat, creates topics over
Kafka's wire (CreateTopics v7) atomically through Raft, answers the documented errors, refuses
writes on a standby (NOT_CONTROLLER), fences a broker whose session expired, and every controller
(active or standby) keeps a live image of what was committed (read with Metadata v12, then
checked again by `kraftlog image show` on each stopped node's directory). After the active
controller is SIGKILLed, a standby takes over with a complete image (it answers
TOPIC_ALREADY_EXISTS) and keeps creating topics.

Also: the node refuses an unformatted directory with one stderr line, and the replica placer
spreads replicas across racks. Every process is killed in a finalizer, whatever happens.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections import Counter

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.broker_heartbeat.v1 import request as hb_req
from kio.schema.broker_heartbeat.v1 import response as hb_resp
from kio.schema.broker_registration.v4 import request as reg_req
from kio.schema.broker_registration.v4 import response as reg_resp
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req
from kio.static.primitive import i16, i32, i64, u16

from kraftlog.engine.cli import main as cli
from kraftlog.engine.controller.controller import place_replicas, rack_interleaved
from kraftlog.engine.image.image import BrokerRegistration
from kraftlog.engine.node.localcluster import LocalCluster, wait_until
from kraftlog.engine.protocol.connection import ClientConnection, ClientError
from kraftlog.engine.protocol.metadata_response import EpochMetadataResponse

pytestmark = pytest.mark.slow

# 30 heartbeats (HEARTBEAT_EVERY_S): a loaded 2-core machine never fences a live broker by accident
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_EVERY_S = 0.2
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"  # any 22-character Kafka uuid
RACKS = {101: "rack-a", 102: "rack-b", 103: "rack-c"}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraftlog.engine.cli.main", *args], capture_output=True,
                          text=True, timeout=60)


class NodeCluster(LocalCluster):
    """Three `kraftlog node run` controller processes (see kraftlog.engine.node.localcluster)."""

    def format(self) -> None:
        for i in self.socks:
            assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", str(i),
                             "--dir", self.dir_of(i)]) == 0

    def command(self, i: int, listen_fd: int) -> list[str]:
        return [sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd),
                "--election-timeout-ms", "300", "--fetch-timeout-ms", "600", "--request-timeout-ms", "400",
                "--fetch-max-wait-ms", "200", "--session-timeout-ms", str(SESSION_TIMEOUT_MS)]

    def running(self):
        """For a fixture: format, start every node, yield the cluster; every process is killed
        afterwards, whatever happened."""
        try:
            self.format()
            self.start_all()
            yield self
        finally:
            self.close()

    def stop_all(self) -> None:
        for i, code in super().stop_all().items():
            assert code == 0, self.stderr_of(i)


@pytest.fixture
def cluster(tmp_path):
    yield from NodeCluster(str(tmp_path)).running()


# ---- requests ---------------------------------------------------------------------------------------


async def _ask(conn: ClientConnection, api_key: int, version: int, body, response_type, timeout_s: float = 10):
    # ApiVersions (18) is answered with response header v0, every other API with v1
    return await asyncio.wait_for(conn.request(api_key, version, body, response_type, header_v0=api_key == 18),
                                  timeout_s)


def _registration(broker_id: int, incarnation: uuid.UUID) -> reg_req.BrokerRegistrationRequest:
    return reg_req.BrokerRegistrationRequest(
        broker_id=i32(broker_id), cluster_id=CLUSTER_ID, incarnation_id=incarnation,
        listeners=(reg_req.Listener(name="PLAINTEXT", host="127.0.0.1", port=u16(9000 + broker_id),
                                    security_protocol=i16(0)),),
        features=(reg_req.Feature(name="metadata.version", min_supported_version=i16(1),
                                  max_supported_version=i16(30)),),
        rack=RACKS[broker_id], log_dirs=(uuid.uuid4(),))


def _heartbeat(broker_id: int, epoch: int) -> hb_req.BrokerHeartbeatRequest:
    return hb_req.BrokerHeartbeatRequest(broker_id=i32(broker_id), broker_epoch=i64(epoch),
                                         current_metadata_offset=i64(epoch + 1_000_000), want_fence=False,
                                         want_shut_down=False)


def _topics(*specs: tuple[str, int, int]) -> ct_req.CreateTopicsRequest:
    return ct_req.CreateTopicsRequest(topics=tuple(
        ct_req.CreatableTopic(name=n, num_partitions=i32(p), replication_factor=i16(rf), assignments=(), configs=())
        for n, p, rf in specs))


async def _until(predicate, timeout_s: float, what: str):
    """wait_until, with any connection error failing the test at once (these clusters stay up)."""
    return await wait_until(predicate, timeout_s, what, transient_errors=False)


async def _register_at_active(conns: dict, request, *, others_refuse: bool = True) -> tuple[int, int]:
    """(active controller id, broker epoch): BrokerRegistration ``request`` asked of each
    controller in turn until one, the active controller, accepts it; with ``others_refuse`` every
    other answer must be NOT_CONTROLLER."""
    async def find_active():
        for i, conn in conns.items():
            r = await _ask(conn, 62, 4, request, reg_resp.BrokerRegistrationResponse)
            if r.error_code == ErrorCode.none:
                return i, r.broker_epoch
            if others_refuse:
                assert r.error_code == ErrorCode.not_controller, r
        return None

    return await _until(find_active, 15, "an active controller")


# ---- the scenario --------------------------------------------------------------------------------------


def test_controllers_register_unfence_create_topics_and_keep_live_images(cluster):
    """The whole controller slice on a real 3-node quorum (see the module docstring)."""
    created: dict[str, uuid.UUID] = {}
    killed: list[int] = []

    async def scenario():
        conns = {}
        for i, (host, port) in cluster.addresses.items():
            conns[i] = ClientConnection(host, port)
            await conns[i].open()
        heartbeats: asyncio.Task | None = None
        try:
            # ApiVersions lists the raft APIs and the controller's
            versions = await _ask(conns[1], 18, 3, ApiVersionsRequest(client_software_name="t",
                                                                      client_software_version="0"),
                                  ApiVersionsResponse)
            keys = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
            # CreateTopics and Metadata from their KIP-896 baselines (older_versions.py); the brokers' APIs at one
            assert keys[19] == (2, 7) and keys[62] == (4, 4) and keys[63] == (1, 1) and keys[3] == (4, 12)
            assert 52 in keys and 1 in keys  # Vote and Fetch still served

            # the active controller is the one that accepts a registration; the others refuse it
            incarnations = {b: uuid.uuid4() for b in RACKS}

            active, epoch101 = await _register_at_active(conns, _registration(101, incarnations[101]))
            standby = next(i for i in conns if i != active)
            epochs = {101: epoch101}
            for b in (102, 103):
                r = await _ask(conns[active], 62, 4, _registration(b, incarnations[b]),
                               reg_resp.BrokerRegistrationResponse)
                assert r.error_code == ErrorCode.none, r
                epochs[b] = r.broker_epoch
            assert len(set(epochs.values())) == 3  # every registration has its own epoch
            r = await _ask(conns[standby], 63, 1, _heartbeat(101, epochs[101]), hb_resp.BrokerHeartbeatResponse)
            assert r.error_code == ErrorCode.not_controller

            # heartbeats unfence the brokers (written as UnfenceBrokerRecord)
            fenced = {b: True for b in RACKS}
            beating = set(RACKS)
            target = {"node": active}  # where the brokers send heartbeats (changes on failover)

            async def beat_forever():
                while True:
                    for b in list(beating):
                        try:
                            r = await _ask(conns[target["node"]], 63, 1, _heartbeat(b, epochs[b]),
                                           hb_resp.BrokerHeartbeatResponse, 1)
                        except (OSError, ClientError, TimeoutError):
                            continue  # the target was killed: the test points the brokers elsewhere
                        if r.error_code == ErrorCode.none:
                            fenced[b] = r.is_fenced
                    await asyncio.sleep(HEARTBEAT_EVERY_S)

            heartbeats = asyncio.get_running_loop().create_task(beat_forever())
            await _until(lambda: asyncio.sleep(0, not any(fenced.values())), 10, "all brokers unfenced")

            # 50 topics x 3 partitions x RF 3, 50 pipelined CreateTopics requests
            names = [f"orders-{t:02d}" for t in range(50)]
            answers = await asyncio.gather(*(
                _ask(conns[active], 19, 7, _topics((n, 3, 3)), ct_resp.CreateTopicsResponse, 30) for n in names))
            for n, a in zip(names, answers, strict=True):
                (res,) = a.topics
                assert (res.name, res.error_code, res.num_partitions, res.replication_factor) == \
                    (n, ErrorCode.none, 3, 3), res
                assert res.topic_id is not None
                created[n] = res.topic_id
            assert len(set(created.values())) == 50

            # errors: an existing topic, RF above the live brokers, no partitions, a bad name, a standby
            errs = await _ask(conns[active], 19, 7, _topics(("orders-00", 3, 3), ("wide", 3, 4), ("empty", 0, 1),
                                                            ("bad/name", 1, 1)), ct_resp.CreateTopicsResponse)
            assert [t.error_code for t in errs.topics] == [ErrorCode.topic_already_exists,
                                                           ErrorCode.invalid_replication_factor,
                                                           ErrorCode.invalid_partitions,
                                                           ErrorCode.invalid_topic_exception]
            assert all(t.topic_id is None for t in errs.topics)
            r = await _ask(conns[standby], 19, 7, _topics(("on-standby", 1, 1)), ct_resp.CreateTopicsResponse)
            assert r.topics[0].error_code == ErrorCode.not_controller

            # every controller's own image: 50 topics, 150 partitions, leaders among live brokers
            async def image_of(i):
                return await _ask(conns[i], 3, 12, md_req.MetadataRequest(topics=None,
                                                                           include_topic_authorized_operations=False),
                                  EpochMetadataResponse)

            for i in conns:
                async def converged(i=i):
                    md = await image_of(i)
                    return md if sum(len(t.partitions) for t in md.topics) == 150 else None

                md = await _until(converged, 10, f"node {i}'s image holding 150 partitions")
                assert {t.name: t.topic_id for t in md.topics} == created
                live = {b.node_id for b in md.brokers}
                assert live == set(RACKS)
                assert md.controller_id == active
                leaders = Counter()
                for t in md.topics:
                    assert sorted(p.partition_index for p in t.partitions) == [0, 1, 2]
                    for p in t.partitions:
                        assert p.leader_id in live and p.leader_id == p.replica_nodes[0]
                        assert len(set(p.replica_nodes)) == 3 and set(p.isr_nodes) == set(p.replica_nodes)
                        leaders[p.leader_id] += 1
                assert min(leaders.values()) >= 30  # round-robin spreads the 150 leaders

            # a broker that stops heartbeating is fenced by the active controller's session check
            beating.discard(103)

            async def fenced_everywhere():
                live = [{b.node_id for b in (await image_of(i)).brokers} for i in conns]
                return all(s == {101, 102} for s in live)

            await _until(fenced_everywhere, SESSION_TIMEOUT_MS / 1000 + 5, "broker 103 fenced on every node")
            wide = await _ask(conns[active], 19, 7, _topics(("three-wide", 1, 3)), ct_resp.CreateTopicsResponse)
            assert wide.topics[0].error_code == ErrorCode.invalid_replication_factor  # only 2 live brokers now

            # failover: kill the active controller; a standby takes over with a complete image
            cluster.kill(active)
            survivors = [i for i in conns if i != active]

            async def new_active():
                for i in survivors:
                    try:
                        r = await _ask(conns[i], 19, 7, _topics(("orders-00", 3, 3)), ct_resp.CreateTopicsResponse, 2)
                    except (OSError, ClientError, TimeoutError):
                        continue
                    if r.topics[0].error_code == ErrorCode.topic_already_exists:
                        return i
                    assert r.topics[0].error_code == ErrorCode.not_controller, r
                return None

            target["node"] = await _until(new_active, 15, "a new active controller")
            after = await _ask(conns[target["node"]], 19, 7, _topics(("after-failover", 2, 2)),
                               ct_resp.CreateTopicsResponse)
            assert after.topics[0].error_code == ErrorCode.none, after
            for i in survivors:
                async def has_new_topic(i=i):
                    md = await image_of(i)
                    return sum(len(t.partitions) for t in md.topics) == 152

                await _until(has_new_topic, 10, f"node {i}'s image holding the topic created after failover")
            killed.append(active)
        finally:
            if heartbeats is not None:
                heartbeats.cancel()
            for conn in conns.values():
                await conn.close()

    asyncio.run(scenario())
    cluster.stop_all()
    for i in cluster.socks:
        out = _cli("image", "show", "--json", cluster.dir_of(i))
        assert out.returncode == 0, out.stderr
        facts = json.loads(out.stdout)
        expected = (50, 150) if i in killed else (51, 152)
        assert (facts["topics"], facts["partitions"], facts["brokers"], facts["fencedBrokers"]) == (*expected, 3, 1)
        assert facts["metadataVersion"] is not None and facts["skippedRecords"] == 0


def test_unformatted_directory_is_refused_with_one_line(tmp_path):
    """A node refuses a directory without meta.properties (one stderr line, exit 1) and a
    directory formatted for another node id."""
    d = tmp_path / "n1"
    d.mkdir()
    out = _cli("node", "run", "--node-id", "1", "--controller-quorum-voters", "1@127.0.0.1:1", "--dir", str(d))
    assert out.returncode == 1 and out.stdout == ""
    assert len(out.stderr.splitlines()) == 1 and "not formatted" in out.stderr, out.stderr
    assert not os.path.exists(d / "__cluster_metadata-0")  # nothing written
    assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "2", "--dir", str(d), "--force"]) == 0
    out = _cli("node", "run", "--node-id", "1", "--controller-quorum-voters", "1@127.0.0.1:1", "--dir", str(d))
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1 and "node.id 2" in out.stderr, out.stderr


def test_replica_placement_spreads_racks_and_leaders():
    """With 6 brokers on 3 racks, every RF-3 partition spans 3 racks and leaders rotate evenly."""
    brokers = [BrokerRegistration(b, 0, uuid.uuid4(), (), (), f"r{b % 3}", False, False) for b in range(6)]
    order = rack_interleaved(brokers)
    assert sorted(order) == list(range(6))
    assignment = place_replicas(order, 60, 3, start=4)
    rack = {b.broker_id: b.rack for b in brokers}
    for replicas in assignment:
        assert len({rack[r] for r in replicas}) == 3
    assert set(Counter(r[0] for r in assignment).values()) == {10}
    with pytest.raises(ValueError):
        place_replicas(order, 1, 7, start=0)
