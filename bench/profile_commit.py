"""Where the CPU of a commit goes (issue 22's profile, repeatable before and after a change).

    python -m kraftlog.bench.profile_commit [--seconds 30] [--out DIR]

Starts a three-voter ``raftnode`` cluster on loopback (as the etcd rows do), proposes one 100-byte
record at a time from this process, and samples the leader and one follower with py-spy
(``pip install py-spy``; it attaches with ptrace) in ``--gil`` mode: only the thread holding the GIL
is sampled, so a sample is Python CPU, and time in fsync, socket calls and epoll (which release the
GIL) is left to the kernel's user/system split printed beside (psutil, per node, ms per commit).

Each sample is put in one category: the first frame from the innermost outwards that belongs to
one (CATEGORIES, in order; library frames such as numpy or a dataclass ``__init__`` count for
their caller). Shares are of each node's GIL samples. The raw collapsed stacks stay in ``--out``
for other cuts (e.g. ``py-spy``'s flame graphs).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable

import psutil

from kraftlog.bench.rows_raft import PAYLOAD_BYTES, NodeCluster

SAMPLE_RATE_HZ = 250
WARMUP_PROPOSALS = 100
PROPOSE_TIMEOUT_MS = 20_000
SPY_ATTACH_S = 1.0  # py-spy's start before the timed proposals
SPY_EXIT_TIMEOUT_S = 60

# (label, file pattern, function-name fragment or None): the first match from the innermost frame
CATEGORIES = (
    ("kio encode/decode", r"kio/", None),
    ("fsync", r"engine/log/fs\.py$", "sync"),
    ("wire: framing, batch split, Fetch codec, kio conversion (raft/wire.py, hot_codec.py)",
     r"raft/(wire|hot_codec)\.py$", None),
    ("log append/read (engine/log, raftlog.py)", r"engine/(log/|node/raftlog\.py)", None),
    ("raft core (core, ready, messages, metrics)", r"raft/(core|ready|messages|metrics)\.py$", None),
    ("driver (raft/aio/driver.py)", r"raft/aio/driver\.py$", None),
    ("transport (raft/aio/transport.py, engine/protocol)", r"(raft/aio/transport\.py|engine/protocol/)", None),
    ("asyncio loop and socket calls", r"(asyncio/|selectors\.py$)", None),
)
# frames that count for their caller: generic libraries a category's code calls into
PASS_THROUGH = re.compile(r"(numpy/|<string>|enum\.py|<frozen abc>|typing\.py|uuid\.py|logging/|dataclasses\.py|"
                          r"functools\.py)")
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>.*?):\d+\)$")


def parse_frame(frame: str) -> tuple[str, str]:
    """(function, file) of one py-spy frame ``func (file:line)``."""
    m = _FRAME.match(frame)
    return (m["func"], m["file"]) if m else (frame, "")


def category_of(frames: list[tuple[str, str]]) -> str:
    for func, path in reversed(frames):
        if PASS_THROUGH.search(path):
            continue
        for label, pattern, fragment in CATEGORIES:
            if re.search(pattern, path) and (fragment is None or fragment in func):
                return label
    return "other"


def categorize(collapsed: Iterable[str]) -> tuple[collections.Counter, int]:
    """Samples per category of py-spy's raw (collapsed) output, and the total."""
    counts: collections.Counter = collections.Counter()
    total = 0
    for line in collapsed:
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not stack or not n.isdigit():
            continue
        counts[category_of([parse_frame(f) for f in stack.split(";")])] += int(n)
        total += int(n)
    return counts, total


def _cpu(pid: int) -> tuple[float, float]:
    t = psutil.Process(pid).cpu_times()
    return t.user, t.system


async def _profile(cluster: NodeCluster, seconds: float, out_dir: str, py_spy: str) -> dict:
    from kraftlog.engine.node.raftnode import RaftClient

    client = RaftClient(cluster.voters)
    payload = b"v" * PAYLOAD_BYTES
    try:
        for _ in range(WARMUP_PROPOSALS):
            await client.propose([payload], timeout_ms=PROPOSE_TIMEOUT_MS)
        roles = {"leader": client.leader_id, "follower": min(i for i in cluster.voters if i != client.leader_id)}
        pids = {i: p.pid for i, p in cluster.procs.items()}
        spies = [subprocess.Popen([py_spy, "record", "--pid", str(pids[node]), "--rate", str(SAMPLE_RATE_HZ),
                                   "--format", "raw", "--output", os.path.join(out_dir, f"{role}.txt"),
                                   "--duration", str(int(seconds + SPY_ATTACH_S)), "--nonblocking", "--gil"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for role, node in roles.items()]
        await asyncio.sleep(SPY_ATTACH_S)
        before = {i: _cpu(pid) for i, pid in pids.items()}
        commits, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            await client.propose([payload], timeout_ms=PROPOSE_TIMEOUT_MS)
            commits += 1
        elapsed = time.perf_counter() - started
        after = {i: _cpu(pid) for i, pid in pids.items()}
        for spy in spies:
            _, err = spy.communicate(timeout=SPY_EXIT_TIMEOUT_S)
            if spy.returncode != 0:
                raise RuntimeError(f"py-spy failed ({spy.returncode}): {err.decode(errors='replace')[-500:]}")
        cpu_ms = {i: tuple((a - b) / commits * 1000 for a, b in zip(after[i], before[i], strict=True)) for i in pids}
        return {"commits": commits, "commits_per_s": commits / elapsed, "roles": roles, "cpu_ms": cpu_ms}
    finally:
        await client.close()


def report(result: dict, out_dir: str) -> str:
    lines = [f"{result['commits']} sequential commits, {result['commits_per_s']:.0f}/s; "
             f"CPU per commit (user + sys, ms) by node:"]
    role_of = {node: role for role, node in result["roles"].items()}
    for node, (user, system) in sorted(result["cpu_ms"].items()):
        lines.append(f"  node {node} ({role_of.get(node, 'follower')}): {user:.2f} user + {system:.2f} sys")
    for role in result["roles"]:
        with open(os.path.join(out_dir, f"{role}.txt"), errors="replace") as f:
            counts, total = categorize(f)
        lines.append(f"{role}: {total} GIL samples")
        lines.extend(f"  {100 * n / total:5.1f}%  {label}" for label, n in counts.most_common())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kraftlog.bench.profile_commit", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="timed proposals (default 30)")
    parser.add_argument("--out", default=None, help="keep py-spy's collapsed stacks here (default: a temp dir)")
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy", path=os.pathsep.join([os.path.dirname(sys.executable),
                                                           os.environ.get("PATH", "")]))
    if py_spy is None:
        print("py-spy not installed (pip install py-spy)", file=sys.stderr)
        return 2
    out_dir = args.out or tempfile.mkdtemp(prefix="kraftlog-profile-")
    os.makedirs(out_dir, exist_ok=True)
    cluster = NodeCluster()
    try:
        result = asyncio.run(_profile(cluster, args.seconds, out_dir, py_spy))
    finally:
        cluster.close()
    print(report(result, out_dir))
    print(f"collapsed stacks: {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
