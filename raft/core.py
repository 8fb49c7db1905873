"""The KIP-595 Raft core: a pure state machine, no I/O.

Driving it (see raft/ready.py for the persist -> send -> apply order):

    core = RaftCore(node_id=1, voters={1, 2, 3}, cluster_id="c", clock=..., rng=random.Random(seed),
                    log=..., quorum_store=..., snapshots=...)
    core.step(envelope)        # each inbound request or response
    ready = core.poll()        # timers, retries, deliveries; returns one frozen Ready
    execute_ready(ready, ...)  # persist, send, apply; poll again by ready.next_poll_ms

``append(records)`` (leader only), ``resign()`` (graceful shutdown), ``create_snapshot`` and
``describe_quorum()`` are the client calls; their effects show up in the next Ready.

Protocol facts this follows (KIP-595, KIP-996 pre-vote):
    * one vote per epoch, only for a candidate whose log (last epoch, end offset) is at least
      as up to date as ours; the vote is in the Ready's election state, so it is persisted
      before the response leaves.
    * a node that times out first asks a pre-vote (no epoch bump); a voter grants it only if
      it has not heard from a live leader (a Follower that fetched successfully in this state
      and was not told the leader resigned rejects it). A prospective asks again a voter that
      refused it and then asked for a pre-vote itself (it follows no leader any more).
    * the survivors of a dead leader time out together (the fetch timeout is fixed and they
      heard last from the same answer round), so their votes often split; a candidate asked
      for a vote by another candidate of its epoch backs off 0..election_backoff_max_ms and
      asks again, as after a lost election, instead of waiting out its election timeout.
    * the leader writes a LeaderChange control batch at the start of its epoch and advances
      the high watermark to the largest offset flushed on a majority of voters, but only
      past that epoch start offset. Observers never count.
    * followers pull with Fetch(FetchOffset, LastFetchedEpoch); the leader answers records, a
      DivergingEpoch to truncate to, or a SnapshotId to fetch with FetchSnapshot.
    * a leader that has not been fetched from by a majority within 1.5 x fetch_timeout_ms
      resigns; a follower that has not heard from its leader for fetch_timeout_ms turns
      prospective.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from kraftlog.errors import UndecodableRecordError
from kraftlog.raft.control import encode_leader_change
from kraftlog.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    ReplicaDescription,
    VoteRequest,
    VoteResponse,
)
from kraftlog.raft.metrics import RaftMetrics
from kraftlog.raft.ready import Commit, CommitRun, LeaderChangeNotice, LoadSnapshot, Ready
from kraftlog.raft.state import NodeState, QuorumState, Role
from kraftlog.raft.types import (
    NO_EPOCH,
    NO_ID,
    ElectionState,
    Errors,
    InvalidSnapshotError,
    NotLeaderError,
    OffsetAndEpoch,
    RaftError,
    SafetyViolationError,
)

_READ_SLACK_BYTES = 4096  # a delivery read asks for this much beyond its estimate
_NO_DEADLINE_MS = 1 << 62  # later than any clock reading: _next_poll_ms's "no candidate yet"

U, V, P, C, L, F, R = (Role.UNATTACHED, Role.VOTED, Role.PROSPECTIVE, Role.CANDIDATE, Role.LEADER,
                       Role.FOLLOWER, Role.RESIGNED)


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Timeouts and limits (Kafka's controller.quorum.* defaults)."""

    election_timeout_ms: int = 1000  # randomized in [t, 2t)
    election_backoff_max_ms: int = 1000  # after a lost or split election, before asking again
    fetch_timeout_ms: int = 2000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    fetch_max_wait_ms: int = 500  # how long the leader parks a Fetch with nothing to return
    # A parked Fetch whose only news is a higher HW waits this long for data to carry it: a client's
    # next proposal usually comes within it, so a commit costs each follower one Fetch round trip,
    # not two (data, then the HW alone). Followers learn an HW at most this much later.
    hw_notify_delay_ms: int = 5
    fetch_max_bytes: int = 8 << 20
    snapshot_chunk_max_bytes: int = 1 << 20
    deliveries_max_batches: int = 4096  # per poll, so one poll stays short
    deliveries_max_records: int = 50_000  # per poll (at least one batch): bounds one bulk apply
    # the most one log read of the delivery loop asks for; each read asks for about what the batch
    # budget left will take (sized from the batches read before), so a poll that stops at its
    # budget has not built objects for megabytes of small batches it reads again next poll
    deliveries_read_bytes: int = 1 << 20
    # The same three bounds for an observer (a broker). It has no election to win or lose and no
    # follower waiting on its Fetch answers, so one long apply stalls only its own loop; what it
    # pays per delivery instead is one new image, whose copy-on-write of every touched column
    # chunk costs ~10 ms at 1M partitions whatever the size. A restarted broker replaying its
    # 20 MiB local tail (~450k records, ~0.2 s of apply) gets it in one piece, not ~30.
    observer_deliveries_max_batches: int = 65_536
    observer_deliveries_max_records: int = 1_000_000
    observer_deliveries_read_bytes: int = 32 << 20
    metrics_window_ms: int = 30_000
    # KIP-392 for observers (see "Observers fetching from followers" below)
    rack: str | None = None  # this node's rack (Kafka's broker.rack), sent as RackId in every Fetch
    replica_lag_time_max_ms: int = 2000  # a voter caught up within this long may serve observers
    preferred_replica_refresh_ms: int = 30_000  # an observer asks the leader again this often
    preferred_replica_max_failures: int = 3  # "offset not there yet" answers in a row before leaving

    @property
    def check_quorum_timeout_ms(self) -> int:
        # Kafka's leader waits 1.5 x the fetch timeout before deciding it lost its majority.
        return self.fetch_timeout_ms * 3 // 2


@dataclass(slots=True)
class _Pending:
    destination: int
    kind: type
    deadline_ms: int
    serial: int
    extra: object = None


@dataclass(slots=True)
class ReplicaProgress:
    """The leader's view of one replica (Kafka's ReplicaState).

    ``last_caught_up_ms`` follows Kafka: the time of a fetch at or past the leader's end, or of
    the previous fetch when this one reached the end the leader had then
    (``last_fetch_leader_end``), so a follower that keeps up with a steady stream of appends
    counts as caught up although it is always one fetch behind."""

    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_fetch_leader_end: int = -1
    begin_acked: bool = False
    last_sent_hw: int = -1
    rack: str | None = None  # from the replica's own Fetch requests

    def record_fetch(self, offset: int, leader_end: int, now: int) -> None:
        if offset >= leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now)
        elif self.last_fetch_leader_end > 0 and offset >= self.last_fetch_leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.last_fetch_leader_end = leader_end
        self.end_offset = offset
        self.last_fetch_ms = max(self.last_fetch_ms, now)


@dataclass(slots=True)
class _Parked:
    envelope: Envelope
    request: FetchRequest
    deadline_ms: int


@dataclass(slots=True)
class _LeaderProgress:
    epoch_start_offset: int
    since_ms: int
    voters: dict[int, ReplicaProgress]
    observers: dict[int, ReplicaProgress] = field(default_factory=dict)
    parked: dict[int, _Parked] = field(default_factory=dict)
    appended: deque = field(default_factory=deque)  # (last_offset, append_ms) for commit latency
    # voters yet to hear of this leader (no BeginQuorumEpoch answer, no Fetch in this epoch), in
    # voter order: a poll looks at these only, not at every voter again
    unbegun: list[int] = field(default_factory=list)
    # until when the check-quorum test cannot fail on the fetch times it last saw (they only grow)
    quorum_ok_until_ms: int = 0


@dataclass(slots=True)
class _SnapshotFetch:
    snapshot_id: OffsetAndEpoch
    source: int  # the node that named the snapshot: only it is sure to have it
    position: int = 0
    size: int = -1


class RaftCore:
    def __init__(self, *, node_id: int, voters, cluster_id: str | None, clock, rng, log, quorum_store,
                 snapshots, config: RaftConfig | None = None):
        self.node_id = node_id
        self.voters = frozenset(voters)
        self.cluster_id = cluster_id
        self.config = config or RaftConfig()
        self.clock, self.rng, self.log, self.snapshots = clock, rng, log, snapshots
        self.majority = len(self.voters) // 2 + 1
        self.metrics = RaftMetrics(self.config.metrics_window_ms)
        self._outbox: list[Envelope] = []
        self._deliveries: list = []
        self._flush = False
        self._inflight: dict[int, _Pending] = {}
        self._inflight_key: dict[tuple[type, int], int] = {}
        self._retry_at: dict[tuple[type, int], int] = {}
        self._correlation = rng.getrandbits(30)
        self._hw = -1  # this node's high watermark; never decreases (-1: not known yet)
        self._hw_advanced_ms = -1  # as leader: when _hw last moved (hw_notify_delay_ms counts from it)
        self._listener_next = 0  # the next offset the listener needs
        self._delivered_batch_bytes = 1024  # a typical delivered batch's size: sizes the next read
        self._notified: tuple[int, int] = (NO_ID, NO_EPOCH)
        self._leader_notified = False  # the listener was told that this node leads
        self._leader: _LeaderProgress | None = None
        self._snapshot_fetch: _SnapshotFetch | None = None
        self._end_quorum_pending: set[int] = set()
        self._fetch_backoff_until_ms = 0
        # observer side of KIP-392: the voter we read from instead of the leader (NO_ID: the leader)
        self._read_replica = NO_ID
        self._read_replica_until_ms = 0
        self._read_replica_failures = 0
        # an observer that left a silent leader: (epoch, leader) and until when a voter still
        # naming that pair is not believed (it has not noticed yet; see _observe)
        self._left_leader: tuple[int, int] = (NO_EPOCH, NO_ID)
        self._left_leader_until_ms = 0
        # follower side: observer fetches waiting for our high watermark, and the HW each saw last
        self._observer_parked: dict[int, _Parked] = {}
        self._observer_sent_hw: dict[int, int] = {}
        # consumers (replica_id < 0) waiting for the high watermark to pass their offset, on any
        # node that leads or follows; keyed by arrival, since every consumer says replica -1
        self._consumer_parked: dict[int, _Parked] = {}
        self._consumer_arrivals = 0
        self.snapshots_installed = 0  # counters the simulator and metrics read to prove a path ran
        self.truncations = 0
        self.observer_fetches_served = 0  # observer Fetch answers with records this follower sent
        self.read_replica_fallbacks = 0  # times this observer left a read replica on an error
        stored = quorum_store.read()
        initial = self._initial_state(stored)
        self._qs = QuorumState(node_id, self.voters, initial, initial_durable=_fresh(stored, initial))

    # ---- startup ----------------------------------------------------------------------

    def _initial_state(self, stored: ElectionState | None) -> NodeState:
        now = self.clock.milliseconds()
        if stored is None:
            stored = ElectionState(0)
        if stored.voters and stored.voters != self.voters:
            raise RaftError(f"configured voters {sorted(self.voters)} differ from the quorum-state "
                            f"file's {sorted(stored.voters)}: fix the configuration or wipe the state")
        log_epoch = self.log.last_fetched_epoch()
        observer = self.node_id not in self.voters
        if stored.epoch < log_epoch:
            # The quorum-state lost a write the log did not: start unattached in the log's epoch.
            return self._unattached(log_epoch, now)
        e = stored.epoch
        if observer:
            if stored.leader_id != NO_ID:
                return NodeState(F, e, leader_id=stored.leader_id, deadline_ms=now + self.config.fetch_timeout_ms)
            return self._unattached(e, now)
        if stored.leader_id == self.node_id:
            # Lead no more in this epoch: unflushed records of ours may be lost, and a second
            # leadership in one epoch could reuse their offsets.
            return NodeState(R, e, leader_id=self.node_id, voted_id=stored.voted_id,
                             deadline_ms=now + self._election_timeout())
        if stored.voted_id == self.node_id:
            return NodeState(P, e, voted_id=self.node_id, leader_id=stored.leader_id,
                             deadline_ms=now + self._election_timeout())
        if stored.leader_id != NO_ID:
            return NodeState(F, e, leader_id=stored.leader_id, voted_id=stored.voted_id,
                             deadline_ms=now + self.config.fetch_timeout_ms)
        if stored.voted_id != NO_ID:
            return NodeState(V, e, voted_id=stored.voted_id, deadline_ms=now + self._election_timeout())
        return self._unattached(e, now)

    # ---- read-only views ----------------------------------------------------------------

    @property
    def role(self) -> Role:
        return self._qs.role

    @property
    def epoch(self) -> int:
        return self._qs.epoch

    @property
    def leader_id(self) -> int:
        s = self._qs.current
        if s.role is L:
            return self.node_id
        return s.leader_id if s.role in (F, P) and s.leader_id != self.node_id else NO_ID

    @property
    def voted_id(self) -> int:
        return self._qs.current.voted_id

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def is_observer(self) -> bool:
        return self._qs.is_observer

    @property
    def election_state(self) -> ElectionState:
        return self._qs.persisted

    @property
    def fetch_source_id(self) -> int:
        """The node a follower or observer fetches from now: its read replica (an observer sent
        to a voter in its rack) or the leader; NO_ID when it fetches from no one."""
        s = self._qs.current
        if s.role is not F:
            return NO_ID
        return self._read_replica if self._read_replica != NO_ID else s.leader_id

    def metrics_snapshot(self) -> dict:
        return self.metrics.snapshot(self, self.clock.milliseconds())

    # ---- client calls ---------------------------------------------------------------------

    def append(self, records: Sequence[bytes]) -> int:
        """Append one batch as the leader; returns its last offset. Committed once the high
        watermark passes it; raises NotLeaderError on any other node. ``records`` is values, or
        a ClientBatch (raft/types.py) the log appends as written: the core only counts it."""
        if self._qs.role is not L:
            raise NotLeaderError(self.node_id, self.epoch, self.leader_id)
        now = self.clock.milliseconds()
        info = self.log.append_as_leader(records, self.epoch)
        self._flush = True
        self._leader.appended.append((info.last_offset, now))
        self.metrics.append_records.record(now, len(records))
        return info.last_offset

    def resign(self) -> None:
        """Graceful shutdown of a leader: become Resigned and send EndQuorumEpoch with the
        other voters ordered by how far they replicated, so the best placed one runs first."""
        if self._qs.role is L:
            self._resign(self.clock.milliseconds())

    def create_snapshot(self, end_offset: int, data: bytes) -> OffsetAndEpoch:
        """Store the listener's state as of ``end_offset`` as a snapshot and drop the log
        before it. ``end_offset`` must be committed and already delivered to the listener."""
        snapshot_id = self.snapshot_id_at(end_offset)
        self.snapshots.write_chunk(snapshot_id, 0, data)
        self.snapshots.finish(snapshot_id, len(data))
        self.snapshot_written(snapshot_id)
        return snapshot_id

    def snapshot_id_at(self, end_offset: int) -> OffsetAndEpoch:
        """The id a snapshot of the listener's state as of ``end_offset`` gets (the epoch of the
        record before it). For a listener that writes its snapshot into the store itself (off the
        raft thread, say), then calls ``snapshot_written``."""
        if not (self.log.start_offset() < end_offset <= min(self._hw, self._listener_next)):
            raise InvalidSnapshotError(
                f"snapshot at {end_offset} must be above the log start {self.log.start_offset()} and at or "
                f"below the delivered high watermark {min(self._hw, self._listener_next)}"
            )
        return OffsetAndEpoch(end_offset, self.log.read(end_offset - 1, 1)[0].epoch)

    def snapshot_written(self, snapshot_id: OffsetAndEpoch) -> bool:
        """A finished snapshot ``snapshot_id`` is in the store: drop the log before it. False (and
        nothing changes) when the log already starts at or past it (a fetched snapshot or a newer
        one overtook it while it was being written)."""
        if snapshot_id.offset <= self.log.start_offset():
            return False
        if self.snapshots.size(snapshot_id) is None:
            raise InvalidSnapshotError(f"snapshot {snapshot_id} is not in the store")
        self._move_log_start(lambda: self.log.delete_before(snapshot_id.offset, snapshot_id.epoch))
        return True

    def _move_log_start(self, change) -> None:
        # Until the flush in this Ready the log may still come back from a crash with its old
        # start, so the snapshot there must survive: delete only snapshots below the old start.
        previous_start = self.log.start_offset()
        change()
        self.snapshots.delete_before(OffsetAndEpoch(previous_start, NO_EPOCH))
        self._flush = True

    def describe_quorum(self) -> DescribeQuorumResponse:
        if self._qs.role is not L:
            return DescribeQuorumResponse(Errors.NONE, Errors.NOT_LEADER_OR_FOLLOWER, self.leader_id, self.epoch)
        lp = self._leader
        self._update_local_progress(self.clock.milliseconds())

        def describe(replicas):
            return tuple(ReplicaDescription(i, p.end_offset, p.last_fetch_ms, p.last_caught_up_ms)
                         for i, p in sorted(replicas.items()))

        return DescribeQuorumResponse(Errors.NONE, Errors.NONE, self.node_id, self.epoch, self._hw,
                                      describe(lp.voters), describe(lp.observers))

    # ---- the two entry points -----------------------------------------------------------------

    def step(self, envelope: Envelope) -> None:
        """Handle one inbound message. Effects show up in the next poll()'s Ready."""
        now = self.clock.milliseconds()
        body = envelope.body
        if envelope.is_request:
            handler = self._request_handlers[type(body)]
            handler(self, envelope, body, now)
            return
        pending = self._inflight.pop(envelope.correlation_id, None)
        if pending is None or pending.destination != envelope.source or _RESPONSE_OF[pending.kind] is not type(body):
            return  # a duplicate, or an answer to a request we gave up on
        key = (pending.kind, pending.destination)
        if self._inflight_key.get(key) == envelope.correlation_id:
            del self._inflight_key[key]
        self._response_handlers[type(body)](self, envelope, body, pending, now)

    def poll(self) -> Ready:
        """Run timers and retries, then return everything to persist, send and apply."""
        now = self.clock.milliseconds()
        self.metrics.poll_started(now)
        self._expire_requests(now)
        for _ in range(8):  # roles may chain within one poll (one voter: prospective -> leader)
            serial = self._qs.current.serial
            self._poll_role(now)
            if self._qs.current.serial == serial:
                break
        if self._consumer_parked:
            self._answer_parked_consumer_fetches(now)
        more = self._deliver()
        election = None
        if self._qs.election_dirty:
            election = self._qs.persisted
            self._qs.election_dirty = False
        # an empty poll (about half of a commit's) makes no tuples: () is one shared object
        ready = Ready(election, self._flush, tuple(self._outbox) if self._outbox else (),
                      tuple(self._deliveries) if self._deliveries else (),
                      now if more else self._next_poll_ms(now))
        self._outbox.clear()
        self._deliveries.clear()
        self._flush = False
        self.metrics.poll_finished(self.clock.milliseconds())
        return ready

    # ---- timers ---------------------------------------------------------------------------

    def _election_timeout(self) -> int:
        t = self.config.election_timeout_ms
        return self.rng.randrange(t, 2 * t)

    def _unattached(self, epoch: int, now: int) -> NodeState:
        if self.node_id not in self.voters:
            # an observer looks for the leader by asking voters; no election timer
            return NodeState(U, epoch, deadline_ms=now + self.config.fetch_timeout_ms)
        return NodeState(U, epoch, deadline_ms=now + self._election_timeout())

    def _next_poll_ms(self, now: int) -> int:
        """The earliest future instant a timer is due: the fetch timeout's, or the first of the
        deadlines below that lies after ``now`` (anything due now was handled by this poll).

        Every poll asks this (about half a commit's polls are empty ones), so it keeps a running
        minimum instead of building the candidates' list (~8% of a poll's own time)."""
        s = self._qs.current
        first = now + self.config.fetch_timeout_ms
        best = first if first > now else _NO_DEADLINE_MS
        role = s.role
        if role is not L:
            t = s.deadline_ms
            if now < t < best:
                best = t
            if role is C and s.backoff_until_ms >= 0:
                t = s.backoff_until_ms
                if now < t < best:
                    best = t
            if role is F:
                t = self._fetch_backoff_until_ms
                if now < t < best:
                    best = t
                if self._observer_parked:
                    for p in self._observer_parked.values():
                        if now < p.deadline_ms < best:
                            best = p.deadline_ms
                if self._read_replica != NO_ID:
                    t = self._read_replica_until_ms
                    if now < t < best:
                        best = t
        if self._inflight:
            for p in self._inflight.values():
                if now < p.deadline_ms < best:
                    best = p.deadline_ms
        if self._retry_at:
            for t in self._retry_at.values():
                if now < t < best:
                    best = t
        leader = self._leader
        if leader is not None:
            if leader.parked:  # and a parked Fetch may be waiting for the HW's turn
                for p in leader.parked.values():
                    if now < p.deadline_ms < best:
                        best = p.deadline_ms
                t = self._hw_advanced_ms + self.config.hw_notify_delay_ms
                if now < t < best:
                    best = t
            # the first instant the check-quorum test could fail (_quorum_fetched)
            t = max(leader.since_ms + self.config.check_quorum_timeout_ms, leader.quorum_ok_until_ms)
            if now < t < best:
                best = t
        if self._consumer_parked:
            for p in self._consumer_parked.values():
                if now < p.deadline_ms < best:
                    best = p.deadline_ms
        # no future instant at all (a fetch timeout of 0): the fetch timeout's, due now
        return first if best == _NO_DEADLINE_MS else best

    def _expire_requests(self, now: int) -> None:
        if not self._inflight and not self._retry_at:  # a leader's every poll: nothing in flight
            return
        expired = [c for c, p in self._inflight.items() if p.deadline_ms <= now]
        for c in expired:
            p = self._inflight.pop(c)
            key = (p.kind, p.destination)
            if self._inflight_key.get(key) == c:
                del self._inflight_key[key]
                self._retry_at[key] = now + self.config.retry_backoff_ms
                self._read_replica_timed_out(p)
        for key in [k for k, t in self._retry_at.items() if t <= now]:
            del self._retry_at[key]

    # ---- sending ------------------------------------------------------------------------------

    def _can_send(self, kind: type, destination: int) -> bool:
        key = (kind, destination)
        return key not in self._inflight_key and key not in self._retry_at

    def _send(self, destination: int, body, now: int, extra=None) -> None:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        c = self._correlation
        kind = type(body)
        self._inflight[c] = _Pending(destination, kind, now + self.config.request_timeout_ms,
                                     self._qs.current.serial, extra)
        self._inflight_key[(kind, destination)] = c
        self._outbox.append(Envelope(self.node_id, destination, c, body))

    def _respond(self, request: Envelope, body) -> None:
        self._outbox.append(Envelope(self.node_id, request.source, request.correlation_id, body))

    # ---- transitions --------------------------------------------------------------------------

    def _transition(self, new: NodeState, now: int) -> None:
        old = self._qs.current
        self._qs.transition(new)
        # a new state starts its own requests: pending ones are answered but no longer block
        self._inflight_key.clear()
        self._retry_at.clear()
        # a read replica was chosen by the old state's leader; observers we served were bound to
        # the old state's epoch and high watermark
        self._read_replica = NO_ID
        self._read_replica_failures = 0
        self._release_observer_fetches()
        self._release_consumer_fetches(now)
        if old.role is L and new.role is not L:
            self._leave_leadership()
        if old.role is R:
            self._end_quorum_pending.clear()
        if old.role is F and self._snapshot_fetch is not None and new.role is not F:
            self.snapshots.abort(self._snapshot_fetch.snapshot_id)
            self._snapshot_fetch = None
        electing = (P, C)
        if new.role in electing and old.role not in electing:
            self.metrics.election_started_ms = now
        if new.role in (L, F) and self.metrics.election_started_ms is not None:
            self.metrics.election_latency_ms.record(now, now - self.metrics.election_started_ms)
            self.metrics.election_started_ms = None
        if new.role is F:
            self._fetch_backoff_until_ms = 0

    def _become_unattached(self, epoch: int, now: int) -> None:
        self._transition(self._unattached(epoch, now), now)

    def _become_follower(self, epoch: int, leader_id: int, now: int) -> None:
        voted = self._qs.current.voted_id if epoch == self.epoch else NO_ID
        self._transition(NodeState(F, epoch, leader_id=leader_id, voted_id=voted,
                                   deadline_ms=now + self.config.fetch_timeout_ms), now)

    def _become_prospective(self, now: int) -> None:
        s = self._qs.current
        leader = s.leader_id if s.role in (F, P) else (self.node_id if s.role is R else NO_ID)
        new = NodeState(P, s.epoch, leader_id=leader, voted_id=s.voted_id,
                        deadline_ms=now + self._election_timeout())
        new.granted.add(self.node_id)
        self._transition(new, now)

    def _become_candidate(self, now: int) -> None:
        new = NodeState(C, self.epoch + 1, voted_id=self.node_id, deadline_ms=now + self._election_timeout())
        new.granted.add(self.node_id)
        self._transition(new, now)

    def _become_leader(self, now: int) -> None:
        granting = frozenset(self._qs.current.granted)
        self._transition(NodeState(L, self.epoch, leader_id=self.node_id, voted_id=self.node_id), now)
        start = self.log.end_offset()
        self._leader = _LeaderProgress(start, now, {v: ReplicaProgress() for v in self.voters},
                                       unbegun=[v for v in self.voters if v != self.node_id])
        self._leader_notified = False
        info = self.log.append_as_leader([encode_leader_change(self.node_id, self.voters, granting)],
                                         self.epoch, control=True)
        self._leader.appended.append((info.last_offset, now))
        self._flush = True

    def _resign(self, now: int) -> None:
        lp = self._leader
        others = [v for v in self.voters if v != self.node_id]
        # best placed first: furthest replicated, then lowest id for a stable order
        others.sort(key=lambda v: (-lp.voters[v].end_offset, v))
        self._transition(NodeState(R, self.epoch, leader_id=self.node_id, voted_id=self.node_id,
                                   deadline_ms=now + self._election_timeout(),
                                   preferred_successors=tuple(others)), now)
        self._end_quorum_pending = set(others)

    def _leave_leadership(self) -> None:
        lp, self._leader = self._leader, None
        self._leader_notified = False
        for parked in lp.parked.values():
            self._respond(parked.envelope, FetchResponse(Errors.NONE, Errors.NOT_LEADER_OR_FOLLOWER,
                                                         self.leader_id, self.epoch, self._hw))

    def _observe(self, epoch: int, leader_id: int, now: int) -> bool:
        """Learn from a peer that ``epoch`` exists (and maybe its leader); True when that moved
        us to another state."""
        s = self._qs.current
        known_leader = leader_id not in (NO_ID, self.node_id) and leader_id in self.voters
        if epoch > s.epoch:
            if known_leader:
                self._become_follower(epoch, leader_id, now)
            else:
                self._become_unattached(epoch, now)
            return True
        if epoch < s.epoch or not known_leader:
            return False
        if s.role in (L, R):
            raise SafetyViolationError(f"node {self.node_id} leads epoch {epoch} but {leader_id} claims it too")
        if s.role is F:
            if s.leader_id != leader_id:
                raise SafetyViolationError(f"two leaders in epoch {epoch}: {s.leader_id} and {leader_id}")
            return False
        if s.role is U and (epoch, leader_id) == self._left_leader and now < self._left_leader_until_ms:
            # An observer that just left this leader hears it named by a voter that has not
            # noticed yet: returning would cost another fetch timeout on a dead leader (brokers
            # lagged ~2 s after a failover). The voters notice within a fetch timeout and elect;
            # a leader that was only slow is believed again after that.
            return False
        if s.role is P and s.leader_id == leader_id:
            # A prospective that left this leader (fetch timeout) must not return to it just
            # because a peer still names it: that peer's view is as old as ours, and two such
            # followers of a dead leader would hand each other back forever (Kafka: only a node
            # without a known leader becomes a follower here).
            return False
        self._become_follower(epoch, leader_id, now)
        return True

    # ---- poll per role ------------------------------------------------------------------------

    def _poll_role(self, now: int) -> None:
        s = self._qs.current
        role = s.role
        if role is U or role is V:
            if self._qs.is_observer:
                self._poll_observer_discovery(now)
            elif now >= s.deadline_ms or self.voters == {self.node_id}:
                # the only voter need not wait for anyone (Kafka elects it at once too)
                self._become_prospective(now)
        elif role is P:
            self._poll_election(s, now, pre_vote=True)
        elif role is C:
            self._poll_election(s, now, pre_vote=False)
        elif role is L:
            self._poll_leader(now)
        elif role is F:
            self._poll_follower(s, now)
        else:
            self._poll_resigned(s, now)

    def _poll_election(self, s: NodeState, now: int, *, pre_vote: bool) -> None:
        if len(s.granted) >= self.majority:
            if pre_vote:
                self._become_candidate(now)
            else:
                self._become_leader(now)
            return
        lost = len(s.rejected) > len(self.voters) - self.majority
        if pre_vote and lost and s.leader_id not in (NO_ID, self.node_id):
            self._become_follower(s.epoch, s.leader_id, now)
            return
        if not pre_vote and lost:
            self._back_off(s, now)
        if now >= s.deadline_ms or (s.backoff_until_ms >= 0 and now >= s.backoff_until_ms):
            if s.role is P and s.leader_id not in (NO_ID, self.node_id):
                self._become_follower(s.epoch, s.leader_id, now)
            else:
                self._become_prospective(now)
            return
        if lost:
            return
        request = VoteRequest(self.cluster_id, NO_ID, s.epoch, self.node_id, self.log.last_fetched_epoch(),
                              self.log.end_offset(), pre_vote)
        for v in self.voters:
            if v != self.node_id and v not in s.granted and v not in s.rejected and self._can_send(VoteRequest, v):
                self._send(v, _with_voter(request, v), now, pre_vote)

    def _back_off(self, s: NodeState, now: int) -> None:
        """A candidate that cannot win this round asks again (pre-vote first) after a random
        0..election_backoff_max_ms instead of its whole election timeout: of two split candidates
        one then asks first and the other grants it (Kafka's election.backoff.max.ms, "helps
        prevent gridlocked elections")."""
        if s.backoff_until_ms < 0:
            s.backoff_until_ms = now + self.rng.randrange(0, self.config.election_backoff_max_ms + 1)

    def _poll_follower(self, s: NodeState, now: int) -> None:
        if now >= s.deadline_ms:
            if self._qs.is_observer:
                self._become_unattached_observer(now)
            else:
                self._become_prospective(now)
            return
        if self._observer_parked:
            self._answer_parked_observer_fetches(now)
        if self._read_replica != NO_ID and now >= self._read_replica_until_ms:
            # KIP-392: the preferred replica is only good until the leader is asked again
            self._drop_read_replica(failed=False)
        if now < self._fetch_backoff_until_ms:
            return
        sf = self._snapshot_fetch
        if sf is not None:
            if self._can_send(FetchSnapshotRequest, sf.source):
                self._send(sf.source, FetchSnapshotRequest(self.cluster_id, self.node_id,
                                                           self.config.snapshot_chunk_max_bytes, s.epoch,
                                                           sf.snapshot_id, sf.position), now)
            return
        target = self._read_replica if self._read_replica != NO_ID else s.leader_id
        # one Fetch at a time, wherever it went: two answers could not both apply to our log
        if self._can_send(FetchRequest, target) and not self._fetch_in_flight():
            # The first Fetch of this state asks without waiting: the leader remembers the HW it
            # last sent this replica id, and after our restart (or its) that memory is stale; it
            # would park a fetch with nothing new for fetch_max_wait_ms while we know no HW and
            # deliver nothing (KIP-1166's problem, without its request field).
            self._send_fetch(target, s.epoch, now, max_wait_ms=None if s.fetched_ok else 0)

    def _fetch_in_flight(self) -> bool:
        return any(kind is FetchRequest for kind, _ in self._inflight_key)

    def _become_unattached_observer(self, now: int) -> None:
        # an observer drops a silent leader and looks for the current one (same epoch)
        self._left_leader = (self.epoch, self._qs.current.leader_id)
        self._left_leader_until_ms = now + self.config.fetch_timeout_ms
        self._transition(NodeState(U, self.epoch, deadline_ms=now + self.config.fetch_timeout_ms), now)

    def _poll_observer_discovery(self, now: int) -> None:
        if now < self._fetch_backoff_until_ms:
            return
        others = sorted(self.voters)
        target = others[self.rng.randrange(0, len(others))]
        if all(self._can_send(FetchRequest, v) for v in others):
            # max wait 0: a follower may serve observers (KIP-392) and must not park a fetch
            # whose only purpose is to learn who leads
            self._send_fetch(target, self.epoch, now, max_wait_ms=0)

    def _send_fetch(self, destination: int, epoch: int, now: int, *, max_wait_ms: int | None = None) -> None:
        end = self.log.end_offset()
        last_epoch = self.log.last_fetched_epoch()
        wait_ms = self.config.fetch_max_wait_ms if max_wait_ms is None else max_wait_ms
        self._send(destination, FetchRequest(self.cluster_id, self.node_id, wait_ms,
                                             self.config.fetch_max_bytes, epoch, end, last_epoch,
                                             self.log.start_offset(), self.config.rack), now, (end, last_epoch))

    def _poll_resigned(self, s: NodeState, now: int) -> None:
        if now >= s.deadline_ms:
            self._become_prospective(now)
            return
        for v in sorted(self._end_quorum_pending):
            if self._can_send(EndQuorumEpochRequest, v):
                self._send(v, EndQuorumEpochRequest(self.cluster_id, self.node_id, s.epoch,
                                                    s.preferred_successors), now)

    def _poll_leader(self, now: int) -> None:
        lp = self._leader
        if now >= lp.quorum_ok_until_ms and len(self.voters) > 1 and \
                now - lp.since_ms >= self.config.check_quorum_timeout_ms and not self._quorum_fetched(now):
            self._resign(now)
            return
        self._update_local_progress(now)
        if lp.unbegun:
            self._begin_quorum_epoch(now)
        end = self.log.end_offset()
        for replica_id, parked in list(lp.parked.items()):
            progress = self._progress_of(replica_id)
            if now >= parked.deadline_ms or end > parked.request.fetch_offset or \
                    (self._hw > progress.last_sent_hw and self._hw_news_due(now)):
                del lp.parked[replica_id]
                self._respond(parked.envelope, self._complete_fetch(parked.request, now))

    def _quorum_fetched(self, now: int) -> bool:
        """Check quorum: a majority (this leader and majority - 1 others) fetched within
        check_quorum_timeout_ms. While it holds, records until when it must (the (majority - 1)th
        latest fetch, plus the timeout), so the polls before then skip the test."""
        lp, timeout_ms = self._leader, self.config.check_quorum_timeout_ms
        fetched = sorted((p.last_fetch_ms for v, p in lp.voters.items() if v != self.node_id), reverse=True)
        kth_ms = fetched[self.majority - 2]  # majority >= 2 with two or more voters
        if now - kth_ms >= timeout_ms:
            return False
        lp.quorum_ok_until_ms = kth_ms + timeout_ms
        return True

    def _begin_quorum_epoch(self, now: int) -> None:
        """BeginQuorumEpoch to each voter that has neither answered one nor fetched in this epoch."""
        lp = self._leader
        lp.unbegun = [v for v in lp.unbegun
                      if not lp.voters[v].begin_acked and lp.voters[v].last_fetch_ms < lp.since_ms]
        for v in lp.unbegun:
            if self._can_send(BeginQuorumEpochRequest, v):
                self._send(v, BeginQuorumEpochRequest(self.cluster_id, v, self.node_id, self.epoch), now)

    def _update_local_progress(self, now: int) -> None:
        lp = self._leader
        local = lp.voters[self.node_id]
        local.last_fetch_ms = local.last_caught_up_ms = now
        end = min(self.log.last_flushed_offset(), self.log.end_offset())
        if end != local.end_offset:  # the HW moves only when some voter's end does (followers: _complete_fetch)
            local.end_offset = end
            self._maybe_advance_hw(now)

    def _maybe_advance_hw(self, now: int) -> None:
        lp = self._leader
        ends = sorted([p.end_offset for p in lp.voters.values()], reverse=True)  # a list: no generator
        majority_end = ends[self.majority - 1]
        # Only an offset past our LeaderChange record proves the earlier entries committed.
        if majority_end > lp.epoch_start_offset and majority_end > self._hw:
            self._hw = majority_end
            self._hw_advanced_ms = now
            self.log.update_high_watermark(majority_end)
            while lp.appended and lp.appended[0][0] < majority_end:
                _, appended_ms = lp.appended.popleft()
                self.metrics.commit_latency_ms.record(now, now - appended_ms)

    def _progress_of(self, replica_id: int) -> ReplicaProgress:
        lp = self._leader
        if replica_id in lp.voters:
            return lp.voters[replica_id]
        return lp.observers.setdefault(replica_id, ReplicaProgress())

    # ---- deliveries -----------------------------------------------------------------------------

    def _deliver(self) -> bool:
        """Queue listener deliveries up to the high watermark; True when more remain."""
        start = self.log.start_offset()
        if self._listener_next < start:
            snapshot_id = self._snapshot_at(start)
            if snapshot_id is None:
                raise SafetyViolationError(f"node {self.node_id}: log starts at {start} without a snapshot there")
            if self._leader_notified:
                raise SafetyViolationError(f"node {self.node_id} would load a snapshot while leading")
            self._deliveries.append(LoadSnapshot(snapshot_id))
            self._listener_next = snapshot_id.offset
        if self._listener_next >= self._hw:  # nothing new committed (most polls): no bounds, no read
            self._notify_leader_change()
            return False
        budget, records_left, read_bytes = self._delivery_bounds()
        hw, deliveries, at = self._hw, self._deliveries, self._listener_next  # locals: one pass per batch
        while at < hw and budget > 0 and records_left > 0:
            want = min(read_bytes, budget * self._delivered_batch_bytes + _READ_SLACK_BYTES)
            batches = self.log.read(at, want, until_offset=hw)
            take = getattr(batches, "take", None)
            if take is not None:  # a run with its headers in arrays (raft/wire.py BatchRun): in bulk
                k = take(hw, budget, records_left)
                if not k:
                    break
                run = batches[:k]
                if run.base_offset != at:
                    raise SafetyViolationError(f"node {self.node_id}: delivery gap at {at}")
                deliveries.append(CommitRun(run))
                at, budget, records_left = run.next_offset, budget - k, records_left - run.record_count
                self._delivered_batch_bytes = max(1, run.nbytes // k)
                continue
            used = used_bytes = 0
            for b in batches:
                count = len(b.records)
                if b.base_offset + count > hw or budget == 0 or records_left <= 0:
                    break
                if b.base_offset != at:
                    raise SafetyViolationError(f"node {self.node_id}: delivery gap at {at}")
                deliveries.append(Commit(b))
                at += count
                budget -= 1
                records_left -= count
                used += 1
                used_bytes += b.size_bytes()
            if not used:
                break
            self._delivered_batch_bytes = max(1, used_bytes // used)
        self._listener_next = at
        self._notify_leader_change()
        return self._listener_next < self._hw and (budget == 0 or records_left <= 0)

    def _delivery_bounds(self) -> tuple[int, int, int]:
        """(batches, records, read bytes) one poll may deliver: an observer's bounds or a voter's."""
        c = self.config
        if self._qs.is_observer:
            return c.observer_deliveries_max_batches, c.observer_deliveries_max_records, c.observer_deliveries_read_bytes
        return c.deliveries_max_batches, c.deliveries_max_records, c.deliveries_read_bytes

    def _notify_leader_change(self) -> None:
        s = self._qs.current
        if s.role is L:
            # Tell the state machine it leads only once it has seen everything committed before.
            if not self._leader_notified and self._listener_next >= self._leader.epoch_start_offset:
                self._leader_notified = True
                self._notified = (self.node_id, s.epoch)
                self._deliveries.append(LeaderChangeNotice(self.node_id, s.epoch))
            return
        self._leader_notified = False
        current = (self.leader_id, s.epoch)
        if current != self._notified:
            self._notified = current
            self._deliveries.append(LeaderChangeNotice(*current))

    def _snapshot_at(self, offset: int) -> OffsetAndEpoch | None:
        for sid in self.snapshots.snapshot_ids():
            if sid.offset == offset:
                return sid
        return None

    # ---- request handlers -------------------------------------------------------------------------

    def _cluster_ok(self, cluster_id: str | None) -> bool:
        # Kafka accepts a request without a cluster id (older clients); a different one is fenced.
        return cluster_id is None or self.cluster_id is None or cluster_id == self.cluster_id

    def _on_vote(self, env: Envelope, req: VoteRequest, now: int) -> None:
        def reply(granted: bool, error: Errors = Errors.NONE, partition_error: Errors = Errors.NONE) -> None:
            self._respond(env, VoteResponse(error, self.leader_id, self.epoch, granted, req.pre_vote,
                                            partition_error))

        if not self._cluster_ok(req.cluster_id):
            return reply(False, Errors.INCONSISTENT_CLUSTER_ID)
        if self._qs.is_observer or req.replica_id not in self.voters or req.voter_id not in (NO_ID, self.node_id):
            return reply(False, partition_error=Errors.INCONSISTENT_VOTER_SET)
        if req.replica_epoch < self.epoch:
            return reply(False)
        if req.replica_epoch > self.epoch:
            self._become_unattached(req.replica_epoch, now)
        s = self._qs.current
        up_to_date = (req.last_offset_epoch, req.last_offset) >= (self.log.last_fetched_epoch(), self.log.end_offset())
        if req.pre_vote:
            if s.role is P and req.replica_id in s.rejected:
                # It refused our pre-vote, and now asks for one itself: it no longer follows the
                # leader it refused us for (KIP-996's check: a follower that fetched rejects), so
                # ask it again. Else, when the survivor with the longer log timed out first, each
                # refuses the other (one still following, the other behind), and the round lasts
                # until a prospective's election timeout plus another fetch timeout.
                s.rejected.discard(req.replica_id)
            return reply(up_to_date and self._grants_pre_vote(s))
        if not up_to_date:
            return reply(False)
        cid = req.replica_id
        if s.voted_id == cid and s.role in (V, P):
            return reply(True)
        free = s.voted_id == NO_ID and s.leader_id == NO_ID and s.role in (U, P)
        if not free:
            if s.role is C:
                # Only a candidate of our epoch asks for a vote in it: the vote is split between
                # us. With the remaining voter silent (the dead leader, typically: the two
                # survivors' fetch timeouts expire together) neither can win nor lose, and the
                # round would last until a candidate's election timeout: back off instead.
                self._back_off(s, now)
            return reply(False)
        self._transition(NodeState(V, s.epoch, voted_id=cid, deadline_ms=now + self._election_timeout()), now)
        reply(True)

    def _grants_pre_vote(self, s: NodeState) -> bool:
        if s.role is L:
            return False
        if s.role is F:
            return not s.fetched_ok or s.leader_resigned
        return True

    def _refuse_leader_notice(self, req) -> tuple[Errors, Errors] | None:
        """(partition error, top-level error) refusing a Begin/EndQuorumEpoch: another cluster, a
        sender that is not a voter (or we are an observer), or an older epoch; None accepts it."""
        if not self._cluster_ok(req.cluster_id):
            return Errors.NONE, Errors.INCONSISTENT_CLUSTER_ID
        if self._qs.is_observer or req.leader_id not in self.voters:
            return Errors.INCONSISTENT_VOTER_SET, Errors.NONE
        if req.leader_epoch < self.epoch:
            return Errors.FENCED_LEADER_EPOCH, Errors.NONE
        return None

    def _on_begin_quorum_epoch(self, env: Envelope, req: BeginQuorumEpochRequest, now: int) -> None:
        def reply(partition_error: Errors = Errors.NONE, error: Errors = Errors.NONE) -> None:
            self._respond(env, BeginQuorumEpochResponse(error, self.leader_id, self.epoch, partition_error))

        refused = self._refuse_leader_notice(req)
        if refused is not None:
            return reply(*refused)
        self._observe(req.leader_epoch, req.leader_id, now)
        reply()

    def _on_end_quorum_epoch(self, env: Envelope, req: EndQuorumEpochRequest, now: int) -> None:
        def reply(partition_error: Errors = Errors.NONE, error: Errors = Errors.NONE) -> None:
            self._respond(env, EndQuorumEpochResponse(error, self.leader_id, self.epoch, partition_error))

        refused = self._refuse_leader_notice(req)
        if refused is not None:
            return reply(*refused)
        self._observe(req.leader_epoch, req.leader_id, now)
        s = self._qs.current
        if s.epoch == req.leader_epoch and req.leader_id != self.node_id:
            wait_ms = self._successor_wait_ms(req.preferred_successors)
            if s.role is F and s.leader_id == req.leader_id:
                s.leader_resigned = True
                s.deadline_ms = min(s.deadline_ms, now + wait_ms)
            elif s.role in (U, V):
                s.deadline_ms = min(s.deadline_ms, now + wait_ms)
        reply()

    def _successor_wait_ms(self, preferred: tuple[int, ...]) -> int:
        """How long to wait before asking for votes after the leader resigned: the first
        preferred successor at once, the next ones later, the rest after a full timeout."""
        if self.node_id not in preferred:
            return self._election_timeout()
        position = preferred.index(self.node_id)
        if position == 0:
            return 0
        step = max(1, self.config.election_backoff_max_ms // max(1, len(preferred)))
        return min(self.config.election_backoff_max_ms, position * step) + self.rng.randrange(0, step)

    def _leader_epoch_error(self, request_epoch: int) -> Errors:
        if request_epoch < self.epoch:
            return Errors.FENCED_LEADER_EPOCH
        if request_epoch > self.epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        if self._qs.role is not L:
            return Errors.NOT_LEADER_OR_FOLLOWER
        return Errors.NONE

    def _on_fetch(self, env: Envelope, req: FetchRequest, now: int) -> None:
        if not self._cluster_ok(req.cluster_id):
            return self._respond(env, FetchResponse(Errors.INCONSISTENT_CLUSTER_ID, Errors.NONE, self.leader_id,
                                                    self.epoch))
        if req.replica_id < 0:
            return self._on_consumer_fetch(env, req, now)
        if req.fetch_offset < 0 or req.last_fetched_epoch < 0 or req.last_fetched_epoch > req.current_leader_epoch:
            return self._respond(env, FetchResponse(Errors.NONE, Errors.INVALID_REQUEST, self.leader_id, self.epoch))
        error = self._leader_epoch_error(req.current_leader_epoch)
        if error is Errors.NOT_LEADER_OR_FOLLOWER and self._serves_observer(req.replica_id):
            return self._on_observer_fetch(env, req, now)
        if error is not Errors.NONE:
            return self._respond(env, FetchResponse(Errors.NONE, error, self.leader_id, self.epoch, self._hw))
        progress = self._progress_of(req.replica_id) if req.replica_id >= 0 else None
        hw_known_to_replica = progress.last_sent_hw if progress is not None else -1
        response = self._complete_fetch(req, now)
        answer_now = (
            response.batches or response.diverging_epoch is not None or response.snapshot_id is not None
            or response.preferred_read_replica != NO_ID
            or req.max_wait_ms == 0 or progress is None
            or (hw_known_to_replica < self._hw and self._hw_news_due(now))
        )
        if answer_now:
            return self._respond(env, response)
        # nothing new for this replica (or only an HW too fresh to send alone): park the fetch until
        # data, the HW's turn or max wait; the replica has not been told the HW the answer held
        # (a newer fetch from the same replica replaces the old one, which it gave up on)
        progress.last_sent_hw = hw_known_to_replica
        self._leader.parked[req.replica_id] = _Parked(env, req, now + req.max_wait_ms)

    def _hw_news_due(self, now: int) -> bool:
        """Whether a higher HW alone is worth an answer now (hw_notify_delay_ms after it moved)."""
        return now >= self._hw_advanced_ms + self.config.hw_notify_delay_ms

    def _complete_fetch(self, req: FetchRequest, now: int) -> FetchResponse:
        """Validate (FetchOffset, LastFetchedEpoch) against our epoch cache and build the answer."""
        epoch, hw = self.epoch, self._hw
        start = self.log.start_offset()
        read_replica = self._select_read_replica(req, now)
        offset, last_epoch = req.fetch_offset, req.last_fetched_epoch
        snapshot_id = self._snapshot_redirect(offset, last_epoch)
        diverging = self._divergence(offset, last_epoch) if snapshot_id is None else None
        if snapshot_id is not None or diverging is not None:
            return FetchResponse(Errors.NONE, Errors.NONE, self.node_id, epoch, high_watermark=hw,
                                 log_start_offset=start, diverging_epoch=diverging, snapshot_id=snapshot_id,
                                 preferred_read_replica=read_replica)
        if req.replica_id >= 0:
            progress = self._progress_of(req.replica_id)
            moved = progress.end_offset != offset
            progress.record_fetch(offset, self.log.end_offset(), now)
            progress.rack = req.rack
            # the HW is a function of the voters' ends, evaluated whenever one changes (here and in
            # _update_local_progress): a fetch at the same offset (the answer to a parked Fetch, a
            # repeat) cannot move it
            if moved and req.replica_id in self._leader.voters:
                self._maybe_advance_hw(now)
            progress.last_sent_hw = self._hw
        batches = self.log.read(offset, min(req.max_bytes, self.config.fetch_max_bytes))
        if read_replica != NO_ID:
            # the observer moves to a replica that serves only committed records: records past
            # the HW would put it ahead of that replica and earn it OFFSET_NOT_AVAILABLE
            batches = _committed_prefix(batches, self._hw)
        return FetchResponse(Errors.NONE, Errors.NONE, self.node_id, epoch, high_watermark=self._hw,
                             log_start_offset=start, batches=batches, preferred_read_replica=read_replica)

    def _snapshot_redirect(self, offset: int, last_epoch: int) -> OffsetAndEpoch | None:
        """The snapshot a fetcher at (offset, last_epoch) must load first, or None: it asks for
        something before our log start, or its last epoch cannot be checked against our log."""
        start = self.log.start_offset()
        if start == 0:
            return None
        start_snapshot = self._snapshot_at(start)
        if start_snapshot is None:
            raise SafetyViolationError(f"node {self.node_id}: log starts at {start} without a snapshot there")
        if offset < start or (offset == start and last_epoch != start_snapshot.epoch) \
                or last_epoch < start_snapshot.epoch:
            return self.snapshots.latest_snapshot_id()
        return None

    def _divergence(self, offset: int, last_epoch: int) -> OffsetAndEpoch | None:
        """Where a fetcher's log leaves ours (DivergingEpoch), or None when its log up to
        ``offset`` is a prefix of ours (Raft's log matching: same epoch at the same offset)."""
        if offset == 0 and self.log.start_offset() == 0:
            return None
        end_for_epoch = self.log.end_offset_for_epoch(last_epoch)
        if end_for_epoch.epoch != last_epoch or end_for_epoch.offset < offset:
            return end_for_epoch
        return None

    def _select_read_replica(self, req: FetchRequest, now: int) -> int:
        """KIP-392's rack-aware replica selector, for observers and consumers (never voters): a
        voter in the reader's rack that is in sync (caught up within ``replica_lag_time_max_ms``,
        Kafka's ISR rule) and whose log reaches the reader's fetch offset; the one furthest ahead,
        then the most recently caught up, then the lowest id. NO_ID (stay with the leader) when
        the reader names no rack, the leader is in its rack, or no voter qualifies."""
        rack = req.rack
        if rack is None or req.replica_id in self.voters or rack == self.config.rack:
            return NO_ID
        best, best_key = NO_ID, None
        for voter, p in self._leader.voters.items():
            if voter == self.node_id or p.rack != rack or p.last_caught_up_ms < 0:
                continue
            if now - p.last_caught_up_ms > self.config.replica_lag_time_max_ms or p.end_offset < req.fetch_offset:
                continue
            key = (p.end_offset, p.last_caught_up_ms, -voter)
            if best_key is None or key > best_key:
                best, best_key = voter, key
        return best

    # ---- serving observers from a follower (KIP-392) ----------------------------------------------

    def _serves_observer(self, replica_id: int) -> bool:
        """A follower voter answers fetches of observers (never of voters: a voter's fetch
        position counts for the high watermark and must reach the leader)."""
        return self._qs.role is F and not self._qs.is_observer and replica_id >= 0 and replica_id not in self.voters

    def _on_observer_fetch(self, env: Envelope, req: FetchRequest, now: int) -> None:
        response = self._observer_answer(req, expired=req.max_wait_ms == 0)
        if response is not None:
            return self._respond(env, response)
        # not there yet: wait for our HW to reach the offset (or move) until max wait
        self._observer_parked[req.replica_id] = _Parked(env, req, now + req.max_wait_ms)

    def _observer_answer(self, req: FetchRequest, *, expired: bool) -> FetchResponse | None:
        """A follower's answer to an observer, from its log up to its own high watermark only
        (everything below it is committed; everything above may still be truncated). None while
        there is nothing to say yet and the fetch may wait (``expired`` False)."""
        hw = self._hw
        base = dict(error_code=Errors.NONE, leader_id=self.leader_id, leader_epoch=self.epoch,
                    high_watermark=hw, log_start_offset=self.log.start_offset())
        offset, last_epoch = req.fetch_offset, req.last_fetched_epoch
        snapshot_id = self._snapshot_redirect(offset, last_epoch)
        if snapshot_id is not None:
            return FetchResponse(partition_error=Errors.NONE, snapshot_id=snapshot_id, **base)
        if offset > hw:
            # the observer is ahead of what we know to be committed (we lag the leader, or its
            # tail is uncommitted): wait, then tell it to retry or go back to the leader
            return FetchResponse(partition_error=Errors.OFFSET_NOT_AVAILABLE, **base) if expired else None
        diverging = self._divergence(offset, last_epoch)
        if diverging is not None:
            # never name an end past our HW: the observer would keep records we may truncate
            return FetchResponse(partition_error=Errors.NONE,
                                 diverging_epoch=OffsetAndEpoch(min(diverging.offset, hw), diverging.epoch), **base)
        batches = _committed_prefix(self.log.read(offset, min(req.max_bytes, self.config.fetch_max_bytes)), hw)
        if not batches and not expired and self._observer_sent_hw.get(req.replica_id, -1) >= hw:
            return None
        self._observer_sent_hw[req.replica_id] = hw
        if batches:
            self.observer_fetches_served += 1
        return FetchResponse(partition_error=Errors.NONE, batches=batches, **base)

    def _answer_parked_observer_fetches(self, now: int) -> None:
        for replica_id, parked in list(self._observer_parked.items()):
            response = self._observer_answer(parked.request, expired=now >= parked.deadline_ms)
            if response is not None:
                del self._observer_parked[replica_id]
                self._respond(parked.envelope, response)

    def _release_observer_fetches(self) -> None:
        """Our state changed: the observers we parked must go back to the leader."""
        for parked in self._observer_parked.values():
            self._respond(parked.envelope, FetchResponse(Errors.NONE, Errors.NOT_LEADER_OR_FOLLOWER,
                                                         self.leader_id, self.epoch, self._hw))
        self._observer_parked.clear()
        self._observer_sent_hw.clear()

    # ---- committed reads for consumers (replica_id < 0, KIP-392) -----------------------------------

    def _on_consumer_fetch(self, env: Envelope, req: FetchRequest, now: int) -> None:
        """A consumer reads committed records from the leader or any follower. Its position never
        counts for the high watermark, and it may name no epochs (-1: Kafka's "not known")."""
        response = self._consumer_answer(req, now, expired=req.max_wait_ms == 0)
        if response is not None:
            return self._respond(env, response)
        self._consumer_arrivals += 1
        self._consumer_parked[self._consumer_arrivals] = _Parked(env, req, now + req.max_wait_ms)

    def _consumer_answer(self, req: FetchRequest, now: int, *, expired: bool) -> FetchResponse | None:
        """The answer to a consumer: only records at or below this node's high watermark.
        Before the log start or past the log end: OFFSET_OUT_OF_RANGE with the log start offset
        and the high watermark (and the snapshot to load, for a reader of the metadata log);
        between the high watermark and the log end: OFFSET_NOT_AVAILABLE once the wait is over.
        None while there is nothing to say and the fetch may wait."""
        hw, start = max(self._hw, 0), self.log.start_offset()
        base = dict(error_code=Errors.NONE, leader_id=self.leader_id, leader_epoch=self.epoch,
                    high_watermark=hw, log_start_offset=start)
        error = self._consumer_error(req)
        if error is not Errors.NONE:
            return FetchResponse(partition_error=error, **base)
        offset, last_epoch = req.fetch_offset, req.last_fetched_epoch
        if offset < start or offset > self.log.end_offset():
            snapshot_id = self.snapshots.latest_snapshot_id() if offset < start else None
            return FetchResponse(partition_error=Errors.OFFSET_OUT_OF_RANGE, snapshot_id=snapshot_id, **base)
        if offset > hw:
            return FetchResponse(partition_error=Errors.OFFSET_NOT_AVAILABLE, **base) if expired else None
        if last_epoch >= 0 and offset > start:
            diverging = self._divergence(offset, last_epoch)
            if diverging is not None:
                # committed records never diverge: the reader's epoch is wrong, not our log
                return FetchResponse(partition_error=Errors.NONE, **base,
                                     diverging_epoch=OffsetAndEpoch(min(diverging.offset, hw), diverging.epoch))
        batches = _committed_prefix(self.log.read(offset, min(req.max_bytes, self.config.fetch_max_bytes)), hw)
        if not batches and not expired:
            return None
        replica = self._select_read_replica(req, now) if self._leader is not None else NO_ID
        return FetchResponse(partition_error=Errors.NONE, batches=batches, preferred_read_replica=replica, **base)

    def _consumer_error(self, req: FetchRequest) -> Errors:
        """Who may answer a consumer: a leader or a follower (voter or observer) in the epoch the
        consumer names, if it names one."""
        if req.fetch_offset < 0 or 0 <= req.current_leader_epoch < req.last_fetched_epoch:
            return Errors.INVALID_REQUEST
        if req.current_leader_epoch >= 0 and req.current_leader_epoch != self.epoch:
            return self._leader_epoch_error(req.current_leader_epoch)
        if self._qs.role not in (L, F):
            return Errors.NOT_LEADER_OR_FOLLOWER
        return Errors.NONE

    def _answer_parked_consumer_fetches(self, now: int) -> None:
        for key, parked in list(self._consumer_parked.items()):
            response = self._consumer_answer(parked.request, now, expired=now >= parked.deadline_ms)
            if response is not None:
                del self._consumer_parked[key]
                self._respond(parked.envelope, response)

    def _release_consumer_fetches(self, now: int) -> None:
        """Our state changed: every waiting consumer gets its answer as of the new state."""
        for parked in self._consumer_parked.values():
            self._respond(parked.envelope, self._consumer_answer(parked.request, now, expired=True))
        self._consumer_parked.clear()

    def _on_fetch_snapshot(self, env: Envelope, req: FetchSnapshotRequest, now: int) -> None:
        def reply(partition_error: Errors, error: Errors = Errors.NONE, **kw) -> None:
            self._respond(env, FetchSnapshotResponse(error, partition_error, self.leader_id, self.epoch, **kw))

        if not self._cluster_ok(req.cluster_id):
            return reply(Errors.NONE, Errors.INCONSISTENT_CLUSTER_ID)
        error = self._leader_epoch_error(req.current_leader_epoch)
        if error is Errors.NOT_LEADER_OR_FOLLOWER and self._serves_observer(req.replica_id):
            error = Errors.NONE  # KIP-392: our snapshots are committed state, as the leader's are
        if error is not Errors.NONE:
            return reply(error)
        size = self.snapshots.size(req.snapshot_id)
        if size is None:
            return reply(Errors.SNAPSHOT_NOT_FOUND)
        if not 0 <= req.position <= size:
            return reply(Errors.POSITION_OUT_OF_RANGE)
        if req.replica_id >= 0 and self._leader is not None:
            self._progress_of(req.replica_id).last_fetch_ms = now  # alive, counts for the progress check
        chunk = self.snapshots.read_chunk(req.snapshot_id, req.position,
                                          min(req.max_bytes, self.config.snapshot_chunk_max_bytes))
        reply(Errors.NONE, snapshot_id=req.snapshot_id, size=size, position=req.position, data=chunk)

    def _on_describe_quorum(self, env: Envelope, req: DescribeQuorumRequest, now: int) -> None:
        self._respond(env, self.describe_quorum())

    # ---- response handlers ------------------------------------------------------------------------

    def _on_vote_response(self, env: Envelope, resp: VoteResponse, pending: _Pending, now: int) -> None:
        if resp.error_code is not Errors.NONE or resp.partition_error is not Errors.NONE:
            return
        if self._observe(resp.leader_epoch, resp.leader_id, now):
            return
        s = self._qs.current
        if s.serial != pending.serial or resp.leader_epoch != s.epoch:
            return
        if (s.role is P and pending.extra) or (s.role is C and not pending.extra):
            (s.granted if resp.vote_granted else s.rejected).add(env.source)

    def _on_begin_response(self, env: Envelope, resp: BeginQuorumEpochResponse, pending: _Pending, now: int) -> None:
        if resp.error_code is not Errors.NONE:
            return
        if self._observe(resp.leader_epoch, resp.leader_id, now):
            return
        if self._qs.role is L and resp.leader_epoch == self.epoch and resp.partition_error is Errors.NONE:
            self._leader.voters[env.source].begin_acked = True

    def _on_end_response(self, env: Envelope, resp: EndQuorumEpochResponse, pending: _Pending, now: int) -> None:
        if resp.error_code is not Errors.NONE:
            return
        if self._observe(resp.leader_epoch, resp.leader_id, now):
            return
        self._end_quorum_pending.discard(env.source)

    def _on_fetch_response(self, env: Envelope, resp: FetchResponse, pending: _Pending, now: int) -> None:
        current_replica = self._read_replica != NO_ID and env.source == self._read_replica
        if resp.error_code is not Errors.NONE:
            self._fetch_backoff_until_ms = now + self.config.retry_backoff_ms
            if current_replica:
                self._drop_read_replica(failed=True)
            return
        if env.source == resp.leader_id:
            # the leader answered in person: it is alive, whatever silence made us leave it (our
            # own stall, say a paused process); only another voter's word about it is stale
            self._left_leader = (NO_EPOCH, NO_ID)
        if self._observe(resp.leader_epoch, resp.leader_id, now):
            return
        s = self._qs.current
        if s.role is not F or s.serial != pending.serial:
            self._fetch_backoff_until_ms = now + self.config.retry_backoff_ms
            return
        # in this state we fetched only from the leader or from a read replica (observers); an
        # answer of a replica we have left since is still a valid, committed-only answer
        via_replica = env.source != s.leader_id
        if resp.partition_error is not Errors.NONE:
            self._fetch_backoff_until_ms = now + self.config.retry_backoff_ms
            if current_replica:
                self._read_replica_error(resp.partition_error)
            return
        s.fetched_ok = True
        s.deadline_ms = now + self.config.fetch_timeout_ms
        if via_replica:
            if current_replica:
                self._read_replica_failures = 0
        elif self._qs.is_observer and self._adopt_read_replica(resp.preferred_read_replica, s, now) \
                and resp.snapshot_id is not None:
            return  # load the replica's own snapshot: the leader's may not be there
        sent_end, sent_epoch = pending.extra
        if sent_end != self.log.end_offset() or sent_epoch != self.log.last_fetched_epoch():
            return  # our log moved since the request (truncation, snapshot): ask again
        if resp.diverging_epoch is not None:
            self._truncate_to_diverging(resp.diverging_epoch)
        elif resp.snapshot_id is not None:
            self._snapshot_fetch = _SnapshotFetch(resp.snapshot_id, env.source)
        else:
            batches = resp.batches
            if batches:
                # a run (raft/wire.py BatchRun) says where it starts without making its first batch
                first = getattr(batches, "base_offset", None)
                if (batches[0].base_offset if first is None else first) != sent_end:
                    return
                self.log.append_as_follower(batches, s.epoch)
                self._flush = True
                count = getattr(batches, "record_count", None)
                self.metrics.fetch_records.record(now, count if count is not None else
                                                  sum(len(b.records) for b in batches))
            # Only a validated answer proves our log is a prefix of the leader's, so only then
            # may the leader's high watermark mark our records committed.
            self._follower_high_watermark(resp.high_watermark)

    # ---- reading from a replica (observer side of KIP-392) -------------------------------------------

    def _adopt_read_replica(self, replica_id: int, s: NodeState, now: int) -> bool:
        """Follow the leader's PreferredReadReplica until the refresh time; True if adopted."""
        if replica_id not in self.voters or replica_id in (s.leader_id, self.node_id):
            return False
        self._read_replica = replica_id
        self._read_replica_until_ms = now + self.config.preferred_replica_refresh_ms
        self._read_replica_failures = 0
        return True

    def _read_replica_error(self, error: Errors) -> None:
        # The replica lags (our offset is past its HW) or has not learned the epoch yet: both
        # pass, so retry there a few times. Anything else (it stopped following, a newer epoch,
        # an offset it cannot serve) sends us back to the leader, which knows better.
        if error in (Errors.OFFSET_NOT_AVAILABLE, Errors.UNKNOWN_LEADER_EPOCH):
            self._read_replica_failures += 1
            if self._read_replica_failures < self.config.preferred_replica_max_failures:
                return
        self._drop_read_replica(failed=True)

    def _read_replica_timed_out(self, pending: _Pending) -> None:
        """A request to our read replica (or to the replica a snapshot comes from) expired."""
        sf = self._snapshot_fetch
        if pending.kind is FetchSnapshotRequest and sf is not None and sf.source == pending.destination \
                and sf.source != self._qs.current.leader_id:
            self.snapshots.abort(sf.snapshot_id)
            self._snapshot_fetch = None
            self._drop_read_replica(failed=True)
        elif pending.kind is FetchRequest and pending.destination == self._read_replica != NO_ID:
            self._drop_read_replica(failed=True)

    def _drop_read_replica(self, *, failed: bool) -> None:
        if self._read_replica != NO_ID and failed:
            self.read_replica_fallbacks += 1
        self._read_replica = NO_ID
        self._read_replica_failures = 0

    def _follower_high_watermark(self, leader_hw: int) -> None:
        hw = min(leader_hw, self.log.end_offset())
        if hw > self._hw:
            self._hw = hw
            self.log.update_high_watermark(hw)

    def _truncate_to_diverging(self, diverging: OffsetAndEpoch) -> None:
        # Kafka's truncateToEndOffset: keep our records up to where our epoch history and the
        # leader's agree.
        if diverging.epoch == 0:
            offset = min(diverging.offset, self.log.end_offset())
        else:
            local = self.log.end_offset_for_epoch(diverging.epoch)
            offset = min(local.offset, diverging.offset) if local.epoch == diverging.epoch else local.offset
        floor = max(self._hw, self.log.start_offset())
        if offset < floor:
            raise SafetyViolationError(f"node {self.node_id}: leader asks to truncate to {offset}, below the "
                                       f"committed offset {floor}")
        self.log.truncate_to(offset)
        self.truncations += 1
        self._flush = True

    def _on_fetch_snapshot_response(self, env: Envelope, resp: FetchSnapshotResponse, pending: _Pending,
                                    now: int) -> None:
        if resp.error_code is not Errors.NONE:
            self._fetch_backoff_until_ms = now + self.config.retry_backoff_ms
            return
        if self._observe(resp.leader_epoch, resp.leader_id, now):
            return
        s, sf = self._qs.current, self._snapshot_fetch
        if s.role is not F or s.serial != pending.serial or sf is None or env.source != sf.source:
            return
        if resp.partition_error is not Errors.NONE:
            from_replica = sf.source != s.leader_id
            ask_again = resp.partition_error in (Errors.SNAPSHOT_NOT_FOUND, Errors.POSITION_OUT_OF_RANGE)
            if ask_again or from_replica:
                # fetch again: the source names its current snapshot; a replica that refuses for
                # another reason (it stopped following) is left for the leader
                self.snapshots.abort(sf.snapshot_id)
                self._snapshot_fetch = None
                if not ask_again:
                    self._drop_read_replica(failed=True)
            else:
                self._fetch_backoff_until_ms = now + self.config.retry_backoff_ms
            return
        s.fetched_ok = True
        s.deadline_ms = now + self.config.fetch_timeout_ms
        if resp.snapshot_id != sf.snapshot_id or resp.position != sf.position:
            return
        self.snapshots.write_chunk(sf.snapshot_id, sf.position, resp.data)
        sf.position += len(resp.data)
        sf.size = resp.size
        if sf.position < sf.size:
            return
        self._snapshot_fetch = None
        try:
            self.snapshots.finish(sf.snapshot_id, sf.size)
        except UndecodableRecordError:  # corrupt, or a codec that does not exist
            self.snapshots.abort(sf.snapshot_id)
            return
        self._install_snapshot(sf.snapshot_id)

    def _install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        if self._qs.role is L:
            raise SafetyViolationError(f"leader {self.node_id} asked to install a snapshot")
        self._move_log_start(lambda: self.log.truncate_fully_and_start_at(snapshot_id.offset, snapshot_id.epoch))
        self.snapshots_installed += 1
        if snapshot_id.offset > self._hw:
            self._hw = snapshot_id.offset
            self.log.update_high_watermark(snapshot_id.offset)

    _request_handlers = {
        VoteRequest: _on_vote,
        BeginQuorumEpochRequest: _on_begin_quorum_epoch,
        EndQuorumEpochRequest: _on_end_quorum_epoch,
        FetchRequest: _on_fetch,
        FetchSnapshotRequest: _on_fetch_snapshot,
        DescribeQuorumRequest: _on_describe_quorum,
    }
    _response_handlers = {
        VoteResponse: _on_vote_response,
        BeginQuorumEpochResponse: _on_begin_response,
        EndQuorumEpochResponse: _on_end_response,
        FetchResponse: _on_fetch_response,
        FetchSnapshotResponse: _on_fetch_snapshot_response,
    }


_RESPONSE_OF = {
    VoteRequest: VoteResponse,
    BeginQuorumEpochRequest: BeginQuorumEpochResponse,
    EndQuorumEpochRequest: EndQuorumEpochResponse,
    FetchRequest: FetchResponse,
    FetchSnapshotRequest: FetchSnapshotResponse,
    DescribeQuorumRequest: DescribeQuorumResponse,
}


def _with_voter(request: VoteRequest, voter_id: int) -> VoteRequest:
    return VoteRequest(request.cluster_id, voter_id, request.replica_epoch, request.replica_id,
                       request.last_offset_epoch, request.last_offset, request.pre_vote)


def _committed_prefix(batches: tuple, hw: int) -> tuple:
    """The leading batches that end at or below ``hw`` (a batch is never cut: raft moves whole
    batches, and the HW sits on batch ends)."""
    take = getattr(batches, "take", None)
    if take is not None:
        n = take(hw, len(batches), 1 << 62)
    else:
        n = 0
        while n < len(batches) and batches[n].next_offset <= hw:
            n += 1
    return batches if n == len(batches) else batches[:n]


def _fresh(stored: ElectionState | None, initial: NodeState) -> bool:
    """Whether ``initial`` needs no write: a node whose store is empty (never written, e.g. just
    formatted) starting unattached in epoch 0 with no leader and no vote. A crash before its first
    write reads back as this same state, so writing it (a temp file, two fsyncs and a rename,
    ~5 ms) promises nothing; skipping it lets a new voter catching up send its first Fetch that
    much sooner (issue 19). Any other start writes its state before acting in it."""
    return stored is None and initial.epoch == 0 and initial.leader_id == NO_ID and initial.voted_id == NO_ID
