"""Benchmark rows for a Raft node that never stalls (issue 19): catching up across a long log of
small batches, and the first commit after every voter restarts on a long log.

The log: the reference workload's records (engine/image/workload.py, 10 partitions per topic,
RF 3) written one record per batch at epoch 1, the way a controller writes small events (a
NoOpRecord every 500 ms, one batch per CreateTopics): ``CATCHUP_PARTITIONS`` partitions make
~110,000 batches (--quick: a tenth). It is written straight into the voters' directories
(``kraftlog storage format``ed, Kafka's layout) with the engine log, as a quorum that had
committed it would hold it.

    raft.catchup_batches_per_s
        Controllers 1 and 2 hold the log and elect a leader; controller 3 starts empty (formatted
        only). Timed: from node 3's READY until DescribeQuorum (polled every 5 ms) shows its log
        end at the leader's high watermark: every batch fetched, appended in slices of the log's
        append limit and fsynced. Its replay into the metadata image runs on the same loop
        meanwhile, in pieces between which the next Fetch answer is read; the window ends with the
        log, so the last pieces of replay may still be running then. Goal >= 50,000 batches/s
        and >= 0.5x the peer. Peer: the bulk replay of the same batches in this process
        (Loader.replay of the bytes, from memory): what the image work alone costs.

    raft.failover_after_full_restart_ratio
        All three controllers hold the log and are launched at once (as after a SIGKILL of all
        of them). Timed: from the last READY (every process up and listening) to the first
        CreateTopics committed by the active controller, which must first replay the whole log
        into its image (in bounded bulk pieces, between which it keeps answering Fetches and
        votes). Over the election timeout (500 ms); goal <= 2. Peer: none (the ratio is the row).

Ports are ephemeral (engine/node/localcluster.py); every process is killed and every directory
removed when a row ends, whatever happens.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time

from kraftlog.bench.rows_cluster import bytecode_launcher, format_dir
from kraftlog.bench.timing import row
from kraftlog.engine.image import workload as wl
from kraftlog.engine.node.localcluster import LocalCluster, wait_until

CATCHUP_PARTITIONS = 100_000
ELECTION_TIMEOUT_MS = 500
LOG_EPOCH = 1
RECORDS_PER_BATCH = 1
WAIT_S = 300.0  # a step not done by then failed the run
# DescribeQuorum every 5 ms while node 3 catches up: the catch-up takes ~0.15 s, which polls
# every 50 ms would round up by 25 ms on average (a sixth of the figure)
CATCHUP_POLL_S = 0.005
_RAFT_FLAGS = ("--election-timeout-ms", str(ELECTION_TIMEOUT_MS), "--fetch-timeout-ms", "1000",
               "--request-timeout-ms", "800", "--fetch-max-wait-ms", "200",
               # nobody heartbeats for the workload's brokers: keep them unfenced while the row runs
               "--session-timeout-ms", "3600000")


def partitions_for(quick: bool) -> int:
    return CATCHUP_PARTITIONS // 10 if quick else CATCHUP_PARTITIONS


def small_batches(partitions: int) -> bytes:
    """The workload's records, one per batch, at LOG_EPOCH, offsets from 0."""
    from kraftlog.engine.records.batch import build_batch_from_values

    values = wl.image_values(wl.WorkloadShape.scaled(partitions))
    return b"".join(build_batch_from_values(values[i:i + RECORDS_PER_BATCH], base_offset=i,
                                            partition_leader_epoch=LOG_EPOCH)
                    for i in range(0, len(values), RECORDS_PER_BATCH))


def seed_log(directory: str, data: bytes) -> int:
    """Write ``data`` (whole batches from offset 0) as node ``directory``'s metadata log, fsynced,
    with a quorum-state at LOG_EPOCH (no leader, no vote); returns the log end offset."""
    from kraftlog.engine.layout import METADATA_LOG_DIRNAME
    from kraftlog.engine.log.log import Log
    from kraftlog.engine.node.raftlog import RAFT_LOG_CONFIG
    from kraftlog.raft import wire
    from kraftlog.raft.aio.quorum_file import QuorumStateFile
    from kraftlog.raft.types import ElectionState

    partition_dir = os.path.join(directory, METADATA_LOG_DIRNAME)
    batches = wire.split_batches(data)
    step = RAFT_LOG_CONFIG.max_batches_per_append
    log = Log(partition_dir, RAFT_LOG_CONFIG)
    try:
        for at in range(0, len(batches), step):
            log.append_as_follower(wire.encode_batches(batches[at:at + step]))
        log.flush()
        end = log.end_offset
    finally:
        log.close()
    QuorumStateFile(partition_dir).write(ElectionState(LOG_EPOCH, voters=frozenset({1, 2, 3})))
    return end


class ControllerCluster(LocalCluster):
    """Three `kraftlog node run` controllers; ``seeded`` of them hold the log."""

    def __init__(self, data: bytes, seeded: tuple[int, ...]):
        super().__init__(tempfile.mkdtemp(prefix="kraftlog-catchup-bench-"), 3, backlog=256)
        self.launcher = bytecode_launcher(self.directory)
        self.end_offset = 0
        for i in self.socks:
            format_dir(self.dir_of(i), i)
            if i in seeded:
                self.end_offset = seed_log(self.dir_of(i), data)

    def command(self, i: int, listen_fd: int) -> list[str]:
        return [*self.launcher, sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd",
                str(listen_fd), "--process-roles", "controller", "--log-level", "WARNING", *_RAFT_FLAGS]

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.directory, ignore_errors=True)


async def _replica_end(client, node: int) -> int:
    dq = await client.describe_quorum()
    return next((v.log_end_offset for v in dq.voters if v.replica_id == node), -1)


async def _catchup_seconds(cluster: ControllerCluster) -> float:
    from kraftlog.engine.node.raftnode import RaftClient

    client = RaftClient(cluster.voters)
    try:
        dq = await wait_until(lambda: _committed_past(client, cluster.end_offset), WAIT_S,
                              "controllers 1 and 2 lead and commit the seeded log")
        target = dq.high_watermark
        cluster.start(3)
        ready = time.perf_counter()
        await wait_until(lambda: _at_least(client, 3, target), WAIT_S, f"node 3 at offset {target}",
                         poll_s=CATCHUP_POLL_S)
        return time.perf_counter() - ready
    finally:
        await client.close()


async def _committed_past(client, offset: int):
    dq = await client.describe_quorum()
    return dq if dq.high_watermark > offset else None


async def _at_least(client, node: int, offset: int) -> bool:
    return await _replica_end(client, node) >= offset


def catchup(quick: bool) -> dict:
    partitions = partitions_for(quick)
    data = small_batches(partitions)
    batches = _count_batches(data)
    peer_s = _bulk_replay_seconds(data)
    times = []
    for _ in range(1 if quick else 3):
        cluster = ControllerCluster(data, seeded=(1, 2))
        try:
            cluster.start(1)
            cluster.start(2)
            times.append(asyncio.run(_catchup_seconds(cluster)))
        finally:
            cluster.close()
    elapsed = statistics.median(times)
    ours, peer = batches / elapsed, batches / peer_s
    return row("raft.catchup_batches_per_s", "batches/s", ours, (max(times) - min(times)) * ours / elapsed,
               peer="bulk replay of the same batches in one process (Loader.replay)", peer_value=peer,
               higher_is_better=True, goal=">= 50,000 batches/s and >= 0.5x the bulk replay",
               met=ours >= 50_000 and ours >= 0.5 * peer, batches=batches, catchup_s=elapsed, runs=len(times),
               scale=None if partitions == CATCHUP_PARTITIONS else batches,
               notes=f"one record per batch ({partitions:,} partitions of the reference workload); node 3 "
                     "starts empty; fsync on")


def _count_batches(data: bytes) -> int:
    from kraftlog.raft import wire

    return len(wire.split_batches(data))


def _bulk_replay_seconds(data: bytes) -> float:
    from kraftlog.bench.timing import measure
    from kraftlog.engine.image.loader import Loader

    median_s, _ = measure(lambda: Loader().replay(data), repeat=3)
    return median_s


async def _first_commit_seconds(cluster: ControllerCluster) -> float:
    from kio.schema.errors import ErrorCode

    from kraftlog.engine.cli.demo_parts.admin import Admin
    from kraftlog.engine.node.raftnode import RaftClient
    from kraftlog.engine.protocol.connection import ClientError

    client, admin = RaftClient(cluster.voters), Admin(cluster)
    started = time.perf_counter()

    async def created():
        try:
            dq = await client.describe_quorum()
            if dq.leader_id not in cluster.addresses:  # no leader yet
                return False
            resp = await admin.create_topics(dq.leader_id, ["after-restart"], 1, 1)
        except ClientError:
            return False
        return resp.topics[0].error_code is ErrorCode.none

    try:
        await wait_until(created, WAIT_S, "a topic created after the full restart")
        return time.perf_counter() - started
    finally:
        await admin.close()
        await client.close()


def failover_after_full_restart(quick: bool) -> dict:
    partitions = partitions_for(quick)
    data = small_batches(partitions)
    times = []
    for _ in range(1 if quick else 3):
        cluster = ControllerCluster(data, seeded=(1, 2, 3))
        try:
            cluster.start_together()
            times.append(asyncio.run(_first_commit_seconds(cluster)))
        finally:
            cluster.close()
    median_s = statistics.median(times)
    ratio = median_s * 1000 / ELECTION_TIMEOUT_MS
    return row("raft.failover_after_full_restart_ratio", "x election timeout", ratio,
               (max(times) - min(times)) * 1000 / ELECTION_TIMEOUT_MS, peer=None, peer_value=None,
               higher_is_better=False, goal="<= 2", met=ratio <= 2, first_commit_s=median_s, runs=len(times),
               records=_count_batches(data), election_timeout_ms=ELECTION_TIMEOUT_MS,
               scale=None if partitions == CATCHUP_PARTITIONS else partitions,
               notes="3 controllers launched together on a log of one-record batches; timed from the last READY "
                     "to the first CreateTopics committed (the active controller replays the log first)")


ROWS = {
    "raft.catchup_batches_per_s": catchup,
    "raft.failover_after_full_restart_ratio": failover_after_full_restart,
}
