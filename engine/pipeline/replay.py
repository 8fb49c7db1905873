"""Distributed replay: the final metadata image of every cluster, computed as Spark DataFrames.

The single-node loader (engine/image) applies records in offset order; here each field's final
value is an aggregate over the records of its key, so the work spreads over executors and
clusters (every key starts with ``cluster``). Rules, the same as MetadataDelta's:

    topics      TopicRecord creates a topic under its id; RemoveTopicRecord deletes that id (a
                re-created topic has a new id, so it is a new topic). KIP-232 topic epoch = the
                offset of the last record that created the topic or one of its partitions.
    partitions  the last PartitionRecord of (topic id, partition) is the base (it replaces the
                whole registration); each PartitionChangeRecord after it changes only what it
                names: leader -2 = unchanged, null replicas / ISR / recovery state = unchanged;
                the leader epoch moves by one per leader change, the partition epoch by one per
                change record. Field by field, the last change that names the field wins
                (max_by over the offset, null orderings ignored). Partitions of deleted topics go.
                removing / adding replicas, ELR and last-known ELR come from the ``json`` column
                of extras rows (hot rows have none: a PartitionRecord's are empty, a change's
                unchanged); in a change null = unchanged, and a replica change alone leaves them
                as they are (Kafka's PartitionRegistration.merge). directories (the typed column:
                Kafka's base64url uuid text; empty = every replica MIGRATING, also when every
                entry is MIGRATING) are folded over the partition's few directory events in
                offset order: a change with non-empty Directories sets them; one with Replicas
                and no Directories keeps
                a kept replica's directory (MIGRATING when the list is empty) and gives a new one
                UNASSIGNED (Kafka's createDirectoriesFrom, as the single-node loader does).
    brokers     the last RegisterBrokerRecord is the base; FenceBroker / UnfenceBroker /
                BrokerRegistrationChange records after it set fenced (the last one wins) and
                in-controlled-shutdown (once set it stays); UnregisterBrokerRecord at the
                registered epoch removes the broker.
    features    the last FeatureLevelRecord per name; level 0 removes a feature (metadata.version
                is always kept).
    configs     the last ConfigRecord per (resource type, resource, name); a null value deletes,
                and a RemoveTopicRecord deletes its topic's configs set before it (Kafka's
                MetadataDelta; the single-node loader does the same).

Transactions: records between a BeginTransactionRecord and its AbortTransactionRecord, and from
a Begin that never ends, are dropped (the markers are few: collected to the driver, turned into
offset ranges and anti-joined).

Not replayed: client quotas, ACLs, SCRAM, delegation tokens, producer ids.
"""

from __future__ import annotations

import os

from kraftlog.engine.image.image import TOPIC_RESOURCE_TYPE
from kraftlog.engine.pipeline.rows import CORRUPT_RECORD_TYPE

TOPIC_TYPES = ("TopicRecord", "RemoveTopicRecord")
PARTITION_TYPES = ("PartitionRecord", "PartitionChangeRecord")
BROKER_TYPES = ("RegisterBrokerRecord", "UnregisterBrokerRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
                "BrokerRegistrationChangeRecord")
TRANSACTION_TYPES = ("BeginTransactionRecord", "EndTransactionRecord", "AbortTransactionRecord")
REPLAY_TYPES = (*TOPIC_TYPES, *PARTITION_TYPES, *BROKER_TYPES, "FeatureLevelRecord", "ConfigRecord",
                *TRANSACTION_TYPES)
TABLES = ("topics", "partitions", "brokers", "features", "configs")
METADATA_VERSION = "metadata.version"
NO_LEADER_CHANGE = -2
MIGRATING_DIRECTORY = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's DirectoryId.MIGRATING = Uuid(0, 0), base64url
UNASSIGNED_DIRECTORY = "AAAAAAAAAAAAAAAAAAAAAQ"  # DirectoryId.UNASSIGNED = Uuid(0, 1)
# The partition fields only extras rows carry, read from their ``json`` (kafka-dump-log form:
# camelCase names under "data"; a change record omits a null field, so absent = unchanged).
EXTRA_LIST_FIELDS = (("removing_replicas", "removingReplicas"), ("adding_replicas", "addingReplicas"),
                     ("eligible_leader_replicas", "eligibleLeaderReplicas"), ("last_known_elr", "lastKnownElr"))
_EXTRAS_SCHEMA = "data STRUCT<" + ", ".join(f"{j}: ARRAY<INT>" for _, j in EXTRA_LIST_FIELDS) + ">"


def read_for_replay(spark, paths, *, on_corrupt: str = "fail"):
    """The raw rows replay needs (record types pushed into the reader)."""
    reader = spark.read.format("kraftlog").option("recordTypes", ",".join(REPLAY_TYPES))
    if on_corrupt != "fail":
        reader = reader.option("onCorrupt", on_corrupt)
    return reader.load(paths if isinstance(paths, str) else list(paths))


def committed(recs):
    """``recs`` without the records of aborted or still-open transactions."""
    from pyspark.sql import functions as F

    markers = (recs.where(F.col("record_type").isin(*TRANSACTION_TYPES))
               .select("cluster", "offset", "record_type").collect())
    ranges = transaction_ranges((m.cluster, m.offset, m.record_type) for m in markers)
    if not ranges:
        return recs
    spark = recs.sparkSession
    dropped = spark.createDataFrame(ranges, "t_cluster STRING, t_low BIGINT, t_high BIGINT")
    cond = (F.col("cluster") == F.col("t_cluster")) & (F.col("offset") >= F.col("t_low")) \
        & (F.col("offset") <= F.col("t_high"))
    return recs.join(F.broadcast(dropped), cond, "left_anti")


def transaction_ranges(markers) -> list[tuple[str, int, int]]:
    """(cluster, first, last) offset ranges to drop: Begin..Abort, and Begin..end for an open one."""
    by_cluster: dict[str, list[tuple[int, str]]] = {}
    for cluster, offset, kind in markers:
        by_cluster.setdefault(cluster, []).append((offset, kind))
    out = []
    for cluster, items in by_cluster.items():
        open_at = None
        for offset, kind in sorted(items):
            if kind == "BeginTransactionRecord":
                open_at = offset
            elif open_at is not None:
                if kind == "AbortTransactionRecord":
                    out.append((cluster, open_at, offset))
                open_at = None
        if open_at is not None:
            out.append((cluster, open_at, (1 << 63) - 1))
    return out


def replay(raw) -> dict:
    """DataFrames topics, partitions, brokers, features, configs from raw rows (any record types),
    and "records": the persisted input they share (unpersist it when done).

    The input is persisted once and every table filters the cached rows. Besides sparing a
    re-read per table, this sidesteps a pyspark 4.3 issue: the read planned by filter pushdown is
    kept on the data source object that every scan of one DataFrame shares, so two branches of a
    query over the same DataFrame with different pushed filters (a self-join) would both read
    with one branch's filters.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    records = (_with_partition_extras(raw.where(F.col("record_type").isin(*REPLAY_TYPES))).drop("json")
               .persist(StorageLevel.MEMORY_AND_DISK))
    recs = committed(records)
    topics = _topics(recs)
    return {"topics": topics, "partitions": _partitions(recs, topics), "brokers": _brokers(recs),
            "features": _features(recs), "configs": _configs(recs), "records": records}


def _topics(recs):
    from pyspark.sql import functions as F

    created = (recs.where(F.col("record_type") == "TopicRecord")
               .groupBy("cluster", "topic_id")
               .agg(F.min_by("topic_name", "offset").alias("topic_name"), F.min("offset").alias("created_offset")))
    removed = recs.where(F.col("record_type") == "RemoveTopicRecord").select("cluster", "topic_id").distinct()
    live = created.join(removed, ["cluster", "topic_id"], "left_anti")
    # KIP-232: a partition raises its topic's epoch to the offset of the record that created it.
    firsts = (recs.where(F.col("record_type") == "PartitionRecord")
              .groupBy("cluster", "topic_id", "partition").agg(F.min("offset").alias("first_offset"))
              .groupBy("cluster", "topic_id")
              .agg(F.max("first_offset").alias("partition_offset"), F.count("*").alias("partition_ids"),
                   F.max("partition").alias("max_partition")))
    return (live.join(firsts, ["cluster", "topic_id"], "left")
            .select("cluster", "topic_id", "topic_name",
                    F.coalesce(F.col("max_partition") + 1, F.lit(0)).alias("partition_count"),
                    F.greatest("created_offset", F.coalesce("partition_offset", F.lit(-1))).alias("topic_epoch")))


def _with_partition_extras(recs):
    """``recs`` with removing_replicas, adding_replicas, eligible_leader_replicas and last_known_elr
    parsed from the ``json`` of partition extras rows (null elsewhere). Parsed before the persist
    so the cache holds a few arrays instead of the JSON text."""
    from pyspark.sql import functions as F

    extras = F.col("record_type").isin(*PARTITION_TYPES) & F.col("json").isNotNull()
    data = F.from_json(F.when(extras, F.col("json")), _EXTRAS_SCHEMA).getField("data")
    # directories come typed (rows.py): null = none named (unchanged in a change; every replica
    # MIGRATING in a PartitionRecord, which _partitions' base makes of a null); [] = all MIGRATING
    return recs.select("*", *(data.getField(j).alias(c) for c, j in EXTRA_LIST_FIELDS))


def _partitions(recs, topics):
    from pyspark.sql import functions as F

    keys = ["cluster", "topic_id", "partition"]
    empty_ints, empty_strings = F.array().cast("array<int>"), F.array().cast("array<string>")
    extra_cols = [c for c, _ in EXTRA_LIST_FIELDS]
    # A PartitionRecord names every field: absent lists (hot rows, or ELR before v2) are empty.
    base = (recs.where(F.col("record_type") == "PartitionRecord")
            .select(*keys, "offset", "leader", "leader_epoch", "partition_epoch", "leader_recovery_state",
                    "replicas", "isr", *(F.coalesce(c, empty_ints).alias(c) for c in extra_cols),
                    F.coalesce("directories", empty_strings).alias("directories"))
            .groupBy(*keys)
            .agg(F.max("offset").alias("base_offset"),
                 F.max_by(F.struct("leader", "leader_epoch", "partition_epoch", "leader_recovery_state",
                                   "replicas", "isr", *extra_cols, "directories"), "offset").alias("b")))
    changes = (recs.where(F.col("record_type") == "PartitionChangeRecord")
               .select(*keys, "offset", "leader", "leader_recovery_state", "replicas", "isr", *extra_cols,
                       "directories")
               .join(base.select(*keys, "base_offset"), keys)
               .where(F.col("offset") > F.col("base_offset")))
    moved = F.col("leader") != NO_LEADER_CHANGE
    directory_event = F.col("replicas").isNotNull() | F.col("directories").isNotNull()
    merged = changes.groupBy(*keys).agg(
        F.count("*").alias("n_changes"),
        F.count(F.when(moved, 1)).alias("n_leader_changes"),
        F.max_by("leader", F.when(moved, F.col("offset"))).alias("c_leader"),
        *(_last_named(c) for c in ("leader_recovery_state", "replicas", "isr", *extra_cols)),
        F.collect_list(F.when(directory_event, F.struct("offset", "replicas", "directories"))).alias("dir_events"),
    )
    return (base.join(merged, keys, "left")
            .join(topics.select("cluster", "topic_id", "topic_name"), ["cluster", "topic_id"])
            .select(*keys[:2], "topic_name", "partition",
                    F.coalesce("c_leader", "b.leader").alias("leader"),
                    (F.col("b.leader_epoch") + F.coalesce("n_leader_changes", F.lit(0))).cast("int")
                    .alias("leader_epoch"),
                    (F.col("b.partition_epoch") + F.coalesce("n_changes", F.lit(0))).cast("int")
                    .alias("partition_epoch"),
                    *(F.coalesce(f"c_{c}", f"b.{c}").alias(c)
                      for c in ("leader_recovery_state", "replicas", "isr", *extra_cols)),
                    F.coalesce(_fold_directories(F.col("dir_events")), "b.directories").alias("directories")))


def _last_named(name: str):
    """The value of the last change naming ``name`` (null = the change leaves it unchanged)."""
    from pyspark.sql import functions as F

    return F.max_by(name, F.when(F.col(name).isNotNull(), F.col("offset"))).alias(f"c_{name}")


def _fold_directories(events):
    """The directories after the partition's directory events (changes with Replicas or
    Directories), applied in offset order from the base's replicas and directories. There are
    few per partition (reassignments, directory moves), so a fold over the collected list is cheap."""
    from pyspark.sql import functions as F

    def carry(acc, new_replicas):
        # a kept replica keeps its directory ([] = every one MIGRATING), a new one gets UNASSIGNED
        # (Kafka's createDirectoriesFrom); a result that is all MIGRATING is kept as []
        def one(r):
            at = F.array_position(acc["r"], r)
            kept = F.when(F.size(acc["d"]) == 0, F.lit(MIGRATING_DIRECTORY)).otherwise(acc["d"][(at - 1).cast("int")])
            return F.when(at > 0, kept).otherwise(F.lit(UNASSIGNED_DIRECTORY))
        dirs = F.transform(new_replicas, one)
        return F.when(F.forall(dirs, lambda d: d == F.lit(MIGRATING_DIRECTORY)),
                      F.array().cast("array<string>")).otherwise(dirs)

    def step(acc, e):
        explicit = e["directories"].isNotNull()
        return F.struct(F.coalesce(e["replicas"], acc["r"]).alias("r"),
                        F.when(explicit, e["directories"]).otherwise(carry(acc, e["replicas"])).alias("d"))

    start = F.struct(F.col("b.replicas").alias("r"), F.col("b.directories").alias("d"))
    return F.aggregate(F.array_sort(events), start, step, lambda acc: acc["d"])


def _brokers(recs):
    from pyspark.sql import functions as F

    regs = (recs.where(F.col("record_type") == "RegisterBrokerRecord")
            .groupBy("cluster", "broker_id")
            .agg(F.max("offset").alias("reg_offset"),
                 F.max_by(F.struct("broker_epoch", "fenced", "in_controlled_shutdown", "rack"), "offset").alias("r")))
    later = (recs.where(F.col("record_type").isin("FenceBrokerRecord", "UnfenceBrokerRecord",
                                                  "BrokerRegistrationChangeRecord", "UnregisterBrokerRecord"))
             .select("cluster", "broker_id", "offset", "record_type", "broker_epoch", "fenced",
                     "in_controlled_shutdown")
             .join(regs.select("cluster", "broker_id", "reg_offset", F.col("r.broker_epoch").alias("reg_epoch")),
                   ["cluster", "broker_id"])
             .where(F.col("offset") > F.col("reg_offset")))
    unregistered = F.col("record_type") == "UnregisterBrokerRecord"
    events = later.groupBy("cluster", "broker_id").agg(
        F.max_by("fenced", F.when(~unregistered & F.col("fenced").isNotNull(), F.col("offset"))).alias("e_fenced"),
        F.max(F.when(~unregistered, F.col("in_controlled_shutdown"))).alias("e_ics"),
        F.max(unregistered & (F.col("broker_epoch") == F.col("reg_epoch"))).alias("gone"),
    )
    return (regs.join(events, ["cluster", "broker_id"], "left")
            .where(~F.coalesce("gone", F.lit(False)))
            .select("cluster", "broker_id", F.col("r.broker_epoch").alias("broker_epoch"), F.col("r.rack").alias("rack"),
                    F.coalesce("e_fenced", "r.fenced").alias("fenced"),
                    (F.col("r.in_controlled_shutdown") | F.coalesce("e_ics", F.lit(False)))
                    .alias("in_controlled_shutdown")))


def _features(recs):
    from pyspark.sql import functions as F

    last = (recs.where(F.col("record_type") == "FeatureLevelRecord")
            .groupBy("cluster", "feature_name").agg(F.max_by("feature_level", "offset").alias("feature_level")))
    return last.where((F.col("feature_level") != 0) | (F.col("feature_name") == METADATA_VERSION))


def _configs(recs):
    from pyspark.sql import functions as F

    keys = ["cluster", "config_resource_type", "config_resource_name", "config_name"]
    last = (recs.where(F.col("record_type") == "ConfigRecord")
            .groupBy(*keys).agg(F.max_by("config_value", "offset").alias("config_value"),
                                F.max("offset").alias("config_offset")))
    # A topic's configs die with it: a key survives only if written after the name's last removal.
    names = recs.where(F.col("record_type") == "TopicRecord").select("cluster", "topic_id", "topic_name").distinct()
    removed = (recs.where(F.col("record_type") == "RemoveTopicRecord").select("cluster", "topic_id", "offset")
               .join(names, ["cluster", "topic_id"])
               .groupBy("cluster", "topic_name").agg(F.max("offset").alias("removed_offset"))
               .select("cluster", F.lit(TOPIC_RESOURCE_TYPE).cast("byte").alias("config_resource_type"),
                       F.col("topic_name").alias("config_resource_name"), "removed_offset"))
    last = last.join(removed, ["cluster", "config_resource_type", "config_resource_name"], "left")
    alive = F.col("removed_offset").isNull() | (F.col("config_offset") > F.col("removed_offset"))
    return last.where(F.col("config_value").isNotNull() & alive).drop("config_offset", "removed_offset")


def corrupt_count(raw) -> int:
    """Marker rows of skipped bytes (on_corrupt="skip")."""
    from pyspark.sql import functions as F

    return raw.where(F.col("record_type") == CORRUPT_RECORD_TYPE).count()


def write_replay(frames: dict, out_dir: str, *, mode: str = "overwrite", count: bool = True) -> dict[str, int]:
    """Each table as Parquet under out_dir/<table>; returns row counts read back from the Parquet
    (one small job per table; ``count=False`` skips them and returns {})."""
    counts = {}
    for name in TABLES:
        path = os.path.join(out_dir, name)
        frames[name].write.mode(mode).parquet(path)
        if count:
            counts[name] = frames[name].sparkSession.read.parquet(path).count()
    return counts
