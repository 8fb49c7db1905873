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
locally durable. ``execute_ready`` is this order as code; a driver should use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraftlog.raft.messages import Envelope
from kraftlog.raft.types import ElectionState, LogBatch, OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    snapshot_id: OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class Commit:
    batch: LogBatch


@dataclass(frozen=True, slots=True)
class LeaderChangeNotice:
    leader_id: int
    epoch: int


Delivery = LoadSnapshot | Commit | LeaderChangeNotice


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
    """Persist, then send, then apply (see the module docstring)."""
    if ready.election is not None:
        quorum_store.write(ready.election)
    if ready.flush_log:
        log.flush()
    for envelope in ready.messages:
        channel.send(envelope)
    for item in ready.deliveries:
        if isinstance(item, Commit):
            listener.handle_commit(item.batch)
        elif isinstance(item, LoadSnapshot):
            listener.handle_load_snapshot(item.snapshot_id, snapshots)
        else:
            listener.handle_leader_change(item.leader_id, item.epoch)
