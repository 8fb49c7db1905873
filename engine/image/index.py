"""Hash indexes of the image (topic name -> row, topic id -> row): native when built, else the twin.

HashIndex wraps the two slot arrays with copy-on-write: an image's index is never written; a delta
copies the slots on its first change (megabytes, not the table) and grows them when more than half
full, so lookups stay short.
"""

from __future__ import annotations

import numpy as np

from kraftlog._accel import select

_impl = select("kraftlog._image", "kraftlog.engine.image.index_pure")
IMPLEMENTATION: str = _impl.IMPLEMENTATION
hash_name = _impl.hash_name
hash_names = _impl.hash_names
hash_ids = _impl.hash_ids
lookup_ids_raw = _impl.lookup_ids
first_candidates_raw = _impl.first_candidates
row_spec = _impl.row_spec
candidates_raw = _impl.candidates
index_spec = _impl.index_spec
lookup_partition = _impl.lookup_partition
read_row = _impl.read_row
gather_rows = _impl.gather_rows
scatter_rows = _impl.scatter_rows
apply_topic_stream = _impl.apply_topic_stream
names_at = _impl.names_at

EMPTY = -1
MIN_SLOTS = 1024


def slots_for(count: int) -> int:
    """Power-of-two slot count keeping the load factor at or under one half."""
    size = MIN_SLOTS
    while size < 2 * count:
        size <<= 1
    return size


class HashIndex:
    """Immutable once ``frozen``; ``mutable_copy`` gives a writable one for a delta."""

    __slots__ = ("slot_hash", "slot_row", "used", "frozen", "_spec")

    def __init__(self, slot_hash: np.ndarray, slot_row: np.ndarray, used: int, frozen: bool = True):
        self.slot_hash, self.slot_row, self.used, self.frozen = slot_hash, slot_row, used, frozen
        self._spec = None

    @property
    def spec(self) -> tuple:
        """Addresses for lookup_partition; only for a frozen index (its arrays never change again)."""
        assert self.frozen, "only a published index has a stable spec"
        if self._spec is None:
            self._spec = index_spec(self.slot_hash, self.slot_row)
        return self._spec

    @classmethod
    def build(cls, hashes: np.ndarray, rows: np.ndarray) -> HashIndex:
        size = slots_for(len(hashes))
        slot_hash = np.zeros(size, dtype=np.uint32)
        slot_row = np.full(size, EMPTY, dtype=np.int32)
        _impl.insert_many(slot_hash, slot_row, np.ascontiguousarray(hashes, dtype=np.uint64),
                          np.ascontiguousarray(rows, dtype=np.int32))
        return cls(slot_hash, slot_row, len(hashes))

    @classmethod
    def empty(cls) -> HashIndex:
        return cls.build(np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int32))

    def mutable_copy(self) -> HashIndex:
        return HashIndex(self.slot_hash.copy(), self.slot_row.copy(), self.used, frozen=False)

    def candidates(self, h: int) -> list[int]:
        return _impl.candidates(self.slot_hash, self.slot_row, h)

    def insert(self, h: int, row: int) -> None:
        assert not self.frozen, "a published index is immutable"
        if 2 * (self.used + 1) > len(self.slot_row):
            self._grow()
        _impl.insert_many(self.slot_hash, self.slot_row, np.array([h], dtype=np.uint64),
                          np.array([row], dtype=np.int32))
        self.used += 1

    def remove(self, h: int, row: int) -> bool:
        assert not self.frozen, "a published index is immutable"
        return _impl.remove(self.slot_hash, self.slot_row, h, row)

    def _grow(self) -> None:
        """Rehash live entries into twice the slots (also drops tombstones). Only the low 32 bits
        of each hash are kept per slot; they are all a table below 2**32 slots ever needs."""
        self._grow_to(2 * len(self.slot_row))

    def freeze(self) -> HashIndex:
        self.frozen = True
        return self

    @property
    def nbytes(self) -> int:
        return self.slot_hash.nbytes + self.slot_row.nbytes

    def first_candidates(self, hashes: np.ndarray) -> np.ndarray:
        return first_candidates_raw(self.slot_hash, self.slot_row, np.ascontiguousarray(hashes, dtype=np.uint64))

    def lookup_ids(self, id_hi: np.ndarray, id_lo: np.ndarray, query_hi: np.ndarray, query_lo: np.ndarray) -> np.ndarray:
        """Rows of the queried ids, verified against the id columns (indexed by row); -1 when absent."""
        c = np.ascontiguousarray
        # the queries as they are when already int64 (a strided view is read in place: at 1M
        # partitions a contiguous copy of both id halves is ~16 MB of fresh pages)
        return lookup_ids_raw(self.slot_hash, self.slot_row, c(id_hi, dtype=np.int64), c(id_lo, dtype=np.int64),
                              np.asarray(query_hi, dtype=np.int64), np.asarray(query_lo, dtype=np.int64))

    def insert_many(self, hashes: np.ndarray, rows: np.ndarray) -> None:
        assert not self.frozen, "a published index is immutable"
        while 2 * (self.used + len(hashes)) > len(self.slot_row):
            self._grow_to(2 * len(self.slot_row))
        _impl.insert_many(self.slot_hash, self.slot_row, np.ascontiguousarray(hashes, dtype=np.uint64),
                          np.ascontiguousarray(rows, dtype=np.int32))
        self.used += len(hashes)

    def _grow_to(self, size: int) -> None:
        live = self.slot_row >= 0
        slot_hash = np.zeros(size, dtype=np.uint32)
        slot_row = np.full(size, EMPTY, dtype=np.int32)
        _impl.insert_many(slot_hash, slot_row, self.slot_hash[live].astype(np.uint64), self.slot_row[live])
        self.slot_hash, self.slot_row = slot_hash, slot_row
        self.used = int(live.sum())
