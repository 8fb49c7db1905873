"""Benchmarks: the active controller fencing a broker that leads 10,000 partitions (90,000-partition
image on 9 brokers: 30,000 PartitionChangeRecords + FenceBrokerRecord), planned from the image's
columns and template-encoded (ours) beside the same decisions made one partition at a time with
the generic codec (peer); both replay the records into the next image. Data and the report row:
bench/rows_controller.py. Run: pytest bench/test_bench_controller.py --benchmark-only."""

from __future__ import annotations

import pytest

from kraftlog.bench import rows_controller as data


@pytest.fixture(scope="module")
def image():
    return data.base_image(True)


@pytest.mark.benchmark(group="controller: fence a broker leading 10k partitions")
def test_fence_move_bulk(benchmark, image):
    """Ours: columnar plan + template encoder + replay."""
    after = benchmark.pedantic(data.fence_bulk, args=(image,), rounds=7, warmup_rounds=1)
    assert data.leaderships(after) == 0


@pytest.mark.benchmark(group="controller: fence a broker leading 10k partitions")
def test_fence_move_scalar_peer(benchmark, image):
    """Peer: build_change per partition + generic codec + the same replay."""
    after = benchmark.pedantic(data.fence_scalar, args=(image,), rounds=3, warmup_rounds=0)
    assert data.leaderships(after) == 0
