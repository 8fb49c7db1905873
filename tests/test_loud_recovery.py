"""Proves that recoveries are loud (Kafka warns on each): a log opened after an unclean shutdown
says it CRC-checked its segments and rebuilt their indexes, a torn tail cut on open is one WARNING
naming the bytes and the new end, a clean open says nothing; a node whose quorum-state is gone
while its log holds data warns that it forgot its epoch and vote."""

from __future__ import annotations

import logging
import os

from kraftlog.engine.log.log import CLEAN_SHUTDOWN_NAME, Log
from kraftlog.engine.node.raftlog import RAFT_LOG_CONFIG
from kraftlog.engine.node.raftnode import RaftNode


def _log_with_three_batches(directory) -> None:
    log = Log(directory, RAFT_LOG_CONFIG)
    log.initialize_leader_epoch(1)
    for value in (b"a", b"b", b"c"):
        log.append_as_leader([value], epoch=1)
    log.flush()
    log.close()


def _messages(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kraftlog.log" and r.levelno == level]


def test_a_clean_open_is_quiet_and_an_unclean_one_says_what_it_checked(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="kraftlog.log")
    _log_with_three_batches(tmp_path)
    Log(tmp_path, RAFT_LOG_CONFIG).close()
    assert not _messages(caplog, logging.INFO) and not _messages(caplog, logging.WARNING)
    os.remove(tmp_path / CLEAN_SHUTDOWN_NAME)  # as after kill -9
    Log(tmp_path, RAFT_LOG_CONFIG).close()
    (line,) = _messages(caplog, logging.INFO)
    assert "no clean shutdown marker: 1 segment(s) CRC-checked" in line and "ends at offset 3" in line


def test_a_torn_tail_cut_on_open_is_one_warning_with_bytes_and_end(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="kraftlog.log")
    _log_with_three_batches(tmp_path)
    os.remove(tmp_path / CLEAN_SHUTDOWN_NAME)
    (segment,) = [p for p in os.listdir(tmp_path) if p.endswith(".log")]
    with open(tmp_path / segment, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x01\x00torn")  # half a batch header
    log = Log(tmp_path, RAFT_LOG_CONFIG)
    assert log.end_offset == 3
    log.close()
    (line,) = _messages(caplog, logging.WARNING)
    assert "truncated 16 byte(s) of torn or corrupt tail" in line and "ends at offset 3" in line


def test_a_node_whose_quorum_state_is_gone_warns_that_it_forgot_its_vote(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="kraftlog.raftnode")
    voters = {1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2), 3: ("127.0.0.1", 3)}
    _log_with_three_batches(tmp_path / "log")
    RaftNode(1, voters, str(tmp_path)).log.close()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "kraftlog.raftnode"]
    assert "quorum-state is missing although the log holds offsets up to 3" in line
    caplog.clear()
    RaftNode(2, voters, str(tmp_path / "fresh")).log.close()  # a fresh node has nothing to forget
    assert not [r for r in caplog.records if r.name == "kraftlog.raftnode"]


def test_an_index_entry_pointing_to_the_wrong_batch_is_not_trusted_and_does_not_survive(tmp_path, caplog):
    """A clean-looking index (monotonic, in range) whose entry points into the middle of its
    batch: reads still return the right batches (they used to fail on a "malformed header"), one
    WARNING names the entry, the close does not vouch for the index, and the next open rebuilds
    it (no warning after)."""
    import struct

    from kraftlog.engine.log.log import LogConfig

    caplog.set_level(logging.INFO, logger="kraftlog.log")
    config = LogConfig(**{**RAFT_LOG_CONFIG.__dict__, "index_interval_bytes": 0})  # an entry per batch
    log = Log(tmp_path, config)
    log.initialize_leader_epoch(1)
    for i in range(8):
        log.append_as_leader([b"v%d" % i], epoch=1)
    log.flush()
    expected = bytes(log.read(3, 1 << 20).records)
    log.close()
    (index,) = [p for p in os.listdir(tmp_path) if p.endswith(".index")]
    entries = bytearray((tmp_path / index).read_bytes())
    relative, position = struct.unpack_from(">ii", entries, 8 * 2)  # the entry a read at offset 3 uses
    assert relative == 3
    other = position + 1
    struct.pack_into(">ii", entries, 8 * 2, relative, other)  # still between its neighbours' positions
    (tmp_path / index).write_bytes(bytes(entries))

    log = Log(tmp_path, config)  # clean marker: the index is loaded as it is
    assert bytes(log.read(3, 1 << 20).records) == expected
    log.close()
    (line,) = _messages(caplog, logging.WARNING)
    assert f"index entry (offset {relative} -> position {other})" in line
    assert not (tmp_path / CLEAN_SHUTDOWN_NAME).exists()
    caplog.clear()
    log = Log(tmp_path, config)  # recovered: indexes rebuilt from the log
    assert bytes(log.read(3, 1 << 20).records) == expected
    log.close()
    assert not _messages(caplog, logging.WARNING)
    assert struct.unpack_from(">ii", (tmp_path / index).read_bytes(), 8 * 2) == (relative, position)
