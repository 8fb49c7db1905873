"""Proves the log under injected file-system faults (FaultFileSystem): a failed append (full disk,
torn write, failed fsync, failed checkpoint rename, failed roll) is invisible and the log stays
readable and appendable; a failed group-commit fsync takes the log offline until reopened; and,
hypothesis-driven, after any crash reopening yields a prefix of what was appended that contains
everything fsynced, with the right leader epochs."""

from __future__ import annotations

import contextlib
import errno
import random
import tempfile

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords

from kraftlog.engine.log.errors import LogError, LogOfflineError, LogStorageError
from kraftlog.engine.log.fs import FaultFileSystem
from kraftlog.engine.log.log import Log, LogConfig

pytestmark = pytest.mark.twin

CFG = LogConfig(segment_bytes=1024, index_interval_bytes=128)
GROUP = LogConfig(segment_bytes=400, index_interval_bytes=128, flush_interval_messages=None)
PREALLOCATED = LogConfig(segment_bytes=400, index_interval_bytes=128, flush_interval_messages=None,
                         preallocate_bytes=150)


def values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode().ljust(24, b"~") for i in range(n)]


def contents(log: Log) -> list[tuple[int, int, bytes]]:
    """(offset, leader epoch, value) of every record, decoded by kafka-python (CRC checked)."""
    out = []
    for b in log.batches():
        mr = MemoryRecords(bytes(b))
        while mr.has_next():
            batch = mr.next_batch()
            assert batch.validate_crc()
            out += [(r.offset, batch.leader_epoch, r.value) for r in batch]
    return out


def expect(records: list[tuple[int, bytes]]) -> list[tuple[int, int, bytes]]:
    return [(i, epoch, v) for i, (epoch, v) in enumerate(records)]


def test_full_disk_fails_the_append_cleanly(tmp_path):
    fs = FaultFileSystem()
    with Log(tmp_path, CFG, fs=fs) as log:
        log.append_as_leader(values(3, "a"), 1)
        fs.space_left_bytes = 50  # the next batch (~170 bytes) only partly fits
        with pytest.raises(LogStorageError) as err:
            log.append_as_leader(values(4, "b"), 1)
        assert err.value.errno == errno.ENOSPC and err.value.path.endswith(".log")
        assert log.end_offset == 3 and contents(log) == expect([(1, v) for v in values(3, "a")])
        assert (tmp_path / "00000000000000000000.log").stat().st_size == len(log.read(0).records)
        fs.space_left_bytes = None
        log.append_as_leader(values(2, "c"), 1)
        assert [v for _, _, v in contents(log)] == values(3, "a") + values(2, "c")
    with Log(tmp_path, CFG) as log:
        assert log.end_offset == 5


def test_torn_write_error_is_rolled_back(tmp_path):
    fs = FaultFileSystem()
    with Log(tmp_path, CFG, fs=fs) as log:
        log.append_as_leader(values(2, "a"), 1)
        fs.fail("write", errno=errno.EIO, keep_bytes=30, path_contains=".log")
        with pytest.raises(LogStorageError):
            log.append_as_leader(values(2, "b"), 1)
        log.append_as_leader(values(2, "c"), 1)
        assert [v for _, _, v in contents(log)] == values(2, "a") + values(2, "c")


def test_failed_fsync_per_append_hides_the_append(tmp_path):
    fs = FaultFileSystem()
    with Log(tmp_path, CFG, fs=fs) as log:
        log.append_as_leader(values(2, "a"), 1)
        fs.fail("sync", path_contains=".log")
        with pytest.raises(LogStorageError, match="rolled back"):
            log.append_as_leader(values(2, "b"), 2)
        assert log.end_offset == 2 and log.epoch_entries() == [(1, 0)]
        log.append_as_leader(values(1, "c"), 2)
        assert contents(log) == expect([(1, v) for v in values(2, "a")] + [(2, values(1, "c")[0])])


def test_failed_group_commit_fsync_takes_the_log_offline(tmp_path):
    fs = FaultFileSystem()
    log = Log(tmp_path, GROUP, fs=fs)
    log.append_as_leader(values(2, "a"), 1)
    fs.fail("sync", path_contains=".log")
    with pytest.raises(LogOfflineError):
        log.flush()
    assert [v for _, _, v in contents(log)] == values(2, "a")  # reads keep working
    with pytest.raises(LogOfflineError):
        log.append_as_leader(values(1, "b"), 1)
    log.close()  # no clean marker: the next open recovers
    with Log(tmp_path, GROUP) as again:
        assert again.recovered_unclean and again.end_offset == 2


def test_failed_epoch_checkpoint_fails_the_append(tmp_path):
    fs = FaultFileSystem()
    with Log(tmp_path, CFG, fs=fs) as log:
        log.append_as_leader(values(2, "a"), 1)
        fs.fail("rename", path_contains="leader-epoch")
        with pytest.raises(LogStorageError):
            log.append_as_leader(values(2, "b"), 2)  # a new epoch must be persisted first
        assert log.end_offset == 2 and log.epoch_entries() == [(1, 0)]
        log.append_as_leader(values(1, "c"), 2)
        assert log.epoch_entries() == [(1, 0), (2, 2)]


def test_failed_roll_keeps_the_old_segment_active(tmp_path):
    fs = FaultFileSystem()
    with Log(tmp_path, CFG, fs=fs) as log:
        while len(log.segment_base_offsets()) == 1 and log.size_bytes < 900:
            log.append_as_leader(values(3, "a"), 1)
        fs.fail("open", path_contains="index")
        end = log.end_offset
        with pytest.raises(LogStorageError, match="roll"):
            for _ in range(10):
                log.append_as_leader(values(3, "b"), 1)
        assert log.end_offset >= end and all(not p.name.endswith(".deleted") for p in tmp_path.iterdir())
        log.append_as_leader(values(3, "c"), 1)
        assert [v for _, _, v in contents(log)][-3:] == values(3, "c")
    with Log(tmp_path, CFG) as log:
        assert [v for _, _, v in contents(log)][-3:] == values(3, "c")


APPEND = st.tuples(st.just("append"), st.integers(1, 4), st.sampled_from([0, 0, 0, 1, 2]))  # values, epoch bump
OPS = st.lists(st.one_of(
    APPEND, APPEND, APPEND, APPEND,  # appends dominate so that segments roll between crashes
    st.tuples(st.just("flush")),
    st.tuples(st.just("crash")),
    st.tuples(st.just("truncate"), st.integers(0, 6)),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("abandon")),  # the process dies: no close, unsynced bytes stay in the page cache
), min_size=8, max_size=40)


@settings(max_examples=60, deadline=None)
@given(OPS, st.integers(0, 2**32 - 1))
@example([("append", 4, 0)] * 6 + [("crash",)], 1)  # unflushed data in a segment that rolled
# a torn tail cut on open, then a clean close: the cut was not fsynced before the marker vouched for
# it, and the next power loss brought the torn batch back as trusted data
@example([("flush",), ("crash",), ("append", 1, 0), ("crash",), ("crash",), ("abandon",), ("reopen",), ("crash",)], 1)
@example([("append", 1, 0), ("abandon",), ("crash",)], 1)  # preallocated zeros after a process death
def test_crash_recovery_keeps_a_prefix_with_everything_flushed(ops, seed):
    """Any sequence of appends, flushes, truncations, clean reopens, process deaths and power
    losses: after each one the log holds a prefix of the model that includes every record it
    called flushed (after a process death it may call fewer: what it read back is not yet
    durable), and so does every later reopen (seed drives the crash). Odd seeds preallocate the
    active segment's file (LogConfig.preallocate_bytes)."""
    rng = random.Random(seed)
    fs = FaultFileSystem()
    config = PREALLOCATED if seed % 2 else GROUP
    with tempfile.TemporaryDirectory() as d:
        log = Log(d, config, fs=fs)
        model: list[tuple[int, bytes]] = []  # (epoch, value) per offset
        durable, epoch, n = 0, 1, 0
        for op in ops:
            if op[0] == "append":
                epoch += op[2]
                vs = values(op[1], f"r{n}")
                n += 1
                log.append_as_leader(vs, epoch)
                model += [(epoch, v) for v in vs]
            elif op[0] == "flush":
                log.flush()
                durable = len(model)
            elif op[0] == "truncate":
                log.truncate_to(max(0, len(model) - op[1]))
                model = model[: log.end_offset]
                durable = min(durable, len(model))
            else:
                if op[0] == "crash":
                    fs.crash(rng)
                if op[0] == "abandon":
                    for seg in log._segments:
                        seg.close()
                else:
                    with contextlib.suppress(LogError):
                        log.close()
                log = Log(d, config, fs=fs)
                got = contents(log)
                assert durable <= len(got) <= len(model), f"seed={seed}"
                assert got == expect(model[: len(got)]), f"seed={seed}"
                model = model[: len(got)]
                durable = log.last_flushed_offset
                assert durable <= len(model), f"seed={seed}"
                epoch = max([epoch] + [e for e, _ in model])
        log.close()
        with Log(d, config, fs=fs) as final:
            assert contents(final) == expect(model), f"seed={seed}"


def _log_files(directory) -> list[int]:
    return [p.stat().st_size for p in sorted(directory.glob("*.log"))]


def test_preallocated_space_is_cut_at_a_roll_and_a_clean_close(tmp_path):
    """While open, the active segment's file runs ahead of its data; a roll leaves the old
    segment exactly its batches long, a clean close the active one, and a clean open reads
    everything back."""
    with Log(tmp_path, PREALLOCATED) as log:
        log.append_as_leader(values(2, "a"), 1)
        data = len(log.read(0).records)
        assert _log_files(tmp_path) == [data + 150]
        for k in range(6):  # past segment_bytes: rolls
            log.append_as_leader(values(2, f"b{k}"), 1)
        assert len(_log_files(tmp_path)) >= 2
        sealed = [len(bytes(log.read(base, 1 << 20).records)) for base in log.segment_base_offsets()[:-1]]
        assert _log_files(tmp_path)[:-1] == sealed
        everything, data_bytes = contents(log), log.size_bytes
        assert sum(_log_files(tmp_path)) > data_bytes  # the active segment's reserved space
    assert sum(_log_files(tmp_path)) == data_bytes
    with Log(tmp_path, PREALLOCATED) as again:
        assert contents(again) == everything and not again.recovered_unclean


def test_preallocated_zeros_after_a_process_death_are_not_a_torn_tail(tmp_path, caplog):
    """The process dies with the active file longer than its data: the next open cuts the zeros
    quietly (no WARNING, nothing counted as torn) and keeps every record; a torn batch inside
    the reserved space still warns."""
    fs = FaultFileSystem()
    log = Log(tmp_path, PREALLOCATED, fs=fs)
    log.append_as_leader(values(3, "a"), 1)
    log.flush()
    for seg in log._segments:
        seg.close()  # the process died: no clean close
    with caplog.at_level("INFO", logger="kraftlog.log"):
        again = Log(tmp_path, PREALLOCATED, fs=fs)
    assert again.recovered_unclean and again.truncated_bytes_on_open == 0
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert [v for _, _, v in contents(again)] == values(3, "a")
    end = len(again.read(0).records)
    again.append_as_leader(values(1, "b"), 1)
    for seg in again._segments:
        seg.close()
    with open(tmp_path / "00000000000000000000.log", "r+b") as f:  # cut the last batch in half
        f.seek(end + 30)
        f.write(bytes(200))
    caplog.clear()
    with caplog.at_level("INFO", logger="kraftlog.log"):
        third = Log(tmp_path, PREALLOCATED, fs=fs)
    assert third.truncated_bytes_on_open > 0 and [r for r in caplog.records if r.levelname == "WARNING"]
    assert [v for _, _, v in contents(third)] == values(3, "a")
    third.close()


def test_a_full_disk_refuses_the_preallocation_before_anything_is_written(tmp_path):
    fs = FaultFileSystem()
    with Log(tmp_path, PREALLOCATED, fs=fs) as log:
        log.append_as_leader(values(2, "a"), 1)
        fs.space_left_bytes = 10
        with pytest.raises(LogStorageError) as err:
            for k in range(4):  # until an append needs more than the space reserved so far
                log.append_as_leader(values(2, f"b{k}"), 1)
        assert err.value.errno == errno.ENOSPC
        kept = contents(log)
        fs.space_left_bytes = None
        log.append_as_leader(values(1, "c"), 1)
        assert contents(log) == kept + [(len(kept), 1, values(1, "c")[0])]
