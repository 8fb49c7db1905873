"""History analytics over metadata logs, per cluster (a fleet is grouped by cluster).

Tables (DataFrames; ``write_history`` writes each as Parquet plus summary.txt):
    leader_elections     cluster, hour, broker_id, elections: PartitionChangeRecords that made
                         broker_id the leader (leader -2 = unchanged and -1 = none are not elections)
    isr_changes          cluster, broker_id, shrinks, expands: per PartitionChangeRecord with an
                         ISR, the brokers it removed from / added to the partition's previous ISR
                         (the last ISR a PartitionRecord or change gave it)
    leaderless           cluster, hour, leaderless_partitions, peak_leaderless_partitions:
                         partitions without a leader at the end of each hour with a leadership
                         event (the count holds until the next one) and the most at any moment
                         of that hour; deleting a topic removes its partitions from the count
    topic_churn          cluster, hour, created, deleted (TopicRecord / RemoveTopicRecord)
    fenced_intervals     cluster, broker_id, fenced_at, fenced_offset, unfenced_at, unfenced_offset,
                         fenced_s (unfenced_* null: still fenced at the end of the log). Fencing
                         comes from RegisterBrokerRecord.Fenced, Fence/UnfenceBrokerRecord and
                         BrokerRegistrationChangeRecord; an UnregisterBrokerRecord ends an interval.
Hours are the batch timestamps truncated to the hour (UTC).
"""

from __future__ import annotations

import os

HISTORY_TYPES = ("TopicRecord", "RemoveTopicRecord", "PartitionRecord", "PartitionChangeRecord",
                 "RegisterBrokerRecord", "UnregisterBrokerRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
                 "BrokerRegistrationChangeRecord")
TABLES = ("leader_elections", "isr_changes", "leaderless", "topic_churn", "fenced_intervals")
GONE = -3  # leader value of a synthetic row: the partition's topic was deleted


def read_for_history(spark, paths, *, on_corrupt: str = "fail"):
    reader = spark.read.format("kraftlog").option("recordTypes", ",".join(HISTORY_TYPES))
    if on_corrupt != "fail":
        reader = reader.option("onCorrupt", on_corrupt)
    return reader.load(paths if isinstance(paths, str) else list(paths))


def history(raw) -> dict:
    """The history tables from raw rows, plus "records": the persisted input (unpersist when done)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    records = (raw.where(F.col("record_type").isin(*HISTORY_TYPES))
               .select("cluster", "offset", "timestamp", "record_type", "topic_id", "partition", "leader", "isr",
                       "broker_id", "fenced")
               .withColumn("hour", F.date_trunc("hour", "timestamp"))
               .persist(StorageLevel.MEMORY_AND_DISK))
    return {"leader_elections": _elections(records), "isr_changes": _isr_changes(records),
            "leaderless": _leaderless(records), "topic_churn": _churn(records),
            "fenced_intervals": _fenced(records), "records": records}


def _elections(recs):
    from pyspark.sql import functions as F

    return (recs.where((F.col("record_type") == "PartitionChangeRecord") & (F.col("leader") >= 0))
            .groupBy("cluster", "hour", F.col("leader").alias("broker_id"))
            .agg(F.count("*").alias("elections")))


def _partition_window(order="offset"):
    from pyspark.sql import Window

    return Window.partitionBy("cluster", "topic_id", "partition").orderBy(order)


def _isr_changes(recs):
    from pyspark.sql import functions as F

    with_isr = (recs.where(F.col("record_type").isin("PartitionRecord", "PartitionChangeRecord")
                           & F.col("isr").isNotNull())
                .withColumn("previous", F.lag("isr").over(_partition_window())))
    changes = with_isr.where((F.col("record_type") == "PartitionChangeRecord") & F.col("previous").isNotNull())
    shrinks = (changes.select("cluster", F.explode(F.array_except("previous", "isr")).alias("broker_id"))
               .groupBy("cluster", "broker_id").agg(F.count("*").alias("shrinks")))
    expands = (changes.select("cluster", F.explode(F.array_except("isr", "previous")).alias("broker_id"))
               .groupBy("cluster", "broker_id").agg(F.count("*").alias("expands")))
    return (shrinks.join(expands, ["cluster", "broker_id"], "full")
            .select("cluster", "broker_id", F.coalesce("shrinks", F.lit(0)).alias("shrinks"),
                    F.coalesce("expands", F.lit(0)).alias("expands")))


def _leaderless(recs):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = ["cluster", "topic_id", "partition"]
    moves = recs.where((F.col("record_type") == "PartitionRecord")
                        | ((F.col("record_type") == "PartitionChangeRecord") & (F.col("leader") != -2)))
    moves = moves.select(*keys, "offset", "hour", "leader")
    # A deleted topic's partitions leave the count: one synthetic row per partition at the delete.
    partitions = moves.select(*keys).distinct()
    removed = (recs.where(F.col("record_type") == "RemoveTopicRecord").select("cluster", "topic_id", "offset", "hour")
               .join(partitions, ["cluster", "topic_id"])
               .select(*keys, "offset", "hour", F.lit(GONE).alias("leader")))
    events = moves.unionByName(removed).withColumn("previous", F.lag("leader").over(_partition_window()))
    step = (F.when(F.col("leader") == -1, 1).otherwise(0)
            - F.when(F.col("previous") == -1, 1).otherwise(0))
    running = Window.partitionBy("cluster").orderBy("offset").rowsBetween(Window.unboundedPreceding, 0)
    counted = (events.withColumn("step", step).where(F.col("step") != 0)
               .withColumn("leaderless_partitions", F.sum("step").over(running)))
    return (counted.groupBy("cluster", "hour")
            .agg(F.max_by("leaderless_partitions", "offset").alias("leaderless_partitions"),
                 F.max("leaderless_partitions").alias("peak_leaderless_partitions")))


def _churn(recs):
    from pyspark.sql import functions as F

    return (recs.where(F.col("record_type").isin("TopicRecord", "RemoveTopicRecord"))
            .groupBy("cluster", "hour")
            .agg(F.count(F.when(F.col("record_type") == "TopicRecord", 1)).alias("created"),
                 F.count(F.when(F.col("record_type") == "RemoveTopicRecord", 1)).alias("deleted")))


def _fenced(recs):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    state = (recs.where(F.col("record_type").isin("RegisterBrokerRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
                                                  "BrokerRegistrationChangeRecord", "UnregisterBrokerRecord"))
             .select("cluster", "broker_id", "offset", "timestamp",
                     F.when(F.col("record_type") == "UnregisterBrokerRecord", F.lit(False))
                     .otherwise(F.col("fenced")).alias("fenced"))
             .where(F.col("fenced").isNotNull()))
    per_broker = Window.partitionBy("cluster", "broker_id").orderBy("offset")
    edges = (state.withColumn("previous", F.lag("fenced").over(per_broker))
             .where(F.col("previous").isNull() | (F.col("previous") != F.col("fenced"))))
    intervals = (edges.withColumn("next_at", F.lead("timestamp").over(per_broker))
                 .withColumn("next_offset", F.lead("offset").over(per_broker))
                 .where(F.col("fenced")))
    return intervals.select(
        "cluster", "broker_id", F.col("timestamp").alias("fenced_at"), F.col("offset").alias("fenced_offset"),
        F.col("next_at").alias("unfenced_at"), F.col("next_offset").alias("unfenced_offset"),
        ((F.unix_micros("next_at") - F.unix_micros("timestamp")).cast("double") / 1e6).alias("fenced_s"))


def summary(frames: dict) -> str:
    """A short text report per cluster."""
    from pyspark.sql import functions as F

    recs = frames["records"]
    spans = {r.cluster: r for r in recs.groupBy("cluster").agg(
        F.count("*").alias("records"), F.min("timestamp").alias("first"), F.max("timestamp").alias("last"),
        F.max("offset").alias("last_offset")).collect()}
    elections = {r.cluster: r for r in frames["leader_elections"].groupBy("cluster").agg(
        F.sum("elections").alias("total")).collect()}
    top = {}
    for r in (frames["leader_elections"].groupBy("cluster", "broker_id").agg(F.sum("elections").alias("n"))
              .orderBy(F.desc("n"), "broker_id").collect()):
        top.setdefault(r.cluster, []).append((r.broker_id, r.n))
    isr = {r.cluster: r for r in frames["isr_changes"].groupBy("cluster").agg(
        F.sum("shrinks").alias("shrinks"), F.sum("expands").alias("expands")).collect()}
    leaderless = {r.cluster: r for r in frames["leaderless"].groupBy("cluster").agg(
        F.max("peak_leaderless_partitions").alias("peak"),
        F.max_by("leaderless_partitions", "hour").alias("latest")).collect()}
    churn = {r.cluster: r for r in frames["topic_churn"].groupBy("cluster").agg(
        F.sum("created").alias("created"), F.sum("deleted").alias("deleted")).collect()}
    fenced = {r.cluster: r for r in frames["fenced_intervals"].groupBy("cluster").agg(
        F.count("*").alias("n"), F.count(F.when(F.col("unfenced_at").isNull(), 1)).alias("open"),
        F.max("fenced_s").alias("longest")).collect()}
    lines = []
    for cluster in sorted(spans):
        s = spans[cluster]
        e, i, lead, c, f = (elections.get(cluster), isr.get(cluster), leaderless.get(cluster), churn.get(cluster),
                            fenced.get(cluster))
        tops = ", ".join(f"{b} ({n})" for b, n in top.get(cluster, [])[:3]) or "-"
        lines += [
            f"cluster {cluster}: {s.records} records up to offset {s.last_offset}, {s.first} .. {s.last}",
            f"  leader elections: {e.total if e else 0} (most: brokers {tops})",
            f"  ISR shrinks {i.shrinks if i else 0}, expands {i.expands if i else 0}",
            f"  partitions without leader: peak {lead.peak if lead else 0}, at the end {lead.latest if lead else 0}",
            f"  topics created {c.created if c else 0}, deleted {c.deleted if c else 0}",
            f"  fenced intervals {f.n if f else 0} ({f.open if f else 0} still open), longest closed "
            f"{(f.longest or 0) if f else 0:.0f} s",
        ]
    return "\n".join(lines) + "\n"


def write_history(frames: dict, out_dir: str, *, mode: str = "overwrite") -> str:
    for name in TABLES:
        frames[name].write.mode(mode).parquet(os.path.join(out_dir, name))
    text = summary(frames)
    with open(os.path.join(out_dir, "summary.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    return text
