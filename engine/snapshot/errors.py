"""Typed errors of the snapshot store: each names the snapshot (end offset, epoch) and what is wrong."""

from __future__ import annotations

from kraftlog.errors import CorruptRecordError, KraftlogError


def id_text(snapshot_id) -> str:
    """A snapshot id as Kafka names its file stem: ``<end offset>-<epoch>``."""
    return f"{int(snapshot_id[0])}-{int(snapshot_id[1])}"


class SnapshotError(KraftlogError):
    """Base of every snapshot-store operating error."""


class SnapshotNotFoundError(SnapshotError):
    """No finished snapshot with this id (never written, deleted by retention, or still incomplete)."""

    def __init__(self, snapshot_id):
        super().__init__(f"snapshot {id_text(snapshot_id)} does not exist")
        self.snapshot_id = snapshot_id


class SnapshotExistsError(SnapshotError):
    """A snapshot with this id is already stored (snapshots are immutable unless replaced on purpose)."""

    def __init__(self, snapshot_id):
        super().__init__(f"snapshot {id_text(snapshot_id)} already exists")
        self.snapshot_id = snapshot_id


class SnapshotStoreFullError(SnapshotError):
    """The LMDB map would have to grow past SnapshotStoreConfig.map_max_bytes."""


class SnapshotCorruptError(CorruptRecordError):
    """A stored or received snapshot whose bytes do not verify.

    ``snapshot_id`` is the snapshot, ``what`` the broken part ("manifest", "chunk 17", "index
    partitions", "stream", "batch at 4096", ...); ``position`` a byte position in the
    .checkpoint stream when known; ``path`` the file for imports.
    """

    def __init__(self, snapshot_id, what: str, reason: str, *, position: int | None = None,
                 path: str | None = None):
        prefix = f"snapshot {id_text(snapshot_id)}" if snapshot_id is not None else "snapshot"
        super().__init__(f"{prefix}: {what}: {reason}", position=position, path=path)
        self.snapshot_id = snapshot_id
        self.what = what


class SnapshotTransferError(SnapshotError):
    """A chunked transfer used out of order or past its limits (not corruption of stored data)."""


class LazyImageUnsupportedError(SnapshotError):
    """The snapshot is not in image form (it holds change records after registrations), so its
    entities cannot be answered from one record each; load it fully instead."""
