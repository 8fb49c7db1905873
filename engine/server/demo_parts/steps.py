"""The steps of the tour, in order. Each narrates, measures, checks, and records its summary rows.

1. quorum     three node processes, the elected leader, DescribeQuorum (--status, --replication)
2. workload   Kafka's benchmark shape as metadata records, committed through the leader with
              pipelined Produce requests; every replica's committed bytes hashed and compared; the
              committed records read back (Fetch as replica -1) and compared with what was sent
3. failover   SIGKILL of the leader, time to the first commit by a new leader, churn committed
              while the old leader is down, its restart and catch-up, replicas compared again
4. replay     the leader's log replayed from disk into a MetadataImage; one partition looked up
5. snapshot   the image into the LMDB snapshot store, exported as a Kafka .checkpoint, loaded
              back, and a partition answered by LazySnapshotImage without a full load

Every check that fails raises a DemoError subclass naming what differs.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from dataclasses import dataclass

from kraftlog.engine.server.demo_parts import quorum
from kraftlog.engine.server.demo_parts.cluster import NodeCluster
from kraftlog.engine.server.demo_parts.datadir import CHECKPOINTS, SNAPSHOT_STORE
from kraftlog.engine.server.demo_parts.errors import DemoError, QuorumError, ReplicaMismatchError
from kraftlog.engine.server.demo_parts.narrator import Narrator, megabytes, millis, seconds

STEPS = 6  # the sixth: where the data is, and the tools that read it
RECORDS_PER_PRODUCE = 1000  # records per Produce request (one record batch each)
PRODUCE_WINDOW = 16  # Produce requests in flight at once
PRODUCE_TIMEOUT_MS = 30_000  # per request, as the Produce timeout and the client's patience
REQUESTS_PER_ROUND = 32  # Produce requests per progress update (the window drains between rounds)
ELECTION_WAIT_S = 15.0
FAILOVER_WAIT_S = 15.0
CATCH_UP_WAIT_S = 60.0
REPLICAS_WAIT_S = 30.0
READ_MAX_BYTES = 8 << 20  # per Fetch when reading the committed records back
LOOKUPS_TIMED = 1000  # partition lookups timed (median reported)


@dataclass
class Tour:
    """What the steps share."""

    narrator: Narrator
    cluster: NodeCluster
    data_dir: str
    partitions: int
    churn: int
    shape: object = None  # workload.WorkloadShape
    client: object = None  # RaftClient over every voter
    leader: int = -1
    epoch: int = -1
    high_watermark: int = 0
    removed_topics: int = 0
    image: object = None
    lookup: tuple[str, int] | None = None

    def nodes_text(self) -> str:
        return self.cluster.describe()


# ---- 1. the quorum ------------------------------------------------------------------------------


async def quorum_step(t: Tour) -> None:
    n, c = t.narrator, t.cluster
    n.step(1, STEPS, f"a Raft quorum: {len(c.nodes)} voter processes on 127.0.0.1, fsync on, Kafka's wire protocol")
    ready_s = await c.start_all()
    for i, node in c.nodes.items():
        n.say(f"node {i}: pid {node.process.pid}, port {node.port}, data {node.directory}")
    t0 = time.perf_counter()
    dq = await quorum.wait_for_leader(t.client, ELECTION_WAIT_S, t.nodes_text)
    elected_s = time.perf_counter() - t0
    t.leader, t.epoch = dq.leader_id, dq.leader_epoch
    n.say(f"all ready in {seconds(ready_s)}; node {dq.leader_id} elected leader of epoch {dq.leader_epoch} "
          f"{seconds(elected_s)} later (pre-vote, vote, then a LeaderChange record at offset 0)")
    # Followers learn of the leader and fetch its LeaderChange; until then the leader reports
    # their log end as unknown (-1) and has no high watermark yet.
    dq = await quorum.wait_replicas_at(t.client, list(c.nodes), 1, REPLICAS_WAIT_S, t.nodes_text)
    t.high_watermark = dq.high_watermark
    show_quorum(t, dq)
    n.record("quorum up", seconds(ready_s + elected_s),
             f"{len(c.nodes)} processes ready, node {dq.leader_id} leads epoch {dq.leader_epoch}")


def show_quorum(t: Tour, dq) -> None:
    n = t.narrator
    n.say("kafka-metadata-quorum describe --status:")
    n.block(quorum.status_lines(dq, t.cluster.cluster_id))
    n.say("kafka-metadata-quorum describe --replication --human-readable:")
    n.table(quorum.replication_rows(dq))


# ---- 2. the workload ----------------------------------------------------------------------------


def _digest_values(values, h=None):
    """sha256 over (length, bytes) of each value: equal digests mean equal sequences."""
    h = h or hashlib.sha256()
    for v in values:
        h.update(len(v).to_bytes(4, "big"))
        h.update(v)
    return h


async def commit_values(t: Tour, values: list[bytes], description: str) -> tuple[float, int]:
    """Commit ``values`` through the leader in pipelined Produce requests (acks=-1: each answer
    means committed); returns (seconds, the offset after the last record)."""
    from kraftlog.engine.server.raftnode import ClientError
    from kraftlog.engine.server.tools.progress import rate
    from kraftlog.raft import wire

    per_round = RECORDS_PER_PRODUCE * REQUESTS_PER_ROUND
    end, done = 0, 0
    with t.narrator.bar(description, len(values)) as bar:
        started = time.perf_counter()
        for r in range(0, len(values), per_round):
            chunk = values[r:r + per_round]
            bodies = [wire.produce_request(chunk[i:i + RECORDS_PER_PRODUCE], timeout_ms=PRODUCE_TIMEOUT_MS)
                      for i in range(0, len(chunk), RECORDS_PER_PRODUCE)]
            try:
                bases = await t.client.produce_pipelined(t.leader, bodies, window=PRODUCE_WINDOW)
            except (ClientError, OSError) as exc:
                raise QuorumError(f"committing through node {t.leader} failed at record {r:,} of {len(values):,} "
                                  f"({exc}); did the leader change? (nodes: {t.nodes_text()})") from None
            last_size = len(chunk) - RECORDS_PER_PRODUCE * (len(bodies) - 1)
            end = max(end, max(bases) + last_size)  # one leader appends in arrival order
            done += len(chunk)
            bar.update(done, rate(done, bar.elapsed_s))
        return time.perf_counter() - started, end


async def check_replicas(t: Tour, end_offset: int) -> list[quorum.ReplicaDigest]:
    """Wait for every replica to hold ``end_offset``, then compare their bytes below it."""
    dq = await quorum.wait_replicas_at(t.client, list(t.cluster.nodes), end_offset, REPLICAS_WAIT_S, t.nodes_text)
    digests = [quorum.replica_digest(i, node.log_dir, end_offset) for i, node in t.cluster.nodes.items()]
    quorum.check_identical(digests)
    t.high_watermark = dq.high_watermark
    return digests


async def workload_step(t: Tour) -> None:
    from kraftlog.engine.image import workload

    n = t.narrator
    t.shape = shape = workload.WorkloadShape.scaled(t.partitions)
    n.step(2, STEPS, f"the reference workload through the quorum: {shape.partitions:,} partitions "
                     f"({shape.topics:,} topics x {shape.partitions_per_topic}, RF {shape.replication_factor}, "
                     f"{shape.brokers} brokers; Kafka's TopicsImageSnapshotLoadBenchmark shape)")
    t0 = time.perf_counter()
    values = list(workload.generate(shape))
    value_bytes = sum(map(len, values))
    n.say(f"{len(values):,} metadata records ({megabytes(value_bytes)}: FeatureLevel, RegisterBroker, "
          f"UnfenceBroker, Topic, Partition) generated in {seconds(time.perf_counter() - t0)}")
    n.say(f"committing them through leader node {t.leader}: Produce requests of {RECORDS_PER_PRODUCE:,} records, "
          f"{PRODUCE_WINDOW} in flight, each answered once a majority has fsynced it")
    elapsed, end = await commit_values(t, values, "committing")
    writes = len(values) / elapsed
    n.say(f"committed {len(values):,} records in {seconds(elapsed)}: {writes:,.0f} writes/s "
          f"({value_bytes / elapsed / 1e6:,.1f} MB/s of record values); log end offset {end:,}")

    digests = await check_replicas(t, end)
    n.say(f"every replica holds the same committed log below offset {end:,} (read from disk, CRC-checked):")
    for d in digests:
        n.block([f"node {d.node_id}: {d.batches:,} batches, {d.size_bytes:,} bytes, sha256 {d.short}"])
    t0 = time.perf_counter()
    read = await t.client.read_committed(0, max_bytes=READ_MAX_BYTES)
    read_s = time.perf_counter() - t0
    if len(read) != len(values) or _digest_values(v for _, v in read).digest() != _digest_values(values).digest():
        raise ReplicaMismatchError(f"reading the committed records back from the leader gave {len(read):,} records "
                                   f"that differ from the {len(values):,} proposed")
    n.say(f"read back through Fetch (replica -1, up to the high watermark) in {seconds(read_s)}: "
          f"{len(read):,} records, equal to the workload record for record")
    n.record("writes/s", f"{writes:,.0f}", f"{len(values):,} records ({megabytes(value_bytes)}) committed through "
             f"node {t.leader} in {seconds(elapsed)}, replicas identical")


# ---- 3. failover and catch-up -------------------------------------------------------------------


def _noop_record() -> bytes:
    from kraftlog.engine.records import metadata as codec

    # What a KRaft controller appends to show it is alive; it changes no state, so a retried
    # proposal that commits twice is harmless.
    return codec.encode_record("NoOpRecord", 0, {})


def _removed_topics(values: list[bytes]) -> int:
    from kraftlog.engine.records import metadata as codec

    api_key = codec.RECORD_TYPES["RemoveTopicRecord"].api_key
    return sum(1 for v in values if v[1] == api_key)  # frame: uvarints 1, apiKey (< 0x80), version


async def failover_step(t: Tour) -> None:
    from kraftlog.engine.image import workload
    from kraftlog.engine.server.raftnode import ClientError, RaftClient

    n, c = t.narrator, t.cluster
    old, old_epoch = t.leader, t.epoch
    n.step(3, STEPS, f"failover: SIGKILL the leader (node {old}), then restart it")
    before = await t.client.describe_quorum()
    old_end = next(v.log_end_offset for v in before.voters if v.replica_id == old)
    c.kill(old)
    killed_at = time.perf_counter()
    survivors = RaftClient({i: a for i, a in c.voters.items() if i != old}, retry_backoff_ms=10)
    try:
        try:
            base = await survivors.propose([_noop_record()], timeout_ms=int(FAILOVER_WAIT_S * 1000))
        except ClientError as exc:
            raise QuorumError(f"no new leader committed within {FAILOVER_WAIT_S:.0f} s of the kill of node {old} "
                              f"({exc}; nodes: {t.nodes_text()})") from None
        failover_s = time.perf_counter() - killed_at
        dq = await survivors.describe_quorum()
    finally:
        await survivors.close()
    t.leader, t.epoch = dq.leader_id, dq.leader_epoch
    n.say(f"node {dq.leader_id} leads epoch {dq.leader_epoch}; its first commit (a NoOpRecord at offset {base:,}) "
          f"came {seconds(failover_s)} after the kill (fetch timeout {c.timeouts.fetch_timeout_ms} ms, "
          f"election timeout {c.timeouts.election_timeout_ms} ms)")
    n.record("failover", seconds(failover_s), f"SIGKILL of leader {old} (epoch {old_epoch}) -> first commit by "
             f"node {dq.leader_id} in epoch {dq.leader_epoch}")

    changes = list(workload.churn(t.shape, t.churn, seed=1)) if t.churn else []
    t.removed_topics = _removed_topics(changes)
    end = base + 1
    if changes:
        t.client.leader_id = dq.leader_id
        elapsed, end = await commit_values(t, changes, "committing churn")
        n.say(f"while node {old} is down, node {t.leader} committed {len(changes):,} changes (leader elections, "
              f"ISR shrink/expand, broker fencing, {t.removed_topics:,} topic deletions, configs) in "
              f"{seconds(elapsed)}")

    restarted_at = time.perf_counter()
    ready_s = await c.start(old)
    dq = await quorum.wait_replicas_at(t.client, [old], end, CATCH_UP_WAIT_S, t.nodes_text)
    catch_up_s = time.perf_counter() - restarted_at
    n.say(f"node {old} restarted on its old port (ready in {seconds(ready_s)}) and fetched from offset {old_end:,} "
          f"to {end:,}: caught up {seconds(catch_up_s)} after the restart")
    show_quorum(t, dq)
    n.record("catch-up", seconds(catch_up_s), f"node {old} restarted, fetched {end - old_end:,} records up to "
             f"offset {end:,} (process start {seconds(ready_s)})")

    digests = await check_replicas(t, end)
    n.say(f"every replica again holds the same committed log below offset {end:,}: sha256 {digests[0].short}")
    # Followers first: a leader stopped first resigns, and a follower could win the next epoch and
    # append its LeaderChange before it stops too; this way every log ends at the high watermark.
    t0 = time.perf_counter()
    killed = await c.stop([i for i in c.nodes if i != t.leader])
    killed += await c.stop([t.leader])
    n.say(f"stopped the quorum with SIGTERM, followers then leader, in {seconds(time.perf_counter() - t0)}"
          + (f"; nodes {killed} had to be killed" if killed else "") + "; the data stays for the tools")


# ---- 4. replay ------------------------------------------------------------------------------------


def _find_partition(image, shape) -> tuple[str, int]:
    """A live partition in the middle of the workload (churn may have deleted its topic)."""
    from kraftlog.engine.image import workload

    pid = 3 % shape.partitions_per_topic
    for k in range(shape.topics):
        name = workload.topic_name((shape.topics // 2 + k) % shape.topics)
        if image.topics.partition(name, pid) is not None:
            return name, pid
    raise DemoError("the replayed image holds no partition at all")


def _describe_partition(p) -> str:
    return (f"leader {p.leader}, replicas {list(p.replicas)}, ISR {list(p.isr)}, leader epoch {p.leader_epoch}, "
            f"partition epoch {p.partition_epoch}, topic epoch {p.topic_epoch}")


def replay_step(t: Tour) -> None:
    """engine.image.logload.load_log_dir on the leader's log (the quorum is stopped by now, so
    the Log it opens is nobody else's): zero-copy regions of the segments, decoded into columns by
    the native decoder (every batch CRC-checked) and applied to one delta."""
    from kraftlog.engine.image import versions
    from kraftlog.engine.image.logload import load_log_dir
    from kraftlog.engine.server.tools.progress import rate

    n = t.narrator
    node = t.cluster.nodes[t.leader]
    n.step(4, STEPS, f"replay: node {t.leader}'s metadata log from disk into a MetadataImage")
    manifests = []
    with n.bar("replaying", t.high_watermark) as bar:
        def on_progress(m) -> None:
            manifests.append(m)
            bar.update(m.last_offset + 1, f"offset {m.last_offset + 1:,}, {rate(m.records, bar.elapsed_s)}")

        t0 = time.perf_counter()
        image = load_log_dir(node.log_dir, progress=on_progress)
        replay_s = time.perf_counter() - t0
    m = manifests[-1]
    end = image.provenance.offset + 1
    if end != t.high_watermark:
        raise DemoError(f"the replay of {node.log_dir} ended at offset {end:,}, not at the high watermark "
                        f"{t.high_watermark:,}")
    topics, partitions = image.topics.live_topics, image.topics.partition_count
    expected = t.shape.partitions - t.removed_topics * t.shape.partitions_per_topic
    if partitions != expected:
        raise DemoError(f"the image of {node.log_dir} has {partitions:,} partitions; the workload minus its "
                        f"{t.removed_topics} deleted topics has {expected:,}")
    image_bytes = image.topics.nbytes()
    n.say(f"{m.records:,} records in {m.batches:,} batches (offsets 0..{end - 1:,}) replayed in "
          f"{seconds(replay_s)}: {m.records / replay_s:,.0f} records/s, every batch CRC-checked; "
          f"{m.generic_records:,} of them (the churn, mostly) one by one, the rest decoded into columns and "
          "applied in bulk")
    n.say(f"image: metadata.version {versions.name(image.features.metadata_version)}, "
          f"{len(image.cluster.brokers)} brokers, {topics:,} topics, {partitions:,} partitions, "
          f"{image_bytes / partitions:,.0f} bytes per partition in memory (columnar)")
    name, pid = t.lookup = _find_partition(image, t.shape)
    p, lookup_s = _timed_lookup(lambda: image.topics.partition(name, pid))
    n.say(f"{name} partition {pid}: {_describe_partition(p)} (lookup {millis(lookup_s)})")
    t.image = image
    n.record("replay", seconds(replay_s), f"{m.records:,} records at {m.records / replay_s:,.0f} records/s -> "
             f"{partitions:,} partitions, {image_bytes / partitions:,.0f} B/partition")
    n.record("lookup", millis(lookup_s), f"{name}/{pid} in the replayed image (median of {LOOKUPS_TIMED})")


def _timed_lookup(fn, count: int = LOOKUPS_TIMED):
    samples = []
    answer = None
    for _ in range(count):
        t0 = time.perf_counter()
        answer = fn()
        samples.append(time.perf_counter() - t0)
    return answer, statistics.median(samples)


# ---- 5. snapshot ----------------------------------------------------------------------------------


def snapshot_step(t: Tour) -> None:
    from kraftlog.engine.snapshot import LazySnapshotImage, SnapshotStore, export_checkpoint

    n, image = t.narrator, t.image
    sid = (image.provenance.offset + 1, image.provenance.epoch)
    store_dir = os.path.join(t.data_dir, SNAPSHOT_STORE)
    n.step(5, STEPS, f"snapshot: the image into the LMDB snapshot store at {store_dir}, and out as a Kafka .checkpoint")
    store = SnapshotStore(store_dir)
    try:
        t0 = time.perf_counter()
        manifest, losses = store.write_image(sid, image)
        write_s = time.perf_counter() - t0
        n.say(f"snapshot {sid[0]}-{sid[1]} (end offset, epoch): {manifest.record_count:,} records, "
              f"{megabytes(manifest.stream_bytes)} stream stored as {megabytes(manifest.stored_bytes)} "
              f"(zstd chunks + index) in {seconds(write_s)}, one fsynced LMDB transaction"
              + (f"; {len(losses)} fields lost" if losses else ""))
        os.makedirs(os.path.join(t.data_dir, CHECKPOINTS), exist_ok=True)
        t0 = time.perf_counter()
        path = export_checkpoint(store, sid, os.path.join(t.data_dir, CHECKPOINTS))
        export_s = time.perf_counter() - t0
        n.say(f"exported {path}: {megabytes(os.path.getsize(path))} in {seconds(export_s)} "
              "(SnapshotHeader, record batches, SnapshotFooter: Kafka's snapshot file)")
        t0 = time.perf_counter()
        loaded = store.load_image(sid)
        load_s = time.perf_counter() - t0
        if loaded.topics.partition_count != image.topics.partition_count:
            raise DemoError(f"the snapshot loaded back holds {loaded.topics.partition_count:,} partitions, "
                            f"the image {image.topics.partition_count:,}")
        n.say(f"loaded back from LMDB in {seconds(load_s)} (every chunk and batch verified): "
              f"{loaded.topics.partition_count:,} partitions")
        name, pid = t.lookup
        t0 = time.perf_counter()
        lazy = LazySnapshotImage(store, sid)
        answer = lazy.partition(name, pid)
        lazy_s = time.perf_counter() - t0
        if answer != image.topics.partition(name, pid):
            raise DemoError(f"the lazy snapshot answers {answer} for {name}/{pid}, the image "
                            f"{image.topics.partition(name, pid)}")
        n.say(f"LazySnapshotImage: {name} partition {pid} answered in {millis(lazy_s)} from a fresh open "
              f"(index tables + one chunk, no full load), equal to the image's answer")
    finally:
        store.close()
    n.record("snapshot write", seconds(write_s), f"LMDB store, {megabytes(manifest.stored_bytes)} "
             f"({megabytes(manifest.stream_bytes)} stream), snapshot {sid[0]}-{sid[1]}")
    n.record("snapshot load", seconds(load_s), "the full image back from LMDB, verified")
    n.record("checkpoint", seconds(export_s), f"{os.path.basename(path)}, {megabytes(os.path.getsize(path))}")
    n.record("lazy lookup", millis(lazy_s), f"{name}/{pid} from LMDB: open + one chunk, no full load")
