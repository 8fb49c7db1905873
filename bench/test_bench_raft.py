"""Micro benchmarks of a real three-voter raft cluster (processes on loopback, fsync on) beside
PySyncObj (data, configuration and the report rows: bench/rows_raft.py): one awaited commit of a
100-byte record, and committed throughput with batching over one second."""

from __future__ import annotations

import asyncio

import pytest

from kraftlog.bench import rows_raft as data
from kraftlog.engine.node.raftnode import RaftClient


@pytest.fixture(scope="module")
def cluster():
    c = data.NodeCluster()
    yield c
    c.close()


@pytest.mark.benchmark(group="raft: one committed 100-byte record, 3 voters")
def test_commit_latency_ours(benchmark, cluster):
    """Each round sends one Produce (acks=-1) and waits for the committed answer."""
    loop = asyncio.new_event_loop()
    client = RaftClient(cluster.voters)
    payload = b"v" * data.PAYLOAD_BYTES
    loop.run_until_complete(client.propose([payload], timeout_ms=20_000))
    try:
        benchmark.pedantic(lambda: loop.run_until_complete(client.propose([payload], timeout_ms=20_000)),
                           rounds=200, warmup_rounds=20)
    finally:
        loop.run_until_complete(client.close())
        loop.close()


@pytest.mark.benchmark(group="raft: committed records in 1 s, 100-byte records, 3 nodes")
def test_throughput_ours(benchmark, cluster):
    """Records committed per second (the round's time is fixed at ~1 s; see extra_info)."""
    rate = benchmark.pedantic(lambda: asyncio.run(data._throughput(cluster.voters, 1.0))[0], rounds=1, iterations=1)
    benchmark.extra_info["records_per_s"] = rate
    assert rate > 0


@pytest.mark.benchmark(group="raft: committed records in 1 s, 100-byte records, 3 nodes")
def test_throughput_pysyncobj(benchmark):
    rate = benchmark.pedantic(lambda: data.peer_throughput(True), rounds=1, iterations=1)
    benchmark.extra_info["records_per_s"] = rate
    assert rate > 0
