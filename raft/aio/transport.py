"""TCP transport speaking Kafka's wire protocol (frames: raft/wire.py), on asyncio, optionally TLS.

One listening socket takes requests from peers, admins and clients; one outbound connection
per peer carries this node's requests and their responses (Kafka's model: a connection carries
requests one way and their responses back).

Inbound requests get a transport-local correlation id before they reach the core, mapped back
to (connection, the client's correlation id) when the core answers: two clients may use the same
correlation ids, and an admin's DescribeQuorum has no node id to answer by.

Failure handling (each failure costs one connection, never the node):
    * a size prefix below 0 or above ``max_frame_bytes`` closes the connection as soon as the
      4 prefix bytes are in, before any of the body is buffered;
    * a frame that does not decode (unknown API/version, malformed header or body), or whose
      handler raises anything else, closes that connection (bytes after a well-formed body do
      not: Kafka ignores them, so do we, counting them: note_trailing);
    * a peer that closes (or resets) the connection in the middle of a frame;
    * a TLS handshake that fails (no certificate, a certificate from another CA, plain text on
      a TLS port, no handshake within ``tls_handshake_timeout_ms``).
  Each logs exactly one line ``closing connection from HOST:PORT: <reason>`` (a handler that
  raised something other than WireFormatError logs at ERROR and names the exception type: that
  is a decoder bug to fix; the traceback goes to DEBUG). A clean close between frames is silent.
    * a peer that cannot be reached is retried on the next send after a backoff that doubles
      from ``reconnect_backoff_ms`` to ``reconnect_backoff_max_ms``; frames sent while a
      connection is being made wait (up to ``connect_queue_max_frames``), others are dropped:
      the core retries every request after its request timeout, so delivery stays best effort
      exactly as raft/protocols.py Channel promises.

TLS: ``server_ssl`` (an ``ssl.SSLContext`` for the listener; to require client certificates it
must have ``verify_mode = CERT_REQUIRED``) and ``client_ssl`` (for the outbound connections to
peers). The listener accepts plain TCP and then upgrades with ``loop.start_tls``, so a failed
handshake can be logged with the peer's address (asyncio's own TLS server drops it silently).
This module takes ready contexts and nothing else: building them from files and flags is
engine/node/tls.py's job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import logging
import socket
import ssl
import struct
import time
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass

from kio import index as kio_index
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1

from kraftlog.raft import hot_codec, wire
from kraftlog.raft.messages import DescribeQuorumResponse, Envelope, FetchRequest, FetchResponse

log = logging.getLogger("kraftlog.raft.transport")

# Kafka's socket.request.max.bytes default: 100 MiB. Far above a Fetch response (fetch_max_bytes
# 8 MiB) or a snapshot chunk, and still a bound: a size prefix above it is refused unread.
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TransportConfig:
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    reconnect_backoff_ms: int = 20
    reconnect_backoff_max_ms: int = 1000
    connect_timeout_ms: int = 1000
    connect_queue_max_frames: int = 256
    # an inbound connection that has not finished its TLS handshake by then is closed (outbound
    # handshakes are bounded by connect_timeout_ms, see _PeerLink._open)
    tls_handshake_timeout_ms: int = 10_000

    def __post_init__(self):
        if self.max_frame_bytes < 64:  # a request header alone takes 10+ bytes; refuse nonsense early
            raise ValueError(f"max_frame_bytes must be at least 64, got {self.max_frame_bytes}")


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def peer_label(address) -> str:
    """``HOST:PORT`` (``[HOST]:PORT`` for IPv6) of a socket address tuple, for log lines."""
    if not isinstance(address, tuple) or len(address) < 2:
        return str(address)
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


class FrameConnection(asyncio.BufferedProtocol):
    """Cuts the byte stream into frames (size i32 | payload) and hands each payload to
    ``on_frame(conn, payload)``. Any failure (see the module docstring) logs one line, calls
    ``on_reject(conn, reason)`` and closes this connection only.

    A buffered protocol: the socket is read straight into this connection's buffer (no bytes
    object per read, no copy into an accumulator). Frames that fit are cut from a small buffer of
    ``READ_BUFFER_BYTES``; a frame larger than what is left of it (a Fetch answer of up to
    fetch_max_bytes) gets a buffer of its own size as soon as its prefix is in, so the rest of it
    is read in as few reads as the socket allows (asyncio's own reads are 256 KiB: 32 loop
    iterations for an 8 MiB answer, each of which may also run a bounded Raft pass).

    Data may arrive before ``connection_made`` (a TLS connection upgraded with start_tls delivers
    the bytes that came with the handshake's last flight first): it is buffered, not parsed,
    until there is a transport to answer on.
    """

    READ_BUFFER_BYTES = 64 * 1024

    def __init__(self, label: str, max_frame_bytes: int, on_frame: Callable, on_lost: Callable | None = None,
                 on_reject: Callable | None = None, *, lend_large_frames: bool = False,
                 on_read_done: Callable[[], None] | None = None):
        self.label = label
        self.max_frame_bytes = max_frame_bytes
        self.on_frame = on_frame
        # called once after the frames of each read were handed to on_frame (RaftTransport.on_read_done)
        self.on_read_done = on_read_done
        # A frame that fills a buffer of its own (larger than READ_BUFFER_BYTES) is handed over as a
        # read-only view of that buffer, which this connection then drops and never writes again,
        # instead of a copy (a follower's 8 MiB Fetch answer: ~2.5 ms). Only for handlers that take
        # any bytes-like frame (a peer link's responses); others get bytes.
        self.lend_large_frames = lend_large_frames
        self.on_lost = on_lost
        self.on_reject = on_reject
        self.transport: asyncio.Transport | None = None
        # bytes [_start, _end) of _buf are read and not yet cut into frames. A buffer is never
        # resized (the transport may still hold a view of it): one that is too small is replaced.
        self._buf = bytearray(self.READ_BUFFER_BYTES)
        self._start = self._end = 0
        self.closed = False
        self.listener: str | None = None  # the tag of the listening socket that accepted it (RaftTransport.start)

    @property
    def buffered_bytes(self) -> int:
        """Bytes read and not yet delivered as a frame (a partial frame)."""
        return self._end - self._start

    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.label == "inbound":
            self.label = f"from {peer_label(transport.get_extra_info('peername'))}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._end > self._start and not self.closed:
            self._cut_frames()
            if self.on_read_done is not None:
                self.on_read_done()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._end == len(self._buf):
            self._make_room()
        return memoryview(self._buf)[self._end:]

    def _make_room(self) -> None:
        """The buffer is full: move the unread bytes (a partial frame, or a prefix not yet
        cut, before connection_made) to the front of a new buffer, twice as large if they fill it."""
        pending = self._end - self._start
        size = self.READ_BUFFER_BYTES if pending < self.READ_BUFFER_BYTES // 2 else 2 * max(pending, 4)
        self._move_to(bytearray(size))

    def _move_to(self, new: bytearray) -> None:
        pending = self._end - self._start
        new[:pending] = memoryview(self._buf)[self._start:self._end]
        self._buf, self._start, self._end = new, 0, pending

    def buffer_updated(self, nbytes: int) -> None:
        if self.closed:  # a read that was under way when the connection closed: dropped
            self._start = self._end = 0
            return
        self._end += nbytes
        if self.transport is not None:
            self._cut_frames()  # never raises: a bad frame closes the connection
            if self.on_read_done is not None:
                self.on_read_done()

    def data_received(self, data: bytes) -> None:
        """Bytes handed in rather than read into get_buffer (tests; the same path)."""
        view = memoryview(data)
        while len(view) and not self.closed:
            room = self.get_buffer(len(view))
            n = min(len(room), len(view))
            room[:n] = view[:n]
            view = view[n:]
            self.buffer_updated(n)

    def _cut_frames(self) -> None:
        # frame = size i32 (bytes that follow; 0 <= size <= max_frame_bytes) | payload
        buf, pos, end = self._buf, self._start, self._end
        try:
            while end - pos >= 4 and not self.closed:
                (size,) = wire.SIZE.unpack_from(buf, pos)
                if size < 0 or size > self.max_frame_bytes:
                    # refused on the prefix alone: nothing of the body is waited for or buffered
                    self.fail(f"frame size {size} outside [0, {self.max_frame_bytes}]")
                    return
                if end - pos - 4 < size:
                    if pos + 4 + size > len(buf):  # it will not fit here: a buffer of its size
                        self._start = pos
                        self._move_to(bytearray(max(4 + size, self.READ_BUFFER_BYTES)))
                        return
                    break
                if self.lend_large_frames and pos == 0 and 4 + size == len(buf) > self.READ_BUFFER_BYTES:
                    frame = memoryview(buf).toreadonly()[4:]  # the buffer is replaced below, never refilled
                else:
                    with memoryview(buf) as view:
                        frame = bytes(view[pos + 4:pos + 4 + size])
                pos += 4 + size
                self.on_frame(self, frame)
        except wire.WireFormatError as exc:
            self.fail(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - isolate: one bad frame must not take the loop's callback down
            # Not a WireFormatError: a decoder or handler that missed a malformed case. Still only
            # this peer's frame; the ERROR level and the type name make the bug visible.
            log.debug("frame handler failed on connection %s", self.label, exc_info=True)
            self.fail(f"unexpected {type(exc).__name__} handling a frame: {exc}", level=logging.ERROR)
            return
        if self.closed:
            return
        if pos == end and len(buf) > self.READ_BUFFER_BYTES:
            self._buf = bytearray(self.READ_BUFFER_BYTES)  # a large frame's buffer is not kept
            pos = end = self._end = 0
        elif pos == end:
            pos = end = self._end = 0
        self._start = pos

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            # what the socket does not take at once asyncio keeps as data[sent:]: a copy of the
            # rest of a large frame (most of an 8 MiB Fetch answer) before its own buffer's copy;
            # a memoryview's slice is not one (of immutable bytes only: a TLS transport keeps what
            # it is given until it is sent)
            large = len(data) > self.READ_BUFFER_BYTES and type(data) is bytes
            self.transport.write(memoryview(data) if large else data)

    def fail(self, why: str, *, level: int = logging.WARNING) -> None:
        """Close this connection because of ``why``, with the one log line that says so."""
        if self.closed:
            return
        log.log(level, "closing connection %s: %s", self.label, why)
        if self.on_reject is not None:
            self.on_reject(self, why)
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._drop_buffer()
            if self.transport is not None:
                self.transport.close()

    def _drop_buffer(self) -> None:
        self._buf = bytearray(4)  # what a read after the close may still fill, then ignored
        self._start = self._end = 0

    def connection_lost(self, exc) -> None:
        have = self.buffered_bytes
        if not self.closed and have:
            # the peer went away inside a frame: say so once (a close between frames is normal)
            want = wire.SIZE.unpack_from(self._buf, self._start)[0] + 4 if have >= 4 else 4
            how = f"reset ({exc})" if exc is not None else "closed by the peer"
            self.fail(f"{how} in the middle of a frame ({have} of {want} bytes)")
        self.closed = True
        self._drop_buffer()
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
        cfg, owner = self.owner.config, self.owner
        label = f"to node {self.peer_id} at {peer_label(self.address)}"
        try:
            conn = await self._open(label)
        except (TimeoutError, OSError) as exc:  # ssl.SSLError and CertificateError are OSErrors
            self.connecting = False
            self.queue.clear()
            self.pending.clear()
            self.next_attempt_ms = _now_ms() + self.backoff_ms
            if self.backoff_ms >= cfg.reconnect_backoff_max_ms or self.connects == 0:
                if isinstance(exc, ssl.SSLError):
                    log.warning("TLS handshake with node %d at %s failed (%s); retrying in %d ms", self.peer_id,
                                peer_label(self.address), _tls_reason(exc), self.backoff_ms)
                else:
                    log.info("node %d unreachable (%s); retrying in %d ms", self.peer_id, exc, self.backoff_ms)
            self.backoff_ms = min(self.backoff_ms * 2, cfg.reconnect_backoff_max_ms)
            return
        if owner.closed:
            conn.close()
            return
        self.connects += 1
        self.connecting = False
        self.conn = conn
        self.backoff_ms = cfg.reconnect_backoff_ms
        for frame in self.queue:
            conn.write(frame)
        self.queue.clear()

    async def _open(self, label: str) -> FrameConnection:
        """TCP connect, then (with client_ssl) the TLS handshake, each bounded by
        connect_timeout_ms: a peer whose process hangs still completes TCP connects from its
        listen backlog, and must not hold this link for longer than a dead one would."""
        cfg, owner = self.owner.config, self.owner
        loop = asyncio.get_running_loop()
        timeout_s = cfg.connect_timeout_ms / 1000
        conn = FrameConnection(label, cfg.max_frame_bytes, self._on_frame, self._on_lost, lend_large_frames=True,
                               on_read_done=owner.read_done)
        if owner.client_ssl is None:
            await asyncio.wait_for(loop.create_connection(lambda: conn, *self.address), timeout_s)
            return conn
        raw, _ = await asyncio.wait_for(loop.create_connection(asyncio.Protocol, *self.address), timeout_s)
        try:
            tls_transport = await loop.start_tls(raw, conn, owner.client_ssl, server_hostname=self.address[0],
                                                 ssl_handshake_timeout=timeout_s)
        except BaseException:
            raw.close()
            raise
        conn.connection_made(tls_transport)
        return conn

    def _on_frame(self, conn: FrameConnection, frame: bytes) -> None:
        corr = wire.response_correlation_id(frame)
        request = self.pending.pop(corr, None)
        if request is None:
            return  # an answer to a request from before a reconnect
        body = hot_codec.decode_fetch_response(frame) if type(request) is FetchRequest else None
        if body is None:  # not a Fetch, or one in a shape hot_codec leaves to kio (which reads bytes)
            frame = bytes(frame)  # a large frame comes lent as a view (FrameConnection.lend_large_frames)
            check_response_lengths(frame, wire.APIS[type(request)].response)
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

    ``config.max_frame_bytes`` bounds every frame in both directions. ``server_ssl`` makes the
    listener TLS-only; ``client_ssl`` makes the connections to peers TLS (see the module docstring).
    Counters: ``frames_rejected`` (inbound connections closed for a bad frame),
    ``handshakes_failed`` (inbound TLS handshakes that failed), ``requests_with_trailing_bytes``
    (well-formed requests with bytes after the body: served, as Kafka does, see note_trailing).
    """

    def __init__(self, node_id: int, peers: dict[int, tuple[str, int]], config: TransportConfig | None = None, *,
                 server_ssl: ssl.SSLContext | None = None, client_ssl: ssl.SSLContext | None = None):
        if server_ssl is not None and not isinstance(server_ssl, ssl.SSLContext):
            raise TypeError(f"server_ssl must be an ssl.SSLContext, got {type(server_ssl).__name__}")
        if client_ssl is not None and not isinstance(client_ssl, ssl.SSLContext):
            raise TypeError(f"client_ssl must be an ssl.SSLContext, got {type(client_ssl).__name__}")
        self.node_id = node_id
        self.config = config or TransportConfig()
        self.server_ssl = server_ssl
        self.client_ssl = client_ssl
        self.links = {pid: _PeerLink(self, pid, addr) for pid, addr in peers.items() if pid != node_id}
        self.voter_addresses = dict(peers)  # DescribeQuorum v2's Nodes
        self.on_envelope: Callable[[Envelope], None] = lambda env: None
        self.on_produce: Callable | None = None
        # called once after each socket read whose frames were handed to on_envelope / on_produce
        # (every call of those two happens inside such a read): a driver may act on all of a
        # read's messages at once, there and then (raft/aio/driver.py, "wake-ups")
        self.on_read_done: Callable[[], None] | None = None
        self.client_id = f"kraftlog-raft-{node_id}"
        self._server: asyncio.base_events.Server | None = None
        self._extra_servers: list[asyncio.base_events.Server] = []
        self._inbound: dict[int, tuple[FrameConnection, int, int]] = {}  # -> (conn, correlation id, version)
        self._inbound_ids = itertools.count(1)
        self._connections: set[FrameConnection] = set()
        self._handshakes: set[asyncio.Task] = set()
        self.closed = False
        self.frames_rejected = 0
        self.handshakes_failed = 0
        self.requests_with_trailing_bytes = 0
        # a subclass that reads requests its own way (engine/node's NodeTransport refuses Produce
        # after reading it with kio) keeps every Produce guarded before _on_request
        self._hot_produce = type(self)._on_request is RaftTransport._on_request

    # -- server side --------------------------------------------------------------------------

    async def start(self, *, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None,
                    listener: str | None = None) -> int:
        """Listen (on ``sock`` when given, e.g. a socket inherited from a parent); returns the port.
        ``listener`` tags every connection this socket accepts (``FrameConnection.listener``), so
        a subclass can serve each listener its own APIs."""
        loop = asyncio.get_running_loop()
        factory = self._factory(listener, self.server_ssl)
        if sock is not None:
            self._server = await loop.create_server(factory, sock=sock)
        else:
            self._server = await loop.create_server(factory, host, port)
        return self._server.sockets[0].getsockname()[1]

    async def listen_also(self, sock: socket.socket, *, listener: str | None = None,
                          server_ssl: ssl.SSLContext | None | bool = True) -> int:
        """Serve on another listening socket too (a combined node's broker listener beside its
        controller listener), its connections tagged ``listener``; ``server_ssl`` True: the
        transport's own, else this socket's context (None: plain TCP). Returns its port."""
        if server_ssl is not True and server_ssl is not None and not isinstance(server_ssl, ssl.SSLContext):
            raise TypeError(f"server_ssl must be an ssl.SSLContext, got {type(server_ssl).__name__}")
        context = self.server_ssl if server_ssl is True else server_ssl
        server = await asyncio.get_running_loop().create_server(self._factory(listener, context), sock=sock)
        self._extra_servers.append(server)
        return server.sockets[0].getsockname()[1]

    def _factory(self, listener: str | None, server_ssl: ssl.SSLContext | None) -> Callable[[], asyncio.Protocol]:
        if server_ssl is None:
            return lambda: self._new_inbound(listener)
        return lambda: _TlsAccept(self, listener, server_ssl)

    def _new_inbound(self, listener: str | None = None) -> FrameConnection:
        conn = FrameConnection("inbound", self.config.max_frame_bytes, self._on_guarded_request,
                               self._on_inbound_lost, self._on_rejected, on_read_done=self.read_done)
        conn.listener = listener
        self._connections.add(conn)
        return conn

    async def _handshake(self, raw: asyncio.Transport, listener: str | None, server_ssl: ssl.SSLContext) -> None:
        """Upgrade an accepted TCP connection to TLS; a failure closes it with one log line."""
        peer = peer_label(raw.get_extra_info("peername"))
        conn = self._new_inbound(listener)
        conn.label = f"from {peer}"
        try:
            tls_transport = await asyncio.get_running_loop().start_tls(
                raw, conn, server_ssl, server_side=True,
                ssl_handshake_timeout=self.config.tls_handshake_timeout_ms / 1000)
        except (OSError, TimeoutError) as exc:  # ssl.SSLError, ConnectionAbortedError (timeout), resets
            self.handshakes_failed += 1
            conn.closed = True
            self._connections.discard(conn)
            raw.close()
            log.warning("closing connection from %s: TLS handshake failed: %s", peer, _tls_reason(exc))
            return
        if conn.closed or self.closed:  # lost (or shut down) between the handshake and now
            tls_transport.close()
            return
        conn.connection_made(tls_transport)

    def _on_inbound_lost(self, conn: FrameConnection) -> None:
        self._connections.discard(conn)

    def _on_rejected(self, conn: FrameConnection, why: str) -> None:
        self.frames_rejected += 1

    def _on_guarded_request(self, conn: FrameConnection, frame: bytes) -> None:
        key = frame[:4]
        # hot_codec checks its own lengths, and a frame it leaves to kio is guarded then (_on_request):
        # a Fetch, and a Produce where this class's _on_request reads it (the walk cost ~12 us a commit)
        if key != hot_codec.FETCH_V17_KEY and not (key == hot_codec.PRODUCE_V10_KEY and self._hot_produce
                                                   and self.on_produce is not None):
            check_request_lengths(frame)  # before any kio read: see "the kio length guard" below
        self._on_request(conn, frame)

    def note_trailing(self, conn: FrameConnection, api_key: int, version: int, trailing_bytes: int) -> None:
        """A well-formed request with bytes after its body is served (Kafka's parseRequest reads
        the body and ignores the rest): counted, and one DEBUG line, never a closed connection."""
        if trailing_bytes:
            self.requests_with_trailing_bytes += 1
            log.debug("request from %s: %d bytes after the body of API %d v%d, ignored", conn.label,
                      trailing_bytes, api_key, version)

    def _on_request(self, conn: FrameConnection, frame: bytes) -> None:
        key = frame[:4]
        if key == hot_codec.FETCH_V17_KEY:
            fetch = hot_codec.decode_fetch_request(frame)
            if fetch is not None:
                self._deliver_request(conn, *fetch, hot_codec.FETCH_VERSION)
                return
            check_request_lengths(frame)  # a Fetch in a shape hot_codec leaves to kio: guarded first
        elif key == hot_codec.PRODUCE_V10_KEY and self.on_produce is not None:
            produce = hot_codec.decode_produce_request(frame)
            if produce is not None:
                self._on_produce(conn, *produce)
                return
            check_request_lengths(frame)  # a Produce in a shape hot_codec leaves to kio: guarded first
        rf = wire.parse_request(frame)
        self.note_trailing(conn, rf.api_key, rf.api_version, rf.trailing_bytes)
        if rf.api_key == wire.API_API_VERSIONS:
            conn.write(wire.frame_response(rf.correlation_id, wire.api_versions_response(rf.api_version),
                                           header_v0=True))
        elif rf.api_key == wire.API_PRODUCE:
            if self.on_produce is None:
                raise wire.WireFormatError("this node takes no Produce requests")
            self._on_produce(conn, rf.correlation_id, wire.produce_values(rf.body))
        else:
            source, body = wire.request_from_kio(rf.body)
            self._deliver_request(conn, rf.correlation_id, source, body, rf.api_version)

    def _deliver_request(self, conn: FrameConnection, correlation_id: int, source: int, body, version: int) -> None:
        local = next(self._inbound_ids)
        self._inbound[local] = (conn, correlation_id, version)
        self.deliver(Envelope(source, self.node_id, local, body))

    def _on_produce(self, conn: FrameConnection, corr: int, values: list[bytes]) -> None:
        def reply(error, base_offset: int, leader_id: int, leader_epoch: int, message: str | None = None) -> None:
            conn.write(hot_codec.encode_produce_response(corr, error, base_offset, leader_id, leader_epoch, message))

        self.on_produce(values, reply)

    # -- Channel ----------------------------------------------------------------------------------

    def send(self, env: Envelope) -> None:
        """Channel.send. Never raises into the driver: a message that cannot be encoded (a value
        outside its wire type, e.g. an epoch past i32) is a bug, logged with its traceback; the
        request is dropped, or the connection waiting for the response is closed, and the rest
        of the driver's Ready (other sends, applies) still runs."""
        if self.closed:
            return
        if log.isEnabledFor(logging.DEBUG):
            log.debug("node %d sends %s", self.node_id, env)
        if env.is_request:
            link = self.links.get(env.destination)
            if link is None:
                log.warning("no address for node %d; dropping %s", env.destination, type(env.body).__name__)
                return
            try:
                if type(env.body) is FetchRequest:
                    frame = hot_codec.encode_fetch_request(env.correlation_id, self.client_id, env.body)
                else:
                    frame = wire.encode_request_envelope(env, self.client_id)
            except Exception:  # noqa: BLE001 - see the docstring
                log.exception("cannot encode %s for node %d; dropped", type(env.body).__name__, env.destination)
                return
            link.send(env.correlation_id, env.body, frame)
            return
        entry = self._inbound.pop(env.correlation_id, None)
        if entry is None:
            return
        conn, corr, version = entry
        if conn.closed:
            return
        try:
            body = env.body
            if type(body) is DescribeQuorumResponse:  # the one answer the transport completes
                body = self._describe_quorum_for_the_wire(body)
            if type(body) is FetchResponse:
                frame = hot_codec.encode_fetch_response(corr, body)
            else:
                frame = wire.encode_response_body(corr, body, version)
        except Exception:  # noqa: BLE001 - see the docstring
            log.exception("cannot encode %s; closing connection %s", type(env.body).__name__, conn.label)
            conn.close()
            return
        conn.write(frame)

    def _describe_quorum_for_the_wire(self, body: DescribeQuorumResponse) -> DescribeQuorumResponse:
        """Wall-clock timestamps (_wall_clock_timestamps) and the voters' endpoints (v2 Nodes),
        which only the transport knows."""
        body = _wall_clock_timestamps(body)
        if not self.voter_addresses:
            return body
        return dataclasses.replace(body, nodes=tuple((n, host, port) for n, (host, port)
                                                     in sorted(self.voter_addresses.items())))

    def read_done(self) -> None:
        """FrameConnection's hook after each read: passed on to ``on_read_done``."""
        if self.on_read_done is not None:
            self.on_read_done()

    def receiving_response(self) -> bool:
        """Whether an answer from a peer is partly read (a Fetch answer of megabytes comes in
        several reads): the driver holds its next delivery piece back a little meanwhile."""
        return any(link.conn is not None and link.conn.buffered_bytes for link in self.links.values())

    def deliver(self, env: Envelope) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("node %d receives %s", self.node_id, env)
        self.on_envelope(env)

    # -- shutdown ---------------------------------------------------------------------------------

    async def close(self) -> None:
        self.closed = True
        for link in self.links.values():
            link.close()
        for task in list(self._handshakes):
            task.cancel()
        for conn in list(self._connections):
            conn.close()
        for server in [s for s in (self._server, *self._extra_servers) if s is not None]:
            server.close()
            await server.wait_closed()


class _TlsAccept(asyncio.Protocol):
    """The first protocol of an accepted connection on a TLS listener: stops reading (so the
    ClientHello waits in the socket for the TLS layer) and hands the transport to
    ``RaftTransport._handshake``."""

    def __init__(self, owner: RaftTransport, listener: str | None, server_ssl: ssl.SSLContext):
        self.owner = owner
        self.listener = listener
        self.server_ssl = server_ssl

    def connection_made(self, transport) -> None:
        transport.pause_reading()
        owner = self.owner
        if owner.closed:
            transport.close()
            return
        task = asyncio.get_running_loop().create_task(owner._handshake(transport, self.listener, self.server_ssl))
        owner._handshakes.add(task)
        task.add_done_callback(owner._handshakes.discard)

    def data_received(self, data: bytes) -> None:  # pragma: no cover - reading is paused until start_tls
        raise AssertionError("data before the TLS upgrade")


def _tls_reason(exc: BaseException) -> str:
    """A handshake failure in a few words: OpenSSL's reason (CERTIFICATE_VERIFY_FAILED, ...) when
    there is one, with the verification message."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"{exc.reason}: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _wall_clock_timestamps(body: DescribeQuorumResponse) -> DescribeQuorumResponse:
    """DescribeQuorum's LastFetchTimestamp / LastCaughtUpTimestamp are epoch milliseconds on the wire
    (what Kafka's tools expect); the core keeps them on its monotonic clock. Convert on the way out."""
    offset_ms = time.time_ns() // 1_000_000 - time.monotonic_ns() // 1_000_000

    def wall(replicas):
        return tuple(dataclasses.replace(r, last_fetch_ms=r.last_fetch_ms + offset_ms if r.last_fetch_ms >= 0 else -1,
                                         last_caught_up_ms=r.last_caught_up_ms + offset_ms
                                         if r.last_caught_up_ms >= 0 else -1) for r in replicas)

    return dataclasses.replace(body, voters=wall(body.voters), observers=wall(body.observers))


# ---- the kio length guard ---------------------------------------------------------------------
#
# kio's native (Rust) reader reserves an array's memory from the length on the wire before it
# reads an element: a 24-byte frame whose compact array length says 2**32 makes it ask for
# hundreds of GB, and the allocation failure aborts the whole process (no Python exception to
# catch). So every inbound request, and every response from a peer, is walked here first, field by
# field along kio's own schema (the dataclass fields and their kafka_type metadata, the same
# introspection kio's writer uses), and an array whose count cannot fit in the bytes that are left
# is refused as a WireFormatError before kio sees it. The walk accepts exactly the canonical
# encodings (null markers -1/1, null only where the schema allows it, a known tagged field's value
# filling its declared size); anything else is refused too, so the walk and kio agree on every
# position kio reaches before it stops.
#
#   flexible:     string/bytes/records = uvarint (n + 1, 0 = null) | n bytes
#                 array = uvarint (count + 1, 0 = null) | elements
#                 struct = fields | tagged fields (uvarint count, then uvarint tag | uvarint size | value)
#   non-flexible: string = i16 n (-1 = null), bytes/records = i32 n (-1 = null), array = i32 count (-1 = null)
#   nullable struct (KIP-893): i8 marker (-1 null, 1 present) | struct
#   RequestHeader.client_id is always a non-flexible nullable string.

_FIXED_BYTES = {"int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
                "float64": 8, "uuid": 16, "bool": 1, "error_code": 2, "timedelta_i32": 4, "timedelta_i64": 8,
                "datetime_i64": 8}
_I8, _I16, _I32 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i")
_UVARINT_MAX_BYTES = 5  # a u32 (every length and count here)


class _Bad(Exception):
    def __init__(self, why: str, pos: int):
        super().__init__(f"{why} at byte {pos}")


def _uvarint(buf, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(_UVARINT_MAX_BYTES):
        if pos + i >= end:
            raise _Bad("varint runs past the end", pos)
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos + i + 1
        shift += 7
    raise _Bad("varint longer than 5 bytes", pos)


def _field_op(field, flexible: bool, tagged: bool, legacy_client_id: bool):
    """One schema field -> a walk op: ("fixed", n) | ("str", width, nullable) | ("entity", plan,
    nullable) | ("array", element op, nullable, element minimum bytes). width 0 = compact."""
    kafka_type = field.metadata.get("kafka_type")
    origin = typing.get_origin(field.type)
    nullable = not tagged and origin in (types.UnionType, typing.Union) and type(None) in typing.get_args(field.type)
    inner = field.type
    if nullable:
        inner = next(a for a in typing.get_args(field.type) if a is not type(None))
    if legacy_client_id:
        return ("str", 2, True)
    if typing.get_origin(inner) is tuple:
        element = typing.get_args(inner)[0]
        if kafka_type is None:
            op = ("entity", _plan(element), False)
        else:
            op = _primitive_op(kafka_type, flexible, False)
        return ("array", op, nullable, max(1, _min_bytes(op, flexible)))
    if kafka_type is None:
        return ("entity", _plan(inner), nullable)
    return _primitive_op(kafka_type, flexible, nullable)


def _primitive_op(kafka_type: str, flexible: bool, nullable: bool):
    if kafka_type in _FIXED_BYTES:
        return ("fixed", _FIXED_BYTES[kafka_type])
    if kafka_type in ("string", "bytes", "records"):
        return ("str", 0 if flexible else (2 if kafka_type == "string" else 4), nullable)
    raise TypeError(f"kio kafka_type {kafka_type!r} unknown to the length guard")


def _min_bytes(op, flexible: bool) -> int:
    """The fewest bytes ``op`` can take on the wire (a non-null value; null is never longer)."""
    kind = op[0]
    if kind == "fixed":
        return op[1]
    if kind == "str":
        return op[1] or 1
    if kind == "array":
        return 1 if flexible else 4
    return op[1].min_bytes + (1 if op[2] else 0)


class _Plan:
    __slots__ = ("ops", "tagged", "flexible", "min_bytes")


_PLANS: dict[type, _Plan] = {}


def _plan(entity_type: type) -> _Plan:
    plan = _PLANS.get(entity_type)
    if plan is not None:
        return plan
    plan = _Plan()
    flexible = bool(entity_type.__flexible__)
    is_request_header = entity_type.__name__ == "RequestHeader"
    plan.flexible, plan.ops, plan.tagged = flexible, [], {}
    for field in dataclasses.fields(entity_type):
        tag = field.metadata.get("tag")
        op = _field_op(field, flexible, tag is not None, is_request_header and field.name == "client_id")
        if tag is None:
            plan.ops.append(op)
        else:
            plan.tagged[int(tag)] = op
    plan.min_bytes = sum(_min_bytes(op, flexible) for op in plan.ops) + (1 if flexible else 0)
    _PLANS[entity_type] = plan  # only whole plans are kept (Kafka's schemas have no recursive structs)
    return plan


def _walk(op, buf, pos: int, end: int, flexible: bool) -> int:
    kind = op[0]
    if kind == "fixed":
        if end - pos < op[1]:
            raise _Bad(f"{op[1]}-byte field past the end", pos)
        return pos + op[1]
    if kind == "str":
        n, pos = _length(buf, pos, end, op[1], op[2])
        if n > end - pos:
            raise _Bad(f"{n} bytes of string/bytes but {end - pos} left", pos)
        return pos + max(n, 0)
    if kind == "entity":
        if op[2]:
            if pos >= end:
                raise _Bad("struct null marker past the end", pos)
            (marker,) = _I8.unpack_from(buf, pos)
            pos += 1
            if marker == -1:
                return pos
            if marker != 1:
                raise _Bad(f"struct null marker {marker}", pos - 1)
        return _walk_struct(op[1], buf, pos, end)
    _, element, nullable, element_min = op
    count, pos = _length(buf, pos, end, 0 if flexible else 4, nullable)
    if count > 0 and count * element_min > end - pos:
        raise _Bad(f"array of {count} elements (at least {element_min} bytes each) but {end - pos} bytes left", pos)
    if element[0] == "fixed":
        return pos + max(count, 0) * element[1]
    for _ in range(count):
        pos = _walk(element, buf, pos, end, flexible)
    return pos


def _length(buf, pos: int, end: int, width: int, nullable: bool) -> tuple[int, int]:
    """A string/bytes/array length: compact (width 0) or i16/i32; -1 for null (when allowed)."""
    if width == 0:
        n, pos = _uvarint(buf, pos, end)
        n -= 1
    else:
        if end - pos < width:
            raise _Bad("length past the end", pos)
        (n,) = (_I16 if width == 2 else _I32).unpack_from(buf, pos)
        pos += width
    if n < -1 or (n == -1 and not nullable):
        raise _Bad(f"length {n}", pos)
    return n, pos


def _walk_struct(plan: _Plan, buf, pos: int, end: int) -> int:
    flexible = plan.flexible
    for op in plan.ops:
        pos = _walk(op, buf, pos, end, flexible)
    if not flexible:
        return pos
    count, pos = _uvarint(buf, pos, end)
    if count > end - pos:
        raise _Bad(f"{count} tagged fields but {end - pos} bytes left", pos)
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end)
        size, pos = _uvarint(buf, pos, end)
        if size > end - pos:
            raise _Bad(f"tagged field of {size} bytes but {end - pos} left", pos)
        op = plan.tagged.get(tag)
        if op is not None and _walk(op, buf, pos, pos + size, flexible) != pos + size:
            raise _Bad(f"tagged field {tag} does not fill its {size} bytes", pos)
        pos += size
    return pos


@functools.lru_cache(maxsize=256)  # bounded: a peer may name any (key, version)
def _request_plans(api_key: int, version: int) -> tuple[_Plan, _Plan] | None:
    """(header plan, body plan) of a request kio knows, or None (the handler refuses it)."""
    try:
        body_type = kio_index.load_request_schema(api_key, version)
    except Exception:  # noqa: BLE001 - kio's index raises several kinds for unknown keys/versions
        return None
    header_type = RequestHeaderV2 if body_type.__flexible__ else RequestHeaderV1
    try:
        return _plan(header_type), _plan(body_type)
    except TypeError:  # a field type the guard does not know: no node API uses it (tested)
        log.debug("no length guard for API %d v%d", api_key, version, exc_info=True)
        return None


def check_request_lengths(frame) -> int | None:
    """Raise WireFormatError if a request frame (no size prefix) holds a string, bytes or array
    length that cannot fit in the frame, or an encoding kio's reader would take differently.
    Returns where the body ends (where kio's reader ends too), or None for a request kio does
    not know (its handler refuses it; kio never reads it)."""
    if len(frame) < 4:
        return None  # too short for a header: the handler says so
    api_key, version = _I16.unpack_from(frame, 0)[0], _I16.unpack_from(frame, 2)[0]
    plans = _request_plans(api_key, version)
    if plans is None:
        return None
    try:
        pos = _walk_struct(plans[0], frame, 0, len(frame))
        return _walk_struct(plans[1], frame, pos, len(frame))
    except _Bad as exc:
        raise wire.WireFormatError(f"malformed request (API {api_key} v{version}): {exc}") from None


def check_response_lengths(frame, kio_type: type, *, header_v0: bool = False) -> int:
    """check_request_lengths for a response of ``kio_type`` (header v1, or v0 for ApiVersions)."""
    try:
        pos = _walk_struct(_plan(ResponseHeaderV0 if header_v0 else ResponseHeaderV1), frame, 0, len(frame))
        return _walk_struct(_plan(kio_type), frame, pos, len(frame))
    except _Bad as exc:
        raise wire.WireFormatError(f"malformed {kio_type.__name__}: {exc}") from None
