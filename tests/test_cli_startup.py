"""Proves `kraftlog --version` and `kraftlog --help` import no command group: not asyncio, ssl,
numpy, the node or the bench report (main.py registers only the group a command line names), and
that a group's flags are still there when it is named; a node process imports kio without
hypothesis."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("asyncio", "ssl", "numpy", "kraftlog.bench", "kraftlog.engine.node", "kraftlog.engine.log")
PROBE = """
import sys
from kraftlog.engine.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(" ".join(m for m in {heavy!r} if m in sys.modules) or "none")
"""


def _imported_by(*argv: str) -> str:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), *argv], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()[-1]


def test_version_and_help_import_no_group():
    assert _imported_by("--version") == "none"
    assert _imported_by("--help") == "none"


def test_the_named_group_is_registered_with_its_flags():
    proc = subprocess.run([sys.executable, "-m", "kraftlog.engine.cli.main", "--debug", "node", "run", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--controller-quorum-voters" in proc.stdout, proc.stderr
    assert "kraftlog.engine.node" in _imported_by("node", "run", "--help")


def test_a_node_process_imports_kio_without_hypothesis():
    """kio imports hypothesis (0.2-0.3 s) when it can; `kraftlog node` keeps it out (it is
    installed here: the test extra), and any other group still has it."""
    import hypothesis  # noqa: F401 - the test is void unless hypothesis is importable

    probe = ("import sys; import kraftlog.engine.cli.main as m; m.build_parser([{group!r}]); "
             "import kraftlog.engine.node.node; print(sys.modules.get('kio') is not None, "
             "sys.modules.get('hypothesis') is not None)")
    got = {group: subprocess.run([sys.executable, "-c", probe.format(group=group)], capture_output=True, text=True,
                                 timeout=60).stdout.split() for group in ("node", "log")}
    assert got == {"node": ["True", "False"], "log": ["True", "True"]}


def test_the_node_ready_row_times_a_real_node_to_its_ready_line(monkeypatch):
    """startup.node_ready_s starts real single-node processes: a positive time, its goal judged
    on it, the bare interpreter beside it."""
    from kraftlog.bench import rows_startup

    monkeypatch.setattr(rows_startup, "NODE_READY_REPEAT", 2)
    r = rows_startup.ROWS["startup.node_ready_s"](True)
    assert r["name"] == "startup.node_ready_s" and r["value"] > r["peer_value"] > 0
    assert r["met"] == (r["value"] <= rows_startup.NODE_READY_GOAL_S)
