"""The one place that chooses between a native module and its pure-Python twin.

Every native module ``kraftlog._x`` (built from ``csrc/_x.pyx``) has a twin with the same
functions and signatures somewhere under ``kraftlog.engine``. A public module picks one with
``select``; nothing else imports ``kraftlog._x`` directly, so the switch below reaches every
caller:

- ``KRAFTLOG_NO_EXTENSIONS=1`` forces the pure twins (used by the twin test run);
- ``KRAFTLOG_REQUIRE_EXTENSIONS=1`` turns a missing native module into an error at import;
- otherwise a missing native module falls back to its twin with a RuntimeWarning, and the
  fallback is recorded so the test suite (tests/conftest.py) can refuse to run on the slow path.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

from kraftlog.errors import ExtensionNotLoadedError

# Every native module the build produces. tests/test_foundation.py checks this against csrc/*.pyx.
NATIVE_MODULES: tuple[str, ...] = ("kraftlog._batch", "kraftlog._image", "kraftlog._index", "kraftlog._metadata",
                                   "kraftlog._side", "kraftlog._wire")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


FORCE_PURE = _env_flag("KRAFTLOG_NO_EXTENSIONS")
REQUIRE_NATIVE = _env_flag("KRAFTLOG_REQUIRE_EXTENSIONS")

# native module name -> "native", or "pure: <why>"
_choices: dict[str, str] = {}


def select(native: str, pure: str) -> ModuleType:
    """Return the native module ``native`` unless disabled or missing, else the module ``pure``."""
    if native not in NATIVE_MODULES:
        raise ValueError(f"{native} is not listed in kraftlog._accel.NATIVE_MODULES")
    if FORCE_PURE:
        _choices[native] = "pure: KRAFTLOG_NO_EXTENSIONS=1"
        return importlib.import_module(pure)
    try:
        module = importlib.import_module(native)
    except ImportError as exc:
        if REQUIRE_NATIVE:
            raise ExtensionNotLoadedError(f"native module {native} did not load: {exc}") from exc
        _choices[native] = f"pure: {native} did not load ({exc})"
        warnings.warn(f"kraftlog: {native} did not load, using the pure-Python twin ({exc})",
                      RuntimeWarning, stacklevel=2)
        return importlib.import_module(pure)
    _choices[native] = "native"
    return module


def choices() -> dict[str, str]:
    """What ``select`` chose so far, per native module name."""
    return dict(_choices)


def load_all_native() -> dict[str, str]:
    """Try to import every native module; return name -> "native" or the import error text."""
    status = {}
    for name in NATIVE_MODULES:
        try:
            importlib.import_module(name)
            status[name] = "native"
        except ImportError as exc:
            status[name] = f"missing: {exc}"
    return status
