"""Proves the raft core keeps Raft's safety properties and recovers under faults, by running
whole clusters (3 and 5 voters plus observers) in deterministic simulation over many seeds:
drops, delays, reordering, duplication, partitions, kills with torn tails, graceful shutdowns,
whole-cluster restarts, observer wipes and slow voters; invariants are checked after every
event (tests/raft_sim/cluster.py lists them). Some seeds give every node a rack, so observers
read committed records from a follower in their rack (KIP-392); a second, quick run forces
racks and observers on every seed.

KRAFTLOG_SIM_SEEDS=N runs N seeds (default 2000); KRAFTLOG_SIM_RACK_SEEDS=N the quick KIP-392
run (default 100); KRAFTLOG_SIM_SEED=N runs that one seed verbosely (every event printed) so a
failure can be replayed (add KRAFTLOG_SIM_RACKS=1 for a seed of the KIP-392 run).
"""

from __future__ import annotations

import collections
import heapq
import os

import pytest
from raft_sim.cluster import SIM_CONFIG, SimFailure, Simulation, StateMachine, run_seed

from kraftlog.raft.core import RaftCore
from kraftlog.raft.messages import FetchResponse
from kraftlog.raft.state import Role
from kraftlog.raft.types import LogBatch

SEEDS = int(os.environ.get("KRAFTLOG_SIM_SEEDS", "2000"))
RACK_SEEDS = int(os.environ.get("KRAFTLOG_SIM_RACK_SEEDS", "100"))
RACK_SEED_BASE = 1_000_000  # the KIP-392 run's seeds, apart from the main run's
ONE_SEED = os.environ.get("KRAFTLOG_SIM_SEED")
CHUNK = 250
KIP392_PATHS = ("observer_delivered_from_follower", "observer_served_by_follower", "offset_not_available",
                "read_replica_fallback", "snapshot_from_follower", "snapshot_redirect_from_follower", "slow_voter")


def _run_chunk(first: int, last: int, *, racks: bool = False) -> collections.Counter:
    coverage: collections.Counter = collections.Counter()
    for seed in range(first, last):
        sim = run_seed(seed, racks=racks)
        coverage.update(sim.coverage)
    return coverage


def test_many_seeds_keep_every_invariant():
    """Every seed in range(SEEDS) runs to the end with all invariants holding, and across the
    seeds every fault and every protocol path (elections, truncation, snapshot transfer,
    graceful resignation, pre-vote rejection) actually happened. With KRAFTLOG_SIM_SEED=N it
    replays only that seed, printing every event."""
    if ONE_SEED is not None:
        sim = Simulation(int(ONE_SEED), verbose=True, racks=os.environ.get("KRAFTLOG_SIM_RACKS") == "1")
        try:
            sim.run()
        except SimFailure as failure:
            pytest.fail(failure.reason, pytrace=False)
        print(dict(sim.coverage))
        return
    coverage: collections.Counter = collections.Counter()
    for first in range(0, SEEDS, CHUNK):
        try:
            coverage.update(_run_chunk(first, min(SEEDS, first + CHUNK)))
        except SimFailure as failure:
            pytest.fail(str(failure), pytrace=False)
    if SEEDS >= 500:
        for what in ("leader_elected", "truncated", "snapshot_installed", "snapshot_loaded", "graceful",
                     "torn_tail", "kill_all", "wipe_observer", "partition", "asymmetric", "end_quorum", "isolate_leader",
                     "prevote_rejected", "client_batch_appends") + KIP392_PATHS:
            assert coverage[what] > 0, f"no seed exercised {what}: {dict(coverage)}"
    if SEEDS >= 1000:
        # rare: an observer holding an uncommitted tail of an old leader meets a follower
        assert coverage["diverging_from_follower"] > 0, dict(coverage)


def test_observers_reading_from_followers_keep_every_invariant():
    """The quick KIP-392 run: every seed has racks and at least one observer, so observers are
    sent to followers in their rack while followers lag (slow voter), crash, are partitioned and
    leaders change; every record an observer's listener gets must be one a leader had already
    committed, and every path of the protocol (served reads, OFFSET_NOT_AVAILABLE, falling back
    to the leader, snapshots from a follower) must have run."""
    coverage: collections.Counter = collections.Counter()
    for first in range(RACK_SEED_BASE, RACK_SEED_BASE + RACK_SEEDS, CHUNK):
        try:
            coverage.update(_run_chunk(first, min(RACK_SEED_BASE + RACK_SEEDS, first + CHUNK), racks=True))
        except SimFailure as failure:
            pytest.fail(f"{failure} (replay with KRAFTLOG_SIM_RACKS=1)", pytrace=False)
    if RACK_SEEDS >= 50:
        for what in KIP392_PATHS:
            assert coverage[what] > 0, f"no seed exercised {what}: {dict(coverage)}"


def test_the_checker_catches_a_follower_serving_uncommitted_records(monkeypatch):
    """The observer invariant is live: a follower that treats its whole log as committed when
    it answers observers makes some seed fail with "no leader had committed"."""
    original = RaftCore._observer_answer

    def leaky(self, req, *, expired):
        saved, self._hw = self._hw, self.log.end_offset()
        try:
            return original(self, req, expired=expired)
        finally:
            self._hw = saved

    monkeypatch.setattr(RaftCore, "_observer_answer", leaky)
    with pytest.raises(SimFailure, match="no leader had committed"):
        for seed in range(RACK_SEED_BASE, RACK_SEED_BASE + 50):
            run_seed(seed, racks=True)


def test_a_seed_replays_identically():
    """Two runs of one seed produce the same event trace: a failing seed is reproducible."""
    a, b = run_seed(12345), run_seed(12345)
    assert a.trace == b.trace
    assert a.events == b.events and a.events > 100


def test_the_checker_catches_a_broken_commit():
    """The committed-history check is live: a node that delivers a different batch at an
    offset already committed elsewhere fails the run with the seed in the message."""
    sim = Simulation(7)
    for n in sim.nodes.values():
        n.machine = StateMachine(n)
    node = sim.nodes[1]
    sim.check_commit(node, LogBatch(0, 1, (b"x",)), 1)
    with pytest.raises(SimFailure, match="seed 7"):
        sim.check_commit(sim.nodes[2], LogBatch(0, 1, (b"y",)), 2)


def test_the_checker_catches_a_voter_that_forgot_its_vote():
    """The vote invariant is live, and shows why a voter's quorum-state must never be lost: when
    every restart wipes it (as deleting the file does), some seed has a voter grant two candidates
    in one epoch."""
    with pytest.raises(SimFailure, match="voted twice in epoch"):
        for seed in range(300):
            run_seed(seed, forget_votes=True)


def test_storage_faults_and_stalls_are_decided_and_exercised():
    """The storage faults run and are survived the driver's way: some seeds stop a node on a
    failed fsync or quorum-state write, fill a disk, make a leader resign for lack of space and
    a follower keep fetching through it; loops stall and state machines apply slowly (simulated
    time passes while they do); all with every invariant holding and the cluster settling."""
    coverage: collections.Counter = collections.Counter()
    for seed in range(300):
        coverage.update(run_seed(seed).coverage)
    for what in ("io_error_stop", "disk_full", "follower_disk_full", "leader_disk_full_resign", "stall", "slow_apply"):
        assert coverage[what] > 0, f"no seed exercised {what}: {dict(coverage)}"


def _calm_trio(seed: int):
    """Three voters started, no faults, every message 1 ms; and a function that finds the live
    leader (None while there is none)."""
    sim = Simulation(seed, voters=3, observers=0)
    sim.faults_on, sim.calm_delay_ms = False, (1, 1)
    for node in sim.nodes.values():
        sim.start(node)

    def leader():
        return next((n for n in sim.nodes.values() if n.alive and n.core.role is Role.LEADER), None)

    return sim, leader


def _kill_the_leader_right_after_a_commit(seed: int):
    """Three voters, no faults, every message 1 ms: elect, commit one proposal, and SIGKILL the
    leader as soon as both followers hold its high watermark. Both learnt it from Fetch answers
    the leader sent together, so both fetch timeouts (fixed, as Kafka's) expire in the same
    millisecond: raft.failover_ratio's slow samples, made certain. Returns the simulation, the
    kill time and (time, node) of the next election."""
    sim, leader = _calm_trio(seed)
    assert sim.advance(3000, lambda: leader() is not None and leader().core.high_watermark > 0), sim.trace[-20:]
    old = leader()
    last = old.core.append([b"before the kill"])
    sim.run_node(old)
    followers = [n for n in sim.nodes.values() if n is not old]
    assert sim.advance(sim.clock.now_ms + 1000, lambda: all(f.core.high_watermark > last for f in followers))
    killed_at = sim.clock.now_ms
    sim.kill(old, torn_tail=False)
    assert sim.advance(killed_at + 5000, lambda: leader() is not None), sim.trace[-40:]
    return sim, killed_at, (sim.clock.now_ms, leader().id)


def test_a_split_vote_after_the_leader_dies_is_settled_within_the_election_backoff():
    """The two survivors' fetch timeouts fire together, each grants the other's pre-vote, both
    stand in the same epoch and each refuses the other: a split that the dead voter can never
    break. A candidate asked for a vote by another candidate of its own epoch knows it is split
    and backs off a random 0..election_backoff_max_ms, so the next leader is elected long before
    a candidate's election timeout (>= election_timeout_ms) would have ended the round."""
    e, backoff_ms = SIM_CONFIG.election_timeout_ms, SIM_CONFIG.election_backoff_max_ms
    settled_ms = []
    for seed in range(20):
        sim, killed_at, (elected_at, _) = _kill_the_leader_right_after_a_commit(seed)
        first_epoch = min(epoch for t, _, role, epoch in sim.transitions if t > killed_at and role is Role.CANDIDATE)
        split = {(node, t) for t, node, role, epoch in sim.transitions
                 if t > killed_at and role is Role.CANDIDATE and epoch == first_epoch}
        assert len({node for node, _ in split}) == 2, f"seed {seed}: no split vote: {sim.trace[-30:]}"
        split_at = max(t for _, t in split)
        # the candidates' requests cross in 1 ms; then the first to end its backoff asks for a
        # pre-vote and a vote (4 ms of round trips)
        settled_ms.append(elected_at - split_at)
        assert elected_at - split_at < e, (
            f"seed {seed}: split at {split_at} ms, leader only at {elected_at} ms: {sim.trace[-30:]}")
    assert max(settled_ms) <= backoff_ms + 5, settled_ms


def _leader_dies_while_one_follower_lacks_its_last_record(seed: int):
    """Three voters, 1 ms links. The leader's empty Fetch answer to one follower (the "shorter")
    is held 30 ms in flight while the leader appends a record that the other (the "longer")
    fetches and sees committed; then the leader dies. The shorter heard from the leader last, so
    its fetch timeout ends last. Returns the simulation, the kill time and both followers."""
    sim, leader = _calm_trio(seed)
    assert sim.advance(3000, lambda: leader() is not None and leader().core.high_watermark > 0)
    old = leader()
    shorter, longer = [n for n in sim.nodes.values() if n is not old]

    def empty_answer_to_shorter():
        return next((i for i, (_, _, kind, payload) in enumerate(sim.queue) if kind == "msg"
                     and payload[0].source == old.id and payload[0].destination == shorter.id
                     and isinstance(payload[0].body, FetchResponse) and not payload[0].body.batches), None)

    assert sim.advance(sim.clock.now_ms + 1000, lambda: empty_answer_to_shorter() is not None)
    at_ms, seq, kind, payload = sim.queue[empty_answer_to_shorter()]
    sim.queue[empty_answer_to_shorter()] = (at_ms + 30, seq, kind, payload)
    heapq.heapify(sim.queue)
    last = old.core.append([b"only the longer gets this"])
    sim.run_node(old)
    assert sim.advance(sim.clock.now_ms + 25, lambda: longer.core.high_watermark > last)
    sim.kill(old, torn_tail=False)
    assert shorter.log.end_offset() <= last
    return sim, sim.clock.now_ms, shorter, longer


def test_survivors_with_different_logs_elect_in_one_round_when_the_longer_one_times_out_first():
    """The longer's fetch timeout ends first, and the shorter, still following (it fetched
    since), refuses its pre-vote (KIP-996); the shorter then asks and is refused (its log is
    behind). The longer asks it again once it sees that request, is granted and wins within a few
    round trips of the shorter's timeout, not after a prospective's election timeout and another
    fetch timeout."""
    e = SIM_CONFIG.election_timeout_ms
    for seed in range(20):
        sim, killed_at, shorter, longer = _leader_dies_while_one_follower_lacks_its_last_record(seed)

        def leader(sim=sim):
            return next((n for n in sim.nodes.values() if n.alive and n.core.role is Role.LEADER), None)

        assert sim.advance(killed_at + 5000, lambda: leader() is not None), sim.trace[-40:]
        elected_at = sim.clock.now_ms
        assert leader() is longer, f"seed {seed}: {sim.trace[-30:]}"
        timed_out: dict[int, int] = {}  # node -> when it first turned prospective after the kill
        for t, node, role, _ in sim.transitions:
            if t >= killed_at and role is Role.PROSPECTIVE:
                timed_out.setdefault(node, t)
        assert timed_out[longer.id] < timed_out[shorter.id], f"seed {seed}: {sim.trace[-30:]}"
        assert elected_at - timed_out[shorter.id] < e, (
            f"seed {seed}: the shorter timed out at {timed_out[shorter.id]} ms, leader only at {elected_at} ms: "
            f"{sim.trace[-30:]}")
