"""Chunked snapshot transfer (KIP-595 FetchSnapshot).

The sending side reads the .checkpoint form by (position, max_bytes): SnapshotStore.read. The
receiving side feeds what arrives, in order, to a SnapshotReceiver, which buffers it (at most
SnapshotStoreConfig.receive_max_bytes) and, on ``finish``, verifies the size, every batch's CRC
and the header/footer, then stores the snapshot in one transaction: nothing of a transfer is
visible before it verified, and a transfer that dies midway leaves nothing behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kraftlog.engine.snapshot.errors import SnapshotCorruptError, SnapshotTransferError
from kraftlog.engine.snapshot.layout import Manifest, SnapshotId, as_id

if TYPE_CHECKING:
    from kraftlog.engine.snapshot.store import SnapshotStore


class SnapshotReceiver:
    """Rebuilds snapshot ``snapshot_id`` from chunks of its .checkpoint form.

    ``size`` (FetchSnapshot's Size) is checked on every write and at ``finish`` when given.
    Not thread-safe: one receiver per transfer, driven by one task.
    """

    def __init__(self, store: SnapshotStore, snapshot_id, *, size: int | None = None, replace: bool = False):
        self.store = store
        self.snapshot_id: SnapshotId = as_id(snapshot_id)
        self.size = size
        self.replace = replace
        self._buf = bytearray()
        self._done = False
        limit = store.config.receive_max_bytes
        if size is not None and not 0 <= size <= limit:
            raise SnapshotTransferError(f"snapshot {self.snapshot_id}: size {size} outside 0..{limit} "
                                        "(receive_max_bytes)")

    @property
    def position(self) -> int:
        """Bytes received so far: the position the next write must start at."""
        return len(self._buf)

    def write(self, position: int, data) -> None:
        """Append ``data``, which must start exactly at ``position`` == bytes received so far."""
        self._check_open()
        if position != len(self._buf):
            raise SnapshotTransferError(f"snapshot {self.snapshot_id}: chunk at position {position}, expected "
                                        f"{len(self._buf)} (chunks must arrive in order)")
        end = position + len(data)
        limit = self.store.config.receive_max_bytes if self.size is None else self.size
        if end > limit:
            raise SnapshotTransferError(f"snapshot {self.snapshot_id}: {end} bytes would exceed "
                                        f"{'its size' if self.size is not None else 'receive_max_bytes'} {limit}")
        self._buf += data

    def finish(self, size: int | None = None) -> Manifest:
        """Verify everything received and store the snapshot atomically; returns its manifest.

        Raises SnapshotCorruptError (size mismatch, a bad batch, no header/footer) and then the
        receiver is spent: start a new one to fetch again.
        """
        self._check_open()
        self._done = True
        expected = size if size is not None else self.size
        buf, self._buf = self._buf, bytearray()
        if expected is not None and len(buf) != expected:
            raise SnapshotCorruptError(self.snapshot_id, "transfer", f"received {len(buf)} bytes, size is {expected}")
        return self.store.write_stream(self.snapshot_id, bytes(buf), replace=self.replace)

    def abort(self) -> None:
        """Drop what was received."""
        self._done = True
        self._buf = bytearray()

    def _check_open(self) -> None:
        if self._done:
            raise SnapshotTransferError(f"snapshot {self.snapshot_id}: the receiver already finished or aborted")
