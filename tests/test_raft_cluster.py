"""Proves a real cluster works: three `python -m kraftlog.engine.node.raftnode` processes on
loopback (ephemeral ports: the test binds port 0 and hands each node its listening socket)
elect a leader, commit records proposed over Kafka's wire (Produce), describe the quorum per
voter (DescribeQuorum), elect a new leader within a bound after the leader is SIGKILLed without
losing any acknowledged record, let the killed node restart and catch up, hand leadership over on
a graceful SIGTERM, close only the connection that sends a garbage frame, and serve consumers
(Fetch as replica -1) committed records from any offset on the leader and on a follower.

Every process is killed in a finalizer, whatever happens.
"""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import sys
import time

import pytest

from kraftlog.engine.node.localcluster import LocalCluster, wait_until
from kraftlog.engine.node.raftnode import RaftClient

pytestmark = pytest.mark.slow

ELECTION_TIMEOUT_MS = 300
FETCH_TIMEOUT_MS = 600
# Detection (fetch timeout) + a pre-vote and a vote round + a possible split vote (backoff) + the
# first commit, with room for a loaded 2-core machine.
FAILOVER_BOUND_S = (FETCH_TIMEOUT_MS + 4 * ELECTION_TIMEOUT_MS) / 1000 + 2.0


class ProcessCluster(LocalCluster):
    """Three raftnode processes (see kraftlog.engine.node.localcluster)."""

    def command(self, i: int, listen_fd: int) -> list[str]:
        return [sys.executable, "-m", "kraftlog.engine.node.raftnode", "--node-id", str(i), "--voters",
                self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd),
                "--cluster-id", "test-cluster", "--election-timeout-ms", str(ELECTION_TIMEOUT_MS),
                "--election-backoff-max-ms", "150", "--fetch-timeout-ms", str(FETCH_TIMEOUT_MS),
                "--request-timeout-ms", "400", "--fetch-max-wait-ms", "200"]


@pytest.fixture
def cluster(tmp_path):
    c = ProcessCluster(str(tmp_path))
    try:
        for i in c.voters:
            c.start(i)
        yield c
    finally:
        c.close()


async def _until(predicate, timeout_s: float, what: str):
    """wait_until, with any connection error failing the test at once (these clusters stay up)."""
    return await wait_until(predicate, timeout_s, what, transient_errors=False)


async def _commit_one_and_pick_a_follower(client, cluster, value: bytes):
    """Commit ``value`` (so a leader is known), then (DescribeQuorum answer, a follower's id)."""
    await client.propose([value], timeout_ms=15_000)
    dq = await client.describe_quorum()
    return dq, next(i for i in cluster.voters if i != dq.leader_id)


def test_cluster_commits_survives_leader_kill_and_catches_up(cluster):
    async def scenario():
        client = RaftClient(cluster.voters)
        acked = []
        try:
            for i in range(20):
                await client.propose([b"a%d" % i], timeout_ms=15_000)
                acked.append(b"a%d" % i)
            dq = await client.describe_quorum()
            assert {v.replica_id for v in dq.voters} == {1, 2, 3}
            assert dq.leader_id in cluster.voters and dq.high_watermark >= 21  # LeaderChange + 20
            leader_state = next(v for v in dq.voters if v.replica_id == dq.leader_id)
            assert leader_state.log_end_offset >= dq.high_watermark
            old_leader, old_epoch = dq.leader_id, dq.leader_epoch

            cluster.kill(old_leader)
            killed_at = time.monotonic()
            client = RaftClient(cluster.voters)
            await client.propose([b"after-kill"], timeout_ms=15_000)
            failover_s = time.monotonic() - killed_at
            acked.append(b"after-kill")
            dq = await client.describe_quorum()
            assert dq.leader_id != old_leader and dq.leader_epoch > old_epoch
            assert failover_s < FAILOVER_BOUND_S, f"failover took {failover_s:.2f} s"
            for i in range(10):
                await client.propose([b"b%d" % i], timeout_ms=15_000)
                acked.append(b"b%d" % i)

            committed = [v for _, v in await client.read_committed(0)]
            assert [v for v in committed if v in set(acked)] == acked  # nothing acknowledged was lost

            cluster.start(old_leader)

            async def caught_up():
                d = await client.describe_quorum()
                state = {v.replica_id: v.log_end_offset for v in d.voters}
                return state[old_leader] >= d.high_watermark and d.high_watermark > 0 and state

            await _until(caught_up, 15, f"node {old_leader} catching up")
        finally:
            await client.close()

    asyncio.run(scenario())


def test_consumers_read_committed_records_from_any_offset_on_the_leader_and_a_follower(cluster):
    """KIP-392 on the wire: a Fetch as replica -1 naming no epochs reads committed records from
    the middle of the log, from the leader and from a follower, and both agree."""
    async def scenario():
        client = RaftClient(cluster.voters)
        try:
            for i in range(6):
                await client.propose([b"c%d" % i], timeout_ms=15_000)
            dq = await client.describe_quorum()
            follower = next(i for i in cluster.voters if i != dq.leader_id)
            everything = await client.read_committed(0)
            assert [v for _, v in everything] == [b"c%d" % i for i in range(6)]
            third = everything[3][0]
            from_leader = await client.read_committed(third)
            assert [v for _, v in from_leader] == [b"c3", b"c4", b"c5"]

            async def follower_has_all():
                return [v for _, v in await client.read_committed(third, node=follower)] == [b"c3", b"c4", b"c5"]

            # the follower learns the high watermark with its next Fetch answer
            await _until(follower_has_all, 15, f"follower {follower} serving committed records")
        finally:
            await client.close()

    asyncio.run(scenario())


def test_graceful_stop_hands_over_and_garbage_closes_one_connection(cluster):
    async def scenario():
        client = RaftClient(cluster.voters)
        try:
            dq, follower = await _commit_one_and_pick_a_follower(client, cluster, b"x")
            host, port = cluster.voters[follower]
            # a frame of junk (valid size, unknown API key) to a live follower
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(struct.pack(">i", 10) + b"\x7f\x7f\x00\x01" + b"\x00" * 6)
            await writer.drain()
            assert await asyncio.wait_for(reader.read(64), 5) == b""
            writer.close()
            versions = await client.api_versions(follower)  # the follower still serves others
            assert (52, 2, 2) in versions
            await client.propose([b"y"], timeout_ms=15_000)  # and the cluster still commits
            assert "closing connection" in cluster.stderr_of(follower)

            old = dq.leader_id
            assert cluster.kill(old, signal.SIGTERM) == 0
            client2 = RaftClient(cluster.voters)
            start = time.monotonic()
            await client2.propose([b"z"], timeout_ms=15_000)
            handover_s = time.monotonic() - start
            d2 = await client2.describe_quorum()
            assert d2.leader_id != old and d2.leader_epoch > dq.leader_epoch
            # EndQuorumEpoch lets the best placed follower run at once: faster than a fetch timeout
            assert handover_s < FAILOVER_BOUND_S
            await client2.close()
        finally:
            await client.close()

    asyncio.run(scenario())


def test_a_voter_that_cannot_write_its_quorum_state_stops_with_one_line(cluster):
    """A failed quorum-state write is decided, not suffered: the voter whose file cannot be
    replaced (a real rename failure on the real file system) stops at its next election-state
    change with one line naming the failure and a non-zero exit, instead of living on with a
    dead driver."""

    async def scenario():
        client = RaftClient(cluster.voters)
        try:
            dq, broken = await _commit_one_and_pick_a_follower(client, cluster, b"before")
            state = os.path.join(cluster.dir_of(broken), "quorum-state")
            os.remove(state)
            os.mkdir(state)  # a non-empty directory: the atomic rename onto it fails (EISDIR)
            open(os.path.join(state, "keep"), "w").close()
            assert cluster.kill(dq.leader_id, signal.SIGTERM) == 0  # a graceful stop: the next epoch starts at once
            failed = cluster.procs.pop(broken)
            code = await asyncio.get_running_loop().run_in_executor(None, failed.wait, 60)
            failed.err_file.close()
            err = cluster.stderr_of(broken)
            assert code == 1, err[-2000:]
            assert "raft stopped" in err and f"raftnode: error: node {broken} stopped:" in err
            assert "Traceback" not in err
        finally:
            await client.close()

    asyncio.run(scenario())


def test_the_client_asks_the_known_leader_first_and_every_voter_once():
    """A proposal tries the leader it knows, then each other voter once per round: a dead leader
    listed twice cost a failover one more attempt timeout (bench raft.failover_ratio)."""
    client = RaftClient({3: ("h", 3), 1: ("h", 1), 2: ("h", 2)})
    assert client._candidates() == [1, 2, 3]
    client.leader_id = 2
    assert client._candidates() == [2, 1, 3]
    client.leader_id = 9  # not a voter (a stale answer): ignored
    assert client._candidates() == [1, 2, 3]
