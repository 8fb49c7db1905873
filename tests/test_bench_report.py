"""Proves the `kraftlog bench` harness: rows run and land in results.json with the contract's keys,
ratios are oriented so higher is better, a failing row is reported (not hidden), charts are PNGs,
and the CLI refuses an --only that matches nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from kraftlog.bench import report as harness
from kraftlog.bench import timing


def test_ratio_is_oriented_so_higher_is_better():
    faster_time = timing.row("t", "s", 1.0, 0.1, peer="p", peer_value=3.0, higher_is_better=False, goal="", met=True)
    faster_rate = timing.row("r", "GB/s", 6.0, 0.1, peer="p", peer_value=2.0, higher_is_better=True, goal="", met=True)
    assert faster_time["ratio"] == pytest.approx(3.0)
    assert faster_rate["ratio"] == pytest.approx(3.0)
    assert timing.row("n", "s", 1.0, 0.0, peer=None, peer_value=None, higher_is_better=False, goal="", met=True)["ratio"] is None


def test_measure_reports_median_and_spread_of_real_runs():
    median, spread = timing.measure(lambda: time.sleep(0.002), repeat=5, warmup=0)
    assert 0.002 <= median < 0.05
    assert spread >= 0


def _sleep_row(quick: bool) -> dict:
    ours, ours_spread = timing.measure(lambda: time.sleep(0.001), repeat=3, warmup=0)
    peer, _ = timing.measure(lambda: time.sleep(0.003), repeat=3, warmup=0)
    ratio_ok = peer / ours >= 1.5
    return timing.row("demo.sleep", "s", ours, ours_spread, peer="3 ms sleep", peer_value=peer,
                      higher_is_better=False, goal=">= 1.5x", met=ratio_ok, scale=10 if quick else None)


def _broken_row(quick: bool) -> dict:
    raise RuntimeError("the peer is not installed")


def _chart(quick: bool) -> dict:
    return {"title": "t", "xlabel": "x", "ylabel": "y", "series": {"a": [[1, 2], [10, 3]], "b": [[1, 1], [10, 5]]},
            "log_x": True}


def test_report_writes_json_markdown_and_charts(tmp_path):
    suite = harness.Suite(rows={"demo.sleep": _sleep_row, "demo.broken": _broken_row}, charts={"demo.chart": _chart})
    report = harness.run(quick=True, only=None, out_dir=tmp_path, suite=suite)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["mode"] == "quick" and saved["kraftlog_version"]
    assert {"cpu", "cores", "memory_gib", "python"} <= set(saved["machine"])
    by_name = {r["name"]: r for r in saved["rows"]}
    good = by_name["demo.sleep"]
    assert set(harness.ROW_KEYS) <= set(good)
    assert good["ratio"] > 1.0 and good["scale"] == 10
    broken = by_name["demo.broken"]
    assert broken["met"] is False and "the peer is not installed" in broken["error"]
    md = (tmp_path / "results.md").read_text()
    assert "demo.sleep (scale 10)" in md and "ERROR: RuntimeError" in md
    assert report["charts"] == [str(tmp_path / "demo.chart.png")]
    assert (tmp_path / "demo.chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_only_selects_by_prefix_and_glob():
    names = ["codec.encode", "codec.decode", "log.append", "crc.segment"]
    assert harness.select(names, ["codec"]) == ["codec.encode", "codec.decode"]
    assert harness.select(names, ["*.a*"]) == ["log.append"]
    assert harness.select(names, None) == names


def test_a_row_that_breaks_the_contract_is_refused():
    with pytest.raises(ValueError, match="lacks"):
        harness.check_row({"name": "x", "value": 1.0}, "x")


def test_cli_refuses_an_unknown_row_with_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "kraftlog.engine.cli.main", "bench", "--only", "no.such.row",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert out.stderr.strip().startswith("kraftlog bench: error: no benchmark matches")
    assert "Traceback" not in out.stderr
