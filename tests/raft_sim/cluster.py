"""Deterministic whole-cluster simulation of the raft core: one process, one seed, one fake
clock, an event queue for messages, timers, client appends and faults.

``run_seed(seed)`` builds a cluster from the seed (3 or 5 voters, 0-2 observers, fault mix),
runs a fault phase, then heals everything, restarts every node and lets the cluster settle, and
checks that all nodes agree. Invariants are checked after every event:

    * at most one leader per epoch (over the whole run, across restarts);
    * a voter never grants its vote to two candidates in one epoch (over the whole run: every
      granted VoteResponse that leaves a node is recorded);
    * the persisted epoch never decreases and a vote never changes within an epoch
      (MemQuorumStore asserts on write);
    * a node's high watermark never decreases while it lives, in particular a leader's;
    * a majority of voters has durable log end >= every leader's high watermark;
    * a log whose start offset is above 0 has a snapshot at exactly that offset;
    * a node never loads a snapshot after its listener was told it leads (the core raises);
    * committed data never changes: every batch a listener receives at an offset must equal
      what any listener ever received there, and every snapshot must hold exactly the digest
      of the committed prefix it claims;
    * every batch a non-leader's listener receives (an observer's, whether it read from the
      leader or from a follower in its rack, KIP-392) is one some leader had already committed:
      the simulator copies each leader's log up to its high watermark as it advances, and the
      batch must be that copy's batch at that offset;
    * nothing a listener received is ever truncated: a live node's log end never falls below
      its listener's next offset;
    * at the end, every node's listener reached the same offset with the same digest.

Faults: message drop, delay, reordering, duplication; symmetric and asymmetric partitions and
healing; hard kill + restart (optionally with a torn log tail); graceful shutdown (a leader
resigns first); kill all and restart a majority; wiping an observer's whole state; a slow voter
(every message to or from it delayed, so it lags the leader and its high watermark trails);
storage faults decided as the asyncio driver decides them (raft/aio/driver.py): a node's next
fsync or quorum-state write fails (it stops, losing its unflushed tail, and restarts later), a
full disk for a while (a leader resigns, a follower keeps fetching and catches up after);
stalls (a node's loop runs nothing for up to 500 ms: its messages wait, its timers fire late)
and, on some seeds, a slow state machine (each applied batch keeps the loop busy 1-3 ms).
Every Ready is acted on by raft/ready.py's execute_ready, the driver's executor, so every seed
runs the production order (the leader's Fetch responses before its flush).

Racks (KIP-392): in some seeds every node has a rack, so observers are sent by the leader to a
follower in their rack and read committed records from it; ``Simulation(seed, racks=True)``
forces racks and at least one observer (the quick KIP-392 seed run).

Wiping a voter is never simulated: a voter that forgets its vote may vote twice in an epoch, and
one that forgets acknowledged records may turn a committed entry into a minority one. KIP-853
makes that safe by giving the wiped node a new directory id (it rejoins as a new replica);
without dynamic voters the only safe rule is that a wiped node comes back as an observer, or
not at all. Observers hold no vote and are never counted, so wiping one is always safe.

A failure raises SimFailure carrying the seed and the event trace; rerun one seed verbosely
with ``KRAFTLOG_SIM_SEED=N``.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import heapq
import random
import struct
import zlib
from dataclasses import dataclass, field

from kraftlog.engine.records.batch import build_batch_from_values
from kraftlog.raft import wire
from kraftlog.raft.core import RaftConfig, RaftCore
from kraftlog.raft.messages import (
    EndQuorumEpochRequest,
    Envelope,
    FetchResponse,
    FetchSnapshotResponse,
    VoteResponse,
)
from kraftlog.raft.ready import StepFault, execute_ready, out_of_space, step_fault
from kraftlog.raft.state import Role
from kraftlog.raft.types import NO_ID, ClientBatch, Errors, LogBatch, NotLeaderError

from .storage import FakeClock, MemLog, MemQuorumStore, MemSnapshotStore

SIM_CONFIG = RaftConfig(
    election_timeout_ms=100,
    election_backoff_max_ms=60,
    fetch_timeout_ms=200,
    request_timeout_ms=60,
    retry_backoff_ms=10,
    fetch_max_wait_ms=40,
    fetch_max_bytes=2048,
    snapshot_chunk_max_bytes=64,  # small, so snapshots move in several chunks
    replica_lag_time_max_ms=200,
    preferred_replica_refresh_ms=400,  # observers go back to the leader several times a run
    preferred_replica_max_failures=3,
)
RACKS = ("r1", "r2", "r3")
TRACE_MAX_LINES = 3000
_SNAP = struct.Struct(">qqI")  # snapshot payload: end offset, record count, digest


class SimFailure(AssertionError):
    def __init__(self, seed: int, reason: str, trace: list[str]):
        tail = "\n".join(trace[-200:])
        super().__init__(f"seed {seed}: {reason}\n(rerun with KRAFTLOG_SIM_SEED={seed})\n--- last events ---\n{tail}")
        self.seed, self.reason, self.trace = seed, reason, trace


class StateMachine:
    """The listener: folds committed records into a CRC-32 digest (a cheap, exact stand-in for
    real state) and checks each delivery against the cluster-wide committed history."""

    def __init__(self, node: SimNode):
        self.node = node
        self.next_offset = 0
        self.digest = 0
        self.count = 0
        self.leader_notified = False

    def handle_load_snapshot(self, snapshot_id, snapshots) -> None:
        cluster = self.node.cluster
        cluster.coverage["snapshot_loaded"] += 1
        if self.leader_notified and self.node.core.role is Role.LEADER:
            cluster.fail(f"leader {self.node.id} loads a snapshot")
        data = snapshots.read_chunk(snapshot_id, 0, 1 << 30)
        end, count, digest = _SNAP.unpack(data)
        self.node.cluster.check_snapshot(self.node, snapshot_id, end, count, digest)
        self.next_offset, self.count, self.digest = end, count, digest

    def handle_commit(self, batch: LogBatch) -> None:
        if batch.base_offset != self.next_offset:
            self.node.cluster.fail(f"node {self.node.id} got batch at {batch.base_offset}, expected {self.next_offset}")
        d = zlib.crc32(struct.pack(">i?", batch.epoch, batch.control), self.digest)
        for r in batch.records:
            d = zlib.crc32(r, d)
        self.digest = d
        self.count += len(batch.records)
        self.next_offset = batch.next_offset
        self.node.cluster.check_commit(self.node, batch, self.digest)
        self.node.apply_ms += self.node.cluster.apply_ms_per_batch

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leader_notified = leader_id == self.node.id

    def snapshot_bytes(self) -> bytes:
        return _SNAP.pack(self.next_offset, self.count, self.digest)


@dataclass
class SimNode:
    id: int
    voter: bool
    cluster: Simulation
    log: MemLog = field(default_factory=MemLog)
    quorum: MemQuorumStore = field(default_factory=MemQuorumStore)
    snapshots: MemSnapshotStore = field(default_factory=MemSnapshotStore)
    core: RaftCore | None = None
    machine: StateMachine | None = None
    incarnation: int = 0
    timer_at: int = -1
    max_hw: int = -1
    counted: tuple[int, int, int, int] = (0, 0, 0, 0)
    rack: str | None = None
    busy_until: int = 0  # the node's loop is busy (applying, or stalled) until then: events wait
    apply_ms: int = 0  # simulated time its listener spent in the current run_node

    @property
    def alive(self) -> bool:
        return self.core is not None


class Simulation:
    def __init__(self, seed: int, *, verbose: bool = False, racks: bool = False, forget_votes: bool = False,
                 voters: int | None = None, observers: int | None = None):
        """``voters`` / ``observers`` fix the cluster's size for a scripted scenario (the seed still
        draws them, so every other choice of the seed stays the same)."""
        self.seed = seed
        # a mutation for the checker's own test: every restart loses the voter's quorum-state (what
        # a deleted quorum-state file does), which the vote invariant must catch
        self.forget_votes = forget_votes
        self.rng = random.Random(seed)
        self.verbose = verbose
        self.clock = FakeClock(0)
        self.queue: list = []
        self.seq = 0
        self.trace: list[str] = []
        rng = self.rng
        n_voters = rng.choice((3, 3, 5))
        n_observers = rng.choice((0, 1, 1, 2))
        n_voters = n_voters if voters is None else voters
        n_observers = n_observers if observers is None else observers
        with_racks = rng.random() < 0.4
        if racks:
            n_observers, with_racks = max(n_observers, 1), True
        self.voters = frozenset(range(1, n_voters + 1))
        self.nodes = {i: SimNode(i, i in self.voters, self) for i in range(1, n_voters + n_observers + 1)}
        if with_racks:
            # voters spread over the racks (two may share one), observers anywhere
            for node in self.nodes.values():
                node.rack = RACKS[(node.id - 1) % len(RACKS)] if node.voter else rng.choice(RACKS)
        # the fault mix of this seed
        self.drop_p = rng.choice((0.0, 0.01, 0.05, 0.15))
        self.dup_p = rng.choice((0.0, 0.02, 0.05))
        self.reorder_p = rng.choice((0.0, 0.05, 0.2))
        self.fault_every_ms = rng.choice((150, 300, 600))
        # applying a committed batch takes simulated time on some seeds (a slow state machine):
        # the node's loop is busy meanwhile, so its timers fire late and messages wait
        self.apply_ms_per_batch = rng.choice((0, 0, 0, 1, 3))
        self.blocked: set[tuple[int, int]] = set()  # (from, to) pairs that lose every message
        self.slow: dict[int, int] = {}  # node -> extra delay (ms) of every message to or from it
        self.leaders: dict[int, int] = {}  # epoch -> leader id, over the whole run
        self.votes: dict[tuple[int, int], int] = {}  # (voter, epoch) -> the candidate it granted, whole run
        self.committed: dict[int, tuple[int, bool, tuple[bytes, ...]]] = {}  # base offset -> batch
        # what leaders committed, copied from a leader's log as its high watermark moves
        self.leader_committed: dict[int, tuple[int, bool, tuple[bytes, ...]]] = {}
        self.leader_committed_end = 0
        self.digest_at: dict[int, tuple[int, int]] = {0: (0, 0)}  # next offset -> (count, digest)
        self.append_counter = 0
        self.events = 0
        self.faults_on = True
        self.coverage: collections.Counter = collections.Counter()  # which paths this seed ran
        # with faults off every message takes a delay drawn from this range (ms); a scripted
        # scenario narrows it to make two nodes' timers fire together
        self.calm_delay_ms = (1, 3)
        self.transitions: list[tuple[int, int, Role, int]] = []  # (time, node, new role, epoch)
        self._log(f"cluster voters={sorted(self.voters)} observers={n_observers} drop={self.drop_p} "
                  f"dup={self.dup_p} reorder={self.reorder_p} faults every {self.fault_every_ms} ms"
                  + (f" racks={ {n.id: n.rack for n in self.nodes.values()} }" if with_racks else ""))

    # -- bookkeeping --------------------------------------------------------------------------

    def _log(self, line: str) -> None:
        text = f"{self.clock.now_ms:6d} {line}"
        if self.verbose:
            print(text)
        self.trace.append(text)
        if len(self.trace) > TRACE_MAX_LINES:
            del self.trace[: TRACE_MAX_LINES // 2]

    def fail(self, reason: str):
        raise SimFailure(self.seed, reason, self.trace)

    def _push(self, at_ms: int, kind: str, payload) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (at_ms, self.seq, kind, payload))

    # -- nodes ------------------------------------------------------------------------------

    def start(self, node: SimNode) -> None:
        node.incarnation += 1
        if self.forget_votes and node.incarnation > 1:
            node.quorum = MemQuorumStore()
        node.machine = StateMachine(node)
        node.busy_until, node.apply_ms = 0, 0  # a new process: whatever stalled the old one is gone
        node.max_hw = -1
        node.counted = (0, 0, 0, 0)
        config = SIM_CONFIG if node.rack is None else dataclasses.replace(SIM_CONFIG, rack=node.rack)
        node.core = RaftCore(node_id=node.id, voters=self.voters, cluster_id="sim-cluster", clock=self.clock,
                             rng=random.Random(self.rng.getrandbits(64)), log=node.log, quorum_store=node.quorum,
                             snapshots=node.snapshots, config=config)
        node.timer_at = -1
        self._log(f"start node {node.id} (incarnation {node.incarnation}) as {node.core.role.value} "
                  f"epoch {node.core.epoch} log [{node.log.start_offset()}, {node.log.end_offset()})")
        self.run_node(node)

    def kill(self, node: SimNode, *, torn_tail: bool) -> None:
        if not node.alive:
            return
        self._log(f"kill node {node.id}{' (torn tail)' if torn_tail else ''}")
        if torn_tail:
            self.coverage["torn_tail"] += 1
        node.core = None
        node.machine = None
        node.log.crash(self.rng, torn_tail)
        node.snapshots.crash()

    def run_node(self, node: SimNode) -> None:
        """Poll the core and act on each Ready (persist, send, apply) until it is quiet."""
        core = node.core
        before = (core.role, core.epoch, core.leader_id)
        for _ in range(16):
            try:
                ready = core.poll()
                # the production executor (raft/ready.py), so every seed runs the driver's order
                execute_ready(ready, quorum_store=node.quorum, log=node.log, channel=self, listener=node.machine,
                              snapshots=node.snapshots)
            except OSError as exc:
                self.stop_on_io_error(node, exc)
                return
            if ready.is_empty or core is not node.core:
                break
        after = (core.role, core.epoch, core.leader_id)
        if node.apply_ms:
            node.busy_until = max(node.busy_until, self.clock.now_ms + node.apply_ms)
            node.apply_ms = 0
            self.coverage["slow_apply"] += 1
        # a node's log changes only in step() and poll(), and every step is followed by this
        if node.machine is not None and node.log.end_offset() < node.machine.next_offset:
            self.fail(f"node {node.id} log ends at {node.log.end_offset()}, below what its listener got "
                      f"({node.machine.next_offset}): delivered records were truncated")
        # the core's counters move in step() and poll(); count what moved since last time
        counters = (core.truncations, core.snapshots_installed, core.observer_fetches_served,
                    core.read_replica_fallbacks)
        for name, now_value, before_value in zip(("truncated", "snapshot_installed", "observer_served_by_follower",
                                                  "read_replica_fallback"), counters, node.counted, strict=True):
            self.coverage[name] += now_value - before_value
        node.counted = counters
        if after != before:
            self.transitions.append((self.clock.now_ms, node.id, after[0], after[1]))
            if after[0] is Role.LEADER:
                self.coverage["leader_elected"] += 1
            self._log(f"node {node.id}: {before[0].value}(e{before[1]}) -> {after[0].value}(e{after[1]}, "
                      f"leader {after[2]}) log [{node.log.start_offset()}, {node.log.end_offset()}) "
                      f"hw {core.high_watermark}")
        if node.core is core:
            at = max(ready.next_poll_ms, self.clock.now_ms + 1)
            if node.timer_at < self.clock.now_ms or at < node.timer_at:
                node.timer_at = at
                self._push(at, "timer", (node.id, node.incarnation))

    # -- network ------------------------------------------------------------------------------

    def send(self, env: Envelope) -> None:
        body = env.body
        if type(body) is VoteResponse and body.vote_granted and not body.pre_vote:
            key = (env.source, body.leader_epoch)
            if self.votes.setdefault(key, env.destination) != env.destination:
                self.fail(f"node {env.source} voted twice in epoch {body.leader_epoch}: for "
                          f"{self.votes[key]} and for {env.destination}")
        dst = self.nodes[env.destination]
        if not dst.voter:
            self._count_read_replica_paths(env)
        if not self.faults_on:
            self._push(self.clock.now_ms + self.rng.randint(*self.calm_delay_ms), "msg", (env, dst.incarnation))
            return
        rng = self.rng
        if (env.source, env.destination) in self.blocked or rng.random() < self.drop_p:
            return
        copies = 2 if rng.random() < self.dup_p else 1
        for _ in range(copies):
            delay = rng.randint(1, 4) + self.slow.get(env.source, 0) + self.slow.get(env.destination, 0)
            if rng.random() < self.reorder_p:
                delay += rng.randint(0, 40)
            self._push(self.clock.now_ms + delay, "msg", (env, dst.incarnation))

    def _count_read_replica_paths(self, env: Envelope) -> None:
        """Coverage of KIP-392's answers: sent by a voter that is not the leader to an observer."""
        body = env.body
        if not isinstance(body, FetchResponse | FetchSnapshotResponse):
            return
        sender = self.nodes[env.source].core
        if sender is None or sender.role is Role.LEADER:
            return
        if isinstance(body, FetchSnapshotResponse):
            if body.data:
                self.coverage["snapshot_from_follower"] += 1
        elif body.partition_error is Errors.OFFSET_NOT_AVAILABLE:
            self.coverage["offset_not_available"] += 1
        elif body.diverging_epoch is not None:
            self.coverage["diverging_from_follower"] += 1
        elif body.snapshot_id is not None:
            self.coverage["snapshot_redirect_from_follower"] += 1

    def deliver(self, env: Envelope, incarnation: int) -> None:
        node = self.nodes[env.destination]
        if not node.alive or node.incarnation != incarnation or (env.source, env.destination) in self.blocked:
            return
        body = env.body
        if isinstance(body, EndQuorumEpochRequest):
            self.coverage["end_quorum"] += 1
        elif isinstance(body, VoteResponse) and body.pre_vote and not body.vote_granted:
            self.coverage["prevote_rejected"] += 1
        try:
            node.core.step(env)
        except OSError as exc:  # decided as the driver decides (raft/ready.py step_fault)
            if step_fault(exc) is StepFault.STOP:
                self.stop_on_io_error(node, exc)
                return
            self.coverage["follower_disk_full"] += 1
        self.run_node(node)

    def stop_on_io_error(self, node: SimNode, exc: OSError) -> None:
        """What the driver does on a failed flush or quorum-state write: the node stops (its
        unflushed tail is lost, as in a crash) and is restarted later."""
        self._log(f"node {node.id} stops on an I/O error: {exc}")
        self.coverage["io_error_stop"] += 1
        self.kill(node, torn_tail=False)
        self._push(self.clock.now_ms + self.rng.randint(20, 300), "restart", node.id)

    # -- invariants --------------------------------------------------------------------------------

    def check_commit(self, node: SimNode, batch: LogBatch, digest_after: int) -> None:
        seen = self.committed.get(batch.base_offset)
        mine = (batch.epoch, batch.control, tuple(batch.records))
        if node.core is not None and node.core.role is not Role.LEADER:
            # a leader delivers in the event that moves its HW, before record_leader_commits ran;
            # everyone else learns a HW that a leader reached in an earlier event
            if self.leader_committed.get(batch.base_offset) != mine:
                kind = "observer" if not node.voter else "follower"
                self.fail(f"{kind} {node.id} delivered {mine} at {batch.base_offset}, which no leader had "
                          f"committed (leaders committed up to {self.leader_committed_end})")
            if not node.voter and node.core.fetch_source_id not in (NO_ID, node.core.leader_id):
                self.coverage["observer_delivered_from_follower"] += 1
        if seen is None:
            self.committed[batch.base_offset] = mine
        elif seen != mine:
            self.fail(f"node {node.id} committed {mine} at {batch.base_offset}, others committed {seen}")
        known = self.digest_at.get(batch.next_offset)
        state = (node.machine.count, digest_after)
        if known is None:
            self.digest_at[batch.next_offset] = state
        elif known != state:
            self.fail(f"node {node.id} state after offset {batch.next_offset} differs from another node's")

    def check_snapshot(self, node: SimNode, snapshot_id, end: int, count: int, digest: int) -> None:
        if end != snapshot_id.offset or self.digest_at.get(end) != (count, digest):
            self.fail(f"node {node.id} loads snapshot {snapshot_id} that is not the committed prefix")

    def record_leader_commits(self, node: SimNode) -> None:
        """Copy the leader's log from what leaders committed so far up to its high watermark."""
        hw, end = node.core.high_watermark, self.leader_committed_end
        if hw <= end:
            return
        if node.log.start_offset() > end:
            self.fail(f"leader {node.id} committed up to {hw} but its log starts at {node.log.start_offset()}, "
                      f"past what leaders were seen to commit ({end})")
        for b in node.log.read(end, 1 << 30):
            if b.next_offset > hw:
                break
            if b.base_offset != end:
                self.fail(f"leader {node.id} has a batch at {b.base_offset}, committed history ends at {end}")
            self.leader_committed[end] = (b.epoch, b.control, tuple(b.records))
            end = b.next_offset
        self.leader_committed_end = end

    def check_invariants(self) -> None:
        majority = len(self.voters) // 2 + 1
        for node in self.nodes.values():
            if not node.alive:
                continue
            core = node.core
            if core.role is Role.LEADER:
                other = self.leaders.setdefault(core.epoch, node.id)
                if other != node.id:
                    self.fail(f"two leaders in epoch {core.epoch}: {other} and {node.id}")
                hw = core.high_watermark
                durable = sum(1 for v in self.voters if self.nodes[v].log.durable_end >= hw)
                if durable < majority:
                    self.fail(f"leader {node.id} high watermark {hw} is durable on only {durable} voters")
                if hw > self.leader_committed_end:
                    self.record_leader_commits(node)
            if core.high_watermark < node.max_hw:
                self.fail(f"node {node.id} high watermark went back from {node.max_hw} to {core.high_watermark}")
            node.max_hw = core.high_watermark
            start = node.log.start_offset()
            if start > 0 and all(s.offset != start for s in node.snapshots.snapshot_ids()):
                self.fail(f"node {node.id} log starts at {start} without a snapshot there")

    # -- workload and faults ------------------------------------------------------------------------

    def client_append(self) -> None:
        leaders = [n for n in self.nodes.values() if n.alive and n.core.role is Role.LEADER]
        if not leaders:
            return
        node = self.rng.choice(leaders)
        count = self.rng.randint(1, 3)
        records = []
        for _ in range(count):
            self.append_counter += 1
            records.append(b"s%d-r%d" % (self.seed, self.append_counter))
        if self.append_counter % 2:
            # every other proposal as a client's Produce batch (raft/types.py ClientBatch), which the
            # driver hands to the same core.append; MemLog keeps its values (no RNG draw: seeds replay)
            records = wire.client_records(build_batch_from_values(records, timestamp_ms=self.append_counter))
            assert type(records) is ClientBatch
            self.coverage["client_batch_appends"] += 1
        try:
            last = node.core.append(records)
        except NotLeaderError:
            return
        except OSError as exc:  # the driver's policy: a leader out of space resigns
            if not out_of_space(exc):
                raise
            self._log(f"leader {node.id} out of space: resigns")
            self.coverage["leader_disk_full_resign"] += 1
            node.core.resign()
            self.run_node(node)
            return
        self._log(f"append {count} on leader {node.id} -> last offset {last}")
        self.run_node(node)

    def take_snapshot(self) -> None:
        alive = [n for n in self.nodes.values() if n.alive]
        if not alive:
            return
        node = self.rng.choice(alive)
        offset = node.machine.next_offset
        if offset > node.log.start_offset() + 4 and offset <= node.core.high_watermark:
            sid = node.core.create_snapshot(offset, node.machine.snapshot_bytes())
            self._log(f"node {node.id} snapshot {tuple(sid)}")
            self.run_node(node)

    def inject_fault(self) -> None:
        rng = self.rng
        ids = sorted(self.nodes)
        kind = rng.choice(("kill", "kill", "graceful", "partition", "isolate_leader", "asymmetric", "heal",
                           "kill_all", "wipe_observer", "restart", "slow_voter", "io_error", "disk_full", "stall"))
        if kind == "io_error":
            # the next fsync or quorum-state write of a live node fails: it must stop, never
            # acknowledge what it did not persist
            node = self.nodes[rng.choice(ids)]
            if node.alive:
                if rng.random() < 0.5:
                    node.log.flush_error = errno.EIO
                else:
                    node.quorum.write_error = rng.choice((errno.EIO, errno.ENOSPC))
                self._log(f"node {node.id}: its next {'flush' if node.log.flush_error else 'quorum-state write'} fails")
            return
        if kind == "stall":
            # the node's process stops running for a while (CPU starvation, a GC pause, SIGSTOP)
            node = self.nodes[rng.choice(ids)]
            node.busy_until = max(node.busy_until, self.clock.now_ms + rng.randint(50, 500))
            self._log(f"node {node.id} stalls until {node.busy_until}")
            self.coverage["stall"] += 1
            return
        if kind == "disk_full":
            # appends fail with ENOSPC for a while: a leader resigns, a follower keeps fetching
            node = self.nodes[rng.choice(ids)]
            node.log.full = True
            self._log(f"node {node.id}: disk full")
            self.coverage["disk_full"] += 1
            self._push(self.clock.now_ms + rng.randint(100, 600), "space", node.id)
            return
        if kind == "slow_voter":
            # a voter that keeps up only slowly: its fetches and its high watermark trail the
            # leader's, so observers it serves run into OFFSET_NOT_AVAILABLE
            victim = rng.choice(sorted(self.voters))
            self.slow[victim] = rng.randint(10, 40)
            self._log(f"slow voter {victim}: +{self.slow[victim]} ms each way")
            self.coverage["slow_voter"] += 1
            self._push(self.clock.now_ms + rng.randint(200, 800), "heal", None)
            return
        if kind == "isolate_leader":
            # long enough for a new election while the old leader still takes appends: the
            # classic way to grow a diverging tail that must be truncated later
            leaders = [n.id for n in self.nodes.values() if n.alive and n.core.role is Role.LEADER]
            if not leaders:
                return
            victim = leaders[0]
            self._log(f"isolate leader {victim}")
            self.coverage["isolate_leader"] += 1
            for other in ids:
                if other != victim:
                    self.blocked.update({(victim, other), (other, victim)})
            self._push(self.clock.now_ms + rng.randint(400, 1000), "heal", None)
            return
        if kind == "kill":
            node = self.nodes[rng.choice(ids)]
            if node.alive:
                self.kill(node, torn_tail=rng.random() < 0.5)
                self._push(self.clock.now_ms + rng.randint(20, 400), "restart", node.id)
        elif kind == "graceful":
            leaders = [n for n in self.nodes.values() if n.alive and n.core.role is Role.LEADER]
            if leaders:
                node = leaders[0]
                self._log(f"graceful shutdown of leader {node.id}")
                self.coverage["graceful"] += 1
                node.core.resign()
                self.run_node(node)
                self._push(self.clock.now_ms + rng.randint(5, 30), "stop", node.id)
        elif kind == "partition":
            victim = rng.choice(ids)
            for other in ids:
                if other != victim:
                    self.blocked.update({(victim, other), (other, victim)})
            self._log(f"partition node {victim} from everyone")
            self.coverage["partition"] += 1
            self._push(self.clock.now_ms + rng.randint(100, 800), "heal", None)
        elif kind == "asymmetric":
            a, b = rng.sample(ids, 2)
            self.blocked.add((a, b))
            self._log(f"drop every message {a} -> {b}")
            self.coverage["asymmetric"] += 1
            self._push(self.clock.now_ms + rng.randint(100, 800), "heal", None)
        elif kind == "heal":
            self.heal()
        elif kind == "kill_all":
            self._log("kill every node; a majority of voters restarts")
            self.coverage["kill_all"] += 1
            for node in self.nodes.values():
                self.kill(node, torn_tail=rng.random() < 0.5)
            voters = sorted(self.voters)
            for v in rng.sample(voters, len(voters) // 2 + 1):
                self._push(self.clock.now_ms + rng.randint(10, 100), "restart", v)
        elif kind == "wipe_observer":
            observers = [i for i in ids if i not in self.voters]
            if observers:
                node = self.nodes[rng.choice(observers)]
                self.kill(node, torn_tail=False)
                self._log(f"wipe observer {node.id}")
                self.coverage["wipe_observer"] += 1
                node.log, node.quorum, node.snapshots = MemLog(), MemQuorumStore(), MemSnapshotStore()
                self._push(self.clock.now_ms + rng.randint(10, 200), "restart", node.id)
        else:
            dead = [n for n in self.nodes.values() if not n.alive]
            if dead:
                self.start(rng.choice(dead))

    def heal(self) -> None:
        if self.blocked or self.slow:
            self._log("heal every partition and slow link")
        self.blocked.clear()
        self.slow.clear()

    # -- the run ---------------------------------------------------------------------------------

    def run(self, fault_ms: int = 1500, settle_ms: int = 1500) -> None:
        rng = self.rng
        for node in self.nodes.values():
            self.start(node)
        t = 0
        while t < fault_ms:
            t += rng.randint(10, 40)
            self._push(t, "append", None)
        t = 0
        while t < fault_ms:
            t += rng.randint(self.fault_every_ms // 2, self.fault_every_ms * 3 // 2)
            self._push(t, "fault", None)
        t = 0
        while t < fault_ms:
            t += rng.randint(150, 400)
            self._push(t, "snapshot", None)
        self._push(fault_ms, "settle", None)
        self._push(fault_ms + settle_ms // 2, "final_appends", None)
        end_ms = fault_ms + settle_ms
        try:
            self.advance(end_ms)
            self.check_final()
        except SimFailure:
            raise
        except AssertionError as exc:  # the core's safety asserts and the store's
            self.fail(f"{type(exc).__name__}: {exc}")

    def advance(self, until_ms: int, stop=None) -> bool:
        """Run events up to ``until_ms``, invariants checked after each one (a seed's whole run, or a
        scripted scenario's steps); return True as soon as ``stop()`` holds, False if time ran out."""
        while self.queue and self.queue[0][0] <= until_ms:
            at, _, kind, payload = heapq.heappop(self.queue)
            self.clock.now_ms = at
            self._dispatch(kind, payload)
            self.events += 1
            self.check_invariants()
            if stop is not None and stop():
                return True
        return False

    def _dispatch(self, kind: str, payload) -> None:
        if kind == "msg":
            node = self.nodes[payload[0].destination]
            if node.busy_until > self.clock.now_ms:  # its loop is busy: the message waits in the socket
                self._push(node.busy_until, kind, payload)
                return
            self.deliver(*payload)
        elif kind == "timer":
            node_id, incarnation = payload
            node = self.nodes[node_id]
            if node.alive and node.incarnation == incarnation and node.timer_at == self.clock.now_ms:
                if node.busy_until > self.clock.now_ms:  # a timer fires late on a busy loop
                    node.timer_at = node.busy_until
                    self._push(node.busy_until, kind, payload)
                    return
                node.timer_at = -1
                self.run_node(node)
        elif kind == "append":
            if self.faults_on:
                self.client_append()
        elif kind == "fault":
            if self.faults_on:
                self.inject_fault()
        elif kind == "snapshot":
            self.take_snapshot()
        elif kind == "restart":
            node = self.nodes[payload]
            if not node.alive:
                self.start(node)
        elif kind == "stop":
            node = self.nodes[payload]
            if node.alive:
                self.kill(node, torn_tail=False)
                self._push(self.clock.now_ms + self.rng.randint(20, 300), "restart", payload)
        elif kind == "heal":
            self.heal()
        elif kind == "space":
            self.nodes[payload].log.full = False
            self._log(f"node {payload}: space again")
        elif kind == "settle":
            self._log("settle: faults off, heal, restart every node")
            self.faults_on = False
            self.heal()
            for node in self.nodes.values():
                node.log.full, node.log.flush_error, node.quorum.write_error = False, None, None
            for node in self.nodes.values():
                if not node.alive:
                    self.start(node)
        elif kind == "final_appends":
            self.client_append()

    def check_final(self) -> None:
        leaders = [n for n in self.nodes.values() if n.core.role is Role.LEADER]
        if len(leaders) != 1:
            self.fail(f"after settling there are {len(leaders)} leaders")
        hw = leaders[0].core.high_watermark
        for node in self.nodes.values():
            m = node.machine
            if node.core.high_watermark != hw or m.next_offset != hw:
                self.fail(f"node {node.id} settled at hw {node.core.high_watermark} / applied {m.next_offset}, "
                          f"leader {leaders[0].id} at {hw}")
            if self.digest_at.get(m.next_offset) != (m.count, m.digest):
                self.fail(f"node {node.id} state differs from the committed history")
        self._log(f"done: {self.events} events, leader {leaders[0].id} epoch {leaders[0].core.epoch}, hw {hw}, "
                  f"{len(self.committed)} committed batches")


def run_seed(seed: int, *, verbose: bool = False, racks: bool = False, forget_votes: bool = False) -> Simulation:
    sim = Simulation(seed, verbose=verbose, racks=racks, forget_votes=forget_votes)
    sim.run()
    return sim


__all__ = ["NO_ID", "SimFailure", "Simulation", "run_seed"]
