"""Micro benchmarks of node processes on loopback (data, configuration and the report rows:
bench/rows_cluster.py).

Broker restart: a broker holding the reference workload's image (100,000 partitions here; the
report row runs 1M with --full) as its own LMDB snapshot, timed from Popen to the first right
Metadata answer for one named topic; beside it the same restart on a one-topic image (process
start alone). Each round is one restart; the stop before it (a controlled shutdown) is untimed.

CreateTopics: 3 controllers + 3 brokers; one round creates 10 requests x 100 topics (10 partitions,
RF 3) with 4 requests in flight; beside it the same records committed with Produce.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import pytest

from kraftlog.bench import rows_cluster as data

RESTART_PARTITIONS = 100_000
CREATE_REQUESTS = 10


@pytest.fixture(scope="module")
def restart_clusters():
    root = tempfile.mkdtemp(prefix="kraftlog-bench-restart-")
    launcher = data.bytecode_launcher(root)
    clusters = {n: data.RestartCluster(os.path.join(root, str(n)), n, launcher)
                for n in (RESTART_PARTITIONS, data.PEER_PARTITIONS)}
    try:
        for c in clusters.values():
            c.seed()
            c.start_controller()
            c.restart_broker()  # registers the broker and fills the bytecode cache
        yield clusters
    finally:
        for c in clusters.values():
            c.close()
        shutil.rmtree(root, ignore_errors=True)


def _restart(benchmark, cluster: data.RestartCluster) -> None:
    times = []
    benchmark.pedantic(lambda: times.append(cluster.start_broker()), setup=cluster.stop_broker, rounds=5,
                       iterations=1)
    cluster.stop_broker()
    benchmark.extra_info["ready_s_median"] = sorted(t[1] for t in times)[len(times) // 2]
    assert all(total >= ready for total, ready in times)


@pytest.mark.benchmark(group="broker restart: Popen -> right Metadata answer")
def test_restart_broker_100k_partitions(benchmark, restart_clusters):
    """Process start, snapshot load (100k partitions) and the first right answer."""
    _restart(benchmark, restart_clusters[RESTART_PARTITIONS])


@pytest.mark.benchmark(group="broker restart: Popen -> right Metadata answer")
def test_restart_broker_one_topic_peer(benchmark, restart_clusters):
    """The same restart on a one-topic image: what process start alone costs."""
    _restart(benchmark, restart_clusters[data.PEER_PARTITIONS])


@pytest.fixture(scope="module")
def create_session():
    root = tempfile.mkdtemp(prefix="kraftlog-bench-create-")
    cluster = data.QuorumCluster(root)
    loop = asyncio.new_event_loop()
    session = data.CreateSession(cluster)
    try:
        cluster.start_all()
        loop.run_until_complete(session.open())
        yield loop, session
        loop.run_until_complete(session.check_brokers())
    finally:
        loop.run_until_complete(session.close())
        loop.close()
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


def _rates(benchmark, loop, send, prefix: str, names) -> None:
    """``send`` (a session coroutine function) over fresh topic names, 3 rounds after a warm-up;
    the median topics/s goes into the report."""
    rates = []
    benchmark.pedantic(lambda: rates.append(loop.run_until_complete(send(names(prefix, CREATE_REQUESTS)))),
                       rounds=3, warmup_rounds=1, iterations=1)
    benchmark.extra_info["topics_per_s"] = sorted(rates)[len(rates) // 2]
    assert min(rates) > 0


@pytest.mark.benchmark(group="1,000 topics (10 partitions, RF 3) through 3 controllers")
def test_create_topics_ours(benchmark, create_session):
    """CreateTopics at the active controller, 100 topics per request, 4 in flight."""
    loop, session = create_session
    _rates(benchmark, loop, session.create, "b", session.names)


@pytest.mark.benchmark(group="1,000 topics (10 partitions, RF 3) through 3 controllers")
def test_create_topics_produce_peer(benchmark, create_session):
    """The same records as one Produce per request (a bare Raft commit), 4 in flight."""
    loop, session = create_session
    _rates(benchmark, loop, session.produce, "p", session.names)
