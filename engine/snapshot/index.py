"""The entity index of a snapshot: where each topic, partition and broker record sits in the stream.

Built once when a snapshot is stored (vectorised over the columns the metadata decoder gives, no
Python object per record) and kept beside the chunks, so the lazy image reads one chunk and
decodes one record per question.

Locations. ``pos`` >= 0 is the stream position of the record's framed value and ``len`` its size
(the record sits in an uncompressed batch). A record inside a compressed batch has ``pos`` =
-(stream position of its batch) - 1 and ``len`` = its offset delta within that batch.

Tables (column arrays, little-endian, stored one blob per table: the columns one after the
other in the order listed, each ``rows`` long; layout.py frames the blob):

    topics      sorted by name hash (stable: equal hashes keep stream order)
                name_hash u64 (kraftlog.engine.image.index.hash_name of the UTF-8 name),
                id_hi u64, id_lo u64 (the topic id's halves), pos i64, len i32,
                part_count i32, part_first i64 (its rows in ``partitions``),
                topic_epoch i64 (KIP-232: our tagged field, else the snapshot's end offset,
                the loader's rule)
    topic_ids   row u32: topic rows in topic id order (big-endian bytes of the id, i.e. unsigned)
    partitions  grouped by topic row, ascending partition id within a topic (stable)
                pos i64, len i32, partition_id i32
    brokers     sorted by broker id (stable): pos i64, len i32, broker_id i32
    chunks      start u64: stream position of every chunk, then the stream size (chunks + 1 rows)

Only the registration records are indexed (TopicRecord, PartitionRecord, RegisterBrokerRecord),
which is all an image-form snapshot (Kafka's, or our writer's) has per entity; a partition whose
topic is not in the snapshot is left out (the loader would refuse such a snapshot too). When the
same key appears twice the lookups answer with the later record, as a replay would.
"""

from __future__ import annotations

import numpy as np

from kraftlog.engine.image import index as hindex
from kraftlog.engine.image.topics import TOPIC_EPOCH_TAG, topic_record_epochs
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.metadata_columns import MetadataColumns

TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "topics": (("name_hash", "<u8"), ("id_hi", "<u8"), ("id_lo", "<u8"), ("pos", "<i8"), ("len", "<i4"),
               ("part_count", "<i4"), ("part_first", "<i8"), ("topic_epoch", "<i8")),
    "topic_ids": (("row", "<u4"),),
    "partitions": (("pos", "<i8"), ("len", "<i4"), ("partition_id", "<i4")),
    "brokers": (("pos", "<i8"), ("len", "<i4"), ("broker_id", "<i4")),
    "chunks": (("start", "<u8"),),
}
Table = dict  # column name -> 1-d numpy array, all of one length


def row_bytes(name: str) -> int:
    return sum(np.dtype(t).itemsize for _, t in TABLES[name])


def pack_table(name: str, table: Table) -> tuple[int, bytes]:
    """(rows, the columns' bytes one after the other)."""
    columns = TABLES[name]
    rows = len(table[columns[0][0]])
    return rows, b"".join(np.ascontiguousarray(table[col], dtype=t).tobytes() for col, t in columns)


def unpack_table(name: str, rows: int, data: bytes) -> Table:
    """Zero-copy column views on ``data`` (which must hold exactly ``rows`` rows)."""
    out, at = {}, 0
    for col, t in TABLES[name]:
        dtype = np.dtype(t)
        out[col] = np.frombuffer(data, dtype=dtype, count=rows, offset=at)
        at += rows * dtype.itemsize
    return out


# Records that change an entity after its registration: a stream holding any is not image form.
CHANGE_API_KEYS = (1, 5, 7, 8, 9, 17, 23, 24, 25)
FEATURE_METADATA_VERSION = b"metadata.version"


def record_locations(cols: MetadataColumns, stream, batch_positions: np.ndarray,
                     batch_base_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pos int64, len int32) of every decoded record (see the module docstring)."""
    if cols.data is stream:
        return cols.value_pos.astype(np.int64), cols.value_len.astype(np.int32)
    batch_of = np.searchsorted(batch_base_offsets, cols.offsets, side="right") - 1
    return -(batch_positions[batch_of] + 1), (cols.offsets - batch_base_offsets[batch_of]).astype(np.int32)


def id_keys(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """16-byte big-endian keys of topic ids: their byte order is the ids' numeric order."""
    both = np.empty((len(hi), 2), dtype=">u8")
    both[:, 0] = hi
    both[:, 1] = lo
    return both.view("V16").ravel()


def build_tables(cols: MetadataColumns, pos: np.ndarray, length: np.ndarray, end_offset: int) -> dict[str, Table]:
    """The topics, topic_ids, partitions and brokers tables of one decoded stream."""
    topics = _topic_rows(cols, pos, length, end_offset)
    partitions, by_id = _partition_rows(cols, pos, length, topics)
    b = cols.broker_registrations
    order = np.argsort(b.broker_id, kind="stable")
    rec = b.record_index[order]
    brokers = {"pos": pos[rec], "len": length[rec], "broker_id": b.broker_id[order]}
    return {"topics": topics, "topic_ids": {"row": by_id}, "partitions": partitions, "brokers": brokers}


def _topic_rows(cols: MetadataColumns, pos: np.ndarray, length: np.ndarray, end_offset: int) -> Table:
    t = cols.topics
    hashes = hindex.hash_names(bytes(t.name_blob), np.ascontiguousarray(t.name_offsets, dtype=np.int64))
    order = np.argsort(hashes, kind="stable")
    rec = t.record_index[order]
    return {"name_hash": hashes[order], "id_hi": t.topic_id[order, 0], "id_lo": t.topic_id[order, 1],
            "pos": pos[rec], "len": length[rec], "part_count": np.zeros(len(order), np.int32),
            "part_first": np.zeros(len(order), np.int64), "topic_epoch": _topic_epochs(cols, rec, end_offset)}


def _topic_epochs(cols: MetadataColumns, rec: np.ndarray, end_offset: int) -> np.ndarray:
    """The KIP-232 epoch of each TopicRecord ``rec``: vectorised for the two shapes our writer and
    Kafka write (no tagged field / exactly our epoch tag), the generic codec for anything else."""
    if not len(rec):
        return np.full(0, end_offset, dtype=np.int64)
    name_len = np.diff(cols.topics.name_offsets)[cols.kind_rows[rec]]
    epochs, other = topic_record_epochs(np.frombuffer(cols.data, dtype=np.uint8), cols.value_pos[rec],
                                        cols.value_len[rec], name_len, end_offset)
    for i in np.flatnonzero(other).tolist():  # other tagged fields: the generic codec decides
        r = int(rec[i])
        data_ = codec.decode_record(cols.data, int(cols.value_pos[r]), int(cols.value_pos[r] + cols.value_len[r])).data
        raw = data_.get(codec.UNKNOWN_TAGS, {}).get(TOPIC_EPOCH_TAG)
        if raw is not None and len(raw) == 8:
            epochs[i] = int.from_bytes(raw, "big", signed=True)
    return epochs


def _partition_rows(cols: MetadataColumns, pos: np.ndarray, length: np.ndarray,
                    topics: Table) -> tuple[Table, np.ndarray]:
    """Partitions grouped by their topic's row, and the topic rows in id order; fills the topics'
    part_first / part_count."""
    p = cols.partitions
    keys = id_keys(topics["id_hi"], topics["id_lo"])
    by_id = np.argsort(keys, kind="stable").astype(np.uint32)
    if not len(by_id) or not len(p.record_index):
        empty = np.empty(0, np.int64)
        return {"pos": empty, "len": empty.astype(np.int32), "partition_id": empty.astype(np.int32)}, by_id
    sorted_keys = keys[by_id]
    wanted = id_keys(p.topic_id[:, 0], p.topic_id[:, 1])
    # side="right" - 1: with a topic id twice, partitions join the later TopicRecord
    at = np.searchsorted(sorted_keys, wanted, side="right") - 1
    known = (at >= 0) & (sorted_keys[np.maximum(at, 0)] == wanted)
    topic_row = by_id[np.maximum(at, 0)].astype(np.int64)
    keep = np.flatnonzero(known)
    composite = (topic_row[keep] << 32) | p.partition_id[keep].astype(np.int64).astype(np.uint32)
    order = keep[np.argsort(composite, kind="stable")]
    rec = p.record_index[order]
    counts = np.bincount(topic_row[keep], minlength=len(by_id))
    topics["part_count"] = counts.astype(np.int32)
    topics["part_first"] = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return {"pos": pos[rec], "len": length[rec], "partition_id": p.partition_id[order]}, by_id


def metadata_version_of(cols: MetadataColumns) -> int:
    """The last metadata.version FeatureLevelRecord of the stream, 0 when there is none."""
    f = cols.features
    blob = bytes(f.feature_blob)
    level = 0
    for row in range(len(f.record_index)):
        if blob[f.name_offsets[row]:f.name_offsets[row + 1]] == FEATURE_METADATA_VERSION:
            level = int(f.feature_level[row])
    return level


def is_image_form(cols: MetadataColumns) -> bool:
    return not bool(np.isin(cols.api_keys, CHANGE_API_KEYS).any())
