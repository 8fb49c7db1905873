"""Benchmark rows for the metadata image (issue: replay a million partitions fast).

Every row runs on the reference workload (Kafka's TopicsImageSnapshotLoadBenchmark shape: 10
partitions per topic, RF 3, 10,000 replicas per broker), 1M partitions with --full, 100k with
--quick (the row says so in "scale"). The peer for the load rows is a naive replay: every record
decoded by the generic codec into Python dicts keyed by topic and partition, measured in the
same run on the same bytes.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from functools import cache

import numpy as np

from kraftlog.bench.timing import measure, row
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.image.writer import write_image
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec

RECORDS_PER_BATCH = 2000
NAIVE_SAMPLE_RECORDS = 200_000  # the naive replay is timed on a prefix and scaled (it is ~50x slower)


def partitions_for(quick: bool) -> int:
    return 100_000 if quick else 1_000_000


@cache
def log_bytes(partitions: int) -> bytes:
    """The base workload as record batches (what a controller's log holds after creating it)."""
    values = list(wl.generate(wl.WorkloadShape.scaled(partitions)))
    return b"".join(batch.build_batch_from_values(values[i:i + RECORDS_PER_BATCH], base_offset=i)
                    for i in range(0, len(values), RECORDS_PER_BATCH))


@cache
def snapshot_bytes(partitions: int) -> bytes:
    image = Loader().replay(log_bytes(partitions))
    values = write_image(image).values
    return b"".join(batch.build_batch_from_values(values[i:i + RECORDS_PER_BATCH], base_offset=i)
                    for i in range(0, len(values), RECORDS_PER_BATCH))


def naive_replay(buf: bytes, max_records: int) -> tuple[float, int]:
    """Decode records one by one into dicts (topic id -> name, (topic, partition) -> fields)."""
    started = time.perf_counter()
    topics: dict = {}
    partitions: dict = {}
    done = 0
    for record in _iter_records(buf):
        r = codec.decode_record(record)
        d = r.data
        if r.record_type == "TopicRecord":
            topics[d["TopicId"]] = d["Name"]
        elif r.record_type == "PartitionRecord":
            partitions[(d["TopicId"], d["PartitionId"])] = dict(d)
        done += 1
        if done >= max_records:
            break
    return time.perf_counter() - started, done


def _iter_records(buf: bytes):
    pos = 0
    while pos < len(buf):
        header = batch.validate_batch(buf, pos)
        for rec in batch.iter_records(buf, pos):
            yield rec.value
        pos += header.size_bytes


def _load_row(name: str, quick: bool, buf_fn, load, goal_s: float) -> dict:
    n = partitions_for(quick)
    buf = buf_fn(n)
    median, spread = measure(lambda: load(buf), repeat=5, warmup=1)
    total_records = sum(1 for _ in _batch_counts(buf))
    naive_s, sampled = naive_replay(buf, NAIVE_SAMPLE_RECORDS)
    naive_full = naive_s * total_records / sampled
    ratio_ok = naive_full / median >= 5
    return row(name, "s", median, spread, peer="naive dict replay (generic codec, scaled from a prefix)",
               peer_value=naive_full, higher_is_better=False, goal=f"<= {goal_s} s at 1M and >= 5x naive",
               met=(median <= goal_s or quick) and ratio_ok, scale=None if n == 1_000_000 else n,
               notes=f"naive timed on {sampled:,} of {total_records:,} records")


def _batch_counts(buf: bytes):
    pos = 0
    while pos < len(buf):
        header = batch.validate_batch(buf, pos)
        yield from range(header.record_count)
        pos += header.size_bytes


def snapshot_load(quick: bool) -> dict:
    """Snapshot (the image written back out at its metadata.version) -> image."""
    return _load_row("image.snapshot_load_1m_s", quick, snapshot_bytes,
                     lambda buf: Loader().load_snapshot(buf, end_offset=10**7, epoch=1), 0.3)


def log_replay(quick: bool) -> dict:
    """The log on disk (segments written by the engine's log, mmap'd) -> image."""
    from kraftlog.engine.image.logload import load_log_dir
    from kraftlog.engine.log.log import Log, LogConfig

    n = partitions_for(quick)
    buf = log_bytes(n)
    with tempfile.TemporaryDirectory(prefix="kraftlog-bench-") as tmp:
        directory = os.path.join(tmp, "__cluster_metadata-0")
        log = Log.open(directory, LogConfig())
        pos = 0
        while pos < len(buf):
            header = batch.validate_batch(buf, pos)
            log.append_as_follower(buf[pos:pos + header.size_bytes])
            pos += header.size_bytes
        log.flush()
        log.close()
        median, spread = measure(lambda: load_log_dir(directory), repeat=5, warmup=1)
    naive_s, sampled = naive_replay(buf, NAIVE_SAMPLE_RECORDS)
    total = sum(1 for _ in _batch_counts(buf))
    naive_full = naive_s * total / sampled
    return row("image.log_replay_1m_s", "s", median, spread, peer="naive dict replay (scaled)",
               peer_value=naive_full, higher_is_better=False, goal="<= 0.5 s at 1M (mmap read, CRC, decode)",
               met=median <= 0.5 or quick, scale=None if n == 1_000_000 else n)


@cache
def loaded_image(partitions: int):
    return Loader().replay(log_bytes(partitions))


def single_topic_add(quick: bool) -> dict:
    """TopicsImageSingleRecordChangeBenchmark: one new topic (10 partitions) on a full image."""
    n = partitions_for(quick)
    image = loaded_image(n)

    def add():
        delta = image.delta()
        tid = uuid.uuid4()
        delta.replay("TopicRecord", {"Name": f"new-{tid}", "TopicId": tid}, topic_epoch=10**7)
        for p in range(10):
            delta.replay("PartitionRecord", {"TopicId": tid, "PartitionId": p, "Replicas": [0, 1, 2],
                                             "Isr": [0, 1, 2], "RemovingReplicas": [], "AddingReplicas": [],
                                             "Leader": 0, "LeaderEpoch": 0, "PartitionEpoch": 0}, topic_epoch=None)
        delta.apply()

    median, spread = measure(add, repeat=21, warmup=3)
    ms = median * 1e3
    return row("image.single_topic_add_1m_ms", "ms", ms, spread * 1e3, peer=None, peer_value=None,
               higher_is_better=False, goal="<= 1 ms", met=ms <= 1.0, scale=None if n == 1_000_000 else n)


def zonal_outage_records(image, broker: int = 0) -> bytes:
    """PartitionChangeRecords taking ``broker`` out of every ISR (and leadership) it is in."""
    rows = image.topics.live_partition_rows()
    isr = image.topics.partitions.gather(rows, "isr")
    hit = rows[(isr == broker).any(axis=1)]
    values = []
    for prow in hit.tolist():
        reg = image.topics.registration(prow)
        new_isr = [b for b in reg.isr if b != broker]
        data = {"TopicId": reg.topic_id, "PartitionId": reg.partition_id, "Isr": new_isr}
        if reg.leader == broker:
            data["Leader"] = new_isr[0] if new_isr else -1
        values.append(codec.encode_record("PartitionChangeRecord", 0, data))
    base = image.provenance.offset + 1
    return b"".join(batch.build_batch_from_values(values[i:i + RECORDS_PER_BATCH], base_offset=base + i)
                    for i in range(0, len(values), RECORDS_PER_BATCH))


def zonal_outage(quick: bool) -> dict:
    """TopicsImageZonalOutageBenchmark: every partition with broker 0 in its ISR loses it (bytes -> image)."""
    n = partitions_for(quick)
    image = loaded_image(n)
    changes = zonal_outage_records(image)

    def apply():
        Loader(image).replay(changes)

    median, spread = measure(apply, repeat=11, warmup=2)
    ms = median * 1e3
    count = sum(1 for _ in _batch_counts(changes))
    return row("image.zonal_outage_1m_ms", "ms", ms, spread * 1e3, peer=None, peer_value=None,
               higher_is_better=False, goal="<= 20 ms (Kafka's Java image: 10.6-47.7 ms)", met=ms <= 20 or quick,
               scale=None if n == 1_000_000 else n, notes=f"{count:,} PartitionChangeRecords")


_MEMORY_PROBE = """
import gc, json, sys, psutil
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.records import batch
n = int(sys.argv[1])
values = list(wl.generate(wl.WorkloadShape.scaled(n)))
log = b"".join(batch.build_batch_from_values(values[i:i + 2000], base_offset=i) for i in range(0, len(values), 2000))
del values
gc.collect()
from kraftlog.engine.image.loader import _release_free_memory
_release_free_memory()  # the baseline without what building the log freed
process = psutil.Process()
before = process.memory_info().rss
image = Loader().replay(log)
gc.collect()
after = process.memory_info().rss
print(json.dumps({"rss_delta": after - before, "bytes_per_partition": image.topics.nbytes() / image.topics.partition_count}))
"""


def memory(quick: bool) -> dict:
    """What the image holds per partition (its arrays and indexes), and the RSS a fresh process
    grows by when it builds one (measured in a subprocess: RSS in this process says nothing
    after other rows allocated and freed gigabytes)."""
    import json
    import subprocess
    import sys

    n = partitions_for(quick)
    samples = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, str(n)], capture_output=True, text=True,
                             check=True, timeout=600)
        samples.append(json.loads(out.stdout))
    deltas = [s["rss_delta"] for s in samples]
    bpp = statistics.median(s["bytes_per_partition"] for s in samples)
    mb = statistics.median(deltas) / 1e6
    return row("image.memory_1m_mb", "MB", mb, (max(deltas) - min(deltas)) / 1e6, peer="Kafka's Java image (277 B/partition)",
               peer_value=277 * n / 1e6, higher_is_better=False, goal="<= 64 bytes per partition",
               met=bpp <= 64, scale=None if n == 1_000_000 else n, bytes_per_partition=round(bpp, 1),
               rss_bytes_per_partition=round(statistics.median(deltas) / n, 1))


def lookup(quick: bool) -> dict:
    """One partition by (topic name, partition) on a published image."""
    n = partitions_for(quick)
    image = loaded_image(n)
    topics = image.topics
    rng = np.random.default_rng(5)
    names = [wl.topic_name(int(t)) for t in rng.integers(0, n // 10, size=1000)]
    pids = rng.integers(0, 10, size=1000).tolist()
    pairs = list(zip(names, pids, strict=True))

    def run():
        for name, p in pairs:
            topics.partition(name, p)

    median, spread = measure(run, repeat=9, warmup=2)
    us = median / len(pairs) * 1e6
    return row("image.lookup_us", "us", us, spread / len(pairs) * 1e6, peer=None, peer_value=None,
               higher_is_better=False, goal="<= 2 us median", met=us <= 2.0, scale=None if n == 1_000_000 else n)


ROWS = {
    "image.snapshot_load_1m_s": snapshot_load,
    "image.log_replay_1m_s": log_replay,
    "image.single_topic_add_1m_ms": single_topic_add,
    "image.zonal_outage_1m_ms": zonal_outage,
    "image.memory_1m_mb": memory,
    "image.lookup_us": lookup,
}


def replay_chart(quick: bool) -> dict:
    """Replay time vs partition count, kraftlog vs the naive replay (scaled from a prefix)."""
    sizes = [10_000, 100_000] if quick else [10_000, 100_000, 1_000_000, 2_000_000]
    ours, naive = [], []
    for n in sizes:
        buf = log_bytes(n)
        median, _ = measure(lambda buf=buf: Loader().replay(buf), repeat=3, warmup=1)
        ours.append([n, median])
        seconds, sampled = naive_replay(buf, NAIVE_SAMPLE_RECORDS)
        total = sum(1 for _ in _batch_counts(buf))
        naive.append([n, seconds * total / sampled])
        if n >= 1_000_000:
            log_bytes.cache_clear()  # do not keep a 2M-partition log alive for the next size
    return {"title": "Metadata replay: time vs partitions", "xlabel": "partitions", "ylabel": "seconds",
            "series": {"kraftlog": ours, "naive dict replay": naive}, "log_x": True, "log_y": True}


CHARTS = {"image.replay_vs_partitions": replay_chart}
