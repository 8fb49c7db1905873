"""The roles a node can be in, and the only transitions between them.

Legal transitions (rows: from, columns: to). The cell says which epoch the new state may
have, relative to the current epoch e: ``>`` a larger epoch, ``=`` the same, ``>=`` either,
``+1`` exactly the next; ``.`` is illegal. Anything else raises IllegalTransitionError.

    from \\ to     Unattached  Voted  Prospective  Candidate  Leader  Follower  Resigned
    Unattached     >           =      =            .          .       >=        .
    Voted          >           .      =            .          .       >=        .
    Prospective    >           =(a)   =(b)         +1         .       >=        .
    Candidate      >           .      =(c)         .          =(d)    >=        .
    Leader         >           .      .            .          .       >         =
    Follower       >(e)        .      =            .          .       >         .
    Resigned       >           .      =            .          .       >         .

    (a) only when the prospective has neither voted nor known a leader in this epoch
    (b) the pre-vote timed out and no leader is known: ask again
    (c) the election was lost or timed out: ask again with a pre-vote, keeping the epoch
    (d) only with votes from a majority of the voters
    (e) an observer may also drop an unresponsive leader within the same epoch (``>=``)

Why each exists:
    * any state -> Unattached(>): learned of a newer epoch without knowing its leader.
    * Unattached -> Voted(=): granted a vote (persisted before the response is sent).
    * Unattached/Voted/Follower/Resigned/Candidate -> Prospective(=): election or fetch timeout;
      a pre-vote asks whether we could win without bumping the epoch, so a node that was only
      partitioned cannot disrupt a healthy quorum (KIP-996).
    * Prospective -> Candidate(+1): a majority granted the pre-vote; the real vote bumps the epoch.
    * Candidate -> Leader(=): a majority granted the vote.
    * -> Follower(>=): a leader of this or a newer epoch made itself known (BeginQuorumEpoch, a
      Fetch/Vote answer naming it); never a second leader within one epoch.
    * Leader -> Resigned(=): graceful shutdown or the leader lost contact with a majority
      (progress timeout). A node that restarts after having been leader also starts Resigned,
      so it can neither vote nor lead again in that epoch.

Observers never vote: they live only in Unattached and Follower.

Within one epoch the persisted ElectionState may only gain information: ``voted_id`` and
``leader_id`` go from NO_ID to a node and never change after. ``QuorumState.transition``
checks this too; a violation would let a node vote twice in an epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from kraftlog.raft.types import NO_ID, ElectionState, IllegalTransitionError


class Role(Enum):
    UNATTACHED = "Unattached"
    VOTED = "Voted"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


U, V, P, C, L, F, R = (Role.UNATTACHED, Role.VOTED, Role.PROSPECTIVE, Role.CANDIDATE, Role.LEADER,
                       Role.FOLLOWER, Role.RESIGNED)

# (from, to) -> epoch rule; the table in the module docstring, as data.
TRANSITIONS: dict[tuple[Role, Role], str] = {
    (U, U): ">", (U, V): "=", (U, P): "=", (U, F): ">=",
    (V, U): ">", (V, P): "=", (V, F): ">=",
    (P, U): ">", (P, V): "=", (P, P): "=", (P, C): "+1", (P, F): ">=",
    (C, U): ">", (C, P): "=", (C, L): "=", (C, F): ">=",
    (L, U): ">", (L, F): ">", (L, R): "=",
    (F, U): ">", (F, P): "=", (F, F): ">",
    (R, U): ">", (R, P): "=", (R, F): ">",
}
OBSERVER_ROLES = frozenset({U, F})


@dataclass(eq=False, slots=True)
class NodeState:
    """One role in one epoch. ``deadline_ms`` is the role's timer (election timeout, fetch
    timeout, progress check); the core owns the other fields' meaning per role:

        Unattached/Voted: deadline = election timeout; voted_id (Voted)
        Prospective/Candidate: granted/rejected voter sets, deadline = election timeout,
            backoff_until_ms after a lost or split election; leader_id/voted_id carried from before
        Follower: leader_id; fetched_ok once a fetch in this state succeeded; leader_resigned
            after EndQuorumEpoch (either makes us grant pre-votes)
        Leader/Resigned: see LeaderProgress in the core
    """

    role: Role
    epoch: int
    leader_id: int = NO_ID
    voted_id: int = NO_ID
    deadline_ms: int = 0
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    backoff_until_ms: int = -1
    fetched_ok: bool = False
    leader_resigned: bool = False
    preferred_successors: tuple[int, ...] = ()
    serial: int = 0  # increases on every transition; stale responses compare it

    def election(self, voters: frozenset[int]) -> ElectionState:
        return ElectionState(self.epoch, self.leader_id, self.voted_id, voters)


def check_transition(old: NodeState, new: NodeState, *, is_observer: bool) -> None:
    """Raise IllegalTransitionError unless old -> new is in the table (and the election state
    only gains information within an epoch)."""
    rule = TRANSITIONS.get((old.role, new.role))
    if is_observer and new.role not in OBSERVER_ROLES:
        raise IllegalTransitionError(f"an observer cannot become {new.role.value}")
    if is_observer and (old.role, new.role) == (F, U):
        rule = ">="
    if rule is None:
        raise IllegalTransitionError(f"{old.role.value}(epoch {old.epoch}) -> {new.role.value} is not a legal transition")
    ok = {
        ">": new.epoch > old.epoch,
        "=": new.epoch == old.epoch,
        ">=": new.epoch >= old.epoch,
        "+1": new.epoch == old.epoch + 1,
    }[rule]
    if not ok:
        raise IllegalTransitionError(
            f"{old.role.value}(epoch {old.epoch}) -> {new.role.value}(epoch {new.epoch}) breaks epoch rule '{rule}'"
        )
    if (old.role, new.role) == (P, V) and (old.voted_id != NO_ID or old.leader_id != NO_ID):
        raise IllegalTransitionError("a prospective that voted or knows a leader cannot vote again in its epoch")
    if new.epoch == old.epoch:
        if old.voted_id != NO_ID and new.voted_id != old.voted_id:
            raise IllegalTransitionError(f"vote changed within epoch {old.epoch}: {old.voted_id} -> {new.voted_id}")
        observer_drops_leader = is_observer and new.role is U
        if old.leader_id != NO_ID and new.leader_id != old.leader_id and not observer_drops_leader:
            raise IllegalTransitionError(f"leader changed within epoch {old.epoch}: {old.leader_id} -> {new.leader_id}")


class QuorumState:
    """Holds the current NodeState and enforces the transition table on every change.

    ``election_dirty`` is set when the persisted ElectionState changed and not yet handed out
    for persistence (the core puts it in the next Ready and clears the flag). It starts set:
    the initial state is written once, unless ``initial_durable`` says the store already reads
    back as it (raft/core.py: a fresh node unattached in epoch 0, whose store is empty).
    """

    def __init__(self, node_id: int, voters: frozenset[int], initial: NodeState, *, initial_durable: bool = False):
        self.node_id = node_id
        self.voters = voters
        self.is_observer = node_id not in voters
        if self.is_observer and initial.role not in OBSERVER_ROLES:
            raise IllegalTransitionError(f"an observer cannot start as {initial.role.value}")
        self.current = initial
        self.election_dirty = not initial_durable
        self.persisted = initial.election(voters)
        self._serial = 0

    def transition(self, new: NodeState) -> NodeState:
        check_transition(self.current, new, is_observer=self.is_observer)
        self._serial += 1
        new.serial = self._serial
        self.current = new
        election = new.election(self.voters)
        if election != self.persisted:
            self.persisted = election
            self.election_dirty = True
        return new

    @property
    def role(self) -> Role:
        return self.current.role

    @property
    def epoch(self) -> int:
        return self.current.epoch

    @property
    def leader_id(self) -> int:
        s = self.current
        if s.role in (L, R):
            return self.node_id
        return s.leader_id if s.role in (F, P) else NO_ID
