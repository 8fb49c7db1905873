"""The LMDB snapshot store and Kafka .checkpoint export/import.

    SnapshotStore / SnapshotStoreConfig   store.py     write, read, verify, retain, load
    load_latest_valid                     store.py     newest snapshot that verifies, else older
    LazySnapshotImage                     lazy.py      entity lookups without a full load
    SnapshotReceiver                      transfer.py  FetchSnapshot's receiving side
    export_checkpoint / import_checkpoint checkpoint.py Kafka's %020d-%010d.checkpoint files
    SnapshotId, byte layouts              layout.py
    typed errors                          errors.py
"""

from kraftlog.engine.snapshot.checkpoint import export_checkpoint, import_checkpoint, parse_checkpoint_name
from kraftlog.engine.snapshot.errors import (
    LazyImageUnsupportedError,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotExistsError,
    SnapshotNotFoundError,
    SnapshotStoreFullError,
    SnapshotTransferError,
)
from kraftlog.engine.snapshot.layout import Manifest, SnapshotId
from kraftlog.engine.snapshot.lazy import LazySnapshotImage
from kraftlog.engine.snapshot.store import SnapshotStore, SnapshotStoreConfig, load_latest_valid
from kraftlog.engine.snapshot.transfer import SnapshotReceiver

__all__ = [
    "LazyImageUnsupportedError", "LazySnapshotImage", "Manifest", "SnapshotCorruptError", "SnapshotError",
    "SnapshotExistsError", "SnapshotId", "SnapshotNotFoundError", "SnapshotReceiver", "SnapshotStore",
    "SnapshotStoreConfig", "SnapshotStoreFullError", "SnapshotTransferError", "export_checkpoint",
    "import_checkpoint", "load_latest_valid", "parse_checkpoint_name",
]
