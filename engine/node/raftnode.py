"""A raft node as a process, and the small client that talks to it over Kafka's wire.

Run one node (for tests, benchmarks and the demo):

    python -m kraftlog.engine.node.raftnode --node-id 1 \\
        --voters 1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093 --dir /tmp/n1 \\
        [--cluster-id ID] [--listen host:port | --listen-fd FD] [--observer]

Layout of ``--dir``: ``log/`` (the engine's segmented log: record batches v2, indexes,
leader-epoch-checkpoint), ``snapshots/`` (``%020d-%010d.checkpoint`` files) and ``quorum-state``.
The node prints one line ``READY node=<id> port=<port>`` on stdout once it listens (tests read
it), logs to stderr, and on SIGTERM/SIGINT resigns if it leads and exits 0.

``--listen-fd`` takes an already bound, listening socket inherited from the parent: tests bind
port 0, read the port back, and pass the socket, so ports are ephemeral and a restarted node
keeps its address.

This bare node takes any client's Produce (RaftTransport hands it to the driver): it is the
embedded log backend, with no metadata image to protect. A metadata node (node.py, roles
controller / broker) refuses Produce: only its active controller writes that log.

The client API (``RaftClient``) uses only Kafka requests:
    propose(values)       Produce v10, acks=-1, topic __cluster_metadata partition 0, one record
                          batch; the leader answers once the records are committed, with the base
                          offset; any other node answers NOT_LEADER_OR_FOLLOWER naming the leader
                          (CurrentLeader), and the client follows it
    describe_quorum()     DescribeQuorum v2 (the leader answers with per-voter state)
    read_committed(o)     Fetch v17 as a consumer (replica -1) from the leader or a follower: committed only
    api_versions()        ApiVersions v3
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import os
import random
import signal
import socket
import ssl
import struct
import sys
import zlib
from collections.abc import Sequence

from kraftlog.engine.node.memory import prefault_heap
from kraftlog.engine.node.raftlog import EngineRaftLog, FileSnapshotStore
from kraftlog.engine.protocol.connection import CLIENT_ID, ClientConnection, ClientError
from kraftlog.engine.records import batch as batch_codec
from kraftlog.engine.records.layout import ATTRIBUTES_OFFSET
from kraftlog.raft import hot_codec, wire
from kraftlog.raft.aio.driver import DriverConfig, MonotonicClock, RaftDriver
from kraftlog.raft.aio.quorum_file import QuorumStateFile
from kraftlog.raft.aio.transport import RaftTransport
from kraftlog.raft.core import RaftConfig, RaftCore
from kraftlog.raft.messages import DescribeQuorumRequest, DescribeQuorumResponse, FetchRequest
from kraftlog.raft.types import NO_ID, Errors, RaftError

log = logging.getLogger("kraftlog.raftnode")
_SNAP = struct.Struct(">qqI")  # snapshot payload of CountingStateMachine: next offset, records, digest


PORT_MAX = 65535
VOTER_ID_MAX = (1 << 31) - 1  # an int32 on the wire


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """``1@host:port,2@host:port`` -> {1: (host, port), ...}; ValueError naming the bad voter.
    Ids and addresses must be distinct and ports 1..65535 (a voter is dialled there): a repeated id
    would make a one-voter quorum that elects itself beside the real one, a repeated address two
    voters that are one process."""
    out: dict[int, tuple[str, int]] = {}
    for raw in text.split(","):
        item = raw.strip()
        ident, at, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not colon or not host or not ident.isdigit() or not port.isdigit():
            raise ValueError(f"voter {item!r} is not ID@HOST:PORT")
        voter, voter_port = int(ident), int(port)
        if voter > VOTER_ID_MAX:
            raise ValueError(f"voter {item!r}: the id is not 0..{VOTER_ID_MAX}")
        if not 1 <= voter_port <= PORT_MAX:
            raise ValueError(f"voter {item!r}: the port is not 1..{PORT_MAX}")
        if voter in out:
            raise ValueError(f"voter id {voter} is given twice in {text!r}")
        if (host, voter_port) in out.values():
            raise ValueError(f"voter address {host}:{voter_port} is given twice in {text!r}")
        out[voter] = (host, voter_port)
    return out


class CountingStateMachine:
    """The node's listener: counts committed records and folds their batches' raw bytes into a
    CRC-32 (a cheap stand-in for real state; the metadata image plugs in here later)."""

    def __init__(self):
        self.next_offset = 0
        self.records = 0
        self.digest = 0
        self.leader: tuple[int, int] = (NO_ID, -1)

    def handle_load_snapshot(self, snapshot_id, snapshots) -> None:
        data = snapshots.read_chunk(snapshot_id, 0, _SNAP.size)
        self.next_offset, self.records, self.digest = _SNAP.unpack(data)

    def handle_commit(self, batch) -> None:
        self.records += len(batch.records)
        self.next_offset = batch.next_offset
        raw = getattr(batch, "raw", None)
        if raw is not None:
            self.digest = zlib.crc32(raw[ATTRIBUTES_OFFSET:], self.digest)  # what the batch CRC covers

    def handle_commit_run(self, run: wire.BatchRun) -> None:
        """``handle_commit`` of each batch of ``run`` (raft/ready.py CommitRun), from its header rows
        and bytes: a commit's deliveries make no WireBatch on any node."""
        digest = self.digest
        for raw in run.raws():
            digest = zlib.crc32(raw[ATTRIBUTES_OFFSET:], digest)
        self.digest = digest
        self.records += run.record_count
        self.next_offset = run.next_offset

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leader = (leader_id, epoch)
        log.info("leader is now %d in epoch %d", leader_id, epoch)


class RaftNode:
    """One node: engine log + snapshot store + quorum-state file + core + transport + driver."""

    def __init__(self, node_id: int, voters: dict[int, tuple[str, int]], directory: str, *,
                 cluster_id: str | None = None, config: RaftConfig | None = None,
                 driver_config: DriverConfig | None = None, seed: int | None = None):
        cfg = config or RaftConfig()
        if cfg.request_timeout_ms <= cfg.fetch_max_wait_ms or cfg.fetch_timeout_ms <= cfg.fetch_max_wait_ms:
            # a parked Fetch is answered after fetch_max_wait_ms: a request timeout at or below it
            # drops every idle answer, and the follower would time out on a live leader
            raise ValueError(f"request_timeout_ms ({cfg.request_timeout_ms}) and fetch_timeout_ms "
                             f"({cfg.fetch_timeout_ms}) must exceed fetch_max_wait_ms ({cfg.fetch_max_wait_ms})")
        self.node_id = node_id
        self.voters = voters
        self.directory = directory
        log_dir, snapshot_dir, state_dir = self.layout(directory)
        os.makedirs(log_dir, exist_ok=True)
        os.makedirs(state_dir, exist_ok=True)
        self.snapshots = self.make_snapshots(snapshot_dir)
        self.log = EngineRaftLog(log_dir, self.snapshots)
        self.quorum = QuorumStateFile(state_dir)
        if self.log.end_offset() > 0 and not os.path.exists(self.quorum.path):
            # the vote and epoch of this node are gone: it may vote twice in an epoch it already
            # voted in (Kafka warns too; only an operator who deleted the file knows whether that is safe)
            log.warning("node %d: %s is missing although the log holds offsets up to %d: this node has forgotten "
                        "its epoch and vote and starts at epoch 0", node_id, self.quorum.path, self.log.end_offset())
        self.machine = self.make_listener()
        self.rng = random.Random(seed if seed is not None else int.from_bytes(os.urandom(8), "big"))
        self.core = RaftCore(node_id=node_id, voters=set(voters), cluster_id=cluster_id, clock=MonotonicClock(),
                             rng=self.rng, log=self.log, quorum_store=self.quorum, snapshots=self.snapshots,
                             config=config)
        self.transport = self.make_transport(node_id, voters)
        self.driver = RaftDriver(self.core, log=self.log, quorum_store=self.quorum, snapshots=self.snapshots,
                                 listener=self.machine, channel=self.transport, config=driver_config)
        self.port: int | None = None

    # What a role changes (the controller overrides these): where things live, who hears commits,
    # which requests the transport serves.
    def layout(self, directory: str) -> tuple[str, str, str]:
        """(log dir, snapshot dir, quorum-state dir) under ``directory``."""
        return os.path.join(directory, "log"), os.path.join(directory, "snapshots"), directory

    def make_snapshots(self, snapshot_dir: str):
        return FileSnapshotStore(snapshot_dir)

    def make_listener(self):
        return CountingStateMachine()

    def make_transport(self, node_id: int, voters: dict[int, tuple[str, int]]):
        return RaftTransport(node_id, voters)

    async def start(self, *, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None) -> int:
        self.port = await self.transport.start(host=host, port=port, sock=sock)
        self.driver.start()
        return self.port

    async def stop(self, *, resign: bool = True) -> None:
        await self.driver.stop(resign=resign)
        await self.transport.close()
        self.log.close()


# ---- the client ----------------------------------------------------------------------------------


class NodeFailedError(RaftError):
    """The node's Raft driver stopped on a fault it must not live with (a failed flush or
    quorum-state write, ...): the process exits non-zero with this one line."""


class ListenError(RaftError):
    """The address a node was told to listen on cannot be used (in use, unresolvable, not allowed)."""


LISTEN_BACKLOG = 100  # asyncio's default for create_server


def listening_socket(listen_fd: int | None, listen: str | None, default_address: tuple[str, int]) -> socket.socket:
    """The socket a node serves on: the inherited, listening ``listen_fd``, or ``listen`` (HOST:PORT,
    default ``default_address``) bound here. Made before the node opens its log, so an address that
    cannot be used is refused (ListenError naming it) before any data is touched."""
    if listen_fd is not None:
        return socket.socket(fileno=listen_fd)
    host, _, port = (listen or f"{default_address[0]}:{default_address[1]}").rpartition(":")
    try:
        return socket.create_server((host, int(port)), backlog=LISTEN_BACKLOG)
    except OSError as exc:  # socket.gaierror (an unresolvable host) is an OSError too
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


async def serve(node: RaftNode, sock: socket.socket) -> None:
    """Run ``node`` as a process: serve on ``sock`` (see listening_socket), print ``READY
    node=<id> port=<port>`` (tests and the demo wait for it), and on SIGTERM/SIGINT stop, resigning
    first if it leads."""
    port = await node.start(sock=sock)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # READY only once a SIGTERM would be a graceful stop: a supervisor may send one at once
    print(f"READY node={node.node_id} port={port}", flush=True)
    node.driver.on_fatal = lambda _: stop.set()
    await stop.wait()
    failure = node.driver.failure
    if failure is None:
        await node.stop(resign=True)
        return
    # the driver stopped on a fault (raft/aio/driver.py): close what can be closed, then exit non-zero
    try:
        await node.stop(resign=False)
    except Exception as exc:  # noqa: BLE001 - the fault below is what the operator must read
        log.warning("while stopping after the fault: %s: %s", type(exc).__name__, exc)
    raise NodeFailedError(f"node {node.node_id} stopped: {type(failure).__name__}: {failure}")


def _produce_result(frame: bytes) -> tuple[Errors, int, int, int, str | None]:
    """(error, base offset, leader id, leader epoch, message) of a Produce v10 answer: read by
    hand in the shape raft's leader writes, else through kio (another writer's shape)."""
    decoded = hot_codec.decode_produce_response(frame)
    if decoded is not None:
        return decoded[1]
    _, body = wire.parse_response(frame, wire.PRODUCE_API.response)
    return wire.produce_result(body)


class RaftClient:
    """Talks to a cluster given the voters' addresses; finds and follows the leader."""

    def __init__(self, voters: dict[int, tuple[str, int]], *, retry_backoff_ms: int = 20,
                 attempt_timeout_ms: int = 1000, ssl_context: ssl.SSLContext | None = None):
        self.voters = voters
        self.ssl_context = ssl_context  # a TLS client context for every connection, or None
        self.retry_backoff_ms = retry_backoff_ms
        # one request to one node: a node that accepts but never answers (its process is gone but
        # its listening socket lives on in a parent) costs at most this much
        self.attempt_timeout_ms = attempt_timeout_ms
        self.leader_id = NO_ID
        self._connections: dict[int, ClientConnection] = {}

    async def _conn(self, node_id: int) -> ClientConnection:
        conn = self._connections.get(node_id)
        if conn is None or not conn.alive:
            conn = ClientConnection(*self.voters[node_id], ssl_context=self.ssl_context)
            await conn.open()
            self._connections[node_id] = conn
        return conn

    def _candidates(self) -> list[int]:
        """The voters to ask, in order: the known leader first, then every other voter once (a dead
        leader listed twice cost a failover a second attempt_timeout_ms)."""
        first = [self.leader_id] if self.leader_id in self.voters else []
        return first + [v for v in sorted(self.voters) if v not in first]

    async def propose(self, values: Sequence[bytes], *, timeout_ms: int = 10_000) -> int:
        """Commit ``values`` (one batch); returns the base offset. Retries through leader changes
        until ``timeout_ms`` (a retried proposal may commit twice: at-least-once)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        records = batch_codec.build_batch_from_values(list(values))
        last_error = "no voter answered"
        while loop.time() < deadline:
            for node in self._candidates():
                try:
                    conn = await self._conn(node)
                    error, base, leader, _, message = await conn.request_frame(
                        lambda corr: hot_codec.encode_produce_request(corr, CLIENT_ID, records, timeout_ms),
                        _produce_result,
                        timeout_s=max(0.001, min(deadline - loop.time(), self.attempt_timeout_ms / 1000)))
                except (TimeoutError, OSError, ClientError) as exc:
                    last_error = f"node {node}: {type(exc).__name__} {exc}"
                    self._connections.pop(node, None)
                    continue
                if error is Errors.NONE:
                    self.leader_id = node
                    return base
                last_error = f"node {node}: {error.name} {message or ''}"
                if leader not in (NO_ID, node) and leader in self.voters:
                    self.leader_id = leader
                    break  # try the named leader at once
            await asyncio.sleep(self.retry_backoff_ms / 1000)
        raise ClientError(f"proposal not committed within {timeout_ms} ms ({last_error})")

    async def produce_pipelined(self, node: int, bodies: Sequence, *, window: int) -> list[int]:
        """Benchmark helper: send pre-built Produce bodies to ``node`` with up to ``window`` in
        flight; returns the base offsets (raises on any error)."""
        conn = await self._conn(node)
        inflight: set[asyncio.Future] = set()
        results: list[int] = []

        def collect(done_set):
            for f in done_set:
                error, base, *_ = wire.produce_result(f.result())
                if error is not Errors.NONE:
                    raise ClientError(f"produce failed: {error.name}")
                results.append(base)

        for body in bodies:
            if len(inflight) >= window:
                done, inflight = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                collect(done)
            inflight.add(conn.request(wire.API_PRODUCE, wire.PRODUCE_API.version, body, wire.PRODUCE_API.response))
        if inflight:
            done, _ = await asyncio.wait(inflight)
            collect(done)
        return results

    async def describe_quorum(self, node: int | None = None, *, timeout_ms: int = 5000) -> DescribeQuorumResponse:
        """DescribeQuorum from ``node`` (default: the leader, found by asking each voter)."""
        nodes = [node] if node is not None else self._candidates()
        last: DescribeQuorumResponse | None = None
        for n in nodes:
            try:
                conn = await self._conn(n)
                api = wire.APIS[DescribeQuorumRequest]
                msg = await conn.request(api.key, api.version, wire.request_to_kio(DescribeQuorumRequest()),
                                         api.response, timeout_s=min(timeout_ms, self.attempt_timeout_ms) / 1000)
            except (TimeoutError, OSError, ClientError):
                self._connections.pop(n, None)
                continue
            last = wire.response_from_kio(msg)
            if last.partition_error is Errors.NONE:
                self.leader_id = n
                return last
            if node is None and last.leader_id in self.voters and last.leader_id != n:
                self.leader_id = last.leader_id
        if last is None:
            raise ClientError("no voter answered DescribeQuorum")
        return last

    async def read_committed(self, from_offset: int = 0, *, node: int | None = None,
                             max_bytes: int = 1 << 20) -> list[tuple[int, bytes]]:
        """Every committed record from ``from_offset`` (control records skipped), read as a
        consumer from ``node`` (default: the leader) up to that node's high watermark. A consumer
        is Fetch replica -1 naming no epochs: any leader or follower answers with committed
        batches only (KIP-392), and no position is checked for divergence."""
        if node is None:
            dq = await self.describe_quorum()
            if dq.partition_error is not Errors.NONE:
                raise ClientError(f"no leader to read from ({dq.partition_error.name})")
            node = dq.leader_id
        conn = await self._conn(node)
        api = wire.APIS[FetchRequest]
        out: list[tuple[int, bytes]] = []
        offset = from_offset
        while True:
            req = FetchRequest(None, -1, 0, max_bytes, -1, offset, -1, 0)
            resp = wire.response_from_kio(await conn.request(api.key, api.version, wire.request_to_kio(req),
                                                             api.response), req)
            if resp.error_code is not Errors.NONE or resp.partition_error is not Errors.NONE:
                raise ClientError(f"node {node}: fetch at {offset} failed: {resp.error_code.name}/"
                                  f"{resp.partition_error.name} (log start {resp.log_start_offset}, "
                                  f"high watermark {resp.high_watermark})")
            if not resp.batches:
                return out
            for b in resp.batches:
                if not b.control:  # the first batch may begin before the offset asked for
                    out.extend((o, r) for o, r in zip(range(b.base_offset, b.next_offset), b.records, strict=True)
                               if o >= from_offset)
                offset = b.next_offset

    async def api_versions(self, node: int) -> list[tuple[int, int, int]]:
        conn = await self._conn(node)
        req_type, resp_type, _ = wire._API_VERSIONS[3]
        msg = await conn.request(wire.API_API_VERSIONS, 3, req_type(client_software_name="kraftlog",
                                                                     client_software_version="0"),
                                 resp_type, header_v0=True)
        return [(k.api_key, k.min_version, k.max_version) for k in msg.api_keys]

    async def close(self) -> None:
        for conn in self._connections.values():
            await conn.close()
        self._connections.clear()


# ---- the process ----------------------------------------------------------------------------------


_RAFT_DEFAULTS, _DRIVER_DEFAULTS = RaftConfig(), DriverConfig()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kraftlog.engine.node.raftnode",
                                description="Run one kraftlog raft node (KIP-595 over Kafka's wire protocol).")
    p.add_argument("--node-id", type=int, required=True)
    p.add_argument("--voters", required=True, help="id@host:port,... for every voter")
    p.add_argument("--dir", required=True, help="data directory (log/, snapshots/, quorum-state)")
    p.add_argument("--cluster-id", default=None)
    p.add_argument("--listen", default=None, help="host:port (default: this voter's address; observers 127.0.0.1:0)")
    p.add_argument("--listen-fd", type=int, default=None, help="an inherited listening socket")
    p.add_argument("--observer", action="store_true", help="join as an observer (node id not among the voters)")
    p.add_argument("--election-timeout-ms", type=int, default=_RAFT_DEFAULTS.election_timeout_ms)
    p.add_argument("--election-backoff-max-ms", type=int, default=_RAFT_DEFAULTS.election_backoff_max_ms)
    p.add_argument("--fetch-timeout-ms", type=int, default=_RAFT_DEFAULTS.fetch_timeout_ms)
    p.add_argument("--request-timeout-ms", type=int, default=_RAFT_DEFAULTS.request_timeout_ms)
    p.add_argument("--fetch-max-wait-ms", type=int, default=_RAFT_DEFAULTS.fetch_max_wait_ms)
    p.add_argument("--linger-ms", type=int, default=_DRIVER_DEFAULTS.linger_ms)
    p.add_argument("--max-batch-records", type=int, default=_DRIVER_DEFAULTS.max_batch_records)
    p.add_argument("--max-batch-bytes", type=int, default=_DRIVER_DEFAULTS.max_batch_bytes)
    p.add_argument("--log-level", default="INFO")
    return p


async def _main(args) -> int:
    voters = parse_voters(args.voters)
    if args.observer == (args.node_id in voters):
        raise SystemExit(f"node {args.node_id}: --observer must be given exactly when the id is not a voter")
    config = RaftConfig(election_timeout_ms=args.election_timeout_ms,
                        election_backoff_max_ms=args.election_backoff_max_ms,
                        fetch_timeout_ms=args.fetch_timeout_ms, request_timeout_ms=args.request_timeout_ms,
                        fetch_max_wait_ms=args.fetch_max_wait_ms)
    driver_config = DriverConfig(linger_ms=args.linger_ms, max_batch_records=args.max_batch_records,
                                 max_batch_bytes=args.max_batch_bytes)
    sock = listening_socket(args.listen_fd, args.listen, voters.get(args.node_id, ("127.0.0.1", 0)))
    node = RaftNode(args.node_id, voters, args.dir, cluster_id=args.cluster_id, config=config,
                    driver_config=driver_config)
    await serve(node, sock)
    log.info("stopped; %d records committed here, next offset %d", node.machine.records, node.machine.next_offset)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    prefault_heap()  # 8 MiB Fetch answers from the heap's faulted pages, not fresh ones (engine/node/memory.py)
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` dumps every thread's stack to stderr
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format=f"%(asctime)s node{args.node_id} %(name)s %(levelname)s %(message)s")
    try:
        return asyncio.run(_main(args))
    except (NodeFailedError, ListenError) as exc:
        print(f"raftnode: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
