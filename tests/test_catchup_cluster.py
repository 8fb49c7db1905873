"""Proves catch-up at any distance on real processes: a controller that starts empty and a new
broker (a Raft observer) both catch up to a quorum whose log holds 100,000 one-record batches
(~17 MiB: three Fetch answers, each ~12 times what one engine-log append takes, the limit a far
node used to fail on forever), and the broker's image answers at the leader's offset.

The two controllers' logs are seeded on disk with the reference workload, one record per batch
(bench/rows_catchup.py writes them the same way for its row).
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from kraftlog.bench.rows_catchup import seed_log
from kraftlog.bench.rows_cluster import format_dir
from kraftlog.engine.cli.demo_parts.admin import Admin
from kraftlog.engine.image import workload
from kraftlog.engine.node.localcluster import LocalCluster, wait_until
from kraftlog.engine.node.raftnode import RaftClient
from kraftlog.engine.records.batch import build_batch_from_values

pytestmark = pytest.mark.slow

BATCHES = 100_000
BROKER = 100
WAIT_S = 120


class _Cluster(LocalCluster):
    def command(self, i: int, listen_fd: int) -> list[str]:
        role = "broker" if i == BROKER else "controller"
        return [sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd),
                "--process-roles", role, "--election-timeout-ms", "300", "--fetch-timeout-ms", "600",
                "--request-timeout-ms", "400", "--fetch-max-wait-ms", "200", "--session-timeout-ms", "3600000"]


def test_an_empty_controller_and_a_new_broker_catch_up_across_100000_batches(tmp_path):
    values = workload.image_values(workload.WorkloadShape.scaled(BATCHES))[:BATCHES]
    assert len(values) == BATCHES
    data = b"".join(build_batch_from_values([v], base_offset=i, partition_leader_epoch=1) for i, v in enumerate(values))
    cluster = _Cluster(str(tmp_path), 3, observers=(BROKER,))
    try:
        for i in cluster.socks:
            format_dir(cluster.dir_of(i), i)
        for i in (1, 2):
            assert seed_log(cluster.dir_of(i), data) == len(values)
        cluster.start(1)
        cluster.start(2)

        async def scenario():
            client = RaftClient(cluster.voters)
            try:
                async def committed():
                    dq = await client.describe_quorum()
                    return dq if dq.high_watermark > len(values) else None

                dq = await wait_until(committed, WAIT_S, "controllers 1 and 2 commit the seeded log")
                target = dq.high_watermark
                cluster.start(3)
                cluster.start(BROKER)

                async def caught_up():
                    dq = await client.describe_quorum()
                    ends = {r.replica_id: r.log_end_offset for r in (*dq.voters, *dq.observers)}
                    return ends.get(3, -1) >= target and ends.get(BROKER, -1) >= target

                await wait_until(caught_up, WAIT_S, f"node 3 and broker {BROKER} at offset {target}")

                async def answers_there():  # the broker's image, not only its log
                    return await admin.image_offset(BROKER) >= target - 1

                admin = Admin(cluster)
                try:
                    await wait_until(answers_there, WAIT_S, f"broker {BROKER}'s image at offset {target - 1}")
                finally:
                    await admin.close()
            finally:
                await client.close()

        asyncio.run(scenario())
        for i in (3, BROKER):
            assert "InvalidAppendError" not in cluster.stderr_of(i)
    finally:
        cluster.close()
