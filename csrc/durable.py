"""Durable file replacement: what a crash may not tear.

A file that must be either the old or the new version after a crash (quorum-state,
meta.properties, an exported .checkpoint, a received snapshot) is written beside its final name,
fsynced, renamed over it, and then its directory is fsynced so the rename itself survives. The
segmented log does the same through its FileSystem seam (engine/log/fs.py), where tests inject
faults; everything else uses these.
"""

from __future__ import annotations

import os


def fsync_directory(directory: str | os.PathLike) -> None:
    """Make the directory's entries (a rename, a new or removed file) durable."""
    fd = os.open(os.fspath(directory) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(written: str | os.PathLike, final: str | os.PathLike) -> None:
    """Rename the already fsynced file ``written`` over ``final`` and make the rename durable."""
    os.replace(written, final)
    fsync_directory(os.path.dirname(os.fspath(final)))


def write_atomically(path: str | os.PathLike, data: bytes, *, suffix: str = ".tmp") -> None:
    """Replace ``path`` with ``data``: after a crash it holds either the old bytes or all of ``data``."""
    tmp = os.fspath(path) + suffix
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    replace_durably(tmp, path)
