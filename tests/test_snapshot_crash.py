"""Proves snapshot writes are atomic under a real crash: a writer process is SIGKILLed at a random
moment (mostly mid-write, map growth and retention deletes included), several times; after each
kill every snapshot it had committed and retention keeps is there, the write in flight is either
whole or absent, every visible snapshot verifies and loads with exactly its own content, and the
next writer opens the same LMDB environment and goes on."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from kraftlog.engine.snapshot import SnapshotId, SnapshotStore, SnapshotStoreConfig

HELPER = os.path.join(os.path.dirname(__file__), "snapshot_writer_proc.py")
RETAIN_COUNT = 3
KILLS = 6
READY_TIMEOUT_S = 60.0
KILL_WINDOW_S = 0.8
PARTITIONS = 20_000


def _run_and_kill(path, first_end: int, rng: random.Random) -> tuple[list[int], int | None]:
    """Start a writer, SIGKILL it at a random moment; returns (committed end offsets, in-flight one)."""
    proc = subprocess.Popen([sys.executable, HELPER, str(path), str(first_end), str(PARTITIONS), str(RETAIN_COUNT)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"writer did not start: {line!r} {proc.stderr.read() if proc.poll() else ''}"
        assert time.monotonic() < deadline
        time.sleep(rng.uniform(0.05, KILL_WINDOW_S))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=READY_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    committed, in_flight = [], None
    for word, value in (line.split() for line in out.splitlines() if line.strip()):
        if word == "begin":
            in_flight = int(value)
        elif word == "ok":
            committed.append(int(value))
            in_flight = None
    assert proc.returncode == -signal.SIGKILL
    return committed, in_flight


def _marker_of(image) -> str:
    return image.configs[(2, "kill-test")]["end"]


def test_killing_the_writer_mid_write_never_loses_or_tears_a_snapshot(tmp_path):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    path = tmp_path / "snapshots"
    committed: list[int] = []
    killed_mid_write = 0
    next_end = 1000
    for _ in range(KILLS):
        done, in_flight = _run_and_kill(path, next_end, rng)
        committed += done
        killed_mid_write += in_flight is not None
        with SnapshotStore(path, SnapshotStoreConfig(retain_count=RETAIN_COUNT)) as store:
            visible = [sid.end_offset for sid in store.ids()]
            possible = set(committed) | ({in_flight} if in_flight is not None else set())
            assert set(visible) <= possible, f"seed {seed}: snapshots nobody wrote: {set(visible) - possible}"
            shown = sorted(set(committed) | (set(visible) & {in_flight}))
            assert visible == shown[-RETAIN_COUNT:], f"seed {seed}: visible {visible}, committed {committed}"
            for end in visible:
                store.verify((end, 1))
                assert _marker_of(store.load_image((end, 1))) == str(end), f"seed {seed}: snapshot {end}"
            if in_flight in visible:
                committed.append(in_flight)  # its commit landed before the kill: it counts from now on
            assert store.newest_id() == (SnapshotId(visible[-1], 1) if visible else None)
        next_end = max(possible | {next_end}) + 1
    assert committed, f"seed {seed}: no write ever committed"
    # A writer spends nearly all its time inside write_values, so random kills land mid-write.
    print(f"kills {KILLS}, mid-write {killed_mid_write}, committed {len(committed)}")
    assert killed_mid_write >= 1, f"seed {seed}: no kill landed during a write"

