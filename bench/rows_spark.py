"""Benchmark rows for the Spark pipeline (engine/pipeline), on local[2].

spark.read_rows     rows/s through the `kraftlog` data source (Arrow RecordBatches from the native
                    decoders) vs the same rows yielded as Python tuples by an otherwise identical
                    data source (same splits, same decoders, same batches turned into tuples), in
                    one run; every column is materialised (noop sink). 1M partitions (1.2M rows)
                    in both modes (--quick times the tuple path once instead of three times): at
                    100k the ~0.1-0.2 s fixed cost of a Spark job (planning in Python workers,
                    scheduling, one split on one core) hid the per-row rate.
spark.replay_1m_s   distributed replay (rp.replay + Parquet for every table) of a 1M-partition log
                    with churn, vs the single-node loader (load_log_dir) on the same directory.
--quick uses a smaller log for the replay (the row says so in "scale").
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from functools import cache

from kraftlog.bench.timing import measure, row
from kraftlog.engine.pipeline import sample

# pyspark (kraftlog[spark]) is imported only when a row runs: `kraftlog bench` lists and runs the
# other rows without it, and these two fail with a line naming the extra.

MASTER = "local[2]"
CHURN_FRACTION = 0.1  # churn records per partition of the base workload
SEGMENT_BYTES = 64 << 20


def partitions_for(quick: bool) -> int:
    return 100_000 if quick else 1_000_000


def read_partitions_for(quick: bool) -> int:
    return 1_000_000


@cache
def log_dir(partitions: int) -> str:
    """The reference workload with churn as a log directory (kept for the process, removed at exit)."""
    root = tempfile.mkdtemp(prefix="kraftlog-bench-spark-")
    import atexit

    atexit.register(shutil.rmtree, root, True)
    values = sample.workload_values(partitions, int(partitions * CHURN_FRACTION))
    return sample.write_log_dir(os.path.join(root, "bench-cluster"), values, segment_bytes=SEGMENT_BYTES,
                                per_batch=2000)


@cache
def session():
    from kraftlog.engine.pipeline.session import spark_session

    spark = spark_session(MASTER, app_name="kraftlog-bench-spark",
                          conf={"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false",
                                "spark.driver.memory": "4g"})
    spark.dataSource.register(tuple_data_source())
    return spark


@cache
def tuple_data_source() -> type:
    """The peer: the same splits and decoders, but rows handed to Spark as Python tuples."""
    from kraftlog.engine.pipeline.source import KraftlogDataSource, KraftlogReader, _Settings

    class TupleReader(KraftlogReader):
        def read(self, partition):
            for record_batch in super().read(partition):
                columns = [column.to_pylist() for column in record_batch.columns]
                yield from zip(*columns, strict=True)

    class TupleDataSource(KraftlogDataSource):
        @classmethod
        def name(cls) -> str:
            return "kraftlog_tuples"

        def reader(self, schema):
            return TupleReader(_Settings(self.options), schema)

    return TupleDataSource


def scan_all(spark, fmt: str, path: str) -> None:
    spark.read.format(fmt).load(path).write.format("noop").mode("overwrite").save()


def record_count(spark, path: str) -> int:
    return spark.read.format("kraftlog").load(path).count()


def read_rows(quick: bool) -> dict:
    partitions = read_partitions_for(quick)
    path = log_dir(partitions)
    spark = session()
    rows = record_count(spark, path)
    load_before = os.getloadavg()[0]
    ours, spread = measure(lambda: scan_all(spark, "kraftlog", path), repeat=5, warmup=4)  # past the JVM warm-up (~3 jobs)
    peer, _ = measure(lambda: scan_all(spark, "kraftlog_tuples", path), repeat=1 if quick else 3, warmup=0)
    load_after = os.getloadavg()[0]
    ours_rate, peer_rate = rows / ours, rows / peer
    extra = {"scale": f"{partitions:,} partitions"} if partitions != read_partitions_for(False) else {}
    return row("spark.read_rows", "rows/s", ours_rate, spread * rows / ours ** 2,
               peer="the same data source yielding Python tuples", peer_value=peer_rate, higher_is_better=True,
               goal=">= 20x the tuple path and >= 1M rows/s on local[2]",
               met=ours_rate >= 20 * peer_rate and ours_rate >= 1e6,
               notes=(f"{rows:,} rows, {MASTER}, all {len(_arrow_schema_names())} columns materialised; "
                      f"load average {load_before:.1f} -> {load_after:.1f} on {os.cpu_count()} cores"), **extra)


def _arrow_schema_names() -> list[str]:
    from kraftlog.engine.pipeline.rows import ROW_NAMES

    return list(ROW_NAMES)


def replay_seconds(quick: bool) -> dict:
    from kraftlog.engine.image.logload import load_log_dir
    from kraftlog.engine.pipeline import replay as rp

    partitions = partitions_for(quick)
    path = log_dir(partitions)
    spark = session()
    out = tempfile.mkdtemp(prefix="kraftlog-bench-replay-")
    samples = []
    try:
        for _ in range(3 if quick else 2):
            started = time.perf_counter()
            frames = rp.replay(rp.read_for_replay(spark, path))
            rp.write_replay(frames, out, count=False)
            frames["records"].unpersist()
            samples.append(time.perf_counter() - started)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    peer, _ = measure(lambda: load_log_dir(path), repeat=3, warmup=1)
    ours = statistics.median(samples)
    extra = {"scale": f"{partitions:,} partitions"} if quick else {}
    return row("spark.replay_1m_s", "s", ours, max(samples) - min(samples),
               peer="single-node loader (load_log_dir)", peer_value=peer, higher_is_better=False,
               goal="report (distributed replay; the single-node loader beside it)", met=True,
               notes=f"{MASTER}, {int(partitions * CHURN_FRACTION):,} churn records, 5 tables written as Parquet", **extra)


ROWS = {
    "spark.read_rows": read_rows,
    "spark.replay_1m_s": replay_seconds,
}
