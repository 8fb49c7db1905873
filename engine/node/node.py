"""A KRaft node process: Raft (raftnode.py's parts) + a live metadata image + its roles, all on
one asyncio loop and one listening socket.

    kraftlog node run --node-id N --controller-quorum-voters 1@h:p,2@h:p,3@h:p --dir DIR
                      [--process-roles controller|broker|broker,controller] [--config FILE]
                      [--listen host:port | --listen-fd FD] [--cluster-id ID] [--rack R]

Roles (KIP-500):
    controller   a Raft voter; when it leads it is the active controller, the only writer of
                 metadata records (controller.py); standbys replicate and replay.
    broker       a Raft observer: it pulls the committed metadata log from the voters (a snapshot
                 when it is too far behind), keeps log and snapshots in its own directory, and
                 registers/heartbeats with the active controller (broker.py); on SIGTERM it asks
                 for a controlled shutdown first.
    both         combined mode: a voter that also registers as a broker (the single-node default).

``DIR`` must be formatted (``kraftlog storage format``): its meta.properties gives the cluster id and
must carry this node id. Layout (Kafka's, so the tools read it as they read a Kafka node's)::

    DIR/meta.properties
    DIR/__cluster_metadata-0/             log segments + indexes, leader-epoch-checkpoint, quorum-state
    DIR/__cluster_metadata-0/snapshots/   the LMDB snapshot store (engine/snapshot)

Snapshots: every node writes one from its in-memory image after ``snapshot_max_new_bytes`` of new
log or ``snapshot_interval_ms`` (Kafka's metadata.log.max.record.bytes.between.snapshots and
metadata.log.max.snapshot.interval.ms), off the event loop (the image is immutable); then the log
start advances past it. A restarted node loads its newest snapshot and replays only the log after.

Listeners (Kafka's wire; responses with header v1 except ApiVersions' v0): as Kafka splits them
(listeners.py), a controller listener serves Raft and the controller RPCs, a broker listener the
client APIs (LISTENER_RAFT_APIS / LISTENER_NODE_APIS below); one socket for every role when the node
is started without controller.listener.names. ApiVersions lists exactly what the listener serves:
    raft         Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum, Fetch, FetchSnapshot
                 (controller listener; DescribeQuorum on a broker listener too)
    Produce      listed on no listener, refused on every role: only the active controller writes
                 the metadata log, through its own handlers (NodeTransport._refuse_produce); the
                 bare Raft log node
                 (raftnode.py, the embedded log backend) is the one that takes Produce
    controller   CreateTopics, DeleteTopics, CreatePartitions, AlterPartition, BrokerRegistration,
                 BrokerHeartbeat (protocol/apis.py), UpdateFeatures (features.py),
                 ControllerRegistration (controller_registration.py): controller role only; the
                 active controller writes, every other node answers NOT_CONTROLLER
    Metadata     v12, every role, from this node's own image (a lagging node answers what it has)
    OffsetsForLeaderEpoch  v4 on __cluster_metadata-0, every role (epoch_offsets.py)
    ApiVersions  v0-v4, listing what this listener serves, with supported and finalized features

Controller responses go out in request order on each connection (Kafka's promise), even though
their handlers finish out of order. The process prints ``READY node=<id> port=<port>`` once it
listens, logs to stderr, and on SIGTERM/SIGINT resigns if it leads and exits 0.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader
from kio.static.primitive import i16, i32, i64

from kraftlog.engine.broker.epoch_offsets import answer as answer_epoch_offsets
from kraftlog.engine.broker.forwarding import FORWARDED_APIS, Forwarder
from kraftlog.engine.broker.lifecycle import BrokerConfig, BrokerLifecycle
from kraftlog.engine.broker.metadata_answer import answer_metadata, controller_for
from kraftlog.engine.controller.controller import Controller, ControllerConfig, ImagePublisher
from kraftlog.engine.controller.features import (
    api_versions_feature_fields,
    handle_update_features,
    supported_features,
)
from kraftlog.engine.controller.registration import ControllerRegistrar, handle_controller_registration
from kraftlog.engine.image import versions
from kraftlog.engine.layout import METADATA_LOG_DIRNAME, SNAPSHOT_DIRNAME
from kraftlog.engine.node.listeners import (
    KIND_BOTH,
    KIND_BROKER,
    KIND_CONTROLLER,
    NodeListener,
    advertised_host,
)
from kraftlog.engine.node.raftnode import RaftNode, listening_socket, parse_voters
from kraftlog.engine.node.raftnode import serve as serve_node
from kraftlog.engine.protocol import hot_create_topics, older_versions
from kraftlog.engine.protocol.apis import (
    API_CONTROLLER_REGISTRATION,
    API_CREATE_TOPICS,
    API_METADATA,
    API_OFFSETS_FOR_LEADER_EPOCH,
    API_UPDATE_FEATURES,
    CONTROLLER_APIS,
    CONTROLLER_REGISTRATION_API,
    OFFSETS_FOR_LEADER_EPOCH_API,
    UPDATE_FEATURES_API,
)
from kraftlog.engine.protocol.controller_channel import (
    SECURITY_PROTOCOL_PLAINTEXT,
    SECURITY_PROTOCOL_SSL,
    Listener,
)
from kraftlog.engine.snapshot.store import SnapshotStore
from kraftlog.errors import KraftlogError
from kraftlog.raft import wire
from kraftlog.raft.aio.driver import DriverConfig
from kraftlog.raft.aio.transport import FrameConnection, RaftTransport, TransportConfig
from kraftlog.raft.core import RaftConfig

log = logging.getLogger("kraftlog.node")

ROLE_CONTROLLER, ROLE_BROKER = "controller", "broker"
# what a node serves beyond raft: a controller all of these; a broker Metadata and
# OffsetsForLeaderEpoch, and forwards the clients' controller APIs and DescribeQuorum to the
# active controller (engine/broker/forwarding.py)
NODE_CONTROLLER_APIS = {**CONTROLLER_APIS, API_UPDATE_FEATURES: UPDATE_FEATURES_API,
                        API_CONTROLLER_REGISTRATION: CONTROLLER_REGISTRATION_API,
                        API_OFFSETS_FOR_LEADER_EPOCH: OFFSETS_FOR_LEADER_EPOCH_API}
_BROKER_APIS = {API_METADATA: CONTROLLER_APIS[API_METADATA],
                API_OFFSETS_FOR_LEADER_EPOCH: OFFSETS_FOR_LEADER_EPOCH_API,
                **{k: NODE_CONTROLLER_APIS[k] for k in sorted(FORWARDED_APIS)}}  # forwarded (forwarding.py)
# What each listener serves (Kafka's split, listeners.py): raft's APIs it answers, then the node's
# own. A controller listener: Raft and the controller RPCs. A broker listener: the client APIs and
# DescribeQuorum (forwarded to the active controller on a broker-only node); not Fetch, which is
# Raft's (v17, the metadata log only): a consumer that sees it at v17 alone either finds no version
# it speaks or, aiokafka, picks v17 and fails inside its fetcher. One socket for both roles (no
# controller.listener.names): the union, Fetch v17 included. Produce is listed on none: only the
# active controller writes the metadata log, so a client sees at once that it cannot produce (one
# sent anyway is refused per partition, _refuse_produce).
_RAFT_APIS = frozenset({wire.API_FETCH, wire.API_VOTE, wire.API_BEGIN_QUORUM_EPOCH, wire.API_END_QUORUM_EPOCH,
                        wire.API_DESCRIBE_QUORUM, wire.API_FETCH_SNAPSHOT})
LISTENER_RAFT_APIS = {KIND_CONTROLLER: _RAFT_APIS, KIND_BOTH: _RAFT_APIS,
                      KIND_BROKER: frozenset({wire.API_DESCRIBE_QUORUM})}
LISTENER_NODE_APIS = {KIND_CONTROLLER: NODE_CONTROLLER_APIS, KIND_BOTH: NODE_CONTROLLER_APIS,
                      KIND_BROKER: _BROKER_APIS}


class NodeError(KraftlogError):
    """The node cannot start (unformatted directory, ids that do not match, bad voters or roles)."""


# ---- the transport: raft's, plus Metadata, ApiVersions and the controller APIs --------------------


class NodeTransport(RaftTransport):
    """RaftTransport that also answers Metadata (from ``publisher``'s image), ApiVersions, and, on
    a controller, the controller's write APIs. ``publisher`` is set after construction, the
    controller with ``serve_controller``. Raft's own APIs go to the parent unchanged."""

    publisher: ImagePublisher | None = None
    controller: Controller | None = None
    cluster_id: str | None = None
    supported: list[tuple[str, int, int]] = []  # this node's feature ranges, for ApiVersions
    metrics = None  # metrics.NodeMetrics when the node exports metrics
    core = None  # the RaftCore, for OffsetsForLeaderEpoch
    forward: Forwarder | None = None  # a broker-only node's way to the active controller
    is_broker = False  # Metadata's ControllerId: a live broker when a broker answers (metadata_answer.py)
    caught_up: asyncio.Event | None = None  # a broker's initial catch-up: Metadata waits for it
    # by FrameConnection.listener (None: the main socket, RaftTransport.start): its name and kind
    listeners: dict[str | None, NodeListener] = {}

    def _listener(self, conn: FrameConnection) -> NodeListener:
        return self.listeners[conn.listener]

    def _kind(self, conn: FrameConnection) -> str:
        return self.listeners[conn.listener].kind if self.listeners else KIND_BOTH

    def _served(self, conn: FrameConnection) -> dict[int, tuple[int, type, type]]:
        return LISTENER_NODE_APIS[self._kind(conn)]

    def _not_here(self, conn: FrameConnection, api_key: int) -> wire.WireFormatError:
        """Kafka closes a connection that sends an API its listener does not enable (the transport
        logs this one line and closes it)."""
        listener = self._listener(conn)
        return wire.WireFormatError(f"API {api_key} is not served on the {listener.kind} listener {listener.name}: "
                                    "it is for the controller listener")

    def serve_controller(self, controller: Controller) -> None:
        """Answer the controller APIs with ``controller``'s handlers (the table is built once)."""
        self.controller = controller
        self._handlers = {**controller.write_handlers(),
                          API_UPDATE_FEATURES: lambda req: handle_update_features(controller, req),
                          API_CONTROLLER_REGISTRATION: lambda req: handle_controller_registration(controller, req)}

    def _on_request(self, conn: FrameConnection, frame: bytes) -> None:
        api_key, version, _ = wire.peek_request_header(frame)
        if self.metrics is not None:
            self.metrics.request_seen(api_key)
        kind = self._kind(conn)
        if api_key in _RAFT_APIS and api_key not in LISTENER_RAFT_APIS[kind]:
            raise self._not_here(conn, api_key)
        if api_key == wire.API_PRODUCE:
            self._refuse_produce(conn, wire.parse_request(frame))
            return
        if api_key == wire.API_DESCRIBE_QUORUM and self.forward is not None:
            rf = wire.parse_request(frame)
            self.note_trailing(conn, api_key, version, rf.trailing_bytes)
            self._respond_later(conn, rf.correlation_id,
                                asyncio.get_running_loop().create_task(self.forward.describe_quorum()))
            return
        if api_key == wire.API_API_VERSIONS and version not in wire._API_VERSIONS:
            # KIP-511: an ApiVersions version we do not serve is answered, not dropped: v0's shape,
            # UNSUPPORTED_VERSION and our ApiVersions range, so the client retries with one we know
            correlation_id = wire.peek_request_header(frame)[2]
            self._respond(conn, _unsupported_api_versions(), correlation_id, header_v0=True)
            return
        if api_key == wire.API_API_VERSIONS:
            rf = wire.parse_request(frame)
            self.note_trailing(conn, api_key, version, rf.trailing_bytes)
            image = self.publisher.image if self.publisher is not None else None
            self._respond(conn, _api_versions_response(rf.api_version, kind, image, self.supported),
                          rf.correlation_id, header_v0=True)
            return
        spec = self._served(conn).get(api_key) if self.publisher is not None else None
        if spec is None:
            if api_key in NODE_CONTROLLER_APIS and self.publisher is not None:
                raise self._not_here(conn, api_key)
            super()._on_request(conn, frame)
            return
        served, served_request, served_response = spec
        if version == served:
            correlation_id, body, trailing_bytes = _parse(frame, served_request, api_key)
            back = None
        else:  # an older version: read with its own type, handled as the served one (older_versions.py)
            low, high = older_versions.version_range(api_key, served)
            if not low <= version <= high:
                raise wire.WireFormatError(f"unsupported API key {api_key} version {version} (served: v{low}-v{high})")
            correlation_id, old, trailing_bytes = _parse(frame, older_versions.request_type(api_key, version), api_key)
            body = older_versions.to_served(api_key, old, served_request)
            back = older_versions.response_type(api_key, version)
        self.note_trailing(conn, api_key, version, trailing_bytes)
        self._serve(conn, api_key, served, served_response, correlation_id, body, back)

    def _on_guarded_request(self, conn: FrameConnection, frame: bytes) -> None:
        """A CreateTopics v7 in the shape hot_create_topics reads skips the generic length guard
        (it checked every length itself; the guard's walk was most of this request's decoding
        cost) and kio's header reader; every other frame, and any CreateTopics it leaves, goes the
        transport's way (guard, then _on_request) as before."""
        if frame[:4] == hot_create_topics.CREATE_TOPICS_V7_KEY and self.publisher is not None:
            spec = self._served(conn).get(API_CREATE_TOPICS)
            decoded = hot_create_topics.decode_request(frame) if spec is not None else None
            if decoded is not None:
                if self.metrics is not None:
                    self.metrics.request_seen(API_CREATE_TOPICS)
                self._serve(conn, API_CREATE_TOPICS, spec[0], spec[2], *decoded, None)
                return
        super()._on_guarded_request(conn, frame)

    def _serve(self, conn: FrameConnection, api_key: int, served: int, served_response: type, correlation_id: int,
               body, back: type | None) -> None:
        """Answer a decoded request of the node's own APIs (``body`` of the served version;
        ``back``: the older version's response type to answer in, else None)."""
        loop = asyncio.get_running_loop()
        if api_key == API_OFFSETS_FOR_LEADER_EPOCH:
            core = self.core
            self._answer(conn, answer_epoch_offsets(body, raft_log=core.log, current_epoch=core.epoch,
                                                    high_watermark=core.high_watermark), correlation_id, back)
            return
        if api_key == API_METADATA:
            if self.caught_up is not None and not self.caught_up.is_set():
                self._respond_later(conn, correlation_id, loop.create_task(self._metadata_once_caught_up(body, back, conn)),
                                    header_v0=back is not None and not back.__flexible__)
                return
            self._answer(conn, self._metadata(body, conn), correlation_id, back)
            return
        if self.controller is None:  # a broker: one of FORWARDED_APIS
            if self.forward is None:
                raise wire.WireFormatError(f"API {api_key} arrived before this broker can reach a controller")
            answer = self.forward.request(api_key, served, body, served_response)
        else:
            answer = self._handlers[api_key](body)
        task = loop.create_task(answer if back is None else _converted(answer, back))
        if self.metrics is not None:
            started, metrics = time.perf_counter(), self.metrics
            task.add_done_callback(lambda _: metrics.request_done(api_key, started))
        self._respond_later(conn, correlation_id, task, header_v0=back is not None and not back.__flexible__)

    def _metadata(self, body, conn: FrameConnection):
        """The Metadata answer (served version) from the image as it is now, with each broker's
        endpoint for the listener ``conn`` came in on (Kafka's rule)."""
        image = self.publisher.image
        controller_id = controller_for(image, answering_broker=self.is_broker, active_controller=self.publisher.leader[0])
        listener = self.listeners.get(conn.listener)
        return answer_metadata(image, body, cluster_id=self.cluster_id, controller_id=controller_id,
                               listener_name=None if listener is None else listener.name)

    async def _metadata_once_caught_up(self, body, back: type | None, conn: FrameConnection):
        """Kafka's initial catch-up: a starting broker answers clients only once the controller
        has said its metadata caught up, never from the stale image it restarted with."""
        await self.caught_up.wait()
        answer = self._metadata(body, conn)
        return answer if back is None else older_versions.from_served(answer, back)

    def _refuse_produce(self, conn: FrameConnection, rf: wire.RequestFrame) -> None:
        """Only the active controller writes the metadata log (KIP-500): a client's Produce is
        answered INVALID_TOPIC_EXCEPTION for __cluster_metadata (Kafka's answer for an internal
        topic, ReplicaManager.appendToLocalLog) and UNKNOWN_TOPIC_OR_PARTITION for any other topic
        (a metadata-only node hosts none). acks=0 gets no answer: Kafka closes the connection, so
        the client learns something failed. The reason is logged once per connection."""
        if rf.body.topic_data is None or any(t.partition_data is None for t in rf.body.topic_data):
            raise wire.WireFormatError("Produce with a null topic or partition array")
        if not getattr(conn, "kraftlog_produce_refused", False):
            conn.kraftlog_produce_refused = True
            log.warning("refusing Produce from %s (client %s): only the active controller writes %s; records "
                        "are written through the controller APIs (CreateTopics, ...)", conn.label,
                        rf.client_id, wire.METADATA_TOPIC)
        if rf.body.acks == 0:
            conn.close()
            return
        self._respond(conn, produce_refusal(rf.body), rf.correlation_id)

    def _answer(self, conn: FrameConnection, answer, correlation_id: int, back: type | None) -> None:
        """Respond with ``answer`` (of the served version), converted to ``back`` when the request
        came at an older version; header v0 for a non-flexible one."""
        if back is None:
            self._respond(conn, answer, correlation_id)
        else:
            self._respond(conn, older_versions.from_served(answer, back), correlation_id,
                          header_v0=not back.__flexible__)

    def _queue(self, conn: FrameConnection) -> collections.deque:
        queue = getattr(conn, "kraftlog_responses", None)
        if queue is None:
            queue = conn.kraftlog_responses = collections.deque()
        return queue

    def _respond(self, conn: FrameConnection, body, correlation_id: int, *, header_v0: bool = False) -> None:
        queue = self._queue(conn)
        if not queue:
            conn.write(_frame_response(correlation_id, body, header_v0))
            return
        done = asyncio.get_running_loop().create_future()
        done.set_result(body)
        queue.append((correlation_id, done, header_v0))

    def _respond_later(self, conn: FrameConnection, correlation_id: int, task: asyncio.Task, *,
                       header_v0: bool = False) -> None:
        self._queue(conn).append((correlation_id, task, header_v0))
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
            conn.write(_frame_response(correlation_id, future.result(), header_v0))


def _frame_response(correlation_id: int, body, header_v0: bool) -> bytes:
    """The response frame of ``body``: a CreateTopics v7 answer (the controller's tuples) by
    hot_create_topics' encoder, every other (a kio value, an older version's answer) by kio."""
    if type(body) is hot_create_topics.CreateTopicsAnswer:
        return hot_create_topics.encode_response(correlation_id, body)
    return wire.frame_response(correlation_id, body, header_v0=header_v0)


def produce_refusal(req):
    """The ProduceResponse (v10) that refuses every partition of ``req`` (see _refuse_produce)."""
    from kio.schema.produce.v10 import response as kproduce_resp

    def refused(name: str, index) -> kproduce_resp.PartitionProduceResponse:
        if name == wire.METADATA_TOPIC:
            code, why = ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {name}: only the " \
                                                           "active controller writes it"
        else:
            code, why = ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
        return kproduce_resp.PartitionProduceResponse(
            index=index, error_code=code, base_offset=i64(-1), record_errors=(), error_message=why,
            current_leader=kproduce_resp.LeaderIdAndEpoch(leader_id=i32(-1), leader_epoch=i32(-1)))

    return kproduce_resp.ProduceResponse(responses=tuple(
        kproduce_resp.TopicProduceResponse(name=t.name, partition_responses=tuple(
            refused(t.name, p.index) for p in t.partition_data))
        for t in req.topic_data))


async def _converted(answer, back: type):
    return older_versions.from_served(await answer, back)


def _parse(frame: bytes, request_type: type, api_key: int):
    """(correlation id, kio body, bytes after the body) of a request (header v2 before a flexible
    body, else v1); WireFormatError if it does not decode (the transport then closes that
    connection). Bytes after a well-formed body are Kafka's to ignore (wire.parse_request)."""
    header_type = RequestHeader if request_type.__flexible__ else RequestHeaderV1
    try:
        header, pos = entity_reader(header_type)(frame, 0)
        body, size = entity_reader(request_type)(frame, pos)
    except Exception as exc:  # kio raises many kinds (ValueError, IndexError, UnicodeDecodeError, ...)
        raise wire.WireFormatError(f"malformed request (API {api_key}): {type(exc).__name__}: {exc}") from None
    return header.correlation_id, body, len(frame) - pos - size


def supported_api_versions(kind: str = KIND_CONTROLLER) -> list[tuple[int, int, int]]:
    """(api key, min version, max version) of every API a listener of ``kind`` serves (ApiVersions,
    raft's it answers, the node's; see LISTENER_RAFT_APIS); the older versions that
    older_versions.py converts count."""
    raft_apis = LISTENER_RAFT_APIS[kind] | {wire.API_API_VERSIONS}
    return sorted([row for row in wire.supported_api_versions() if row[0] in raft_apis]
                  + [(k, *older_versions.version_range(k, v)) for k, (v, _, _) in LISTENER_NODE_APIS[kind].items()])


def _unsupported_api_versions():
    from kio.schema.api_versions.v0 import response as kav0

    low, high = min(wire._API_VERSIONS), max(wire._API_VERSIONS)
    return kav0.ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=(
        kav0.ApiVersion(api_key=i16(wire.API_API_VERSIONS), min_version=i16(low), max_version=i16(high)),))


def _api_versions_response(version: int, kind: str, image, supported):
    """ApiVersions v0-v4: the APIs a listener of ``kind`` serves, plus from v3 (once there is an
    image) the supported and finalized features that `kraftlog features describe` and Kafka's
    admin client read."""
    features = {} if image is None or version < 3 else api_versions_feature_fields(image, supported, version=version)
    return wire.api_versions_response(version, supported_api_versions(kind), **features)


# ---- periodic snapshots -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotPolicy:
    max_new_bytes: int = 20 << 20  # Kafka's metadata.log.max.record.bytes.between.snapshots
    interval_ms: int = 3_600_000  # Kafka's metadata.log.max.snapshot.interval.ms


class Snapshotter:
    """Writes the publisher's image into the LMDB store once enough new log has committed, in a
    worker thread (an image is immutable, so the loop keeps replaying meanwhile), then tells the
    driver, which advances the log start past it. One snapshot at a time; a failure is logged and
    the next commit tries again."""

    def __init__(self, node: MetadataNode, policy: SnapshotPolicy):
        self.node = node
        self.policy = policy
        self.new_bytes = 0
        self.last_ms = time.monotonic() * 1000
        self.written = 0
        self.last_snapshot = None
        self.last_duration_ms = 0.0
        self._task: asyncio.Task | None = None

    def on_commit(self, size_bytes: int) -> None:
        self.new_bytes += size_bytes
        due = self.new_bytes >= self.policy.max_new_bytes or \
            time.monotonic() * 1000 - self.last_ms >= self.policy.interval_ms
        if due and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        node, publisher = self.node, self.node.machine
        end_offset, image = publisher.next_offset, publisher.image
        try:
            snapshot_id = node.core.snapshot_id_at(end_offset)
        except Exception as exc:  # below the log start (a fetched snapshot overtook us) or not delivered yet
            log.debug("no snapshot at %d: %s", end_offset, exc)
            return
        self.new_bytes, self.last_ms = 0, time.monotonic() * 1000
        started = time.perf_counter()
        try:
            _, losses = await asyncio.to_thread(node.snapshots.write_image, snapshot_id, image, replace=True)
        except Exception:
            log.exception("snapshot at %d not written; the next commit tries again", end_offset)
            return
        for loss in losses:
            log.warning("snapshot %s dropped %s", snapshot_id, loss)
        self.last_duration_ms = (time.perf_counter() - started) * 1000
        try:
            moved = node.driver.snapshot_written(snapshot_id)
        except Exception:
            log.exception("snapshot %s written but the log start did not move", snapshot_id)
            return
        if moved:
            self.written += 1
            self.last_snapshot = snapshot_id
            log.info("snapshot %d-%d written in %.0f ms; the log now starts at %d", snapshot_id.offset,
                     snapshot_id.epoch, self.last_duration_ms, node.log.start_offset())

    def downgrade_now(self, level_before: int) -> None:
        """metadata.version was just lowered (KIP-1155): write the image at the new level as a
        snapshot at once, log what the lower version drops, and reload the image from that
        snapshot, so this node holds exactly what a node of the older release would read. Done on
        the loop, before the next commit is applied (the next records must apply to the reloaded
        image); the log start moves after the current Ready (its batches are still being read)."""
        node, publisher = self.node, self.node.machine
        end_offset, image = publisher.next_offset, publisher.image
        level = image.features.metadata_version
        snapshot_id = node.core.snapshot_id_at(end_offset)
        started = time.perf_counter()
        _, losses = node.snapshots.write_image(snapshot_id, image, replace=True)
        for loss in losses:
            log.warning("metadata.version downgrade to %s dropped %s", versions.name(level), loss)
        publisher.loader.image = node.snapshots.load_image(snapshot_id)
        self.new_bytes, self.last_ms = 0, time.monotonic() * 1000
        log.info("metadata.version lowered from %s to %s at offset %d: wrote snapshot %d-%d and reloaded the image "
                 "from it in %.0f ms (%d field group(s) lost)", versions.name(level_before), versions.name(level),
                 end_offset, snapshot_id.offset, snapshot_id.epoch, (time.perf_counter() - started) * 1000,
                 len(losses))
        asyncio.get_running_loop().call_soon(self._adopt, snapshot_id)

    def _adopt(self, snapshot_id) -> None:
        try:
            if self.node.driver.snapshot_written(snapshot_id):
                self.written += 1
                self.last_snapshot = snapshot_id
        except Exception:
            log.exception("snapshot %s written but the log start did not move", snapshot_id)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            await asyncio.wait([self._task])


class SnapshottingPublisher(ImagePublisher):
    """ImagePublisher that feeds the Snapshotter and loads snapshots from the LMDB store whole."""

    snapshotter: Snapshotter | None = None

    def handle_commit(self, batch) -> None:
        level_before = self.image.features.metadata_version
        super().handle_commit(batch)
        if not self._snapshots_allowed():
            return
        level = self.image.features.metadata_version
        if 0 < level < level_before:
            self.snapshotter.downgrade_now(level_before)
        self.snapshotter.on_commit(len(batch.raw))

    def _applied_in_bulk(self, size_bytes: int) -> None:
        if self._snapshots_allowed():
            self.snapshotter.on_commit(size_bytes)

    def _snapshots_allowed(self) -> bool:
        """An image that skipped a record is not the log's: it must not become a snapshot that
        outlives the skip (Kafka disables snapshots after a metadata loading fault)."""
        if self.snapshotter is None or not self.apply_errors:
            return self.snapshotter is not None
        if not self._snapshots_disabled_logged:
            self._snapshots_disabled_logged = True
            log.error("snapshots disabled: this node skipped a committed record it could not apply")
        return False

    _snapshots_disabled_logged = False

    def handle_load_snapshot(self, snapshot_id, snapshots) -> None:
        self.speculations.clear()
        if not isinstance(snapshots, SnapshotStore):
            super().handle_load_snapshot(snapshot_id, snapshots)
            return
        started = time.perf_counter()
        self.loader.image = snapshots.load_image(snapshot_id)
        self._advance(snapshot_id.offset)
        log.info("loaded snapshot %d-%d in %.0f ms", snapshot_id.offset, snapshot_id.epoch,
                 (time.perf_counter() - started) * 1000)


# ---- the node ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerSettings:
    """What the broker role registers with: rack, log dirs, its lifecycle's timings."""

    rack: str | None = None
    log_dir_ids: tuple = ()
    config: BrokerConfig = BrokerConfig()


def default_listener(roles: frozenset[str], host: str, *, tls: bool) -> NodeListener:
    """The one socket of a node started without Kafka's listener settings (``--listen``): it serves
    every role the node has, and advertises ``host`` (listeners.advertised_host's rule)."""
    kind = KIND_BOTH if roles >= {ROLE_CONTROLLER, ROLE_BROKER} else next(iter(roles))
    name = "CONTROLLER" if kind == KIND_CONTROLLER else ("SSL" if tls else "PLAINTEXT")
    return NodeListener(name, kind, host, 0, advertised_host(host), 0, tls)


def _security_protocol(listener: NodeListener) -> int:
    return SECURITY_PROTOCOL_SSL if listener.tls else SECURITY_PROTOCOL_PLAINTEXT


class MetadataNode(RaftNode):
    """RaftNode's parts in Kafka's directory layout with the LMDB snapshot store, an ImagePublisher
    as the Raft listener, and the roles: a Controller (voters with the controller role) and/or a
    BrokerLifecycle (the broker role, started once the node listens)."""

    def __init__(self, node_id: int, voters: dict[int, tuple[str, int]], directory: str, *, cluster_id: str,
                 roles: frozenset[str] = frozenset({ROLE_CONTROLLER}), config: RaftConfig | None = None,
                 driver_config: DriverConfig | None = None, controller_config: ControllerConfig | None = None,
                 broker: BrokerSettings | None = None, snapshot_policy: SnapshotPolicy | None = None,
                 max_metadata_version: int | None = None, metrics_address: tuple[str, int] | None = None,
                 transport_config: TransportConfig | None = None, server_ssl=None, client_ssl=None,
                 listeners: tuple[NodeListener, ...] | None = None, seed: int | None = None):
        """``listeners``: the sockets it serves, the main one (``start``'s) first, each other one
        bound in ``extra_socks`` under its name (default: one socket for every role, on
        127.0.0.1, TLS when ``server_ssl`` is given). ``server_ssl`` is used by the TLS ones."""
        if ROLE_CONTROLLER in roles and node_id not in voters:
            raise NodeError(f"node {node_id} has the controller role but is not among the voters {sorted(voters)}")
        if ROLE_CONTROLLER not in roles and node_id in voters:
            raise NodeError(f"node {node_id} is a voter, so it needs the controller role (process roles: "
                            f"{','.join(sorted(roles))})")
        self.roles = roles
        self.cluster_id = cluster_id
        self.node_listeners = listeners or (default_listener(roles, "127.0.0.1", tls=server_ssl is not None),)
        if self.node_listeners[0].tls and server_ssl is None:
            raise NodeError(f"listener {self.node_listeners[0].name} is SSL but no TLS context was given")
        # read by make_transport during RaftNode.__init__; client_ssl also by the broker/registrar channels
        self.transport_config, self.server_ssl, self.client_ssl = transport_config, server_ssl, client_ssl
        # what this node advertises (registrations, ApiVersions); a lower max plays an older build
        self.supported = supported_features(max_metadata_version)
        super().__init__(node_id, voters, directory, cluster_id=cluster_id, config=config,
                         driver_config=driver_config, seed=seed)
        self.machine.snapshotter = self.snapshotter = Snapshotter(self, snapshot_policy or SnapshotPolicy())
        self.transport.publisher, self.transport.cluster_id = self.machine, cluster_id
        self.transport.supported = self.supported
        self.transport.core = self.core
        main, *others = self.node_listeners
        self.transport.listeners = {None: main, **{li.name: li for li in others}}
        self.controller = None
        if ROLE_CONTROLLER in roles:
            self.controller = Controller(node_id, cluster_id, self.driver, self.machine, controller_config,
                                         rng=self.rng)
            self.controller.supported_features = self.supported
            self.transport.serve_controller(self.controller)
        self.broker_settings = broker or BrokerSettings()
        self.lifecycle: BrokerLifecycle | None = None
        self.registrar: ControllerRegistrar | None = None
        self.metrics_address = metrics_address
        self.metrics_port: int | None = None
        if metrics_address is not None:
            from kraftlog.engine.node.metrics import NodeMetrics  # prometheus_client only when asked for

            self.transport.metrics = NodeMetrics(self)

    def layout(self, directory: str) -> tuple[str, str, str]:
        """Kafka's layout: segments and quorum-state in DIR/__cluster_metadata-0, snapshots beside."""
        partition_dir = os.path.join(directory, METADATA_LOG_DIRNAME)
        return partition_dir, os.path.join(partition_dir, SNAPSHOT_DIRNAME), partition_dir

    def make_snapshots(self, snapshot_dir: str):
        return SnapshotStore(snapshot_dir)

    def make_listener(self):
        # a metadata fault stops a controller, a broker skips the record (ImagePublisher)
        return SnapshottingPublisher(on_leader_change=self._leader_changed, fatal_faults=ROLE_CONTROLLER in self.roles)

    def make_transport(self, node_id: int, voters: dict[int, tuple[str, int]]):
        main_ssl = self.server_ssl if self.node_listeners[0].tls else None
        return NodeTransport(node_id, voters, self.transport_config, server_ssl=main_ssl, client_ssl=self.client_ssl)

    @property
    def image(self):
        return self.machine.image

    def _leader_changed(self, leader_id: int, epoch: int) -> None:
        if self.controller is not None:
            self.controller.on_leader_change(leader_id, epoch)

    extra_socks: dict[str, socket.socket] = {}  # listener name -> its bound socket (every one but the main one)

    async def start(self, **kwargs) -> int:
        port = await super().start(**kwargs)
        main, *others = self.node_listeners
        bound = {main.name: port}
        for li in others:
            bound[li.name] = await self.transport.listen_also(self.extra_socks[li.name], listener=li.name,
                                                              server_ssl=self.server_ssl if li.tls else None)
        registered = {li.name: Listener(li.name, *li.advertised(bound[li.name]), _security_protocol(li))
                      for li in self.node_listeners}
        b = self.broker_settings
        if self.transport.metrics is not None:
            self.metrics_port = await self.transport.metrics.serve(*self.metrics_address)
        if self.controller is not None:
            own = registered[main.name]  # a controller's main socket is its controller listener
            if main.kind == KIND_BOTH:  # one socket for both roles: registered under both names, as before
                own = Listener("CONTROLLER", own.host, own.port, own.security_protocol)
            self.registrar = ControllerRegistrar(self.node_id, self.machine, self.voters, features=self.supported,
                                                 listener=own, ssl_context=self.client_ssl)
            self.registrar.start()
        if ROLE_BROKER in self.roles:
            self.lifecycle = BrokerLifecycle(
                self.node_id, self.cluster_id, self.machine, self.voters,
                listeners=[registered[li.name] for li in self.node_listeners if li.kind != KIND_CONTROLLER],
                features=self.supported, rack=b.rack, log_dirs=b.log_dir_ids, config=b.config,
                ssl_context=self.client_ssl)
            self.lifecycle.start()
            self.transport.is_broker = True
            self.transport.caught_up = self.lifecycle.initial_catch_up
            if self.controller is None:
                self.transport.forward = Forwarder(self.lifecycle.channel)
        return port

    async def stop(self, *, resign: bool = True) -> None:
        if self.lifecycle is not None:
            if resign:
                await self.lifecycle.controlled_shutdown()
            await self.lifecycle.stop()
        if self.transport.metrics is not None:
            await self.transport.metrics.close()
        if self.registrar is not None:
            await self.registrar.stop()
        if self.controller is not None:
            await self.controller.close()
        await self.snapshotter.close()
        await super().stop(resign=resign)
        self.snapshots.close()


# ---- the process ---------------------------------------------------------------------------------------


def check_directory(directory: str, node_id: int, cluster_id: str | None) -> tuple[str, dict[str, str]]:
    """(cluster id, meta.properties) of a formatted ``directory`` whose meta.properties carries
    ``node_id``; NodeError otherwise (one line naming the problem and the fix)."""
    from kraftlog.engine.node import metaprops

    if not os.path.isdir(directory):
        raise NodeError(f"{directory} is not a directory; create and format it with: kraftlog storage format "
                        f"--cluster-id $(kraftlog storage random-uuid) --node-id {node_id} --dir {directory}")
    try:
        props = metaprops.read(directory)
        if props is None:
            raise NodeError(f"{directory} is not formatted (no meta.properties); format it with: kraftlog storage "
                            f"format --cluster-id $(kraftlog storage random-uuid) --node-id {node_id} --dir {directory}")
        metaprops.check(directory, props)
    except metaprops.MetaPropertiesError as exc:
        raise NodeError(str(exc)) from None
    if props.get("node.id") != str(node_id):
        raise NodeError(f"{directory} was formatted for node.id {props.get('node.id')}, not --node-id {node_id}")
    formatted = props["cluster.id"]
    if cluster_id is not None and cluster_id != formatted:
        raise NodeError(f"--cluster-id {cluster_id} differs from cluster.id {formatted} in {directory}/meta.properties")
    return formatted, props


def parse_roles(text: str | None, node_id: int, voters: dict) -> frozenset[str]:
    """``--process-roles``: controller, broker or both; unset: combined for a one-voter quorum of
    this node (single-node mode), controller for a voter, broker otherwise."""
    if text is None:
        if node_id in voters:
            return frozenset({ROLE_CONTROLLER, ROLE_BROKER}) if len(voters) == 1 else frozenset({ROLE_CONTROLLER})
        return frozenset({ROLE_BROKER})
    roles = frozenset(r.strip() for r in text.split(",") if r.strip())
    unknown = roles - {ROLE_CONTROLLER, ROLE_BROKER}
    if not roles or unknown:
        raise NodeError(f"--process-roles {text!r}: give controller, broker or broker,controller")
    return roles


async def serve(args) -> int:
    """Run the node until SIGTERM/SIGINT."""
    from kraftlog.engine.node import metaprops

    try:
        voters = parse_voters(args.controller_quorum_voters)
    except ValueError as exc:
        raise NodeError(f"--controller-quorum-voters: {exc}") from None
    roles = parse_roles(args.process_roles, args.node_id, voters)
    cluster_id, props = check_directory(args.dir, args.node_id, args.cluster_id)
    # every node sends its rack in its fetches: the leader learns the voters' racks from them and
    # points an observer (a broker) at a caught-up voter of its own rack (KIP-392)
    config = RaftConfig(election_timeout_ms=args.election_timeout_ms, fetch_timeout_ms=args.fetch_timeout_ms,
                        request_timeout_ms=args.request_timeout_ms, fetch_max_wait_ms=args.fetch_max_wait_ms,
                        rack=args.rack)
    directory_id = props.get("directory.id")
    broker = BrokerSettings(rack=args.rack,
                            log_dir_ids=(metaprops.parse_uuid(directory_id, "directory.id"),) if directory_id else (),
                            # one request timeout (Kafka's controller.quorum.request.timeout.ms) for raft
                            # and for the broker's requests to the controllers: an attempt on a hung
                            # controller must end well inside the session timeout
                            config=BrokerConfig(heartbeat_interval_ms=args.heartbeat_interval_ms,
                                                request_timeout_ms=args.request_timeout_ms))
    from kraftlog.engine.node import tls

    server_ssl = tls.server_context(args)
    plan = getattr(args, "listener_plan", None)  # Kafka's listener settings (cli/node_cmd.py), else one socket
    host = (args.listen or "127.0.0.1:0").rpartition(":")[0] or "127.0.0.1"
    node_listeners = plan.opened if plan is not None else (default_listener(roles, host, tls=server_ssl is not None),)
    # the links to the controllers speak their listener's protocol
    client_ssl = tls.client_context(args) if plan is None or plan.controller_tls else None
    sock = listening_socket(args.listen_fd, args.listen, voters.get(args.node_id, ("127.0.0.1", 0)))
    extra_socks: dict[str, socket.socket] = {}
    try:
        for li in node_listeners[1:]:
            extra_socks[li.name] = listening_socket(None, li.bind_address, ("127.0.0.1", 0))
        node = MetadataNode(args.node_id, voters, args.dir, cluster_id=cluster_id, roles=roles, config=config,
                            controller_config=ControllerConfig(
                                session_timeout_ms=args.session_timeout_ms,
                                auto_leader_rebalance_enable=args.auto_leader_rebalance_enable,
                                leader_imbalance_check_interval_ms=args.leader_imbalance_check_interval_seconds * 1000,
                                leader_imbalance_per_broker_percentage=args.leader_imbalance_per_broker_percentage,
                                default_partitions=args.num_partitions,
                                default_replication_factor=args.default_replication_factor),
                            broker=broker, snapshot_policy=SnapshotPolicy(args.snapshot_max_new_bytes,
                                                                          args.snapshot_interval_ms),
                            max_metadata_version=args.max_metadata_version,
                            metrics_address=_metrics_address(args.metrics_port, host),
                            transport_config=TransportConfig(max_frame_bytes=args.max_frame_bytes),
                            server_ssl=server_ssl, client_ssl=client_ssl, listeners=node_listeners)
    except ValueError as exc:  # timeouts that cannot work together (RaftNode says which)
        _close_all(sock, *extra_socks.values())
        raise NodeError(str(exc)) from None
    except BaseException:
        _close_all(sock, *extra_socks.values())
        raise
    node.extra_socks = extra_socks
    await serve_node(node, sock)
    image = node.image
    log.info("stopped at offset %d: %d topics, %d partitions, %d brokers", node.machine.next_offset,
             image.topics.live_topics, image.topics.partition_count, len(image.cluster.brokers))
    return 0


def _close_all(*socks: socket.socket) -> None:
    for s in socks:
        s.close()


def _metrics_address(port: int | None, host: str) -> tuple[str, int] | None:
    return None if port is None else (host, port)
