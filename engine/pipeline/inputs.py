"""What a ``kraftlog`` read covers: log directories, fleets of them and snapshot files, cut into splits.

A path given to the data source is one of
    a log directory          holds ``<20-digit base offset>.log`` segments (one cluster's
                             ``__cluster_metadata-0``); read from its log start offset
    a fleet directory        its sub-directories (one level, or two when a cluster keeps its
                             metadata in ``<cluster>/__cluster_metadata-0``) are log directories
    a snapshot file          ``<20-digit end offset>-<10-digit epoch>.checkpoint``: record batches framed
                             by SnapshotHeader/SnapshotFooter control records (skipped as controls)

The cluster name of a directory is ``cluster.id`` from a ``meta.properties`` beside it (in it or
its parent, where Kafka keeps it), else the directory's name (its parent's name for Kafka's
``__cluster_metadata-0``).

A split is one Spark input partition: a whole segment, or a batch-aligned byte range of a segment
larger than ``split_bytes`` (cut points come from a walk of the batch headers on the driver). The
last segment of a directory may end in a torn batch (a writer mid-append): readers stop before it
(``tail``). Everything here is plain Python (no pyspark): splits are pickled to the executors.
"""

from __future__ import annotations

import mmap
import os
import re
from dataclasses import dataclass

import numpy as np

from kraftlog.engine.layout import LOG_START_CHECKPOINT_NAME, META_PROPERTIES, SNAPSHOT_FILE_NAME
from kraftlog.engine.records import batch
from kraftlog.errors import KraftlogError

SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
SPLIT_BYTES = 32 << 20  # default byte size of one input partition (each task costs ~0.1 s of fixed overhead)
FLEET_DEPTH_MAX = 2  # how deep a fleet directory is searched for log directories


class PipelineInputError(KraftlogError):
    """A path that is not a log directory, a fleet of them or a snapshot file."""


@dataclass(frozen=True)
class Split:
    """One input partition: bytes [start, end) of ``path`` (end -1: to the end of the file at read time).

    ``first_offset`` / ``end_offset`` bound the offsets it holds (end -1: unknown, the last
    segment); ``tail`` says a torn last batch is the live end of the log, not corruption;
    ``min_offset`` is the log start offset (records below it were deleted from the log).
    """

    cluster: str
    kind: str  # "log" or "snapshot"
    path: str
    start: int
    end: int
    first_offset: int
    end_offset: int
    tail: bool
    min_offset: int = 0

    def overlaps(self, low: int | None, high: int | None) -> bool:
        """Can this split hold an offset in [low, high)?"""
        if self.kind != "log":
            return True
        if high is not None and self.first_offset >= high:
            return False
        return not (low is not None and self.end_offset >= 0 and self.end_offset <= low)


@dataclass(frozen=True)
class LogDir:
    cluster: str
    path: str


def read_properties(path: str) -> dict[str, str]:
    props = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                key, value = line.split("=", 1)
                props[key.strip()] = value.strip()
    return props


def cluster_name(directory: str) -> str:
    """cluster.id of meta.properties in ``directory`` or its parent, else the directory's name."""
    directory = os.path.abspath(directory)
    parent = os.path.dirname(directory)
    for where in (directory, parent):
        props_path = os.path.join(where, META_PROPERTIES)
        if os.path.isfile(props_path):
            cluster_id = read_properties(props_path).get("cluster.id")
            if cluster_id:
                return cluster_id
    name = os.path.basename(directory)
    if name.startswith("__cluster_metadata"):
        return os.path.basename(parent)
    return name


def segment_files(directory: str) -> list[tuple[int, str]]:
    """(base offset, path) of every segment, in offset order."""
    found = []
    for name in os.listdir(directory):
        m = SEGMENT_RE.match(name)
        if m:
            found.append((int(m.group(1)), os.path.join(directory, name)))
    return sorted(found)


def is_log_dir(directory: str) -> bool:
    return os.path.isdir(directory) and any(SEGMENT_RE.match(n) for n in os.listdir(directory))


def log_start_offset(directory: str) -> int:
    """The log start offset the log recorded (0 when it never moved past its first segment)."""
    path = os.path.join(directory, LOG_START_CHECKPOINT_NAME)
    if not os.path.isfile(path):
        return 0
    with open(path, encoding="ascii") as f:
        lines = f.read().split()
    return int(lines[1]) if len(lines) >= 2 else 0


def discover(paths) -> tuple[list[LogDir], list[tuple[str, str]]]:
    """Log directories and (cluster, checkpoint path) snapshot files named by ``paths``."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    dirs: list[LogDir] = []
    snapshots: list[tuple[str, str]] = []
    for raw in paths:
        path = os.path.abspath(os.fspath(raw))
        if os.path.isfile(path) and SNAPSHOT_FILE_NAME.match(os.path.basename(path)):
            snapshots.append((cluster_name(os.path.dirname(path)), path))
        elif is_log_dir(path):
            dirs.append(LogDir(cluster_name(path), path))
        elif os.path.isdir(path):
            found = _fleet(path, FLEET_DEPTH_MAX)
            if not found:
                raise PipelineInputError(f"{path}: no log segments (<20-digit offset>.log) in it or "
                                         f"{FLEET_DEPTH_MAX} levels below, and not a .checkpoint file")
            dirs.extend(found)
        else:
            raise PipelineInputError(f"{path}: no such log directory or .checkpoint file")
    named = [d.path for d in dirs] + [p for _, p in snapshots]
    twice = sorted({p for p in named if named.count(p) > 1})
    if twice:
        raise PipelineInputError(f"named twice (its rows would be read twice): {', '.join(twice)}")
    return dirs, snapshots


def _fleet(directory: str, depth: int) -> list[LogDir]:
    found = []
    for name in sorted(os.listdir(directory)):
        sub = os.path.join(directory, name)
        if not os.path.isdir(sub):
            continue
        if is_log_dir(sub):
            found.append(LogDir(cluster_name(sub), sub))
        elif depth > 1:
            found.extend(_fleet(sub, depth - 1))
    return found


def plan(paths, *, split_bytes: int = SPLIT_BYTES, low: int | None = None, high: int | None = None,
         clusters: set[str] | None = None) -> list[Split]:
    """Every split of ``paths`` that can hold an offset in [low, high) of a cluster in ``clusters``."""
    dirs, snapshots = discover(paths)
    splits: list[Split] = []
    for d in dirs:
        if clusters is not None and d.cluster not in clusters:
            continue
        splits.extend(s for s in log_dir_splits(d, split_bytes) if s.overlaps(low, high))
    for cluster, path in snapshots:
        if clusters is None or cluster in clusters:
            splits.append(Split(cluster, "snapshot", path, 0, -1, 0, -1, False))
    return splits


def log_dir_splits(d: LogDir, split_bytes: int) -> list[Split]:
    segments = segment_files(d.path)
    start_offset = log_start_offset(d.path)
    out = []
    for k, (base, path) in enumerate(segments):
        last = k == len(segments) - 1
        next_base = -1 if last else segments[k + 1][0]
        if next_base >= 0 and next_base <= start_offset:
            continue  # wholly below the log start: deleted records
        size = os.path.getsize(path)
        cuts = batch_cuts(path, size, split_bytes) if size > split_bytes else [(0, base)]
        for j, (pos, first) in enumerate(cuts):
            final = j == len(cuts) - 1
            end = (-1 if last else size) if final else cuts[j + 1][0]
            end_offset = next_base if final else cuts[j + 1][1]
            out.append(Split(d.cluster, "log", path, pos, end, first, end_offset, last and final, start_offset))
    return out


def batch_cuts(path: str, size: int, split_bytes: int) -> list[tuple[int, int]]:
    """(position, first offset) of batch-aligned cut points about ``split_bytes`` apart.

    The walk reads batch headers only (no CRC); it stops at the first bad header, and everything
    from the last cut on stays in one split, where the executor reports the bad bytes."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
        scan = batch.scan_batches(mm, 0, size, verify_crc=False)
        positions, bases = scan.positions, scan.base_offsets
        del scan
    if not len(positions):
        return [(0, 0)]
    wanted = np.arange(0, size, split_bytes, dtype=np.int64)
    picks = np.unique(np.searchsorted(positions, wanted, side="left"))
    picks = picks[picks < len(positions)]
    return [(int(positions[i]), int(bases[i])) for i in picks]


def segment_position(path: str, offset: int) -> tuple[int, int]:
    """(position, base offset) of the batch holding ``offset`` in a segment, or of the first batch
    after it; (valid end, -1) when no whole batch holds or follows it."""
    size = os.path.getsize(path)
    if size == 0:
        return 0, -1
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
        scan = batch.scan_batches(mm, 0, size, verify_crc=False)
    k = int(np.searchsorted(scan.last_offsets, offset, side="left"))
    if k >= len(scan.positions):
        return scan.valid_end, -1
    return int(scan.positions[k]), int(scan.base_offsets[k])


def segment_end_position(path: str, offset: int) -> int:
    """Byte position where the whole batches of a segment with base offsets below ``offset`` end."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
        scan = batch.scan_batches(mm, 0, size, verify_crc=False)
    k = int(np.searchsorted(scan.base_offsets, offset, side="left"))
    return int(scan.positions[k]) if k < len(scan.positions) else scan.valid_end
