"""Operating errors of `kraftlog demo`: each ends as one line on stderr (cli.py), exit 1."""

from __future__ import annotations

from kraftlog.errors import KraftlogError


class DemoError(KraftlogError):
    """The tour could not go on; the message says what and where (nodes, directory, offsets)."""


class DataDirError(DemoError):
    """--dir is not usable: a file, or a directory holding something that is not the demo's."""


class NodeStartError(DemoError):
    """A node process exited or did not print READY in time."""


class QuorumError(DemoError):
    """The quorum did not reach a state in time (no leader, a replica not caught up)."""
