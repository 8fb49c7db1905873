"""Proves metadata.version downgrade/upgrade (KIP-1155) on real processes: 3 controllers + 2
brokers at 4.1-IV0 whose registrations carry log directory ids, driven by the `kraftlog features` CLI.

- describe shows metadata.version finalized at 4.1-IV0 with the supported range;
- with ELR on (KIP-966) and a broker fenced, partitions carry eligible leader replicas (until the
  broker is back: it rejoins the ISRs and the ELR empties, so it stays stopped for those checks);
- a SAFE downgrade to 3.7-IV0 is refused naming the lost fields (registrations' log dirs, the
  partitions' ELR), and nothing changes; metadata.version alone cannot go below ELR's level;
- a downgrade below 3.7-IV0 is refused;
- an UNSAFE downgrade to 3.7-IV0 proceeds: every node (controllers and brokers) writes a snapshot
  at 3.7-IV0 at once and reloads from it; each node's image then equals the image written at
  3.7-IV0 (what an older release would read);
- a broker restarted as an older build (no 4.1-IV0 support) makes the next downgrade fail naming
  that node, and an upgrade to 4.1-IV0 fail naming it too; back on the new build, the upgrade to
  4.1-IV0 works.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys

import pytest

from kraftlog.engine.cli.tools import imageload
from kraftlog.engine.image import versions
from tests.image_summary import summary
from tests.test_node_brokers import CLUSTER_ID, Conns, _all_live, _create, _until

pytestmark = pytest.mark.slow

BROKERS = (101, 102)


def _kraftlog(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraftlog.engine.cli.main", *args], capture_output=True,
                          text=True, timeout=60)


class FeatureCluster:
    """3 controllers + 2 brokers; a broker may be (re)started as an older build."""

    def __init__(self, directory: str):
        from kraftlog.engine.node.localcluster import LocalCluster

        outer = self

        class _Cluster(LocalCluster):
            def command(self, i: int, listen_fd: int) -> list[str]:
                extra = ["--process-roles", "broker"] if i in BROKERS else []
                if i in outer.old_build:
                    extra += ["--max-metadata-version", "4.0-IV3"]
                return [sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                        "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd",
                        str(listen_fd), "--election-timeout-ms", "300", "--fetch-timeout-ms", "600",
                        "--request-timeout-ms", "400", "--fetch-max-wait-ms", "200", "--session-timeout-ms", "3000",
                        "--heartbeat-interval-ms", "200", *extra]

        self.old_build: set[int] = set()
        self.c = _Cluster(directory, 3, observers=BROKERS)

    def bootstrap(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.c.voters.values())


@pytest.fixture
def fc(tmp_path):
    from kraftlog.engine.cli import main as cli

    f = FeatureCluster(str(tmp_path))
    try:
        for i in f.c.socks:
            assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", str(i),
                             "--dir", f.c.dir_of(i)]) == 0
        f.c.start_all()
        yield f
    finally:
        f.c.close()


def _restart(f: FeatureCluster, i: int) -> None:
    f.c.procs[i].send_signal(signal.SIGTERM)
    assert f.c.procs[i].wait(20) == 0, f.c.stderr_of(i)[-3000:]
    f.c.procs.pop(i).err_file.close()
    f.c.start(i)


def test_downgrade_safe_unsafe_floor_old_node_and_upgrade_back(fc):
    """The KIP-1155 scenario of the module docstring, through the CLI."""
    boot = fc.bootstrap()

    async def setup():
        conns = Conns(fc.c)
        try:
            await _until(lambda: _all_live(conns, 101, set(BROKERS)), 20, "two live brokers")
            await _create(conns, [f"d{n}" for n in range(20)], 4, 2)
        finally:
            await conns.close()

    asyncio.run(setup())
    out = _kraftlog("features", "describe", "--bootstrap-controller", boot)
    assert out.returncode == 0, out.stderr
    mv_line = next(line for line in out.stdout.splitlines() if line.startswith("Feature: metadata.version"))
    assert "FinalizedVersionLevel: 4.1-IV0" in mv_line and "SupportedMaxVersion: 4.1-IV0" in mv_line

    # ELR (KIP-966) on, topics with min.insync.replicas=2, and broker 102 stopped and fenced: the
    # partitions' ISR shrinks below 2 and 102 becomes an eligible leader replica (ELR values) until
    # it comes back and rejoins the ISRs, after the SAFE downgrade check below
    out = _kraftlog("features", "upgrade", "--bootstrap-controller", boot, "--feature",
                    "eligible.leader.replicas.version=1")
    assert out.returncode == 0, (out.stdout, out.stderr)
    asyncio.run(_elr_partitions(fc))

    # ELR still on: metadata.version cannot go below ELR's 4.0-IV1, even unsafe
    out = _kraftlog("features", "downgrade", "--bootstrap-controller", boot, "--metadata-version", "3.7-IV0",
                    "--unsafe")
    assert out.returncode == 1 and "eligible.leader.replicas.version" in out.stdout, (out.stdout, out.stderr)
    out = _kraftlog("features", "disable", "--bootstrap-controller", boot, "--feature", "eligible.leader.replicas.version")
    assert out.returncode == 0, (out.stdout, out.stderr)

    # SAFE downgrade: refused, naming the fields 3.7-IV0 cannot hold; nothing changes
    out = _kraftlog("features", "downgrade", "--bootstrap-controller", boot, "--metadata-version", "3.7-IV0")
    assert out.returncode == 1
    # the brokers registered their log directory ids (RegisterBrokerRecord v3, 3.7-IV2) and the
    # partitions hold ELR (PartitionRecord v2, 4.0-IV1): 3.7-IV0 drops both
    assert "would lose metadata" in out.stdout and "RegisterBrokerRecord.LogDirs" in out.stdout, out.stdout
    assert "PartitionRecord.EligibleLeaderReplicas" in out.stdout, out.stdout
    assert "1 out of 1 operation(s) failed." in out.stderr, out.stderr
    # below the floor: refused even when unsafe
    out = _kraftlog("features", "downgrade", "--bootstrap-controller", boot, "--metadata-version", "3.6-IV2",
                    "--unsafe")
    assert out.returncode == 1 and "3.7-IV0" in out.stdout, (out.stdout, out.stderr)
    assert "FinalizedVersionLevel: 4.1-IV0" in _kraftlog("features", "describe", "--bootstrap-controller", boot).stdout
    os.kill(fc.c.procs[102].pid, signal.SIGCONT)
    asyncio.run(_wait_live(fc))
    # live (heartbeating) is not caught up: a node still behind when the downgrade's snapshots move
    # the log start is sent the leader's snapshot instead of replaying the downgrade itself
    asyncio.run(_wait_caught_up(fc))

    # UNSAFE downgrade: every node snapshots at 3.7-IV0 at once and reloads from it
    out = _kraftlog("features", "downgrade", "--bootstrap-controller", boot, "--metadata-version", "3.7-IV0",
                    "--unsafe")
    assert out.returncode == 0, (out.stdout, out.stderr)
    for i in fc.c.procs:
        try:
            asyncio.run(_until(lambda i=i: asyncio.sleep(0, "metadata.version lowered from 4.1-IV0 to 3.7-IV0"
                                                           in fc.c.stderr_of(i)), 60, f"node {i} reloaded at 3.7-IV0"))
        except AssertionError as exc:  # the node's own account of what it did instead
            raise AssertionError(f"{exc}; its log ends:\n{fc.c.stderr_of(i)[-4000:]}") from None
        assert re.search(r"downgrade to 3\.7-IV0 dropped RegisterBrokerRecord broker 10[12]: LogDirs",
                         fc.c.stderr_of(i)), fc.c.stderr_of(i)[-3000:]

    # an older build of broker 102 (no 4.1-IV0) registers at 3.7-IV0; then an upgrade to 4.1-IV0
    # and a downgrade from 3.9-IV0 are both refused naming it
    fc.old_build.add(102)
    _restart(fc, 102)
    asyncio.run(_wait_live(fc))
    out = _kraftlog("features", "upgrade", "--bootstrap-controller", boot, "--metadata-version", "4.1-IV0")
    assert out.returncode == 1 and "102" in out.stdout, (out.stdout, out.stderr)
    out = _kraftlog("features", "upgrade", "--bootstrap-controller", boot, "--metadata-version", "3.9-IV0")
    assert out.returncode == 0, (out.stdout, out.stderr)
    out = _kraftlog("features", "downgrade", "--bootstrap-controller", boot, "--metadata-version", "3.7-IV0",
                    "--unsafe")
    assert out.returncode == 1 and "102" in out.stdout and "4.1-IV0" in out.stdout, (out.stdout, out.stderr)

    # back on the new build: the upgrade to 4.1-IV0 works
    fc.old_build.clear()
    _restart(fc, 102)
    asyncio.run(_wait_live(fc))
    out = _kraftlog("features", "upgrade", "--bootstrap-controller", boot, "--metadata-version", "4.1-IV0")
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert "FinalizedVersionLevel: 4.1-IV0" in _kraftlog("features", "describe", "--bootstrap-controller", boot).stdout

    # a controller registers once per incarnation: no rewrite loop while nothing changes
    for i in (1, 2, 3):
        assert fc.c.stderr_of(i).count("registered controller") <= 3, fc.c.stderr_of(i)[-3000:]
    for i in (*BROKERS, 1, 2, 3):
        fc.c.procs[i].send_signal(signal.SIGTERM)
        assert fc.c.procs[i].wait(20) == 0, fc.c.stderr_of(i)[-3000:]

    # each node's image at the downgrade is the image written at 3.7-IV0: the level is 3.7-IV0,
    # every topic and partition is there, the Directories the level cannot hold are gone (empty =
    # MIGRATING, Kafka's default), and controllers and brokers hold the very same image
    images = {i: _downgrade_snapshot_image(fc, i) for i in (1, 2, 3, *BROKERS)}
    for i, image in images.items():
        assert image.features.metadata_version == versions.LEVELS["3.7-IV0"], i
        parts = [p for name in image.topics.topic_names() for p in image.topics.partitions_of(name)]
        assert len(parts) == 90 and all(p.directories == () for p in parts), i
        assert all(p.eligible_leader_replicas == () and p.last_known_elr == () for p in parts), i
        assert image.features.level("eligible.leader.replicas.version") == 0, i
        assert len(image.cluster.brokers) == 2 and all(not b.log_dirs for b in image.cluster.brokers.values()), i
        # every controller registered itself (RegisterControllerRecord), with its feature ranges
        assert sorted(image.cluster.controllers) == [1, 2, 3], i
        assert all(c.supports("metadata.version", versions.LEVELS["4.1-IV0"])
                   for c in image.cluster.controllers.values()), i
    first = summary(images[1])
    for i in (2, 3, *BROKERS):
        assert summary(images[i]) == first, i


async def _elr_partitions(f: FeatureCluster) -> None:
    """Topics elr0..elr4 (2 partitions, RF 2, min.insync.replicas=2), then broker 102 stopped
    (SIGSTOP, left stopped: the caller resumes it) until the controller fences it (ISR [101] < 2:
    102 moves to the ELR)."""
    from kio.schema.create_topics.v7 import request as ct_req
    from kio.schema.create_topics.v7 import response as ct_resp
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i16, i32

    from tests.test_node_brokers import _ask

    conns = Conns(f.c)
    try:
        req = ct_req.CreateTopicsRequest(topics=tuple(ct_req.CreatableTopic(
            name=f"elr{n}", num_partitions=i32(2), replication_factor=i16(2), assignments=(),
            configs=(ct_req.CreatableTopicConfig(name="min.insync.replicas", value="2"),)) for n in range(5)))

        async def created():
            for i in (1, 2, 3):
                r = await _ask(await conns.get(i), 19, 7, req, ct_resp.CreateTopicsResponse, 10)
                if all(t.error_code == ErrorCode.none for t in r.topics):
                    return True
            return False

        await _until(created, 20, "the ELR topics created")
        os.kill(f.c.procs[102].pid, signal.SIGSTOP)
        await _until(lambda: _all_live(conns, 101, {101}), 20, "broker 102 fenced")
    finally:
        await conns.close()


async def _wait_live(f: FeatureCluster) -> None:
    conns = Conns(f.c)
    try:
        await _until(lambda: _all_live(conns, 101, set(BROKERS)), 20, "both brokers live again")
    finally:
        await conns.close()


async def _wait_caught_up(f: FeatureCluster) -> None:
    """Until every node's metadata log reaches the high watermark the leader had when asked."""
    from kraftlog.engine.node.raftnode import RaftClient

    client = RaftClient(f.c.voters)
    try:
        target = (await client.describe_quorum()).high_watermark

        async def caught_up():
            dq = await client.describe_quorum()
            ends = {r.replica_id: r.log_end_offset for r in (*dq.voters, *dq.observers)}
            return all(ends.get(i, -1) >= target for i in f.c.procs)

        await _until(caught_up, 60, f"every node's log at offset {target}")
    finally:
        await client.close()


def _downgrade_snapshot_image(f: FeatureCluster, i: int):
    """The image of the snapshot node ``i`` wrote when it replayed the downgrade."""
    from kraftlog.engine.snapshot.store import SnapshotStore

    m = re.search(r"lowered from 4\.1-IV0 to 3\.7-IV0 at offset \d+: wrote snapshot (\d+)-(\d+)", f.c.stderr_of(i))
    assert m, f.c.stderr_of(i)[-2000:]
    path = os.path.join(f.c.dir_of(i), "__cluster_metadata-0", imageload.SNAPSHOT_DIRNAME)
    with SnapshotStore(path) as store:
        return store.load_image((int(m.group(1)), int(m.group(2))))
