"""Which optional extra of kraftlog provides a third-party module that did not import.

The core (log, raft, image, snapshots, nodes, the tools) needs only the core dependencies; a few
commands need an extra (``kraftlog spark`` needs ``kraftlog[spark]``). pyproject.toml's
``[project.optional-dependencies]`` is the one list of what each extra holds: this reads it back
from the installed metadata, so a command run without its extra can say in one line what to install.
"""

from __future__ import annotations

import re

DISTRIBUTION = "kraftlog"
# A requirement line of the metadata: 'pyspark>=4.0; extra == "spark"'.
_REQUIREMENT = re.compile(r'^\s*([A-Za-z0-9][A-Za-z0-9._-]*)[^;]*;.*\bextra\s*==\s*"([^"]+)"')


def _import_name(distribution: str) -> str:
    """The module a distribution installs, by the usual rule (pyspark -> pyspark, prometheus-client ->
    prometheus_client). A distribution that breaks the rule is only named by its module."""
    return re.sub(r"[-.]+", "_", distribution).lower()


def extra_for(module: str) -> str | None:
    """The first extra whose requirements install top-level ``module``; None when none does (a core
    dependency, or kraftlog's metadata is not installed)."""
    from importlib import metadata  # ~20 ms of imports, paid only when a command already failed

    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return None
    for line in requirements:
        match = _REQUIREMENT.match(line)
        if match and _import_name(match.group(1)) == module:
            return match.group(2)
    return None


def missing_module_text(exc: ModuleNotFoundError) -> str | None:
    """'needs pyspark: install kraftlog[spark]' for a third-party module that did not import; None
    when the missing module is kraftlog's own (a broken install or a bug, not the user's to fix)."""
    module = (exc.name or "").split(".")[0]
    if not module or module == DISTRIBUTION:
        return None
    extra = extra_for(module)
    if extra is None:
        return f"needs {module}, which is not installed: reinstall kraftlog with its dependencies"
    return f"needs {module}: install {DISTRIBUTION}[{extra}]"
