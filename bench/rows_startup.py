"""Benchmark rows for what a process pays before it does anything: imports.

startup.version_s     `kraftlog --version` (the console script's import and parse), wall time
startup.import_log_s  `import kraftlog.engine.log.log` (what an embedding program pays for the log)
startup.node_ready_s  `kraftlog node run` of a single combined node on a freshly formatted directory,
                      from the spawn to its READY line (listening, log open, Raft started); goal
                      <= 1 s in all, the interpreter's start included

Each beside `python -c pass` timed in the same run with the same launcher, so the interpreter's own
start is the peer and the goal is what we add to it. Bytecode is cached (as an installed package
runs: rows_cluster.bytecode_launcher), and the first, untimed run fills that cache.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from kraftlog.bench.rows_cluster import bytecode_launcher
from kraftlog.bench.timing import measure, row, spread

REPEAT = 9
VERSION_GOAL_S = 0.1  # the goals: what we add to a bare interpreter's start
IMPORT_LOG_GOAL_S = 0.15
_PROBES = {
    "startup.version_s": ("from kraftlog.engine.cli.main import main; main(['--version'])",
                          "kraftlog --version", VERSION_GOAL_S),
    "startup.import_log_s": ("import kraftlog.engine.log.log", "import kraftlog.engine.log.log", IMPORT_LOG_GOAL_S),
}


def _timed(launcher: list[str], code: str) -> tuple[float, float]:
    cmd = [*launcher, sys.executable, "-c", code]
    return measure(lambda: subprocess.run(cmd, check=True, timeout=60, stdout=subprocess.DEVNULL), repeat=REPEAT,
                   warmup=1)


def _row(name: str) -> dict:
    code, what, goal_s = _PROBES[name]
    root = tempfile.mkdtemp(prefix="kraftlog-bench-startup-")
    try:
        launcher = bytecode_launcher(root)
        bare, _ = _timed(launcher, "pass")
        ours, spread = _timed(launcher, code)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return row(name, "s", ours, spread, peer="python -c pass (the same interpreter and launcher)", peer_value=bare,
               higher_is_better=False, goal=f"<= {goal_s} s over python -c pass", met=ours - bare <= goal_s,
               notes=f"{what}: {ours - bare:.3f} s over the bare interpreter; median of {REPEAT}")


NODE_READY_GOAL_S = 1.0
NODE_READY_REPEAT = 5
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def _node_ready_once(launcher: list[str], directory: str) -> float:
    """Seconds from spawning a single combined node on ``directory`` (formatted here) to its READY
    line; the node is stopped (SIGTERM) afterwards, outside the timing."""
    from kraftlog.engine.cli import main as cli

    assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "1", "--dir", directory]) == 0
    with socket.socket() as sock:  # an inherited listening socket: no port race
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        port = sock.getsockname()[1]
        cmd = [*launcher, sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", "1",
               "--controller-quorum-voters", f"1@127.0.0.1:{port}", "--dir", directory,
               "--listen-fd", str(sock.fileno())]
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, pass_fds=(sock.fileno(),), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            line = proc.stdout.readline()
            elapsed = time.perf_counter() - started
            if not line.startswith(b"READY"):
                raise RuntimeError(f"node did not start: {line!r}")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    return elapsed


def _node_ready_row() -> dict:
    root = tempfile.mkdtemp(prefix="kraftlog-bench-ready-")
    try:
        launcher = bytecode_launcher(root)
        bare, _ = _timed(launcher, "pass")
        _node_ready_once(launcher, os.path.join(root, "warmup"))  # fills the bytecode cache
        samples = [_node_ready_once(launcher, os.path.join(root, f"n{i}")) for i in range(NODE_READY_REPEAT)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ours = statistics.median(samples)
    return row("startup.node_ready_s", "s", ours, spread(samples),
               peer="python -c pass (the same interpreter and launcher)", peer_value=bare, higher_is_better=False,
               goal=f"<= {NODE_READY_GOAL_S} s from spawn to READY", met=ours <= NODE_READY_GOAL_S,
               notes=f"a single combined node on a fresh directory; median of {NODE_READY_REPEAT}")


ROWS = {name: (lambda quick, name=name: _row(name)) for name in _PROBES}
ROWS["startup.node_ready_s"] = lambda quick: _node_ready_row()
