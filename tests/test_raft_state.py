"""Proves the transition table in raft/state.py is enforced: every (from, to, epoch) triple is
checked against an independent reading of the table in the module docstring, observers are
confined to Unattached/Follower, and a vote or leader can never change within an epoch."""

from __future__ import annotations

import itertools

import pytest

from kraftlog.raft.state import NodeState, QuorumState, Role, check_transition
from kraftlog.raft.types import NO_ID, IllegalTransitionError

ROLES = list(Role)
# The docstring table, transcribed by hand as text (rows: from; columns in ROLES order).
TABLE = """
Unattached   >  =  =  .  .  >= .
Voted        >  .  =  .  .  >= .
Prospective  >  =  =  +1 .  >= .
Candidate    >  .  =  .  =  >= .
Leader       >  .  .  .  .  >  =
Follower     >  .  =  .  .  >  .
Resigned     >  .  =  .  .  >  .
"""


def _table():
    rows = {}
    for line in TABLE.strip().splitlines():
        name, *cells = line.split()
        rows[Role(name)] = dict(zip(ROLES, cells, strict=True))
    return rows


def _allowed(rule: str, old_epoch: int, new_epoch: int) -> bool:
    return {".": False, ">": new_epoch > old_epoch, "=": new_epoch == old_epoch,
            ">=": new_epoch >= old_epoch, "+1": new_epoch == old_epoch + 1}[rule]


@pytest.mark.parametrize("old_role,new_role", list(itertools.product(ROLES, ROLES)))
def test_every_cell_of_the_table_is_enforced(old_role, new_role):
    rule = _table()[old_role][new_role]
    for delta in (-1, 0, 1, 2):
        old = NodeState(old_role, 5)
        new = NodeState(new_role, 5 + delta)
        if _allowed(rule, 5, 5 + delta):
            check_transition(old, new, is_observer=False)
        else:
            with pytest.raises(IllegalTransitionError):
                check_transition(old, new, is_observer=False)


@pytest.mark.parametrize("role", [r for r in Role if r not in (Role.UNATTACHED, Role.FOLLOWER)])
def test_observers_never_vote_or_lead(role):
    with pytest.raises(IllegalTransitionError):
        check_transition(NodeState(Role.UNATTACHED, 1), NodeState(role, 1), is_observer=True)
    with pytest.raises(IllegalTransitionError):
        QuorumState(9, frozenset({1, 2, 3}), NodeState(role, 1))


def test_an_observer_may_drop_its_leader_within_an_epoch_but_a_voter_may_not():
    check_transition(NodeState(Role.FOLLOWER, 3, leader_id=1), NodeState(Role.UNATTACHED, 3), is_observer=True)
    with pytest.raises(IllegalTransitionError):
        check_transition(NodeState(Role.FOLLOWER, 3, leader_id=1), NodeState(Role.UNATTACHED, 3), is_observer=False)


def test_a_vote_or_a_leader_never_changes_within_an_epoch():
    with pytest.raises(IllegalTransitionError, match="vote changed"):
        check_transition(NodeState(Role.VOTED, 2, voted_id=1), NodeState(Role.PROSPECTIVE, 2, voted_id=NO_ID),
                         is_observer=False)
    with pytest.raises(IllegalTransitionError, match="leader changed"):
        check_transition(NodeState(Role.PROSPECTIVE, 2, leader_id=1), NodeState(Role.FOLLOWER, 2, leader_id=3),
                         is_observer=False)
    with pytest.raises(IllegalTransitionError):  # footnote (a)
        check_transition(NodeState(Role.PROSPECTIVE, 2, leader_id=1), NodeState(Role.VOTED, 2, voted_id=3),
                         is_observer=False)


def test_quorum_state_marks_the_election_dirty_only_when_it_changes():
    qs = QuorumState(1, frozenset({1, 2, 3}), NodeState(Role.UNATTACHED, 0))
    qs.election_dirty = False
    qs.transition(NodeState(Role.PROSPECTIVE, 0))
    assert not qs.election_dirty  # a pre-vote persists nothing
    qs.transition(NodeState(Role.CANDIDATE, 1, voted_id=1))
    assert qs.election_dirty and qs.persisted.epoch == 1 and qs.persisted.voted_id == 1
