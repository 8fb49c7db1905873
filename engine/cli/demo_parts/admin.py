"""The demo's Kafka client side: CreateTopics to the active controller, Metadata from any node.

Plain Kafka requests over `raftnode.ClientConnection` (kio types): what an admin client and a
metadata client send. Metadata answers are read with ``EpochMetadataResponse``, which declares our
KIP-232 tagged fields (topic epochs, the answering image's offset): the offset says how far a node
has replayed, which is how the tour tells that a broker has caught up.
"""

from __future__ import annotations

import asyncio

from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.create_topics.v7 import response as ct_resp
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req
from kio.static.primitive import i16, i32

from kraftlog.engine.cli.demo_parts.errors import QuorumError
from kraftlog.engine.protocol.connection import ClientConnection, ClientError
from kraftlog.engine.protocol.metadata_response import EpochMetadataResponse

API_METADATA, API_CREATE_TOPICS = 3, 19
REQUEST_TIMEOUT_S = 60.0
POLL_INTERVAL_S = 0.05


class Admin:
    """Connections to the demo's nodes by id (reopened after a restart)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self._conns: dict[int, ClientConnection] = {}

    async def conn(self, node_id: int) -> ClientConnection:
        conn = self._conns.get(node_id)
        if conn is None or not conn.alive:
            conn = self._conns[node_id] = ClientConnection(*self.cluster.address(node_id))
            await conn.open()
        return conn

    def forget(self, node_id: int) -> None:
        self._conns.pop(node_id, None)

    async def metadata(self, node_id: int, topics: list[str] | None = None) -> EpochMetadataResponse:
        """Metadata v12 from ``node_id``: all topics (None), the named ones, or none ([])."""
        names = None if topics is None else tuple(md_req.MetadataRequestTopic(topic_id=None, name=n) for n in topics)
        req = md_req.MetadataRequest(topics=names, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False)
        conn = await self.conn(node_id)
        return await asyncio.wait_for(conn.request(API_METADATA, 12, req, EpochMetadataResponse), REQUEST_TIMEOUT_S)

    async def create_topics(self, controller_id: int, names: list[str], partitions: int,
                            replication_factor: int) -> ct_resp.CreateTopicsResponse:
        req = ct_req.CreateTopicsRequest(topics=tuple(
            ct_req.CreatableTopic(name=n, num_partitions=i32(partitions), replication_factor=i16(replication_factor),
                                  assignments=(), configs=()) for n in names))
        conn = await self.conn(controller_id)
        return await asyncio.wait_for(conn.request(API_CREATE_TOPICS, 7, req, ct_resp.CreateTopicsResponse),
                                      REQUEST_TIMEOUT_S)

    async def create_checked(self, controller_id: int, names: list[str], partitions: int,
                             replication_factor: int) -> None:
        """CreateTopics that must succeed for every topic; QuorumError naming the first failure."""
        resp = await self.create_topics(controller_id, names, partitions, replication_factor)
        for t in resp.topics:
            if t.error_code is not ErrorCode.none:
                raise QuorumError(f"controller {controller_id} refused topic {t.name}: {t.error_code.name} "
                                  f"{t.error_message or ''}".strip())

    async def image_offset(self, node_id: int) -> int:
        """The offset of the last record in ``node_id``'s image (-1 before any)."""
        return int((await self.metadata(node_id, [])).metadata_offset)

    async def live_brokers(self, node_id: int) -> set[int]:
        return {int(b.node_id) for b in (await self.metadata(node_id, [])).brokers}

    async def wait_until(self, predicate, timeout_s: float, what: str, describe_nodes) -> float:
        """Poll ``predicate`` (async, may raise on a node that is down) until true; returns the
        seconds it took, QuorumError naming ``what`` and the nodes otherwise."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        last: object = None
        while loop.time() - started < timeout_s:
            try:
                if await predicate():
                    return loop.time() - started
            except (OSError, ClientError, TimeoutError) as exc:
                last = exc
            await asyncio.sleep(POLL_INTERVAL_S)
        raise QuorumError(f"{what} not reached within {timeout_s:.0f} s"
                          + (f" (last error: {last})" if last else "") + f"; nodes: {describe_nodes()}")

    async def close(self) -> None:
        for conn in self._conns.values():
            await conn.close()
        self._conns.clear()
