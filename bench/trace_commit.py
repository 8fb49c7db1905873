"""Where one commit's time goes, hop by hop (issue 22's timeline, repeatable before and after a change).

    python -m kraftlog.bench.trace_commit [--commits 1500] [--out DIR]

Starts a three-voter ``raftnode`` cluster on loopback (as the etcd rows do), proposes one 100-byte
record at a time from this process, and records the syscalls of the client and the three nodes with
``perf record`` on the kernel's syscall tracepoints (root, or a kernel that lets this user read
them): the events are timestamped in the kernel on one clock, cheaply enough that the commit keeps
its shape (``perf trace`` or ``strace`` add tens of microseconds per call). Each commit is followed
from the client's Produce to its answer, and the median of every segment is printed:

    client send -> leader read          the Produce's wake-up at the leader
    leader read -> log write            decode, queue, append (pwritev / pwrite64)
    log write -> first Fetch answer     the leader's poll, and encoding the answers of parked Fetches
    first answer -> leader fdatasync    the other answers, and the wait for a CPU
    leader fdatasync
    answer -> follower read             each follower's wake-up (the second one often waits for the
                                        first to leave the CPU: four processes share two cores)
    follower read -> log write          decode, step, append
    follower write -> fdatasync
    follower fdatasync
    follower fdatasync -> Fetch sent    the Fetch that reports the follower's new log end
    commit point -> Produce answer      the commit point is the second of (leader fdatasync end, the
                                        followers' Fetches sent): a majority holds the record
    answer -> client read
    majority held by the leader's       commits whose two followers had sent their Fetches before the
      fdatasync                         leader's own fdatasync ended: the leader's loop, blocked in
                                        it, read them only then (how long, and how often)

Messages are told apart by their sizes (each kind has one size in this workload: the most common
size of its syscall on its process). The raw ``perf script`` text stays in ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from kraftlog.bench.rows_raft import PAYLOAD_BYTES, NodeCluster

WARMUP_PROPOSALS = 200
PROPOSE_TIMEOUT_MS = 20_000
PERF_ATTACH_S = 1.0  # perf's start before the traced proposals
PERF_EXIT_TIMEOUT_S = 120
SYSCALLS = ("sendto", "recvfrom", "pwritev", "pwrite64", "fdatasync", "epoll_wait")
WRITES = ("pwritev", "pwrite64")
# a segment's events are looked for this long after the event before them
SEGMENT_HORIZON_S = 0.02

# `perf script -F comm,pid,tid,time,event,trace` lines:
#   python 123/124 76065.308221: syscalls:sys_enter_pwritev: fd: 0x00000007, vec: 0x7ffe..., ...
#   python 123/124 76065.308226: syscalls:sys_exit_pwritev: 0xaa
_LINE = re.compile(r"^\s*\S.*?\s(\d+)/(\d+)\s+([\d.]+):\s+syscalls:sys_(enter|exit)_(\w+):\s*(\S*)")


@dataclass(frozen=True, slots=True)
class Call:
    """One finished syscall: enter and exit times (s), the role of its process, its name, result."""

    start_s: float
    end_s: float
    role: str
    name: str
    result: int


def parse_calls(lines, roles: dict[int, str]) -> list[Call]:
    """The syscalls of the processes in ``roles`` (pid -> role), enter and exit paired per thread,
    in start order; lines that are not syscall events are ignored."""
    open_calls: dict[int, tuple[float, str]] = {}
    calls = []
    for line in lines:
        m = _LINE.match(line)
        if m is None or int(m[1]) not in roles:
            continue
        pid, tid, t, kind, name = int(m[1]), int(m[2]), float(m[3]), m[4], m[5]
        if kind == "enter":
            open_calls[tid] = (t, name)
            continue
        started = open_calls.pop(tid, None)
        if started is None or started[1] != name:
            continue
        result = int(m[6], 16) if m[6].startswith("0x") else int(m[6] or 0)
        if result >= 1 << 63:
            result -= 1 << 64
        calls.append(Call(started[0], t, roles[pid], name, result))
    calls.sort(key=lambda c: (c.start_s, c.end_s))
    return calls


def _common_size(calls: list[Call], role: str, name: str) -> int | None:
    sizes = collections.Counter(c.result for c in calls if c.role == role and c.name == name and c.result > 0)
    return sizes.most_common(1)[0][0] if sizes else None


class _Finder:
    def __init__(self, calls: list[Call]):
        self.calls = calls

    def next(self, i: int, role: str, names: tuple[str, ...], result: int | None = None) -> int | None:
        """The index of the first call at or after ``i`` of ``role`` named one of ``names`` (with
        ``result``), within SEGMENT_HORIZON_S of call ``i``'s start."""
        calls = self.calls
        horizon = calls[i].start_s + SEGMENT_HORIZON_S
        for j in range(i, len(calls)):
            c = calls[j]
            if c.start_s > horizon:
                return None
            if c.role == role and c.name in names and (result is None or c.result == result):
                return j
        return None


SEGMENTS = (
    "client send -> leader read", "leader read -> log write", "log write -> first Fetch answer",
    "first answer -> leader fdatasync", "leader fdatasync", "answer -> follower read",
    "follower read -> log write", "follower write -> fdatasync", "follower fdatasync",
    "follower fdatasync -> Fetch sent", "commit point -> Produce answer", "answer -> client read",
    "total: client send -> client read",
    # both followers' Fetches were sent (a majority holds the record) before the leader's own
    # fdatasync ended: the leader's loop, blocked in it, read them only then (n = such commits)
    "majority held by the leader's fdatasync",
)


@dataclass(frozen=True, slots=True)
class _Sizes:
    """The frame size of each kind of message (one size each in this workload)."""

    produce: int | None
    answer: int | None
    fetch_answer: int | None
    fetch: int | None


@dataclass(frozen=True, slots=True)
class _Commit:
    """The calls of one followed commit: the leader's and, per follower, (read, write, fsync, send)."""

    send: Call
    leader: tuple[Call, Call, Call, Call, Call]  # read, write, first Fetch answer, fdatasync, answer
    client_read: Call
    followers: tuple[tuple[Call, Call, Call, Call], ...]


def segments(calls: list[Call]) -> tuple[dict[str, list[float]], int, int]:
    """Per segment (SEGMENTS), its durations in microseconds over the traced commits; the number of
    commits followed; and in how many of them the leader's fdatasync was the commit point."""
    # both followers read and write the same sizes: one of them says which
    sizes = _Sizes(_common_size(calls, "client", "sendto"), _common_size(calls, "client", "recvfrom"),
                   _common_size(calls, "follower-a", "recvfrom"), _common_size(calls, "follower-a", "sendto"))
    out: dict[str, list[float]] = {name: [] for name in SEGMENTS}
    find = _Finder(calls)
    commits = leader_last = 0
    for i, c in enumerate(calls):
        if c.role == "client" and c.name == "sendto" and c.result == sizes.produce:
            commit = _follow(find, i, sizes)
            if commit is not None:
                commits += 1
                leader_last += _add_segments(commit, out)
    return out, commits, leader_last


def _follow(find: _Finder, i: int, sizes: _Sizes) -> _Commit | None:
    """The commit whose Produce the client sent in call ``i``, or None when a part of it is missing."""
    calls = find.calls
    lr = find.next(i, "leader", ("recvfrom",), sizes.produce)
    if lr is None:
        return None
    leader = (lr, find.next(lr, "leader", WRITES), find.next(lr, "leader", ("sendto",), sizes.fetch_answer),
              find.next(lr, "leader", ("fdatasync",)), find.next(lr, "leader", ("sendto",), sizes.answer))
    client_read = find.next(lr, "client", ("recvfrom",), sizes.answer)
    if None in leader or client_read is None:
        return None
    followers = []
    for role in ("follower-a", "follower-b"):
        fr = find.next(leader[2], role, ("recvfrom",), sizes.fetch_answer)
        if fr is None:
            return None
        part = (fr, find.next(fr, role, WRITES), find.next(fr, role, ("fdatasync",)),
                find.next(fr, role, ("sendto",), sizes.fetch))
        if None in part:
            return None
        followers.append(tuple(calls[x] for x in part))
    return _Commit(calls[i], tuple(calls[x] for x in leader), calls[client_read], tuple(followers))


def _add_segments(commit: _Commit, out: dict[str, list[float]]) -> bool:
    """Add ``commit``'s segments to ``out``; True when the leader's fdatasync was its commit point
    (the second of the three ends: with three voters any two are a majority)."""
    read, write, first_answer, fsync, answer = commit.leader
    point = sorted([fsync.end_s, *(f[3].end_s for f in commit.followers)])[1]

    def add(name: str, seconds: float) -> None:
        out[name].append(seconds * 1e6)

    add("client send -> leader read", read.end_s - commit.send.start_s)
    add("leader read -> log write", write.start_s - read.end_s)
    add("log write -> first Fetch answer", first_answer.start_s - write.end_s)
    add("first answer -> leader fdatasync", fsync.start_s - first_answer.end_s)
    add("leader fdatasync", fsync.end_s - fsync.start_s)
    for f_read, f_write, f_sync, f_send in commit.followers:
        add("answer -> follower read", f_read.end_s - first_answer.start_s)
        add("follower read -> log write", f_write.start_s - f_read.end_s)
        add("follower write -> fdatasync", f_sync.start_s - f_write.end_s)
        add("follower fdatasync", f_sync.end_s - f_sync.start_s)
        add("follower fdatasync -> Fetch sent", f_send.start_s - f_sync.end_s)
    add("commit point -> Produce answer", answer.start_s - point)
    add("answer -> client read", commit.client_read.end_s - answer.start_s)
    add("total: client send -> client read", commit.client_read.end_s - commit.send.start_s)
    last_fetch_s = max(f_send.end_s for *_, f_send in commit.followers)
    if last_fetch_s < fsync.end_s:
        add("majority held by the leader's fdatasync", fsync.end_s - last_fetch_s)
    return point == fsync.end_s


def report(per_segment: dict[str, list[float]], commits: int, leader_last: int) -> str:
    lines = [f"{commits} commits followed; the leader's fdatasync was the commit point in "
             f"{100 * leader_last / max(commits, 1):.0f}% of them (else a follower's Fetch); microseconds:"]
    for name in SEGMENTS:
        v = per_segment[name]
        if v:
            lines.append(f"  {name:40s} p50 {statistics.median(v):7.0f}   mean {statistics.mean(v):7.0f}   n {len(v)}")
    return "\n".join(lines)


# ---- the run --------------------------------------------------------------------------------------


async def _traced(cluster: NodeCluster, commits: int, out_dir: str, perf: str) -> dict[int, str]:
    from kraftlog.engine.node.raftnode import RaftClient

    client = RaftClient(cluster.voters)
    payload = b"v" * PAYLOAD_BYTES
    try:
        for _ in range(WARMUP_PROPOSALS):
            await client.propose([payload], timeout_ms=PROPOSE_TIMEOUT_MS)
        followers = sorted(i for i in cluster.voters if i != client.leader_id)
        roles = {os.getpid(): "client", cluster.procs[client.leader_id].pid: "leader",
                 cluster.procs[followers[0]].pid: "follower-a", cluster.procs[followers[1]].pid: "follower-b"}
        events = [f"syscalls:sys_{kind}_{name}" for name in SYSCALLS for kind in ("enter", "exit")]
        recorder = subprocess.Popen([perf, "record", "-q", "-o", os.path.join(out_dir, "perf.data"),
                                     "-p", ",".join(map(str, roles)), *(x for e in events for x in ("-e", e))],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        await asyncio.sleep(PERF_ATTACH_S)
        if recorder.poll() is not None:
            raise RuntimeError(f"perf record failed: {recorder.stderr.read().decode(errors='replace')[-500:]}")
        for _ in range(commits):
            await client.propose([payload], timeout_ms=PROPOSE_TIMEOUT_MS)
        recorder.send_signal(signal.SIGINT)
        _, err = recorder.communicate(timeout=PERF_EXIT_TIMEOUT_S)
        if recorder.returncode not in (0, -signal.SIGINT):
            raise RuntimeError(f"perf record failed ({recorder.returncode}): {err.decode(errors='replace')[-500:]}")
        return roles
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kraftlog.bench.trace_commit",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=1500, help="traced sequential commits (default 1500)")
    parser.add_argument("--out", default=None, help="keep perf's data and text here (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.commits < 1:
        parser.error(f"--commits must be at least 1, got {args.commits}")
    perf = shutil.which("perf")
    if perf is None:
        print("perf not installed (Debian: apt-get install linux-perf)", file=sys.stderr)
        return 2
    out_dir = args.out or tempfile.mkdtemp(prefix="kraftlog-trace-")
    os.makedirs(out_dir, exist_ok=True)
    cluster = NodeCluster()
    try:
        roles = asyncio.run(_traced(cluster, args.commits, out_dir, perf))
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        cluster.close()
    text_path = os.path.join(out_dir, "perf.txt")
    with open(text_path, "w") as f:
        subprocess.run([perf, "script", "-i", os.path.join(out_dir, "perf.data"), "-F", "comm,pid,tid,time,event,trace"],
                       stdout=f, stderr=subprocess.DEVNULL, check=True, timeout=PERF_EXIT_TIMEOUT_S)
    with open(text_path, errors="replace") as f:
        calls = parse_calls(f, roles)
    print(report(*segments(calls)))
    print(f"perf data and text: {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
