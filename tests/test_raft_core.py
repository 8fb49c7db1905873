"""Proves single-node behaviours of the raft core as small scripts with expected outcomes:
vote and pre-vote rules, persistence before sending, fetch validation (DivergingEpoch,
snapshot redirection, fenced/unknown epochs, cluster id), the high-watermark rule, the
stale-HW immediate answer, long-poll parking, EndQuorumEpoch, DescribeQuorum and metrics, and
KIP-392 for observers (the leader's rack-aware choice, a follower serving an observer up to its
own high watermark with KIP-392's errors, and the observer's retry, fallback and refresh).

Each test drives one RaftCore with in-memory storage (tests/raft_sim/storage.py) by handing it
envelopes and reading the Ready it returns; peers are played by the test.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from raft_sim.storage import FakeClock, MemLog, MemQuorumStore, MemSnapshotStore

from kraftlog.raft.control import decode_leader_change
from kraftlog.raft.core import RaftConfig, RaftCore
from kraftlog.raft.messages import (
    BeginQuorumEpochRequest,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    VoteRequest,
    VoteResponse,
)
from kraftlog.raft.ready import Commit, LeaderChangeNotice, execute_ready
from kraftlog.raft.state import Role
from kraftlog.raft.types import NO_ID, ElectionState, Errors, LogBatch, NotLeaderError, OffsetAndEpoch

CONFIG = RaftConfig(election_timeout_ms=100, election_backoff_max_ms=50, fetch_timeout_ms=200,
                    request_timeout_ms=50, retry_backoff_ms=10, fetch_max_wait_ms=40)
CLUSTER = "test-cluster"


class Harness:
    """One core plus its storage; ``ready()`` polls and applies the Ready like a driver."""

    def __init__(self, node_id=1, voters=(1, 2, 3), log: MemLog | None = None, stored: ElectionState | None = None,
                 config: RaftConfig = CONFIG):
        self.clock = FakeClock(1000)
        self.log = log or MemLog()
        self.quorum = MemQuorumStore()
        if stored is not None:
            self.quorum.state = stored
        self.snapshots = MemSnapshotStore()
        self.core = RaftCore(node_id=node_id, voters=voters, cluster_id=CLUSTER, clock=self.clock,
                             rng=random.Random(1), log=self.log, quorum_store=self.quorum,
                             snapshots=self.snapshots, config=config)
        self.corr = 0
        self.sent = []

    def ready(self):
        """Poll and act on the Ready through the production executor; the test reads the Ready's
        messages and deliveries (the channel and listener only record them)."""
        r = self.core.poll()
        execute_ready(r, quorum_store=self.quorum, log=self.log, channel=self, listener=self,
                      snapshots=self.snapshots)
        return r

    # channel and listener of execute_ready: what was sent and delivered is read from the Ready
    def send(self, envelope) -> None:
        self.sent.append(envelope)

    def handle_commit(self, batch) -> None:
        pass

    def handle_load_snapshot(self, snapshot_id, snapshots) -> None:
        pass

    def handle_leader_change(self, leader_id, epoch) -> None:
        pass

    def request(self, source, body):
        self.corr += 1
        self.core.step(Envelope(source, self.core.node_id, 10_000 + self.corr, body))
        return self.ready()

    def advance(self, ms):
        self.clock.now_ms += ms
        return self.ready()


def log_with(*epochs_and_counts) -> MemLog:
    """A flushed log holding one single-record batch per count, with the given epochs."""
    log = MemLog()
    for epoch, count in epochs_and_counts:
        for _ in range(count):
            log.append_as_leader([b"r"], epoch)
    log.flush()
    return log


def only(messages, kind):
    found = [m for m in messages if isinstance(m.body, kind)]
    assert len(found) == 1, messages
    return found[0]


def vote(candidate, epoch, last_epoch, last_offset, pre_vote=False, cluster=CLUSTER):
    return VoteRequest(cluster, NO_ID, epoch, candidate, last_epoch, last_offset, pre_vote)


def make_leader(h: Harness):
    """Drive node 1 of three voters through pre-vote and vote to leadership."""
    r = h.advance(250)  # election timeout passes: prospective sends pre-votes
    pre = [m for m in r.messages if isinstance(m.body, VoteRequest)]
    assert {m.destination for m in pre} == {2, 3} and all(m.body.pre_vote for m in pre)
    h.core.step(Envelope(2, 1, pre[0].correlation_id if pre[0].destination == 2 else pre[1].correlation_id,
                         VoteResponse(Errors.NONE, NO_ID, h.core.epoch, True, True)))
    r = h.ready()
    assert h.core.role is Role.CANDIDATE
    real = {m.destination: m for m in r.messages if isinstance(m.body, VoteRequest)}
    assert not real[2].body.pre_vote and real[2].body.replica_epoch == h.core.epoch
    h.core.step(Envelope(2, 1, real[2].correlation_id, VoteResponse(Errors.NONE, NO_ID, h.core.epoch, True)))
    r = h.ready()
    assert h.core.role is Role.LEADER
    return r


# ---- votes ------------------------------------------------------------------------------------


def test_a_voter_grants_one_vote_per_epoch_and_persists_it_first():
    """The first candidate of epoch 1 gets the vote, the vote is in the same Ready as the
    response (so it is persisted before sending), and a second candidate is refused."""
    h = Harness()
    h.ready()
    r = h.request(2, vote(2, 1, 0, 0))
    assert r.election == ElectionState(1, NO_ID, 2, frozenset({1, 2, 3}))
    assert only(r.messages, VoteResponse).body.vote_granted
    r = h.request(3, vote(3, 1, 0, 0))
    assert not only(r.messages, VoteResponse).body.vote_granted
    assert h.quorum.state.voted_id == 2
    r = h.request(2, vote(2, 1, 0, 0))  # a duplicate of the granted request is granted again
    assert only(r.messages, VoteResponse).body.vote_granted


def test_a_vote_needs_a_log_at_least_as_up_to_date():
    """Last epoch is compared first, then the end offset."""
    h = Harness(log=log_with((1, 3), (2, 2)))
    h.ready()
    assert not only(h.request(2, vote(2, 3, 1, 10)).messages, VoteResponse).body.vote_granted
    assert not only(h.request(2, vote(2, 4, 2, 4)).messages, VoteResponse).body.vote_granted
    assert only(h.request(2, vote(2, 5, 2, 5)).messages, VoteResponse).body.vote_granted


def test_a_stale_epoch_vote_is_refused_with_the_current_epoch():
    h = Harness(stored=ElectionState(5, NO_ID, NO_ID, frozenset({1, 2, 3})))
    h.ready()
    resp = only(h.request(2, vote(2, 4, 9, 100)).messages, VoteResponse).body
    assert not resp.vote_granted and resp.leader_epoch == 5


def test_a_pre_vote_changes_nothing_and_a_fetching_follower_refuses_it():
    """A pre-vote is granted without persisting anything; once a follower fetched from a live
    leader it refuses pre-votes, so a partitioned node cannot disrupt the quorum."""
    h = Harness()
    h.ready()
    r = h.request(2, vote(2, 0, 0, 0, pre_vote=True))
    assert only(r.messages, VoteResponse).body.vote_granted and r.election is None
    r = h.request(3, BeginQuorumEpochRequest(CLUSTER, 1, 3, 1))
    assert h.core.role is Role.FOLLOWER and h.core.leader_id == 3
    fetch_to_leader = only(r.messages, FetchRequest)
    # not yet heard from the leader: a pre-vote is still granted
    assert only(h.request(2, vote(2, 1, 0, 0, pre_vote=True)).messages, VoteResponse).body.vote_granted
    h.core.step(Envelope(3, 1, fetch_to_leader.correlation_id,
                         FetchResponse(Errors.NONE, Errors.NONE, 3, 1, high_watermark=0)))
    h.ready()
    assert not only(h.request(2, vote(2, 1, 0, 0, pre_vote=True)).messages, VoteResponse).body.vote_granted
    assert h.core.role is Role.FOLLOWER and h.core.epoch == 1


def test_election_timeout_leads_through_pre_vote_to_leader_and_leader_change_record():
    """Prospective -> Candidate (epoch bump) -> Leader; the leader appends a LeaderChange
    control batch naming itself and the granting voters, and sends BeginQuorumEpoch."""
    h = Harness()
    h.ready()
    r = make_leader(h)
    assert h.core.epoch == 1
    batch = h.log.read(0, 1 << 20)[0]
    assert batch.control and batch.epoch == 1
    change = decode_leader_change(batch.records[0])
    assert change.leader_id == 1 and change.voters == (1, 2, 3) and change.granting_voters == (1, 2)
    assert {m.destination for m in r.messages if isinstance(m.body, BeginQuorumEpochRequest)} == {2, 3}
    assert r.election.leader_id == 1 and r.flush_log
    with pytest.raises(NotLeaderError):
        Harness(node_id=2).core.append([b"x"])


def test_a_candidate_asked_by_a_candidate_of_its_epoch_backs_off_and_asks_again():
    """Split vote: node 1 stands in epoch 1 and node 2, a candidate of epoch 1 too, asks for its
    vote. Node 1 refuses (it voted for itself), learns the round cannot be won while node 3 stays
    silent, and asks again (a pre-vote, same epoch) after at most election_backoff_max_ms, not
    after its election timeout (>= election_timeout_ms); the pre-vote from the other candidate is
    granted meanwhile, so whichever asks first wins the next epoch."""
    h = Harness()
    h.ready()
    r = h.advance(250)
    pre = {m.destination: m for m in r.messages if isinstance(m.body, VoteRequest)}
    h.core.step(Envelope(2, 1, pre[2].correlation_id, VoteResponse(Errors.NONE, NO_ID, 0, True, True)))
    h.ready()
    assert h.core.role is Role.CANDIDATE and h.core.epoch == 1
    split_at = h.clock.now_ms
    r = h.request(2, vote(2, 1, 0, 0))
    assert not only(r.messages, VoteResponse).body.vote_granted
    assert only(h.request(2, vote(2, 1, 0, 0, pre_vote=True)).messages, VoteResponse).body.vote_granted
    assert CONFIG.election_backoff_max_ms < CONFIG.election_timeout_ms
    h.clock.now_ms = split_at + CONFIG.election_backoff_max_ms
    r = h.ready()
    assert h.core.role is Role.PROSPECTIVE and h.core.epoch == 1
    assert {m.destination for m in r.messages if isinstance(m.body, VoteRequest) and m.body.pre_vote} == {2, 3}


def test_a_prospective_asks_again_a_voter_that_refused_it_while_following_and_now_asks_itself():
    """Node 1 holds the leader's last record, node 2 does not. Node 1's fetch timeout ends first:
    node 2, still following (it fetched since), refuses its pre-vote. Then node 2 times out and
    asks node 1, which refuses (node 2's log is behind) and, since node 2 no longer follows
    anyone, asks it again at once; node 2 grants and node 1 stands. Without the second ask both
    would wait out a prospective's election timeout and then a fetch timeout more."""
    h = Harness(log=log_with((1, 3)), stored=ElectionState(1, 3, NO_ID, frozenset({1, 2, 3})))
    h.ready()
    assert h.core.role is Role.FOLLOWER and h.core.leader_id == 3
    r = h.advance(CONFIG.fetch_timeout_ms)
    assert h.core.role is Role.PROSPECTIVE
    pre = {m.destination: m for m in r.messages if isinstance(m.body, VoteRequest) and m.body.pre_vote}
    h.core.step(Envelope(2, 1, pre[2].correlation_id, VoteResponse(Errors.NONE, 3, 1, False, True)))
    r = h.ready()
    assert h.core.role is Role.PROSPECTIVE and not [m for m in r.messages if m.destination == 2]
    r = h.request(2, vote(2, 1, 1, 2, pre_vote=True))
    answer = [m.body for m in r.messages if isinstance(m.body, VoteResponse)]
    again = [m for m in r.messages if isinstance(m.body, VoteRequest) and m.destination == 2]
    assert len(answer) == 1 and not answer[0].vote_granted
    assert len(again) == 1 and again[0].body.pre_vote and again[0].body.last_offset == 3
    h.core.step(Envelope(2, 1, again[0].correlation_id, VoteResponse(Errors.NONE, 3, 1, True, True)))
    h.ready()
    assert h.core.role is Role.CANDIDATE and h.core.epoch == 2


def test_a_single_voter_elects_itself_in_one_poll_and_commits():
    h = Harness(voters=(1,))
    deliveries = list(h.ready().deliveries)
    assert h.core.role is Role.LEADER
    h.core.append([b"a", b"b"])
    deliveries += h.ready().deliveries
    deliveries += h.ready().deliveries  # after the flush the leader counts its own log
    commits = [d.batch for d in deliveries if isinstance(d, Commit)]
    assert [c.records for c in commits][-1] == (b"a", b"b")
    assert h.core.high_watermark == 3
    assert any(isinstance(d, LeaderChangeNotice) and d.leader_id == 1 for d in deliveries)


def test_one_poll_delivers_at_most_the_record_budget_and_asks_to_be_polled_again():
    """A node with a long committed backlog hands it to its listener in pieces of at most
    deliveries_max_records records (at least one batch), and each poll that stops early asks for
    the next poll at once; together they deliver everything, in order, exactly once."""
    config = dataclasses.replace(CONFIG, deliveries_max_records=25)
    h = Harness(voters=(1,), log=log_with((1, 100)), stored=ElectionState(1, NO_ID, NO_ID, frozenset({1})),
                config=config)
    while h.core.role is not Role.LEADER:  # its election timeout, then it elects itself
        h.advance(CONFIG.election_timeout_ms)
    delivered, polls = [], 0
    while True:
        r = h.ready()
        polls += 1
        batches = [d.batch for d in r.deliveries if isinstance(d, Commit)]
        assert sum(len(b.records) for b in batches) <= 25
        delivered += batches
        if r.next_poll_ms > h.clock.now_ms or polls > 50:
            break
    data = [b for b in delivered if not b.control]
    assert [b.base_offset for b in data] == list(range(100))
    assert polls >= 4


def test_an_observer_gets_its_committed_local_log_in_larger_pieces_than_a_voter():
    """A restarted node whose own log holds a committed backlog learns the high watermark from one
    Fetch answer; an observer (a broker) then gets it in pieces of observer_deliveries_max_records,
    a follower (a voter) in pieces of deliveries_max_records: only the voter's loop must stay short."""
    config = dataclasses.replace(CONFIG, deliveries_max_records=10, observer_deliveries_max_records=60)
    sizes = {}
    for node_id in (7, 2):  # an observer, then a follower
        h = Harness(node_id=node_id, log=log_with((1, 100)), stored=ElectionState(3, 1, NO_ID, frozenset({1, 2, 3})),
                    config=config)
        req = only(h.ready().messages, FetchRequest)
        assert req.body.fetch_offset == 100
        h.core.step(Envelope(1, node_id, req.correlation_id, FetchResponse(Errors.NONE, Errors.NONE, 1, 3,
                                                                           high_watermark=100)))
        delivered, pieces = [], []
        for _ in range(20):
            batches = [d.batch for d in h.ready().deliveries if isinstance(d, Commit)]
            if batches:
                pieces.append(len(batches))
                delivered += batches
        assert [b.base_offset for b in delivered] == list(range(100)), node_id
        sizes[node_id] = pieces
    assert sizes == {7: [60, 40], 2: [10] * 10}


# ---- fetch --------------------------------------------------------------------------------------


def leader_with_log(config: RaftConfig = CONFIG) -> Harness:
    """Node 1 leads epoch 3 over a log [epoch 1 x3, epoch 2 x2] + its LeaderChange at 5."""
    h = Harness(log=log_with((1, 3), (2, 2)), stored=ElectionState(2, NO_ID, NO_ID, frozenset({1, 2, 3})),
                config=config)
    h.ready()
    make_leader(h)
    h.ready()
    assert h.core.epoch == 3 and h.log.end_offset() == 6
    return h


def fetch(offset, last_epoch, epoch=3, replica=2, max_wait_ms=40, cluster=CLUSTER, rack=None):
    return FetchRequest(cluster, replica, max_wait_ms, 1 << 20, epoch, offset, last_epoch, 0, rack)


def test_fetch_with_a_diverged_epoch_gets_the_diverging_epoch():
    """A follower claiming 4 records of epoch 1 is told epoch 1 ends at offset 3."""
    h = leader_with_log()
    resp = only(h.request(2, fetch(4, 1)).messages, FetchResponse).body
    assert resp.diverging_epoch == OffsetAndEpoch(3, 1) and not resp.batches


def test_follower_truncates_on_diverging_epoch_and_fetches_again():
    log = log_with((1, 3), (2, 4))  # offsets 3..6 are epoch 2 on this follower only
    h = Harness(node_id=2, log=log, stored=ElectionState(3, 1, NO_ID, frozenset({1, 2, 3})))
    r = h.ready()
    req = only(r.messages, FetchRequest)
    assert (req.body.fetch_offset, req.body.last_fetched_epoch) == (7, 2)
    h.core.step(Envelope(1, 2, req.correlation_id, FetchResponse(Errors.NONE, Errors.NONE, 1, 3,
                                                                 diverging_epoch=OffsetAndEpoch(5, 2))))
    r = h.ready()
    assert h.log.end_offset() == 5 and r.flush_log
    nxt = only(r.messages, FetchRequest).body
    assert (nxt.fetch_offset, nxt.last_fetched_epoch) == (5, 2)


def test_the_high_watermark_waits_for_a_majority_and_the_leaders_own_epoch():
    """Replicas fetching at offset 5 (end of the old epochs) do not move the HW: only an offset
    past the LeaderChange record at 5 does."""
    h = leader_with_log()
    h.request(2, fetch(5, 2))
    assert h.core.high_watermark == -1
    r = h.request(2, fetch(6, 3))
    assert h.core.high_watermark == 6
    commits = [d.batch.base_offset for d in r.deliveries if isinstance(d, Commit)]
    assert commits == [0, 1, 2, 3, 4, 5]
    assert any(isinstance(d, LeaderChangeNotice) and d.leader_id == 1 for d in r.deliveries)


def test_observers_never_count_for_the_high_watermark():
    h = leader_with_log()
    h.request(7, fetch(6, 3, replica=7))
    assert h.core.high_watermark == -1
    d = h.core.describe_quorum()
    assert [o.replica_id for o in d.observers] == [7] and d.observers[0].log_end_offset == 6


def test_a_caught_up_fetch_is_parked_until_data_the_hw_news_or_max_wait():
    """A fetch with nothing new parks. A higher HW alone is sent hw_notify_delay_ms after it
    moved (data within that window carries it instead); max wait answers it empty."""
    h = leader_with_log()
    delay = h.core.config.hw_notify_delay_ms
    r = h.request(2, fetch(6, 3))  # advances the HW to 6, too fresh to be sent alone: parked
    assert not [m for m in r.messages if isinstance(m.body, FetchResponse)]
    assert h.core.high_watermark == 6
    r = h.advance(delay - 1)
    assert not [m for m in r.messages if isinstance(m.body, FetchResponse)]
    r = h.advance(1)  # the HW's turn
    assert only(r.messages, FetchResponse).body.high_watermark == 6
    r = h.request(3, fetch(6, 3, replica=3))  # replica 3 never saw HW 6, which is due: answered at once
    assert only(r.messages, FetchResponse).body.high_watermark == 6
    r = h.request(3, fetch(6, 3, replica=3))  # now nothing new: parked
    assert not [m for m in r.messages if isinstance(m.body, FetchResponse)]
    r = h.advance(41)
    assert only(r.messages, FetchResponse).body.batches == ()
    h.request(3, fetch(6, 3, replica=3))
    h.core.append([b"new"])
    r = h.ready()  # new data completes the parked fetch
    assert only(r.messages, FetchResponse).body.batches[0].records == (b"new",)


def test_data_within_the_hw_delay_carries_the_new_hw_in_one_answer():
    """The next proposal within hw_notify_delay_ms completes both parked fetches with its data and
    the HW the first follower's fetch moved: one answer each, not an HW answer and a data one."""
    h = leader_with_log()
    h.request(2, fetch(6, 3))  # HW -> 6, parked
    r = h.request(3, fetch(6, 3, replica=3))  # parked too: the HW is not due yet
    assert not [m for m in r.messages if isinstance(m.body, FetchResponse)]
    h.core.append([b"next"])
    r = h.ready()
    answers = sorted((m.destination, m.body) for m in r.messages if isinstance(m.body, FetchResponse))
    assert [(d, b.high_watermark, b.batches[0].records) for d, b in answers] == [(2, 6, (b"next",)),
                                                                                 (3, 6, (b"next",))]
    assert not [m for m in h.advance(h.core.config.hw_notify_delay_ms).messages
                if isinstance(m.body, FetchResponse)]  # nothing left to tell


def test_fetch_epoch_and_cluster_checks():
    h = leader_with_log()
    assert only(h.request(2, fetch(5, 2, epoch=2)).messages, FetchResponse).body.partition_error \
        is Errors.FENCED_LEADER_EPOCH
    assert only(h.request(2, fetch(6, 3, epoch=2)).messages, FetchResponse).body.partition_error \
        is Errors.INVALID_REQUEST  # a last fetched epoch above the leader epoch it names
    assert only(h.request(2, fetch(6, 3, epoch=4)).messages, FetchResponse).body.partition_error \
        is Errors.UNKNOWN_LEADER_EPOCH
    assert only(h.request(2, fetch(6, 3, cluster="other")).messages, FetchResponse).body.error_code \
        is Errors.INCONSISTENT_CLUSTER_ID
    assert only(h.request(2, vote(2, 9, 9, 9, cluster="other")).messages, VoteResponse).body.error_code \
        is Errors.INCONSISTENT_CLUSTER_ID
    follower = Harness(node_id=2, stored=ElectionState(3, 1, NO_ID, frozenset({1, 2, 3})))
    follower.ready()
    # a voter fetching from a follower is refused (observers may be served: KIP-392, below)
    resp = only(follower.request(3, fetch(0, 0, replica=3)).messages, FetchResponse).body
    assert resp.partition_error is Errors.NOT_LEADER_OR_FOLLOWER and resp.leader_id == 1


def test_a_fetch_below_the_log_start_is_sent_to_the_snapshot_and_chunks_are_served():
    h = leader_with_log()
    h.request(2, fetch(6, 3))
    h.ready()
    sid = h.core.create_snapshot(6, b"0123456789" * 5)
    assert sid == OffsetAndEpoch(6, 3) and h.log.start_offset() == 6
    resp = only(h.request(3, fetch(2, 1, replica=3)).messages, FetchResponse).body
    assert resp.snapshot_id == sid
    from kraftlog.raft.messages import FetchSnapshotResponse

    chunk = only(h.request(3, FetchSnapshotRequest(CLUSTER, 3, 20, 3, sid, 40)).messages, FetchSnapshotResponse).body
    assert (chunk.size, chunk.position, chunk.data) == (50, 40, b"0123456789")
    missing = only(h.request(3, FetchSnapshotRequest(CLUSTER, 3, 20, 3, OffsetAndEpoch(1, 1), 0)).messages,
                   FetchSnapshotResponse).body
    assert missing.partition_error is Errors.SNAPSHOT_NOT_FOUND


# ---- resignation, describe, metrics ------------------------------------------------------------


def test_graceful_resignation_sends_end_quorum_epoch_with_the_best_successor_first():
    h = leader_with_log()
    h.request(3, fetch(6, 3, replica=3))
    h.request(2, fetch(5, 2))
    h.core.resign()
    r = h.ready()
    ends = [m.body for m in r.messages if isinstance(m.body, EndQuorumEpochRequest)]
    assert len(ends) == 2 and all(e.preferred_successors == (3, 2) for e in ends)
    assert h.core.role is Role.RESIGNED


def test_end_quorum_epoch_makes_the_first_successor_run_at_once():
    h = Harness(node_id=2, stored=ElectionState(3, 1, NO_ID, frozenset({1, 2, 3})))
    h.ready()
    h.request(1, EndQuorumEpochRequest(CLUSTER, 1, 3, (2, 3)))
    r = h.advance(1)
    assert h.core.role is Role.PROSPECTIVE
    assert all(m.body.pre_vote for m in r.messages if isinstance(m.body, VoteRequest))


def test_a_leader_without_fetches_from_a_majority_resigns():
    h = leader_with_log()
    h.advance(CONFIG.check_quorum_timeout_ms + 1)
    assert h.core.role is Role.RESIGNED


def test_check_quorum_holds_exactly_until_a_majority_last_fetched_a_timeout_ago():
    """The leader skips the check-quorum test while it cannot fail: it keeps leading until one
    timeout after the latest fetch of the majority's other member, fetches in between push that
    out, and it resigns at the first poll after."""
    timeout_ms = CONFIG.check_quorum_timeout_ms
    h = leader_with_log()
    h.advance(timeout_ms // 2)
    # answered at once (max_wait_ms 0): a parked fetch would count again when answered
    h.request(2, fetch(6, 3, replica=2, max_wait_ms=0))  # a majority (1, 2) until now + timeout
    h.advance(timeout_ms - 1)
    assert h.core.role is Role.LEADER
    h.request(3, fetch(6, 3, replica=3, max_wait_ms=0))  # later: the majority lasts until its timeout
    h.advance(timeout_ms - 1)
    assert h.core.role is Role.LEADER
    h.advance(1)
    assert h.core.role is Role.RESIGNED


def test_describe_quorum_reports_leader_hw_and_replicas():
    h = leader_with_log()
    h.request(2, fetch(6, 3))
    r = h.request(NO_ID, DescribeQuorumRequest())
    d = r.messages[0].body
    assert (d.leader_id, d.leader_epoch, d.high_watermark) == (1, 3, 6)
    assert {(v.replica_id, v.log_end_offset) for v in d.voters} == {(1, 6), (2, 6), (3, -1)}
    assert Harness(node_id=2).core.describe_quorum().partition_error is Errors.NOT_LEADER_OR_FOLLOWER


def test_metrics_come_from_the_injected_clock():
    h = Harness(voters=(1,))
    h.ready()
    h.ready()  # the LeaderChange record commits within the same instant
    h.clock.now_ms += 10
    h.core.append([b"a"])
    h.ready()
    h.clock.now_ms += 5
    h.ready()
    m = h.core.metrics_snapshot()
    assert m["current-state"] == "leader" and m["current-leader"] == 1 and m["current-epoch"] == 1
    assert m["high-watermark"] == 2 and m["log-end-offset"] == 2
    assert m["commit-latency-max"] == 5.0
    assert m["append-records-rate"] > 0 and 0.0 < m["poll-idle-ratio-avg"] <= 1.0


def test_restart_after_leading_starts_resigned_and_never_votes_in_that_epoch():
    h = Harness(stored=ElectionState(4, 1, 1, frozenset({1, 2, 3})))
    h.ready()
    assert h.core.role is Role.RESIGNED
    assert not only(h.request(2, vote(2, 4, 9, 99)).messages, VoteResponse).body.vote_granted


def test_a_fresh_node_writes_no_quorum_state_until_it_learns_an_epoch_then_before_its_first_fetch():
    """A node whose store is empty starts unattached in epoch 0 without a write (the empty store
    reads back as that state); the epoch a leader announces is persisted in the Ready that sends
    its first Fetch, before it leaves. A node with a stored state, or a log past epoch 0, writes
    its initial state as before."""
    h = Harness(node_id=3)
    assert h.ready().election is None and h.quorum.writes == 0 and h.quorum.state is None
    stored_when_sent = []
    h.send = lambda envelope: stored_when_sent.append((type(envelope.body), h.quorum.state))
    r = h.request(1, BeginQuorumEpochRequest(CLUSTER, 3, 1, 2))
    assert r.election == ElectionState(2, 1, NO_ID, frozenset({1, 2, 3})) and h.quorum.writes == 1
    assert only(r.messages, FetchRequest).body.current_leader_epoch == 2
    assert (FetchRequest, r.election) in stored_when_sent  # the epoch was durable before the Fetch left

    for stored, log in ((ElectionState(0, voters=frozenset({1, 2, 3})), None), (None, log_with((2, 1)))):
        h = Harness(node_id=3, stored=stored, log=log)
        assert h.ready().election is not None and h.quorum.writes == 1


def test_follower_appends_fetched_batches_and_learns_the_high_watermark():
    h = Harness(node_id=2, stored=ElectionState(1, 1, NO_ID, frozenset({1, 2, 3})))
    req = only(h.ready().messages, FetchRequest)
    batches = (LogBatch(0, 1, (b"a", b"b")), LogBatch(2, 1, (b"c",)))
    h.core.step(Envelope(1, 2, req.correlation_id, FetchResponse(Errors.NONE, Errors.NONE, 1, 1,
                                                                 high_watermark=2, batches=batches)))
    r = h.ready()
    assert r.flush_log and h.log.end_offset() == 3 and h.core.high_watermark == 2
    assert [d.batch.records for d in r.deliveries if isinstance(d, Commit)] == [(b"a", b"b")]
    assert only(r.messages, FetchRequest).body.fetch_offset == 3


def test_a_restarted_follower_first_fetches_without_waiting_then_waits_as_configured():
    """The first Fetch of a follower state asks with max wait 0: a leader that remembers sending
    this replica id its HW (before the replica restarted) would otherwise park a fetch with nothing
    new for fetch_max_wait_ms while the restarted replica knows no HW. After one answer, waits as
    configured. And the leader answers a max-wait-0 fetch at once even when it thinks the replica
    already knows its HW."""
    h = Harness(node_id=2, stored=ElectionState(1, 1, NO_ID, frozenset({1, 2, 3})), log=log_with((1, 3)))
    first = only(h.ready().messages, FetchRequest)
    assert first.body.max_wait_ms == 0
    h.core.step(Envelope(1, 2, first.correlation_id, FetchResponse(Errors.NONE, Errors.NONE, 1, 1,
                                                                   high_watermark=3, batches=())))
    second = only(h.ready().messages, FetchRequest)
    assert second.body.max_wait_ms == CONFIG.fetch_max_wait_ms and h.core.high_watermark == 3

    leader = Harness(log=log_with((1, 3)))
    make_leader(leader)
    end = leader.log.end_offset()
    last = leader.log.last_fetched_epoch()
    for voter in (2, 3):  # both caught up: the HW covers the log, and both were told it
        leader.request(voter, fetch(end, last, epoch=leader.core.epoch, replica=voter))
        leader.request(voter, fetch(end, last, epoch=leader.core.epoch, replica=voter))
    parked = leader.request(2, fetch(end, last, epoch=leader.core.epoch, replica=2))
    assert [m for m in parked.messages if isinstance(m.body, FetchResponse)] == []  # it thinks 2 knows the HW
    restarted = leader.request(2, fetch(end, last, epoch=leader.core.epoch, replica=2, max_wait_ms=0))
    answer = only(restarted.messages, FetchResponse)
    assert answer.body.high_watermark == leader.core.high_watermark == end


# ---- KIP-392: observers reading from a follower in their rack -------------------------------------

RACKED = RaftConfig(election_timeout_ms=100, election_backoff_max_ms=50, fetch_timeout_ms=200,
                    request_timeout_ms=50, retry_backoff_ms=10, fetch_max_wait_ms=40, replica_lag_time_max_ms=100,
                    preferred_replica_refresh_ms=150, preferred_replica_max_failures=3)


def racked(rack, **kw) -> RaftConfig:
    import dataclasses

    return dataclasses.replace(RACKED, rack=rack, **kw)


def test_the_leader_names_a_caught_up_voter_in_the_observers_rack_and_sends_only_committed_records():
    """Rack-aware selection: an observer in rack b is sent to voter 2 (rack b, caught up), with
    the records cut at the HW; an observer of another rack, of the leader's rack or without a
    rack stays with the leader (and gets the uncommitted tail as before), and a voter never gets
    a preferred replica."""
    h = leader_with_log(racked("a"))
    h.request(2, fetch(6, 3, rack="b"))  # voter 2 (rack b) is caught up; HW 6
    h.request(3, fetch(5, 2, replica=3, rack="b"))
    h.core.append([b"uncommitted"])
    h.ready()
    assert h.core.high_watermark == 6 and h.log.end_offset() == 7
    resp = only(h.request(7, fetch(0, 0, replica=7, rack="b")).messages, FetchResponse).body
    assert resp.preferred_read_replica == 2
    assert resp.batches and resp.batches[-1].next_offset == 6  # nothing past the HW
    for replica, rack in ((8, "c"), (9, "a"), (10, None)):
        other = only(h.request(replica, fetch(0, 0, replica=replica, rack=rack)).messages, FetchResponse).body
        assert other.preferred_read_replica == NO_ID and other.batches[-1].next_offset == 7
    voter = only(h.request(3, fetch(5, 2, replica=3, rack="b")).messages, FetchResponse).body
    assert voter.preferred_read_replica == NO_ID


def test_a_voter_that_stopped_catching_up_is_not_chosen():
    """In sync = caught up (Kafka's rule: at the leader's end, or at the end the leader had at
    its previous fetch) within replica_lag_time_max_ms; a voter stuck behind loses the role."""
    h = leader_with_log(racked("a"))
    t0 = h.clock.now_ms
    h.request(2, fetch(6, 3, rack="b"))  # at the leader's end: caught up now
    h.core.append([b"x"])
    h.ready()
    h.request(3, fetch(7, 3, replica=3))  # the HW follows voter 3 from now on
    h.clock.now_ms += 60
    h.request(2, fetch(6, 3, rack="b"))  # reached the end the leader had at its last fetch
    assert h.core.describe_quorum().voters[1].last_caught_up_ms == t0  # caught up as of that fetch
    assert only(h.request(7, fetch(0, 0, replica=7, rack="b")).messages, FetchResponse).body \
        .preferred_read_replica == 2
    h.clock.now_ms += 60
    h.request(3, fetch(7, 3, replica=3))
    h.request(2, fetch(6, 3, rack="b"))  # behind the end (7) it saw last time: not caught up
    h.clock.now_ms += 60
    h.request(3, fetch(7, 3, replica=3))
    assert only(h.request(7, fetch(0, 0, replica=7, rack="b")).messages, FetchResponse).body \
        .preferred_read_replica == NO_ID


def follower_with_hw(leader_hw=3, config=RACKED) -> Harness:
    """Node 2 follows leader 1 in epoch 3 with log [0,2) epoch 1, [2,3) and [3,4) epoch 3, and has
    learned HW ``leader_hw`` from a validated Fetch answer."""
    h = Harness(node_id=2, stored=ElectionState(3, 1, NO_ID, frozenset({1, 2, 3})), config=config)
    req = only(h.ready().messages, FetchRequest)
    batches = (LogBatch(0, 1, (b"a", b"b")), LogBatch(2, 3, (b"c",)), LogBatch(3, 3, (b"d",)))
    h.core.step(Envelope(1, 2, req.correlation_id, FetchResponse(Errors.NONE, Errors.NONE, 1, 3,
                                                                 high_watermark=leader_hw, batches=batches)))
    h.ready()
    assert h.core.high_watermark == leader_hw
    return h


def leader_answer(h: Harness, **kw):
    """Answer the follower's outstanding Fetch as leader 1 of epoch 3."""
    req = [e for e in h.core._outbox if isinstance(e.body, FetchRequest)]
    inflight = [c for c, p in h.core._inflight.items() if p.kind is FetchRequest and p.destination == 1]
    assert not req and len(inflight) == 1
    h.core.step(Envelope(1, 2, inflight[0], FetchResponse(Errors.NONE, Errors.NONE, 1, 3, **kw)))
    return h.ready()


def test_a_follower_serves_an_observer_only_up_to_its_own_high_watermark():
    """Records past the follower's HW (offset 3) never reach the observer; the answer carries the
    follower's HW and names the leader and epoch it follows."""
    h = follower_with_hw(3)
    resp = only(h.request(7, fetch(0, 0, replica=7)).messages, FetchResponse).body
    assert (resp.partition_error, resp.leader_id, resp.leader_epoch, resp.high_watermark) == (Errors.NONE, 1, 3, 3)
    assert [(b.base_offset, b.next_offset) for b in resp.batches] == [(0, 2), (2, 3)]
    assert h.core.observer_fetches_served == 1
    # a caught-up observer that already knows HW 3 waits; the HW moving answers it
    assert not [m for m in h.request(7, fetch(3, 3, replica=7)).messages if isinstance(m.body, FetchResponse)]
    r = leader_answer(h, high_watermark=4)
    resp = only(r.messages, FetchResponse).body
    assert resp.high_watermark == 4 and [b.base_offset for b in resp.batches] == [3]


def test_an_observer_ahead_of_the_followers_high_watermark_waits_then_gets_offset_not_available():
    h = follower_with_hw(3)
    r = h.request(7, fetch(4, 3, replica=7))
    assert not [m for m in r.messages if isinstance(m.body, FetchResponse)]  # parked: the HW may catch up
    r = h.advance(41)
    resp = only(r.messages, FetchResponse).body
    assert resp.partition_error is Errors.OFFSET_NOT_AVAILABLE and resp.high_watermark == 3 and not resp.batches
    # the same wait ends early once the follower's HW reaches the offset
    h.request(7, fetch(4, 3, replica=7))
    resp = only(leader_answer(h, high_watermark=4).messages, FetchResponse).body
    assert resp.partition_error is Errors.NONE and resp.high_watermark == 4


def test_a_follower_checks_an_observers_leader_epoch_and_refuses_voters():
    h = follower_with_hw(3)
    newer = only(h.request(7, fetch(0, 0, epoch=4, replica=7)).messages, FetchResponse).body
    older = only(h.request(7, fetch(0, 0, epoch=2, replica=7)).messages, FetchResponse).body
    voter = only(h.request(3, fetch(0, 0, replica=3)).messages, FetchResponse).body
    assert newer.partition_error is Errors.UNKNOWN_LEADER_EPOCH
    assert older.partition_error is Errors.FENCED_LEADER_EPOCH and older.leader_epoch == 3
    assert voter.partition_error is Errors.NOT_LEADER_OR_FOLLOWER and voter.leader_id == 1


def test_a_followers_diverging_epoch_never_reaches_past_its_high_watermark():
    """Divergence is checked against the follower's log as the leader would, but the answer
    never reaches past the follower's HW: there the log may still be truncated."""
    h = follower_with_hw(3)
    # the observer holds epoch 2 at offset 2, the follower epoch 3: epochs <= 2 end at 2 here
    resp = only(h.request(7, fetch(3, 2, replica=7)).messages, FetchResponse).body
    assert resp.diverging_epoch == OffsetAndEpoch(2, 1) and not resp.batches
    log = log_with((1, 2), (3, 4))  # epoch 3 covers [2, 6) here; the HW will be 3
    h3 = Harness(node_id=2, log=log, stored=ElectionState(4, 1, NO_ID, frozenset({1, 2, 3})), config=RACKED)
    req = only(h3.ready().messages, FetchRequest)
    h3.core.step(Envelope(1, 2, req.correlation_id, FetchResponse(Errors.NONE, Errors.NONE, 1, 4, high_watermark=3)))
    h3.ready()
    assert h3.core.high_watermark == 3
    resp = only(h3.request(7, fetch(3, 4, epoch=4, replica=7)).messages, FetchResponse).body
    assert resp.diverging_epoch == OffsetAndEpoch(3, 3)  # epoch 3 runs to 6 in the log, to 3 committed


def test_a_follower_sends_an_observer_behind_its_log_start_to_its_snapshot_and_serves_it():
    from kraftlog.raft.messages import FetchSnapshotResponse

    h = follower_with_hw(3)
    sid = h.core.create_snapshot(3, b"state-at-3")
    h.ready()
    resp = only(h.request(7, fetch(0, 0, replica=7)).messages, FetchResponse).body
    assert resp.snapshot_id == sid == OffsetAndEpoch(3, 3)
    chunk = only(h.request(7, FetchSnapshotRequest(CLUSTER, 7, 4, 3, sid, 4)).messages, FetchSnapshotResponse).body
    assert (chunk.partition_error, chunk.size, chunk.data) == (Errors.NONE, 10, b"e-at")
    voter = only(h.request(3, FetchSnapshotRequest(CLUSTER, 3, 4, 3, sid, 0)).messages, FetchSnapshotResponse).body
    assert voter.partition_error is Errors.NOT_LEADER_OR_FOLLOWER


def test_a_followers_waiting_observer_fetches_are_released_when_it_stops_following():
    h = follower_with_hw(3)
    h.request(7, fetch(4, 3, replica=7))
    r = h.request(3, BeginQuorumEpochRequest(CLUSTER, 2, 3, 4))
    resp = only(r.messages, FetchResponse).body
    assert resp.partition_error is Errors.NOT_LEADER_OR_FOLLOWER and (resp.leader_id, resp.leader_epoch) == (3, 4)


def observer(rack="b", **kw) -> Harness:
    """Observer 7 following leader 1 in epoch 3."""
    return Harness(node_id=7, stored=ElectionState(3, 1, NO_ID, frozenset({1, 2, 3})), config=racked(rack, **kw))


def answer(h: Harness, request: Envelope, **kw):
    h.core.step(Envelope(request.destination, 7, request.correlation_id, FetchResponse(**kw)))
    return h.ready()


def ok(leader=1, epoch=3, **kw):
    return dict(error_code=Errors.NONE, partition_error=kw.pop("partition_error", Errors.NONE), leader_id=leader,
                leader_epoch=epoch, **kw)


def test_an_observer_moves_to_the_preferred_replica_and_reads_committed_records_there():
    h = observer()
    first = only(h.ready().messages, FetchRequest)
    assert first.destination == 1 and first.body.rack == "b"
    r = answer(h, first, **ok(high_watermark=2, batches=(LogBatch(0, 1, (b"a", b"b")),), preferred_read_replica=2))
    delivered = [d.batch.records for d in r.deliveries if isinstance(d, Commit)]
    nxt = only(r.messages, FetchRequest)
    assert nxt.destination == 2 and nxt.body.current_leader_epoch == 3 and nxt.body.fetch_offset == 2
    assert h.core.fetch_source_id == 2 and h.core.metrics_snapshot()["fetch-source-id"] == 2
    r = answer(h, nxt, **ok(high_watermark=3, batches=(LogBatch(2, 3, (b"c",)),)))
    assert h.core.high_watermark == 3
    delivered += [d.batch.records for d in r.deliveries if isinstance(d, Commit)]
    assert delivered == [(b"a", b"b"), (b"c",)]
    assert only(r.messages, FetchRequest).destination == 2


def test_an_observer_retries_a_lagging_replica_then_returns_to_the_leader():
    """OFFSET_NOT_AVAILABLE (the replica's HW is behind us) is retried after the backoff, up to
    preferred_replica_max_failures answers in a row; then the observer asks the leader."""
    h = observer()
    r = answer(h, only(h.ready().messages, FetchRequest), **ok(high_watermark=0, preferred_read_replica=2))
    req = only(r.messages, FetchRequest)
    for attempt in range(3):
        assert req.destination == 2, attempt
        r = answer(h, req, **ok(partition_error=Errors.OFFSET_NOT_AVAILABLE, high_watermark=0))
        assert not [m for m in r.messages if isinstance(m.body, FetchRequest)]  # backoff first
        req = only(h.advance(11).messages, FetchRequest)
    assert req.destination == 1 and h.core.read_replica_fallbacks == 1


def test_an_observer_leaves_its_replica_at_once_on_other_errors_and_on_timeouts():
    h = observer()
    r = answer(h, only(h.ready().messages, FetchRequest), **ok(high_watermark=0, preferred_read_replica=2))
    r = answer(h, only(r.messages, FetchRequest), **ok(partition_error=Errors.NOT_LEADER_OR_FOLLOWER))
    assert only(h.advance(11).messages, FetchRequest).destination == 1
    h2 = observer()
    r = answer(h2, only(h2.ready().messages, FetchRequest), **ok(high_watermark=0, preferred_read_replica=2))
    assert only(r.messages, FetchRequest).destination == 2
    # no answer within the request timeout: the retry goes to the leader
    assert only(h2.advance(51).messages, FetchRequest).destination == 1
    assert h2.core.read_replica_fallbacks == 1


def test_an_observer_asks_the_leader_again_after_the_refresh_interval():
    h = observer()
    r = answer(h, only(h.ready().messages, FetchRequest), **ok(high_watermark=0, preferred_read_replica=2))
    req = only(r.messages, FetchRequest)
    for _ in range(4):  # 4 x 40 ms of answers from the replica: past the 150 ms refresh
        h.clock.now_ms += 40
        r = answer(h, req, **ok(high_watermark=0))
        req = only(r.messages, FetchRequest)
    assert req.destination == 1 and h.core.read_replica_fallbacks == 0
    r = answer(h, req, **ok(high_watermark=0))  # the leader names no replica now: stay with it
    assert only(r.messages, FetchRequest).destination == 1


def test_an_observer_sent_to_a_snapshot_and_a_replica_loads_the_replicas_snapshot():
    """The leader's snapshot may not exist on the replica, so the observer asks the replica,
    which names its own; FetchSnapshot then goes to the replica."""
    h = observer()
    r = answer(h, only(h.ready().messages, FetchRequest),
               **ok(high_watermark=9, log_start_offset=9, snapshot_id=OffsetAndEpoch(9, 3), preferred_read_replica=2))
    req = only(r.messages, FetchRequest)
    assert req.destination == 2
    r = answer(h, req, **ok(high_watermark=6, log_start_offset=6, snapshot_id=OffsetAndEpoch(6, 2)))
    snap = only(r.messages, FetchSnapshotRequest)
    assert snap.destination == 2 and snap.body.snapshot_id == OffsetAndEpoch(6, 2) and snap.body.current_leader_epoch == 3


# ---- consumers: committed reads on every replica (replica_id -1, KIP-392) -----------------------


def consumer(offset, last_epoch=-1, epoch=-1, max_wait_ms=0, rack=None):
    """A consumer's Fetch: replica -1, and no epochs unless the test names them."""
    return fetch(offset, last_epoch, epoch=epoch, replica=-1, max_wait_ms=max_wait_ms, rack=rack)


def answers(r):
    return [m.body for m in r.messages if isinstance(m.body, FetchResponse)]


def committed_leader() -> Harness:
    """leader_with_log with HW 6 (everything up to its LeaderChange) and one uncommitted record at 6."""
    h = leader_with_log()
    h.request(2, fetch(6, 3))
    assert h.core.high_watermark == 6
    h.core.append([b"uncommitted"])
    h.ready()
    assert h.log.end_offset() == 7
    return h


def test_a_consumer_reads_only_what_the_leader_has_committed():
    h = committed_leader()
    resp = only(h.request(-1, consumer(0)).messages, FetchResponse).body
    assert resp.partition_error is Errors.NONE and resp.high_watermark == 6
    assert [b.base_offset for b in resp.batches] == [0, 1, 2, 3, 4, 5]
    # from the middle, with no last fetched epoch: nothing diverges, the read starts there
    resp = only(h.request(-1, consumer(4)).messages, FetchResponse).body
    assert [b.base_offset for b in resp.batches] == [4, 5]
    # a position never counts: the consumer is no observer and moves no high watermark
    assert h.core.describe_quorum().observers == () and h.core.high_watermark == 6


def test_a_consumer_past_the_high_watermark_or_the_log_gets_kip_392s_errors():
    h = committed_leader()
    past_hw = only(h.request(-1, consumer(7)).messages, FetchResponse).body
    past_end = only(h.request(-1, consumer(8)).messages, FetchResponse).body
    assert past_hw.partition_error is Errors.OFFSET_NOT_AVAILABLE and not past_hw.batches
    assert past_end.partition_error is Errors.OFFSET_OUT_OF_RANGE
    assert (past_end.log_start_offset, past_end.high_watermark) == (0, 6)
    assert only(h.request(-1, consumer(-3)).messages, FetchResponse).body.partition_error is Errors.INVALID_REQUEST


def test_a_caught_up_consumer_waits_for_the_high_watermark_and_each_is_answered():
    h = committed_leader()
    assert answers(h.request(-1, consumer(6, max_wait_ms=40))) == []
    assert answers(h.request(-1, consumer(6, max_wait_ms=40))) == []  # a second consumer, also -1
    r = h.request(2, fetch(7, 3))  # the follower reaches 7: the HW passes both consumers
    got = [resp for resp in answers(r) if resp.batches]  # the follower, caught up, gets none
    assert [[b.records for b in resp.batches] for resp in got] == [[(b"uncommitted",)]] * 2
    assert all(resp.high_watermark == 7 for resp in got)
    assert answers(h.request(-1, consumer(7, max_wait_ms=40))) == []
    to_consumers = [m for m in h.advance(41).messages if m.destination == -1]  # (the follower hears of HW 7 too)
    resp = only(to_consumers, FetchResponse).body  # the wait ends with an empty answer
    assert resp.partition_error is Errors.NONE and resp.batches == ()


def test_a_follower_serves_a_consumer_up_to_its_own_high_watermark():
    h = follower_with_hw(3)
    resp = only(h.request(-1, consumer(0)).messages, FetchResponse).body
    assert (resp.partition_error, resp.leader_id, resp.leader_epoch, resp.high_watermark) == (Errors.NONE, 1, 3, 3)
    assert [(b.base_offset, b.next_offset) for b in resp.batches] == [(0, 2), (2, 3)]
    waiting = h.request(-1, consumer(3, max_wait_ms=40))
    assert answers(waiting) == []
    resp = only(leader_answer(h, high_watermark=4).messages, FetchResponse).body
    assert resp.high_watermark == 4 and [b.base_offset for b in resp.batches] == [3]


def test_a_consumer_naming_epochs_is_checked_and_a_wrong_epoch_never_diverges_past_the_hw():
    h = committed_leader()
    assert only(h.request(-1, consumer(0, epoch=2)).messages, FetchResponse).body.partition_error \
        is Errors.FENCED_LEADER_EPOCH
    assert only(h.request(-1, consumer(0, epoch=4)).messages, FetchResponse).body.partition_error \
        is Errors.UNKNOWN_LEADER_EPOCH
    # the consumer says offset 4 follows epoch 1; the log's epoch 1 ends at 3
    resp = only(h.request(-1, consumer(4, last_epoch=1, epoch=3)).messages, FetchResponse).body
    assert resp.diverging_epoch == OffsetAndEpoch(3, 1) and not resp.batches


def test_a_consumer_before_the_log_start_is_out_of_range_and_told_the_snapshot():
    h = committed_leader()
    sid = h.core.create_snapshot(6, b"state")
    h.ready()
    resp = only(h.request(-1, consumer(2)).messages, FetchResponse).body
    assert resp.partition_error is Errors.OFFSET_OUT_OF_RANGE and resp.snapshot_id == sid
    assert (resp.log_start_offset, resp.high_watermark) == (6, 6)


def test_a_node_that_neither_leads_nor_follows_refuses_consumers_and_releases_waiting_ones():
    h = Harness()  # unattached voter
    h.ready()
    assert only(h.request(-1, consumer(0)).messages, FetchResponse).body.partition_error \
        is Errors.NOT_LEADER_OR_FOLLOWER
    f = follower_with_hw(3)
    f.request(-1, consumer(3, max_wait_ms=10_000))
    r = f.advance(CONFIG.fetch_timeout_ms + 1)  # the leader went silent: the follower campaigns
    resp = only([m for m in r.messages if isinstance(m.body, FetchResponse)], FetchResponse).body
    assert resp.partition_error is Errors.NOT_LEADER_OR_FOLLOWER


def test_an_observer_that_left_a_silent_leader_waits_for_news_instead_of_returning_to_it():
    """A voter that has not noticed the leader's death still names it; the observer keeps asking
    until a voter names the next epoch's leader, and believes the old pair again only after a
    fetch timeout (a leader that was only slow)."""
    h = observer(rack=None)
    h.ready()
    r = h.advance(CONFIG.fetch_timeout_ms + 1)  # leader 1 went silent
    assert h.core.role is Role.UNATTACHED and h.core.epoch == 3
    ask = only(r.messages, FetchRequest)
    r = answer(h, ask, **ok(leader=1, epoch=3))  # the voter still follows 1
    assert h.core.role is Role.UNATTACHED
    r = h.advance(CONFIG.retry_backoff_ms + 1)
    ask = only(r.messages, FetchRequest)
    answer(h, ask, **ok(leader=2, epoch=4))
    assert (h.core.role, h.core.leader_id, h.core.epoch) == (Role.FOLLOWER, 2, 4)
    # a slow, not dead, leader: after a fetch timeout the same pair is believed again
    slow = observer(rack=None)
    slow.ready()
    slow.advance(CONFIG.fetch_timeout_ms + 1)
    slow.clock.now_ms += CONFIG.fetch_timeout_ms + 1
    asks = []
    for _ in range(10):  # the next discovery Fetch, once the one in flight expired
        asks = [m for m in slow.advance(CONFIG.retry_backoff_ms).messages if isinstance(m.body, FetchRequest)]
        if asks:
            break
    answer(slow, asks[-1], **ok(leader=1, epoch=3))
    assert (slow.core.role, slow.core.leader_id) == (Role.FOLLOWER, 1)


def test_an_observer_that_left_its_leader_returns_at_once_when_the_leader_itself_answers():
    """The observer, not the leader, was stalled (a paused process): when its discovery Fetch
    reaches the leader, the leader's own answer is believed at once."""
    h = observer(rack=None)
    h.ready()
    r = h.advance(CONFIG.fetch_timeout_ms + 1)
    assert h.core.role is Role.UNATTACHED
    asks = [m for m in r.messages if isinstance(m.body, FetchRequest)]
    started = h.clock.now_ms
    for _ in range(15):  # discovery asks a random voter: the others refuse until it asks 1
        if asks[-1].destination == 1:
            break
        answer(h, asks[-1], error_code=Errors.NOT_LEADER_OR_FOLLOWER, partition_error=Errors.NONE, leader_id=-1,
               leader_epoch=3)
        asks = [m for m in h.advance(CONFIG.retry_backoff_ms).messages if isinstance(m.body, FetchRequest)]
    assert asks[-1].destination == 1
    assert h.clock.now_ms - started < CONFIG.fetch_timeout_ms  # before the old pair is believed anyway
    answer(h, asks[-1], **ok(leader=1, epoch=3))
    assert (h.core.role, h.core.leader_id) == (Role.FOLLOWER, 1)
