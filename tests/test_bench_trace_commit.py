"""Proves the commit timeline's cut (bench/trace_commit.py): syscall enter and exit lines of perf
script pair up per thread, one commit is followed from the client's Produce through the leader,
both followers and back, each segment measures what it names, the commit point is the second of
(leader fdatasync end, the followers' Fetches), and lines of other processes or other kinds are ignored."""

from __future__ import annotations

import pytest

from kraftlog.bench import trace_commit as tc

ROLES = {10: "client", 20: "leader", 30: "follower-a", 40: "follower-b"}


def call(pid: int, name: str, start_us: int, end_us: int, result: int) -> list[str]:
    """perf script lines (enter, exit) of one syscall, times in microseconds after 1000 s."""
    return [f"          python {pid}/{pid} {1000 + start_us / 1e6:.6f}: syscalls:sys_enter_{name}: fd: 0x00000007, x: 0x1",
            f"          python {pid}/{pid} {1000 + end_us / 1e6:.6f}:  syscalls:sys_exit_{name}: {result:#x}"]


def commit(leader_flush_end_us: int = 450, answer_us: int = 700) -> list[str]:
    return [
        *call(10, "sendto", 100, 110, 237),  # the client's Produce
        *call(20, "recvfrom", 150, 160, 237),
        *call(20, "pwritev", 190, 195, 170),
        *call(20, "sendto", 265, 275, 258),  # the Fetch answers
        *call(20, "sendto", 280, 290, 258),
        *call(20, "fdatasync", 300, leader_flush_end_us, 0),
        *call(30, "recvfrom", 280, 285, 258),
        *call(30, "pwrite64", 345, 350, 170),
        *call(30, "fdatasync", 400, 600, 0),
        *call(30, "sendto", 620, 625, 121),  # its Fetch: with the leader's flush, the commit point
        *call(40, "recvfrom", 380, 385, 258),
        *call(40, "pwrite64", 445, 450, 170),
        *call(40, "fdatasync", 500, 700, 0),
        *call(40, "sendto", 720, 725, 121),
        *call(20, "sendto", answer_us, answer_us + 10, 80),  # the Produce answer
        *call(10, "recvfrom", answer_us + 60, answer_us + 90, 80),
        *call(99, "sendto", 200, 210, 237),  # another process
        "          python 20/20 1000.000500: sched:sched_switch: prev_comm=python",
        "not a perf line",
    ]


ONE_COMMIT = commit()


def test_one_commit_is_cut_into_its_segments():
    calls = tc.parse_calls(ONE_COMMIT, ROLES)
    assert len(calls) == 16 and [c.role for c in calls[:2]] == ["client", "leader"]
    per_segment, commits, leader_last = tc.segments(calls)
    assert (commits, leader_last) == (1, 0)
    got = {name: [round(v) for v in values] for name, values in per_segment.items()}
    assert got == {
        "client send -> leader read": [60],
        "leader read -> log write": [30],
        "log write -> first Fetch answer": [70],
        "first answer -> leader fdatasync": [25],
        "leader fdatasync": [150],
        "answer -> follower read": [20, 120],
        "follower read -> log write": [60, 60],
        "follower write -> fdatasync": [50, 50],
        "follower fdatasync": [200, 200],
        "follower fdatasync -> Fetch sent": [20, 20],
        "commit point -> Produce answer": [75],  # from follower-a's Fetch (625), the second end
        "answer -> client read": [90],
        "total: client send -> client read": [690],
        "majority held by the leader's fdatasync": [],  # its flush ended before both Fetches
    }
    assert "1 commits followed" in tc.report(per_segment, commits, leader_last)


def test_a_slow_leader_flush_is_the_commit_point():
    """One Fetch sent before the leader's fdatasync ends and one after: the commit point is the
    leader's flush (with both Fetches before it, the followers alone are a majority)."""
    calls = tc.parse_calls(commit(leader_flush_end_us=650, answer_us=700), ROLES)
    per_segment, commits, leader_last = tc.segments(calls)
    assert (commits, leader_last) == (1, 1)
    assert per_segment["commit point -> Produce answer"] == [pytest.approx(50, abs=0.5)]


def test_a_commit_without_its_follower_parts_is_not_followed():
    partial = [line for line in ONE_COMMIT if not line.split()[1].startswith("40/")]
    per_segment, commits, _ = tc.segments(tc.parse_calls(partial, ROLES))
    assert commits == 0 and not per_segment["total: client send -> client read"]


def test_two_followers_commit_without_the_leaders_flush():
    calls = tc.parse_calls(commit(leader_flush_end_us=900, answer_us=950), ROLES)
    per_segment, commits, leader_last = tc.segments(calls)
    assert (commits, leader_last) == (1, 0)
    assert per_segment["commit point -> Produce answer"] == [pytest.approx(950 - 725, abs=0.5)]
    # the two Fetches were in at 725; the leader's loop sat in its fdatasync until 900
    assert per_segment["majority held by the leader's fdatasync"] == [pytest.approx(900 - 725, abs=0.5)]


def test_without_perf_or_with_no_commits_it_says_so_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(tc.shutil, "which", lambda name: None)
    assert tc.main(["--commits", "5"]) == 2
    assert capsys.readouterr().err.strip() == "perf not installed (Debian: apt-get install linux-perf)"
    with pytest.raises(SystemExit) as exit_info:
        tc.main(["--commits", "0"])
    assert exit_info.value.code == 2 and "--commits must be at least 1" in capsys.readouterr().err
