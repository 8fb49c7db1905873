"""The demo's KRaft cluster on loopback: controller and broker processes (`kraftlog node run`),
owned by the demo from start to cleanup.

Ports are ephemeral: the demo binds port 0 for every node, keeps the listening sockets for the
whole tour and hands each node its socket (``--listen-fd``), so a restarted node gets the same
address back. Each node runs ``node_main`` (`kraftlog node run`, dying with the demo), in its own
session so a terminal's Ctrl-C reaches only the demo, which then decides how the nodes stop.
Node directories are formatted (meta.properties) before the first start.

Every child is a ``subprocess.Popen`` reaped only by this module: while ``poll()`` is None its pid
cannot have been reused, so signalling it is always safe. ``signal_all`` never waits (a signal
handler may call it); ``close`` kills and reaps synchronously, so a ``finally`` can call it after
the event loop is gone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from kraftlog.engine.cli.demo_parts.datadir import node_dir_name
from kraftlog.engine.cli.demo_parts.errors import NodeStartError
from kraftlog.engine.layout import METADATA_LOG_DIRNAME


@dataclass(frozen=True)
class RaftTimeouts:
    """The quorum's timeouts: shorter than Kafka's defaults (election 1000, fetch 2000) so a
    failover shows in about a second, long enough that a loaded 2-core machine keeps its leader."""

    election_timeout_ms: int = 500
    election_backoff_max_ms: int = 200
    fetch_timeout_ms: int = 1000
    request_timeout_ms: int = 800
    fetch_max_wait_ms: int = 200

    def args(self) -> list[str]:
        return ["--election-timeout-ms", str(self.election_timeout_ms),
                "--fetch-timeout-ms", str(self.fetch_timeout_ms),
                "--request-timeout-ms", str(self.request_timeout_ms),
                "--fetch-max-wait-ms", str(self.fetch_max_wait_ms)]


NODE_READY_TIMEOUT_S = 30.0  # interpreter start + imports, on a loaded machine
STOP_GRACE_S = 5.0  # after SIGTERM (the leader resigns), before SIGKILL
POLL_INTERVAL_S = 0.02
LISTEN_BACKLOG = 128
SESSION_TIMEOUT_MS = 2000  # a broker silent this long is fenced (Kafka: 9000; shorter for the tour)
HEARTBEAT_INTERVAL_MS = 300
SNAPSHOT_MAX_NEW_BYTES = 2 << 20  # every node snapshots after this much new log (Kafka: 20 MiB)
METADATA_LOG = METADATA_LOG_DIRNAME  # the metadata log directory in each node's directory
STDERR_NAME = "node.stderr"
STDERR_TAIL_BYTES = 4096  # read from the end of a node's stderr to quote its last line


@dataclass
class Node:
    node_id: int
    directory: str
    sock: socket.socket
    roles: str = "controller"
    process: subprocess.Popen | None = None
    stdout_buffer: bytes = b""
    starts: int = 0
    exit_codes: list[int] = field(default_factory=list)

    bound_port: int = 0  # the socket's port, kept: the socket may be closed on an interrupt

    def __post_init__(self) -> None:
        self.bound_port = self.sock.getsockname()[1]

    @property
    def port(self) -> int:
        return self.bound_port

    @property
    def log_dir(self) -> str:
        return os.path.join(self.directory, METADATA_LOG)

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def last_stderr_line(self) -> str:
        path = os.path.join(self.directory, STDERR_NAME)
        try:
            with open(path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - STDERR_TAIL_BYTES))
                lines = f.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1] if lines else ""


class NodeCluster:
    """Controllers ``node_ids`` (the voters) and brokers ``broker_ids`` with data under
    ``data_dir/node-<id>``; ``combined`` makes the controllers brokers too (single-node mode)."""

    def __init__(self, data_dir: str, node_ids=(1, 2, 3), *, cluster_id: str, broker_ids=(),
                 combined: bool = False, timeouts: RaftTimeouts | None = None):
        self.data_dir = data_dir
        self.cluster_id = cluster_id
        self.timeouts = timeouts or RaftTimeouts()
        self.nodes: dict[int, Node] = {}
        controller_roles = "broker,controller" if combined else "controller"
        try:
            for i in (*node_ids, *broker_ids):
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
                s.listen(LISTEN_BACKLOG)
                s.set_inheritable(True)
                self.nodes[i] = Node(i, os.path.join(data_dir, node_dir_name(i)), s,
                                     controller_roles if i in node_ids else "broker")
        except OSError:
            self.close()
            raise
        self.voters = {i: ("127.0.0.1", self.nodes[i].port) for i in node_ids}
        self.voters_arg = ",".join(f"{i}@{h}:{p}" for i, (h, p) in self.voters.items())

    @property
    def controllers(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.is_controller]

    @property
    def brokers(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.is_broker]

    def address(self, node_id: int) -> tuple[str, int]:
        return ("127.0.0.1", self.nodes[node_id].port)

    # ---- starting ---------------------------------------------------------------------------

    def _format(self, node: Node) -> None:
        from kraftlog.engine.node import metaprops

        if metaprops.read(node.directory) is None:
            metaprops.write(node.directory, cluster_id=self.cluster_id, node_id=node.node_id,
                            directory_id=metaprops.uuid_to_kafka(metaprops.random_uuid()))

    def spawn(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.running:
            raise RuntimeError(f"node {node_id} is already running")
        os.makedirs(node.directory, exist_ok=True)
        self._format(node)
        fd = node.sock.fileno()
        cmd = [sys.executable, "-m", "kraftlog.engine.cli.demo_parts.node_main", str(os.getpid()),
               "node", "run", "--node-id", str(node_id), "--process-roles", node.roles,
               "--controller-quorum-voters", self.voters_arg, "--dir", node.directory, "--listen-fd", str(fd),
               "--cluster-id", self.cluster_id, "--log-level", "INFO",
               "--session-timeout-ms", str(SESSION_TIMEOUT_MS), "--heartbeat-interval-ms", str(HEARTBEAT_INTERVAL_MS),
               "--snapshot-max-new-bytes", str(SNAPSHOT_MAX_NEW_BYTES), *self.timeouts.args()]
        with open(os.path.join(node.directory, STDERR_NAME), "ab") as err:
            node.process = subprocess.Popen(cmd, pass_fds=(fd,), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=err, start_new_session=True)
        os.set_blocking(node.process.stdout.fileno(), False)
        node.stdout_buffer = b""
        node.starts += 1

    def stderr_text(self, node_id: int) -> str:
        try:
            with open(os.path.join(self.nodes[node_id].directory, STDERR_NAME), encoding="utf-8",
                      errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    async def wait_ready(self, node_id: int, timeout_s: float = NODE_READY_TIMEOUT_S) -> None:
        """Until the node printed ``READY node=<id> port=<port>``; raises NodeStartError naming
        the node, its exit code and its last stderr line when it dies or takes too long."""
        node = self.nodes[node_id]
        deadline = time.monotonic() + timeout_s
        expected = b"READY node=%d port=%d" % (node_id, node.port)
        while True:
            try:
                chunk = os.read(node.process.stdout.fileno(), 4096)
            except BlockingIOError:
                chunk = None
            if chunk:
                node.stdout_buffer += chunk
            if b"\n" in node.stdout_buffer:
                line = node.stdout_buffer.split(b"\n", 1)[0]
                if line.strip() != expected:
                    raise NodeStartError(f"node {node_id} printed {line[:200]!r} instead of {expected.decode()!r}")
                return
            if node.process.poll() is not None or chunk == b"":
                code = node.process.wait()
                raise NodeStartError(f"node {node_id} exited with code {code} before it was ready "
                                     f"({self.describe_node(node_id)})")
            if time.monotonic() > deadline:
                raise NodeStartError(f"node {node_id} did not print READY within {timeout_s:.0f} s "
                                     f"({self.describe_node(node_id)})")
            await asyncio.sleep(POLL_INTERVAL_S)

    async def start(self, node_id: int) -> float:
        """Spawn and wait until ready; returns the seconds it took."""
        t = time.perf_counter()
        self.spawn(node_id)
        await self.wait_ready(node_id)
        return time.perf_counter() - t

    async def start_all(self) -> float:
        """Every node at once (they start in parallel); returns the seconds until all were ready."""
        t = time.perf_counter()
        for i in self.nodes:
            self.spawn(i)
        await asyncio.gather(*(self.wait_ready(i) for i in self.nodes))
        return time.perf_counter() - t

    # ---- stopping ---------------------------------------------------------------------------

    def pause(self, node_id: int, paused: bool) -> None:
        """SIGSTOP / SIGCONT one node: a stopped broker sends no heartbeats (a hung process)."""
        node = self.nodes[node_id]
        if node.running:
            node.process.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crash: nothing flushed after its last fsync survives) and reap it."""
        node = self.nodes[node_id]
        if node.running:
            node.process.send_signal(signal.SIGKILL)
        self._reap(node)

    def signal_all(self, sig: int = signal.SIGTERM) -> None:
        """Send ``sig`` to every running node and return at once (safe inside a signal handler:
        it never waits). SIGTERM: a node resigns if it leads, then exits. A node the tour paused
        (SIGSTOP) is continued too, or it would never see the signal."""
        for node in self.nodes.values():
            if node.running:
                node.process.send_signal(sig)
                if sig != signal.SIGKILL:
                    node.process.send_signal(signal.SIGCONT)

    async def stop(self, node_ids, grace_s: float = STOP_GRACE_S) -> list[int]:
        """SIGTERM to ``node_ids``, wait up to ``grace_s``, then SIGKILL what is left of them; returns
        the node ids that had to be killed. Every stopped node is reaped."""
        nodes = [self.nodes[i] for i in node_ids]
        for node in nodes:
            if node.running:
                node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(n.running for n in nodes) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_INTERVAL_S)
        killed = [n.node_id for n in nodes if n.running]
        for node in nodes:
            if node.running:
                node.process.send_signal(signal.SIGKILL)
            self._reap(node)
        return killed

    async def stop_all(self, grace_s: float = STOP_GRACE_S) -> list[int]:
        return await self.stop(list(self.nodes), grace_s)

    def kill_all_now(self) -> None:
        """SIGKILL every node still running and reap all of them (synchronous, idempotent)."""
        for node in self.nodes.values():
            if node.running:
                node.process.send_signal(signal.SIGKILL)
        for node in self.nodes.values():
            self._reap(node)

    def _reap(self, node: Node) -> None:
        if node.process is None:
            return
        node.exit_codes.append(node.process.wait())
        node.process.stdout.close()
        node.process = None

    def close_sockets(self) -> None:
        """Close the demo's copies of the listening sockets (each running node keeps its own);
        no node can be restarted afterwards. Safe in a signal handler (close never blocks here)."""
        for node in self.nodes.values():
            node.sock.close()

    def close(self) -> None:
        """Kill and reap every node, close the listening sockets."""
        self.kill_all_now()
        self.close_sockets()

    # ---- describing -------------------------------------------------------------------------

    def pids(self) -> dict[int, int]:
        return {i: n.process.pid for i, n in self.nodes.items() if n.running}

    def describe_node(self, node_id: int) -> str:
        node = self.nodes[node_id]
        if node.running:
            state = f"running, pid {node.process.pid}"
        elif node.process is not None:
            state = f"exited with code {node.process.returncode}"
        elif node.exit_codes:
            state = f"stopped (exit code {node.exit_codes[-1]})"
        else:
            state = "not started"
        last = node.last_stderr_line()
        return f"node {node_id} {state}, port {node.port}" + (f", last log line: {last[-200:]}" if last else "")

    def describe(self) -> str:
        return "; ".join(self.describe_node(i) for i in self.nodes)


class InterruptGuard:
    """SIGINT / SIGTERM during the tour: at the first signal every node gets SIGTERM at once (even
    while the tour is busy computing) and the tour's task is cancelled, so its ``finally`` reaps
    them; a second signal SIGKILLs them and raises KeyboardInterrupt. The handler only sends
    signals: reaping (Popen.wait) is left to the code it interrupts, which may hold Popen's lock.

    Installed before ``asyncio.run`` (which then leaves SIGINT to us) and attached to the running
    task from inside it.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, cluster_ref):
        self._cluster_ref = cluster_ref  # callable -> NodeCluster | None (the cluster is made later)
        self._previous: dict[int, object] = {}
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.signum: int | None = None
        self.count = 0

    def __enter__(self) -> InterruptGuard:
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def attach(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def _on_signal(self, signum, frame) -> None:
        self.count += 1
        self.signum = self.signum or signum
        cluster = self._cluster_ref()
        if self.count == 1 and self._task is not None and not self._task.done():
            if cluster is not None:
                cluster.signal_all(signal.SIGTERM)
                # The demo's copies of the listening sockets would keep accepting connections for
                # nodes that are gone (a broker's controlled shutdown would wait on them for its
                # request timeout); closed, a dead node refuses at once.
                cluster.close_sockets()
            self._task.cancel()
            self._loop.call_soon_threadsafe(lambda: None)  # wake the loop if it sleeps in select
            return
        if cluster is not None:
            cluster.signal_all(signal.SIGKILL)  # reaped by the caller's finally (close())
        raise KeyboardInterrupt
