"""Proves the package layout, the chooser and its guard: native modules load, the twin switch works,
and a missing native module fails the test suite instead of silently running on the twins."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kraftlog
from kraftlog import _accel

ROOT = Path(__file__).resolve().parent.parent


def test_native_module_list_matches_csrc():
    """Every csrc/_x.pyx is listed as kraftlog._x in NATIVE_MODULES, and nothing else is."""
    built = {f"kraftlog.{p.stem}" for p in (ROOT / "csrc").glob("*.pyx")}
    assert built == set(_accel.NATIVE_MODULES)


def test_import_roots_map_to_the_folders():
    import kraftlog.bench
    import kraftlog.engine
    import kraftlog.raft

    assert Path(kraftlog.__file__).parent == ROOT / "csrc" or "site-packages" in kraftlog.__file__
    assert Path(kraftlog.engine.__file__).parent.name in ("engine",)
    assert Path(kraftlog.raft.__file__).parent.name == "raft"


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("KRAFTLOG_")}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, cwd=ROOT, timeout=120)


def test_no_extensions_switch_forces_the_twins():
    out = _run("from kraftlog.engine.records import wire; print(wire.IMPLEMENTATION)", KRAFTLOG_NO_EXTENSIONS="1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pure"
    if not _accel.FORCE_PURE:
        out = _run("from kraftlog.engine.records import wire; print(wire.IMPLEMENTATION)")
        assert out.stdout.strip() == "native", out.stderr


BLOCKER = """
import importlib.abc, sys
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "kraftlog._wire":
            raise ImportError("blocked by the test: pretend the extension was never built")
sys.meta_path.insert(0, _Block())
"""


@pytest.fixture()
def blocked_native(tmp_path: Path) -> Path:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    return tmp_path


def test_missing_native_module_falls_back_with_a_warning_and_is_recorded(blocked_native: Path):
    out = _run(
        """
        import warnings
        warnings.simplefilter("error")
        try:
            from kraftlog.engine.records import wire
        except RuntimeWarning as w:
            print("warned:", w)
        """,
        PYTHONPATH=str(blocked_native),
    )
    assert "warned: kraftlog: kraftlog._wire did not load" in out.stdout, out.stdout + out.stderr


def test_require_extensions_turns_a_missing_module_into_an_error(blocked_native: Path):
    out = _run("from kraftlog.engine.records import wire", PYTHONPATH=str(blocked_native),
               KRAFTLOG_REQUIRE_EXTENSIONS="1")
    assert out.returncode != 0
    assert "ExtensionNotLoadedError" in out.stderr and "kraftlog._wire" in out.stderr


def test_suite_refuses_to_run_when_the_native_module_is_missing(blocked_native: Path):
    """The guard in conftest.py: a run without KRAFTLOG_NO_EXTENSIONS fails if a native module is missing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KRAFTLOG_")}
    env["PYTHONPATH"] = str(blocked_native)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/test_foundation.py::test_native_module_list_matches_csrc"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert out.returncode != 0
    assert "native extension did not load" in out.stdout + out.stderr


def test_version_is_exposed():
    assert kraftlog.__version__.count(".") == 2


def _twin_pairs() -> dict[str, str]:
    """native module -> its twin, from the ``select(native, twin)`` calls themselves."""
    pattern = re.compile(r'select\("(kraftlog\._\w+)", "([\w.]+)"\)')
    pairs = {}
    for path in (ROOT / "engine").rglob("*.py"):
        pairs.update(pattern.findall(path.read_text()))
    return pairs


def _stub_names(stem: str) -> set[str]:
    tree = ast.parse((ROOT / "csrc" / f"{stem}.pyi").read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}


def test_stubs_native_modules_and_twins_name_the_same_functions():
    """A native module's .pyi stub, the module itself and its pure twin define the same public
    functions and classes (a stub left naming a removed function, or a twin missing one, fails)."""
    pairs = _twin_pairs()
    assert set(pairs) == set(_accel.NATIVE_MODULES)
    for native, twin in pairs.items():
        stub = _stub_names(native.split(".")[-1])
        for module_name in (native, twin):
            module = importlib.import_module(module_name)
            public = {name for name, value in vars(module).items()
                      if not name.startswith("_") and callable(value)
                      and getattr(value, "__module__", module_name) == module_name}
            assert stub <= public, f"{module_name} lacks {sorted(stub - public)} of its stub"
            if module_name == native:
                assert public <= stub, f"{native} defines {sorted(public - stub)} its stub does not name"
