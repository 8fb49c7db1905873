"""Sample inputs for the pipeline's tests, benchmarks and demos: the reference workload (with
churn) written as a real log directory through engine.log.Log, batch by batch."""

from __future__ import annotations

import os

from kraftlog.engine.image import workload as wl
from kraftlog.engine.log.log import Log, LogConfig
from kraftlog.engine.records import batch

RECORDS_PER_BATCH = 500
START_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z: a fixed clock so hourly groupings are stable


def workload_values(partitions: int, churn: int, *, seed: int = 0, replicas_per_broker: int = 10_000) -> list[bytes]:
    shape = wl.WorkloadShape.scaled(partitions, replicas_per_broker=replicas_per_broker, seed=seed)
    return list(wl.generate(shape)) + list(wl.churn(shape, churn, seed=seed + 1))


def append_values(log: Log, values: list[bytes], *, per_batch: int = RECORDS_PER_BATCH, start_ms: int = START_MS,
                  batch_interval_ms: int = 60_000, epoch: int = 1) -> None:
    """Append ``values`` after the log's end, ``per_batch`` records a batch, each batch
    ``batch_interval_ms`` after the previous one (from the log end offset's slot on)."""
    first = log.end_offset
    for i in range(0, len(values), per_batch):
        offset = first + i
        log.append_as_follower(batch.build_batch_from_values(
            values[i:i + per_batch], base_offset=offset, partition_leader_epoch=epoch,
            timestamp_ms=start_ms + (offset // per_batch) * batch_interval_ms))


def write_log_dir(directory: str | os.PathLike, values: list[bytes], *, segment_bytes: int = 1 << 20,
                  per_batch: int = RECORDS_PER_BATCH, start_ms: int = START_MS,
                  batch_interval_ms: int = 60_000) -> str:
    """A log directory holding ``values`` (appended as a follower would, flushed once at the end)."""
    config = LogConfig(segment_bytes=segment_bytes, flush_interval_messages=None)
    with Log.open(directory, config) as log:
        append_values(log, values, per_batch=per_batch, start_ms=start_ms, batch_interval_ms=batch_interval_ms)
        log.flush()
    return os.fspath(directory)
