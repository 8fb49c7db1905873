"""Proves following the committed metadata log from outside the quorum (engine/client/tail.py and
`kraftlog log tail`) on real processes: a tail reading from a follower keeps every committed
record, each offset once and in order, while the leader is SIGKILLed and a new one elected; a
tail started before a node's log start is told the gap (the snapshot that holds it) and goes on
from the log start; bad flags and a position past the end are one line and exit 1."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from kio.schema.create_topics.v7 import response as ct_resp

from kraftlog.engine.client.tail import MetadataLogTail, Server, TailedBatch, TailGap
from kraftlog.engine.node.localcluster import wait_until
from kraftlog.engine.node.raftnode import RaftClient
from kraftlog.engine.protocol.connection import ClientConnection
from tests.test_node_controller import NodeCluster, _ask, _topics
from tests.test_raft_cluster import ProcessCluster

pytestmark = pytest.mark.slow


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraftlog.engine.cli.main", *args], capture_output=True,
                          text=True, timeout=120)


def test_a_tail_keeps_every_committed_record_once_across_a_leader_kill(tmp_path):
    cluster = ProcessCluster(str(tmp_path))
    try:
        cluster.start_all()

        async def scenario():
            client = RaftClient(cluster.voters)
            tail = None
            try:
                await client.propose([b"v0"], timeout_ms=30_000)
                leader = (await client.describe_quorum()).leader_id
                # the tail prefers a follower, then the others: it never needs the leader
                order = sorted(cluster.voters, key=lambda i: i == leader)
                tail = MetadataLogTail([Server(*cluster.voters[i], node_id=i) for i in order], max_wait_ms=200,
                                       give_up_after_ms=60_000)
                seen: list[tuple[int, bytes]] = []

                async def read_until(value: bytes):
                    async for item in tail:
                        assert isinstance(item, TailedBatch)
                        if not item.control:
                            seen.extend(zip(range(item.base_offset, item.next_offset), item.records, strict=True))
                        if seen and seen[-1][1] == value:
                            return

                for i in range(1, 20):
                    await client.propose([b"v%d" % i], timeout_ms=30_000)
                await asyncio.wait_for(read_until(b"v19"), 60)
                cluster.kill(leader)
                for i in range(20, 40):
                    await client.propose([b"v%d" % i], timeout_ms=30_000)
                await asyncio.wait_for(read_until(b"v39"), 60)
                assert [v for _, v in seen] == [b"v%d" % i for i in range(40)]
                offsets = [o for o, _ in seen]
                assert offsets == sorted(set(offsets))  # each offset once, in order
                assert (await client.describe_quorum()).leader_id != leader
            finally:
                if tail is not None:
                    await tail.close()
                await client.close()

        asyncio.run(scenario())
    finally:
        cluster.close()


class SnapshottingNode(NodeCluster):
    """One combined node that writes a snapshot every 16 KiB of log, so its log start moves."""

    def command(self, i: int, listen_fd: int) -> list[str]:
        return [*super().command(i, listen_fd), "--snapshot-max-new-bytes", str(16 << 10)]


def test_a_tail_before_the_log_start_is_told_the_gap_and_goes_on(tmp_path):
    cluster = SnapshottingNode(str(tmp_path), 1)
    try:
        cluster.format()
        cluster.start_all()
        address = cluster.addresses[1]

        async def create_until_the_log_start_moves() -> int:
            conn = ClientConnection(*address)
            await conn.open()
            try:
                async def unfenced():  # the node's own broker registers and is unfenced first
                    answer = await _ask(conn, 19, 7, _topics(("probe", 1, 1)), ct_resp.CreateTopicsResponse, 60)
                    return answer.topics[0].error_code == 0

                await wait_until(unfenced, 60, "a topic created on the single node")
                for k in range(40):
                    answer = await _ask(conn, 19, 7, _topics(*((f"t{k}-{n}", 1, 1) for n in range(25))),
                                        ct_resp.CreateTopicsResponse, 60)
                    assert all(t.error_code == 0 for t in answer.topics), answer
                    start = await _log_start(address)
                    if start > 0:
                        # the snapshot may have taken the log's whole end: the tail below reads
                        # five records past the start, so six more are committed after it (a
                        # few hundred bytes, far from the next snapshot's 16 KiB)
                        answer = await _ask(conn, 19, 7, _topics(*((f"after-{n}", 1, 1) for n in range(3))),
                                            ct_resp.CreateTopicsResponse, 60)
                        assert all(t.error_code == 0 for t in answer.topics), answer
                        return await _log_start(address)
            finally:
                await conn.close()
            raise AssertionError("the log start never moved")

        start = asyncio.run(create_until_the_log_start_moves())
        host, port = address
        out = _cli("log", "tail", "--bootstrap-server", f"{host}:{port}", "--max-records", "5")
        assert out.returncode == 0, out.stderr
        gap_line = out.stderr.strip().splitlines()
        assert len(gap_line) == 1 and f"offsets 0-{start - 1} are no longer in the log" in gap_line[0]
        assert "snapshot" in gap_line[0]
        records = [json.loads(line) for line in out.stdout.splitlines()]
        assert [r["offset"] for r in records] == list(range(start, start + 5))
        assert all("type" in r and "error" not in r for r in records)

        beyond = _cli("log", "tail", "--bootstrap-server", f"{host}:{port}", "--from-offset", "10000000")
        assert beyond.returncode == 1 and len(beyond.stderr.splitlines()) == 1
        assert "past the end of the committed log" in beyond.stderr and "Traceback" not in beyond.stderr
    finally:
        cluster.close()


async def _log_start(address) -> int:
    tail = MetadataLogTail([Server(*address)], max_wait_ms=0)
    try:
        async for item in tail:
            return item.to_offset if isinstance(item, TailGap) else 0
    finally:
        await tail.close()


@pytest.mark.parametrize("flags, says", [
    (["--bootstrap-server", "nohost"], "not HOST:PORT"),
    (["--bootstrap-server", "h:1", "--from-offset", "-1"], "--from-offset -1"),
    (["--bootstrap-server", "x@h:1"], "not HOST:PORT"),
])
def test_bad_tail_flags_are_one_line(flags, says):
    out = _cli("log", "tail", *flags)
    assert out.returncode == 1 and len(out.stderr.splitlines()) == 1 and says in out.stderr, out.stderr
