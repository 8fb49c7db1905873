"""TCP transport speaking Kafka's wire protocol (frames: raft/wire.py), on asyncio.

One listening socket takes requests from peers, admins and clients; one outbound connection
per peer carries this node's requests and their responses (Kafka's model: a connection carries
requests one way and their responses back).

Inbound requests get a transport-local correlation id before they reach the core, mapped back
to (connection, the client's correlation id) when the core answers: two clients may use the same
correlation ids, and an admin's DescribeQuorum has no node id to answer by.

Failure handling:
    * a frame whose size prefix is negative or above ``max_frame_bytes``, or that does not
      decode (wrong API/version, malformed header or body, bytes left over), closes that one
      connection with a log line; the node keeps serving every other connection.
    * a peer that cannot be reached is retried on the next send after a backoff that doubles
      from ``reconnect_backoff_ms`` to ``reconnect_backoff_max_ms``; frames sent while a
      connection is being made wait (up to ``connect_queue_max_frames``), others are dropped:
      the core retries every request after its request timeout, so delivery stays best effort
      exactly as raft/protocols.py Channel promises.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from kraftlog.raft import wire
from kraftlog.raft.messages import DescribeQuorumResponse, Envelope

log = logging.getLogger("kraftlog.raft.transport")


@dataclass(frozen=True, slots=True)
class TransportConfig:
    max_frame_bytes: int = 32 << 20  # above fetch_max_bytes (8 MiB) plus framing
    reconnect_backoff_ms: int = 20
    reconnect_backoff_max_ms: int = 1000
    connect_timeout_ms: int = 1000
    connect_queue_max_frames: int = 256


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class FrameConnection(asyncio.Protocol):
    """Cuts the byte stream into frames (size i32 | payload) and hands each payload to
    ``on_frame(conn, payload)``; an oversized frame or a WireFormatError closes the connection."""

    def __init__(self, label: str, max_frame_bytes: int, on_frame: Callable, on_lost: Callable | None = None):
        self.label = label
        self.max_frame_bytes = max_frame_bytes
        self.on_frame = on_frame
        self.on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.label == "inbound":
            self.label = f"from {transport.get_extra_info('peername')}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos, end = 0, len(buf)
        try:
            while end - pos >= 4 and not self.closed:
                (size,) = wire.SIZE.unpack_from(buf, pos)
                if size < 0 or size > self.max_frame_bytes:
                    self.fail(f"frame size {size} outside [0, {self.max_frame_bytes}]")
                    return
                if end - pos - 4 < size:
                    break
                frame = bytes(buf[pos + 4:pos + 4 + size])
                pos += 4 + size
                self.on_frame(self, frame)
        except wire.WireFormatError as exc:
            self.fail(str(exc))
            return
        del buf[:pos]

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def fail(self, why: str) -> None:
        log.warning("closing connection %s: %s", self.label, why)
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._buf = bytearray()
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.on_lost is not None:
            self.on_lost(self)


class _PeerLink:
    """The outbound connection to one peer, with reconnect backoff."""

    def __init__(self, owner: RaftTransport, peer_id: int, address: tuple[str, int]):
        self.owner = owner
        self.peer_id = peer_id
        self.address = address
        self.conn: FrameConnection | None = None
        self.connecting = False
        self.queue: list[bytes] = []
        self.pending: dict[int, object] = {}  # correlation id -> our request body
        self.backoff_ms = owner.config.reconnect_backoff_ms
        self.next_attempt_ms = 0
        self.connects = 0

    def send(self, correlation_id: int, body, frame: bytes) -> None:
        if self.conn is not None and not self.conn.closed:
            self.pending[correlation_id] = body
            self.conn.write(frame)
            return
        if not self.connecting:
            if _now_ms() < self.next_attempt_ms:
                return  # dropped: the core retries after its request timeout
            self.connecting = True
            asyncio.get_running_loop().create_task(self._connect())
        if len(self.queue) < self.owner.config.connect_queue_max_frames:
            self.pending[correlation_id] = body
            self.queue.append(frame)

    async def _connect(self) -> None:
        cfg = self.owner.config
        loop = asyncio.get_running_loop()
        label = f"to node {self.peer_id} at {self.address[0]}:{self.address[1]}"
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: FrameConnection(label, cfg.max_frame_bytes, self._on_frame,
                                                               self._on_lost), *self.address),
                cfg.connect_timeout_ms / 1000)
        except (TimeoutError, OSError) as exc:
            self.connecting = False
            self.queue.clear()
            self.pending.clear()
            self.next_attempt_ms = _now_ms() + self.backoff_ms
            if self.backoff_ms >= cfg.reconnect_backoff_max_ms or self.connects == 0:
                log.info("node %d unreachable (%s); retrying in %d ms", self.peer_id, exc, self.backoff_ms)
            self.backoff_ms = min(self.backoff_ms * 2, cfg.reconnect_backoff_max_ms)
            return
        if self.owner.closed:
            conn.close()
            return
        self.connects += 1
        self.connecting = False
        self.conn = conn
        self.backoff_ms = cfg.reconnect_backoff_ms
        for frame in self.queue:
            conn.write(frame)
        self.queue.clear()

    def _on_frame(self, conn: FrameConnection, frame: bytes) -> None:
        corr = wire.response_correlation_id(frame)
        request = self.pending.pop(corr, None)
        if request is None:
            return  # an answer to a request from before a reconnect
        corr, body = wire.decode_response_body(frame, request)
        self.owner.deliver(Envelope(self.peer_id, self.owner.node_id, corr, body))

    def _on_lost(self, conn: FrameConnection) -> None:
        if self.conn is conn:
            self.conn = None
            self.pending.clear()
            self.next_attempt_ms = _now_ms() + self.backoff_ms

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class RaftTransport:
    """The Channel a RaftDriver sends through, and the server that feeds it.

    ``on_envelope(envelope)`` receives every inbound raft request and every response to our
    requests; ``on_produce(values, reply)`` receives the client API's proposals, and
    ``reply(error, base_offset, leader_id, leader_epoch, message)`` answers them.
    """

    def __init__(self, node_id: int, peers: dict[int, tuple[str, int]], config: TransportConfig | None = None):
        self.node_id = node_id
        self.config = config or TransportConfig()
        self.links = {pid: _PeerLink(self, pid, addr) for pid, addr in peers.items() if pid != node_id}
        self.on_envelope: Callable[[Envelope], None] = lambda env: None
        self.on_produce: Callable | None = None
        self.client_id = f"kraftlog-raft-{node_id}"
        self._server: asyncio.base_events.Server | None = None
        self._inbound: dict[int, tuple[FrameConnection, int]] = {}
        self._inbound_ids = itertools.count(1)
        self._connections: set[FrameConnection] = set()
        self.closed = False
        self.frames_rejected = 0

    # -- server side --------------------------------------------------------------------------

    async def start(self, *, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None) -> int:
        """Listen (on ``sock`` when given, e.g. a socket inherited from a parent); returns the port."""
        loop = asyncio.get_running_loop()
        if sock is not None:
            self._server = await loop.create_server(self._accept, sock=sock)
        else:
            self._server = await loop.create_server(self._accept, host, port)
        return self._server.sockets[0].getsockname()[1]

    def _accept(self) -> FrameConnection:
        conn = FrameConnection("inbound", self.config.max_frame_bytes, self._on_request, self._on_inbound_lost)
        self._connections.add(conn)
        return conn

    def _on_inbound_lost(self, conn: FrameConnection) -> None:
        self._connections.discard(conn)

    def _on_request(self, conn: FrameConnection, frame: bytes) -> None:
        try:
            rf = wire.parse_request(frame)
        except wire.WireFormatError:
            self.frames_rejected += 1
            raise
        if rf.api_key == wire.API_API_VERSIONS:
            conn.write(wire.frame_response(rf.correlation_id, wire.api_versions_response(rf.api_version),
                                           header_v0=True))
        elif rf.api_key == wire.API_PRODUCE:
            self._on_produce(conn, rf)
        else:
            source, body = wire.request_from_kio(rf.body)
            local = next(self._inbound_ids)
            self._inbound[local] = (conn, rf.correlation_id)
            self.deliver(Envelope(source, self.node_id, local, body))

    def _on_produce(self, conn: FrameConnection, rf: wire.RequestFrame) -> None:
        values = wire.produce_values(rf.body)
        corr = rf.correlation_id

        def reply(error, base_offset: int, leader_id: int, leader_epoch: int, message: str | None = None) -> None:
            conn.write(wire.frame_response(corr, wire.produce_response(error, base_offset, leader_id, leader_epoch,
                                                                       message)))

        if self.on_produce is None:
            raise wire.WireFormatError("this node takes no Produce requests")
        self.on_produce(values, reply)

    # -- Channel ----------------------------------------------------------------------------------

    def send(self, env: Envelope) -> None:
        if self.closed:
            return
        if log.isEnabledFor(logging.DEBUG):
            log.debug("node %d sends %s", self.node_id, env)
        if env.is_request:
            link = self.links.get(env.destination)
            if link is None:
                log.warning("no address for node %d; dropping %s", env.destination, type(env.body).__name__)
                return
            link.send(env.correlation_id, env.body, wire.encode_request_envelope(env, self.client_id))
            return
        entry = self._inbound.pop(env.correlation_id, None)
        if entry is None:
            return
        conn, corr = entry
        if not conn.closed:
            conn.write(wire.encode_response_body(corr, _wall_clock_timestamps(env.body)))

    def deliver(self, env: Envelope) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("node %d receives %s", self.node_id, env)
        self.on_envelope(env)

    # -- shutdown ---------------------------------------------------------------------------------

    async def close(self) -> None:
        self.closed = True
        for link in self.links.values():
            link.close()
        for conn in list(self._connections):
            conn.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def _wall_clock_timestamps(body):
    """DescribeQuorum's LastFetchTimestamp / LastCaughtUpTimestamp are epoch milliseconds on the wire
    (what Kafka's tools expect); the core keeps them on its monotonic clock. Convert on the way out."""
    if not isinstance(body, DescribeQuorumResponse):
        return body
    offset_ms = time.time_ns() // 1_000_000 - time.monotonic_ns() // 1_000_000

    def wall(replicas):
        return tuple(dataclasses.replace(r, last_fetch_ms=r.last_fetch_ms + offset_ms if r.last_fetch_ms >= 0 else -1,
                                         last_caught_up_ms=r.last_caught_up_ms + offset_ms
                                         if r.last_caught_up_ms >= 0 else -1) for r in replicas)

    return dataclasses.replace(body, voters=wall(body.voters), observers=wall(body.observers))
