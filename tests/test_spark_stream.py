"""Proves the streaming side of the `kraftlog` data source on real Spark (local[2]): a Structured
Streaming query over a log directory with Trigger.AvailableNow delivers every record available when
it starts, over several micro-batches when maxRecordsPerTrigger caps them (not just one batch);
records appended to the live log afterwards are picked up by the next run from its checkpoint, each
offset exactly once."""

from __future__ import annotations

import pytest

from kraftlog.engine.log.log import Log, LogConfig
from kraftlog.engine.pipeline import sample

pytestmark = pytest.mark.slow

SEGMENT_BYTES = 32 << 10


def run_available_now(spark, directory, out, checkpoint, max_records: int) -> list:
    stream = (spark.readStream.format("kraftlog").option("maxRecordsPerTrigger", max_records)
              .load(str(directory)).select("offset", "record_type", "cluster"))
    query = (stream.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive
    assert query.exception() is None
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def test_available_now_delivers_everything_then_tails_appends(spark, tmp_path):
    """Run 1 sees every record in several micro-batches; records appended later arrive in run 2."""
    values = sample.workload_values(400, 300, replicas_per_broker=100)
    first, later = values[:900], values[900:]
    directory = tmp_path / "live"
    sample.write_log_dir(directory, first, segment_bytes=SEGMENT_BYTES, per_batch=50)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    progress = run_available_now(spark, directory, out, checkpoint, max_records=200)
    offsets = sorted(r.offset for r in spark.read.parquet(str(out)).select("offset").collect())
    assert offsets == list(range(len(first)))
    assert len(progress) >= 4  # 900 records, at most 200 (whole batches of 50) per micro-batch
    assert all(p["numInputRows"] <= 200 for p in progress)

    with Log.open(directory, LogConfig(segment_bytes=SEGMENT_BYTES)) as log:  # the live log grows
        sample.append_values(log, later, per_batch=50)
        assert log.end_offset == len(values)
    progress = run_available_now(spark, directory, out, checkpoint, max_records=10_000)
    rows = spark.read.parquet(str(out)).select("offset", "cluster").collect()
    assert sorted(r.offset for r in rows) == list(range(len(values)))  # nothing twice, nothing lost
    assert {r.cluster for r in rows} == {"live"}
    assert sum(p["numInputRows"] for p in progress) == len(later)
