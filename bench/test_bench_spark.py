"""Micro benchmarks of the Spark pipeline on local[2] (report rows: bench/rows_spark.py): a full
scan of a 1M-partition log (1.2M rows: the per-row rate shows past the fixed cost of a job)
through the `kraftlog` data source (Arrow batches from the native decoders) beside the same data
source yielding Python tuples; and the distributed replay of a 100k-partition log beside the
single-node loader on the same directory."""

from __future__ import annotations

import pytest

from kraftlog.bench import rows_spark as data

PARTITIONS = 100_000
READ_PARTITIONS = data.read_partitions_for(True)


@pytest.fixture(scope="module")
def path():
    return data.log_dir(PARTITIONS)


@pytest.fixture(scope="module")
def read_path():
    return data.log_dir(READ_PARTITIONS)


@pytest.fixture(scope="module")
def spark():
    session = data.session()
    yield session
    session.stop()
    data.session.cache_clear()


@pytest.mark.benchmark(group="spark scan of a 1M-partition log, every column")
def test_scan_arrow_ours(benchmark, spark, read_path):
    benchmark.pedantic(data.scan_all, args=(spark, "kraftlog", read_path), rounds=5, warmup_rounds=4)


@pytest.mark.benchmark(group="spark scan of a 1M-partition log, every column")
def test_scan_tuples_peer(benchmark, spark, read_path):
    benchmark.pedantic(data.scan_all, args=(spark, "kraftlog_tuples", read_path), rounds=2, warmup_rounds=0)


@pytest.mark.benchmark(group="replay of a 100k-partition log with churn")
def test_replay_spark_ours(benchmark, spark, path, tmp_path):
    from kraftlog.engine.pipeline import replay as rp

    def run():
        frames = rp.replay(rp.read_for_replay(spark, path))
        rp.write_replay(frames, str(tmp_path / "out"), count=False)
        frames["records"].unpersist()

    benchmark.pedantic(run, rounds=2, warmup_rounds=0)


@pytest.mark.benchmark(group="replay of a 100k-partition log with churn")
def test_replay_single_node_peer(benchmark, path):
    from kraftlog.engine.image.logload import load_log_dir

    benchmark.pedantic(load_log_dir, args=(path,), rounds=5, warmup_rounds=1)
