"""Kafka ``.checkpoint`` files: export a stored snapshot to one, import one into the store.

A Kafka snapshot file is named ``%020d-%010d.checkpoint`` (end offset, epoch: Snapshots.java) and
holds exactly the snapshot stream (stream.py). Export writes ``<name>.part``, fsyncs it, renames
it into place and fsyncs the directory, so a crash never leaves a half-written ``.checkpoint``
(Kafka's own writer does the same with its ``.checkpoint.part`` files). Import validates the
whole file (every batch CRC, header first, footer last) before anything is stored.
"""

from __future__ import annotations

import os

from kraftlog.durable import replace_durably
from kraftlog.engine.layout import SNAPSHOT_FILE_NAME
from kraftlog.engine.snapshot.errors import SnapshotError
from kraftlog.engine.snapshot.layout import Manifest, SnapshotId, as_id
from kraftlog.engine.snapshot.store import SnapshotStore

PART_SUFFIX = ".part"
EXPORT_READ_BYTES = 8 << 20  # bytes read from the store per step: bounded memory for any size


def checkpoint_name(snapshot_id) -> str:
    return as_id(snapshot_id).file_name


def parse_checkpoint_name(name: str) -> SnapshotId | None:
    """The id a Kafka snapshot file name carries, None when it is not one."""
    m = SNAPSHOT_FILE_NAME.match(os.path.basename(name))
    return None if m is None else as_id((int(m.group(1)), int(m.group(2))))


def export_checkpoint(store: SnapshotStore, snapshot_id, directory: str | os.PathLike) -> str:
    """Write the snapshot as ``<directory>/%020d-%010d.checkpoint``; returns the file's path."""
    sid = as_id(snapshot_id)
    size = store.manifest(sid).stream_bytes
    final = os.path.join(os.fspath(directory), sid.file_name)
    part = final + PART_SUFFIX
    with open(part, "wb") as out:
        position = 0
        while position < size:
            data = store.read(sid, position, EXPORT_READ_BYTES)
            if not data:
                raise SnapshotError(f"snapshot {sid} ended at {position} of its {size} bytes while exporting")
            out.write(data)
            position += len(data)
        out.flush()
        os.fsync(out.fileno())
    replace_durably(part, final)
    return final


def import_checkpoint(store: SnapshotStore, path: str | os.PathLike, snapshot_id=None, *,
                      replace: bool = False) -> Manifest:
    """Validate and store a ``.checkpoint`` file (Kafka's or ours). The id comes from the file name
    unless given. Raises SnapshotCorruptError (with the path and position) when it does not validate."""
    path = os.fspath(path)
    sid = as_id(snapshot_id) if snapshot_id is not None else parse_checkpoint_name(path)
    if sid is None:
        raise SnapshotError(f"{path}: not a snapshot file name (%020d-%010d.checkpoint); pass the snapshot id")
    with open(path, "rb") as f:
        data = f.read()
    return store.write_stream(sid, data, replace=replace, path=path)
