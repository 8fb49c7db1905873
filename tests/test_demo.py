"""`kraftlog demo` through the real CLI: the tour (3 controllers + 2 brokers, or one combined node)
runs to "demo: ok" with its table, leaves data the tools read, and never leaves a node process
behind (normal end, SIGINT, or the demo SIGKILLed).

Expected contents come from outside the demo: the controllers' first segments are read with
kafka-python's record-batch reader (CRC-checked by it) and must hold a TopicRecord for every topic
of engine.image.workload's shape; partition counts come from the workload's definition.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from kafka.record.memory_records import MemoryRecords

from kraftlog.engine.cli.demo_parts import datadir
from kraftlog.engine.cli.demo_parts.cluster import METADATA_LOG
from kraftlog.engine.cli.demo_parts.errors import DataDirError
from kraftlog.engine.image import workload
from kraftlog.engine.records import metadata as codec

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "kraftlog.engine.cli.main"]
PARTITIONS = 5000
PROBE_PARTITIONS = 1  # the topic the new active controller creates after the failover
NODES = 5  # 3 controllers + 2 brokers
SUMMARY_ROWS = ("cluster up", "writes/s", "failover", "fence", "unfence", "broker restart", "replay", "lookup",
                "snapshot write", "snapshot load", "checkpoint", "lazy lookup")
SINGLE_NODE_ROWS = ("cluster up", "writes/s", "broker restart", "replay", "snapshot write")
STOP_BOUND_S = 5.0  # from SIGINT to the demo's exit, nodes included
LEADER_MARKER = "LeaderId:"  # first printed once the quorum has elected a leader


def run_cli(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout_s)


def processes_of(data_dir: str) -> list[psutil.Process]:
    """Every live raft node process of the run using ``data_dir`` (a node's command line names
    its directory under it and its --node-id)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = p.info["cmdline"] or []
        if p.info["status"] != psutil.STATUS_ZOMBIE and "--node-id" in cmd and any(data_dir in a for a in cmd):
            found.append(p)
    return found


def wait_no_processes(data_dir: str, timeout_s: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while True:
        left = processes_of(data_dir)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def committed_values(log_path: Path) -> list[bytes]:
    """Values of every record in non-control batches, read by kafka-python (not our code)."""
    records = MemoryRecords(log_path.read_bytes())
    out = []
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        assert batch.validate_crc(), f"{log_path}: bad CRC in the batch at offset {batch.base_offset}"
        if not batch.is_control_batch:
            out.extend(r.value for r in batch)
    return out


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """One quiet run of the demo at 5,000 partitions; (data dir, completed process)."""
    data = str(tmp_path_factory.mktemp("demo") / "data")
    proc = run_cli("demo", "--partitions", str(PARTITIONS), "--quiet", "--dir", data)
    yield data, proc
    for p in processes_of(data):  # never leave a node behind, even when an assertion failed
        p.kill()


def _rows_present(stdout: str, names) -> None:
    for name in names:
        match = re.search(rf"^  {re.escape(name)}\s+([\d,.]+) (s|ms|us)?\s", stdout, re.MULTILINE)
        assert match, f"row {name!r} missing in:\n{stdout}"
        assert float(match.group(1).replace(",", "")) > 0, match.group(0)


def test_demo_succeeds_with_the_table_of_timings(demo_run):
    """Exit 0, only the final table on stdout with --quiet, every row with a positive number."""
    data, proc = demo_run
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    assert lines[-1] == "demo: ok"
    assert not any(line.startswith("[") for line in lines), "narration printed despite --quiet"
    _rows_present(proc.stdout, SUMMARY_ROWS)
    assert "\x1b[" not in proc.stdout + proc.stderr  # clean when piped: no terminal codes


def _topic_names_in(log_path: Path) -> set[str]:
    """Names of every TopicRecord in a segment, its batches read by kafka-python (not our code)."""
    topic_key = codec.RECORD_TYPES["TopicRecord"].api_key
    return {codec.decode_record(v).data["Name"] for v in committed_values(log_path) if v[1] == topic_key}


def test_demo_leaves_logs_snapshot_store_and_checkpoint(demo_run):
    """Every controller's log holds a TopicRecord for each workload topic and the probe topic (read
    by kafka-python) and records two leader epochs (the failover); every node directory (brokers
    too) has its metadata log and its LMDB snapshot store; an LMDB store and a .checkpoint for the
    tools; no process left."""
    data, proc = demo_run
    assert proc.returncode == 0, proc.stderr
    shape = workload.WorkloadShape.scaled(PARTITIONS)
    expected = {workload.topic_name(t) for t in range(shape.topics)} | {"demo-failover-probe"}
    for i in (1, 2, 3):
        log_dir = Path(data, f"node-{i}", METADATA_LOG)
        assert _topic_names_in(log_dir / "00000000000000000000.log") == expected, f"node {i}"
        epochs = (log_dir / "leader-epoch-checkpoint").read_text().split("\n")
        assert int(epochs[1]) >= 2, f"node {i}: one leader epoch only, no failover recorded: {epochs}"
    for i in range(1, NODES + 1):
        assert (Path(data, f"node-{i}", METADATA_LOG) / "quorum-state").exists(), i
        assert (Path(data, f"node-{i}", "meta.properties")).exists(), i
    assert (Path(data) / "snapshot-store" / "data.mdb").stat().st_size > 0
    checkpoints = list((Path(data) / "checkpoints").glob("*.checkpoint"))
    assert len(checkpoints) == 1 and re.fullmatch(r"\d{20}-\d{10}\.checkpoint", checkpoints[0].name)
    assert processes_of(data) == []


def test_tools_read_what_the_demo_leaves(demo_run):
    """`log verify` passes on every node's metadata log; `image show` of a controller's and a
    broker's directory and of the checkpoint give the workload's partitions plus the probe's."""
    data, proc = demo_run
    assert proc.returncode == 0, proc.stderr
    partitions = f"partitions: {PARTITIONS + PROBE_PARTITIONS:,}"
    for i in range(1, NODES + 1):
        verify = run_cli("log", "verify", os.path.join(data, f"node-{i}", METADATA_LOG))
        assert verify.returncode == 0 and "OK:" in verify.stdout, verify.stdout + verify.stderr
    checkpoint = str(next((Path(data) / "checkpoints").glob("*.checkpoint")))
    for source in (os.path.join(data, "node-2", METADATA_LOG), os.path.join(data, "node-5", METADATA_LOG), checkpoint):
        show = run_cli("image", "show", source)
        assert show.returncode == 0, show.stderr
        assert partitions in show.stdout, show.stdout


def test_single_node_demo(tmp_path):
    """--single-node: one combined controller+broker; the failover and fencing steps are skipped,
    the others run; the tools read its directory."""
    data = str(tmp_path / "single")
    proc = run_cli("demo", "--single-node", "--partitions", "2000", "--quiet", "--dir", data)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout.splitlines()[-1] == "demo: ok"
    _rows_present(proc.stdout, SINGLE_NODE_ROWS)
    assert not re.search(r"^  (failover|fence) ", proc.stdout, re.MULTILINE)
    assert sorted(p.name for p in Path(data).iterdir() if p.name.startswith("node-")) == ["node-1"]
    show = run_cli("image", "show", os.path.join(data, "node-1", METADATA_LOG))
    assert show.returncode == 0 and "partitions: 2,000" in show.stdout, show.stdout + show.stderr
    assert processes_of(data) == []


def _start_demo(data: str, partitions: int) -> tuple[subprocess.Popen, list[str]]:
    """A narrated demo, read until the quorum has a leader; (process, lines read so far)."""
    proc = subprocess.Popen([*CLI, "demo", "--partitions", str(partitions), "--dir", data],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.strip().startswith(LEADER_MARKER):
            return proc, lines
    proc.kill()
    raise AssertionError(f"no {LEADER_MARKER} line: {''.join(lines)} {proc.stderr.read()}")


def test_sigint_stops_the_demo_and_every_node(tmp_path):
    """SIGINT once the quorum is up: exit 130 within a few seconds, one stderr line, no node left."""
    data = str(tmp_path / "data")
    proc, lines = _start_demo(data, 100_000)
    try:
        pids = [int(m.group(1)) for m in re.finditer(r"pid (\d+)", "".join(lines))]
        assert len(pids) == NODES and all(psutil.pid_exists(p) for p in pids)
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(STOP_BOUND_S + 5)
        elapsed = time.monotonic() - start
        stderr = proc.stderr.read()
        assert code == 130, (code, stderr)
        assert elapsed < STOP_BOUND_S, f"took {elapsed:.1f} s to stop"
        assert stderr.strip().splitlines()[-1].startswith("kraftlog demo: interrupted by SIGINT"), stderr
        assert "Traceback" not in stderr
        assert wait_no_processes(data, 1.0) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in processes_of(data):
            p.kill()


def test_nodes_die_with_a_sigkilled_demo(tmp_path):
    """Even SIGKILL of the demo (no handler can run) leaves no node: they die with their parent."""
    data = str(tmp_path / "data")
    proc, _ = _start_demo(data, 100_000)
    try:
        running = processes_of(data)
        assert len(running) == NODES, [p.info["cmdline"] for p in running]
        proc.kill()
        proc.wait(10)
        left = wait_no_processes(data, STOP_BOUND_S)
        assert left == [], [p.info["cmdline"] for p in left]
    finally:
        for p in processes_of(data):
            p.kill()


def test_refuses_a_directory_it_did_not_write(tmp_path):
    """A non-empty --dir without the demo's marker: one stderr line naming --force, exit 1, nothing
    written or removed, no process started."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "precious.txt").write_text("keep me")
    proc = run_cli("demo", "--partitions", "100", "--dir", str(data), timeout_s=30)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "--force" in proc.stderr and "precious.txt" in proc.stderr
    assert sorted(os.listdir(data)) == ["precious.txt"]


def test_data_dir_rules(tmp_path):
    """An earlier demo's directory is reused (its entries replaced); someone else's is refused
    unless forced, and forcing replaces only the demo's own entries; --clean removes them all."""
    ids = (1, 2, 3)
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / datadir.MARKER).write_text("")
    (earlier / "node-1").mkdir()
    (earlier / "node-1" / "old").write_text("x")
    note = datadir.prepare(str(earlier), ids, force=False)
    assert note is not None and "node-1" in note
    assert sorted(os.listdir(earlier)) == [datadir.MARKER]

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "node-2").mkdir()
    (foreign / "mine.txt").write_text("y")
    with pytest.raises(DataDirError, match="--force"):
        datadir.prepare(str(foreign), ids, force=False)
    assert sorted(os.listdir(foreign)) == ["mine.txt", "node-2"]
    datadir.prepare(str(foreign), ids, force=True)
    assert sorted(os.listdir(foreign)) == [datadir.MARKER, "mine.txt"]
    datadir.clean(str(foreign), ids)
    assert sorted(os.listdir(foreign)) == ["mine.txt"]
    datadir.clean(str(earlier), ids)
    assert not earlier.exists()

    a_file = tmp_path / "file"
    a_file.write_text("z")
    with pytest.raises(DataDirError, match="not a directory"):
        datadir.prepare(str(a_file), ids, force=True)


def test_a_node_that_cannot_start_is_named_with_its_last_log_line(tmp_path):
    """A node exiting before READY (here: timeouts the node refuses) raises NodeStartError naming
    the node, its exit code and its last stderr line; nothing is left running."""
    import asyncio

    from kraftlog.engine.cli.demo_parts.cluster import NodeCluster, RaftTimeouts
    from kraftlog.engine.cli.demo_parts.errors import NodeStartError

    bad = RaftTimeouts(request_timeout_ms=100, fetch_max_wait_ms=200)
    cluster = NodeCluster(str(tmp_path), (1,), cluster_id="MkU3OEVBNTcwNTJENDM2Qg", timeouts=bad)
    try:
        with pytest.raises(NodeStartError, match=r"node 1 exited with code 1 before it was ready.*request_timeout_ms"):
            asyncio.run(cluster.start(1))
        assert not cluster.nodes[1].running
    finally:
        cluster.close()
    assert processes_of(str(tmp_path)) == []


def test_no_leader_is_one_clear_error():
    """A quorum that never elects: QuorumError saying so, with the nodes' description."""
    import asyncio

    from kraftlog.engine.cli.demo_parts import quorum
    from kraftlog.engine.cli.demo_parts.errors import QuorumError
    from kraftlog.raft.messages import DescribeQuorumResponse
    from kraftlog.raft.types import Errors

    class NoLeader:
        async def describe_quorum(self):
            return DescribeQuorumResponse(Errors.NONE, Errors.NOT_LEADER_OR_FOLLOWER)

    with pytest.raises(QuorumError, match=r"quorum did not elect a leader within 1 s \(nodes: node 1 running"):
        asyncio.run(quorum.wait_for_leader(NoLeader(), 1.0, lambda: "node 1 running, pid 7"))


def test_quorum_tables_follow_kafka_metadata_quorum():
    """--status and --replication as Kafka's tool computes them: Lag = leader LEO - replica LEO,
    MaxFollowerLag from the furthest-behind voter, MaxFollowerLagTimeMs = leader's last caught up
    minus that voter's, times as "ms ago" against the leader's own entry; leader row first."""
    from kraftlog.engine.cli.demo_parts import quorum
    from kraftlog.raft.messages import DescribeQuorumResponse, ReplicaDescription
    from kraftlog.raft.types import Errors

    dq = DescribeQuorumResponse(Errors.NONE, Errors.NONE, leader_id=2, leader_epoch=5, high_watermark=95, voters=(
        ReplicaDescription(1, 90, 5900, 5000), ReplicaDescription(2, 100, 6000, 6000),
        ReplicaDescription(3, 100, 5990, 5990)), observers=(ReplicaDescription(7, -1, -1, -1),))
    status = dict(line.split(":", 1) for line in quorum.status_lines(dq, "cid"))
    assert {k: v.strip() for k, v in status.items()} == {
        "ClusterId": "cid", "LeaderId": "2", "LeaderEpoch": "5", "HighWatermark": "95", "MaxFollowerLag": "10",
        "MaxFollowerLagTimeMs": "1000", "CurrentVoters": "[1,2,3]", "CurrentObservers": "[7]"}
    assert quorum.replication_rows(dq) == [
        ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"],
        ["2", "100", "0", "0 ms ago", "0 ms ago", "Leader"],
        ["1", "90", "10", "100 ms ago", "1000 ms ago", "Follower"],
        ["3", "100", "0", "10 ms ago", "10 ms ago", "Follower"],
        ["7", "-1", "101", "-1", "-1", "Observer"]]
