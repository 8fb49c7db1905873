"""One client connection to a node over Kafka's wire: pipelined requests matched to responses by
correlation id. Every program that talks to a node uses it (the broker and controller channels,
MetadataClient, RaftClient, the tools, the demo).
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections.abc import Callable

from kraftlog.raft import wire
from kraftlog.raft.aio.transport import DEFAULT_MAX_FRAME_BYTES, FrameConnection
from kraftlog.raft.types import RaftError

CLIENT_ID = "kraftlog-client"  # the client id of every request a ClientConnection sends


class ClientError(RaftError):
    """A request the cluster could not answer (no leader found in time, connection lost)."""


class ClientConnection:
    """One connection with pipelined requests matched to responses by correlation id.

    ``ssl_context`` (a client context, e.g. from engine/node/tls.py ``client_context``) makes it a
    TLS connection; ``max_frame_bytes`` bounds a response (the node's own bound by default). A lost
    connection, a TLS failure or a malformed response fails every request in flight with
    ClientError (ssl/OS errors from ``open`` itself propagate: callers treat OSError as unreachable).

    Frames are cut by the transport's FrameConnection (a protocol, not a stream reader task) and a
    response resolves its request's future from the read callback itself: one loop iteration from
    the bytes arriving to the awaiting coroutine running, which is most of a client's share of a
    commit's latency.
    """

    def __init__(self, host: str, port: int, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, *,
                 ssl_context: ssl.SSLContext | None = None, tls_handshake_timeout_ms: int = 10_000):
        self.address = (host, port)
        self.max_frame_bytes = max_frame_bytes
        self.ssl_context = ssl_context
        self.tls_handshake_timeout_ms = tls_handshake_timeout_ms
        self._ids = itertools.count(1)
        # correlation id -> (future, the response frame's decoder, timeout handle or None)
        self._pending: dict[int, tuple[asyncio.Future, Callable[[bytes], object], asyncio.TimerHandle | None]] = {}
        self._conn: FrameConnection | None = None
        self._error: ClientError | None = None  # why the connection ended, once it has
        self._lost: asyncio.Future | None = None  # done once the transport reported connection_lost

    async def open(self) -> None:
        tls = {} if self.ssl_context is None else {
            "ssl": self.ssl_context, "ssl_handshake_timeout": self.tls_handshake_timeout_ms / 1000}
        where = f"{self.address[0]}:{self.address[1]}"
        conn = FrameConnection(f"client to {where}", self.max_frame_bytes, self._on_frame, self._on_lost,
                               self._on_reject)
        loop = asyncio.get_running_loop()
        await loop.create_connection(lambda: conn, *self.address, **tls)
        self._lost = loop.create_future()
        self._conn = conn

    def _on_frame(self, conn: FrameConnection, frame: bytes) -> None:
        # response = header v0/v1 (correlation_id i32 first) | body
        entry = self._pending.pop(wire.response_correlation_id(frame), None)
        if entry is None:
            return  # answers a request that timed out
        future, decode, timer = entry
        if timer is not None:
            timer.cancel()
        try:
            body = decode(frame)
        except wire.WireFormatError as exc:
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(body)

    def _on_reject(self, conn: FrameConnection, why: str) -> None:
        self._error = ClientError(f"connection to {self.address[0]}:{self.address[1]} lost: {why}")

    def _on_lost(self, conn: FrameConnection) -> None:
        error = self._error or ClientError(f"connection to {self.address[0]}:{self.address[1]} closed")
        self._error = error
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)
        pending, self._pending = self._pending, {}
        for future, _, timer in pending.values():
            if timer is not None:
                timer.cancel()
            if not future.done():
                future.set_exception(error)

    def request(self, api_key: int, version: int, body, response_type, *, header_v0: bool = False,
                timeout_s: float | None = None) -> asyncio.Future:
        """Send one request; the future gives the decoded response. With ``timeout_s`` it fails
        with TimeoutError after that long (cheaper than wrapping it in asyncio.wait_for)."""
        return self.request_frame(
            lambda corr: wire.frame_request(api_key, version, corr, CLIENT_ID, body),
            lambda frame: wire.parse_response(frame, response_type, header_v0=header_v0)[1], timeout_s=timeout_s)

    def request_frame(self, frame_of: Callable[[int], bytes], decode: Callable[[bytes], object], *,
                      timeout_s: float | None = None) -> asyncio.Future:
        """``request`` with the codec given: ``frame_of(correlation id)`` is the whole request
        frame, ``decode(response frame)`` the future's result (raft/hot_codec.py's Produce, for one)."""
        if not self.alive:
            raise ClientError(f"connection to {self.address} is closed")
        corr = next(self._ids)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        timer = None if timeout_s is None else loop.call_later(timeout_s, self._expire, corr)
        self._pending[corr] = (future, decode, timer)
        self._conn.write(frame_of(corr))
        return future

    def _expire(self, corr: int) -> None:
        entry = self._pending.pop(corr, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(TimeoutError(f"no answer from {self.address[0]}:{self.address[1]} in time"))

    @property
    def alive(self) -> bool:
        return self._conn is not None and not self._conn.closed

    @property
    def in_flight(self) -> int:
        """Requests written and not yet answered (or timed out)."""
        return len(self._pending)

    async def close(self) -> None:
        conn = self._conn
        if conn is None:
            return
        conn.close()
        if self._lost is not None:
            await self._lost  # connection_lost: the socket is released (StreamWriter.wait_closed's promise)
