"""Proves the package a user installs is right: `python -m build` makes an sdist holding every native
source, the wheel built *from that sdist* (as pip does for an sdist) carries every native module
and only the `kraftlog` root, and that wheel, installed with its core dependencies in a fresh
virtual environment, runs on the native code (KRAFTLOG_REQUIRE_EXTENSIONS=1)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from kraftlog import __version__, _accel

ROOT = Path(__file__).resolve().parent.parent
# What the native build reads (setup.py globs csrc/*.pyx; each .pyx names its .c and includes .h).
# Generated C is csrc/_*.c: the build makes it from the .pyx, so the sdist must not carry a stale copy.
NATIVE_SOURCE_SUFFIXES = (".pyx", ".pxd", ".pyi", ".h", ".c")
BUILD_TIMEOUT_S = 900  # two isolated build environments plus five extensions at -O2 on a loaded 2-core box
# What a clean clone lacks: the build starts from the sources alone and writes nothing into the checkout
# (a kraftlog.egg-info it left at the root would shadow the installed metadata for `python -m pytest`).
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
                                     ".hypothesis", ".benchmarks", "*.so", "_*.c", "*.html", "bench-results",
                                     "kraftlog-demo-data")

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path


def _run(cmd: list[str], timeout_s: int, **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd``; on failure, the assertion shows the end of its output (the cause is there)."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, **kwargs)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}"
    return done


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """`python -m build` with no flags: the sdist first, then the wheel built from the unpacked sdist,
    each in a fresh isolated environment holding only pyproject.toml's build requirements."""
    source, out = tmp_path_factory.mktemp("source") / "kraftlog", tmp_path_factory.mktemp("dist")
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], BUILD_TIMEOUT_S, cwd=source)
    (sdist,) = out.glob("kraftlog-*.tar.gz")
    (wheel,) = out.glob("kraftlog-*.whl")
    return Dists(sdist, wheel)


def _native_sources() -> set[str]:
    """csrc files the native build needs, relative to the checkout: hand-written, not generated."""
    return {f"csrc/{p.name}" for p in (ROOT / "csrc").iterdir()
            if p.suffix in NATIVE_SOURCE_SUFFIXES and not (p.suffix == ".c" and p.name.startswith("_"))}


def test_sdist_holds_every_native_source(dists: Dists):
    prefix = f"kraftlog-{__version__}/"
    with tarfile.open(dists.sdist) as tar:
        names = {n.removeprefix(prefix) for n in tar.getnames()}
    needed = _native_sources()
    assert {f"csrc/{m.split('.')[-1]}.pyx" for m in _accel.NATIVE_MODULES} <= needed
    assert needed - names == set(), "the sdist lacks native sources"
    assert not {n for n in names if n.startswith("csrc/_") and n.endswith(".c")}, "generated C in the sdist"
    assert not {n for n in names if n.endswith(".so")}
    assert {"setup.py", "pyproject.toml", "README.md", "LICENSE"} <= names


def test_wheel_from_the_sdist_holds_only_the_kraftlog_root(dists: Dists):
    with zipfile.ZipFile(dists.wheel) as whl:
        names = whl.namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"kraftlog", f"kraftlog-{__version__}.dist-info"}
    for module in _accel.NATIVE_MODULES:
        stem = module.split(".")[-1]
        assert any(n.startswith(f"kraftlog/{stem}.") and n.endswith(".so") for n in names), module
        assert f"kraftlog/{stem}.pyi" in names
    assert "kraftlog/py.typed" in names
    for sub in ("engine", "raft", "bench", "engine/records", "engine/controller", "engine/broker", "engine/node",
                "engine/protocol", "engine/client", "engine/cli", "engine/cli/tools", "engine/cli/demo_parts"):
        assert f"kraftlog/{sub}/__init__.py" in names
    assert not any(n.endswith((".pyx", ".pxd", ".c", ".h")) for n in names)
    # test suites stay in the checkout; engine/node/localcluster.py ships: `kraftlog bench` starts nodes with it
    assert not [n for n in names if Path(n).name.startswith(("test_", "conftest"))]
    assert "kraftlog/engine/node/localcluster.py" in names


def test_the_wheel_carries_the_license(dists: Dists):
    info = f"kraftlog-{__version__}.dist-info"
    with zipfile.ZipFile(dists.wheel) as whl:
        license_text = whl.read(f"{info}/licenses/LICENSE").decode()
        fields = whl.read(f"{info}/METADATA").decode().split("\n\n")[0].splitlines()
    assert license_text == (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert {"License-Expression: Apache-2.0", "License-File: LICENSE"} <= set(fields)


# Runs in the fresh venv: a batch built, appended to a log, read back, on the native modules only.
SMOKE = textwrap.dedent("""
    import sys
    from kraftlog import _accel
    from kraftlog.engine.log.log import Isolation, Log, LogConfig
    from kraftlog.engine.records.batch import iter_records

    with Log.open(sys.argv[1], LogConfig()) as log:
        log.initialize_leader_epoch(1)
        first = log.append_as_leader([b"hello", b"world"], epoch=1).first_offset
        log.update_high_watermark(log.end_offset)
        view = log.read(first, max_bytes=1 << 20, isolation=Isolation.HIGH_WATERMARK).records
        values = [record.value for record in iter_records(bytes(view), 0)]
    assert values == [b"hello", b"world"], values
    print(sorted(_accel.load_all_native().values()), sorted(set(_accel.choices().values())))
""")


def _fresh_venv(tmp_path: Path) -> tuple[Path, Path]:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], 300)
    return venv / "bin" / "python", venv / "bin" / "kraftlog"


def _smoke(py: Path, kraftlog: Path, tmp_path: Path) -> None:
    """kraftlog --version, a log append/read and log verify, on the native modules only."""
    env = {**os.environ, "KRAFTLOG_REQUIRE_EXTENSIONS": "1"}
    env.pop("KRAFTLOG_NO_EXTENSIONS", None)  # the twin run of `make test` must not reach this venv
    version = _run([str(kraftlog), "--version"], 60, cwd=tmp_path, env=env)
    assert version.stdout.strip() == f"kraftlog {__version__}"
    smoke = _run([str(py), "-c", SMOKE, str(tmp_path / "log")], 120, cwd=tmp_path, env=env)
    assert smoke.stdout.strip() == f"{['native'] * len(_accel.NATIVE_MODULES)} ['native']", smoke.stdout
    verify = _run([str(kraftlog), "log", "verify", str(tmp_path / "log")], 60, cwd=tmp_path, env=env)
    assert "offsets 0..1, 2 records" in verify.stdout.splitlines()[-1], verify.stdout


def test_wheel_installs_with_its_core_dependencies_and_runs_native(dists: Dists, tmp_path: Path):
    """README: pip install dist/kraftlog-*.whl (with its dependencies, the core ones only)."""
    py, kraftlog = _fresh_venv(tmp_path)
    _run([str(py), "-m", "pip", "install", "-q", str(dists.wheel)], 600)
    _smoke(py, kraftlog, tmp_path)
    probe = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], 60, cwd=tmp_path)
    site = Path(probe.stdout.strip())
    assert not (site / "engine").exists() and not (site / "raft").exists()
    assert (site / "kraftlog" / "engine").is_dir()
    assert not (site / "pyspark").exists() and not (site / "pyarrow").exists()  # the spark extra, not asked for


def test_sdist_installs_with_pip_and_runs_native(dists: Dists, tmp_path: Path):
    """README: pip install dist/kraftlog-*.tar.gz (pip builds the native modules from the sdist)."""
    py, kraftlog = _fresh_venv(tmp_path)
    _run([str(py), "-m", "pip", "install", "-q", str(dists.sdist)], BUILD_TIMEOUT_S)
    _smoke(py, kraftlog, tmp_path)
