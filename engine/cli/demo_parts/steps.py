"""The steps of the tour, in order. Each narrates, measures, checks, and records its summary rows.

1. cluster    controller and broker processes; the elected active controller; brokers registered
              and unfenced; DescribeQuorum as `kafka-metadata-quorum` prints it (brokers are the
              observers)
2. workload   Kafka's benchmark shape created through the active controller with pipelined
              CreateTopics; every broker's image catches up (its Metadata answer names the offset
              it has replayed) and answers for a sample topic as the controller does
3. failover   SIGKILL of the active controller: time to the first topic created by the next one;
              the old controller restarted and caught up
4. fencing    a broker stops heartbeating (SIGSTOP): time until the controller fences it and moves
              its leaderships; SIGCONT: time until it is unfenced again
5. restart    a broker stopped (controlled shutdown) and restarted: it loads its own snapshot and
              fetches only what is new; time until it answers at the controller's offset
6. replay     the active controller's directory read from disk (its newest snapshot + the log
              after it) into a MetadataImage; one partition looked up
7. snapshot   the image into the LMDB snapshot store, exported as a Kafka .checkpoint, loaded
              back, and a partition answered by LazySnapshotImage without a full load

In single-node mode (one combined controller+broker) steps 3 and 4 are skipped: there is no other
node to fail over to or to fence. Every check that fails raises a DemoError subclass naming what
differs.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import time
from dataclasses import dataclass, field

from kraftlog.engine.cli.demo_parts import quorum
from kraftlog.engine.cli.demo_parts.admin import Admin
from kraftlog.engine.cli.demo_parts.cluster import SESSION_TIMEOUT_MS, NodeCluster
from kraftlog.engine.cli.demo_parts.datadir import CHECKPOINTS, SNAPSHOT_STORE
from kraftlog.engine.cli.demo_parts.errors import DemoError, QuorumError
from kraftlog.engine.cli.demo_parts.narrator import Narrator, megabytes, millis, seconds

STEPS = 8  # the eighth: where the data is, and the tools that read it
TOPICS_PER_REQUEST = 100  # topics per CreateTopics request
CREATE_WINDOW = 4  # CreateTopics requests in flight at once
ELECTION_WAIT_S = 15.0
REGISTER_WAIT_S = 30.0
FAILOVER_WAIT_S = 15.0
CATCH_UP_WAIT_S = 60.0
FENCE_WAIT_S = 20.0
LOOKUPS_TIMED = 1000  # partition lookups timed (median reported)
PROBE_TOPIC = "demo-failover-probe"


@dataclass
class Tour:
    """What the steps share."""

    narrator: Narrator
    cluster: NodeCluster
    data_dir: str
    partitions: int
    client: object = None  # RaftClient over the controllers
    admin: Admin | None = None
    shape: object = None  # workload.WorkloadShape
    leader: int = -1  # the active controller
    epoch: int = -1
    replication_factor: int = 1
    created_partitions: int = 0
    sample: list[str] = field(default_factory=list)  # topic names checked on every broker
    image: object = None
    lookup: tuple[str, int] | None = None

    def nodes_text(self) -> str:
        return self.cluster.describe()

    @property
    def single_node(self) -> bool:
        return len(self.cluster.controllers) == 1


# ---- 1. the cluster -----------------------------------------------------------------------------


async def cluster_step(t: Tour) -> None:
    n, c = t.narrator, t.cluster
    combined = " (combined controller+broker)" if t.single_node else ""
    n.step(1, STEPS, f"a KRaft cluster on 127.0.0.1: {len(c.controllers)} controller(s), {len(c.brokers)} "
                     f"broker(s){combined}, separate processes, fsync on, Kafka's wire protocol")
    ready_s = await c.start_all()
    for i, node in c.nodes.items():
        n.say(f"node {i} ({node.roles}): pid {node.process.pid}, port {node.port}, data {node.directory}")
    t0 = time.perf_counter()
    dq = await quorum.wait_for_leader(t.client, ELECTION_WAIT_S, t.nodes_text)
    t.leader, t.epoch = dq.leader_id, dq.leader_epoch
    n.say(f"all ready in {seconds(ready_s)}; controller {dq.leader_id} elected in epoch {dq.leader_epoch} "
          f"{seconds(time.perf_counter() - t0)} later: it is the active controller, the only writer of metadata")
    brokers = set(c.brokers)
    await t.admin.wait_until(lambda: _brokers_live(t, brokers), REGISTER_WAIT_S,
                             f"brokers {sorted(brokers)} registered and unfenced", t.nodes_text)
    up_s = time.perf_counter() - t0 + ready_s
    n.say(f"brokers {sorted(brokers)} registered with the active controller (fenced), caught up on the metadata "
          f"log as Raft observers, and were unfenced by their heartbeats")
    show_quorum(t, await t.client.describe_quorum())
    n.record("cluster up", seconds(up_s), f"{len(c.nodes)} processes, controller {t.leader} active, "
             f"{len(brokers)} broker(s) unfenced")


async def _brokers_live(t: Tour, brokers: set[int]) -> bool:
    for b in brokers:
        if not brokers <= await t.admin.live_brokers(b):
            return False
    return True


def show_quorum(t: Tour, dq) -> None:
    n = t.narrator
    n.say("kraftlog quorum describe --status (kafka-metadata-quorum's fields):")
    n.block(quorum.status_lines(dq, t.cluster.cluster_id))
    n.say("kraftlog quorum describe --replication --human-readable:")
    n.table(quorum.replication_rows(dq))


# ---- 2. the workload ----------------------------------------------------------------------------


async def create_topics(t: Tour, names: list[str], partitions: int, description: str) -> float:
    """CreateTopics through the active controller, TOPICS_PER_REQUEST per request and
    CREATE_WINDOW in flight; returns the seconds it took."""
    from kraftlog.engine.cli.tools.progress import rate
    from kraftlog.engine.protocol.connection import ClientError

    chunks = [names[i:i + TOPICS_PER_REQUEST] for i in range(0, len(names), TOPICS_PER_REQUEST)]
    done = 0
    with t.narrator.bar(description, len(names) * partitions) as bar:
        started = time.perf_counter()
        for w in range(0, len(chunks), CREATE_WINDOW):
            window = chunks[w:w + CREATE_WINDOW]
            try:
                await asyncio.gather(*(t.admin.create_checked(t.leader, chunk, partitions, t.replication_factor)
                                       for chunk in window))
            except (ClientError, OSError, TimeoutError) as exc:
                raise QuorumError(f"CreateTopics through controller {t.leader} failed ({exc}); nodes: "
                                  f"{t.nodes_text()}") from None
            done += sum(map(len, window)) * partitions
            bar.update(done, rate(done, bar.elapsed_s).replace("records", "partitions"))
        return time.perf_counter() - started


async def brokers_caught_up(t: Tour, brokers, what: str) -> float:
    """Until every broker in ``brokers`` has replayed at least what the active controller has, and
    answers for the sample topics exactly as the controller does; returns the seconds it took."""
    target = await t.admin.image_offset(t.leader)
    reference = _partition_table(await t.admin.metadata(t.leader, t.sample))

    async def caught_up() -> bool:
        for b in brokers:
            if await t.admin.image_offset(b) < target:
                return False
        for b in brokers:
            seen = _partition_table(await t.admin.metadata(b, t.sample))
            if seen != reference:
                raise QuorumError(f"broker {b} answers {len(seen)} sample partitions differently from controller "
                                  f"{t.leader} at the same offset")
        return True

    return await t.admin.wait_until(caught_up, CATCH_UP_WAIT_S, what, t.nodes_text)


def _partition_table(md) -> dict:
    return {(tp.name, int(p.partition_index)): (int(p.leader_id), int(p.leader_epoch), tuple(p.isr_nodes))
            for tp in md.topics for p in tp.partitions}


async def workload_step(t: Tour) -> None:
    from kraftlog.engine.image import workload

    n, c = t.narrator, t.cluster
    t.shape = shape = workload.WorkloadShape.scaled(t.partitions)
    t.replication_factor = min(shape.replication_factor, len(c.brokers))
    names = [workload.topic_name(k) for k in range(shape.topics)]
    t.sample = [names[0], names[len(names) // 2], names[-1]]
    n.step(2, STEPS, f"the reference workload through the active controller: {shape.topics:,} topics x "
                     f"{shape.partitions_per_topic} partitions = {shape.partitions:,} partitions, RF "
                     f"{t.replication_factor} (Kafka's TopicsImageSnapshotLoadBenchmark shape, on "
                     f"{len(c.brokers)} broker(s))")
    n.say(f"CreateTopics v7 requests of {TOPICS_PER_REQUEST} topics, {CREATE_WINDOW} in flight: the controller "
          "validates each against its image, places replicas rack-aware, and commits a topic with its partitions "
          "as one Raft write")
    elapsed = await create_topics(t, names, shape.partitions_per_topic, "creating")
    t.created_partitions = shape.partitions
    records = shape.topics + shape.partitions
    writes = records / elapsed
    n.say(f"created {shape.topics:,} topics ({shape.partitions:,} partitions, {records:,} records) in "
          f"{seconds(elapsed)}: {shape.topics / elapsed:,.0f} topics/s, {writes:,.0f} records/s")
    catch_s = await brokers_caught_up(t, c.brokers, "brokers caught up with the controller")
    n.say(f"every broker replayed the metadata log to the controller's offset {seconds(catch_s)} later and answers "
          f"Metadata for {', '.join(t.sample)} exactly as the controller does (leaders, leader epochs, ISRs)")
    n.record("writes/s", f"{writes:,.0f}", f"{records:,} records ({shape.topics:,} CreateTopics topics) through "
             f"controller {t.leader} in {seconds(elapsed)}")


# ---- 3. failover --------------------------------------------------------------------------------


async def failover_step(t: Tour) -> None:
    from kraftlog.engine.node.raftnode import RaftClient

    n, c = t.narrator, t.cluster
    if t.single_node:
        n.step(3, STEPS, "failover: skipped (single-node mode has no other controller)")
        return
    old, old_epoch = t.leader, t.epoch
    n.step(3, STEPS, f"failover: SIGKILL the active controller (node {old}), then restart it")
    c.kill(old)
    t.admin.forget(old)
    survivors = RaftClient({i: a for i, a in c.voters.items() if i != old}, retry_backoff_ms=10)
    try:
        async def new_controller_created() -> bool:
            dq = await survivors.describe_quorum()
            if dq.leader_id in (old, -1) or dq.leader_id not in c.voters:
                return False
            resp = await t.admin.create_topics(dq.leader_id, [PROBE_TOPIC], 1, t.replication_factor)
            code = resp.topics[0].error_code.name
            if code in ("none", "topic_already_exists"):
                t.leader, t.epoch = dq.leader_id, dq.leader_epoch
                return True
            return False

        failover_s = await t.admin.wait_until(new_controller_created, FAILOVER_WAIT_S,
                                              f"a new active controller after the kill of node {old}", t.nodes_text)
    finally:
        await survivors.close()
    t.created_partitions += 1
    n.say(f"controller {t.leader} became active in epoch {t.epoch} and created topic {PROBE_TOPIC} "
          f"{seconds(failover_s)} after the kill (fetch timeout {c.timeouts.fetch_timeout_ms} ms, election timeout "
          f"{c.timeouts.election_timeout_ms} ms); it had replayed every record already, so nothing was reloaded")
    n.record("failover", seconds(failover_s), f"SIGKILL of active controller {old} (epoch {old_epoch}) -> topic "
             f"created by controller {t.leader} in epoch {t.epoch}")
    ready_s = await c.start(old)
    end = (await t.client.describe_quorum()).high_watermark
    dq = await quorum.wait_replicas_at(t.client, [old], end, CATCH_UP_WAIT_S, t.nodes_text)
    n.say(f"node {old} restarted on its old port (ready in {seconds(ready_s)}) and caught up to the high watermark "
          f"{end:,} as a standby controller")
    show_quorum(t, dq)


# ---- 4. fencing ---------------------------------------------------------------------------------


async def fencing_step(t: Tour) -> None:
    n, c = t.narrator, t.cluster
    if t.single_node:
        n.step(4, STEPS, "fencing: skipped (single-node mode has one broker, which is also the controller)")
        return
    victim, witness = c.brokers[-1], c.brokers[0]
    n.step(4, STEPS, f"fencing: broker {victim} stops heartbeating (SIGSTOP), then resumes (SIGCONT)")
    before = _partition_table(await t.admin.metadata(t.leader, t.sample))
    c.pause(victim, True)
    try:
        fence_s = await t.admin.wait_until(lambda: _live_without(t, witness, victim), FENCE_WAIT_S,
                                           f"broker {victim} fenced", t.nodes_text)
        after = _partition_table(await t.admin.metadata(t.leader, t.sample))
    finally:
        c.pause(victim, False)
    moved = sum(1 for k, (leader, _, _) in before.items() if leader == victim and after[k][0] != victim)
    led = sum(1 for leader, _, _ in before.values() if leader == victim)
    if moved != led:
        raise QuorumError(f"broker {victim} was fenced but {led - moved} of the sample partitions it led kept it as "
                          "leader")
    n.say(f"the controller fenced broker {victim} {seconds(fence_s)} after it stopped (session timeout "
          f"{SESSION_TIMEOUT_MS} ms) and, in the same write, moved its leaderships to other ISR members with a "
          f"new leader epoch ({moved} of the sample's {len(before)} partitions); metadata answers leave it out")
    unfence_s = await t.admin.wait_until(lambda: _live_with(t, witness, victim), FENCE_WAIT_S,
                                         f"broker {victim} unfenced", t.nodes_text)
    n.say(f"after SIGCONT broker {victim} heartbeated, caught up and was unfenced {seconds(unfence_s)} later")
    n.record("fence", seconds(fence_s), f"broker {victim} silent -> fenced, leaderships moved")
    n.record("unfence", seconds(unfence_s), f"broker {victim} back -> unfenced")


async def _live_without(t: Tour, witness: int, victim: int) -> bool:
    return victim not in await t.admin.live_brokers(witness)


async def _live_with(t: Tour, witness: int, victim: int) -> bool:
    return victim in await t.admin.live_brokers(witness)


# ---- 5. broker restart --------------------------------------------------------------------------


async def restart_step(t: Tour) -> None:
    n, c = t.narrator, t.cluster
    broker = c.brokers[0]
    n.step(5, STEPS, f"restart: broker {broker} stops (controlled shutdown) and starts again from its own data")
    killed = await c.stop([broker])
    t.admin.forget(broker)
    if killed:
        raise QuorumError(f"broker {broker} did not stop within the grace period ({t.nodes_text()})")
    started = time.perf_counter()
    await c.start(broker)
    if t.single_node:
        await quorum.wait_for_leader(t.client, ELECTION_WAIT_S, t.nodes_text)
    await t.admin.wait_until(lambda: _brokers_live(t, {broker}), REGISTER_WAIT_S, f"broker {broker} registered again",
                             t.nodes_text)
    await brokers_caught_up(t, [broker], f"broker {broker} caught up after its restart")
    restart_s = time.perf_counter() - started
    loaded = re.findall(r"loaded snapshot (\d+)-(\d+) in (\d+) ms", c.stderr_text(broker))
    how = (f"loaded its snapshot {loaded[-1][0]}-{loaded[-1][1]} in {loaded[-1][2]} ms, then fetched only the log "
           "after it" if loaded else "replayed its local log (no snapshot yet)")
    n.say(f"broker {broker} {how}; it answers at the controller's offset {seconds(restart_s)} after its start "
          "(process start included)")
    n.record("broker restart", seconds(restart_s), f"broker {broker}: process start -> caught up and unfenced")


async def stop_cluster(t: Tour) -> None:
    """Brokers first (their controlled shutdown needs the active controller), then the standby
    controllers, then the active one: every log then ends at the high watermark."""
    n, c = t.narrator, t.cluster
    t0 = time.perf_counter()
    killed = await c.stop([i for i in c.brokers if not c.nodes[i].is_controller])
    killed += await c.stop([i for i in c.controllers if i != t.leader])
    killed += await c.stop([t.leader])
    n.say(f"stopped the cluster with SIGTERM (brokers, standbys, then the active controller) in "
          f"{seconds(time.perf_counter() - t0)}" + (f"; nodes {killed} had to be killed" if killed else "")
          + "; the data stays for the tools")


# ---- 4. replay ------------------------------------------------------------------------------------


def _find_partition(image, shape) -> tuple[str, int]:
    """A live partition in the middle of the workload."""
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
    """The active controller's directory as the tools read it (the cluster is stopped by now):
    its newest LMDB snapshot that the log continues from, then the log after it, zero-copy
    regions decoded into columns by the native decoder (every batch CRC-checked)."""
    from kraftlog.engine.cli.tools.imageload import load_log_dir
    from kraftlog.engine.image import versions

    n = t.narrator
    node = t.cluster.nodes[t.leader]
    n.step(6, STEPS, f"replay: controller {t.leader}'s metadata directory from disk into a MetadataImage")
    t0 = time.perf_counter()
    loaded = load_log_dir(node.log_dir, command="demo", progress=n.progress)
    replay_s = time.perf_counter() - t0
    image, m = loaded.image, loaded.manifest
    topics, partitions = image.topics.live_topics, image.topics.partition_count
    if partitions != t.created_partitions:
        raise DemoError(f"the image of {node.log_dir} has {partitions:,} partitions; the tour created "
                        f"{t.created_partitions:,}")
    image_bytes = image.topics.nbytes()
    base = ("its newest snapshot (ending at offset " + f"{loaded.snapshot_end_offset:,}) plus "
            if loaded.snapshot_end_offset is not None else "its whole log: ")
    n.say(f"{base}{m.records:,} log records up to offset {loaded.end_offset - 1:,} replayed in {seconds(replay_s)}, "
          "every batch CRC-checked")
    n.say(f"image: metadata.version {versions.name(image.features.metadata_version)}, "
          f"{len(image.cluster.brokers)} brokers, {len(image.cluster.controllers)} controllers, {topics:,} topics, "
          f"{partitions:,} partitions, {image_bytes / partitions:,.0f} bytes per partition in memory (columnar)")
    name, pid = t.lookup = _find_partition(image, t.shape)
    p, lookup_s = _timed_lookup(lambda: image.topics.partition(name, pid))
    n.say(f"{name} partition {pid}: {_describe_partition(p)} (lookup {millis(lookup_s)})")
    t.image = image
    n.record("replay", seconds(replay_s), f"snapshot + log -> {partitions:,} partitions, "
             f"{image_bytes / partitions:,.0f} B/partition")
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
    n.step(7, STEPS, f"snapshot: the image into the LMDB snapshot store at {store_dir}, and out as a Kafka .checkpoint")
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
