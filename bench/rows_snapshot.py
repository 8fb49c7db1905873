"""Benchmark rows for the LMDB snapshot store (issue 5).

Data: the reference workload (Kafka's TopicsImageSnapshotLoadBenchmark shape, 10 partitions per
topic, RF 3, 10,000 replicas per broker) in image form: what write_image writes (metadata.version,
every broker registered unfenced, each TopicRecord followed by its PartitionRecords), built from
the workload generator. The write row times the whole path from a loaded image: write_image (the
records at the image's metadata.version) + framing, CRC, index, zstd chunks and one fsynced LMDB
commit. 1M partitions with --full, 100k with --quick ("scale" says so).

Peers (same bytes, same run): a Kafka-style snapshot file (the .checkpoint stream written to a file
and fsynced; read back and handed to the loader) for write and load; a full load then a lookup for
the lazy image's first answer; the fully loaded MetadataImage's own lookup for later answers.
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import tempfile
import time
from functools import cache

from kraftlog.bench.timing import measure, row
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.snapshot import LazySnapshotImage, SnapshotStore, SnapshotStoreConfig

LOOKUPS = 2000  # questions per timed lookup round
MiB = 1 << 20


def partitions_for(quick: bool) -> int:
    return 100_000 if quick else 1_000_000


def scale(n: int) -> int | None:
    return None if n == 1_000_000 else n


@cache
def image_values(partitions: int) -> list[bytes]:
    """The workload as write_image would write it (see the module docstring)."""
    return wl.image_values(wl.WorkloadShape.scaled(partitions))


_dirs: list[str] = []


def _tmp() -> str:
    path = tempfile.mkdtemp(prefix="kraftlog-bench-snapshot-")
    _dirs.append(path)
    return path


@cache
def stored(partitions: int, codec_name: str = "zstd") -> SnapshotStore:
    """A store holding the workload's snapshot at id (records + 1, 1)."""
    values = image_values(partitions)
    store = SnapshotStore(os.path.join(_tmp(), "snapshots"), SnapshotStoreConfig(chunk_codec=codec_name))
    store.write_values((len(values) + 1, 1), values)
    return store


def _write_row(name: str, quick: bool) -> dict:
    from kraftlog.engine.image.writer import write_image
    from kraftlog.engine.records import batch

    n = partitions_for(quick)
    values = image_values(n)
    log = b"".join(batch.build_batch_from_values(values[i:i + 2000], base_offset=i) for i in range(0, len(values), 2000))
    image = Loader().replay(log)
    del log
    store = SnapshotStore(os.path.join(_tmp(), "snapshots"), SnapshotStoreConfig())
    ends = iter(range(len(values) + 1, len(values) + 100))
    median, spread = measure(lambda: store.write_image((next(ends), 1), image), repeat=5, warmup=1)
    encode_only, _ = measure(lambda: write_image(image), repeat=3, warmup=0)
    stream = store.read_stream()[1]
    path = os.path.join(_tmp(), "peer.checkpoint")

    def file_write():
        with open(path, "wb") as f:
            f.write(stream)
            f.flush()
            os.fsync(f.fileno())

    peer, _ = measure(file_write, repeat=5, warmup=1)
    store.close()
    return row(name, "s", median, spread, peer="the same stream as a .checkpoint file + fsync (Kafka's way)",
               peer_value=peer, higher_is_better=False, goal="<= 1.5 s at 1M (image -> stored snapshot)",
               met=median <= 1.5, scale=scale(n),
               notes=f"{len(values):,} records, {len(stream) / MiB:.1f} MiB stream; write_image alone "
                     f"{encode_only:.2f} s, then frame + batch + CRC + index + zstd chunks + one fsynced LMDB commit")


def write_1m(quick: bool) -> dict:
    return _write_row("snapshot.write_1m_s", quick)


def load_1m(quick: bool) -> dict:
    n = partitions_for(quick)
    store = stored(n)
    sid = store.newest_id()
    median, spread = measure(lambda: store.load_image(sid), repeat=5, warmup=1)
    path = os.path.join(_tmp(), sid.file_name)
    with open(path, "wb") as f:
        f.write(store.read_stream(sid)[1])

    def file_load():
        with open(path, "rb") as f:
            data = f.read()
        Loader().load_snapshot(data, end_offset=sid.end_offset, epoch=sid.epoch)

    peer, _ = measure(file_load, repeat=5, warmup=1)
    return row("snapshot.load_1m_s", "s", median, spread, peer=".checkpoint file read + Loader.load_snapshot",
               peer_value=peer, higher_is_better=False, goal="<= 0.3 s at 1M (from LMDB, every chunk verified)",
               met=median <= 0.3, scale=scale(n))


def _questions(n: int, count: int, seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    shape = wl.WorkloadShape.scaled(n)
    return [(wl.topic_name(rng.randrange(shape.topics)), rng.randrange(shape.partitions_per_topic))
            for _ in range(count)]


def lazy_first_lookup(quick: bool) -> dict:
    n = partitions_for(quick)
    store = stored(n)
    questions = iter(_questions(n, 1000, seed=1))

    def first():
        LazySnapshotImage(store).partition(*next(questions))

    median, spread = measure(first, repeat=9, warmup=1)
    sid = store.newest_id()

    def full_then_lookup():
        store.load_image(sid).topics.partition(*next(questions))

    peer, _ = measure(full_then_lookup, repeat=3, warmup=0)
    return row("snapshot.lazy_first_lookup_ms", "ms", median * 1e3, spread * 1e3,
               peer="full load from LMDB, then the lookup", peer_value=peer * 1e3, higher_is_better=False,
               goal="<= 50 ms at 1M (open + first partition lookup)", met=median <= 0.050, scale=scale(n),
               notes="open reads the manifest and index tables; the OS page cache is warm")


def lazy_lookup(quick: bool) -> dict:
    n = partitions_for(quick)
    store = stored(n)
    lazy = LazySnapshotImage(store)
    questions = _questions(n, LOOKUPS, seed=2)
    started = time.perf_counter()
    for q in questions:  # the first pass reads (and caches) the chunks and topics it needs
        lazy.partition(*q)
    cold = (time.perf_counter() - started) / LOOKUPS

    def answer_all():
        for q in questions:
            lazy.partition(*q)

    median, spread = measure(answer_all, repeat=7, warmup=0)
    image = store.load_image()

    def image_all():
        for q in questions:
            image.topics.partition(*q)

    peer, _ = measure(image_all, repeat=7, warmup=1)
    us = 1e6 / LOOKUPS
    return row("snapshot.lazy_lookup_us", "us", median * us, spread * us,
               peer="MetadataImage.topics.partition on the fully loaded image", peer_value=peer * us,
               higher_is_better=False, goal="<= 20 us per later lookup", met=median * us <= 20, scale=scale(n),
               notes=f"{LOOKUPS} random partitions, chunks cached; their first pass (cold chunks, "
                     f"generic-codec decode) {cold * 1e6:.1f} us each")


def size_1m(quick: bool) -> dict:
    n = partitions_for(quick)
    zstd, plain = stored(n, "zstd"), stored(n, "none")
    mz, mp = zstd.manifest(zstd.newest_id()), plain.manifest(plain.newest_id())
    on_disk = os.stat(os.path.join(zstd.path, "data.mdb")).st_blocks * 512
    return row("snapshot.size_1m_mb", "MiB", mz.stored_bytes / MiB, 0.0,
               peer="the same snapshot with uncompressed chunks", peer_value=mp.stored_bytes / MiB,
               higher_is_better=False, goal="report (zstd chunks if they pay off)", met=mz.stored_bytes < mp.stored_bytes,
               scale=scale(n),
               notes=f".checkpoint stream {mz.stream_bytes / MiB:.1f} MiB; zstd chunk payloads "
                     f"{(mz.stored_bytes - _index_bytes(zstd)) / MiB:.1f} MiB + index {_index_bytes(zstd) / MiB:.1f} MiB; "
                     f"data.mdb {on_disk / MiB:.1f} MiB")


def _index_bytes(store: SnapshotStore) -> int:
    sid = store.newest_id()
    return sum(sum(col.nbytes for col in store.read_table(sid, name).values())
               for name in ("topics", "topic_ids", "partitions", "brokers", "chunks"))


def cleanup() -> None:
    """Close the cached stores and delete every temporary directory (also at exit)."""
    stored.cache_clear()
    for path in _dirs:
        shutil.rmtree(path, ignore_errors=True)
    _dirs.clear()


atexit.register(cleanup)

ROWS = {
    "snapshot.write_1m_s": write_1m,
    "snapshot.load_1m_s": load_1m,
    "snapshot.lazy_first_lookup_ms": lazy_first_lookup,
    "snapshot.lazy_lookup_us": lazy_lookup,
    "snapshot.size_1m_mb": size_1m,
}
