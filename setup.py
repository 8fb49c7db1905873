"""Build for kraftlog: folders map onto one import root, one extension per csrc/*.pyx.

Layout (see docs/ARCHITECTURE.md):
    csrc/    -> kraftlog          (native modules, their .pyi stubs, the twin chooser)
    engine/  -> kraftlog.engine
    raft/    -> kraftlog.raft
    bench/   -> kraftlog.bench
No folder in the checkout is itself named ``kraftlog``, so running from the repository root never
shadows the installed package, and nothing named ``engine`` or ``raft`` reaches site-packages.

Build switches (environment):
    KRAFTLOG_CYTHON_ANNOTATE=1   write Cython's HTML annotation next to each .pyx
    KRAFTLOG_CYTHON_TRACE=1      compile with line tracing (coverage / profilers see Cython lines)
    KRAFTLOG_DEBUG_BUILD=1       -O0 -g and Cython bounds checks on
"""

import os
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
FOLDERS = {"kraftlog": "csrc", "kraftlog.engine": "engine", "kraftlog.raft": "raft", "kraftlog.bench": "bench"}


def _packages() -> tuple[list[str], dict[str, str]]:
    """Every folder with an __init__.py under a mapped root becomes a package."""
    packages, package_dir = [], {}
    for name, folder in FOLDERS.items():
        package_dir[name] = folder
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(ROOT / folder)
            parts = [] if rel == Path(".") else list(rel.parts)
            packages.append(".".join([name, *parts]))
    return packages, package_dir


class BuildPyWithoutTests(build_py):
    """Leave pytest files (bench/test_*.py, run by `make bench` from the checkout) out of the wheel
    and the sdist: a user's site-packages holds what kraftlog runs, not its test suites."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [(pkg, module, path) for pkg, module, path in modules if not module.startswith("test_")]


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def _extensions() -> list:
    import numpy
    from Cython.Build import cythonize

    trace, debug = _flag("KRAFTLOG_CYTHON_TRACE"), _flag("KRAFTLOG_DEBUG_BUILD")
    opt = ["-O0", "-g"] if debug else ["-O2"]
    warnings = ["-Wall", "-Wno-unused-function", "-Wno-unreachable-code"]
    macros = [("CYTHON_TRACE_NOGIL", "1")] if trace else []
    exts = []
    for pyx in sorted((ROOT / "csrc").glob("*.pyx")):
        exts.append(
            Extension(
                f"kraftlog.{pyx.stem}",
                # A .pyx names its own C files with a "# distutils: sources = csrc/x.c" header.
                [str(pyx.relative_to(ROOT))],
                include_dirs=["csrc", numpy.get_include()],  # numpy's C API (cimport numpy)
                extra_compile_args=opt + warnings,
                define_macros=[*macros, ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            )
        )
    directives = {
        "language_level": 3,
        "boundscheck": debug,
        "wraparound": False,
        "cdivision": True,
        "initializedcheck": debug,
        "linetrace": trace,
        "embedsignature": True,
    }
    # include_path: the .pyx files cimport csrc/batch_header.pxd by its bare name.
    return cythonize(exts, compiler_directives=directives, annotate=_flag("KRAFTLOG_CYTHON_ANNOTATE"),
                     include_path=["csrc"])


packages, package_dir = _packages()
setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"kraftlog": ["*.pyi", "py.typed"]},
    exclude_package_data={"kraftlog": ["*.pyx", "*.pxd", "*.c", "*.h"]},
    ext_modules=_extensions(),
    cmdclass={"build_py": BuildPyWithoutTests},
)
