"""Requests to the active controller, from the nodes that need one: a broker (registration,
heartbeats, forwarded client requests) and a controller registering itself. The channel follows
the Raft leader the node's metadata log names, else tries the voters in turn.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kraftlog.engine.protocol.connection import ClientConnection, ClientError
from kraftlog.raft.types import NO_ID

log = logging.getLogger("kraftlog.broker")

SECURITY_PROTOCOL_PLAINTEXT, SECURITY_PROTOCOL_SSL = 0, 1


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: int = SECURITY_PROTOCOL_PLAINTEXT



LEADER_CHECK_S = 0.05  # how often a waiting request looks for a leader change


class ControllerChannel:
    """Requests to the active controller: the Raft leader ``publisher`` last heard of, else the
    voters in turn; NOT_CONTROLLER, a lost connection or a timeout moves to the next candidate.
    Used by the broker lifecycle and by controllers registering themselves."""

    def __init__(self, voters: dict[int, tuple[str, int]], publisher, request_timeout_ms: int, *,
                 ssl_context=None):
        self.voters = voters
        self.ssl_context = ssl_context  # mutual TLS towards the controllers (engine/node/tls.py)
        self.publisher = publisher
        self.request_timeout_ms = request_timeout_ms
        self.controller_id = NO_ID  # who answered last
        self._rotation = 0
        self._conns: dict[int, ClientConnection] = {}

    def _candidates(self) -> list[int]:
        leader = self.publisher.leader[0]
        ids = sorted(self.voters)
        k = self._rotation % len(ids)
        return ([leader] if leader in self.voters else []) + [i for i in ids[k:] + ids[:k] if i != leader]

    async def ask(self, api_key: int, version: int, body, response_type, *, timeout_ms: int | None = None):
        """The active controller's answer; Retry when no candidate gave one. ``timeout_ms`` bounds
        each attempt (default: the channel's request timeout). An attempt on a node is given up as
        soon as the metadata log names another node the leader, and the candidates start again
        from that one: a controller that hung or died mid-request costs the time to learn the new
        leader, not a whole timeout."""
        last = "no controller answered"
        timeout_s = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        for _ in range(len(self.voters)):  # passes: a new pass only after the leader moved
            moved = False
            for node in self._candidates():
                try:
                    conn = self._conns.get(node)
                    if conn is None or not conn.alive:
                        conn = self._conns[node] = ClientConnection(*self.voters[node], ssl_context=self.ssl_context)
                        await asyncio.wait_for(conn.open(), timeout_s)
                    resp = await self._answer(conn, node, timeout_s, api_key, version, body, response_type)
                except (TimeoutError, OSError, ClientError, _LeaderMoved) as exc:
                    last = f"controller {node}: {type(exc).__name__} {exc}"
                    log.debug("API %d to %s", api_key, last)
                    stale = self._conns.pop(node, None)
                    if stale is not None:
                        await stale.close()
                    if isinstance(exc, _LeaderMoved):
                        moved = True
                        break
                    continue
                if answered_not_controller(resp):
                    last = f"controller {node}: NOT_CONTROLLER"
                    log.debug("API %d to %s", api_key, last)
                    continue
                self.controller_id = node
                return resp
            if not moved:
                break
        self._rotation += 1
        raise Retry(last)

    async def _answer(self, conn: ClientConnection, node: int, timeout_s: float, *request):
        """``conn``'s answer within ``timeout_s``; _LeaderMoved once the publisher names a leader
        other than ``node`` that it did not name when the attempt began."""
        loop = asyncio.get_running_loop()
        future = conn.request(*request)
        deadline = loop.time() + timeout_s
        leader_before = self.publisher.leader
        try:
            while not future.done():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError(f"no answer within {timeout_s * 1000:.0f} ms")
                await asyncio.wait({future}, timeout=min(remaining, LEADER_CHECK_S))
                leader = self.publisher.leader
                if not future.done() and leader != leader_before and leader[0] in self.voters and leader[0] != node:
                    raise _LeaderMoved(f"node {leader[0]} leads now (epoch {leader[1]})")
        finally:
            # An answer given up on (a timeout, a leader move, this task cancelled at shutdown,
            # where asyncio.wait leaves its futures alone) is cancelled: else the connection's close
            # fails it later and asyncio logs "Future exception was never retrieved" after the
            # node's last line.
            if not future.done():
                future.cancel()
        return future.result()

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()
        self._conns.clear()


def answered_not_controller(resp) -> bool:
    """A controller API answer that says "not the active controller": its top-level error code, or
    (CreateTopics, DeleteTopics, CreatePartitions answer per topic) every topic's."""
    code = getattr(resp, "error_code", None)
    if code is not None:
        return code is ErrorCode.not_controller
    items = next((getattr(resp, f) for f in ("topics", "responses", "results") if hasattr(resp, f)), ())
    return bool(items) and all(i.error_code is ErrorCode.not_controller for i in items)


async def stop_task(task: asyncio.Task | None, poll_s: float = 0.05) -> None:
    """Cancel ``task`` until it is done. Once is not enough on Python 3.11: ``asyncio.wait_for``
    returns the answer instead of raising when the answer and the cancel land in the same loop
    pass, so a loop that was mid-request would carry on (and a stop waiting for it hangs)."""
    while task is not None and not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=poll_s)


class Retry(Exception):
    """This attempt failed for a reason worth retrying (the message says which)."""


class _LeaderMoved(Exception):
    """The metadata log named a new leader while a request waited on another controller."""
