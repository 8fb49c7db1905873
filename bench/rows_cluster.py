"""Benchmark rows for node processes on loopback (issue 7): a broker restart on a 1M-partition
image (issue 17: also with a production tail after its snapshot), and CreateTopics through a real
3-controller quorum.

    broker.restart_1m_s
        A broker (``kraftlog node run --process-roles broker``) whose directory holds the reference
        workload's image (engine/image/workload.py, 10 partitions per topic, RF 3) as an LMDB
        snapshot at end offset N, its log starting at N; the one controller of the quorum (a real
        process) holds the same snapshot and leads. Timed: Popen of the broker -> its READY line ->
        Metadata v12 for one named topic, asked every POLL_INTERVAL_MS, until the answer is right
        (topic id, 10 partitions, leaders, leader epochs, replicas and ISR as the workload built
        them). Between runs the broker stops with SIGTERM (controlled shutdown), so each run is a
        clean restart that loads its own snapshot and replays the few records after it.
        1M partitions with --full, 100k with --quick ("scale" says so).
        Peer: there is no Kafka here (the issue quotes Kafka's cold JVM decode-and-build at ~1.5 s),
        so the peer is the same broker restarted the same way on a one-topic image (10
        partitions): process start, imports and listening alone. The ratio is the image's share.
        Extra fields say where the time goes: the interpreter and import time (the node command's
        imports in a fresh ``python``), the time to READY, and the node's own "loaded snapshot ...
        in N ms" log line.

    broker.restart_1m_tail_s
        The same restart when the broker's log (and the controller's) also holds a production tail
        after the snapshot (engine/image/production.py: TAIL_BYTES of a controller's events, its
        batches and epochs, appended as the controller wrote them): what a broker restarted between
        two snapshots replays. Timed the same way, until the answer for one base topic the tail
        left in place equals the controller's answer and its image offset (tag 10001) has reached
        the end of the tail. Peer: the restart with no tail above, same scale, interleaved in the
        same run; the ratio is the tail's cost.

    controller.create_topics_per_s
        Three controller processes and three broker processes (real, registered and unfenced),
        CreateTopics v7 to the active controller: REQUEST_TOPICS topics of 10 partitions, RF 3, per
        request, WINDOW requests in flight on one connection; topics/s over a run, median of runs.
        Peer: the same records (a TopicRecord and 10 PartitionRecords per topic, built as the
        controller builds them) committed with Produce (one batch per request, same window) by a
        bare three-voter raftnode quorum with the same Raft settings, started beside (metadata
        nodes refuse Produce: only their controller writes that log): the ratio (ours / peer,
        below 1) is the controller's overhead over a bare Raft commit. Met: every topic created is on every broker's answer.

Ports are ephemeral (engine/node/localcluster.py hands each node its listening socket); every
process is killed and every directory removed when a row ends, whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass

import numpy as np

from kraftlog.bench.timing import row, spread
from kraftlog.engine.image import workload as wl
from kraftlog.engine.node.localcluster import LocalCluster
from kraftlog.engine.protocol.metadata_response import EpochMetadataResponse
from kraftlog.engine.records import metadata as codec
from kraftlog.raft import wire

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
API_METADATA, API_CREATE_TOPICS = 3, 19
METADATA_VERSION, CREATE_TOPICS_VERSION = 12, 7
# the kio type that reads our Metadata answers (they carry tagged fields kio's own type refuses)
METADATA_RESPONSE = EpochMetadataResponse

# ---- broker restart ---------------------------------------------------------------------------------

CONTROLLER_ID = 1
BROKER_ID = 5000  # not among the workload's broker ids (0 .. brokers - 1)
SNAPSHOT_EPOCH = 1
PEER_PARTITIONS = 10  # the peer's image: one topic of 10 partitions
POLL_INTERVAL_MS = 3  # between Metadata questions while the broker's answer is not right yet
ANSWER_TIMEOUT_S = 300  # a broker that has not answered right by then failed the run
STOP_TIMEOUT_S = 15  # then SIGKILL
# nobody heartbeats for the image's brokers: a session this long keeps the controller from
# fencing them (and moving a million leaders) while the row runs
IMAGE_SESSION_TIMEOUT_MS = 3_600_000
_RAFT_FLAGS = ("--election-timeout-ms", "300", "--fetch-timeout-ms", "600", "--request-timeout-ms", "400",
               "--fetch-max-wait-ms", "200")
_LOADED = re.compile(r"loaded snapshot (\d+)-(\d+) in (\d+) ms")


def partitions_for(quick: bool) -> int:
    return 100_000 if quick else 1_000_000


def scale(n: int) -> int | None:
    return None if n == 1_000_000 else n


def format_dir(directory: str, node_id: int) -> None:
    from kraftlog.engine.cli import main as cli

    with contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", str(node_id),
                         "--dir", directory])
    if code != 0:
        raise RuntimeError(f"kraftlog storage format of {directory} failed ({code})")


def start_log_at(directory: str, snapshot_id) -> None:
    """Make the node's metadata log start at the snapshot's end offset (what a node that took the
    snapshot and moved its log start looks like), with the snapshot's epoch as the start epoch."""
    from kraftlog.engine.layout import METADATA_LOG_DIRNAME, SNAPSHOT_DIRNAME
    from kraftlog.engine.node.raftlog import EngineRaftLog
    from kraftlog.engine.snapshot import SnapshotStore

    partition_dir = os.path.join(directory, METADATA_LOG_DIRNAME)
    store = SnapshotStore(os.path.join(partition_dir, SNAPSHOT_DIRNAME))
    try:
        raft_log = EngineRaftLog(partition_dir, store)
        raft_log.truncate_fully_and_start_at(snapshot_id[0], snapshot_id[1])
        raft_log.close()
    finally:
        store.close()


@dataclass(frozen=True)
class ExpectedTopic:
    """What a right Metadata answer holds for one topic: (partition, leader, leader epoch,
    replicas, ISR) per partition, as the workload generator assigned them."""

    name: str
    topic_id: uuid.UUID
    partitions: tuple[tuple[int, int, int, tuple[int, ...], tuple[int, ...]], ...]


def expected_topic(shape: wl.WorkloadShape, t: int) -> ExpectedTopic:
    per_topic = shape.partitions_per_topic
    rows = wl.assignment(shape)[t * per_topic:(t + 1) * per_topic].tolist()
    parts = tuple((p, r[0], 0, tuple(r), tuple(r)) for p, r in enumerate(rows))
    return ExpectedTopic(wl.topic_name(t), wl.topic_id(shape, t), parts)


def answer_matches(md, want: ExpectedTopic) -> bool:
    """True when a Metadata answer for ``want.name`` alone is exactly the expected topic."""
    if len(md.topics) != 1:
        return False
    t = md.topics[0]
    if int(t.error_code) != 0 or t.name != want.name or t.topic_id != want.topic_id:
        return False
    got = sorted((int(p.partition_index), int(p.leader_id), int(p.leader_epoch),
                  tuple(int(r) for r in p.replica_nodes), tuple(int(r) for r in p.isr_nodes)) for p in t.partitions)
    return tuple(got) == want.partitions


class MetadataProbe:
    """One blocking connection that asks Metadata v12 for named topics (no event loop to start, so
    the probe adds next to nothing to what it times)."""

    def __init__(self, address: tuple[str, int], timeout_s: float):
        self.sock = socket.create_connection(address, timeout=timeout_s)
        self.correlation_id = 0

    def ask(self, names: list[str]):
        from kio.schema.metadata.v12 import request as md_req

        self.correlation_id += 1
        body = md_req.MetadataRequest(topics=tuple(md_req.MetadataRequestTopic(topic_id=None, name=n) for n in names),
                                      allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        self.sock.sendall(wire.frame_request(API_METADATA, METADATA_VERSION, self.correlation_id, "kraftlog-bench",
                                             body))
        (size,) = wire.SIZE.unpack(self._exact(wire.SIZE.size))
        _, md = wire.parse_response(bytes(self._exact(size)), METADATA_RESPONSE)
        return md

    def _exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionError("the node closed the connection")
            got += k
        return buf

    def close(self) -> None:
        self.sock.close()


@dataclass(frozen=True)
class RestartRun:
    total_s: float  # Popen -> the right answer
    ready_s: float  # Popen -> READY
    load_ms: float | None  # the node's own "loaded snapshot ... in N ms"


class RestartCluster(LocalCluster):
    """One controller (voter CONTROLLER_ID) and one broker (observer BROKER_ID), both seeded with
    the workload's image as a snapshot at end offset N (epoch SNAPSHOT_EPOCH), their logs starting
    at N: the controller leads a cluster whose state is exactly the image, and the broker's own
    snapshot is all it needs to answer."""

    def __init__(self, directory: str, partitions: int, launcher: list[str]):
        super().__init__(directory, 1, observers=(BROKER_ID,))
        self.launcher = launcher
        self.shape = wl.WorkloadShape.scaled(partitions)
        self.want = expected_topic(self.shape, self.shape.topics // 2)
        self.snapshot_id = None

    def seed(self) -> None:
        from kraftlog.engine.layout import METADATA_LOG_DIRNAME, SNAPSHOT_DIRNAME
        from kraftlog.engine.snapshot import SnapshotId, SnapshotStore

        values = wl.image_values(self.shape)
        self.snapshot_id = SnapshotId(len(values), SNAPSHOT_EPOCH)
        snapshots = {i: os.path.join(self.dir_of(i), METADATA_LOG_DIRNAME, SNAPSHOT_DIRNAME) for i in self.socks}
        for i in self.socks:
            format_dir(self.dir_of(i), i)
        with SnapshotStore(snapshots[BROKER_ID]) as store:
            store.write_values(self.snapshot_id, values)
        del values
        # the same LMDB environment for the controller (nothing has it open: a valid copy)
        os.makedirs(snapshots[CONTROLLER_ID])
        shutil.copy(os.path.join(snapshots[BROKER_ID], "data.mdb"), snapshots[CONTROLLER_ID])
        for i in self.socks:
            start_log_at(self.dir_of(i), self.snapshot_id)

    def command(self, i: int, listen_fd: int) -> list[str]:
        base = [*self.launcher, sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd),
                *_RAFT_FLAGS, "--session-timeout-ms", str(IMAGE_SESSION_TIMEOUT_MS), "--heartbeat-interval-ms", "200"]
        return base + ["--process-roles", "broker" if i == BROKER_ID else "controller"]

    def start_controller(self) -> None:
        """Start the controller and wait until it leads with the image loaded."""
        self.start(CONTROLLER_ID)
        probe = MetadataProbe(self.addresses[CONTROLLER_ID], ANSWER_TIMEOUT_S)
        try:
            self._until(probe, CONTROLLER_ID, lambda md: int(md.controller_id) == CONTROLLER_ID)
        finally:
            probe.close()

    def controller_answer(self):
        """The controller's Metadata answer for the row's topic (untimed)."""
        probe = MetadataProbe(self.addresses[CONTROLLER_ID], ANSWER_TIMEOUT_S)
        try:
            return probe.ask([self.want.name])
        finally:
            probe.close()

    def answered_right(self, md) -> bool:
        """The broker's answer is the one this row waits for."""
        return answer_matches(md, self.want)

    def restart_broker(self) -> RestartRun:
        """One timed start of the (stopped) broker, then its controlled shutdown."""
        before = len(self.stderr_of(BROKER_ID))
        total_s, ready_s = self.start_broker()
        self.stop_broker()
        loaded = _LOADED.findall(self.stderr_of(BROKER_ID)[before:])
        return RestartRun(total_s, ready_s, float(loaded[-1][2]) if loaded else None)

    def start_broker(self) -> tuple[float, float]:
        """Start the broker; (Popen -> right answer, Popen -> READY) in seconds."""
        started = time.perf_counter()
        self.start(BROKER_ID)
        ready = time.perf_counter()
        probe = MetadataProbe(self.addresses[BROKER_ID], ANSWER_TIMEOUT_S)
        try:
            self._until(probe, BROKER_ID)
            done = time.perf_counter()
            # untimed: let it register and be unfenced before the SIGTERM. A stop that lands while
            # its registration request is in flight hangs on Python 3.11: the broker loop's cancel
            # is swallowed by asyncio.wait_for when the answer arrives in the same loop pass.
            self._until(probe, BROKER_ID, lambda md: BROKER_ID in {int(b.node_id) for b in md.brokers})
        finally:
            probe.close()
        return done - started, ready - started

    def _until(self, probe: MetadataProbe, node: int, extra=lambda md: True) -> None:
        deadline = time.perf_counter() + ANSWER_TIMEOUT_S
        while True:
            md = probe.ask([self.want.name])
            if self.answered_right(md) and extra(md):
                return
            if time.perf_counter() > deadline or self.procs[node].poll() is not None:
                raise RuntimeError(f"node {node} did not answer {self.want.name} right within {ANSWER_TIMEOUT_S} s "
                                   f"(last answer {md.topics!r}): {self.stderr_of(node)[-2000:]}")
            time.sleep(POLL_INTERVAL_MS / 1000)

    def stop_broker(self) -> None:
        """SIGTERM (a controlled shutdown), SIGKILL if it has not exited in STOP_TIMEOUT_S."""
        p = self.procs.pop(BROKER_ID, None)
        if p is None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
        p.err_file.close()


TAIL_BYTES = 20 << 20  # Kafka's metadata.log.max.record.bytes.between.snapshots
NO_SNAPSHOT_BYTES = (1 << 31) - 1  # the largest the flag takes


class TailRestartCluster(RestartCluster):
    """RestartCluster whose logs (broker's and controller's) hold, after the snapshot, the
    production tail a controller writes until the next snapshot (TAIL_BYTES)."""

    def __init__(self, directory: str, partitions: int, launcher: list[str], tail_bytes: int = TAIL_BYTES):
        super().__init__(directory, partitions, launcher)
        self.tail_bytes = tail_bytes
        self.tail_end = self.tail_records = -1
        self.want_known = False  # self.want is the controller's answer (not the workload's)

    def seed(self) -> None:
        from kraftlog.engine.image import production as pr

        super().seed()
        tail = pr.ProductionTail(pr.ProductionShape(self.shape, tail_bytes=self.tail_bytes), self.snapshot_id[0])
        appends = list(_appends_per_epoch(pr.encode_batches(tail.batches(), self.snapshot_id[0], with_epochs=True)))
        facts = tail.finish()
        self.tail_records = facts.records
        # a base topic the tail neither deleted nor re-created, so the answer compared is the tail's
        # result for a topic the snapshot already had
        names = (wl.topic_name(t) for t in range(self.shape.topics // 2, self.shape.topics))
        gone = facts.deleted | set(facts.recreated)
        self.want = expected_topic(self.shape, self.shape.topics // 2 + next(
            k for k, name in enumerate(names) if name not in gone))
        for i in self.socks:
            self.tail_end = append_tail(self.dir_of(i), appends)

    def command(self, i: int, listen_fd: int) -> list[str]:
        # No node writes a snapshot while the row runs (the tail alone is the default threshold):
        # every restart replays the whole tail, as a broker restarted before its next snapshot does.
        return [*super().command(i, listen_fd), "--snapshot-max-new-bytes", str(NO_SNAPSHOT_BYTES)]

    def start_controller(self) -> None:
        """Start it (it replays the tail before it leads), then take the answer to wait for from it:
        the tail moved leaders and ISRs, and it may still write (leader balancing)."""
        super().start_controller()
        self.want = _expected_from_answer(self.controller_answer(), self.want.name)
        self.want_known = True

    def restart_broker(self) -> RestartRun:
        self.want = _expected_from_answer(self.controller_answer(), self.want.name)
        return super().restart_broker()

    def answered_right(self, md) -> bool:
        return int(md.metadata_offset) >= self.tail_end - 1 and (not self.want_known or answer_matches(md, self.want))


def _appends_per_epoch(batches, max_bytes: int = 1 << 20, max_batches: int = 1024):
    """(bytes, epoch) appends of the tail's (batch, epoch) pairs: one epoch each, at most about
    ``max_bytes`` and ``max_batches`` (the log refuses longer appends)."""
    pending, size, epoch = [], 0, None
    for data, batch_epoch in batches:
        if pending and (batch_epoch != epoch or size >= max_bytes or len(pending) >= max_batches):
            yield b"".join(pending), epoch
            pending, size = [], 0
        pending.append(data)
        size += len(data)
        epoch = batch_epoch
    if pending:
        yield b"".join(pending), epoch


def append_tail(directory: str, appends) -> int:
    """Append the tail to the node's metadata log as its leaders wrote it; the log's end offset."""
    from kraftlog.engine.layout import METADATA_LOG_DIRNAME, SNAPSHOT_DIRNAME
    from kraftlog.engine.node.raftlog import EngineRaftLog
    from kraftlog.engine.snapshot import SnapshotStore

    partition_dir = os.path.join(directory, METADATA_LOG_DIRNAME)
    store = SnapshotStore(os.path.join(partition_dir, SNAPSHOT_DIRNAME))
    try:
        raft_log = EngineRaftLog(partition_dir, store)
        for data, epoch in appends:
            raft_log.log.append_as_leader(data, epoch)
        raft_log.flush()
        end = raft_log.end_offset()
        raft_log.close()
        return end
    finally:
        store.close()


def _expected_from_answer(md, name: str) -> ExpectedTopic:
    """The ExpectedTopic a Metadata answer for ``name`` holds (the controller's, to compare a
    broker's with)."""
    if len(md.topics) != 1 or int(md.topics[0].error_code) != 0:
        raise RuntimeError(f"the controller does not answer {name}: {md.topics!r}")
    t = md.topics[0]
    parts = sorted((int(p.partition_index), int(p.leader_id), int(p.leader_epoch),
                    tuple(int(r) for r in p.replica_nodes), tuple(int(r) for r in p.isr_nodes)) for p in t.partitions)
    return ExpectedTopic(name, t.topic_id, tuple(parts))


def bytecode_launcher(root: str) -> list[str]:
    """The prefix that starts node processes with their bytecode cached, as an installed package
    runs (this sandbox sets PYTHONDONTWRITEBYTECODE, which would compile every module at every
    start): a private pycache under ``root``, filled by the first, untimed start."""
    return ["env", "-u", "PYTHONDONTWRITEBYTECODE", f"PYTHONPYCACHEPREFIX={os.path.join(root, 'pycache')}"]


# what `kraftlog node run` imports before it serves, timed inside the probe process
_IMPORTS = ("import time; t = time.perf_counter(); from kraftlog.engine.cli import main as cli; cli.build_parser(['node', 'run']); "
            "import kraftlog.engine.node.node; print(time.perf_counter() - t)")


def startup_seconds(launcher: list[str]) -> tuple[float, float]:
    """(interpreter start and exit: a ``pass`` process, wall time; the node command's imports,
    timed inside a fresh process), both started by ``launcher``."""
    started = time.perf_counter()
    subprocess.run([*launcher, sys.executable, "-c", "pass"], check=True, timeout=120)
    interpreter_s = time.perf_counter() - started
    out = subprocess.run([*launcher, sys.executable, "-c", _IMPORTS], check=True, timeout=120, capture_output=True,
                         text=True)
    return interpreter_s, float(out.stdout.split()[-1])


@dataclass(frozen=True)
class RestartResult:
    ours: list[RestartRun]
    peer: list[RestartRun]
    interpreter_s: float
    import_s: float
    tail_records: int | None = None
    tail_bytes: int | None = None


def restart_runs(partitions: int, runs: int, *, with_tail: bool = False) -> RestartResult:
    """``runs`` timed restarts of a broker on the ``partitions`` image and as many of the peer,
    interleaved so both see the same machine; one untimed start each first. The peer: the
    one-topic image, or with ``with_tail`` (ours then has the production tail after its snapshot)
    the same image without the tail."""
    root = tempfile.mkdtemp(prefix="kraftlog-bench-restart-")
    launcher = bytecode_launcher(root)
    if with_tail:
        big = TailRestartCluster(os.path.join(root, "tail"), partitions, launcher)
        small = RestartCluster(os.path.join(root, "no-tail"), partitions, launcher)
    else:
        big = RestartCluster(os.path.join(root, "big"), partitions, launcher)
        small = RestartCluster(os.path.join(root, "small"), PEER_PARTITIONS, launcher)
    try:
        for c in (big, small):
            c.seed()
            c.start_controller()
            c.restart_broker()  # the first start registers the broker; later ones are restarts
        startup_seconds(launcher)  # fills the bytecode cache of the probe's own imports
        ours, peer, bare, imports = [], [], [], []
        for _ in range(runs):  # the import probe beside each run: it sees the same machine
            ours.append(big.restart_broker())
            peer.append(small.restart_broker())
            interpreter_s, import_s = startup_seconds(launcher)
            bare.append(interpreter_s)
            imports.append(import_s)
        return RestartResult(ours, peer, statistics.median(bare), statistics.median(imports),
                             getattr(big, "tail_records", None), getattr(big, "tail_bytes", None))
    finally:
        big.close()
        small.close()
        shutil.rmtree(root, ignore_errors=True)


def restart_row(partitions: int, runs: int, *, name: str = "broker.restart_1m_s") -> dict:
    result = restart_runs(partitions, runs)
    ours, peer, interpreter_s, import_s = result.ours, result.peer, result.interpreter_s, result.import_s
    totals = [r.total_s for r in ours]
    median = statistics.median(totals)
    ready = statistics.median(r.ready_s for r in ours)
    loads = [r.load_ms for r in ours if r.load_ms is not None]
    load_ms = statistics.median(loads) if loads else None
    peer_median = statistics.median(r.total_s for r in peer)
    return row(name, "s", median, spread(totals),
               peer=f"the same broker restart on a one-topic image ({PEER_PARTITIONS} partitions): process start "
                    "alone (no Kafka here; the issue quotes its cold JVM decode-and-build at ~1.5 s)",
               peer_value=peer_median, higher_is_better=False, goal="<= 1 s at 1M (process start included)",
               met=median <= 1.0, scale=scale(partitions), runs=runs,
               ready_s=ready, interpreter_s=interpreter_s, import_s=import_s, snapshot_load_ms=load_ms,
               answer_after_ready_s=statistics.median(r.total_s - r.ready_s for r in ours),
               peer_ready_s=statistics.median(r.ready_s for r in peer),
               notes=f"Popen -> READY {ready:.2f} s (interpreter {interpreter_s:.2f} s + imports {import_s:.2f} s + "
                     f"node setup), then the snapshot load ({_ms(load_ms)} by the node's log) and the first right "
                     f"answer; Metadata asked every {POLL_INTERVAL_MS} ms; restarts after a controlled shutdown; bytecode cached")


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f} ms"


def broker_restart(quick: bool) -> dict:
    return restart_row(partitions_for(quick), 3 if quick else 5)


def restart_tail_row(partitions: int, runs: int, *, name: str = "broker.restart_1m_tail_s") -> dict:
    result = restart_runs(partitions, runs, with_tail=True)
    ours = result.ours
    totals = [r.total_s for r in ours]
    median = statistics.median(totals)
    ready = statistics.median(r.ready_s for r in ours)
    loads = [r.load_ms for r in ours if r.load_ms is not None]
    load_ms = statistics.median(loads) if loads else None
    peer_median = statistics.median(r.total_s for r in result.peer)
    after_ready = statistics.median(r.total_s - r.ready_s for r in ours)
    peer_after_ready = statistics.median(r.total_s - r.ready_s for r in result.peer)
    return row(name, "s", median, spread(totals),
               peer="the same broker restart with no tail after the snapshot (broker.restart_1m_s's scenario, "
                    "same scale, interleaved)",
               peer_value=peer_median, higher_is_better=False,
               goal=f"<= 1 s at 1M with a {TAIL_BYTES >> 20} MiB production tail (process start included)",
               met=median <= 1.0, scale=scale(partitions), runs=runs, tail_records=result.tail_records,
               tail_bytes=result.tail_bytes, ready_s=ready, snapshot_load_ms=load_ms,
               answer_after_ready_s=after_ready, peer_answer_after_ready_s=peer_after_ready,
               notes=f"Popen -> READY {ready:.2f} s, then the snapshot load ({_ms(load_ms)}), the tail's "
                     f"{result.tail_records:,} records fetched as committed and replayed, and the first answer "
                     f"at the tail's end: {after_ready:.2f} s after READY (no tail: {peer_after_ready:.2f} s)")


def broker_restart_tail(quick: bool) -> dict:
    return restart_tail_row(partitions_for(quick), 3 if quick else 5)


# ---- CreateTopics through a 3-controller quorum ---------------------------------------------------------

BROKERS = (101, 102, 103)
RACKS = {101: "rack-a", 102: "rack-b", 103: "rack-c"}
PARTITIONS_PER_TOPIC = 10
REPLICATION_FACTOR = 3
REQUEST_TOPICS = 100
WINDOW = 4  # CreateTopics (or Produce) requests in flight on the one connection
REQUEST_TIMEOUT_S = 60


class QuorumCluster(LocalCluster):
    """Three controller processes (1-3) and three broker processes (BROKERS)."""

    def __init__(self, directory: str):
        super().__init__(directory, 3, observers=BROKERS)

    def command(self, i: int, listen_fd: int) -> list[str]:
        roles = ["--process-roles", "broker", "--rack", RACKS[i]] if i in BROKERS else ["--process-roles", "controller"]
        return [sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd),
                *_RAFT_FLAGS, "--heartbeat-interval-ms", "200", "--log-level", "WARNING", *roles]

    def start_all(self) -> None:
        for i in self.socks:
            format_dir(self.dir_of(i), i)
        super().start_all()


class BareRaftQuorum(LocalCluster):
    """Three raftnode processes (the embedded log backend, which takes Produce): the peer's quorum."""

    def command(self, i: int, listen_fd: int) -> list[str]:
        return [sys.executable, "-m", "kraftlog.engine.node.raftnode", "--node-id", str(i), "--voters",
                self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd), *_RAFT_FLAGS,
                "--log-level", "WARNING"]


async def _ask(conn, api_key: int, version: int, body, response_type, timeout_s: float = REQUEST_TIMEOUT_S):
    return await asyncio.wait_for(conn.request(api_key, version, body, response_type), timeout_s)


async def _metadata(conn, names: list[str] | None):
    from kio.schema.metadata.v12 import request as md_req

    topics = None if names is None else tuple(md_req.MetadataRequestTopic(topic_id=None, name=n) for n in names)
    req = md_req.MetadataRequest(topics=topics, allow_auto_topic_creation=False,
                                 include_topic_authorized_operations=False)
    return await _ask(conn, API_METADATA, METADATA_VERSION, req, METADATA_RESPONSE)


async def _connect(address: tuple[str, int]):
    from kraftlog.engine.protocol.connection import ClientConnection

    conn = ClientConnection(*address)
    await conn.open()
    return conn


async def _wait_for(predicate, timeout_s: float, what: str):
    from kraftlog.engine.node.localcluster import wait_until

    return await wait_until(predicate, timeout_s, what, error=RuntimeError)


def _create_request(names: list[str]):
    from kio.schema.create_topics.v7 import request as ct_req
    from kio.static.primitive import i16, i32

    return ct_req.CreateTopicsRequest(topics=tuple(
        ct_req.CreatableTopic(name=n, num_partitions=i32(PARTITIONS_PER_TOPIC),
                              replication_factor=i16(REPLICATION_FACTOR), assignments=(), configs=())
        for n in names))


async def _pipelined(send, bodies: list, window: int) -> list:
    """Send every body with at most ``window`` answers outstanding; the answers in order."""
    inflight: list[asyncio.Future] = []
    answers = []
    for body in bodies:
        if len(inflight) >= window:
            answers.append(await inflight.pop(0))
        inflight.append(send(body))
    for f in inflight:
        answers.append(await f)
    return answers


def topic_records(names: list[str], first_replica: int = 0) -> list[bytes]:
    """The records CreateTopics writes for ``names`` (TopicRecord, then 10 PartitionRecords each:
    leader = first replica, ISR = replicas, epochs 0, directories unassigned), with replicas
    rotating over the three brokers: the peer's payload, byte for byte the controller's shape."""
    shape = wl.WorkloadShape(topics=len(names), partitions_per_topic=PARTITIONS_PER_TOPIC,
                             replication_factor=REPLICATION_FACTOR)
    ids = [uuid.uuid4() for _ in names]
    p = np.arange(first_replica, first_replica + shape.partitions)[:, None] + np.arange(REPLICATION_FACTOR)[None, :]
    replicas = np.asarray(BROKERS, dtype=np.int32)[p % len(BROKERS)]
    parts = wl.partition_values(shape, ids, replicas)
    out = []
    for i, name in enumerate(names):
        out.append(codec.encode_record("TopicRecord", 0, {"Name": name, "TopicId": ids[i]}))
        out.extend(parts[i * PARTITIONS_PER_TOPIC:(i + 1) * PARTITIONS_PER_TOPIC])
    return out


@dataclass(frozen=True)
class CreateResult:
    ours: list[float]  # topics/s per run
    peer: list[float]  # topics/s per run, the same records through Produce
    topics: int  # topics created through CreateTopics (every one checked on every broker)


class CreateSession:
    """Connections to a running QuorumCluster (one per node) and the two timed operations: topics
    created with CreateTopics at the active controller, and the same records through Produce."""

    def __init__(self, cluster: QuorumCluster, raft: BareRaftQuorum):
        self.cluster, self.raft = cluster, raft
        self.conns: dict = {}
        self.client = None
        self.leader = self.raft_leader = -1
        self.created: list[str] = []
        self._serial = 0

    async def open(self) -> None:
        from kraftlog.engine.node.raftnode import RaftClient

        self.conns = {i: await _connect(self.cluster.addresses[i]) for i in self.cluster.socks}
        await _wait_for(lambda: _live_brokers(self.conns[BROKERS[0]]), 60, "three live brokers")
        metadata = RaftClient(self.cluster.voters, attempt_timeout_ms=2000)
        try:
            self.leader = (await _wait_for(metadata.describe_quorum, 30, "a leader")).leader_id
        finally:
            await metadata.close()
        self.client = RaftClient(self.raft.voters, attempt_timeout_ms=2000)
        self.raft_leader = (await _wait_for(self.client.describe_quorum, 30, "a raft leader")).leader_id

    def names(self, prefix: str, requests: int) -> list[list[str]]:
        """``requests`` lists of REQUEST_TOPICS new topic names."""
        self._serial += 1
        return [[f"{prefix}{self._serial:03d}-{k:03d}-{t:03d}" for t in range(REQUEST_TOPICS)] for k in range(requests)]

    async def create(self, names_per_request: list[list[str]]) -> float:
        """CreateTopics for every list, WINDOW requests in flight: topics/s."""
        from kio.schema.create_topics.v7 import response as ct_resp

        conn = self.conns[self.leader]
        reqs = [_create_request(names) for names in names_per_request]
        started = time.perf_counter()
        answers = await asyncio.wait_for(_pipelined(
            lambda req: conn.request(API_CREATE_TOPICS, CREATE_TOPICS_VERSION, req, ct_resp.CreateTopicsResponse),
            reqs, WINDOW), REQUEST_TIMEOUT_S)
        elapsed = time.perf_counter() - started
        bad = [(t.name, t.error_code, t.error_message) for a in answers for t in a.topics if int(t.error_code) != 0]
        if bad:
            raise RuntimeError(f"CreateTopics refused {len(bad)} topic(s), e.g. {bad[:3]}")
        for names in names_per_request:
            self.created.extend(names)
        return sum(map(len, names_per_request)) / elapsed

    async def produce(self, names_per_request: list[list[str]]) -> float:
        """The records CreateTopics would write for every list, one Produce each, WINDOW in flight:
        topics/s."""
        bodies = [wire.produce_request(topic_records(names, k), timeout_ms=REQUEST_TIMEOUT_S * 1000)
                  for k, names in enumerate(names_per_request)]
        started = time.perf_counter()
        await asyncio.wait_for(self.client.produce_pipelined(self.raft_leader, bodies, window=WINDOW), REQUEST_TIMEOUT_S)
        return sum(map(len, names_per_request)) / (time.perf_counter() - started)

    async def check_brokers(self) -> None:
        """Every topic created through CreateTopics is in every broker's Metadata answer."""
        for b in BROKERS:
            await _wait_for(lambda b=b: _has_all(self.conns[b], self.created), 60,
                            f"broker {b} answers every created topic")

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        for conn in self.conns.values():
            await conn.close()


async def _create_scenario(cluster: QuorumCluster, raft: BareRaftQuorum, runs: int, requests: int) -> CreateResult:
    session = CreateSession(cluster, raft)
    try:
        await session.open()
        await session.create(session.names("warm", 1))
        await session.produce(session.names("rawwarm", 1))
        ours, peer = [], []
        for _ in range(runs):  # interleaved: both see the same machine and the same log growth
            ours.append(await session.create(session.names("bench", requests)))
            peer.append(await session.produce(session.names("raw", requests)))
        await session.check_brokers()
        return CreateResult(ours, peer, len(session.created))
    finally:
        await session.close()


async def _live_brokers(conn) -> bool:
    md = await _metadata(conn, None)
    return {int(b.node_id) for b in md.brokers} == set(BROKERS)


async def _has_all(conn, names: list[str]) -> bool:
    md = await _metadata(conn, names)
    return all(int(t.error_code) == 0 and len(t.partitions) == PARTITIONS_PER_TOPIC for t in md.topics) \
        and len(md.topics) == len(names)


def create_topics_result(runs: int, requests: int) -> CreateResult:
    root = tempfile.mkdtemp(prefix="kraftlog-bench-create-")
    cluster = QuorumCluster(root)
    raft = BareRaftQuorum(os.path.join(root, "raft"))
    try:
        cluster.start_all()
        raft.start_all()
        return asyncio.run(_create_scenario(cluster, raft, runs, requests))
    finally:
        cluster.close()
        raft.close()
        shutil.rmtree(root, ignore_errors=True)


def create_topics_row(runs: int, requests: int, *, name: str = "controller.create_topics_per_s") -> dict:
    result = create_topics_result(runs, requests)
    median = statistics.median(result.ours)
    peer = statistics.median(result.peer)
    return row(name, "topics/s", median, spread(result.ours),
               peer="the same records committed with Produce by a bare raftnode quorum (bare Raft commit)",
               peer_value=peer, higher_is_better=True,
               goal="report (no target in the issue); every created topic on every broker",
               met=result.topics == (runs * requests + 1) * REQUEST_TOPICS, runs=runs, topics_per_run=requests * REQUEST_TOPICS,
               partitions_per_s=median * PARTITIONS_PER_TOPIC,
               notes=f"3 controllers + 3 brokers (processes), {REQUEST_TOPICS} topics x {PARTITIONS_PER_TOPIC} "
                     f"partitions, RF {REPLICATION_FACTOR} per request, {WINDOW} requests in flight, "
                     f"{requests} requests per run; ratio below 1 = the controller's overhead over the commit")


def create_topics(quick: bool) -> dict:
    return create_topics_row(3 if quick else 5, 10 if quick else 20)


ROWS = {
    "broker.restart_1m_s": broker_restart,
    "broker.restart_1m_tail_s": broker_restart_tail,
    "controller.create_topics_per_s": create_topics,
}
