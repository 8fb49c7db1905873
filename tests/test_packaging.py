"""Proves the built wheel is right outside editable mode: only `kraftlog` at the top of site-packages,
every native module and stub inside, and `kraftlog --version` runs from a fresh virtual environment."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kraftlog import __version__, _accel

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(ROOT)], check=True, cwd=ROOT, timeout=600)
    (built,) = out.glob("kraftlog-*.whl")
    return built


def test_wheel_holds_only_the_kraftlog_root(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
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
    assert not any(n.endswith((".pyx", ".c")) for n in names)


def test_wheel_installs_and_runs_in_a_fresh_venv(wheel: Path, tmp_path: Path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    # --no-deps: this checks our own files and mapping; the third-party packages are tested in .venv.
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300)
    version = subprocess.run([str(venv / "bin" / "kraftlog"), "--version"], capture_output=True, text=True,
                             cwd=tmp_path, timeout=60)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"kraftlog {__version__}"
    probe = subprocess.run(
        [str(py), "-c", "import kraftlog.engine, kraftlog.raft, kraftlog._wire, sysconfig;"
                        "print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60, check=True)
    site = Path(probe.stdout.strip())
    assert not (site / "engine").exists() and not (site / "raft").exists()
    assert (site / "kraftlog" / "engine").is_dir()
