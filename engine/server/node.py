"""A KRaft node process in the controller role: Raft (raftnode.py's parts) + a live metadata image +
the controller's request handlers (controller.py), all on one asyncio loop and one listening socket.

    kraftlog node run --node-id 1 --controller-quorum-voters 1@h:p,2@h:p,3@h:p --dir DIR
                      [--listen host:port | --listen-fd FD] [--cluster-id ID]

``DIR`` must be formatted (``kraftlog storage format``): its meta.properties gives the cluster id and
must carry this node id. Layout (Kafka's, so the tools read it as they read a Kafka node's)::

    DIR/meta.properties
    DIR/__cluster_metadata-0/   log segments + indexes, leader-epoch-checkpoint, quorum-state,
                                <end offset>-<epoch>.checkpoint snapshots

One socket serves everything (Kafka's wire; responses with header v1 except ApiVersions' v0):
    raft         Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum, Fetch, FetchSnapshot,
                 Produce (raftnode.py's client API, left as it is)
    controller   CreateTopics v7, BrokerRegistration v4, BrokerHeartbeat v1 (writes: the active
                 controller only, NOT_CONTROLLER elsewhere), Metadata v12 (read-only, this node's
                 own image: a standby answers from what it has replayed)
    ApiVersions  v3-v4, listing both sets

Controller responses go out in request order on each connection (Kafka's promise), even though
their handlers finish out of order. The process prints ``READY node=<id> port=<port>`` once it
listens, logs to stderr, and on SIGTERM/SIGINT resigns if it leads and exits 0.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import logging
import os

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader
from kio.static.primitive import i16

from kraftlog.engine.server.controller import (
    API_METADATA,
    CONTROLLER_APIS,
    Controller,
    ControllerConfig,
    ImagePublisher,
)
from kraftlog.engine.server.raftnode import RaftNode, parse_voters
from kraftlog.engine.server.raftnode import serve as serve_node
from kraftlog.errors import KraftlogError
from kraftlog.raft import wire
from kraftlog.raft.aio.driver import DriverConfig
from kraftlog.raft.aio.transport import FrameConnection, RaftTransport
from kraftlog.raft.core import RaftConfig

log = logging.getLogger("kraftlog.node")

METADATA_LOG_DIRNAME = "__cluster_metadata-0"  # as engine/server/tools/common.py names it


class NodeError(KraftlogError):
    """The node cannot start (unformatted directory, ids that do not match, bad voters)."""


# ---- the transport: raft's, plus the controller APIs ------------------------------------------------


class ControllerTransport(RaftTransport):
    """RaftTransport that also answers the controller APIs (``controller`` set after construction)
    and lists them in ApiVersions. Raft's own APIs go to the parent unchanged."""

    controller: Controller | None = None

    def _on_request(self, conn: FrameConnection, frame: bytes) -> None:
        api_key, version, _ = wire.peek_request_header(frame)
        if api_key == wire.API_API_VERSIONS:
            rf = wire.parse_request(frame)
            self._respond(conn, _api_versions_response(rf.api_version), rf.correlation_id, header_v0=True)
            return
        spec = CONTROLLER_APIS.get(api_key)
        if spec is None or self.controller is None:
            super()._on_request(conn, frame)
            return
        served, request_type, _ = spec
        if version != served:
            self.frames_rejected += 1
            raise wire.WireFormatError(f"unsupported API key {api_key} version {version} (served: v{served})")
        correlation_id, body = _parse(frame, request_type, api_key)
        if api_key == API_METADATA:
            self._respond(conn, self.controller.metadata(body), correlation_id)
            return
        handler = self.controller.write_handlers()[api_key]
        self._respond_later(conn, correlation_id, asyncio.get_running_loop().create_task(handler(body)))

    def _queue(self, conn: FrameConnection) -> collections.deque:
        queue = getattr(conn, "kraftlog_responses", None)
        if queue is None:
            queue = conn.kraftlog_responses = collections.deque()
        return queue

    def _respond(self, conn: FrameConnection, body, correlation_id: int, *, header_v0: bool = False) -> None:
        queue = self._queue(conn)
        if not queue:
            conn.write(wire.frame_response(correlation_id, body, header_v0=header_v0))
            return
        done = asyncio.get_running_loop().create_future()
        done.set_result(body)
        queue.append((correlation_id, done, header_v0))

    def _respond_later(self, conn: FrameConnection, correlation_id: int, task: asyncio.Task) -> None:
        self._queue(conn).append((correlation_id, task, False))
        task.add_done_callback(lambda _: self._flush(conn))

    def _flush(self, conn: FrameConnection) -> None:
        """Write the finished responses at the head of the queue (request order)."""
        queue = self._queue(conn)
        while queue and queue[0][1].done():
            correlation_id, future, header_v0 = queue.popleft()
            if future.cancelled():
                continue
            if future.exception() is not None:
                log.error("controller handler failed; closing %s", conn.label, exc_info=future.exception())
                conn.close()
                return
            conn.write(wire.frame_response(correlation_id, future.result(), header_v0=header_v0))


def _parse(frame: bytes, request_type: type, api_key: int):
    """(correlation id, kio body) of a controller request; WireFormatError if it does not decode
    exactly (the transport then closes that connection)."""
    try:
        header, pos = entity_reader(RequestHeader)(frame, 0)
        body, size = entity_reader(request_type)(frame, pos)
    except Exception as exc:  # kio raises many kinds (ValueError, IndexError, UnicodeDecodeError, ...)
        raise wire.WireFormatError(f"malformed request (API {api_key}): {type(exc).__name__}: {exc}") from None
    if pos + size != len(frame):
        raise wire.WireFormatError(f"{len(frame) - pos - size} bytes after the body of API {api_key}")
    return header.correlation_id, body


def supported_api_versions() -> list[tuple[int, int, int]]:
    """Raft's APIs and the controller's: (api key, min version, max version)."""
    rows = wire.supported_api_versions() + [(k, v, v) for k, (v, _, _) in CONTROLLER_APIS.items()]
    return sorted(rows)


def _api_versions_response(version: int):
    _, resp_type, row_type = wire._API_VERSIONS[version]
    keys = tuple(row_type(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                 for k, lo, hi in supported_api_versions())
    return resp_type(error_code=ErrorCode.none, api_keys=keys, throttle_time=datetime.timedelta(0))


# ---- the node ----------------------------------------------------------------------------------------


class ControllerNode(RaftNode):
    """RaftNode's parts in Kafka's directory layout, with the ImagePublisher as the Raft listener
    and a ControllerTransport; ``start``/``stop`` are RaftNode's (plus the controller's tasks)."""

    def __init__(self, node_id: int, voters: dict[int, tuple[str, int]], directory: str, *, cluster_id: str,
                 config: RaftConfig | None = None, driver_config: DriverConfig | None = None,
                 controller_config: ControllerConfig | None = None, seed: int | None = None):
        super().__init__(node_id, voters, directory, cluster_id=cluster_id, config=config,
                         driver_config=driver_config, seed=seed)
        self.controller = Controller(node_id, cluster_id, self.driver, self.machine, controller_config, rng=self.rng)
        self.transport.controller = self.controller

    def layout(self, directory: str) -> tuple[str, str, str]:
        """Kafka's layout: segments, snapshots and quorum-state all in DIR/__cluster_metadata-0."""
        partition_dir = os.path.join(directory, METADATA_LOG_DIRNAME)
        return partition_dir, partition_dir, partition_dir

    def make_listener(self):
        return ImagePublisher(on_leader_change=self._leader_changed)

    def make_transport(self, node_id: int, voters: dict[int, tuple[str, int]]):
        return ControllerTransport(node_id, voters)

    @property
    def image(self):
        return self.machine.image

    def _leader_changed(self, leader_id: int, epoch: int) -> None:
        self.controller.on_leader_change(leader_id, epoch)

    async def stop(self, *, resign: bool = True) -> None:
        await self.controller.close()
        await super().stop(resign=resign)


# ---- the process ---------------------------------------------------------------------------------------


def check_directory(directory: str, node_id: int, cluster_id: str | None) -> str:
    """The cluster id of a formatted ``directory`` whose meta.properties carries ``node_id``;
    NodeError otherwise (one line naming the problem and the fix)."""
    from kraftlog.engine.server.tools import metaprops
    from kraftlog.engine.server.tools.common import ToolError

    if not os.path.isdir(directory):
        raise NodeError(f"{directory} is not a directory; create and format it with: kraftlog storage format "
                        f"--cluster-id $(kraftlog storage random-uuid) --node-id {node_id} --dir {directory}")
    try:
        props = metaprops.read(directory)
        if props is None:
            raise NodeError(f"{directory} is not formatted (no meta.properties); format it with: kraftlog storage "
                            f"format --cluster-id $(kraftlog storage random-uuid) --node-id {node_id} --dir {directory}")
        metaprops.check(directory, props)
    except ToolError as exc:
        raise NodeError(str(exc)) from None
    if props.get("node.id") != str(node_id):
        raise NodeError(f"{directory} was formatted for node.id {props.get('node.id')}, not --node-id {node_id}")
    formatted = props["cluster.id"]
    if cluster_id is not None and cluster_id != formatted:
        raise NodeError(f"--cluster-id {cluster_id} differs from cluster.id {formatted} in {directory}/meta.properties")
    return formatted


async def serve(args) -> int:
    """Run the node until SIGTERM/SIGINT."""
    try:
        voters = parse_voters(args.controller_quorum_voters)
    except ValueError as exc:
        raise NodeError(f"--controller-quorum-voters: {exc}") from None
    if args.node_id not in voters:
        raise NodeError(f"node {args.node_id} is not among --controller-quorum-voters {sorted(voters)}: "
                        "the controller role needs a voter id")
    cluster_id = check_directory(args.dir, args.node_id, args.cluster_id)
    config = RaftConfig(election_timeout_ms=args.election_timeout_ms, fetch_timeout_ms=args.fetch_timeout_ms,
                        request_timeout_ms=args.request_timeout_ms, fetch_max_wait_ms=args.fetch_max_wait_ms)
    controller_config = ControllerConfig(session_timeout_ms=args.session_timeout_ms)
    try:
        node = ControllerNode(args.node_id, voters, args.dir, cluster_id=cluster_id, config=config,
                              controller_config=controller_config)
    except ValueError as exc:  # timeouts that cannot work together (RaftNode says which)
        raise NodeError(str(exc)) from None
    await serve_node(node, args.listen_fd, args.listen, voters[args.node_id])
    image = node.image
    log.info("stopped at offset %d: %d topics, %d partitions, %d brokers", node.machine.next_offset,
             image.topics.live_topics, image.topics.partition_count, len(image.cluster.brokers))
    return 0
