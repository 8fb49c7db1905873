"""Proves the side-stream probe (bench/profile_side_stream.py) times what the loader does: on a
small production tail its side stream is the loader's records replayed one by one, type for type,
and replayed alone it gives the loaded image's brokers, features, producer ids, quotas, ACLs,
SCRAM credentials and tokens."""

from __future__ import annotations

from kraftlog.bench import profile_side_stream as probe
from kraftlog.bench.rows_image import loaded_image
from kraftlog.engine.image import production as pr
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.loader import Loader, decode

PARTITIONS = 3_000
TAIL_BYTES = 1 << 20


def test_the_probe_replays_the_loaders_side_stream():
    shape = pr.ProductionShape(wl.WorkloadShape.scaled(PARTITIONS), tail_bytes=TAIL_BYTES)
    tail = pr.ProductionTail(shape, shape.base.base_records)
    buf = b"".join(pr.encode_batches(tail.batches(), shape.base.base_records))
    image = loaded_image(PARTITIONS)
    cols = decode(buf)
    costs = probe.side_stream_costs(image, cols, repeat=3)
    assert {name: count for name, (count, _) in costs.items()} == probe.single_types(image, buf)
    assert all(us > 0 for _, us in costs.values())
    delta, spent_ns = probe.replay_side_stream(image, cols, probe.side_stream_indexes(cols))
    assert len(spent_ns) == sum(count for count, _ in costs.values())
    alone, loaded = delta.apply(), Loader(image).replay(buf)
    for part in ("cluster", "features", "producer_ids", "client_quotas", "acls", "scram", "delegation_tokens"):
        assert getattr(alone, part) == getattr(loaded, part), part
    assert alone.cluster != image.cluster and alone.producer_ids != image.producer_ids  # the tail changed them
