"""An image for the tools, from a log directory or a ``.checkpoint`` file, without writing anything.

A log directory is scanned read-only first (segments.scan_log_dir: CRC, offset continuity), so a
corrupt segment is reported with its file and position and the repair command, before any record
is applied. A torn tail in the last segment (what a crash leaves, and what the next open
truncates) is not an error here: the image stops before it and a warning says so. The valid
batches then go to the Loader in regions of whole batches (``REGION_BYTES``), which is also the
progress step: "offset X of Y, N records/s".

A checkpoint file is Kafka's snapshot: record batches framed by SnapshotHeader / SnapshotFooter
control records; its id comes from the name ``<20-digit end offset>-<10-digit epoch>.checkpoint``
(else from the last batch: its last offset + 1 and its leader epoch).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from kraftlog.engine.cli.tools import segments
from kraftlog.engine.cli.tools.common import (
    REPAIR_HINT,
    CorruptLogError,
    NotALogDirectoryError,
    resolve_log_dir,
    warn,
)
from kraftlog.engine.cli.tools.progress import ProgressBar, rate
from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.image.loader import Loader, LoadManifest
from kraftlog.engine.layout import LMDB_DATA_NAME, METADATA_LOG_DIRNAME, SNAPSHOT_DIRNAME, SNAPSHOT_FILE_NAME
from kraftlog.engine.records import batch as batch_codec
from kraftlog.errors import KraftlogError, UndecodableRecordError

REGION_BYTES = 16 << 20  # bytes of whole batches per loader step (and per progress update)


@dataclass
class Loaded:
    image: MetadataImage
    source: str  # the log directory or checkpoint file read
    kind: str  # "log" or "checkpoint"
    manifest: LoadManifest
    end_offset: int
    snapshot_end_offset: int | None = None  # a log directory read from its LMDB snapshot: where it ends


def load(path: str, *, command: str, progress: bool, skip_errors: bool = False) -> Loaded:
    if os.path.isfile(path):
        if not path.endswith(".checkpoint"):
            raise NotALogDirectoryError(f"{path} is a file but not a .checkpoint snapshot; give a log directory "
                                        "or a <end offset>-<epoch>.checkpoint file")
        return load_checkpoint(path, progress=progress, skip_errors=skip_errors)
    try:
        directory = resolve_log_dir(path)
    except NotALogDirectoryError:
        store = _store_without_log(path)
        if store is None:
            raise
        return load_store(store, command=command)
    return load_log_dir(directory, command=command, progress=progress, skip_errors=skip_errors)


def _store_without_log(path: str) -> str | None:
    """The LMDB snapshot store of a directory that holds one but no segments (a store filled by
    `snapshot import`, a node whose log was deleted), or None."""
    if not os.path.isdir(path):
        return None
    for candidate in (path, os.path.join(path, SNAPSHOT_DIRNAME),
                      os.path.join(path, METADATA_LOG_DIRNAME, SNAPSHOT_DIRNAME)):
        if os.path.isfile(os.path.join(candidate, LMDB_DATA_NAME)):
            return candidate
    return None


def load_store(store_path: str, *, command: str) -> Loaded:
    """The image of the newest snapshot in a store with no log beside it (read-only)."""
    from kraftlog.engine.snapshot.store import SnapshotStore

    with SnapshotStore(store_path) as store:
        ids = store.ids()
        if not ids:
            raise NotALogDirectoryError(f"{store_path} is a snapshot store with no snapshot in it, and there is "
                                        "no log beside it")
        sid = ids[-1]
        image = store.load_image(sid)
    warn(command, f"{store_path}: no log segments; the image is snapshot {sid.end_offset}-{sid.epoch}, the "
                  "newest in the store")
    return Loaded(image, store_path, "snapshot", LoadManifest("snapshot"), sid.end_offset, sid.end_offset)


def checkpoint_id(path: str, buf) -> tuple[int, int]:
    """(end offset, epoch) from the file name, else from the last batch of ``buf`` (a stream
    check_checkpoint has verified: walked again here only for a file not named by its id)."""
    m = SNAPSHOT_FILE_NAME.match(os.path.basename(path))
    if m:
        return int(m.group(1)), int(m.group(2))
    scan = batch_codec.scan_batches(buf, 0, len(buf), verify_crc=False)
    if not scan.batch_count:
        return 0, 0
    return int(scan.last_offsets[-1]) + 1, int(scan.partition_leader_epochs[-1])


def check_checkpoint(path: str, buf, *, hint: str = "the snapshot cannot be used (log dump shows what it holds)"):
    """Refuse anything but a whole snapshot stream (SnapshotHeader first, SnapshotFooter last, every
    CRC valid): CorruptLogError naming the file and position; an empty, header-only or footer-less
    file is a snapshot cut short, never an empty image."""
    from kraftlog.engine.snapshot.errors import SnapshotCorruptError
    from kraftlog.engine.snapshot.stream import validate_stream

    try:
        validate_stream(buf, path=path)
    except SnapshotCorruptError as exc:
        raise CorruptLogError(path, exc.position or 0, f"not a whole snapshot: {exc.reason}", hint) from None


def load_checkpoint(path: str, *, progress: bool, skip_errors: bool = False) -> Loaded:
    buf = segments.map_file(path)
    check_checkpoint(path, buf)
    end_offset, epoch = checkpoint_id(path, buf)
    manifests: list[LoadManifest] = []
    with ProgressBar(progress, "loading snapshot", total=max(1, len(buf))) as bar:
        def on_progress(m: LoadManifest) -> None:
            manifests.append(m)
            bar.update(len(buf), rate(m.records, bar.elapsed_s))

        loader = Loader(skip_errors=skip_errors, progress=on_progress)
        image = loader.load_snapshot(buf, end_offset=end_offset, epoch=epoch, path=path)
    manifest = manifests[-1] if manifests else LoadManifest("snapshot")
    return Loaded(image, path, "checkpoint", manifest, end_offset)


def load_log_dir(directory: str, *, command: str, progress: bool, skip_errors: bool = False) -> Loaded:
    scan = segments.scan_log_dir(directory, check_indexes=False)
    problem = scan.problem
    if problem is not None and problem.kind == "log":
        if not problem.torn_tail:
            raise CorruptLogError(problem.path, problem.position, problem.reason,
                                  f"the image cannot be read past it; repair with: {REPAIR_HINT.format(dir=directory)}")
        warn(command, f"{problem.path}: position {problem.position}: {problem.reason}; the image stops before it "
                      "(the next open of the log truncates it)")
    start, end = scan.start_offset, scan.end_offset
    base = _snapshot_base(directory, start, end, command)
    if base is not None:
        start = base.provenance.offset + 1
    elif start > (scan.segments[0].base_offset if scan.segments else 0):
        warn(command, f"the log starts at offset {start}: the records before it are in a snapshot, "
                      "which this image does not include")
    manifests: list[LoadManifest] = []
    with ProgressBar(progress, "replaying", total=max(1, end - start)) as bar:
        def on_progress(m: LoadManifest) -> None:
            manifests.append(m)
            done = max(0, m.last_offset + 1 - start)
            bar.update(done, f"offset {m.last_offset + 1:,} of {end:,}, {rate(m.records, bar.elapsed_s)}")

        loader = Loader(base, skip_errors=skip_errors, progress=on_progress)
        cursor: list = []
        try:
            image = loader.replay_regions(_regions(scan, start, cursor), path=directory)
        except UndecodableRecordError as exc:  # a position in a region: name the segment and its position
            if not cursor:
                raise
            raise exc.moved(path=cursor[0], base_position=cursor[1]) from None
    manifest = manifests[-1] if manifests else LoadManifest("log")
    return Loaded(image, directory, "log", manifest, end, None if base is None else base.provenance.offset + 1)


def _snapshot_base(directory: str, start: int, end: int, command: str) -> MetadataImage | None:
    """The image of the newest snapshot in the node's LMDB store (``DIR/snapshots``, see
    engine/node/node.py) that the log continues from (end offset within [log start, log end]),
    or None when there is no store or no such snapshot. Read-only: the store is opened without
    creating anything, and a snapshot that does not verify is skipped with a warning."""
    path = os.path.join(directory, SNAPSHOT_DIRNAME)
    if start == 0 or not os.path.isfile(os.path.join(path, LMDB_DATA_NAME)):
        return None
    from kraftlog.engine.snapshot.store import SnapshotStore

    with SnapshotStore(path) as store:
        for sid in reversed(store.ids()):
            if not start <= sid.end_offset <= end:
                continue
            try:
                return store.load_image(sid)
            except KraftlogError as exc:
                warn(command, f"{path}: snapshot {sid.end_offset}-{sid.epoch} skipped: {exc}")
    return None


def _regions(scan: segments.LogDirScan, start_offset: int, cursor: list):
    """Zero-copy views of whole valid batches, about REGION_BYTES each (one batch if larger);
    ``cursor`` holds the segment path and position of the last one.

    A region never starts at a batch whose first record is a PartitionRecord: the Loader applies
    a TopicRecord with its PartitionRecords as one vectorised step only when the whole run is in
    one region, and falls back to record-by-record replay (about 20x slower) when a run is split.
    """
    for seg in scan.segments:
        s = seg.scan
        if not seg.batch_count or int(s.last_offsets[-1]) < start_offset:
            continue
        buf = segments.map_file(seg.path)
        view = memoryview(buf)
        positions = np.asarray(s.positions, dtype=np.int64)
        ends = positions + np.asarray(s.size_bytes, dtype=np.int64)
        i, n = int(np.searchsorted(np.asarray(s.last_offsets), start_offset)), seg.batch_count
        while i < n:
            j = max(i + 1, int(np.searchsorted(ends, positions[i] + REGION_BYTES, side="right")))
            cursor[:] = [seg.path, int(positions[i])]
            yield view[int(positions[i]):int(ends[j - 1])]
            i = j
