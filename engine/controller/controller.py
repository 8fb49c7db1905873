"""The KRaft controller: a live MetadataImage folded from what Raft commits, and the active
controller's request handlers, which turn requests into metadata records written through Raft.

Two parts, both driven from one asyncio loop (the node's, engine/node/node.py):

    ImagePublisher   the Raft listener of every controller. Each committed batch's raw bytes go
                     through Loader.replay (control batches are skipped by the decoder), so every
                     controller, active or standby, holds the image of the committed log. It
                     resolves waiters once the image reaches an offset (``wait_applied``).
    Controller       the request handlers (kio values in, kio values out; CreateTopics answers with
                     hot_create_topics tuples, written without kio). Reads answer from the
                     image; writes run only on the *active* controller (the Raft leader, once the
                     core has told it that it leads: by then every record before its epoch is in the
                     image) and get NOT_CONTROLLER anywhere else.

Writes are serialised by one lock, held by the write executor (writes.py): a handler plans its
records and answer from the image (a ControllerResult), the executor proposes the records as ONE
proposal (the driver never splits a proposal across batches, so a topic and its partitions commit
together or not at all), then waits until the image has replayed them before the next handler
plans. So validation always sees every earlier write. CreateTopics alone is pipelined, as Kafka's
controller pipelines every write: the lock goes to the next request once its records are proposed,
and what the next plan must know of the uncommitted ones, their topic names, is kept beside the
image (``_creating``) until they settle; every other writer waits for them (writes.py).

Broker liveness (Kafka's BrokerHeartbeatManager, simplified): the active controller keeps a session
deadline per broker (``session_timeout_ms`` after its last heartbeat; every registered broker gets a
fresh one when a controller becomes active). A heartbeat moves the broker through Kafka's states
(FENCED, UNFENCED, CONTROLLED_SHUTDOWN, SHUTDOWN_NOW; see ``_next_state``): a fenced broker that
does not ask to be fenced and has caught up to its registration is unfenced (the unfencing record,
then leaders for offline partitions it can lead); want_fence fences it (its leaderships and ISR
places go first, the fencing record last); want_shut_down starts a controlled shutdown
(BrokerRegistrationChangeRecord InControlledShutdown, leaderships moved away) and answers
should_shut_down once it leads nothing and every active broker has seen that. A periodic check
(every ``fence_check_interval_ms``) fences, one broker per write as Kafka does, an unfenced broker
whose deadline passed. Broker epochs are the log end offset when the registration is written
(Kafka uses the registration record's offset; with the write lock held the two are equal unless a
raw Produce races in), so "caught up" means the broker's metadata offset reached its epoch.

Partition changes (elections, ISR changes) are computed by replication.py from the image's
columns. They are not atomic in Kafka (ControllerResult.of): a long list is split into proposals
of at most ``max_records_per_batch`` records (and the driver's max_batch_bytes), in order, so the
record that fences a broker commits last. Fencing and unfencing records are what Kafka writes:
BrokerRegistrationChangeRecord (Fenced 1 / -1) from metadata.version 3.3-IV2, Fence/
UnfenceBrokerRecord before.

Bootstrap: an active controller whose image has no metadata.version writes
FeatureLevelRecord(metadata.version = the latest level) before anything else, as KRaft does when
it finds no bootstrap snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from kio.schema.alter_partition.v3 import response as kalter_resp
from kio.schema.broker_heartbeat.v1 import response as kheartbeat_resp
from kio.schema.broker_registration.v4 import response as kregister_resp
from kio.schema.create_partitions.v3 import response as kpartitions_resp
from kio.schema.create_topics.v7 import request as kcreate_req
from kio.schema.delete_topics.v6 import response as kdelete_resp
from kio.schema.elect_leaders.v2 import response as kelect_resp
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i64

from kraftlog.engine.controller import records_fast, replication
from kraftlog.engine.controller.speculation import Speculation, SpeculationChain, adopted_image
from kraftlog.engine.controller.validation import API_FEATURE_LEVEL, topic_name_problem
from kraftlog.engine.controller.writes import WRITE_ERRORS, ControllerResult, WriteExecutor
from kraftlog.engine.controller.writes import failure as write_failure
from kraftlog.engine.image import versions
from kraftlog.engine.image.image import (
    CONTROLLED_SHUTDOWN_IN,
    FENCING_FENCE,
    FENCING_UNFENCE,
    METADATA_VERSION,
    MetadataImage,
)
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.image.loader import decode as loader_decode
from kraftlog.engine.image.topics import NO_LEADER_CHANGE
from kraftlog.engine.protocol.apis import (
    API_ALTER_PARTITION,
    API_BROKER_HEARTBEAT,
    API_BROKER_REGISTRATION,
    API_CREATE_PARTITIONS,
    API_CREATE_TOPICS,
    API_DELETE_TOPICS,
    API_ELECT_LEADERS,
)
from kraftlog.engine.protocol.hot_create_topics import CreateTopicsAnswer
from kraftlog.engine.protocol.responses import (
    NO_THROTTLE,
    create_response,
    created_result,
    delete_response,
    deleted_result,
    elect_response,
    given_id,
    partitions_response,
    partitions_result,
    refusal,
    topic_result,
)
from kraftlog.engine.records import metadata as codec
from kraftlog.errors import KraftlogError
from kraftlog.raft.state import Role
from kraftlog.raft.types import NO_ID

log = logging.getLogger("kraftlog.controller")


TOPIC_RESOURCE_TYPE = 2  # ConfigResource.Type.TOPIC
BROKER_REGISTRATION_CHANGE = versions.LEVELS["3.3-IV2"]  # Kafka fences/unfences with this record from here

# Kafka's BrokerControlState: where a heartbeat takes a broker (see Controller._next_state)
FENCED, UNFENCED, CONTROLLED_SHUTDOWN, SHUTDOWN_NOW = "fenced", "unfenced", "controlled_shutdown", "shutdown_now"


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


# ---- the image publisher ------------------------------------------------------------------------


class MetadataFaultError(KraftlogError):
    """A committed metadata record this controller cannot apply. A controller must hold every
    committed record (it validates and writes against that image), so this is fatal: the node
    stops and exits non-zero with this one line (Kafka's fatal fault handler for controllers)."""


class ImagePublisher:
    """The Raft listener: committed batches -> Loader -> the current MetadataImage.

    ``image`` is replaced (never edited) on every commit, so a handler that reads it once sees one
    consistent state. ``leader`` is the latest (leader id, epoch) the core announced.

    A committed record that cannot be applied is a fault, handled as Kafka handles metadata
    loading faults: with ``fatal_faults`` (a node with the controller role) MetadataFaultError
    naming the offset stops the node; without (a broker) the record is skipped with one log line
    naming its offset and type, counted in ``apply_errors`` (the metadata-apply-error metric), and
    the node goes on serving. A batch that does not even decode is skipped whole the same way.
    """

    def __init__(self, *, on_leader_change=None, fatal_faults: bool = True):
        self.fatal_faults = fatal_faults
        self.loader = Loader(skip_errors=not fatal_faults, publishers=[self._published])
        self.next_offset = 0  # every committed record below this is in ``image``
        self.leader: tuple[int, int] = (NO_ID, -1)
        self.apply_errors = 0  # records (or undecodable batches) skipped by a non-fatal fault
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._on_leader_change = on_leader_change
        self.speculations = SpeculationChain()  # the active controller's own writes, replayed once

    @property
    def image(self) -> MetadataImage:
        return self.loader.image

    def _published(self, delta, image, manifest) -> None:
        if manifest.skipped_records:
            self.apply_errors += manifest.skipped_records
            for offset, record_type, reason in manifest.skipped[:3]:
                log.error("metadata apply error: skipped %s at offset %d: %s", record_type, offset, reason)
            if manifest.skipped_records > 3:
                log.error("metadata apply error: %d more records skipped", manifest.skipped_records - 3)

    def speculate(self, spec: Speculation) -> None:
        """Keep the replay of records just proposed, to publish when they commit (speculation.py)."""
        self.speculations.add(spec, self.next_offset)

    def _adopt(self, batches) -> bool:
        """Publish the speculations ``batches`` commit instead of replaying them; False (nothing
        done, the chain dropped) unless they are certain to be what the replay would give."""
        taken = self.speculations.take(batches, self.next_offset) if self.loader.held is None else None
        if taken is None:
            self.speculations.clear()
            return False
        started = time.perf_counter()
        for spec, provenance in taken:
            self.loader.publish_applied(spec.delta, adopted_image(spec, provenance), spec.manifest, started)
            self._advance(spec.end_offset)
        return True

    def handle_load_snapshot(self, snapshot_id, snapshots) -> None:
        self.speculations.clear()
        size = snapshots.size(snapshot_id)
        data = snapshots.read_chunk(snapshot_id, 0, size)
        self.loader.load_snapshot(data, end_offset=snapshot_id.offset, epoch=snapshot_id.epoch)
        self._advance(snapshot_id.offset)

    def handle_commit(self, batch) -> None:
        if self.speculations and self._adopt((batch,)):
            return
        try:
            self.loader.replay(batch.raw)  # a WireBatch read back from the log: its stored bytes
        except Exception as exc:  # noqa: BLE001 - the fault policy decides (class docstring)
            self._fault(batch, exc)
        self._advance(batch.next_offset)

    def _fault(self, batch, exc: Exception) -> None:
        """``batch`` could not be applied: fatal on a controller, skipped on a broker."""
        where = f"the committed batch at offsets {batch.base_offset}-{batch.next_offset - 1}"
        if self.fatal_faults:
            raise MetadataFaultError(f"{where} cannot be applied: {type(exc).__name__}: {exc}") from exc
        self.apply_errors += 1
        log.error("metadata apply error: skipped %s: %s: %s", where, type(exc).__name__, exc)

    def handle_commits(self, batches) -> None:
        """Apply a run of committed batches in bulk; when that fails, batch by batch, so the fault
        policy (class docstring) sees the one batch at fault and every other batch is applied."""
        if self.speculations and self._adopt(batches):
            self._applied_in_bulk(len(_bytes_of(batches)))
            return
        try:
            self._apply_in_bulk(batches)
        except Exception:  # noqa: BLE001 - retried batch by batch below, where the policy decides
            for batch in batches:
                if batch.next_offset > self.next_offset:  # not yet applied by the bulk attempt
                    self.handle_commit(batch)

    def _apply_in_bulk(self, batches) -> None:
        """A run of committed batches (raft/ready.py): one decode, one delta, one new image. A
        replay has a fixed cost (~1 ms: delta, apply, publish) that a restarted or far-behind node
        would otherwise pay per batch, on its Raft loop. A run delivered as one buffer
        (``handle_commit_run``, raft/wire.py BatchRun) is replayed from its bytes as they lie in
        the log, without a per-batch object. A batch that may lower metadata.version is applied
        on its own, between bulk replays of the batches around it: a lowered metadata.version
        reloads the image before the next record (SnapshottingPublisher). Other feature level
        changes (a production tail holds a few) stay in the run: splitting there costs a second
        decode and another new image, ~10 ms at 1M partitions."""
        raw = _bytes_of(batches)
        columns = loader_decode(raw)
        levels = self._lowering_levels(columns)
        if not len(levels):
            self._replay_run(batches[-1].next_offset, columns, len(raw))
            return
        bases = np.fromiter((b.base_offset for b in batches), dtype=np.int64, count=len(batches))
        start = 0
        for k in np.unique(np.searchsorted(bases, levels, side="right") - 1).tolist():
            self._replay_batches(batches[start:k])
            self.handle_commit(batches[k])
            start = k + 1
        self._replay_batches(batches[start:])

    handle_commit_run = handle_commits

    def _lowering_levels(self, columns) -> np.ndarray:
        """Offsets of the FeatureLevelRecords in ``columns`` that may lower metadata.version: below
        the highest level the image or an earlier record here set (an aborted one included, so
        a record in a transaction can only add a split, never hide one); an undecodable one too
        (the batch-by-batch path reports it)."""
        found = np.flatnonzero(columns.api_keys == API_FEATURE_LEVEL)
        highest, lowering = self.image.features.metadata_version, []
        for i in found.tolist():
            pos = int(columns.value_pos[i])
            try:
                data = codec.decode_record(columns.data, pos, pos + int(columns.value_len[i])).data
            except KraftlogError:
                lowering.append(int(columns.offsets[i]))
                continue
            if data["Name"] == METADATA_VERSION:
                if int(data["FeatureLevel"]) < highest:
                    lowering.append(int(columns.offsets[i]))
                highest = max(highest, int(data["FeatureLevel"]))
        return np.array(lowering, dtype=np.int64)

    def _replay_batches(self, batches) -> None:
        if len(batches):
            raw = _bytes_of(batches)
            self._replay_run(batches[-1].next_offset, loader_decode(raw), len(raw))

    def _replay_run(self, next_offset: int, columns, size_bytes: int) -> None:
        self.loader.replay_decoded(columns)
        self._advance(next_offset)
        self._applied_in_bulk(size_bytes)

    def _applied_in_bulk(self, size_bytes: int) -> None:
        """After handle_commits applied ``size_bytes`` of batches at once (a hook)."""

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.speculations.clear()
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


def _bytes_of(batches):
    """The bytes of consecutive committed batches: a run's own (no copy), else joined."""
    raw = getattr(batches, "raw", None)
    return raw if raw is not None else b"".join(b.raw for b in batches)


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


def place_replicas_many(order: Sequence[int], partitions: Sequence[int], starts: Sequence[int],
                        replication_factor: int) -> np.ndarray:
    """place_replicas for several topics at once: int32 [sum(partitions), replication_factor], the
    rows of topic k (``partitions[k]`` of them, placed from ``starts[k]``) after those of topic k - 1."""
    n = len(order)
    if not 0 < replication_factor <= n:
        raise ValueError(f"replication factor {replication_factor} with {n} brokers")
    counts = np.asarray(partitions, dtype=np.int64)
    first = np.cumsum(counts) - counts
    position = np.repeat(np.asarray(starts, dtype=np.int64) - first, counts) + np.arange(int(counts.sum()))
    return np.asarray(order, dtype=np.int32)[(position[:, None] + np.arange(replication_factor)) % n]


# ---- the controller --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ControllerConfig:
    session_timeout_ms: int = 9000  # Kafka's broker.session.timeout.ms
    fence_check_interval_ms: int = 250  # how often the active controller looks for expired sessions
    default_partitions: int = 1  # num.partitions, for CreateTopics with NumPartitions -1
    default_replication_factor: int = 1  # default.replication.factor, for ReplicationFactor -1
    max_partitions_per_topic: int = 100_000  # a bound on one topic's records in one proposal
    write_timeout_ms: int = 10_000  # a write not committed within this answers REQUEST_TIMED_OUT
    max_records_per_batch: int = 10_000  # Kafka's controller maxRecordsPerBatch: non-atomic writes split here
    default_min_isr: int = 1  # min.insync.replicas for topics without their own (ELR decisions)
    # Kafka's preferred-leader balancing: auto.leader.rebalance.enable,
    # leader.imbalance.check.interval.seconds (here in ms), leader.imbalance.per.broker.percentage.
    # The same interval also heals ISRs a write may have missed (see _heal).
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_per_broker_percentage: int = 10
    # New replicas' directories by Kafka's defaultDir (a broker's single log dir, else UNASSIGNED;
    # records_fast.default_directory), as Kafka's controller writes them from 3.7-IV2; False writes
    # MIGRATING everywhere (what Kafka writes below 3.7-IV2, and what brokers accept at any level).
    # The loader replays PartitionRecords with directories in bulk (decoder columns), so this costs
    # CreateTopics little.
    assign_default_directories: bool = True


@dataclass(frozen=True)
class _NewTopic:
    """A CreateTopics item that passed validation: what its records and its answer need."""

    topic: object  # the request's CreatableTopic
    topic_id: uuid.UUID
    partitions: int
    rf: int
    start: int  # where its placement starts in the rack-interleaved broker order
    result_index: int  # its place among the answer's results


class _Refused(Exception):
    """A request item refused with a Kafka error code (the rest of the request goes on)."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


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
        # the one writer (writes.py): lock, bootstrap, validate, propose and wait, error mapping
        self.executor = WriteExecutor(driver, publisher, is_active=lambda: self.is_active,
                                      write_timeout_ms=self.config.write_timeout_ms,
                                      max_records_per_batch=self.config.max_records_per_batch)
        self._create_queue: list[tuple[object, asyncio.Future]] = []  # CreateTopics waiting for the lock
        self._creating: set[str] = set()  # names of topics proposed (pipelined) and not yet settled
        self._sessions: dict[int, int] = {}  # broker id -> session deadline (monotonic ms)
        self._metadata_offsets: dict[int, int] = {}  # broker id -> metadata offset of its last heartbeat
        # broker id -> the offset its controlled shutdown completes at (Kafka's controlledShutdownOffset;
        # kept in memory only, as Kafka's heartbeat manager does: a new active controller starts without)
        self._shutdown_offsets: dict[int, int] = {}
        self._active_epoch = -1  # the Raft epoch this controller became active in, else -1
        self._fence_task: asyncio.Task | None = None
        self._heal_task: asyncio.Task | None = None

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
        self._metadata_offsets, self._shutdown_offsets = {}, {}
        loop = asyncio.get_running_loop()
        loop.create_task(self._bootstrap())
        if self._fence_task is None or self._fence_task.done():
            self._fence_task = loop.create_task(self._fence_loop())
        if self._heal_task is None or self._heal_task.done():
            self._heal_task = loop.create_task(self._heal_loop())

    async def close(self) -> None:
        for task in (self._fence_task, self._heal_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _bootstrap(self) -> None:
        try:
            async with self.executor.exclusive():
                await self.executor.ensure_bootstrapped()
        except WRITE_ERRORS as exc:
            log.info("bootstrap write not done (%s); the next write retries it", exc or type(exc).__name__)

    async def _fence_loop(self) -> None:
        await self._every(self.config.fence_check_interval_ms, self._fence_expired, "fencing check")

    async def _heal_loop(self) -> None:
        """Every leader.imbalance.check.interval while active: ``_heal``."""
        async def heal() -> None:
            async with self.executor.exclusive():
                await self._heal()

        await self._every(self.config.leader_imbalance_check_interval_ms, heal, "partition healing")

    async def _every(self, interval_ms: int, job, what: str) -> None:
        """Run ``job`` every ``interval_ms`` while this controller is active; end when it stops being
        the active controller for good (a write that fails is logged and tried at the next turn)."""
        while True:
            await asyncio.sleep(interval_ms / 1000)
            if not self.is_active:
                if self._active_epoch < 0:
                    return
                continue
            try:
                await job()
            except WRITE_ERRORS as exc:
                log.info("%s not written (%s)", what, exc or type(exc).__name__)

    async def _heal(self) -> None:
        """Partitions heal (call with the lock held). First every live replica outside an ISR
        rejoins it (unfencing does this at once; this catches what a lost leadership cut short);
        then, with auto.leader.rebalance.enable, preferred replicas in the ISR take their
        leadership back for every broker whose imbalance ratio (partitions it is preferred for but
        does not lead / partitions it is preferred for) is above
        leader.imbalance.per.broker.percentage (Kafka's checkAndTriggerAutoLeaderRebalance)."""
        cfg = self.config
        image = self.publisher.image
        rules = replication.rules_for(image, default_min_isr=cfg.default_min_isr)
        if self._shutdown_offsets:  # below 3.3-IV3 the image does not mark a controlled shutdown
            rules = dataclasses.replace(rules, acceptable=np.setdiff1d(
                rules.acceptable, np.fromiter(self._shutdown_offsets, dtype=np.int32)).astype(np.int32))
        rows = replication.rows_missing_live_replicas(image.topics, rules.acceptable)
        expansions = replication.expansion_changes(image.topics, rows, rules)
        if len(expansions):
            log.info("%d partition(s) take live replicas back into their ISR", len(expansions))
            await self.executor.write_many(replication.encode_changes(expansions))
        if not cfg.auto_leader_rebalance_enable:
            return
        image = self.publisher.image
        brokers = replication.imbalanced_brokers(image.topics, cfg.leader_imbalance_per_broker_percentage)
        if not len(brokers):
            return
        elections = replication.preferred_changes(image, brokers=brokers, default_min_isr=cfg.default_min_isr)
        if len(elections):
            log.info("preferred leader election for %d partition(s) of broker(s) %s", len(elections),
                     brokers.tolist())
            await self.executor.write_many(replication.encode_changes(elections))

    async def _fence_expired(self) -> None:
        now = _now_ms()
        brokers = self.publisher.image.cluster.brokers
        expired = [b.broker_id for b in brokers.values()
                   if not b.fenced and self._sessions.get(b.broker_id, now) < now]
        if not expired:
            return
        async with self.executor.exclusive():
            # One broker per write, as Kafka's maybeFenceOneStaleBroker: each fencing's elections
            # see the brokers fenced before it.
            for broker_id in expired:
                current = self.publisher.image.cluster.brokers.get(broker_id)
                if current is None or current.fenced or self._sessions.get(broker_id, now) >= _now_ms():
                    continue
                records = self._fence_records(current)
                log.info("fencing broker %d: its session expired (%d partition change(s))", broker_id,
                         len(records) - 1)
                await self.executor.write_many(records)
                self._shutdown_offsets.pop(broker_id, None)

    # -- partition changes of broker events -------------------------------------------------------

    def _fence_records(self, broker) -> list[bytes]:
        """Kafka's handleBrokerFenced: the broker's leaderships and ISR places go, then the
        fencing record (last: a reader never sees the broker fenced while still leading)."""
        image = self.publisher.image
        changes = replication.fence_changes(image, broker.broker_id, default_min_isr=self.config.default_min_isr)
        return replication.encode_changes(changes) + [_fencing_record(image, broker, fence=True)]

    def _unfence_records(self, broker) -> list[bytes]:
        """Kafka's handleBrokerUnfenced: the unfencing record first, then offline partitions elect
        a leader (the broker counting as live), then the broker rejoins the ISR of every led
        partition it is a replica of: what Kafka's ISR expansion ends with once the follower has
        caught up, at once here (a metadata-only replica has nothing to copy). Leaders move back
        to preferred replicas later (``_heal``)."""
        image = self.publisher.image
        min_isr = self.config.default_min_isr
        elections = replication.unfence_changes(image, broker.broker_id, default_min_isr=min_isr)
        expansions = replication.expand_isr_changes(image, broker.broker_id, default_min_isr=min_isr)
        return [_fencing_record(image, broker, fence=False)] + replication.encode_changes(elections) \
            + replication.encode_changes(expansions)

    def _controlled_shutdown_records(self, broker) -> list[bytes]:
        """Kafka's handleBrokerInControlledShutdown: BrokerRegistrationChangeRecord
        InControlledShutdown=1 (from 3.3-IV3; Kafka writes it at version 1), then the broker leaves
        every leadership and every ISR it shares with others."""
        image = self.publisher.image
        out = []
        level = image.features.metadata_version or versions.LATEST
        if level >= versions.IN_CONTROLLED_SHUTDOWN and not broker.in_controlled_shutdown:
            out.append(codec.encode_record("BrokerRegistrationChangeRecord", 1, {
                "BrokerId": broker.broker_id, "BrokerEpoch": broker.epoch,
                "InControlledShutdown": CONTROLLED_SHUTDOWN_IN}))
        changes = replication.fence_changes(image, broker.broker_id, default_min_isr=self.config.default_min_isr)
        return out + replication.encode_changes(changes)

    # -- CreateTopics -------------------------------------------------------------------------------

    async def create_topics(self, req: kcreate_req.CreateTopicsRequest) -> CreateTopicsAnswer:
        """CreateTopics, group-committed and pipelined: requests that arrive while another plans
        queue up, and whoever takes the lock next plans every queued request (in arrival order,
        each seeing the topics of the ones before it and of every pipelined write not yet settled)
        and proposes them together, one proposal per request (so each request still commits
        atomically). The lock is released once they are proposed; a task answers them all when
        they commit."""
        if not self.is_active:
            return refusal(API_CREATE_TOPICS, req, ErrorCode.not_controller, "not the active controller")
        answer = asyncio.get_running_loop().create_future()
        self._create_queue.append((req, answer))
        async with self.executor.lock:
            if not answer.done():
                batch, self._create_queue = self._create_queue, []
                await self._propose_creates(batch)
        return await answer

    async def _propose_creates(self, batch: list[tuple[object, asyncio.Future]]) -> None:
        """Plan and propose the queued CreateTopics requests (call with the lock held); the task
        ``_answer_creates`` answers them (a task of its own: no waiter's cancellation may leave
        the others of the batch unanswered)."""
        try:
            await self.executor.ensure_bootstrapped()
            image = self.publisher.image
            order = rack_interleaved(image.cluster.live_brokers())
            taken = set(self._creating)  # names of pipelined writes not yet in the image
            plans = [self._plan_create(req, image, order, taken) for req, _ in batch]
            proposals = [_topic_records(planned, order, image, self.config.assign_default_directories)
                         for (req, _), (_, planned) in zip(batch, plans, strict=True)
                         if planned and not req.validate_only]
            names = taken - self._creating
            settling = self.executor.pipeline(proposals) if proposals else None
        except WRITE_ERRORS as exc:
            self._refuse_creates(batch, exc)
            return
        except Exception as exc:  # a bug: every queued request fails with it (and its connection closes)
            for _, answer in batch:
                answer.set_exception(exc)
            return
        if settling is not None:  # the names stay taken until Raft decides, a timeout or not (writes.py)
            self._creating |= names
            settling.add_done_callback(lambda _: self._creating.difference_update(names))
        asyncio.ensure_future(self._answer_creates(batch, [results for results, _ in plans], settling))

    async def _answer_creates(self, batch, results, settling: asyncio.Future | None) -> None:
        try:
            if settling is not None:
                await self.executor.committed(settling)
        except WRITE_ERRORS as exc:
            self._refuse_creates(batch, exc)
            return
        for (_, answer), topic_results in zip(batch, results, strict=True):
            answer.set_result(create_response(topic_results))

    @staticmethod
    def _refuse_creates(batch, exc: BaseException) -> None:
        code, why = write_failure(exc, "topics")
        for req, answer in batch:
            if not answer.done():
                answer.set_result(refusal(API_CREATE_TOPICS, req, code, why))

    def _plan_create(self, req, image: MetadataImage, order: list[int], taken: set[str]):
        """(the answer's results, the topics to write) of one CreateTopics request; a name already
        in ``taken`` counts as existing, and the request's new names are added to it."""
        counts = Counter(t.name for t in req.topics)
        results, planned = [], []
        for t in req.topics:
            error = self._topic_error(t, counts, image, len(order))
            if error is None and t.name in taken:
                error = ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists."
            if error is not None:
                results.append(topic_result(t.name, *error))
                continue
            partitions = t.num_partitions if t.num_partitions != -1 else self.config.default_partitions
            rf = t.replication_factor if t.replication_factor != -1 else self.config.default_replication_factor
            topic_id = uuid.uuid4()
            planned.append(_NewTopic(t, topic_id, partitions, rf, self.rng.randrange(len(order)), len(results)))
            results.append(created_result(t.name, topic_id, partitions, rf))
        if not req.validate_only:
            taken.update(p.topic.name for p in planned)
        return results, planned

    def _topic_error(self, t, counts: dict[str, int], image: MetadataImage,
                     live_brokers: int) -> tuple[ErrorCode, str] | None:
        problem = topic_name_problem(t.name)
        if problem is not None:
            return ErrorCode.invalid_topic_exception, problem
        if counts[t.name] > 1:
            return ErrorCode.invalid_request, f"topic {t.name!r} appears {counts[t.name]} times in the request"
        if image.topics.topic_row(t.name) is not None:
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
        if self.cluster_id is not None and req.cluster_id != self.cluster_id and self.is_active:
            return _register_response(ErrorCode.inconsistent_cluster_id)
        return await self.executor.run(lambda image: self.plan_broker_registration(image, req),
                                       refuse=lambda code, _: _register_response(code), what="registration")

    def plan_broker_registration(self, image: MetadataImage, req) -> ControllerResult:
        """Kafka's ClusterControlManager.registerBroker: a RegisterBrokerRecord (fenced) with an
        epoch above every earlier one, unless the metadata.version is unsupported or another live
        incarnation holds the id; once committed the broker's session starts."""
        level = image.features.metadata_version
        wanted = {f.name: (f.min_supported_version, f.max_supported_version) for f in req.features}
        low, high = wanted.get(METADATA_VERSION, (0, 0))
        if level and not low <= level <= high:
            return ControllerResult(response=_register_response(ErrorCode.unsupported_version))
        current = image.cluster.brokers.get(req.broker_id)
        if current is not None and current.incarnation_id != req.incarnation_id \
                and self._sessions.get(req.broker_id, 0) >= _now_ms() and not current.fenced:
            return ControllerResult(response=_register_response(ErrorCode.duplicate_broker_registration))
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

        def registered(_image) -> kregister_resp.BrokerRegistrationResponse:
            self._sessions[req.broker_id] = _now_ms() + self.config.session_timeout_ms
            self._shutdown_offsets.pop(req.broker_id, None)  # a new incarnation starts afresh
            return _register_response(ErrorCode.none, epoch)

        return ControllerResult([record], after=registered)

    # -- BrokerHeartbeat ----------------------------------------------------------------------------

    async def heartbeat(self, req) -> kheartbeat_resp.BrokerHeartbeatResponse:
        """Kafka's processBrokerHeartbeat: the broker's next state (``_next_state``), the records
        of the transition if it changes, and the answer (is_fenced / should_shut_down of the next
        state; is_caught_up: its metadata offset reached its registration)."""
        if not self.is_active:
            return _heartbeat_response(ErrorCode.not_controller)
        current = self.publisher.image.cluster.brokers.get(req.broker_id)
        if current is None:
            return _heartbeat_response(ErrorCode.broker_id_not_registered)
        if current.epoch != req.broker_epoch:
            return _heartbeat_response(ErrorCode.stale_broker_epoch)
        self._sessions[req.broker_id] = _now_ms() + self.config.session_timeout_ms
        self._metadata_offsets[req.broker_id] = req.current_metadata_offset
        caught_up = req.current_metadata_offset >= current.epoch
        state, following = self._next_state(current, req)
        if state != following:
            try:
                async with self.executor.exclusive():
                    current = self.publisher.image.cluster.brokers.get(req.broker_id)
                    if current is None or current.epoch != req.broker_epoch:
                        return _heartbeat_response(ErrorCode.stale_broker_epoch)
                    state, following = self._next_state(current, req)
                    if state != following:
                        await self._transition(current, following)
            except WRITE_ERRORS as exc:
                return _heartbeat_response(write_failure(exc, "state change")[0])
        return _heartbeat_response(ErrorCode.none, caught_up=caught_up, fenced=following in (FENCED, SHUTDOWN_NOW),
                                   shut_down=following == SHUTDOWN_NOW)

    def _next_state(self, broker, req) -> tuple[str, str]:
        """(current, next) state: Kafka's BrokerHeartbeatManager.calculateNextBrokerState.

        FENCED               want_shut_down -> SHUTDOWN_NOW; caught up and not want_fence -> UNFENCED
        UNFENCED             want_fence -> FENCED (SHUTDOWN_NOW with want_shut_down);
                             want_shut_down -> CONTROLLED_SHUTDOWN if it leads partitions, else SHUTDOWN_NOW
        CONTROLLED_SHUTDOWN  SHUTDOWN_NOW once it leads nothing and every active broker's metadata
                             offset reached the shutdown offset (they all know where leaders went)
        """
        bid = broker.broker_id
        if broker.fenced:
            state = FENCED
        elif bid in self._shutdown_offsets:
            state = CONTROLLED_SHUTDOWN
        else:
            state = UNFENCED
        if state == FENCED:
            if req.want_shut_down:
                return state, SHUTDOWN_NOW
            if not req.want_fence and req.current_metadata_offset >= broker.epoch:
                return state, UNFENCED
            return state, FENCED
        if state == UNFENCED:
            if req.want_fence:
                return state, SHUTDOWN_NOW if req.want_shut_down else FENCED
            if req.want_shut_down:
                leads = replication.leads_any(self.publisher.image.topics, bid)
                return state, CONTROLLED_SHUTDOWN if leads else SHUTDOWN_NOW
            return state, UNFENCED
        if replication.leads_any(self.publisher.image.topics, bid):
            return state, CONTROLLED_SHUTDOWN
        if self._shutdown_offsets[bid] <= self._lowest_active_offset():
            return state, SHUTDOWN_NOW
        return state, CONTROLLED_SHUTDOWN

    def _lowest_active_offset(self) -> int:
        """The lowest metadata offset active brokers (unfenced, not shutting down) reported; a
        broker that has not reported since this controller became active counts as -1."""
        offsets = [self._metadata_offsets.get(b, -1) for b, reg in self.publisher.image.cluster.brokers.items()
                   if not reg.fenced and not reg.in_controlled_shutdown and b not in self._shutdown_offsets]
        return min(offsets, default=1 << 63)

    async def _transition(self, broker, following: str) -> None:
        """Write the records that take ``broker`` to state ``following`` (call with the lock held)."""
        bid = broker.broker_id
        if following == UNFENCED:
            await self.executor.write_many(self._unfence_records(broker))
        elif following == CONTROLLED_SHUTDOWN:
            last = await self.executor.write_many(self._controlled_shutdown_records(broker))
            self._shutdown_offsets.setdefault(bid, last)
            log.info("broker %d is in controlled shutdown; done at offset %d", bid, self._shutdown_offsets[bid])
        elif broker.fenced:  # SHUTDOWN_NOW of a fenced broker: Kafka fences it again, a no-op here
            self._shutdown_offsets.pop(bid, None)
        else:  # FENCED, SHUTDOWN_NOW
            records = self._fence_records(broker)
            log.info("fencing broker %d (%s; %d partition change(s))", bid, following, len(records) - 1)
            await self.executor.write_many(records)
            self._shutdown_offsets.pop(bid, None)

    # -- DeleteTopics ---------------------------------------------------------------------------------

    async def delete_topics(self, req) -> kdelete_resp.DeleteTopicsResponse:
        return await self._per_topic_write(API_DELETE_TOPICS, req, self.plan_delete_topics, "deletions")

    async def _per_topic_write(self, api_key: int, req, plan, what: str):
        """``plan(image, req)`` run by the write executor; a write that cannot happen answers every
        topic of the request with the executor's error (``what``: the request's writes)."""
        return await self.executor.run(lambda image: plan(image, req),
                                       refuse=lambda code, why: refusal(api_key, req, code, why), what=what)

    def plan_delete_topics(self, image: MetadataImage, req) -> ControllerResult:
        """Kafka's ControllerApis.deleteTopics + ReplicationControlManager.deleteTopics: one result
        per distinct name or id, in request order; every deletion (a RemoveTopicRecord) in one
        proposal. Ids are resolved before names, so a name whose id is also given is refused."""
        topics = image.topics
        slots: list = [None] * len(req.topics)
        first: dict[tuple[str, object], int] = {}
        repeated: set[tuple[str, object]] = set()
        for i, t in enumerate(req.topics):
            topic_id = given_id(t.topic_id)
            if t.name is None and topic_id is None:
                slots[i] = deleted_result(None, None, ErrorCode.invalid_request, "Neither topic name nor id were specified.")
            elif t.name is not None and topic_id is not None:
                slots[i] = deleted_result(t.name, topic_id, ErrorCode.invalid_request,
                                    "You may not specify both topic name and topic id.")
            else:
                key = ("id", topic_id) if topic_id is not None else ("name", t.name)
                if key in first:
                    repeated.add(key)
                else:
                    first[key] = i
        doomed: dict[uuid.UUID, tuple[str, int]] = {}  # topic id -> (name, result slot)
        for (kind, value), i in sorted(first.items(), key=lambda kv: kv[0][0] != "id"):  # ids first
            if (kind, value) in repeated:
                slots[i] = deleted_result(value if kind == "name" else None, value if kind == "id" else None,
                                    ErrorCode.invalid_request, f"Duplicate topic {kind}.")
            elif kind == "id":
                view = topics.topic_by_id(value)
                if view is None:
                    slots[i] = deleted_result(None, value, ErrorCode.unknown_topic_id, "This server does not host this topic ID.")
                else:
                    doomed[value] = (view.name, i)
            else:
                view = topics.topic(value)
                if view is None:
                    slots[i] = deleted_result(value, None, ErrorCode.unknown_topic_or_partition,
                                        "This server does not host this topic-partition.")
                elif view.topic_id in doomed:
                    slots[i] = deleted_result(value, view.topic_id, ErrorCode.invalid_request,
                                        "The provided topic name maps to an ID that was already supplied.")
                else:
                    doomed[view.topic_id] = (value, i)
        for topic_id, (name, i) in doomed.items():
            slots[i] = deleted_result(name, topic_id, ErrorCode.none, None)
        response = delete_response([r for r in slots if r is not None])

        def deleted(_image):
            log.info("deleted %d topic(s)", len(doomed))
            return response

        return ControllerResult([codec.encode_record("RemoveTopicRecord", 0, {"TopicId": topic_id})
                                 for topic_id in doomed], after=deleted)

    # -- CreatePartitions -----------------------------------------------------------------------------

    async def create_partitions(self, req) -> kpartitions_resp.CreatePartitionsResponse:
        return await self._per_topic_write(API_CREATE_PARTITIONS, req, self.plan_create_partitions, "partitions")

    def plan_create_partitions(self, image: MetadataImage, req) -> ControllerResult:
        """Kafka's ReplicationControlManager.createPartitions: increase only, the new partitions
        placed like CreateTopics' (or as assigned) with the topic's replication factor, ISR = the
        live replicas, leader = the first of them; all topics' records in one proposal."""
        level = image.features.metadata_version or versions.LATEST
        pr_version = versions.partition_record_version(level)
        directories = _directory_lookup(image, level, self.config.assign_default_directories)
        counts = Counter(t.name for t in req.topics)
        results, records, done = [], [], set()
        for t in req.topics:
            if t.name in done:
                continue
            done.add(t.name)
            if counts[t.name] > 1:
                results.append(partitions_result(t.name, ErrorCode.invalid_request, "Duplicate topic name."))
                continue
            try:
                records.extend(self._new_partitions(t, image, pr_version, directories))
            except _Refused as refusal:
                results.append(partitions_result(t.name, refusal.code, refusal.message))
                continue
            results.append(partitions_result(t.name, ErrorCode.none, None))
        return ControllerResult([] if req.validate_only else records, partitions_response(results))

    def _new_partitions(self, t, image: MetadataImage, pr_version: int, directories) -> list[bytes]:
        """The PartitionRecords that take topic ``t.name`` to ``t.count`` partitions; _Refused
        with Kafka's error otherwise."""
        view = image.topics.topic(t.name)
        if view is None:
            raise _Refused(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
        current = view.partition_count
        if t.count == current:
            raise _Refused(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
        if t.count < current:
            raise _Refused(ErrorCode.invalid_partitions, f"The topic {t.name} currently has {current} partition(s); "
                                                         f"{t.count} would not be an increase.")
        if t.count > self.config.max_partitions_per_topic:
            raise _Refused(ErrorCode.invalid_partitions, f"{t.count} partitions is above the maximum "
                                                         f"{self.config.max_partitions_per_topic} per topic")
        additional = t.count - current
        if t.assignments is not None and len(t.assignments) != additional:
            raise _Refused(ErrorCode.invalid_replica_assignment, f"Attempted to add {additional} additional "
                           f"partition(s), but only {len(t.assignments)} assignment(s) were specified.")
        first = next((p for p in (image.topics.partition_by_id(view.topic_id, i) for i in range(current))
                      if p is not None), None)
        if first is None:
            raise _Refused(ErrorCode.unknown_server_error, f"Invalid state: topic {t.name} appears to have no partitions.")
        rf = len(first.replicas)
        live = image.cluster.live_brokers()
        isrs = None  # the ISR of each new partition: its live replicas (all of them when placed here)
        if t.assignments is not None:
            active = {b.broker_id for b in live}
            assignment, isrs = [], np.full((additional, rf), -1, dtype=np.int32)
            for i, a in enumerate(t.assignments):
                replicas = [int(b) for b in a.broker_ids]
                _check_manual_assignment(replicas, rf, image)
                isr = [b for b in replicas if b in active]
                if not isr:
                    raise _Refused(ErrorCode.invalid_replica_assignment, "All brokers specified in the manual "
                                   f"partition assignment for partition {current + i} are fenced or in controlled shutdown.")
                assignment.append(replicas)
                isrs[i, :len(isr)] = isr
            assignment = np.array(assignment, dtype=np.int32).reshape(additional, rf)
        else:
            order = rack_interleaved(live)
            if rf > len(order):
                raise _Refused(ErrorCode.invalid_replication_factor, (
                    f"Unable to replicate the partition {rf} time(s): the target replication factor of {rf} cannot be "
                    f"reached because only {len(order)} broker(s) are registered and unfenced."))
            assignment = place_replicas_many(order, [additional], [self.rng.randrange(len(order))], rf)
        return records_fast.partition_values(
            records_fast.topic_id_array([view.topic_id], [additional]),
            np.arange(current, t.count, dtype=np.int32), assignment, pr_version, isr=isrs,
            directories=None if directories is None else directories(assignment))

    # -- AlterPartition -------------------------------------------------------------------------------

    async def alter_partition(self, req) -> kalter_resp.AlterPartitionResponse:
        return await self.executor.run(lambda image: self.plan_alter_partition(image, req),
                                       refuse=lambda code, _: _alter_response(code, ()), what="partition changes")

    def plan_alter_partition(self, image: MetadataImage, req) -> ControllerResult:
        """Kafka's ReplicationControlManager.alterPartition (v3): the leader asks for a new ISR;
        each partition is validated (``_alter_partition_error``), the change built as Kafka's
        PartitionChangeBuilder would (the leader may move if it is shutting down), and answered
        with the partition's state after the write."""
        broker = image.cluster.brokers.get(req.broker_id)
        if broker is None or broker.epoch != req.broker_epoch:
            return ControllerResult(response=_alter_response(ErrorCode.stale_broker_epoch, ()))
        rules = replication.rules_for(image, default_min_isr=self.config.default_min_isr)
        out, changes, written = [], [], []
        for t in req.topics:
            topic_id = given_id(t.topic_id)
            parts: list = []
            out.append((t.topic_id, parts))
            if topic_id is None or image.topics.topic_by_id(topic_id) is None:
                parts.extend(_altered_error(pd.partition_index, ErrorCode.unknown_topic_id) for pd in t.partitions)
                continue
            for pd in t.partitions:
                part = image.topics.partition_by_id(topic_id, pd.partition_index)
                error = _alter_partition_error(req.broker_id, part, pd, image)
                if error is not None:
                    parts.append(_altered_error(pd.partition_index, error))
                    continue
                change = replication.build_change(part, [int(b.broker_id) for b in pd.new_isr_with_epochs], rules,
                                                  target_recovery_state=int(pd.leader_recovery_state))
                if change is not None:
                    changes.append(change)
                written.append((parts, len(parts), topic_id, pd.partition_index, change))
                parts.append(None)
        records = [codec.encode_record("PartitionChangeRecord", rules.record_version, c) for c in changes]
        return ControllerResult(records, atomic=False, after=lambda after: _altered(req, out, written, after))


    # -- ElectLeaders --------------------------------------------------------------------------------

    async def elect_leaders(self, req) -> kelect_resp.ElectLeadersResponse:
        return await self._per_topic_write(API_ELECT_LEADERS, req, self.plan_elect_leaders, "elections")

    def plan_elect_leaders(self, image: MetadataImage, req) -> ControllerResult:
        """Kafka's ReplicationControlManager.electLeaders: PREFERRED (0) or UNCLEAN (1) per named
        partition (replication.elect_one); with no partitions named, every partition, answering
        only those whose election was needed. Every change in one write."""
        rules = replication.rules_for(image, default_min_isr=self.config.default_min_isr)
        election = int(req.election_type)
        if election not in (replication.PREFERRED, replication.UNCLEAN):
            return ControllerResult(response=elect_response(ErrorCode.invalid_request, []))
        topics = image.topics
        named = req.topic_partitions is not None
        wanted = [(t.topic, [topics.partition(t.topic, int(p)) or int(p) for p in t.partitions])
                  for t in req.topic_partitions] if named else \
            [(name, topics.partitions_of(name)) for name in topics.topic_names()]
        results, records = [], []
        for name, partitions in wanted:
            parts = []
            for part in partitions:
                if isinstance(part, int):  # a named partition that does not exist
                    parts.append((part, ErrorCode.unknown_topic_or_partition, f"No such partition as {name}-{part}"))
                    continue
                data, error = replication.elect_one(part, election, rules)
                if data is not None:
                    records.append(codec.encode_record("PartitionChangeRecord", rules.record_version, data))
                    parts.append((part.partition_id, ErrorCode.none, None))
                elif named or error != "election_not_needed":
                    parts.append((part.partition_id, ErrorCode[error], None))
            if parts:
                results.append((name, parts))
        response = elect_response(ErrorCode.none, results)

        def elected(_image):
            if records:
                log.info("ElectLeaders (%s) moved %d leader(s)", "unclean" if election else "preferred", len(records))
            return response

        return ControllerResult(records, atomic=False, after=elected)

    # -- the request table ----------------------------------------------------------------------------

    def write_handlers(self) -> dict:
        """api key -> coroutine function(kio request) -> kio response (CreateTopics: a
        CreateTopicsAnswer, hot_create_topics.py): the requests that may write (the transport runs
        them as tasks and answers in request order)."""
        return {API_CREATE_TOPICS: self.create_topics, API_BROKER_REGISTRATION: self.register_broker,
                API_BROKER_HEARTBEAT: self.heartbeat, API_DELETE_TOPICS: self.delete_topics,
                API_CREATE_PARTITIONS: self.create_partitions, API_ALTER_PARTITION: self.alter_partition,
                API_ELECT_LEADERS: self.elect_leaders}


# ---- records and responses ------------------------------------------------------------------------------


def _directory_lookup(image: MetadataImage, level: int, assign: bool):
    """replicas (int [n, rf]) -> their directories (uint8 [n, rf * 16]) for PartitionRecord v1+
    (None below it): Kafka's defaultDir per broker when ``assign``, else MIGRATING."""
    if versions.partition_record_version(level) < 1:
        return None
    if assign:
        return records_fast.DirectoryTable(image.cluster.brokers, level).lookup
    return records_fast.migrating_directories


def _topic_records(planned: list[_NewTopic], order: Sequence[int], image: MetadataImage,
                   assign_directories: bool) -> list[bytes]:
    """Per topic, Kafka's order: its TopicRecord, its PartitionRecords (leader = first replica, ISR
    = all replicas, epochs 0, directories per _directory_lookup), a ConfigRecord per requested
    config. The PartitionRecords of every topic with the same replication factor are encoded in one
    go (records_fast)."""
    level = image.features.metadata_version or versions.LATEST
    version = versions.partition_record_version(level)
    directories = _directory_lookup(image, level, assign_directories)
    by_rf: dict[int, list[int]] = {}
    for k, p in enumerate(planned):
        by_rf.setdefault(p.rf, []).append(k)
    parts: list[list[bytes]] = [[] for _ in planned]
    for rf, group in by_rf.items():
        topics = [planned[k] for k in group]
        counts = [p.partitions for p in topics]
        replicas = place_replicas_many(order, counts, [p.start for p in topics], rf)
        first = np.cumsum(counts) - counts
        values = records_fast.partition_values(
            records_fast.topic_id_array([p.topic_id for p in topics], counts),
            np.arange(len(replicas), dtype=np.int32) - np.repeat(first, counts).astype(np.int32), replicas, version,
            directories=None if directories is None else directories(replicas))
        for k, at, n in zip(group, first.tolist(), counts, strict=True):
            parts[k] = values[at:at + n]
    out = []
    for p, values in zip(planned, parts, strict=True):
        out.append(records_fast.topic_value(p.topic.name, p.topic_id))
        out.extend(values)
        for c in p.topic.configs:
            out.append(codec.encode_record("ConfigRecord", 0, {"ResourceType": TOPIC_RESOURCE_TYPE,
                                                               "ResourceName": p.topic.name, "Name": c.name,
                                                               "Value": c.value}))
    return out


def _fencing_record(image: MetadataImage, broker, *, fence: bool) -> bytes:
    """What Kafka writes to fence / unfence: BrokerRegistrationChangeRecord v0 (Fenced 1 / -1)
    from metadata.version 3.3-IV2 (isBrokerRegistrationChangeRecordSupported), Fence/
    UnfenceBrokerRecord before."""
    if (image.features.metadata_version or versions.LATEST) >= BROKER_REGISTRATION_CHANGE:
        return codec.encode_record("BrokerRegistrationChangeRecord", 0, {
            "BrokerId": broker.broker_id, "BrokerEpoch": broker.epoch,
            "Fenced": FENCING_FENCE if fence else FENCING_UNFENCE})
    return codec.encode_record("FenceBrokerRecord" if fence else "UnfenceBrokerRecord", 0,
                               {"Id": broker.broker_id, "Epoch": broker.epoch})


def _check_manual_assignment(replicas: list[int], rf: int, image: MetadataImage) -> None:
    """Kafka's validateManualPartitionAssignment (INVALID_REPLICA_ASSIGNMENT)."""
    if not replicas:
        raise _Refused(ErrorCode.invalid_replica_assignment,
                       "The manual partition assignment includes an empty replica list.")
    previous = None
    for b in sorted(replicas):
        if b not in image.cluster.brokers:
            raise _Refused(ErrorCode.invalid_replica_assignment, f"The manual partition assignment includes broker "
                                                                 f"{b}, but no such broker is registered.")
        if b == previous:
            raise _Refused(ErrorCode.invalid_replica_assignment,
                           f"The manual partition assignment includes the broker {b} more than once.")
        previous = b
    if len(replicas) != rf:
        raise _Refused(ErrorCode.invalid_replica_assignment, (
            f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this is "
            f"not consistent with previous partitions, which have {rf} replica(s)."))


def _alter_partition_error(broker_id: int, part, pd, image: MetadataImage) -> ErrorCode | None:
    """Kafka's validateAlterPartitionData, in its order (v3 answers INELIGIBLE_REPLICA)."""
    if part is None:
        return ErrorCode.unknown_topic_or_partition
    # a request ahead of this controller's image: it is likely no longer the active controller
    if pd.leader_epoch > part.leader_epoch or pd.partition_epoch > part.partition_epoch:
        return ErrorCode.not_controller
    if pd.leader_epoch < part.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if broker_id != part.leader:
        return ErrorCode.invalid_request
    if pd.partition_epoch < part.partition_epoch:
        return ErrorCode.invalid_update_version
    new_isr = [int(b.broker_id) for b in pd.new_isr_with_epochs]
    if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(part.replicas) or part.leader not in new_isr:
        return ErrorCode.invalid_request  # Replicas.validateIsr, and the ISR must hold its leader
    if pd.leader_recovery_state == replication.RECOVERING and len(new_isr) > 1:
        return ErrorCode.invalid_request
    if part.leader_recovery_state == 0 and pd.leader_recovery_state == replication.RECOVERING:
        return ErrorCode.invalid_request  # RECOVERED never goes back to RECOVERING
    for state in pd.new_isr_with_epochs:
        reg = image.cluster.brokers.get(state.broker_id)
        if reg is None or reg.in_controlled_shutdown or reg.fenced or \
                (state.broker_epoch != -1 and reg.epoch != state.broker_epoch):
            return ErrorCode.ineligible_replica
    return None


def _altered_error(index: int, code: ErrorCode) -> kalter_resp.PartitionData:
    return kalter_resp.PartitionData(partition_index=i32(index), error_code=code, leader_id=i32(0),
                                     leader_epoch=i32(0), isr=(), partition_epoch=i32(0))


def _altered(req, out: list, written: list, image: MetadataImage) -> kalter_resp.AlterPartitionResponse:
    """AlterPartition's answer, each written partition as it stands in ``image`` after the write."""
    topics = image.topics
    for parts, at, topic_id, index, change in written:
        leader = change.get("Leader", NO_LEADER_CHANGE) if change is not None else NO_LEADER_CHANGE
        if leader not in (NO_LEADER_CHANGE, req.broker_id):
            parts[at] = _altered_error(index, ErrorCode.new_leader_elected)  # it must learn the new leader
            continue
        p = topics.partition_by_id(topic_id, index)
        parts[at] = kalter_resp.PartitionData(
            partition_index=i32(index), error_code=ErrorCode.none, leader_id=i32(p.leader),
            leader_epoch=i32(p.leader_epoch), isr=tuple(i32(b) for b in p.isr),
            leader_recovery_state=i8(p.leader_recovery_state), partition_epoch=i32(p.partition_epoch))
    return _alter_response(ErrorCode.none, tuple(
        kalter_resp.TopicData(topic_id=topic_id, partitions=tuple(parts)) for topic_id, parts in out))


def _alter_response(code: ErrorCode, topics) -> kalter_resp.AlterPartitionResponse:
    return kalter_resp.AlterPartitionResponse(throttle_time=NO_THROTTLE, error_code=code, topics=tuple(topics))


def _register_response(code: ErrorCode, epoch: int = -1) -> kregister_resp.BrokerRegistrationResponse:
    return kregister_resp.BrokerRegistrationResponse(throttle_time=NO_THROTTLE, error_code=code,
                                                     broker_epoch=i64(epoch))


def _heartbeat_response(code: ErrorCode, *, caught_up: bool = False, fenced: bool = True,
                        shut_down: bool = False) -> kheartbeat_resp.BrokerHeartbeatResponse:
    return kheartbeat_resp.BrokerHeartbeatResponse(throttle_time=NO_THROTTLE, error_code=code,
                                                   is_caught_up=caught_up, is_fenced=fenced,
                                                   should_shut_down=shut_down)
