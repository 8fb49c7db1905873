"""Proves the core runs without the spark extra: with pyspark and pyarrow made unimportable, every
module outside engine/pipeline imports (so none of them imports Spark at module level), `kraftlog
--version`, `kraftlog spark --help` and `kraftlog bench --list` work, and `kraftlog spark replay`
ends in one line naming the extra to install, not a traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from cli_contract import assert_one_line_error

from kraftlog import extras

BLOCKED = ("pyspark", "pyarrow")
# Prepended to every child: an import hook that fails as a missing package does.
BLOCKER = textwrap.dedent(f"""
    import sys

    class _Blocked:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {BLOCKED!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, _Blocked())
""")
# Only the Spark pipeline itself may need Spark at import; bench's pytest files run from the checkout.
SPARK_ONLY_PREFIXES = ("kraftlog.engine.pipeline.", "kraftlog.bench.test_")


def _python(code: str, *args: str, timeout_s: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKER + textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=timeout_s)


def _kraftlog(*argv: str) -> subprocess.CompletedProcess:
    return _python("from kraftlog.engine.cli.main import main; sys.exit(main(sys.argv[1:]))", *argv)


def test_the_blocker_blocks():
    proc = _python("import pyspark.sql")
    assert proc.returncode == 1 and "ModuleNotFoundError: No module named 'pyspark'" in proc.stderr


def test_every_module_but_the_pipeline_imports_without_spark():
    proc = _python(f"""
        import importlib, pkgutil
        import kraftlog

        skipped = []
        for info in pkgutil.walk_packages(kraftlog.__path__, "kraftlog."):
            name = info.name
            if name.endswith(".__main__") or name.startswith({SPARK_ONLY_PREFIXES!r}):
                skipped.append(name)
                continue
            importlib.import_module(name)
        assert not [m for m in sys.modules if m.split(".")[0] in {BLOCKED!r}]
        print(len(sys.modules), "modules;", len(skipped), "skipped")
    """, timeout_s=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "modules;" in proc.stdout


def test_version_and_help_need_no_spark():
    from kraftlog import __version__

    version = _kraftlog("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"kraftlog {__version__}"), version.stderr
    help_ = _kraftlog("spark", "replay", "--help")
    assert help_.returncode == 0 and "--out" in help_.stdout, help_.stderr
    listed = _kraftlog("bench", "--list")
    assert listed.returncode == 0 and "spark.read_rows" in listed.stdout.split(), listed.stderr


def test_spark_without_the_extra_says_what_to_install(tmp_path):
    proc = _kraftlog("spark", "replay", str(tmp_path), "--out", str(tmp_path / "out"))
    line = assert_one_line_error(proc, 1, "kraftlog spark replay: error: needs ", ": install kraftlog[spark]")
    assert line.split("needs ")[1].split(":")[0] in BLOCKED, line


def test_the_extras_are_read_from_the_installed_metadata():
    assert (extras.extra_for("pyspark"), extras.extra_for("pyarrow")) == ("spark", "spark")
    assert extras.extra_for("matplotlib") == "bench"
    assert extras.extra_for("numpy") is None  # a core dependency is in no extra
    missing = ModuleNotFoundError("No module named 'kraftlog._nothing'", name="kraftlog._nothing")
    assert extras.missing_module_text(missing) is None  # our own module missing is a bug, not a hint
