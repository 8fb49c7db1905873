"""`kraftlog gen`: the reference metadata workload written as a real log directory.

The records are engine.image.workload's (Kafka's TopicsImageSnapshotLoadBenchmark shape, scaled
to --partitions, plus --churn changes), appended by engine.log.Log as the leader of epoch 1 in
batches of --records-per-batch, after a LeaderChange control record as a KRaft leader writes at
the start of its epoch. With --checkpoint the image at the end of the log is also written as a
Kafka snapshot file ``<end offset>-<epoch>.checkpoint`` in the same directory (SnapshotHeader,
the image's records at the metadata.version, SnapshotFooter).

``--shape production`` appends, after the base, the tail a real controller writes over time
(engine.image.production: NoOpRecords every 500 ms, rolling restarts, a zonal outage, ISR flaps,
topic creates / deletes / re-creates, producer ids, quotas, ACLs, SCRAM, tokens, feature changes,
controller failovers), one batch per controller event, until --tail-bytes or --duration-s. Its
--checkpoint is the snapshot at the end of the base, where the tail starts: what a broker
restarting from its latest snapshot replays.
"""

from __future__ import annotations

import argparse
import os

from kraftlog.engine.cli.tools.common import (
    ToolError,
    add_quiet,
    is_segment_name,
    pipe_safe,
    show_progress,
    strict,
)

LEADER_EPOCH = 1
LEADER_ID = 1
DEFAULT_RECORDS_PER_BATCH = 1000
DEFAULT_SEGMENT_BYTES = 1 << 30  # Kafka's metadata.log.segment.bytes default
MAX_APPEND_BYTES = 8 << 20  # batches are handed to the log in appends of about this size
MAX_APPEND_BATCHES = 1024  # ... and of at most this many batches (LogConfig.max_batches_per_append is 4096)

EXAMPLE = """examples:
  kraftlog gen /tmp/meta --partitions 100000 --churn 20000
  kraftlog gen /tmp/meta --partitions 1000000 --shape production --tail-bytes 20971520 --checkpoint
  kraftlog gen /tmp/meta --partitions 1000000 --metadata-version 3.7-IV0 --checkpoint
  kraftlog image shell /tmp/meta"""


def register(parser: argparse.ArgumentParser) -> None:
    strict(parser)
    parser.epilog = EXAMPLE
    parser.add_argument("dir", metavar="DIR", help="log directory to create (must not hold a log yet)")
    parser.add_argument("--partitions", type=int, required=True,
                        help="partitions in the workload (10 per topic, RF 3, 10,000 replicas per broker)")
    parser.add_argument("--churn", type=int, default=0, metavar="M",
                        help="records of churn after the base workload (elections, ISR, fencing, deletes, configs)")
    parser.add_argument("--shape", choices=("reference", "production"), default="reference",
                        help="reference: the base (+ --churn); production: the base + a controller's tail over time")
    parser.add_argument("--tail-bytes", type=int, default=None, metavar="B",
                        help="production: stop the tail at about this many bytes (default 20 MiB, Kafka's "
                             "metadata.log.max.record.bytes.between.snapshots)")
    parser.add_argument("--duration-s", type=float, default=None, metavar="S",
                        help="production: simulated seconds of tail at most (default 3600)")
    parser.add_argument("--metadata-version", default=None, metavar="V",
                        help="metadata.version to write at, a name (3.7-IV0) or a level (default: the latest)")
    parser.add_argument("--seed", type=int, default=0, help="seed of topic ids and churn (default 0)")
    parser.add_argument("--records-per-batch", type=int, default=DEFAULT_RECORDS_PER_BATCH, metavar="N",
                        help=f"records per record batch (default {DEFAULT_RECORDS_PER_BATCH})")
    parser.add_argument("--segment-bytes", type=int, default=DEFAULT_SEGMENT_BYTES, metavar="B",
                        help="roll to a new segment past this size (default 1 GiB)")
    parser.add_argument("--checkpoint", action="store_true",
                        help="also write the final image as a <end offset>-<epoch>.checkpoint snapshot")
    add_quiet(parser)
    parser.set_defaults(run=pipe_safe(run))


def _check_args(args: argparse.Namespace) -> int:
    from kraftlog.engine.image import versions

    if args.partitions < 1:
        raise ToolError(f"--partitions must be at least 1, got {args.partitions}")
    if args.churn < 0:
        raise ToolError(f"--churn must be >= 0, got {args.churn}")
    if args.shape != "production" and (args.tail_bytes is not None or args.duration_s is not None):
        raise ToolError("--tail-bytes and --duration-s shape the production tail: add --shape production")
    if args.shape == "production" and args.churn:
        raise ToolError("--churn is the reference shape's; the production shape's tail replaces it")
    if args.tail_bytes is not None and args.tail_bytes < 1:
        raise ToolError(f"--tail-bytes must be at least 1, got {args.tail_bytes}")
    if args.duration_s is not None and args.duration_s <= 0:
        raise ToolError(f"--duration-s must be positive, got {args.duration_s}")
    if args.records_per_batch < 1:
        raise ToolError(f"--records-per-batch must be at least 1, got {args.records_per_batch}")
    if not 1024 <= args.segment_bytes <= (1 << 31) - 1:
        raise ToolError(f"--segment-bytes must be in [1024, {(1 << 31) - 1}], got {args.segment_bytes}")
    level = versions.LATEST if args.metadata_version is None else versions.parse(args.metadata_version)
    if level < versions.MINIMUM_BOOTSTRAP:
        raise ToolError(f"metadata.version {versions.name(level)} is below {versions.name(versions.MINIMUM_BOOTSTRAP)}, "
                        "the first a KRaft cluster can bootstrap at")
    path = args.dir
    if os.path.exists(path) and not os.path.isdir(path):
        raise ToolError(f"{path} exists and is not a directory")
    if os.path.isdir(path) and any(is_segment_name(n) for n in os.listdir(path)):
        raise ToolError(f"{path} already holds a log; gen writes a new one: give an empty or new directory")
    return level


def run(args: argparse.Namespace) -> int:
    from kraftlog.engine.image import versions, workload

    level = _check_args(args)
    shape = workload.WorkloadShape.scaled(args.partitions, metadata_version=level, seed=args.seed)
    base_records = shape.base_records
    total = base_records + args.churn
    records = _records(workload, shape, args.churn, args.seed)
    tail = _production_tail(args, shape, base_records) if args.shape == "production" else None
    summary = write_log(args.dir, records, total, records_per_batch=args.records_per_batch,
                        segment_bytes=args.segment_bytes, progress=show_progress(args), tail=tail)
    extra = f"{args.churn:,} churn" if tail is None else _tail_summary(tail)
    print(f"wrote {total:,} base records ({shape.topics:,} topics, {shape.partitions:,} partitions, "
          f"{shape.brokers} brokers, {extra}) at metadata.version {versions.name(level)} to {args.dir}: "
          f"offsets 0..{summary[0] - 1}, {summary[1]} segment(s), {summary[2]:,} bytes in {summary[3]:.2f} s")
    if args.checkpoint and tail is not None:
        path = os.path.join(args.dir, f"{1 + base_records:020d}-{LEADER_EPOCH:010d}.checkpoint")
        values = workload.image_values(shape)
        write_snapshot_file(path, values, epoch=LEADER_EPOCH, last_timestamp_ms=tail.shape.start_ms)
        print(f"wrote snapshot {path} ({len(values):,} records; the base, where the tail starts)")
    elif args.checkpoint:
        path, count = write_checkpoint(args.dir, progress=show_progress(args))
        print(f"wrote snapshot {path} ({count:,} records)")
    return 0


def _production_tail(args: argparse.Namespace, shape, base_records: int):
    """The tail generator, its first record after the LeaderChange and the base (offset 1 + base)."""
    import time

    from kraftlog.engine.image import production

    tail_shape = production.ProductionShape(
        shape, tail_bytes=production.DEFAULT_TAIL_BYTES if args.tail_bytes is None else args.tail_bytes,
        duration_ms=production.DEFAULT_DURATION_MS if args.duration_s is None else int(args.duration_s * 1000),
        seed=args.seed + 1, start_ms=int(time.time() * 1000))
    return production.ProductionTail(tail_shape, 1 + base_records)


def _tail_summary(tail) -> str:
    facts = tail.finish()
    seconds = (tail.now_ms - tail.shape.start_ms) / 1000
    return (f"then a production tail of {facts.records:,} records in {facts.batches:,} batches, "
            f"{facts.bytes:,} bytes, {seconds:,.0f} simulated s")


def _records(workload, shape, churn: int, seed: int):
    yield from workload.generate(shape)
    if churn:
        yield from workload.churn(shape, churn, seed=seed + 1)


def _leader_change_batch(timestamp_ms: int) -> bytes:
    from kraftlog.engine.records import batch as batch_codec
    from kraftlog.engine.records import metadata as codec

    voter = [{"VoterId": LEADER_ID}]
    _, value = codec.encode_control("LeaderChangeMessage", 0,
                                    {"LeaderId": LEADER_ID, "Voters": voter, "GrantingVoters": voter})
    return batch_codec.build_control_batch(batch_codec.CONTROL_LEADER_CHANGE, value, timestamp_ms=timestamp_ms)


def write_log(directory: str, records, total: int, *, records_per_batch: int, segment_bytes: int,
              progress: bool, tail=None) -> tuple[int, int, int, float]:
    """Append ``records`` (framed values) to a new log in ``directory``, then the batches of
    ``tail`` (a production.ProductionTail) as its controller wrote them; returns
    (end offset, segments, bytes, seconds)."""
    import time

    from kraftlog.engine.cli.tools.progress import ProgressBar, rate
    from kraftlog.engine.log.log import Log, LogConfig
    from kraftlog.engine.records import batch as batch_codec

    # Group commit: one fsync at the end instead of one per append (the log is new; a crash
    # while generating loses a workload, not data).
    config = LogConfig(segment_bytes=segment_bytes, flush_interval_messages=None)
    now_ms = int(time.time() * 1000)
    with Log.open(directory, config) as log, ProgressBar(progress, "generating", total=total) as bar:
        log.append_as_leader(_leader_change_batch(now_ms), LEADER_EPOCH)
        # An append lands in one segment (the roll is checked per append), so appends stay well
        # below the segment size for --segment-bytes to shape the segments.
        append_bytes = min(MAX_APPEND_BYTES, segment_bytes // 4)
        pending, pending_bytes, values, written = [], 0, [], 0
        for value in records:
            values.append(value)
            if len(values) < records_per_batch:
                continue
            pending.append(batch_codec.build_batch_from_values(values, timestamp_ms=now_ms))
            pending_bytes += len(pending[-1])
            written += len(values)
            values = []
            if pending_bytes >= append_bytes or len(pending) >= MAX_APPEND_BATCHES:
                log.append_as_leader(b"".join(pending), LEADER_EPOCH)
                pending, pending_bytes = [], 0
                bar.update(written, rate(written, bar.elapsed_s))
        if values:
            pending.append(batch_codec.build_batch_from_values(values, timestamp_ms=now_ms))
            written += len(values)
        if pending:
            log.append_as_leader(b"".join(pending), LEADER_EPOCH)
        bar.update(written, rate(written, bar.elapsed_s))
        if tail is not None:
            _append_tail(log, tail, append_bytes)
        log.flush()
        log.update_high_watermark(log.end_offset)
        return log.end_offset, len(log.segment_base_offsets()), log.size_bytes, bar.elapsed_s


def _append_tail(log, tail, append_bytes: int) -> None:
    """The tail's batches, grouped into appends per controller epoch (a failover starts a new one)."""
    from kraftlog.engine.image import production

    pending, pending_bytes, epoch = [], 0, LEADER_EPOCH
    for batch in production.encode_batches(tail.batches(), log.end_offset, with_epochs=True):
        data, batch_epoch = batch
        if pending and (batch_epoch != epoch or pending_bytes >= append_bytes or len(pending) >= MAX_APPEND_BATCHES):
            log.append_as_leader(b"".join(pending), epoch)
            pending, pending_bytes = [], 0
        epoch = batch_epoch
        pending.append(data)
        pending_bytes += len(data)
    if pending:
        log.append_as_leader(b"".join(pending), epoch)


def write_checkpoint(directory: str, *, progress: bool) -> tuple[str, int]:
    """Write the image at the end of the log in ``directory`` as a Kafka snapshot file."""
    from kraftlog.engine.cli.tools import imageload
    from kraftlog.engine.image.writer import write_image

    loaded = imageload.load_log_dir(directory, command="gen", progress=progress)
    image = loaded.image
    written = write_image(image)
    path = os.path.join(directory, f"{loaded.end_offset:020d}-{LEADER_EPOCH:010d}.checkpoint")
    write_snapshot_file(path, written.values, epoch=LEADER_EPOCH,
                        last_timestamp_ms=max(0, image.provenance.timestamp_ms))
    return path, len(written.values)


def write_snapshot_file(path: str, values: list[bytes], *, epoch: int, last_timestamp_ms: int,
                        records_per_batch: int = DEFAULT_RECORDS_PER_BATCH) -> None:
    """Kafka's snapshot file layout: a SnapshotHeader control batch at offset 0, the records in
    batches with contiguous offsets, a SnapshotFooter control batch; written to ``.part`` and renamed."""
    from kraftlog.engine.records import batch as batch_codec
    from kraftlog.engine.records import metadata as codec

    _, header = codec.encode_control("SnapshotHeaderRecord", 0, {"LastContainedLogTimestamp": last_timestamp_ms})
    _, footer = codec.encode_control("SnapshotFooterRecord", 0, {})
    part = path + ".part"
    with open(part, "wb") as f:
        f.write(batch_codec.build_control_batch(batch_codec.CONTROL_SNAPSHOT_HEADER, header, base_offset=0,
                                                partition_leader_epoch=epoch, timestamp_ms=last_timestamp_ms))
        offset = 1
        for i in range(0, len(values), records_per_batch):
            chunk = values[i:i + records_per_batch]
            f.write(batch_codec.build_batch_from_values(chunk, base_offset=offset, partition_leader_epoch=epoch,
                                                        timestamp_ms=last_timestamp_ms))
            offset += len(chunk)
        f.write(batch_codec.build_control_batch(batch_codec.CONTROL_SNAPSHOT_FOOTER, footer, base_offset=offset,
                                                partition_leader_epoch=epoch, timestamp_ms=last_timestamp_ms))
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)
