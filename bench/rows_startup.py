"""Benchmark rows for what a process pays before it does anything: imports.

startup.version_s     `kraftlog --version` (the console script's import and parse), wall time
startup.import_log_s  `import kraftlog.engine.log.log` (what an embedding program pays for the log)

Each beside `python -c pass` timed in the same run with the same launcher, so the interpreter's own
start is the peer and the goal is what we add to it. Bytecode is cached (as an installed package
runs: rows_cluster.bytecode_launcher), and the first, untimed run fills that cache.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile

from kraftlog.bench.rows_cluster import bytecode_launcher
from kraftlog.bench.timing import measure, row

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


ROWS = {name: (lambda quick, name=name: _row(name)) for name in _PROBES}
