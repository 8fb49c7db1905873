"""Report rows: a real three-voter raft cluster (three `python -m kraftlog.engine.node.raftnode`
processes on loopback, engine log with fsync on every flush the protocol asks for) beside
PySyncObj (three processes on loopback, same payload size).

    raft.commit_p50_ms / raft.commit_p99_ms   one client, one 100-byte record per proposal
                        (Produce acks=-1 over TCP), each awaited before the next: the time from
                        sending to the committed answer. Goal p50 <= 1 ms, p99 <= 5 ms. The commit
                        path holds two fsyncs (leader and a follower, overlapped: see
                        raft/aio/driver.py), so the device's fsync time is measured in the same
                        run and reported beside (``fsync_p50_ms``).
    raft.throughput     committed records/s with batching: one client keeps 16 Produce requests of
                        1000 x 100-byte records in flight; the leader's driver appends what arrived
                        together as one batch. Peer: PySyncObj, 3 nodes, one replicated call per
                        100-byte record, up to 2000 in flight. Goal >= 10x the peer. Also MB/s.
    raft.failover_ratio after SIGKILL of the leader (while a client proposes one record at a time):
                        time to the first new commit over election_timeout_ms. Goal <= 1.5.
                        Configuration: election_timeout_ms 500, fetch_timeout_ms 500 (a follower
                        gives up on a silent leader after one election timeout; Kafka's default is
                        2x), fetch_max_wait_ms 150, election_backoff_max_ms 100. The dead leader's
                        port refuses connections, as a crashed process's does (this process holds
                        a copy of each node's listening socket: kept, it would make each of the
                        client's attempts there wait its 300 ms timeout, and the row would time
                        the client, ~600 of ~610 ms). ``samples_ms``: every failover's time.

CHARTS["raft.commit_latency"]: the commit-latency distribution as [percentile, ms].
Ports are ephemeral: this process binds port 0 and hands each node its listening socket
(PySyncObj takes addresses only, so its ports come from binding 0 and closing).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from kraftlog.bench.timing import percentile, row
from kraftlog.engine.node.localcluster import LocalCluster

PAYLOAD_BYTES = 100
BATCH_RECORDS = 1000
WINDOW = 16
PEER_INFLIGHT = 2000
FAILOVER_ELECTION_TIMEOUT_MS = 500
_CACHE: dict = {}


class NodeCluster(LocalCluster):
    """Three raftnode processes, started at once; ``close()`` kills whatever still runs and removes
    the data (see kraftlog.engine.node.localcluster)."""

    def __init__(self, *extra_args: str, n: int = 3):
        super().__init__(tempfile.mkdtemp(prefix="kraftlog-raft-bench-"), n, backlog=256)
        self.extra = list(extra_args)
        self.start_all()

    def command(self, i: int, listen_fd: int) -> list[str]:
        return [sys.executable, "-m", "kraftlog.engine.node.raftnode", "--node-id", str(i), "--voters",
                self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd), "--log-level", "WARNING",
                *self.extra]

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.directory, ignore_errors=True)


def fsync_p50_ms(samples: int = 50) -> float:
    """The device's fsync time for a small append, where the clusters keep their data."""
    d = tempfile.mkdtemp(prefix="kraftlog-fsync-")
    path = os.path.join(d, "probe")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY)
    out = []
    try:
        for _ in range(samples):
            os.write(fd, b"x" * 200)
            t = time.perf_counter()
            os.fsync(fd)
            out.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        shutil.rmtree(d, ignore_errors=True)
    return statistics.median(out) * 1000


# ---- ours -------------------------------------------------------------------------------------


async def _latencies(voters, count: int, warmup: int) -> list[float]:
    from kraftlog.engine.node.raftnode import RaftClient

    client = RaftClient(voters)
    payload = b"v" * PAYLOAD_BYTES
    try:
        for _ in range(warmup):
            await client.propose([payload], timeout_ms=20_000)
        out = []
        for _ in range(count):
            t = time.perf_counter()
            await client.propose([payload], timeout_ms=20_000)
            out.append((time.perf_counter() - t) * 1000)
        return out
    finally:
        await client.close()


def commit_latencies(quick: bool) -> list[float]:
    """Sorted commit latencies in ms (cached: both latency rows and the chart share one run)."""
    key = ("lat", quick)
    if key not in _CACHE:
        cluster = NodeCluster()
        try:
            _CACHE[key] = sorted(asyncio.run(_latencies(cluster.voters, 300 if quick else 2000, 30)))
        finally:
            cluster.close()
    return _CACHE[key]


async def _throughput(voters, seconds: float) -> tuple[float, int]:
    from kraftlog.engine.node.raftnode import RaftClient
    from kraftlog.raft import wire

    client = RaftClient(voters)
    try:
        await client.propose([b"warm"], timeout_ms=20_000)
        leader = client.leader_id
        body = wire.produce_request([b"t" * PAYLOAD_BYTES] * BATCH_RECORDS, timeout_ms=20_000)
        await client.produce_pipelined(leader, [body] * WINDOW, window=WINDOW)  # warm up
        rounds, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            await client.produce_pipelined(leader, [body] * (WINDOW * 4), window=WINDOW)
            rounds += WINDOW * 4
        elapsed = time.perf_counter() - start
        return rounds * BATCH_RECORDS / elapsed, rounds * BATCH_RECORDS
    finally:
        await client.close()


def ours_throughput(quick: bool) -> float:
    cluster = NodeCluster("--max-batch-records", "20000", "--max-batch-bytes", str(4 << 20))
    try:
        rate, _ = asyncio.run(_throughput(cluster.voters, 2.0 if quick else 6.0))
        return rate
    finally:
        cluster.close()


# ---- the peer: PySyncObj ------------------------------------------------------------------------

_PEER = textwrap.dedent('''
    import sys, time
    from pysyncobj import SyncObj, SyncObjConf, replicated
    me, others, seconds, payload_bytes, inflight = sys.argv[1], sys.argv[2].split(","), float(sys.argv[3]), \\
        int(sys.argv[4]), int(sys.argv[5])
    class Counter(SyncObj):
        def __init__(self):
            super().__init__(me, others, SyncObjConf(dynamicMembershipChange=False))
            self.n = 0
        @replicated
        def add(self, value):
            self.n += 1
    obj = Counter()
    if not sys.argv[6:]:
        time.sleep(3600)
    while obj._getLeader() is None:
        time.sleep(0.01)
    payload = "v" * payload_bytes
    done = [0]
    def cb(result, error):
        done[0] += 1
    sent = 0
    for _ in range(200):
        obj.add(payload, callback=cb); sent += 1
    while done[0] < sent:
        time.sleep(0.001)
    start, base = time.perf_counter(), done[0]
    while time.perf_counter() - start < seconds:
        while sent - done[0] < inflight:
            obj.add(payload, callback=cb); sent += 1
        time.sleep(0.0005)
    elapsed = time.perf_counter() - start
    print((done[0] - base) / elapsed, flush=True)
''')


def free_ports(n: int) -> list[int]:
    """``n`` loopback ports free a moment ago (bound to 0, then closed), for peers that cannot
    inherit a listening socket; a peer that loses the race to another process fails to start."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def peer_throughput(quick: bool) -> float:
    """PySyncObj committed calls/s (node 1 drives; no fsync: PySyncObj keeps its journal in memory)."""
    addrs = [f"127.0.0.1:{p}" for p in free_ports(3)]
    seconds = 2.0 if quick else 6.0
    procs = []
    try:
        for i, me in enumerate(addrs):
            others = ",".join(a for a in addrs if a != me)
            args = [sys.executable, "-c", _PEER, me, others, str(seconds), str(PAYLOAD_BYTES), str(PEER_INFLIGHT)]
            if i == 0:
                args.append("drive")
            procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
        out, _ = procs[0].communicate(timeout=seconds + 60)
        return float(out.decode().strip().splitlines()[-1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)


# ---- failover ------------------------------------------------------------------------------------


async def _failover_once(cluster: NodeCluster) -> float:
    from kraftlog.engine.node.raftnode import RaftClient

    client = RaftClient(cluster.voters, attempt_timeout_ms=300, retry_backoff_ms=5)
    try:
        for _ in range(20):
            await client.propose([b"before"], timeout_ms=20_000)
        dq = await client.describe_quorum()
        cluster.kill(dq.leader_id)
        killed = time.perf_counter()
        cluster.release_port(dq.leader_id)
        client.leader_id = -1
        await client.propose([b"after"], timeout_ms=20_000)
        return time.perf_counter() - killed
    finally:
        await client.close()


def failover_seconds(quick: bool) -> list[float]:
    e = FAILOVER_ELECTION_TIMEOUT_MS
    out = []
    for _ in range(1 if quick else 5):
        cluster = NodeCluster("--election-timeout-ms", str(e), "--fetch-timeout-ms", str(e),
                              "--fetch-max-wait-ms", "150", "--request-timeout-ms", "400",
                              "--election-backoff-max-ms", "100")
        try:
            out.append(asyncio.run(_failover_once(cluster)))
        finally:
            cluster.close()
    return out


# ---- rows -----------------------------------------------------------------------------------------


def commit_p50(quick: bool) -> dict:
    lat = commit_latencies(quick)
    p50 = percentile(lat, 50)
    return row("raft.commit_p50_ms", "ms", p50, percentile(lat, 75) - percentile(lat, 25), peer=None,
               peer_value=None, higher_is_better=False, goal="<= 1 ms", met=p50 <= 1.0,
               fsync_p50_ms=fsync_p50_ms(), samples=len(lat),
               notes="3 voters, fsync on; the commit needs the leader's and one follower's fsync (overlapped)")


def commit_p99(quick: bool) -> dict:
    lat = commit_latencies(quick)
    p99 = percentile(lat, 99)
    return row("raft.commit_p99_ms", "ms", p99, percentile(lat, 99.9) - percentile(lat, 90), peer=None,
               peer_value=None, higher_is_better=False, goal="<= 5 ms", met=p99 <= 5.0,
               fsync_p50_ms=fsync_p50_ms(), samples=len(lat))


def throughput(quick: bool) -> dict:
    ours = ours_throughput(quick)
    peer = peer_throughput(quick)
    return row("raft.throughput", "records/s", ours, 0.0, peer="pysyncobj", peer_value=peer,
               higher_is_better=True, goal=">= 10x pysyncobj", met=ours >= 10 * peer,
               mb_per_s=ours * PAYLOAD_BYTES / 1e6, peer_mb_per_s=peer * PAYLOAD_BYTES / 1e6,
               payload_bytes=PAYLOAD_BYTES,
               notes=f"ours: fsync on, {BATCH_RECORDS} records per Produce, {WINDOW} in flight; "
                     f"pysyncobj: in-memory journal, {PEER_INFLIGHT} calls in flight")


def failover_ratio(quick: bool) -> dict:
    times = failover_seconds(quick)
    median_s = statistics.median(times)
    ratio = median_s * 1000 / FAILOVER_ELECTION_TIMEOUT_MS
    spread = (max(times) - min(times)) * 1000 / FAILOVER_ELECTION_TIMEOUT_MS
    return row("raft.failover_ratio", "x election timeout", ratio, spread, peer=None, peer_value=None,
               higher_is_better=False, goal="<= 1.5", met=ratio <= 1.5, failover_ms=median_s * 1000,
               runs=len(times), election_timeout_ms=FAILOVER_ELECTION_TIMEOUT_MS,
               samples_ms=[round(t * 1000) for t in times],
               notes="fetch_timeout_ms = election_timeout_ms = 500, fetch_max_wait_ms 150; the dead leader's "
                     "port refuses connections")


def latency_chart(quick: bool) -> dict:
    lat = commit_latencies(quick)
    points = [0, 10, 25, 50, 75, 90, 95, 99, 99.9, 100]
    return {"title": "raft commit latency, 3 voters, fsync on (one writer)", "xlabel": "percentile",
            "ylabel": "ms", "series": {"kraftlog": [[p, percentile(lat, p)] for p in points]}, "log_x": False}


ROWS = {
    "raft.commit_p50_ms": commit_p50,
    "raft.commit_p99_ms": commit_p99,
    "raft.throughput": throughput,
    "raft.failover_ratio": failover_ratio,
}
CHARTS = {"raft.commit_latency": latency_chart}
