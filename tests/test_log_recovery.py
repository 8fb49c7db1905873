"""Proves recovery on open: a torn or garbage tail of the last segment is truncated (TOLERATE) or
reported (STRICT); corruption that a torn tail cannot explain is reported with file and position
in every mode; missing or garbage indexes are rebuilt; leftovers of interrupted operations are
removed; the epoch cache is trimmed to, and completed from, the recovered log."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from kraftlog.engine.log.epoch_cache import CHECKPOINT_NAME
from kraftlog.engine.log.errors import LogCorruptionError
from kraftlog.engine.log.log import CLEAN_SHUTDOWN_NAME, Log, LogConfig
from kraftlog.engine.log.recovery import RecoveryMode

pytestmark = pytest.mark.twin

CFG = LogConfig(segment_bytes=2048, index_interval_bytes=256)
STRICT = LogConfig(segment_bytes=2048, index_interval_bytes=256, recovery_mode=RecoveryMode.STRICT)


def values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode().ljust(30, b"#") for i in range(n)]


def offsets(log: Log) -> list[int]:
    out = []
    for b in log.batches():
        mr = MemoryRecords(bytes(b))
        while mr.has_next():
            batch = mr.next_batch()
            assert batch.validate_crc()
            out += [r.offset for r in batch]
    return out


def make_log(path: Path, batches: int = 30) -> list[tuple[int, int]]:
    """A cleanly closed log; returns (base offset, size) of each segment's batches' positions."""
    with Log(path, CFG) as log:
        for i in range(batches):
            log.append_as_leader(values(3, f"b{i}"), 1 + i // 10)
    return segments(path)


def segments(path: Path) -> list[Path]:
    return sorted(path.glob("*.log"))


def batch_positions(seg: Path) -> list[int]:
    data, pos, out = seg.read_bytes(), 0, []
    while pos < len(data):
        out.append(pos)
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    return out


def crash(path: Path) -> None:
    """What a crash leaves: no clean-shutdown marker."""
    os.remove(path / CLEAN_SHUTDOWN_NAME)


@pytest.mark.parametrize("tail", ["cut", "garbage", "zeros"])
def test_torn_tail_is_truncated_in_tolerant_mode(tmp_path, tail):
    make_log(tmp_path)
    last = segments(tmp_path)[-1]
    positions = batch_positions(last)
    data = last.read_bytes()
    if tail == "cut":
        last.write_bytes(data[: positions[-1] + 40])
    elif tail == "garbage":
        last.write_bytes(data + os.urandom(300))
    else:
        last.write_bytes(data[: positions[-1] + 70] + bytes(4096))
    crash(tmp_path)
    with Log(tmp_path, CFG) as log:
        assert log.recovered_unclean and log.truncated_bytes_on_open > 0
        expected_end = 90 if tail == "garbage" else 87
        assert log.end_offset == expected_end and offsets(log) == list(range(expected_end))
        log.append_as_leader(values(1, "after"), 5)
        assert offsets(log)[-1] == expected_end
        appended = len(list(log.batches(expected_end))[0])
    assert last.stat().st_size == (len(data) if tail == "garbage" else positions[-1]) + appended


def test_strict_mode_reports_a_torn_tail_and_changes_nothing(tmp_path):
    make_log(tmp_path)
    last = segments(tmp_path)[-1]
    data = last.read_bytes()
    last.write_bytes(data[:-7])
    crash(tmp_path)
    with pytest.raises(LogCorruptionError) as err:
        Log(tmp_path, STRICT)
    assert err.value.path == str(last) and err.value.position == batch_positions(last)[-1]
    assert last.read_bytes() == data[:-7]


@pytest.mark.parametrize("config", [CFG, STRICT], ids=["tolerant", "strict"])
def test_corrupt_batch_followed_by_valid_data_is_reported(tmp_path, config):
    make_log(tmp_path)
    last = segments(tmp_path)[-1]
    positions = batch_positions(last)
    data = bytearray(last.read_bytes())
    data[positions[1] + 70] ^= 0x01  # a record byte of the second batch: CRC mismatch
    last.write_bytes(bytes(data))
    crash(tmp_path)
    with pytest.raises(LogCorruptionError, match="followed by valid data") as err:
        Log(tmp_path, config)
    assert (err.value.path, err.value.position) == (str(last), positions[1])
    assert last.read_bytes() == bytes(data)  # nothing was truncated


def test_corruption_in_a_non_last_segment_is_reported(tmp_path):
    make_log(tmp_path)
    first = segments(tmp_path)[0]
    data = bytearray(first.read_bytes())
    data[-5] ^= 0xFF  # the tail of the first segment
    first.write_bytes(bytes(data))
    crash(tmp_path)
    with pytest.raises(LogCorruptionError, match="not the last") as err:
        Log(tmp_path, CFG)
    assert err.value.path == str(first) and err.value.position == batch_positions(first)[-1]


def test_a_missing_middle_segment_is_reported(tmp_path):
    make_log(tmp_path)
    segs = segments(tmp_path)
    assert len(segs) >= 3
    os.remove(segs[1])
    with pytest.raises(LogCorruptionError, match="next one starts"):
        Log(tmp_path, CFG)


def test_an_offset_that_does_not_continue_the_log_is_reported(tmp_path):
    """The base offset is outside the CRC: recovery checks continuity itself."""
    make_log(tmp_path)
    last = segments(tmp_path)[-1]
    positions = batch_positions(last)
    data = bytearray(last.read_bytes())
    data[positions[2]:positions[2] + 8] = (10**6).to_bytes(8, "big")
    last.write_bytes(bytes(data))
    crash(tmp_path)
    with pytest.raises(LogCorruptionError, match="does not follow") as err:
        Log(tmp_path, CFG)
    assert err.value.position == positions[2]


def test_missing_indexes_are_rebuilt_even_after_a_clean_shutdown(tmp_path):
    make_log(tmp_path, 60)
    index_files = sorted(tmp_path.glob("*index"))
    before = {p: p.read_bytes() for p in index_files}
    for p in index_files:
        os.remove(p)
    with Log(tmp_path, CFG) as log:
        assert log.recovered_unclean and offsets(log) == list(range(180))
        assert log.read(100).records.tobytes()[:8] == (99).to_bytes(8, "big")
    assert {p: p.read_bytes() for p in index_files} == before


def test_leftovers_of_interrupted_operations_are_removed(tmp_path):
    make_log(tmp_path)
    for name in ["00000000000000000003.log.swap", "00000000000000000000.log.deleted", "leader-epoch-checkpoint.tmp",
                 "00000000000000099999.index", "00000000000000099999.timeindex"]:
        (tmp_path / name).write_bytes(b"junk")
    with Log(tmp_path, CFG) as log:
        assert offsets(log) == list(range(90))
    names = set(os.listdir(tmp_path))
    assert not any(n.endswith((".swap", ".deleted", ".tmp")) or n.startswith("00000000000000099999") for n in names)


def test_epoch_cache_is_trimmed_to_and_completed_from_the_log(tmp_path):
    make_log(tmp_path)  # epochs 1, 2, 3 start at 0, 30, 60
    crash(tmp_path)
    (tmp_path / CHECKPOINT_NAME).write_text("0\n2\n1 0\n9 500\n")  # ahead of the log, epochs missing
    with Log(tmp_path, CFG) as log:
        assert log.epoch_entries() == [(1, 0), (2, 30), (3, 60)]
        assert log.end_offset_for_epoch(2) == (2, 60)


def test_empty_and_fresh_directories_open(tmp_path):
    with Log(tmp_path / "new", CFG) as log:
        assert (log.start_offset, log.end_offset) == (0, 0)
        assert len(log.read(0).records) == 0
    crash(tmp_path / "new")
    with Log(tmp_path / "new", STRICT) as log:
        assert log.end_offset == 0
