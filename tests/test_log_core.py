"""Proves the segmented log's public behaviour: leader/follower appends assign or keep offsets and
epochs, reads return zero-copy whole batches that an independent Kafka decoder (kafka-python)
accepts, KIP-392 read errors, rolling, truncation, log-start advance, epochs, flush policy, clean
reopen, and that indexes rebuilt by recovery equal the ones appends wrote."""

from __future__ import annotations

import os

import pytest
from kafka.record.memory_records import MemoryRecords

from kraftlog.engine.log.errors import (
    InvalidAppendError,
    LogClosedError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
)
from kraftlog.engine.log.log import CLEAN_SHUTDOWN_NAME, Isolation, Log, LogConfig
from kraftlog.engine.records.batch import Record, build_batch, build_batch_from_values

pytestmark = pytest.mark.twin

SMALL = LogConfig(segment_bytes=2048, index_interval_bytes=256)


def values(n: int, tag: str, size: int = 20) -> list[bytes]:
    return [f"{tag}-{i}".encode().ljust(size, b".") for i in range(n)]


def kafka_decode(buf) -> list[tuple[int, int, bytes]]:
    """(offset, leader epoch, value) of every record, decoded by kafka-python (CRC checked)."""
    mr, out = MemoryRecords(bytes(buf)), []
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.validate_crc()
        out += [(r.offset, batch.leader_epoch, r.value) for r in batch]
    return out


def everything(log: Log) -> list[tuple[int, int, bytes]]:
    return [rec for b in log.batches() for rec in kafka_decode(b)]


def fill(log: Log, batches: int, per_batch: int = 3, epoch: int = 1, tag: str = "v") -> list[bytes]:
    out = []
    for i in range(batches):
        vs = values(per_batch, f"{tag}{i}")
        log.append_as_leader(vs, epoch)
        out += vs
    return out


def test_leader_append_assigns_offsets_and_epoch(tmp_path):
    """Pre-built batches with arbitrary offsets get consecutive offsets and the leader's epoch."""
    with Log(tmp_path, SMALL) as log:
        b1 = build_batch_from_values(values(3, "a"), base_offset=999, partition_leader_epoch=42)
        info = log.append_as_leader(b1, epoch=5)
        assert (info.first_offset, info.last_offset, info.batch_count) == (0, 2, 1)
        two = build_batch_from_values(values(2, "b")) + build_batch(
            [Record(b"k", b"v"), Record(None, b"w")], base_offset=7)
        info = log.append_as_leader(two, epoch=6)
        assert (info.first_offset, info.last_offset, info.batch_count) == (3, 6, 2)
        assert b1[:8] == (999).to_bytes(8, "big")  # the caller's buffer was not modified
        decoded = everything(log)
        assert [(o, e) for o, e, _ in decoded] == [(0, 5), (1, 5), (2, 5), (3, 6), (4, 6), (5, 6), (6, 6)]
        assert [v for _, _, v in decoded][:3] == values(3, "a")
        assert log.end_offset == 7 and log.epoch_entries() == [(5, 0), (6, 3)]


def test_follower_append_keeps_offsets_and_requires_contiguity(tmp_path):
    with Log(tmp_path / "leader", SMALL) as leader, Log(tmp_path / "follower", SMALL) as follower:
        fill(leader, 4, epoch=2)
        leader.initialize_leader_epoch(3)
        fill(leader, 2, epoch=3, tag="w")
        data = b"".join(bytes(b) for b in leader.batches())
        follower.append_as_follower(data)
        assert everything(follower) == everything(leader)
        assert follower.epoch_entries() == leader.epoch_entries() == [(2, 0), (3, 12)]
        gap = build_batch_from_values(values(1, "x"), base_offset=follower.end_offset + 1)
        with pytest.raises(InvalidAppendError, match="expected 18"):
            follower.append_as_follower(gap)
        assert follower.end_offset == 18


def test_corrupt_or_empty_appends_are_rejected_and_leave_no_trace(tmp_path):
    with Log(tmp_path, SMALL) as log:
        fill(log, 1)
        bad = bytearray(build_batch_from_values(values(2, "z")))
        bad[-1] ^= 1
        with pytest.raises(InvalidAppendError, match="CRC"):
            log.append_as_leader(bad, 1)
        with pytest.raises(InvalidAppendError):
            log.append_as_leader(b"", 1)
        with pytest.raises(InvalidAppendError):
            log.append_as_leader(bytes(bad[:40]), 1)
        assert log.end_offset == 3 and len(everything(log)) == 3


def test_reads_are_zero_copy_whole_batches_within_max_bytes(tmp_path):
    with Log(tmp_path, LogConfig(index_interval_bytes=100)) as log:
        fill(log, 30)
        info = log.read(31, max_bytes=300)
        assert isinstance(info.records, memoryview) and info.records.readonly
        decoded = kafka_decode(info.records)
        assert decoded[0][0] == 30 and 31 in [o for o, _, _ in decoded]  # starts with the batch holding 31
        assert 0 < len(info.records) <= 300
        one = log.read(31, max_bytes=1)  # at least one batch unless asked otherwise
        assert [o for o, _, _ in kafka_decode(one.records)] == [30, 31, 32]
        assert len(log.read(31, max_bytes=1, min_one_batch=False).records) == 0
        assert len(log.read(log.end_offset).records) == 0  # exactly at the end: empty


def test_kip392_read_errors(tmp_path):
    """Out-of-range errors say too small / too large and carry start + HW; known-but-unreadable
    offsets are OffsetNotAvailable."""
    with Log(tmp_path, SMALL) as log:
        fill(log, 10)  # offsets 0..29
        log.advance_start_offset(6)
        log.update_high_watermark(21)
        with pytest.raises(OffsetOutOfRangeError) as err:
            log.read(5)
        assert err.value.too_small and not err.value.too_large
        assert (err.value.log_start_offset, err.value.high_watermark) == (6, 21)
        with pytest.raises(OffsetOutOfRangeError) as err:
            log.read(31)
        assert err.value.too_large and (err.value.log_start_offset, err.value.high_watermark) == (6, 21)
        assert len(log.read(25, isolation=Isolation.LOG_END).records) > 0
        with pytest.raises(OffsetNotAvailableError):
            log.read(25, isolation=Isolation.HIGH_WATERMARK)
        with pytest.raises(OffsetNotAvailableError):
            log.read(30, isolation=Isolation.HIGH_WATERMARK)
        assert len(log.read(21, isolation=Isolation.HIGH_WATERMARK).records) == 0
        committed = [o for b in log.batches(isolation=Isolation.HIGH_WATERMARK) for o, _, _ in kafka_decode(b)]
        assert committed == list(range(6, 21))
        # A follower that learnt a higher HW from its leader: beyond its end but known to exist.
        log.update_high_watermark(40)
        assert log.high_watermark == 30
        with pytest.raises(OffsetNotAvailableError):
            log.read(35)
        with pytest.raises(OffsetOutOfRangeError) as err:
            log.read(41)
        assert err.value.too_large


def test_rolls_by_size_and_age_and_reads_across_segments(tmp_path):
    now = [0]
    cfg = LogConfig(segment_bytes=1024, segment_ms=1000, index_interval_bytes=128)
    with Log(tmp_path, cfg, clock_ms=lambda: now[0]) as log:
        written = fill(log, 40)
        bases = log.segment_base_offsets()
        assert len(bases) > 3 and all((tmp_path / f"{b:020d}.log").stat().st_size <= 1024 for b in bases)
        before = len(bases)
        now[0] = 5000
        fill(log, 1, tag="late")
        assert len(log.segment_base_offsets()) == before + 1  # rolled by age
        assert [v for _, _, v in everything(log)] == written + values(3, "late0")


def test_truncate_to_removes_whole_batches_and_trims_epochs_and_hw(tmp_path):
    with Log(tmp_path, SMALL) as log:
        fill(log, 10, epoch=1)
        fill(log, 10, epoch=2, tag="w")
        log.update_high_watermark(50)
        log.truncate_to(34)  # inside the batch 33..35: it goes whole
        assert log.end_offset == 33 and log.high_watermark == 33
        assert log.epoch_entries() == [(1, 0), (2, 30)]
        assert [o for o, _, _ in everything(log)] == list(range(33))
        log.truncate_to(30)
        assert log.epoch_entries() == [(1, 0)]
        info = log.append_as_leader(values(2, "new"), 3)
        assert info.first_offset == 30 and everything(log)[-1] == (31, 3, values(2, "new")[1])


def test_views_survive_truncation_and_close(tmp_path):
    """A reader's memoryview keeps its bytes after the data is truncated away and the log closed."""
    log = Log(tmp_path, SMALL)
    fill(log, 5)
    view = log.read(9).records
    expected = bytes(view)
    log.truncate_to(3)
    fill(log, 3, tag="other")
    log.close()
    assert bytes(view) == expected


def test_advance_start_offset_deletes_old_segments_and_survives_reopen(tmp_path):
    with Log(tmp_path, SMALL) as log:
        fill(log, 40, epoch=1)
        log.initialize_leader_epoch(2)
        fill(log, 5, epoch=2, tag="e2")
        bases = log.segment_base_offsets()
        assert log.advance_start_offset(bases[2] + 1)
        assert log.segment_base_offsets() == bases[2:]
        assert not (tmp_path / f"{bases[0]:020d}.log").exists()
        assert log.epoch_entries()[0] == (1, bases[2] + 1)
    with Log(tmp_path, SMALL) as log:
        assert log.start_offset == bases[2] + 1
        with pytest.raises(OffsetOutOfRangeError):
            log.read(bases[2])


def test_truncate_fully_and_start_at(tmp_path):
    with Log(tmp_path, SMALL) as log:
        fill(log, 10)
        log.truncate_fully_and_start_at(500)
        assert (log.start_offset, log.end_offset, log.high_watermark) == (500, 500, 500)
        assert log.epoch_entries() == [] and log.segment_base_offsets() == [500]
        log.append_as_leader(values(1, "x"), 4)
    with Log(tmp_path, SMALL) as log:
        assert (log.start_offset, log.end_offset) == (500, 501)
        assert everything(log) == [(500, 4, values(1, "x")[0])]


def test_end_offset_for_epoch_and_last_fetched_epoch(tmp_path):
    with Log(tmp_path, SMALL) as log:
        assert log.last_fetched_epoch == 0 and log.end_offset_for_epoch(1) == (-1, -1)
        fill(log, 2, epoch=1)
        log.initialize_leader_epoch(3)
        assert log.last_fetched_epoch == 3
        fill(log, 2, epoch=3)
        assert log.end_offset_for_epoch(1) == (1, 6)
        assert log.end_offset_for_epoch(2) == (1, 6)
        assert log.end_offset_for_epoch(3) == (3, 12)
        assert log.end_offset_for_epoch(4) == (-1, -1)


def test_clean_reopen_skips_recovery_and_keeps_everything(tmp_path):
    with Log(tmp_path, SMALL) as log:
        written = fill(log, 25)
        epochs = log.epoch_entries()
    assert (tmp_path / CLEAN_SHUTDOWN_NAME).exists()
    with Log(tmp_path, SMALL) as log:
        assert not log.recovered_unclean
        assert not (tmp_path / CLEAN_SHUTDOWN_NAME).exists()  # removed while open
        assert [v for _, _, v in everything(log)] == written and log.epoch_entries() == epochs
        fill(log, 2, tag="more")
    with Log(tmp_path, SMALL) as log:
        assert log.end_offset == 81


def test_rebuilt_indexes_equal_the_appended_ones(tmp_path):
    """After a crash the indexes are rebuilt from the log; the result is byte-identical."""
    with Log(tmp_path, SMALL) as log:
        fill(log, 30)
    index_files = sorted(p for p in os.listdir(tmp_path) if p.endswith("index"))
    before = {p: (tmp_path / p).read_bytes() for p in index_files}
    assert any(len(v) for v in before.values())
    os.remove(tmp_path / CLEAN_SHUTDOWN_NAME)
    for p in index_files:
        (tmp_path / p).write_bytes(os.urandom(len(before[p]) + 5))  # never trusted after a crash
    with Log(tmp_path, SMALL) as log:
        assert log.recovered_unclean
    assert {p: (tmp_path / p).read_bytes() for p in index_files} == before


def test_group_commit_flushes_by_count_and_time(tmp_path):
    now = [0]
    cfg = LogConfig(flush_interval_messages=10, flush_interval_ms=100)
    with Log(tmp_path, cfg, clock_ms=lambda: now[0]) as log:
        log.append_as_leader(values(4, "a"), 1)
        assert log.last_flushed_offset == 0
        log.append_as_leader(values(6, "b"), 1)
        assert log.last_flushed_offset == 10  # 10 messages reached
        log.append_as_leader(values(1, "c"), 1)
        assert not log.flush_if_due()
        now[0] = 150
        assert log.flush_if_due() and log.last_flushed_offset == 11
    with Log(tmp_path, LogConfig()) as log:
        log.append_as_leader(values(1, "d"), 1)
        assert log.last_flushed_offset == log.end_offset  # default: every append is fsynced


def test_offset_for_timestamp(tmp_path):
    with Log(tmp_path, SMALL) as log:
        for i in range(30):
            log.append_as_leader(build_batch_from_values(values(2, f"t{i}"), timestamp_ms=1000 + 10 * i), 1)
        assert log.offset_for_timestamp(1000) == 0
        assert log.offset_for_timestamp(1105) == 22
        assert log.offset_for_timestamp(1290) == 58
        assert log.offset_for_timestamp(5000) is None


def test_closed_log_refuses_work(tmp_path):
    log = Log(tmp_path, SMALL)
    log.close()
    log.close()  # idempotent
    with pytest.raises(LogClosedError):
        log.append_as_leader(values(1, "x"), 1)
    with pytest.raises(LogClosedError):
        log.read(0)
