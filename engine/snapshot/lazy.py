"""LazySnapshotImage: answer "partition P of topic T", "topic by name / id", "broker B" from a stored
snapshot without loading it.

Opening reads the manifest and the index tables (index.py): a few MB for a million partitions.
A question is a binary search in a table, then one chunk read (verified by its CRC, decompressed,
kept in a bounded LRU cache of ``lazy_cache_max_bytes``) and one record decoded by the generic
codec. Answers have the types MetadataImage gives (PartitionRegistration, TopicView,
BrokerRegistration) and equal what a full load would answer; a test checks that.

Only image-form snapshots (one registration record per entity, as Kafka and our writer produce)
can be answered this way; others raise LazyImageUnsupportedError. A snapshot deleted by retention
while a lazy image is open makes later cold reads raise SnapshotNotFoundError (chunks already
cached still answer). Thread-safe: the cache is guarded by a lock; the rest is read-only.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict

import numpy as np

from kraftlog.engine.image import index as hindex
from kraftlog.engine.image.image import BrokerRegistration, MetadataImage
from kraftlog.engine.image.topics import (
    MIGRATING_DIRECTORY,
    PartitionRegistration,
    TopicView,
)
from kraftlog.engine.image.writer import parse_plain_partition
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.wire import decode_uvarint
from kraftlog.engine.snapshot.errors import LazyImageUnsupportedError, SnapshotCorruptError, SnapshotError
from kraftlog.engine.snapshot.layout import Manifest, SnapshotId, as_id
from kraftlog.engine.snapshot.store import SnapshotStore

_FRAME_BYTES = 3  # frameVersion, apiKey, version: one uvarint byte each for every known record


class LazySnapshotImage:
    """A read-only view of one stored snapshot (default: the newest)."""

    def __init__(self, store: SnapshotStore, snapshot_id=None):
        sid = store.newest_id() if snapshot_id is None else as_id(snapshot_id)
        if sid is None:
            raise SnapshotError(f"{store.path}: the store holds no snapshot")
        self.store = store
        self.snapshot_id: SnapshotId = sid
        self.manifest: Manifest = store.manifest(sid)
        if not self.manifest.image_form:
            raise LazyImageUnsupportedError(f"snapshot {sid} holds change records after registrations")
        topics = store.read_table(sid, "topics")
        partitions = store.read_table(sid, "partitions")
        self._brokers = store.read_table(sid, "brokers")
        self._name_hash = topics["name_hash"]
        self._topic_pos, self._topic_len = topics["pos"], topics["len"]
        self._part_count, self._part_first = topics["part_count"], topics["part_first"]
        self._topic_epoch = topics["topic_epoch"]
        self._by_id = store.read_table(sid, "topic_ids")["row"]
        self._id_hi, self._id_lo = topics["id_hi"], topics["id_lo"]
        self._p_pos, self._p_len, self._p_id = partitions["pos"], partitions["len"], partitions["partition_id"]
        self._chunk_starts = store.read_table(sid, "chunks")["start"].astype(np.int64)
        self._cache: OrderedDict[int, bytes] = OrderedDict()
        self._cache_bytes = 0
        self._lock = threading.Lock()
        # Topics answered once: name -> (row, name, id halves, topic epoch, id). At most one entry
        # per topic of the snapshot, and it makes "partition P of topic T" skip the topic search.
        self._topics: dict[str, tuple] = {}

    # -- sizes ---------------------------------------------------------------------------------------
    @property
    def metadata_version(self) -> int:
        return self.manifest.metadata_version

    @property
    def topic_count(self) -> int:
        return len(self._name_hash)

    @property
    def partition_count(self) -> int:
        return len(self._p_id)

    def broker_ids(self) -> list[int]:
        return sorted(set(self._brokers["broker_id"].tolist()))

    def topic_names(self) -> list[str]:
        """Every topic name (decodes every TopicRecord: a scan, not a lookup)."""
        return sorted({self._name_at(row).decode() for row in range(self.topic_count)})

    # -- questions -----------------------------------------------------------------------------------
    def topic(self, name: str) -> TopicView | None:
        info = self._topic(name)
        return None if info is None else self._view(info)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicView | None:
        row = self._topic_row_by_id(topic_id)
        return None if row is None else self._view(self._topic_info(row))

    def partition(self, topic_name: str, partition_id: int) -> PartitionRegistration | None:
        info = self._topic(topic_name)
        return None if info is None else self._partition(info, partition_id)

    def partition_by_id(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRegistration | None:
        row = self._topic_row_by_id(topic_id)
        return None if row is None else self._partition(self._topic_info(row), partition_id)

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        ids = self._brokers["broker_id"]
        if not -(1 << 31) <= broker_id < 1 << 31:
            return None
        at = int(ids.searchsorted(np.int32(broker_id), side="right")) - 1
        if at < 0 or ids.item(at) != broker_id:
            return None
        record = self._record(self._brokers["pos"].item(at), self._brokers["len"].item(at))
        # The image's own rules build the registration (defaults, tuples): replay just this record.
        delta = MetadataImage.empty().delta()
        delta.replay(record.record_type, record.data)
        return delta.apply().cluster.brokers.get(broker_id)

    # -- topics --------------------------------------------------------------------------------------
    def _topic(self, name: str) -> tuple | None:
        info = self._topics.get(name)
        if info is None:
            row = self._topic_row(name)
            if row is None:
                return None
            info = self._topics[name] = self._topic_info(row, name)
        return info

    def _topic_row(self, name: str) -> int | None:
        raw = name.encode()
        # numpy scalars of the arrays' dtype: a Python int would make numpy convert the whole
        # array to float64 on every search.
        h = np.uint64(hindex.hash_name(raw))
        lo = int(self._name_hash.searchsorted(h, side="left"))
        hi = int(self._name_hash.searchsorted(h, side="right"))
        for row in range(hi - 1, lo - 1, -1):  # the later record wins, as in a replay
            if self._name_at(row) == raw:
                return row
        return None

    def _topic_row_by_id(self, topic_id: uuid.UUID) -> int | None:
        n = topic_id.int
        want = (n >> 64, n & ((1 << 64) - 1))
        lo, hi = 0, len(self._by_id)
        while lo < hi:  # binary search over the id order: rows compared as (hi, lo) unsigned pairs
            mid = (lo + hi) // 2
            row = self._by_id.item(mid)
            if (self._id_hi.item(row), self._id_lo.item(row)) <= want:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return None
        row = self._by_id.item(lo - 1)  # the last equal id: the later record wins
        return row if (self._id_hi.item(row), self._id_lo.item(row)) == want else None

    def _name_at(self, row: int) -> bytes:
        """The Name of the TopicRecord at ``row``, read from its value without decoding the rest."""
        value = self._value(self._topic_pos.item(row), self._topic_len.item(row))
        size, at = decode_uvarint(value, _FRAME_BYTES, 5)
        return bytes(value[at:at + size - 1])

    def _topic_info(self, row: int, name: str | None = None) -> tuple:
        """(row, name, id halves (signed, as the image keeps them), topic epoch, id), all from the
        index but the name, which is the question's (already verified) or read from the record."""
        if name is None:
            name = self._name_at(row).decode()
        hi, lo = self._id_hi.item(row), self._id_lo.item(row)
        halves = (hi - (1 << 64) if hi >> 63 else hi, lo - (1 << 64) if lo >> 63 else lo)
        return row, name, halves, self._topic_epoch.item(row), uuid.UUID(int=(hi << 64) | lo)

    def _view(self, info: tuple) -> TopicView:
        row, name, _, epoch, tid = info
        return TopicView(tid, name, self._part_count.item(row), epoch)

    # -- partitions ----------------------------------------------------------------------------------
    def _partition(self, info: tuple, partition_id: int) -> PartitionRegistration | None:
        row, name, halves, epoch, _ = info
        first, count = self._part_first.item(row), self._part_count.item(row)
        if partition_id < 0 or not count:
            return None
        at = first + partition_id
        if not (partition_id < count and self._p_id.item(at) == partition_id):  # dense ids: the usual case
            at = first + int(self._p_id[first:first + count].searchsorted(np.int32(partition_id), side="right")) - 1
            if at < first or self._p_id.item(at) != partition_id:
                return None
        value = self._value(self._p_pos.item(at), self._p_len.item(at))
        plain = parse_plain_partition(value)
        if plain is not None:  # the common shape: one struct read instead of the generic codec
            pid, _, replicas, isr, leader, leader_epoch, partition_epoch = plain
            return PartitionRegistration(halves, name, pid, leader, leader_epoch, partition_epoch, 0, replicas, isr,
                                         (), (), (), (), (), epoch)
        d = self._record(self._p_pos.item(at), self._p_len.item(at)).data
        directories = d.get("Directories") or ()
        if all(x == MIGRATING_DIRECTORY for x in directories):
            directories = ()
        return PartitionRegistration(
            halves, name, d["PartitionId"], d["Leader"], d["LeaderEpoch"], d["PartitionEpoch"],
            d.get("LeaderRecoveryState", 0), tuple(d["Replicas"]), tuple(d["Isr"]),
            tuple(d["RemovingReplicas"]), tuple(d["AddingReplicas"]),
            tuple(d.get("EligibleLeaderReplicas") or ()), tuple(d.get("LastKnownElr") or ()),
            tuple(directories), epoch)

    # -- bytes ---------------------------------------------------------------------------------------
    def _record(self, pos: int, length: int) -> codec.MetadataRecord:
        try:
            return codec.decode_record(self._value(pos, length))
        except SnapshotError:
            raise
        except Exception as exc:  # a record the index points at must decode: else the snapshot is bad
            raise SnapshotCorruptError(self.snapshot_id, f"record at {pos}", str(exc), position=pos) from exc

    def _value(self, pos: int, length: int) -> bytes:
        """The framed value at index location (pos, len) (see index.py)."""
        if pos >= 0:
            chunk, start = self._chunk_at(pos)
            return chunk[pos - start:pos - start + length]
        batch_pos = -pos - 1  # a record inside a compressed batch: len is its offset delta
        chunk, start = self._chunk_at(batch_pos)
        cols = batch.decode_columns(chunk, batch_pos - start)
        wanted = int(cols.batch_base_offsets[0]) + length
        row = int(np.searchsorted(cols.offsets, wanted))
        if row >= cols.record_count or int(cols.offsets[row]) != wanted:
            raise SnapshotCorruptError(self.snapshot_id, f"batch at {batch_pos}", "index points at no record")
        return cols.value(row)

    def _chunk_at(self, pos: int) -> tuple[bytes, int]:
        no = int(self._chunk_starts.searchsorted(np.int64(pos), side="right")) - 1
        with self._lock:
            hit = self._cache.get(no)
            if hit is not None:
                self._cache.move_to_end(no)
                return hit, int(self._chunk_starts[no])
        raw, start = self.store.read_chunk_raw(self.snapshot_id, no)
        with self._lock:
            if no not in self._cache:
                self._cache[no] = raw
                self._cache_bytes += len(raw)
                while self._cache_bytes > self.store.config.lazy_cache_max_bytes and len(self._cache) > 1:
                    _, old = self._cache.popitem(last=False)
                    self._cache_bytes -= len(old)
        return raw, start
