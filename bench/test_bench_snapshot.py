"""Micro benchmarks of the LMDB snapshot store beside its peers, on identical data (bench/rows_snapshot.py
has the data and the report rows): write (ours vs a fsynced .checkpoint file), full load (ours vs file
read + loader), lazy lookups (ours vs the fully loaded image). 50k partitions keep a round short."""

from __future__ import annotations

import os
import random

import pytest

from kraftlog.bench import rows_snapshot as data
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.snapshot import LazySnapshotImage, SnapshotStore, SnapshotStoreConfig

PARTITIONS = 50_000


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SnapshotStore(tmp_path_factory.mktemp("bench") / "snapshots", SnapshotStoreConfig())
    values = data.image_values(PARTITIONS)
    s.write_values((len(values) + 1, 1), values)
    yield s
    s.close()


@pytest.mark.benchmark(group="snapshot write 50k partitions")
def test_write_ours(benchmark, store):
    values = data.image_values(PARTITIONS)
    ends = iter(range(10**6, 10**7))
    manifest = benchmark(lambda: store.write_values((next(ends), 1), values))
    assert manifest.record_count == len(values) + 2


@pytest.mark.benchmark(group="snapshot write 50k partitions")
def test_write_checkpoint_file_peer(benchmark, store, tmp_path):
    stream = store.read_stream()[1]
    path = tmp_path / "peer.checkpoint"

    def write():
        with open(path, "wb") as f:
            f.write(stream)
            f.flush()
            os.fsync(f.fileno())

    benchmark(write)
    assert path.stat().st_size == len(stream)


@pytest.mark.benchmark(group="snapshot load 50k partitions")
def test_load_ours(benchmark, store):
    image = benchmark(store.load_image)
    assert image.topics.partition_count == PARTITIONS


@pytest.mark.benchmark(group="snapshot load 50k partitions")
def test_load_checkpoint_file_peer(benchmark, store, tmp_path):
    sid = store.newest_id()
    path = tmp_path / sid.file_name
    path.write_bytes(store.read_stream(sid)[1])

    def load():
        return Loader().load_snapshot(path.read_bytes(), end_offset=sid.end_offset, epoch=sid.epoch)

    assert benchmark(load).topics.partition_count == PARTITIONS


def _questions(count: int = 500) -> list[tuple[str, int]]:
    return data._questions(PARTITIONS, count, seed=3)


@pytest.mark.benchmark(group="snapshot 500 partition lookups")
def test_lazy_lookups_ours(benchmark, store):
    lazy = LazySnapshotImage(store)
    questions = _questions()
    answers = benchmark(lambda: [lazy.partition(*q) for q in questions])
    assert all(a is not None for a in answers)


@pytest.mark.benchmark(group="snapshot 500 partition lookups")
def test_lookups_full_image_peer(benchmark, store):
    image = store.load_image()
    questions = _questions()
    answers = benchmark(lambda: [image.topics.partition(*q) for q in questions])
    assert all(a is not None for a in answers)


@pytest.mark.benchmark(group="snapshot lazy open + first lookup")
def test_lazy_open_first_lookup_ours(benchmark, store):
    rng = random.Random(4)
    questions = _questions(50)
    answer = benchmark(lambda: LazySnapshotImage(store).partition(*rng.choice(questions)))
    assert answer is not None
