"""confluent-kafka (librdkafka) against real node processes: AdminClient.list_topics() lists every
topic and one topic, against a combined node (broker and controller in one process) and against a
split cluster (a controller process and a broker process), bootstrapped at either.

librdkafka writes a 4-byte placeholder after Metadata v9+'s null "all topics" array; Kafka ignores
bytes after a request body, and so must the node (this failed with "Local: Broker transport
failure" while the node closed the connection over "4 bytes after the body of API 3").

Topics are created with kafka-python's admin client; what confluent-kafka lists is compared with
what was created. Every wait is a condition polled against a generous deadline.
"""

from __future__ import annotations

import sys
import time

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from kraftlog.engine.cli import main as cli
from kraftlog.engine.node.localcluster import LocalCluster
from tests.test_node_controller import CLUSTER_ID

confluent_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.slow

BROKER = 101
DEADLINE_S = 120  # a loaded 2-core machine: generous, and only ever the bound of a polled condition
TOPICS = {"orders": 3, "audit": 1}


class Nodes(LocalCluster):
    """One voter (node 1, ``roles``), plus a broker process (101) when ``roles`` is "controller"."""

    def __init__(self, directory: str, roles: str):
        super().__init__(directory, 1, observers=(BROKER,) if roles == "controller" else ())
        self.roles = roles

    def command(self, i: int, listen_fd: int) -> list[str]:
        roles = "broker" if i == BROKER else self.roles
        return [sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd),
                "--process-roles", roles]

    def format(self) -> None:
        for i in self.socks:
            assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", str(i),
                             "--dir", self.dir_of(i)]) == 0


def _until(predicate, what: str, deadline_s: float = DEADLINE_S):
    """Poll ``predicate`` until it returns something true (errors count as not yet), or fail at
    the deadline naming ``what`` and the last value or error."""
    end, last = time.monotonic() + deadline_s, None
    while time.monotonic() < end:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - a node still starting: try again
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached within {deadline_s} s (last: {last!r})")


def _bootstrap(nodes: Nodes, i: int) -> str:
    host, port = nodes.addresses[i]
    return f"{host}:{port}"


def _create_topics(nodes: Nodes, broker: int) -> None:
    def created():
        admin = KafkaAdminClient(bootstrap_servers=_bootstrap(nodes, broker), request_timeout_ms=10_000)
        try:
            if not set(TOPICS) <= set(admin.list_topics()):
                admin.create_topics([NewTopic(name, n, 1) for name, n in TOPICS.items()])
            return set(TOPICS) <= set(admin.list_topics())
        finally:
            admin.close()
    _until(created, "topics created through kafka-python")


@pytest.fixture(params=["broker,controller", "controller"], ids=["combined", "split"])
def nodes(request, tmp_path):
    cluster = Nodes(str(tmp_path), request.param)
    try:
        cluster.format()
        cluster.start_all()
        _create_topics(cluster, BROKER if BROKER in cluster.socks else 1)
        yield cluster
    finally:
        cluster.close()


def _listed(admin, **kwargs) -> dict[str, int]:
    """{topic: partition count} from confluent-kafka's list_topics (Metadata v9+ from librdkafka)."""
    metadata = admin.list_topics(timeout=30, **kwargs)
    return {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}


def test_list_topics_all_and_one(nodes):
    """From every node of the cluster: all topics, then one topic, each with its partition count;
    the node logs no closed connection."""
    for i in nodes.socks:
        admin = confluent_admin.AdminClient({"bootstrap.servers": _bootstrap(nodes, i)})
        listed = _until(lambda admin=admin: _listed(admin), f"list_topics() from node {i}")
        assert {name: listed.get(name) for name in TOPICS} == TOPICS, listed
        metadata = admin.list_topics(topic="orders", timeout=30)
        assert set(metadata.topics) == {"orders"} and metadata.topics["orders"].error is None
        assert sorted(metadata.topics["orders"].partitions) == [0, 1, 2]
        assert metadata.cluster_id == CLUSTER_ID
        assert "closing connection" not in nodes.stderr_of(i), nodes.stderr_of(i)[-2000:]
