"""A producer and a consumer of every client the suite runs (confluent-kafka, kafka-python, aiokafka),
pointed at a broker listener, learn at once that kraftlog serves no Produce, Fetch, ListOffsets
or FindCoordinator there: Kafka's way, those APIs are simply not in that listener's ApiVersions
answer (engine/node/node.py, LISTENER_RAFT_APIS), so each client refuses before sending anything.

Two targets: a broker-only node beside a controller (split roles), and a combined node started
from Kafka's own server.properties (its PLAINTEXT listener; CONTROLLER holds the quorum).

What each client does, asserted here (every client timeout is set far above FAST_S, so a client
that waited one out would fail the bound):
    kafka-python  producer: send() fails with IncompatibleBrokerVersion naming ProduceRequest
                  (InitProducerIdRequest when idempotent, its default); consumer: poll() raises
                  naming FindCoordinatorRequest (a group) or ListOffsetsRequest (assigned, no
                  position); assigned at an explicit offset, poll() returns nothing and logs an
                  ERROR naming FetchRequest on every attempt
    aiokafka      producer: send fails with IncompatibleBrokerVersion naming ProduceRequest;
                  consumer: a group names FindCoordinatorRequest; assigned at an explicit
                  offset, getone() waits while the fetcher logs an ERROR naming FetchRequest
    confluent-kafka (librdkafka) cannot fail fast by itself: the producer logs "No viable
                  ProduceRequest ApiVersions ... supported by broker" at once (its logger, level
                  3), but the message fails only at message.timeout.ms (_MSG_TIMED_OUT); a group
                  consumer waits for a coordinator forever without an error (debug: "no broker
                  available for coordinator query"); an assigned consumer retries Fetch every
                  500 ms (debug: "request not supported by broker")
Every wait is a condition polled against a deadline, never a sleep.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import threading
import time

import aiokafka
import kafka
import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from kraftlog.engine.cli import main as cli
from tests.test_confluent_kafka import BROKER, Nodes, _until
from tests.test_node_controller import CLUSTER_ID

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.slow

FAST_S = 20  # "at once" on a loaded 2-core machine; every client timeout below is far longer
CLIENT_TIMEOUT_MS = 120_000
TOPIC = "orders"


# ---- the targets ------------------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _CombinedFromKafkaConfig:
    """One combined node started from Kafka's KRaft server.properties (two listeners)."""

    def __init__(self, directory):
        self.broker_port, controller_port = _free_port(), _free_port()
        d = str(directory / "n1")
        assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "1", "--dir", d]) == 0
        config = directory / "server.properties"
        config.write_text(
            f"process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{controller_port}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{self.broker_port},CONTROLLER://127.0.0.1:{controller_port}\n"
            f"controller.listener.names=CONTROLLER\nlog.dirs={d}\nbroker.heartbeat.interval.ms=200\n")
        self.err = open(directory / "node.err", "w")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen([sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--config",
                                      str(config)], stdout=subprocess.PIPE, stderr=self.err)
        line = self.proc.stdout.readline()
        if not line.startswith(b"READY"):
            self.close()
            raise RuntimeError(f"the node did not start: {line!r}")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


class _Split:
    """A controller process and a broker-only process (flags, one socket each)."""

    def __init__(self, directory):
        self.nodes = Nodes(str(directory), "controller")
        try:
            self.nodes.format()
            self.nodes.start_all()
        except BaseException:
            self.nodes.close()
            raise

    @property
    def bootstrap(self) -> str:
        host, port = self.nodes.addresses[BROKER]
        return f"{host}:{port}"

    def close(self) -> None:
        self.nodes.close()


def _create_topic(bootstrap: str) -> None:
    def created():
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        try:
            if TOPIC not in admin.list_topics():
                admin.create_topics([NewTopic(TOPIC, 2, 1)])
            return TOPIC in admin.list_topics()
        finally:
            admin.close()
    _until(created, f"topic {TOPIC} created through {bootstrap}")


@pytest.fixture(scope="module", params=["broker", "combined"])
def bootstrap(request, tmp_path_factory):
    directory = tmp_path_factory.mktemp(request.param)
    target = _Split(directory) if request.param == "broker" else _CombinedFromKafkaConfig(directory)
    try:
        _create_topic(target.bootstrap)
        yield target.bootstrap
    finally:
        target.close()


# ---- helpers ------------------------------------------------------------------------------------------------


class _Lines(logging.Handler):
    """Collects the messages of a logger (clients log from their own threads)."""

    def __init__(self, *names: str):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._lock_lines = threading.Lock()
        self.loggers = [logging.getLogger(n) for n in names]
        for lg in self.loggers:
            lg.addHandler(self)
            lg.setLevel(logging.DEBUG)

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock_lines:
            self.lines.append(f"{logging.getLevelName(record.levelno)} {record.getMessage()}")

    def matching(self, needle: str) -> list[str]:
        with self._lock_lines:
            return [line for line in self.lines if needle in line]

    def close(self) -> None:
        for lg in self.loggers:
            lg.removeHandler(self)
        super().close()


def _fails_fast(call, exc_type: type, needle: str) -> None:
    """``call()`` raises ``exc_type`` whose text names ``needle``, within FAST_S."""
    started = time.monotonic()
    with pytest.raises(exc_type) as caught:
        call()
    took = time.monotonic() - started
    assert needle in str(caught.value), caught.value
    assert took < FAST_S, f"{needle}: refused after {took:.1f} s"


# ---- kafka-python -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("idempotent, api", [(False, "ProduceRequest"), (True, "InitProducerIdRequest")])
def test_kafka_python_producer_is_refused_at_once(bootstrap, idempotent, api):
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=idempotent,
                                   request_timeout_ms=CLIENT_TIMEOUT_MS, max_block_ms=CLIENT_TIMEOUT_MS)
    try:
        _fails_fast(lambda: producer.send(TOPIC, b"v").get(timeout=CLIENT_TIMEOUT_MS / 1000),
                    kafka.errors.IncompatibleBrokerVersion, api)
    finally:
        producer.close(timeout=0)


def test_kafka_python_consumers_are_refused_at_once(bootstrap):
    group = kafka.KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="g", request_timeout_ms=CLIENT_TIMEOUT_MS)
    try:
        _fails_fast(lambda: group.poll(timeout_ms=CLIENT_TIMEOUT_MS), kafka.errors.IncompatibleBrokerVersion,
                    "FindCoordinatorRequest")
    finally:
        group.close()
    tp = kafka.TopicPartition(TOPIC, 0)
    assigned = kafka.KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS)
    try:
        assigned.assign([tp])
        _fails_fast(lambda: assigned.poll(timeout_ms=CLIENT_TIMEOUT_MS), kafka.errors.IncompatibleBrokerVersion,
                    "ListOffsetsRequest")
    finally:
        assigned.close()


def test_kafka_python_consumer_at_an_offset_logs_the_refused_fetch(bootstrap):
    lines = _Lines("kafka.consumer.fetcher")
    tp = kafka.TopicPartition(TOPIC, 0)
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        started = time.monotonic()
        _until(lambda: consumer.poll(timeout_ms=500) == {} and lines.matching("'FetchRequest'"),
               "kafka-python logging the unsupported Fetch", FAST_S)
        assert time.monotonic() - started < FAST_S
        assert all(line.startswith("ERROR") for line in lines.matching("'FetchRequest'"))
    finally:
        consumer.close()
        lines.close()


# ---- aiokafka -----------------------------------------------------------------------------------------------


def test_aiokafka_producer_and_group_consumer_are_refused_at_once(bootstrap):
    async def produce():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS)
        await producer.start()
        try:
            await producer.send_and_wait(TOPIC, b"v")
        finally:
            await producer.stop()

    async def consume():
        consumer = aiokafka.AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="g",
                                             request_timeout_ms=CLIENT_TIMEOUT_MS)
        await consumer.start()
        try:
            await consumer.getone()
        finally:
            await consumer.stop()

    _fails_fast(lambda: asyncio.run(produce()), aiokafka.errors.IncompatibleBrokerVersion, "ProduceRequest")
    _fails_fast(lambda: asyncio.run(consume()), aiokafka.errors.IncompatibleBrokerVersion, "FindCoordinatorRequest")


def test_aiokafka_consumer_at_an_offset_logs_the_refused_fetch(bootstrap):
    lines = _Lines("aiokafka.consumer.fetcher")

    async def consume():
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=CLIENT_TIMEOUT_MS)
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(TOPIC, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            getone = asyncio.ensure_future(consumer.getone())
            loop = asyncio.get_running_loop()
            end = loop.time() + FAST_S
            while not lines.matching("FetchRequest cannot be used") and loop.time() < end:
                await asyncio.wait([getone], timeout=0.1)
            assert not getone.done(), getone  # getone() itself waits: only the log says why
            getone.cancel()
        finally:
            try:
                await consumer.stop()
            except asyncio.CancelledError:  # aiokafka 0.14: stop() re-raises the cancelled retry backoff
                await consumer._client.close()  # of a failed fetch (Fetcher.close awaits it unguarded)

    try:
        asyncio.run(consume())
        refused = lines.matching("FetchRequest cannot be used")
        assert refused and all(line.startswith("ERROR") for line in refused), lines.lines[-5:]
    finally:
        lines.close()


# ---- confluent-kafka (librdkafka) -------------------------------------------------------------------------


def _served(producer) -> bool:
    """Serve the producer's queues (delivery reports, log lines reach Python only in poll)."""
    producer.poll(0.1)
    return True


def _rdkafka_logger(name: str) -> tuple[logging.Logger, _Lines]:
    lines = _Lines(name)
    logger = logging.getLogger(name)
    logger.propagate = False
    return logger, lines


def test_confluent_producer_logs_the_missing_produce_at_once_and_fails_at_message_timeout(bootstrap):
    logger, lines = _rdkafka_logger("test.rdkafka.producer")
    reports = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 3000,
                                         "logger": logger})
    try:
        started = time.monotonic()
        producer.produce(TOPIC, b"v", on_delivery=lambda err, msg: reports.append(err))
        _until(lambda: _served(producer) and lines.matching("No viable ProduceRequest ApiVersions"),
               "librdkafka logging the unsupported Produce", FAST_S)
        assert time.monotonic() - started < FAST_S
        # the message itself fails only when message.timeout.ms (3 s here) runs out
        _until(lambda: _served(producer) and reports, "the delivery report")
        assert reports[0].code() == confluent_kafka.KafkaError._MSG_TIMED_OUT, reports
    finally:
        producer.purge()
        producer.flush(0)
        lines.close()


def test_confluent_consumers_wait_without_an_error(bootstrap):
    """librdkafka's consumers raise nothing: a group waits for a coordinator (its debug log says
    so), an assigned consumer never sends a Fetch (its statistics count none) and gets nothing."""
    logger, lines = _rdkafka_logger("test.rdkafka.consumer")
    errors, stats = [], []
    group = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "logger": logger,
                                      "debug": "cgrp", "error_cb": errors.append})
    # no "fetch" debug here: the assigned consumer retries its refused Fetch in a busy loop
    assigned = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "g2", "error_cb": errors.append,
                                         "statistics.interval.ms": 200, "stats_cb": stats.append})
    try:
        group.subscribe([TOPIC])
        assigned.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        messages = []

        def both_waiting():
            for consumer in (group, assigned):
                msg = consumer.poll(0.1)
                if msg is not None:
                    messages.append(msg)
            return len(lines.matching("no broker available for coordinator query")) >= 2 and _leader_up(stats)

        leader = _until(both_waiting, "librdkafka's consumers waiting", FAST_S)
        assert leader["req"]["Fetch"] == 0 and leader["req"]["ApiVersion"] >= 1, leader["req"]
        assert messages == [] and errors == []
    finally:
        group.close()
        assigned.close()
        lines.close()


def _leader_up(stats: list[str]) -> dict | None:
    """The partition leader's statistics (librdkafka's JSON) once it has been UP for two reports."""
    import json

    ups = [b for report in stats[-2:] for name, b in json.loads(report)["brokers"].items()
           if b["state"] == "UP" and not name.startswith("GroupCoordinator") and b["nodeid"] >= 0]
    return ups[-1] if len(ups) == 2 else None
