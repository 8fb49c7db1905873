"""Proves `kraftlog --version` and `kraftlog --help` import no command group: not asyncio, ssl,
numpy, the node or the bench report (main.py registers only the group a command line names), and
that a group's flags are still there when it is named."""

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
