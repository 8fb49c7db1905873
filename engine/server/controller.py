"""The KRaft controller: a live MetadataImage folded from what Raft commits, and the active
controller's request handlers, which turn requests into metadata records written through Raft.

Two parts, both driven from one asyncio loop (the node's, engine/server/node.py):

    ImagePublisher   the Raft listener of every controller. Each committed batch's raw bytes go
                     through Loader.replay (control batches are skipped by the decoder), so every
                     controller, active or standby, holds the image of the committed log. It
                     resolves waiters once the image reaches an offset (``wait_applied``).
    Controller       the request handlers (kio values in, kio values out). Reads answer from the
                     image; writes run only on the *active* controller (the Raft leader, once the
                     core has told it that it leads: by then every record before its epoch is in the
                     image) and get NOT_CONTROLLER anywhere else.

Writes are serialised by one lock: a handler validates against the image, proposes its records as
ONE proposal (the driver never splits a proposal across batches, so a topic and its partitions
commit together or not at all), then waits until the image has replayed them before the next
handler validates. So validation always sees every earlier write, without a second, uncommitted
copy of the state (Kafka keeps one to pipeline writes; one commit round per write is enough here).

Broker liveness (Kafka's BrokerHeartbeatManager, simplified): the active controller keeps a session
deadline per broker (``session_timeout_ms`` after its last heartbeat; every registered broker gets a
fresh one when a controller becomes active). A fenced broker that heartbeats, does not ask to be
fenced, and has caught up to its registration is unfenced (UnfenceBrokerRecord); a periodic check
(every ``fence_check_interval_ms``) fences an unfenced broker whose deadline passed
(FenceBrokerRecord). Broker epochs are the log end offset when the registration is written (Kafka
uses the registration record's offset; with the write lock held the two are equal unless a raw
Produce races in), so "caught up" means the broker's metadata offset reached its epoch.

Bootstrap: an active controller whose image has no metadata.version writes
FeatureLevelRecord(metadata.version = the latest level) before anything else, as KRaft does when
it finds no bootstrap snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import random
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.broker_heartbeat.v1 import request as kheartbeat_req
from kio.schema.broker_heartbeat.v1 import response as kheartbeat_resp
from kio.schema.broker_registration.v4 import request as kregister_req
from kio.schema.broker_registration.v4 import response as kregister_resp
from kio.schema.create_topics.v7 import request as kcreate_req
from kio.schema.create_topics.v7 import response as kcreate_resp
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as kmetadata_req
from kio.schema.metadata.v12 import response as kmetadata_resp
from kio.static.primitive import i16, i32, i64

from kraftlog.engine.image import versions
from kraftlog.engine.image.image import METADATA_VERSION, MetadataImage
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.server.metadata_answer import answer_metadata
from kraftlog.raft.state import Role
from kraftlog.raft.types import NO_ID, NotLeaderError

log = logging.getLogger("kraftlog.controller")

API_METADATA, API_CREATE_TOPICS, API_BROKER_REGISTRATION, API_BROKER_HEARTBEAT = 3, 19, 62, 63

# api key -> (version, kio request type, kio response type): the one version each is served at
CONTROLLER_APIS: dict[int, tuple[int, type, type]] = {
    API_METADATA: (12, kmetadata_req.MetadataRequest, kmetadata_resp.MetadataResponse),
    API_CREATE_TOPICS: (7, kcreate_req.CreateTopicsRequest, kcreate_resp.CreateTopicsResponse),
    API_BROKER_REGISTRATION: (4, kregister_req.BrokerRegistrationRequest, kregister_resp.BrokerRegistrationResponse),
    API_BROKER_HEARTBEAT: (1, kheartbeat_req.BrokerHeartbeatRequest, kheartbeat_resp.BrokerHeartbeatResponse),
}

TOPIC_RESOURCE_TYPE = 2  # ConfigResource.Type.TOPIC
MAX_TOPIC_NAME_CHARS = 249  # Kafka's Topic.MAX_NAME_LENGTH
_LEGAL_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
_ZERO_UUID = uuid.UUID(int=0)  # DirectoryId.UNASSIGNED: the broker picks the directory
_NO_THROTTLE = datetime.timedelta(0)


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


# ---- the image publisher ------------------------------------------------------------------------


class ImagePublisher:
    """The Raft listener: committed batches -> Loader -> the current MetadataImage.

    ``image`` is replaced (never edited) on every commit, so a handler that reads it once sees one
    consistent state. ``leader`` is the latest (leader id, epoch) the core announced.
    """

    def __init__(self, *, on_leader_change=None):
        # skip_errors: a record every controller fails to apply the same way is skipped the same
        # way everywhere (counted in the manifest) instead of crash-looping the quorum
        self.loader = Loader(skip_errors=True, publishers=[self._published])
        self.next_offset = 0  # every committed record below this is in ``image``
        self.leader: tuple[int, int] = (NO_ID, -1)
        self.skipped_records = 0
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._on_leader_change = on_leader_change

    @property
    def image(self) -> MetadataImage:
        return self.loader.image

    def _published(self, delta, image, manifest) -> None:
        if manifest.skipped_records:
            self.skipped_records += manifest.skipped_records
            log.warning("skipped %d metadata records that could not be applied: %s", manifest.skipped_records,
                        manifest.skipped[:3])

    def handle_load_snapshot(self, snapshot_id, snapshots) -> None:
        size = snapshots.size(snapshot_id)
        data = snapshots.read_chunk(snapshot_id, 0, size)
        self.loader.load_snapshot(data, end_offset=snapshot_id.offset, epoch=snapshot_id.epoch)
        self._advance(snapshot_id.offset)

    def handle_commit(self, batch) -> None:
        self.loader.replay(batch.raw)  # a WireBatch read back from the log: its stored bytes
        self._advance(batch.next_offset)

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leader = (leader_id, epoch)
        log.info("leader is now %d in epoch %d", leader_id, epoch)
        if self._on_leader_change is not None:
            self._on_leader_change(leader_id, epoch)

    def _advance(self, next_offset: int) -> None:
        self.next_offset = next_offset
        if self._waiters:
            keep = []
            for offset, future in self._waiters:
                if offset < next_offset:
                    if not future.done():
                        future.set_result(None)
                else:
                    keep.append((offset, future))
            self._waiters = keep

    async def wait_applied(self, offset: int) -> None:
        """Return once the record at ``offset`` is in the image."""
        if offset < self.next_offset:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, future))
        await future


# ---- replica placement ----------------------------------------------------------------------------


def rack_interleaved(brokers: Sequence) -> list[int]:
    """Broker ids ordered so that neighbours sit on different racks where possible: racks in name
    order, taking one broker from each in turn (brokers without a rack form one group)."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(brokers, key=lambda b: b.broker_id):
        by_rack.setdefault(b.rack or "", []).append(b.broker_id)
    groups = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    for i in range(max((len(g) for g in groups), default=0)):
        out.extend(g[i] for g in groups if i < len(g))
    return out


def place_replicas(order: Sequence[int], partitions: int, replication_factor: int, start: int) -> list[list[int]]:
    """Round-robin over ``order`` (rack-interleaved): partition p takes ``replication_factor``
    consecutive brokers from position start + p, so leaders (the first replica) spread evenly and
    with balanced racks every replica of a partition sits on a different rack."""
    n = len(order)
    if not 0 < replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} with {n} brokers")
    return [[order[(start + p + k) % n] for k in range(replication_factor)] for p in range(partitions)]


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's Topic.validate), or None."""
    if not name:
        return "the topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME_CHARS:
        return f"topic name is {len(name)} characters, above the maximum {MAX_TOPIC_NAME_CHARS}"
    if not _LEGAL_TOPIC_NAME.match(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


# ---- the controller --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ControllerConfig:
    session_timeout_ms: int = 9000  # Kafka's broker.session.timeout.ms
    fence_check_interval_ms: int = 250  # how often the active controller looks for expired sessions
    default_partitions: int = 1  # num.partitions, for CreateTopics with NumPartitions -1
    default_replication_factor: int = 1  # default.replication.factor, for ReplicationFactor -1
    max_partitions_per_topic: int = 100_000  # a bound on one topic's records in one proposal
    write_timeout_ms: int = 10_000  # a write not committed within this answers REQUEST_TIMED_OUT


class _NotActive(Exception):
    """This controller is not (or no longer) the active one."""


class Controller:
    """Request handlers over an ImagePublisher and a RaftDriver (``propose``) of one node."""

    def __init__(self, node_id: int, cluster_id: str | None, driver, publisher: ImagePublisher,
                 config: ControllerConfig | None = None, *, rng: random.Random | None = None):
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.driver = driver
        self.publisher = publisher
        self.config = config or ControllerConfig()
        self.rng = rng or random.Random()
        self._lock = asyncio.Lock()
        self._sessions: dict[int, int] = {}  # broker id -> session deadline (monotonic ms)
        self._active_epoch = -1  # the Raft epoch this controller became active in, else -1
        self._fence_task: asyncio.Task | None = None
        self.writes = 0

    # -- activity -------------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        core = self.driver.core
        return core.role is Role.LEADER and self.publisher.leader == (self.node_id, core.epoch)

    @property
    def controller_id(self) -> int:
        """Who this node believes is the active controller (the Raft leader it last heard of)."""
        return self.publisher.leader[0]

    def on_leader_change(self, leader_id: int, epoch: int) -> None:
        """The publisher's hook: becoming active starts every broker's session afresh, writes the
        bootstrap records if needed, and starts the session check."""
        if leader_id != self.node_id:
            self._active_epoch = -1
            return
        self._active_epoch = epoch
        deadline = _now_ms() + self.config.session_timeout_ms
        self._sessions = {b: deadline for b in self.publisher.image.cluster.brokers}
        loop = asyncio.get_running_loop()
        loop.create_task(self._bootstrap())
        if self._fence_task is None or self._fence_task.done():
            self._fence_task = loop.create_task(self._fence_loop())

    async def close(self) -> None:
        if self._fence_task is not None:
            self._fence_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._fence_task

    async def _bootstrap(self) -> None:
        try:
            async with self._lock:
                await self._ensure_bootstrapped()
        except (_NotActive, TimeoutError) as exc:
            log.info("bootstrap write not done (%s); the next write retries it", type(exc).__name__)

    async def _ensure_bootstrapped(self) -> None:
        """Write metadata.version first if the image has none (call with the lock held): every
        write handler calls this, so no record is written before the level that decides its version."""
        if not self.publisher.image.features.metadata_version:
            await self._write([codec.encode_record("FeatureLevelRecord", 0, {
                "Name": METADATA_VERSION, "FeatureLevel": versions.LATEST})])
            log.info("bootstrapped metadata.version %s", versions.name(versions.LATEST))

    async def _fence_loop(self) -> None:
        interval_s = self.config.fence_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            if not self.is_active:
                if self._active_epoch < 0:
                    return
                continue
            try:
                await self._fence_expired()
            except (_NotActive, TimeoutError) as exc:
                log.info("fencing check not written (%s)", type(exc).__name__)

    async def _fence_expired(self) -> None:
        now = _now_ms()
        brokers = self.publisher.image.cluster.brokers
        expired = [b for b in brokers.values() if not b.fenced and self._sessions.get(b.broker_id, now) < now]
        if not expired:
            return
        async with self._lock:
            records = []
            for b in expired:
                current = self.publisher.image.cluster.brokers.get(b.broker_id)
                if current is not None and not current.fenced and self._sessions.get(b.broker_id, now) < _now_ms():
                    records.append(codec.encode_record("FenceBrokerRecord", 0, {"Id": current.broker_id,
                                                                                "Epoch": current.epoch}))
            if records:
                log.info("fencing %d broker(s) whose session expired", len(records))
                await self._write(records)

    async def _write(self, records: list[bytes]) -> int:
        """Propose ``records`` as one proposal (call with the lock held); return once they are in
        the image. Returns the offset of the first record."""
        if not self.is_active:
            raise _NotActive()
        try:
            future = self.driver.propose(records)
        except NotLeaderError:
            raise _NotActive() from None
        try:
            base, last = await asyncio.wait_for(future, self.config.write_timeout_ms / 1000)
        except NotLeaderError:
            raise _NotActive() from None
        await self.publisher.wait_applied(last)
        self.writes += 1
        return base

    # -- CreateTopics -------------------------------------------------------------------------------

    async def create_topics(self, req: kcreate_req.CreateTopicsRequest) -> kcreate_resp.CreateTopicsResponse:
        if not self.is_active:
            return _create_response([_topic_result(t.name, ErrorCode.not_controller, "not the active controller")
                                     for t in req.topics])
        async with self._lock:
            try:
                await self._ensure_bootstrapped()
                return await self._create_topics_locked(req)
            except _NotActive:
                code, why = ErrorCode.not_controller, "lost leadership before the topics were committed"
            except TimeoutError:
                code, why = ErrorCode.request_timed_out, "the topics were not committed in time"
        return _create_response([_topic_result(t.name, code, why) for t in req.topics])

    async def _create_topics_locked(self, req) -> kcreate_resp.CreateTopicsResponse:
        image = self.publisher.image
        live = image.cluster.live_brokers()
        order = rack_interleaved(live)
        level = image.features.metadata_version or versions.LATEST
        pr_version = versions.partition_record_version(level)
        counts: dict[str, int] = {}
        for t in req.topics:
            counts[t.name] = counts.get(t.name, 0) + 1
        results, records, planned = [], [], []
        for t in req.topics:
            error = self._topic_error(t, counts, image, len(order))
            if error is not None:
                results.append(_topic_result(t.name, *error))
                continue
            partitions = t.num_partitions if t.num_partitions != -1 else self.config.default_partitions
            rf = t.replication_factor if t.replication_factor != -1 else self.config.default_replication_factor
            topic_id = uuid.uuid4()
            assignment = place_replicas(order, partitions, rf, self.rng.randrange(len(order)))
            records.extend(_topic_records(t, topic_id, assignment, pr_version))
            planned.append((t.name, topic_id, partitions, rf, len(results)))
            results.append(None)
        if records and not req.validate_only:
            await self._write(records)
        for name, topic_id, partitions, rf, i in planned:
            results[i] = kcreate_resp.CreatableTopicResult(
                name=name, topic_id=topic_id, error_code=ErrorCode.none, error_message=None,
                num_partitions=i32(partitions), replication_factor=i16(rf), configs=())
        return _create_response(results)

    def _topic_error(self, t, counts: dict[str, int], image: MetadataImage,
                     live_brokers: int) -> tuple[ErrorCode, str] | None:
        problem = topic_name_problem(t.name)
        if problem is not None:
            return ErrorCode.invalid_topic_exception, problem
        if counts[t.name] > 1:
            return ErrorCode.invalid_request, f"topic {t.name!r} appears {counts[t.name]} times in the request"
        if image.topics.topic(t.name) is not None:
            return ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists."
        if t.assignments:
            return ErrorCode.invalid_request, "manual replica assignments are not supported yet"
        partitions = t.num_partitions if t.num_partitions != -1 else self.config.default_partitions
        if not 0 < partitions <= self.config.max_partitions_per_topic:
            return ErrorCode.invalid_partitions, (f"number of partitions {t.num_partitions} is not in "
                                                  f"1..{self.config.max_partitions_per_topic} (or -1 for the default)")
        rf = t.replication_factor if t.replication_factor != -1 else self.config.default_replication_factor
        if rf <= 0:
            return ErrorCode.invalid_replication_factor, f"replication factor must be above 0 (or -1), got {rf}"
        if rf > live_brokers:
            return ErrorCode.invalid_replication_factor, (
                f"Unable to replicate the partition {rf} time(s): the target replication factor of {rf} cannot be "
                f"reached because only {live_brokers} broker(s) are registered and unfenced.")
        return None

    # -- BrokerRegistration -------------------------------------------------------------------------

    async def register_broker(self, req) -> kregister_resp.BrokerRegistrationResponse:
        if not self.is_active:
            return _register_response(ErrorCode.not_controller)
        if self.cluster_id is not None and req.cluster_id != self.cluster_id:
            return _register_response(ErrorCode.inconsistent_cluster_id)
        async with self._lock:
            try:
                await self._ensure_bootstrapped()
            except _NotActive:
                return _register_response(ErrorCode.not_controller)
            except TimeoutError:
                return _register_response(ErrorCode.request_timed_out)
            image = self.publisher.image
            level = image.features.metadata_version
            wanted = {f.name: (f.min_supported_version, f.max_supported_version) for f in req.features}
            low, high = wanted.get(METADATA_VERSION, (0, 0))
            if level and not low <= level <= high:
                return _register_response(ErrorCode.unsupported_version)
            current = image.cluster.brokers.get(req.broker_id)
            now = _now_ms()
            if current is not None and current.incarnation_id != req.incarnation_id \
                    and self._sessions.get(req.broker_id, 0) >= now and not current.fenced:
                return _register_response(ErrorCode.duplicate_broker_registration)
            # a new epoch above every earlier one: the log end offset (see the module docstring)
            epoch = max(self.driver.log.end_offset(), (current.epoch + 1) if current else 0)
            record = codec.encode_record("RegisterBrokerRecord", versions.register_broker_record_version(level), {
                "BrokerId": req.broker_id, "IncarnationId": req.incarnation_id, "BrokerEpoch": epoch,
                "EndPoints": [{"Name": li.name, "Host": li.host, "Port": li.port,
                               "SecurityProtocol": li.security_protocol} for li in req.listeners],
                "Features": [{"Name": f.name, "MinSupportedVersion": f.min_supported_version,
                              "MaxSupportedVersion": f.max_supported_version} for f in req.features],
                "Rack": req.rack, "Fenced": True, "InControlledShutdown": False,
                "LogDirs": list(req.log_dirs)}, allow_loss=True)
            try:
                await self._write([record])
            except _NotActive:
                return _register_response(ErrorCode.not_controller)
            except TimeoutError:
                return _register_response(ErrorCode.request_timed_out)
            self._sessions[req.broker_id] = _now_ms() + self.config.session_timeout_ms
            return _register_response(ErrorCode.none, epoch)

    # -- BrokerHeartbeat ----------------------------------------------------------------------------

    async def heartbeat(self, req) -> kheartbeat_resp.BrokerHeartbeatResponse:
        if not self.is_active:
            return _heartbeat_response(ErrorCode.not_controller)
        current = self.publisher.image.cluster.brokers.get(req.broker_id)
        if current is None:
            return _heartbeat_response(ErrorCode.broker_id_not_registered)
        if current.epoch != req.broker_epoch:
            return _heartbeat_response(ErrorCode.stale_broker_epoch)
        self._sessions[req.broker_id] = _now_ms() + self.config.session_timeout_ms
        caught_up = req.current_metadata_offset >= current.epoch
        fence = req.want_fence or req.want_shut_down
        if current.fenced == fence or (not fence and not caught_up):
            return _heartbeat_response(ErrorCode.none, caught_up=caught_up, fenced=current.fenced,
                                       shut_down=req.want_shut_down)
        async with self._lock:
            current = self.publisher.image.cluster.brokers.get(req.broker_id)
            if current is None or current.epoch != req.broker_epoch:
                return _heartbeat_response(ErrorCode.stale_broker_epoch)
            if current.fenced != fence:
                name = "FenceBrokerRecord" if fence else "UnfenceBrokerRecord"
                try:
                    await self._write([codec.encode_record(name, 0, {"Id": current.broker_id,
                                                                     "Epoch": current.epoch})])
                except _NotActive:
                    return _heartbeat_response(ErrorCode.not_controller)
                except TimeoutError:
                    return _heartbeat_response(ErrorCode.request_timed_out)
            fenced = self.publisher.image.cluster.brokers[req.broker_id].fenced
        return _heartbeat_response(ErrorCode.none, caught_up=caught_up, fenced=fenced, shut_down=req.want_shut_down)

    # -- the request table ----------------------------------------------------------------------------

    def write_handlers(self) -> dict:
        """api key -> coroutine function(kio request) -> kio response: the requests that may write
        (the transport runs them as tasks and answers in request order)."""
        return {API_CREATE_TOPICS: self.create_topics, API_BROKER_REGISTRATION: self.register_broker,
                API_BROKER_HEARTBEAT: self.heartbeat}

    def metadata(self, req) -> kmetadata_resp.MetadataResponse:
        """Metadata from this controller's own image: what a standby answers shows what it has
        replayed."""
        return answer_metadata(self.publisher.image, req, cluster_id=self.cluster_id,
                               controller_id=self.controller_id)


# ---- records and responses ------------------------------------------------------------------------------


def _topic_records(t, topic_id: uuid.UUID, assignment: list[list[int]], pr_version: int) -> list[bytes]:
    """TopicRecord, then one PartitionRecord per partition (leader = first replica, ISR = all
    replicas, epochs 0), then a ConfigRecord per requested config: Kafka's order."""
    out = [codec.encode_record("TopicRecord", 0, {"Name": t.name, "TopicId": topic_id})]
    for p, replicas in enumerate(assignment):
        data = {"PartitionId": p, "TopicId": topic_id, "Replicas": replicas, "Isr": replicas,
                "Leader": replicas[0], "LeaderEpoch": 0, "PartitionEpoch": 0}
        if pr_version >= 1:
            data["Directories"] = [_ZERO_UUID] * len(replicas)
        out.append(codec.encode_record("PartitionRecord", pr_version, data))
    for c in t.configs:
        out.append(codec.encode_record("ConfigRecord", 0, {"ResourceType": TOPIC_RESOURCE_TYPE,
                                                           "ResourceName": t.name, "Name": c.name, "Value": c.value}))
    return out


def _topic_result(name: str, code: ErrorCode, message: str | None) -> kcreate_resp.CreatableTopicResult:
    return kcreate_resp.CreatableTopicResult(name=name, topic_id=None, error_code=code, error_message=message,
                                             configs=None)


def _create_response(results) -> kcreate_resp.CreateTopicsResponse:
    return kcreate_resp.CreateTopicsResponse(throttle_time=_NO_THROTTLE, topics=tuple(results))


def _register_response(code: ErrorCode, epoch: int = -1) -> kregister_resp.BrokerRegistrationResponse:
    return kregister_resp.BrokerRegistrationResponse(throttle_time=_NO_THROTTLE, error_code=code,
                                                     broker_epoch=i64(epoch))


def _heartbeat_response(code: ErrorCode, *, caught_up: bool = False, fenced: bool = True,
                        shut_down: bool = False) -> kheartbeat_resp.BrokerHeartbeatResponse:
    return kheartbeat_resp.BrokerHeartbeatResponse(throttle_time=_NO_THROTTLE, error_code=code,
                                                   is_caught_up=caught_up, is_fenced=fenced,
                                                   should_shut_down=shut_down)
