"""Proves the rows beside etcd (bench/rows_etcd.py): they are registered with the report; without an
etcd binary each says "etcd not installed" (in results.json and the Markdown, not as a failure);
with etcd, a short run of real clusters gives positive figures on both sides and ratios that are
their quotients; rounds alternate so neither system always runs first."""

from __future__ import annotations

import os
import sys

import pytest

from kraftlog.bench import report as harness
from kraftlog.bench import rows_etcd as re_

ROW_NAMES = ("raft.commit_p50_vs_etcd", "raft.cpu_per_commit_vs_etcd", "raft.throughput_vs_etcd")
needs_etcd = pytest.mark.skipif(re_.etcd_binary() is None, reason="etcd not installed (make install unpacks it)")


def test_rows_are_registered_and_selectable_alone():
    """`kraftlog bench --only '*_vs_etcd'` runs these three rows and nothing else."""
    suite = harness.discover()
    for name in ROW_NAMES:
        assert suite.rows[name] is re_.ROWS[name]
    assert harness.select(suite.rows, ["*_vs_etcd"]) == list(ROW_NAMES)


def test_binary_is_found_in_the_search_path_only(tmp_path):
    """etcd_binary looks where it is told (the venv's bin, then PATH), for an executable file."""
    empty, with_etcd = tmp_path / "empty", tmp_path / "bin"
    empty.mkdir()
    with_etcd.mkdir()
    stub = with_etcd / "etcd"
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    assert re_.etcd_binary(str(empty)) is None
    assert re_.etcd_binary(os.pathsep.join([str(empty), str(with_etcd)])) == str(stub)


def test_without_etcd_every_row_says_so(tmp_path, monkeypatch):
    """With etcd neither beside the interpreter nor on PATH, each row is present in the report,
    keeps the contract, measures nothing and says "etcd not installed"; the run has no errors."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert re_.etcd_binary() is None
    suite = harness.Suite(rows={name: re_.ROWS[name] for name in ROW_NAMES})
    report = harness.run(quick=True, only=None, out_dir=tmp_path / "out", suite=suite)
    assert [r["name"] for r in report["rows"]] == list(ROW_NAMES)
    for r in report["rows"]:
        assert not r.get("error")
        assert r["skipped"] == re_.ETCD_NOT_INSTALLED
        assert r["value"] is None and r["peer_value"] is None and r["ratio"] is None and r["met"] is False
    md = (tmp_path / "out" / "results.md").read_text()
    assert md.count("skipped: etcd not installed") == len(ROW_NAMES)


def test_grpc_messages_are_etcds_protobuf_encoding():
    """PutRequest{key=1, value=2} and TxnRequest{success=2: RequestOp{request_put=2}} as protobuf
    lays them out; TxnResponse.succeeded is read past the header, and false when absent."""
    assert re_.pb_put(b"k", b"vv") == b"\x0a\x01k\x12\x02vv"
    put = re_.pb_put(b"k", b"v" * 200)  # a length over 127 takes a two-byte varint
    assert put == b"\x0a\x01k\x12\xc8\x01" + b"v" * 200
    assert re_.pb_txn([b"a", b"b"], b"v") == b"".join(
        b"\x12" + bytes([len(op)]) + op for op in (b"\x12\x06" + re_.pb_put(k, b"v") for k in (b"a", b"b")))
    header = b"\x0a\x04\x08\x01\x10\x02"  # ResponseHeader{cluster_id 1, member_id 2}
    assert re_.pb_txn_succeeded(header + b"\x10\x01")
    assert not re_.pb_txn_succeeded(header)
    assert not re_.pb_txn_succeeded(header + b"\x10\x00")


class FakeSide:
    """A side that records when it ran; its 'nodes' are this process."""

    def __init__(self, name: str, log: list[str], latency_ms: float):
        self.name, self.log, self.latency_ms = name, log, latency_ms
        self.pids = [os.getpid()]

    def sequential(self, count: int) -> list[float]:
        self.log.append(self.name)
        return [self.latency_ms] * count


def test_rounds_alternate_and_tally_every_write():
    """After one warm-up each, rounds run a, b, then b, a, ...; every timed write is tallied."""
    log: list[str] = []
    tallies = re_.alternate_rounds([FakeSide("a", log, 1.0), FakeSide("b", log, 2.0)], 3, 10, 5)
    assert log == ["a", "b", "a", "b", "b", "a", "a", "b"]
    assert tallies["a"].writes == tallies["b"].writes == 30
    assert tallies["a"].percentile_ms(50) == 1.0 and tallies["b"].percentile_ms(99) == 2.0
    assert tallies["a"].cpu_s >= 0 and len(tallies["b"].round_cpu_per_commit_ms) == 3


@needs_etcd
def test_sequential_rows_beside_a_real_etcd():
    """A short run (one round of 40 writes each: etcd over gRPC, etcd through its gateway, kraftlog)
    of a 3-node etcd and a 3-voter raftnode cluster: p50s, p99s and CPU per commit are positive,
    and each ratio is etcd's (gRPC) over ours."""
    binary = re_.etcd_binary()
    tallies = re_.sequential_tallies(binary, re_.SequentialPlan(rounds=1, writes_per_round=40, warmup=5))
    commit = harness.check_row(re_.commit_p50_row(tallies, "etcd"), "raft.commit_p50_vs_etcd")
    assert commit["value"] > 0 and commit["peer_value"] > 0
    assert commit["ratio"] == pytest.approx(commit["peer_value"] / commit["value"])
    assert commit["p99_ms"] >= commit["value"] and commit["etcd_p99_ms"] >= commit["peer_value"]
    assert commit["samples"] == commit["etcd_samples"] == 40
    assert commit["gateway_p99_ms"] >= commit["gateway_p50_ms"] > 0
    cpu = harness.check_row(re_.cpu_row(tallies, "etcd"), "raft.cpu_per_commit_vs_etcd")
    assert cpu["value"] > 0 and cpu["peer_value"] > 0
    assert cpu["ratio"] == pytest.approx(cpu["peer_value"] / cpu["value"])
    assert cpu["value"] == pytest.approx(cpu["cpu_s"] / cpu["commits"] * 1000)
    assert cpu["rounds_ms"] == [pytest.approx(cpu["value"])] and cpu["spread"] == 0
    assert cpu["gateway_cpu_per_commit_ms"] > 0


@needs_etcd
def test_throughput_row_beside_a_real_etcd():
    """One short round of each load: every rate is positive, the peer is etcd's faster load, and the
    ratio is ours over it."""
    binary = re_.etcd_binary()
    r = harness.check_row(re_.throughput_row(re_.throughput_result(binary, 1, 0.5), binary, scale="test"),
                          "raft.throughput_vs_etcd")
    assert r["value"] > 0 and r["peer_value"] > 0
    assert set(r["etcd_by_load"]) == {load.label for load in re_.ETCD_LOADS}
    assert all(rate > 0 for rate in r["etcd_by_load"].values())
    assert r["peer_value"] == max(r["etcd_by_load"].values())
    assert r["ratio"] == pytest.approx(r["value"] / r["peer_value"])
