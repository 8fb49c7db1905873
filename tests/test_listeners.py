"""Listeners as Kafka splits them (engine/node/listeners.py, engine/node/node.py).

The plan from Kafka's settings, as pure rules: which sockets a role opens, what each advertises
(advertised.listeners; a wildcard host becomes this machine's name), the security protocols
(PLAINTEXT/SSL; SASL refused), inter.broker.listener.name first. The APIs each kind of listener
lists. Then one combined node process with three listeners (a controller one, a wildcard broker
one, a broker one advertised under another name): ApiVersions on each lists exactly what that
listener serves, Metadata answers each broker at the endpoint of the listener asked (the
inter-broker one on the controller listener), and a Raft RPC on a broker listener closes the
connection as Kafka's does.
"""

from __future__ import annotations

import asyncio
import datetime
import signal
import socket
import subprocess
import sys

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req
from kio.static.primitive import i16, i32

from kraftlog.engine.cli import main as cli
from kraftlog.engine.node import listeners as L
from kraftlog.engine.node import tls
from kraftlog.engine.node.node import supported_api_versions
from kraftlog.engine.protocol.connection import ClientConnection, ClientError
from kraftlog.engine.protocol.metadata_response import EpochMetadataResponse
from kraftlog.raft import wire
from kraftlog.raft.messages import Envelope, VoteRequest
from tests.test_node_controller import CLUSTER_ID
from tests.test_transport_hardening import pki  # noqa: F401 (the fixture: ca -> node1, node2, client)

KAFKA_COMBINED = "PLAINTEXT://:9092,CONTROLLER://:9093"
DEADLINE_S = 60  # a loaded 2-core machine: the bound of a polled condition, never a sleep


# ---- the plan -----------------------------------------------------------------------------------------


def test_kafkas_combined_listeners_open_a_controller_and_a_broker_socket():
    plan = L.plan(listeners=KAFKA_COMBINED, roles={"broker", "controller"}, controller_names="CONTROLLER")
    (controller, broker) = plan.opened
    assert (controller.name, controller.kind, controller.bind_address) == ("CONTROLLER", L.KIND_CONTROLLER,
                                                                           "0.0.0.0:9093")
    assert (broker.name, broker.kind, broker.port) == ("PLAINTEXT", L.KIND_BROKER, 9092)
    # an empty host binds every interface and advertises this machine's name, never 0.0.0.0
    assert broker.advertised(9092) == (socket.getfqdn(), 9092)
    assert not plan.controller_tls and not any(li.tls for li in plan.opened)


@pytest.mark.parametrize("roles, names", [({"controller"}, ["CONTROLLER"]), ({"broker"}, ["PLAINTEXT"])])
def test_a_controller_opens_its_controller_listener_and_a_broker_its_others(roles, names):
    plan = L.plan(listeners=KAFKA_COMBINED, roles=roles, controller_names="CONTROLLER")
    assert [li.name for li in plan.opened] == names


def test_advertised_listeners_and_inter_broker_listener_name():
    plan = L.plan(listeners="A://127.0.0.1:9092,B://:0,CONTROLLER://127.0.0.1:9093", roles={"broker"},
                  controller_names="CONTROLLER", advertised="B://b.example:9300",
                  protocol_map="A:PLAINTEXT,B:PLAINTEXT,CONTROLLER:PLAINTEXT", inter_broker="B")
    assert [li.name for li in plan.opened] == ["B", "A"]  # the inter-broker listener first: registered first
    b, a = plan.opened
    assert b.advertised(40000) == ("b.example", 9300)
    assert a.advertised(9092) == ("127.0.0.1", 9092)
    port_zero = L.plan(listeners="PLAINTEXT://127.0.0.1:0", roles={"broker"})
    assert port_zero.opened[0].advertised(41234) == ("127.0.0.1", 41234)  # port 0 advertises the bound port


@pytest.mark.parametrize("settings, needles", [
    ({"protocol_map": "CONTROLLER:PLAINTEXT,PLAINTEXT:SASL_PLAINTEXT"}, ("PLAINTEXT is SASL_PLAINTEXT", "no SASL")),
    ({"protocol_map": "CONTROLLER:PLAINTEXT,PLAINTEXT:SSL"}, ("PLAINTEXT is SSL", "--tls-cert")),
    ({"protocol_map": "CONTROLLER:PLAINTEXT,PLAINTEXT:KERBEROS"}, ("unknown security protocol", "KERBEROS")),
    ({"protocol_map": "CONTROLLER:PLAINTEXT"}, ("PLAINTEXT has no security protocol",)),
    ({"advertised": "PLAINTEXT://0.0.0.0:9092"}, ("0.0.0.0", "reaches nobody")),
    ({"advertised": "OTHER://h:1"}, ("OTHER", "not in listeners")),
    ({"inter_broker": "CONTROLLER"}, ("inter.broker.listener.name=CONTROLLER", "not a broker listener")),
    ({"listeners": "CONTROLLER://:9093"}, ("no broker listener",)),
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, ("PLAINTEXT appears twice",)),
    ({"listeners": "PLAINTEXT//:9092"}, ("is not NAME://HOST:PORT",)),
    ({"tls_given": True}, ("--tls-cert", "no listener is SSL")),
])
def test_settings_that_cannot_work_are_one_line_naming_them(settings, needles):
    kwargs = {"listeners": KAFKA_COMBINED, "roles": {"broker", "controller"}, "controller_names": "CONTROLLER",
              **settings}
    with pytest.raises(L.ListenerConfigError) as caught:
        L.plan(**kwargs)
    assert all(n in str(caught.value) for n in needles), caught.value
    assert "\n" not in str(caught.value)


def test_ssl_listeners_take_the_tls_flags_and_controller_links_follow_the_controller_listener():
    plan = L.plan(listeners="PLAINTEXT://:9092,CONTROLLER://:9093", roles={"broker"}, controller_names="CONTROLLER",
                  protocol_map="PLAINTEXT:PLAINTEXT,CONTROLLER:SSL", tls_given=True)
    assert plan.controller_tls and not plan.opened[0].tls  # plain for clients, TLS to the controllers
    plan = L.plan(listeners="SSL://:9092,CONTROLLER://:9093", roles={"broker", "controller"},
                  controller_names="CONTROLLER", tls_given=True)
    assert [li.tls for li in plan.opened] == [False, True] and not plan.controller_tls  # Kafka's default map


# ---- what each listener lists ---------------------------------------------------------------------------

CLIENT_APIS = {18, 3, 23, 19, 20, 37, 43, 57, 55}  # ApiVersions, Metadata, OffsetsForLeaderEpoch, forwarded, DQ
RAFT_AND_CONTROLLER_ONLY = {1, 52, 53, 54, 59, 56, 62, 63, 70}


def test_each_kind_of_listener_lists_what_it_serves():
    broker = {k for k, _, _ in supported_api_versions(L.KIND_BROKER)}
    controller = {k for k, _, _ in supported_api_versions(L.KIND_CONTROLLER)}
    both = {k for k, _, _ in supported_api_versions(L.KIND_BOTH)}
    assert broker == CLIENT_APIS
    assert controller == CLIENT_APIS | RAFT_AND_CONTROLLER_ONLY
    assert both == controller
    assert wire.API_PRODUCE not in both  # only the active controller writes the metadata log


# ---- one node with three listeners ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _ask(conn: ClientConnection, key: int, version: int, body, response_type, *, header_v0: bool = False):
    return await asyncio.wait_for(conn.request(key, version, body, response_type, header_v0=header_v0), 30)


async def _api_keys(port: int, ssl_context=None) -> set[int]:
    conn = ClientConnection("127.0.0.1", port, ssl_context=ssl_context)
    await conn.open()
    try:
        answer = await _ask(conn, 18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="0"),
                            ApiVersionsResponse, header_v0=True)
        return {int(k.api_key) for k in answer.api_keys}
    finally:
        await conn.close()


async def _brokers_seen_at(port: int) -> list[tuple[int, str, int]]:
    conn = ClientConnection("127.0.0.1", port)
    await conn.open()
    try:
        req = md_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False)
        md = await _ask(conn, 3, 12, req, EpochMetadataResponse)
        return [(int(b.node_id), b.host, int(b.port)) for b in md.brokers]
    finally:
        await conn.close()


async def _until(predicate, what: str):
    loop = asyncio.get_running_loop()
    end, last = loop.time() + DEADLINE_S, None
    while loop.time() < end:
        try:
            last = await predicate()
            if last:
                return last
        except (OSError, ClientError, TimeoutError) as exc:
            last = exc
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} not reached within {DEADLINE_S} s (last: {last!r})")


@pytest.mark.slow
def test_a_combined_node_serves_each_listener_its_own_apis_and_endpoints(tmp_path):
    plain, external, controller = _free_port(), _free_port(), _free_port()
    config = _formatted(tmp_path,
        f"process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{controller}\n"
        "log.dirs={dir}\ncontroller.listener.names=CONTROLLER\n"
        f"listeners=PLAINTEXT://:{plain},EXTERNAL://127.0.0.1:{external},CONTROLLER://127.0.0.1:{controller}\n"
        f"advertised.listeners=EXTERNAL://external.kraftlog.invalid:{external}\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT\n"
        "inter.broker.listener.name=EXTERNAL\ncontroller.quorum.election.timeout.ms=400\n"
        "broker.heartbeat.interval.ms=200\n")

    async def check():
        for port in (plain, external):
            assert await _api_keys(port) == CLIENT_APIS
        assert await _api_keys(controller) == CLIENT_APIS | RAFT_AND_CONTROLLER_ONLY

        # each broker at the endpoint of the listener asked; the inter-broker one elsewhere
        fqdn = socket.getfqdn()
        await _until(lambda: _brokers_seen_at(plain), "the node's broker registered")
        assert await _brokers_seen_at(plain) == [(1, fqdn, plain)]
        assert await _brokers_seen_at(external) == [(1, "external.kraftlog.invalid", external)]
        assert await _brokers_seen_at(controller) == [(1, "external.kraftlog.invalid", external)]

        # the clients' controller APIs work on a broker listener (the local controller answers)
        conn = ClientConnection("127.0.0.1", plain)
        await conn.open()
        try:
            req = ct_req.CreateTopicsRequest(timeout=datetime.timedelta(seconds=10), validate_only=False, topics=(
                ct_req.CreatableTopic(name="t", num_partitions=i32(1), replication_factor=i16(1), assignments=(),
                                      configs=()),))
            answer = await _ask(conn, 19, 7, req, ct_resp.CreateTopicsResponse)
            assert answer.topics[0].error_code in (ErrorCode.none, ErrorCode.topic_already_exists)
        finally:
            await conn.close()

        # a Raft RPC on a broker listener: the connection is closed (Kafka: an API its listener does not enable)
        reader, writer = await asyncio.open_connection("127.0.0.1", plain)
        try:
            writer.write(wire.encode_request_envelope(Envelope(2, 1, 7, _vote()), "t"))
            assert await asyncio.wait_for(reader.read(), 30) == b""
        finally:
            writer.close()

    log = _run_node(tmp_path, config, controller, check)
    assert "API 52 is not served on the broker listener PLAINTEXT" in log


@pytest.mark.slow
def test_a_plaintext_broker_listener_beside_an_ssl_controller_listener(tmp_path, pki):  # noqa: F811
    """listener.security.protocol.map per listener: clients in plain text on PLAINTEXT, the quorum
    (and the node's own broker registering with its controller) over mutual TLS on CONTROLLER."""
    plain, controller = _free_port(), _free_port()
    config = _formatted(tmp_path,
        f"process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{controller}\n"
        "log.dirs={dir}\ncontroller.listener.names=CONTROLLER\n"
        f"listeners=PLAINTEXT://127.0.0.1:{plain},CONTROLLER://127.0.0.1:{controller}\n"
        "listener.security.protocol.map=CONTROLLER:SSL,PLAINTEXT:PLAINTEXT\n"
        "controller.quorum.election.timeout.ms=400\nbroker.heartbeat.interval.ms=200\n")
    client_tls = tls.make_client_context(tls.TlsFiles(str(pki / "client.pem"), str(pki / "client.key"),
                                                      str(pki / "ca.pem")))

    async def check():
        assert await _api_keys(plain) == CLIENT_APIS
        # registered over TLS with the controller listener, then listed at its plain endpoint
        assert await _until(lambda: _brokers_seen_at(plain), "the broker registered over TLS") == \
            [(1, "127.0.0.1", plain)]
        assert await _api_keys(controller, ssl_context=client_tls) == CLIENT_APIS | RAFT_AND_CONTROLLER_ONLY
        with pytest.raises((OSError, ClientError, TimeoutError)):
            await _api_keys(controller)  # plain text on the SSL listener

    _run_node(tmp_path, config, controller, check,
              extra=["--tls-cert", str(pki / "node1.pem"), "--tls-key", str(pki / "node1.key"),
                     "--tls-ca", str(pki / "ca.pem")])


def _formatted(tmp_path, properties: str):
    """Node 1's directory formatted; the properties file ({dir}: that directory) written."""
    d = str(tmp_path / "n1")
    assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "1", "--dir", d]) == 0
    config = tmp_path / "server.properties"
    config.write_text(properties.replace("{dir}", d))
    return config


def _run_node(tmp_path, config, ready_port: int, check, extra: tuple | list = ()) -> str:
    """`kraftlog node run --config CONFIG` until READY on ``ready_port``, ``check()``, SIGTERM:
    exit 0; returns its log."""
    err_path = tmp_path / "node.err"
    with open(err_path, "w") as err:  # a file, not a pipe: a chatty node never blocks on a full pipe
        proc = subprocess.Popen([sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--config",
                                 str(config), *extra], stdout=subprocess.PIPE, stderr=err)
    try:
        line = proc.stdout.readline()
        assert line.startswith(b"READY node=1 port=%d" % ready_port), (line, err_path.read_text()[-3000:])
        asyncio.run(check())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    log = err_path.read_text()
    assert proc.returncode == 0, log[-3000:]
    return log


def _vote() -> VoteRequest:
    return VoteRequest(cluster_id=CLUSTER_ID, voter_id=1, replica_epoch=1, replica_id=2, last_offset_epoch=0,
                       last_offset=0)
