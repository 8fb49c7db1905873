"""Proves the side-stream probe (bench/profile_side_stream.py) times what the loader does: on a
small production tail the loader's side pass applies the whole side stream (nothing replayed on
its own), the probe's pass and its one-by-one path cover the same records, type for type, and
each, run alone, gives the loaded image's brokers, features, producer ids, quotas, ACLs, SCRAM
credentials and tokens; the report prints both timings."""

from __future__ import annotations

from kraftlog.bench import profile_side_stream as probe
from kraftlog.bench.rows_image import loaded_image
from kraftlog.engine.image import production as pr
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.loader import Loader, decode

PARTITIONS = 3_000
TAIL_BYTES = 1 << 20
PARTS = ("cluster", "features", "producer_ids", "client_quotas", "acls", "scram", "delegation_tokens")


def test_the_probe_times_the_loaders_side_pass_and_the_one_by_one_path():
    shape = pr.ProductionShape(wl.WorkloadShape.scaled(PARTITIONS), tail_bytes=TAIL_BYTES)
    tail = pr.ProductionTail(shape, shape.base.base_records)
    buf = b"".join(pr.encode_batches(tail.batches(), shape.base.base_records))
    image = loaded_image(PARTITIONS)
    cols = decode(buf)
    indexes = probe.side_stream_indexes(cols)
    manifest = probe.load_manifest(image, buf)
    assert manifest.side_records == len(indexes) > 0 and manifest.single_types == {}
    costs = probe.side_stream_costs(image, cols, repeat=3)
    assert sum(count for count, _ in costs.values()) == len(indexes)
    assert all(us > 0 for _, us in costs.values())
    assert probe.side_pass_us(image, cols, repeat=3) > 0 and probe.side_pass_us(image, cols, repeat=3, twin=True) > 0
    one_by_one, spent_ns = probe.replay_side_stream(image, cols, indexes)
    assert len(spent_ns) == len(indexes)
    passed, pass_ns = probe.side_pass(image, cols, indexes)
    assert pass_ns > 0
    loaded = Loader(image).replay(buf)
    for delta in (one_by_one, passed):
        alone = delta.apply()
        for part in PARTS:
            assert getattr(alone, part) == getattr(loaded, part), part
        assert alone.cluster != image.cluster and alone.producer_ids != image.producer_ids  # the tail changed them
