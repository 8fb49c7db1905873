"""Proves the commit profile's cut (bench/profile_commit.py): a py-spy sample goes to the category of
its innermost frame that has one, library frames (numpy, a dataclass __init__) count for their
caller, fsync is told apart from the rest of the log, and malformed lines are ignored."""

from __future__ import annotations

from kraftlog.bench import profile_commit as pc

LOOP = "BaseEventLoop._run_once (asyncio/base_events.py:1922);Handle._run (asyncio/events.py:80)"
DRIVER = f"{LOOP};RaftDriver._pass (raft/aio/driver.py:281)"


def test_samples_go_to_their_innermost_category():
    lines = [
        f"{DRIVER};encode_response_body (raft/wire.py:715);_write (raft/wire.py:171);"
        f"entity_writer.<locals>.write_entity (kio/serial/_serialize.py:228) 7",
        f"{DRIVER};encode_response_body (raft/wire.py:715);__create_fn__.<locals>.__init__ (<string>:3) 5",
        f"{DRIVER};encode_fetch_response (raft/hot_codec.py:240) 2",
        f"{DRIVER};EngineRaftLog.read (engine/node/raftlog.py:136);split_batches (raft/wire.py:388);"
        f"_all (numpy/_core/_methods.py:70) 4",
        f"{DRIVER};execute_ready (raft/ready.py:103);Segment.sync (engine/log/segment.py:300);"
        f"RealFileHandle.sync (engine/log/fs.py:177) 3",
        f"{DRIVER};execute_ready (raft/ready.py:103);RealFileHandle.pwrite (engine/log/fs.py:132) 2",
        f"{LOOP};EpollSelector.select (selectors.py:468) 6",
        "<module> (x.py:1) 1",
        "not a sample line",
    ]
    counts, total = pc.categorize(lines)
    assert total == 30
    assert counts["kio encode/decode"] == 7
    assert counts["wire: framing, batch split, Fetch codec, kio conversion (raft/wire.py, hot_codec.py)"] == 5 + 2 + 4
    assert counts["fsync"] == 3
    assert counts["log append/read (engine/log, raftlog.py)"] == 2
    assert counts["asyncio loop and socket calls"] == 6
    assert counts["other"] == 1
