"""Proves the history analytics on real Spark (local[2]) against a record-by-record Python model of
the same logs: leader elections per broker per hour, ISR shrinks/expands per broker, leaderless
partitions over time (the last count equals the single-node image's leaderless partitions),
topic creation/deletion churn per hour and fenced-broker intervals, grouped by cluster across a
fleet; the Parquet tables and the text summary are written."""

from __future__ import annotations

import collections
import os
import uuid

import pytest

from kraftlog.engine.image.logload import load_log_dir
from kraftlog.engine.pipeline import history as hist
from kraftlog.engine.pipeline import sample
from kraftlog.engine.records import metadata as codec

pytestmark = pytest.mark.slow

PER_BATCH, INTERVAL_MS = 50, 10 * 60_000  # six batches an hour
HOUR_MS = 3_600_000


def leaderless_records() -> list[bytes]:
    """Partitions losing and regaining leaders, and a deleted topic with a leaderless partition."""
    a, b = uuid.UUID(int=0xAA), uuid.UUID(int=0xBB)
    part = {"Replicas": [0, 1, 2], "Isr": [0, 1, 2], "Leader": 0, "LeaderEpoch": 0, "PartitionEpoch": 0}
    out = [codec.encode_record("TopicRecord", 0, {"Name": "lonely", "TopicId": a}),
           codec.encode_record("TopicRecord", 0, {"Name": "doomed", "TopicId": b})]
    out += [codec.encode_record("PartitionRecord", 0, {"PartitionId": p, "TopicId": t, **part})
            for t in (a, b) for p in range(3)]
    change = [(a, 0, -1), (a, 1, -1), (b, 2, -1), (a, 1, 2), (a, 2, -1)]
    out += [codec.encode_record("PartitionChangeRecord", 0, {"TopicId": t, "PartitionId": p, "Leader": leader})
            for t, p, leader in change]
    out.append(codec.encode_record("RemoveTopicRecord", 0, {"TopicId": b}))
    return out


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("hist")
    logs = {}
    for k, name in enumerate(("alpha", "beta")):
        values = sample.workload_values(400 + 200 * k, 600, seed=k + 3, replicas_per_broker=100)
        values += leaderless_records()
        sample.write_log_dir(root / name, values, segment_bytes=32 << 10, per_batch=PER_BATCH,
                             batch_interval_ms=INTERVAL_MS)
        logs[name] = values
    return root, logs


def model(values: list[bytes]) -> dict:
    """The expected tables, record by record."""
    elections = collections.Counter()
    shrinks, expands = collections.Counter(), collections.Counter()
    churn = collections.Counter()
    isr: dict = {}
    fenced: dict[int, bool] = {}
    intervals = []
    for offset, value in enumerate(values):
        hour = (sample.START_MS + (offset // PER_BATCH) * INTERVAL_MS) // HOUR_MS
        rec = codec.decode_record(value)
        d, kind = rec.data, rec.record_type
        if kind == "PartitionRecord":
            isr[(d["TopicId"], d["PartitionId"])] = list(d["Isr"])
        elif kind == "PartitionChangeRecord":
            if d["Leader"] >= 0:
                elections[(hour, d["Leader"])] += 1
            if d["Isr"] is not None:
                key = (d["TopicId"], d["PartitionId"])
                before, after = isr[key], list(d["Isr"])
                for b in set(before) - set(after):
                    shrinks[b] += 1
                for b in set(after) - set(before):
                    expands[b] += 1
                isr[key] = after
        elif kind in ("TopicRecord", "RemoveTopicRecord"):
            churn[(hour, kind)] += 1
        if kind in ("RegisterBrokerRecord", "FenceBrokerRecord", "UnfenceBrokerRecord"):
            broker = d.get("BrokerId", d.get("Id"))
            now = d["Fenced"] if kind == "RegisterBrokerRecord" else kind == "FenceBrokerRecord"
            if now and not fenced.get(broker, False):
                intervals.append([broker, offset, None])
            elif not now and fenced.get(broker, False):
                next(iv for iv in reversed(intervals) if iv[0] == broker)[2] = offset
            fenced[broker] = now
    return {"elections": elections, "shrinks": shrinks, "expands": expands, "churn": churn,
            "intervals": sorted(tuple(iv) for iv in intervals)}


def test_history_tables_match_a_record_by_record_model(spark, fleet, tmp_path):
    """Every table, per cluster, equals the Python model; summary.txt names every cluster."""
    root, logs = fleet
    frames = hist.history(hist.read_for_history(spark, str(root)))
    text = hist.write_history(frames, str(tmp_path / "out"))
    for name in hist.TABLES:
        assert os.path.isdir(tmp_path / "out" / name)
    back = {name: spark.read.parquet(str(tmp_path / "out" / name)) for name in hist.TABLES}
    for cluster, values in logs.items():
        want = model(values)
        where = f"cluster = '{cluster}'"
        got_elections = {(int(r.hour.timestamp() * 1000) // HOUR_MS, r.broker_id): r.elections
                         for r in back["leader_elections"].where(where).collect()}
        assert got_elections == dict(want["elections"]) and got_elections
        isr_rows = back["isr_changes"].where(where).collect()
        assert {r.broker_id: r.shrinks for r in isr_rows if r.shrinks} == dict(want["shrinks"])
        assert {r.broker_id: r.expands for r in isr_rows if r.expands} == dict(want["expands"])
        churn = {}
        for r in back["topic_churn"].where(where).collect():
            hour = int(r.hour.timestamp() * 1000) // HOUR_MS
            if r.created:
                churn[(hour, "TopicRecord")] = r.created
            if r.deleted:
                churn[(hour, "RemoveTopicRecord")] = r.deleted
        assert churn == dict(want["churn"])
        got_intervals = sorted((r.broker_id, r.fenced_offset, r.unfenced_offset)
                               for r in back["fenced_intervals"].where(where).collect())
        assert got_intervals == want["intervals"]
        image = load_log_dir(root / cluster)
        leaderless_now = sum(1 for name in image.topics.topic_names()
                             for p in image.topics.partitions_of(name) if p.leader == -1)
        series = sorted((r.hour, r.leaderless_partitions, r.peak_leaderless_partitions)
                        for r in back["leaderless"].where(where).collect())
        assert leaderless_now == 2 and series[-1][1] == leaderless_now
        assert max(peak for _, _, peak in series) == 3  # a0, a1 and b2 at once, before a1 recovered
        assert f"cluster {cluster}:" in text
    frames["records"].unpersist()


def run_cli(argv: list[str]) -> int:
    """`kraftlog spark ...` through its own parser (the group is wired into cli.COMMANDS by the lead)."""
    import argparse

    from kraftlog.engine.cli import spark_cmd

    parser = argparse.ArgumentParser(prog="kraftlog spark")
    spark_cmd.register(parser)
    args = parser.parse_args(argv)
    return args.run(args)


def test_cli_replay_writes_parquet_and_names_bad_paths(spark, fleet, tmp_path, capsys):
    """The CLI writes the replay tables and prints their row counts; a missing path is one typed
    error naming it. (The history subcommand runs the same write_history as the test above.)"""
    from kraftlog.engine.cli.spark_cmd import SparkJobError

    root, logs = fleet
    assert run_cli(["replay", str(root / "alpha"), "--out", str(tmp_path / "r"), "--master", "local[2]"]) == 0
    printed = capsys.readouterr().out
    image = load_log_dir(root / "alpha")
    assert f"partitions {sum(len(image.topics.partitions_of(n)) for n in image.topics.topic_names())}" in printed
    assert os.path.isdir(tmp_path / "r" / "partitions")
    with pytest.raises(SparkJobError, match="nowhere"):
        run_cli(["replay", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x"), "--master", "local[2]"])
