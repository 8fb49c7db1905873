"""What one poll of the core hands to its driver, and the one order to act on it in.

``Ready`` is a frozen value (etcd-raft style). The driver MUST act on it in this order:

    1. persist: write ``election`` to the quorum-state store (durable, atomic) if it is set,
       then flush the log if ``flush_log`` is set;
    2. send: hand every envelope in ``messages`` to the channel;
    3. apply: hand every item of ``deliveries`` to the listener, in order;
    then call ``poll()`` again at ``next_poll_ms`` at the latest (or as soon as a message
    arrives).

Why this order: a vote or a fetch offset sent to a peer is a promise ("I will not vote for
anyone else in this epoch", "I hold these records"); it may leave the node only once it would
survive a crash. Deliveries come last because the listener may only see what is committed and
locally durable.

One reordering is allowed, and ``execute_ready`` makes it: when a Ready changes no election
state (``election`` is None), the leader's Fetch *responses* may leave before the log flush. They
promise nothing (the leader counts its own records towards the high watermark only once
``last_flushed_offset`` passes them), and sending them first lets the followers write and fsync
while the leader fsyncs, so a commit costs one fsync time instead of two. A vote, a follower's
Fetch (it reports its log end) and every other message leave only after the quorum-state write
and the flush.

``execute_ready`` is this contract as code, the one executor of it: the asyncio driver, the
simulator and the unit harness all act on a Ready through it, so every simulated seed runs the
order production runs. Consecutive commits go to ``listener.handle_commits(batches)`` in one call
when the listener has it (a state machine applies them in bulk), else one ``handle_commit`` each;
a CommitRun (from a log whose reads are runs) goes to ``listener.handle_commit_run`` when it has
it, else joins the commits around it.
"""

from __future__ import annotations

import enum
import errno
from collections.abc import Sequence
from dataclasses import dataclass

from kraftlog.raft.messages import Envelope, FetchResponse
from kraftlog.raft.types import ElectionState, LogBatch, OffsetAndEpoch, fast_frozen_init


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    snapshot_id: OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class Commit:
    batch: LogBatch


@fast_frozen_init  # made on every commit (raft/types.py)
@dataclass(frozen=True, slots=True)
class CommitRun:
    """Consecutive committed batches delivered at once, from a log whose reads come as runs
    (raft/wire.py BatchRun: ``raw`` is their bytes, ``next_offset`` where they end)."""

    batches: Sequence[LogBatch]


@dataclass(frozen=True, slots=True)
class LeaderChangeNotice:
    leader_id: int
    epoch: int


Delivery = LoadSnapshot | Commit | CommitRun | LeaderChangeNotice


@fast_frozen_init  # made on every commit (raft/types.py)
@dataclass(frozen=True, slots=True)
class Ready:
    election: ElectionState | None
    flush_log: bool
    messages: tuple[Envelope, ...]
    deliveries: tuple[Delivery, ...]
    next_poll_ms: int

    @property
    def is_empty(self) -> bool:
        return self.election is None and not self.flush_log and not self.messages and not self.deliveries


def execute_ready(ready: Ready, *, quorum_store, log, channel, listener, snapshots) -> None:
    """Persist, then send, then apply (see the module docstring, which also says why the leader's
    Fetch responses may leave before the flush when no election state changes)."""
    messages = ready.messages
    send = channel.send
    if ready.election is None and ready.flush_log and messages:
        later = []
        for envelope in messages:
            if type(envelope.body) is FetchResponse and not envelope.is_request:
                send(envelope)
            else:
                later.append(envelope)
        messages = later
    if ready.election is not None:
        quorum_store.write(ready.election)
    if ready.flush_log:
        log.flush()
    for envelope in messages:
        send(envelope)
    deliver(ready.deliveries, listener, snapshots)


def deliver(deliveries: tuple[Delivery, ...], listener, snapshots) -> None:
    """Hand ``deliveries`` to ``listener`` in order; a run of consecutive commits goes to
    ``listener.handle_commits`` in one call when the listener has that method, and a CommitRun
    to ``listener.handle_commit_run`` (else as its batches)."""
    if not deliveries:  # most Readies (an empty poll's, a Fetch answer's): no listener lookups
        return
    in_bulk = getattr(listener, "handle_commits", None)
    as_run = getattr(listener, "handle_commit_run", None)
    run: list[LogBatch] = []
    for item in deliveries:
        if type(item) is Commit:
            run.append(item.batch)
            continue
        if type(item) is CommitRun and as_run is None:
            run.extend(item.batches)
            continue
        if run:
            _commit(run, listener, in_bulk)
            run = []
        if type(item) is CommitRun:
            as_run(item.batches)
        elif type(item) is LoadSnapshot:
            listener.handle_load_snapshot(item.snapshot_id, snapshots)
        else:
            listener.handle_leader_change(item.leader_id, item.epoch)
    if run:
        _commit(run, listener, in_bulk)


def _commit(batches: list[LogBatch], listener, in_bulk) -> None:
    if in_bulk is not None and len(batches) > 1:
        in_bulk(batches)
        return
    for batch in batches:
        listener.handle_commit(batch)


class StepFault(enum.Enum):
    """What an exception out of ``core.step`` costs (the driver acts on it; the simulator too)."""

    INVALID_DATA = "invalid data from a peer: that connection closes, the node goes on"
    OUT_OF_SPACE = "a follower append found the disk full: nothing appended, fetch again"
    STOP = "the storage failed: the node stops"


def step_fault(exc: BaseException) -> StepFault:
    """The storage failing is an OSError or the engine's LogStorageError (both carry ``errno``);
    anything else is data refused as invalid (a peer's bad batch: ValueError, CorruptRecordError)."""
    if not (isinstance(exc, OSError) or hasattr(exc, "errno")):
        return StepFault.INVALID_DATA
    return StepFault.OUT_OF_SPACE if out_of_space(exc) else StepFault.STOP


def out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a full disk (the engine's LogStorageError and a bare OSError carry
    ``errno``): the one storage fault a node survives (see raft/aio/driver.py for the policy)."""
    return getattr(exc, "errno", None) == errno.ENOSPC
