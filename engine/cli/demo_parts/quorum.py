"""Looking at the quorum: DescribeQuorum as Kafka's tool prints it, and waits on it.

``status_lines`` / ``replication_lines`` follow ``kafka-metadata-quorum describe --status`` and
``describe --replication --human-readable``: Lag is the leader's log end offset minus the
replica's; MaxFollowerLag is that lag for the replica furthest behind, MaxFollowerLagTimeMs the
leader's last-caught-up time minus that replica's (0 when the leader is the furthest behind).
Our DescribeQuorum carries the leader's monotonic clock in milliseconds (not wall time), so times
are shown as "N ms ago" against the leader's own entry, which it stamps when it answers.
"""

from __future__ import annotations

import asyncio
import time

from kraftlog.engine.cli.demo_parts.errors import QuorumError
from kraftlog.raft.types import Errors

POLL_INTERVAL_S = 0.05


async def wait_for_leader(client, timeout_s: float, describe_nodes) -> object:
    """The first DescribeQuorum answered by a leader; QuorumError naming every node otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dq = await client.describe_quorum()
        if dq.partition_error is Errors.NONE:
            return dq
        await asyncio.sleep(POLL_INTERVAL_S)
    raise QuorumError(f"quorum did not elect a leader within {timeout_s:.0f} s (nodes: {describe_nodes()})")


async def wait_replicas_at(client, node_ids, offset: int, timeout_s: float, describe_nodes) -> object:
    """Until the leader reports every node in ``node_ids`` with log end offset >= ``offset`` and a
    high watermark >= ``offset``; returns that DescribeQuorum answer."""
    deadline = time.monotonic() + timeout_s
    dq = None
    while time.monotonic() < deadline:
        dq = await client.describe_quorum()
        if dq.partition_error is Errors.NONE and dq.high_watermark >= offset:
            ends = {v.replica_id: v.log_end_offset for v in dq.voters}
            if all(ends.get(i, -1) >= offset for i in node_ids):
                return dq
        await asyncio.sleep(POLL_INTERVAL_S)
    seen = "no leader" if dq is None or dq.partition_error is not Errors.NONE else \
        ", ".join(f"node {v.replica_id} at {v.log_end_offset}" for v in dq.voters) + f", HW {dq.high_watermark}"
    raise QuorumError(f"replicas {sorted(node_ids)} did not reach offset {offset} within {timeout_s:.0f} s "
                      f"({seen}; nodes: {describe_nodes()})")


def _leader_entry(dq):
    return next(v for v in dq.voters if v.replica_id == dq.leader_id)


def _ago(now_ms: int, then_ms: int) -> str:
    return "-1" if then_ms < 0 else f"{max(0, now_ms - then_ms)} ms ago"


def status_lines(dq, cluster_id: str) -> list[str]:
    leader = _leader_entry(dq)
    furthest = min(dq.voters, key=lambda v: v.log_end_offset)
    if furthest is leader or furthest.log_end_offset == leader.log_end_offset:
        lag_time = 0
    elif leader.last_caught_up_ms >= 0 and furthest.last_caught_up_ms >= 0:
        lag_time = leader.last_caught_up_ms - furthest.last_caught_up_ms
    else:
        lag_time = -1
    voters = ",".join(str(v.replica_id) for v in dq.voters)
    observers = ",".join(str(v.replica_id) for v in dq.observers)
    return [f"ClusterId:              {cluster_id}",
            f"LeaderId:               {dq.leader_id}",
            f"LeaderEpoch:            {dq.leader_epoch}",
            f"HighWatermark:          {dq.high_watermark}",
            f"MaxFollowerLag:         {leader.log_end_offset - furthest.log_end_offset}",
            f"MaxFollowerLagTimeMs:   {lag_time}",
            f"CurrentVoters:          [{voters}]",
            f"CurrentObservers:       [{observers}]"]


def replication_rows(dq) -> list[list[str]]:
    """Header + one row per replica: the leader, then followers, then observers."""
    leader = _leader_entry(dq)
    now_ms = leader.last_fetch_ms
    rows = [["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]]
    followers = [v for v in dq.voters if v.replica_id != dq.leader_id]
    for status, replicas in (("Leader", [leader]), ("Follower", followers), ("Observer", list(dq.observers))):
        for v in replicas:
            rows.append([str(v.replica_id), str(v.log_end_offset), str(leader.log_end_offset - v.log_end_offset),
                         _ago(now_ms, v.last_fetch_ms), _ago(now_ms, v.last_caught_up_ms), status])
    return rows
