"""The CLI's error contract, asserted the same way by every CLI test."""

from __future__ import annotations

import subprocess


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """Exit ``code``, exactly one line on stderr naming every needle, no traceback; returns the line."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
