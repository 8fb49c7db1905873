"""Proves the background writeback (engine/log/writeback.py, LogConfig.writeback_bytes): long
appends start fdatasyncs on a thread of their own, short ones never do, the log's flush still
fsyncs every dirty segment itself, the thread survives files that vanish, and a log on the fault
file system (whose crash model tracks only the log's own fsyncs) never starts one."""

from __future__ import annotations

import os

import pytest

from kraftlog.engine.log import writeback as writeback_module
from kraftlog.engine.log.fs import FaultFileSystem
from kraftlog.engine.log.log import Isolation, Log, LogConfig
from kraftlog.engine.records.batch import build_batch_from_values

WRITEBACK = LogConfig(flush_interval_messages=None, writeback_bytes=64 * 1024)


def batch(i: int, size_bytes: int = 16 * 1024) -> bytes:
    return build_batch_from_values([bytes([i % 251]) * size_bytes], base_offset=i, partition_leader_epoch=1)


def test_long_appends_start_writebacks_and_short_ones_do_not(tmp_path):
    log = Log(tmp_path / "log", WRITEBACK)
    try:
        batches = [batch(0, 100)] + [batch(i) for i in range(1, 17)]
        log.append_as_follower(batches[0])  # a commit-sized append: far below writeback_bytes
        log.flush()
        assert log._writeback.started == 0
        for b in batches[1:]:  # 16 x 16 KiB: 4 x writeback_bytes, none flushed in between
            log.append_as_follower(b)
        log._writeback.wait()
        assert log._writeback.started >= 1
        assert log.last_flushed_offset == 1  # the writeback moves nothing the log states
        log.flush()
        assert log.last_flushed_offset == 17
        records = log.read(0, 1 << 20, Isolation.LOG_END).records
        assert bytes(records) == b"".join(batches)
    finally:
        log.close()
    assert log._writeback._executor is None  # close stopped the thread


def test_the_flush_fsyncs_itself_whatever_the_writeback_did(tmp_path, monkeypatch):
    """A writeback that did nothing at all (here: never ran) leaves the flush's fsync to do it all:
    the flush calls the segment's fdatasync exactly as without a writeback."""
    monkeypatch.setattr(writeback_module, "_sync_quietly", lambda path: None)
    synced = []
    log = Log(tmp_path / "log", WRITEBACK)
    try:
        for i in range(8):
            log.append_as_follower(batch(i))
        log._writeback.wait()
        assert log._writeback.started >= 1
        handle = log._segments[-1]._handle
        real_sync = type(handle).sync
        monkeypatch.setattr(type(handle), "sync", lambda self: synced.append(self) or real_sync(self))
        log.flush()
        assert synced == [handle]
    finally:
        log.close()


def test_no_writeback_once_the_interpreter_shuts_down(tmp_path, monkeypatch):
    """An append at interpreter shutdown (a node's last flush in an atexit hook) must not fail
    because no thread may start any more: the writeback is skipped, the append stands."""
    import concurrent.futures.thread as executor_thread

    monkeypatch.setattr(executor_thread, "_shutdown", True)  # what interpreter shutdown sets
    log = Log(tmp_path / "log", WRITEBACK)
    try:
        for i in range(8):
            log.append_as_follower(batch(i))
        assert log._writeback.started == 0
        log.flush()
        assert log.last_flushed_offset == 8
    finally:
        log.close()


def test_a_vanished_file_is_nothing_to_write(tmp_path):
    writeback_module._sync_quietly(str(tmp_path / "gone.log"))  # no error: the file is not there
    path = tmp_path / "here.log"
    path.write_bytes(b"x" * 4096)
    writeback_module._sync_quietly(str(path))
    assert path.read_bytes() == b"x" * 4096


def test_the_fault_file_system_never_starts_one(tmp_path):
    fs = FaultFileSystem()
    log = Log(str(tmp_path / "log"), WRITEBACK, fs=fs)
    try:
        assert log._writeback is None
        for i in range(8):
            log.append_as_follower(batch(i))
        assert fs.unsynced_bytes() > 0  # nothing synced behind the crash model's back
    finally:
        log.close()


def test_a_negative_writeback_is_refused():
    with pytest.raises(ValueError, match="writeback_bytes"):
        LogConfig(writeback_bytes=-1)


def test_off_by_default(tmp_path):
    log = Log(os.fspath(tmp_path / "log"))
    try:
        assert log._writeback is None
    finally:
        log.close()
