"""Following the committed metadata log from outside the quorum: a consumer of `__cluster_metadata`.

``MetadataLogTail`` reads with Fetch as replica -1 naming no epochs (KIP-392): any voter (on its
controller listener, or a node's only socket) answers with committed batches only, so the tail may read from the
nearest node and survives leader changes without following the leader. It yields what it reads
in offset order, each offset once:

    TailedBatch   a committed batch (records before the position asked for are cut off)
    TailGap       the offsets [from_offset, to_offset) are no longer in the log: the node's log
                  starts later, after a snapshot (``snapshot_id``); the tail goes on from to_offset

How it moves between nodes: ``servers`` are tried in turn. A node that cannot answer (a lost
connection, a timeout, NOT_LEADER_OR_FOLLOWER while it campaigns, OFFSET_NOT_AVAILABLE while it
lags) costs a backoff doubling from ``retry_backoff_ms`` to ``retry_backoff_max_ms`` and a move
to the next server. With a ``rack``, a leader may name a read replica in that rack (KIP-392's
selector); the tail moves there when it knows that node's address (servers given with their node
id), and comes back to its servers when the replica fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from kraftlog.engine.protocol.connection import ClientConnection, ClientError
from kraftlog.errors import KraftlogError
from kraftlog.raft import wire
from kraftlog.raft.messages import FetchRequest, FetchResponse
from kraftlog.raft.types import NO_ID, Errors, OffsetAndEpoch

log = logging.getLogger("kraftlog.tail")

CONSUMER_REPLICA_ID = -1
NO_EPOCH_KNOWN = -1  # a consumer names no leader epoch and no last fetched epoch


class TailError(KraftlogError):
    """The tail cannot go on: a position past the end of the log, or no server for too long."""


@dataclass(frozen=True, slots=True)
class TailedBatch:
    base_offset: int
    next_offset: int
    epoch: int
    control: bool
    records: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class TailGap:
    from_offset: int
    to_offset: int
    snapshot_id: OffsetAndEpoch | None


@dataclass(frozen=True, slots=True)
class Server:
    host: str
    port: int
    node_id: int = NO_ID  # known only when given as ID@HOST:PORT; needed to follow a read replica


def parse_servers(text: str) -> list[Server]:
    """``HOST:PORT[,...]``, each optionally ``ID@HOST:PORT``; ValueError naming a bad entry."""
    servers = []
    for item in (part.strip() for part in text.split(",")):
        node, _, address = item.rpartition("@")
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or (node and not node.isdigit()):
            raise ValueError(f"{item!r} is not HOST:PORT or ID@HOST:PORT")
        servers.append(Server(host, int(port), int(node) if node else NO_ID))
    if not servers:
        raise ValueError("no server given")
    return servers


class MetadataLogTail:
    def __init__(self, servers: Sequence[Server], *, from_offset: int = 0, rack: str | None = None,
                 max_wait_ms: int = 500, max_bytes: int = 1 << 20, request_timeout_ms: int = 5_000,
                 retry_backoff_ms: int = 100, retry_backoff_max_ms: int = 2_000, give_up_after_ms: int | None = None,
                 ssl_context=None):
        if from_offset < 0:
            raise ValueError(f"from_offset {from_offset} is negative")
        self.servers = list(servers)
        self.position = from_offset  # the next offset to yield
        self.rack = rack
        self.max_wait_ms, self.max_bytes = max_wait_ms, max_bytes
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms, self.retry_backoff_max_ms = retry_backoff_ms, retry_backoff_max_ms
        self.give_up_after_ms = give_up_after_ms
        self.ssl_context = ssl_context
        self.source: Server = self.servers[0]  # where the next Fetch goes
        self._next_server = 1
        self._conn: ClientConnection | None = None
        self._backoff_ms = retry_backoff_ms
        self._failing_since: float | None = None

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def __aiter__(self) -> AsyncIterator[TailedBatch | TailGap]:
        while True:
            response = await self._fetch()
            if response is None:
                await self._fail_over()
                continue
            for item in self._consume(response):
                yield item

    # -- one Fetch ------------------------------------------------------------------------------------

    async def _fetch(self) -> FetchResponse | None:
        """The answer of the current source, or None when it could not give one."""
        req = FetchRequest(None, CONSUMER_REPLICA_ID, self.max_wait_ms, self.max_bytes, NO_EPOCH_KNOWN,
                           self.position, NO_EPOCH_KNOWN, 0, self.rack)
        api = wire.APIS[FetchRequest]
        try:
            conn = await self._connection()
            msg = await conn.request(api.key, api.version, wire.request_to_kio(req), api.response,
                                     timeout_s=(self.max_wait_ms + self.request_timeout_ms) / 1000)
            response = wire.response_from_kio(msg, req)
        except (OSError, TimeoutError, ClientError, wire.WireFormatError) as exc:
            log.info("%s:%d: %s: %s", self.source.host, self.source.port, type(exc).__name__, exc)
            await self.close()
            return None
        if response.error_code is not Errors.NONE:
            log.info("%s:%d: %s", self.source.host, self.source.port, response.error_code.name)
            return None
        if response.partition_error is Errors.OFFSET_OUT_OF_RANGE and self.position > response.high_watermark:
            raise TailError(f"offset {self.position} is past the end of the committed log at "
                            f"{self.source.host}:{self.source.port} (high watermark {response.high_watermark})")
        if response.partition_error not in (Errors.NONE, Errors.OFFSET_OUT_OF_RANGE):
            log.info("%s:%d: %s", self.source.host, self.source.port, response.partition_error.name)
            return None
        self._backoff_ms, self._failing_since = self.retry_backoff_ms, None
        return response

    async def _connection(self) -> ClientConnection:
        if self._conn is None:
            conn = ClientConnection(self.source.host, self.source.port, ssl_context=self.ssl_context)
            await asyncio.wait_for(conn.open(), self.request_timeout_ms / 1000)
            self._conn = conn
        return self._conn

    def _consume(self, response: FetchResponse):
        """The items one good answer gives, and where the next Fetch goes."""
        if response.partition_error is Errors.OFFSET_OUT_OF_RANGE:  # before the log start
            gap = TailGap(self.position, response.log_start_offset, response.snapshot_id)
            self.position = response.log_start_offset
            yield gap
            return
        for batch in response.batches:
            if batch.next_offset <= self.position:
                continue
            cut = max(0, self.position - batch.base_offset)  # the first batch may start before us
            # the position moves before the yield: a reader may stop iterating at any item
            self.position = batch.next_offset
            yield TailedBatch(batch.base_offset + cut, batch.next_offset, batch.epoch, batch.control,
                              tuple(batch.records)[cut:])
        self._follow_read_replica(response.preferred_read_replica)

    def _follow_read_replica(self, replica_id: int) -> None:
        if replica_id == NO_ID or replica_id == self.source.node_id:
            return
        known = next((s for s in self.servers if s.node_id == replica_id), None)
        if known is not None:
            log.info("reading from node %d (%s:%d), the leader's choice for rack %s", replica_id, known.host,
                     known.port, self.rack)
            self.source = known
            self._conn_closing()

    def _conn_closing(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            asyncio.get_running_loop().create_task(conn.close())

    async def _fail_over(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._failing_since is None:
            self._failing_since = now
        elif self.give_up_after_ms is not None and (now - self._failing_since) * 1000 >= self.give_up_after_ms:
            raise TailError(f"no server answered for {self.give_up_after_ms} ms (last: {self.source.host}:"
                            f"{self.source.port})")
        self._conn_closing()
        self.source = self.servers[self._next_server % len(self.servers)]
        self._next_server += 1
        await asyncio.sleep(self._backoff_ms / 1000)
        self._backoff_ms = min(self._backoff_ms * 2, self.retry_backoff_max_ms)
