"""Proves `import kraftlog.engine.log.log` on the native path loads no pure twin and none of the
libraries only some calls need (numpy, the compression codecs, the crc32c package): the shared
batch types live in batch_types.py, not in the twin (issue 21). The same probe on the twins sees
them loaded, so it can tell the two apart."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

TWINS = ("kraftlog.engine.records.batch_pure", "kraftlog.engine.log.index_pure", "kraftlog.engine.records.wire_pure")
LAZY = ("numpy", "zstandard", "cramjam", "crc32c")
PROBE = """
import sys
import {module}
print(" ".join(m for m in {names!r} if m in sys.modules) or "none")
"""


def _loaded_by(module: str, **env: str) -> set[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("KRAFTLOG_NO_EXTENSIONS", "KRAFTLOG_REQUIRE_EXTENSIONS")}
    proc = subprocess.run([sys.executable, "-c", PROBE.format(module=module, names=TWINS + LAZY)],
                          capture_output=True, text=True, timeout=60, env={**clean, **env})
    assert proc.returncode == 0, proc.stderr
    words = proc.stdout.split()
    return set() if words == ["none"] else set(words)


@pytest.mark.parametrize("module", ["kraftlog.engine.log.log", "kraftlog.engine.records.batch"])
def test_the_native_path_imports_no_twin_and_no_lazy_library(module):
    assert _loaded_by(module, KRAFTLOG_REQUIRE_EXTENSIONS="1") == set()


def test_the_twins_are_still_what_the_switch_loads():
    loaded = _loaded_by("kraftlog.engine.log.log", KRAFTLOG_NO_EXTENSIONS="1")
    assert set(TWINS) <= loaded and "crc32c" in loaded


def test_the_native_codec_loads_numpy_when_it_first_builds_arrays():
    """numpy is deferred, not dropped: the first scan loads it and returns numpy arrays."""
    code = ("import sys; from kraftlog.engine.records import batch\n"
            "assert 'numpy' not in sys.modules\n"
            "scan = batch.scan_batches(batch.build_batch([(None, b'v')]))\n"
            "print(type(scan.positions).__module__, scan.batch_count)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "KRAFTLOG_REQUIRE_EXTENSIONS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["numpy", "1"]
