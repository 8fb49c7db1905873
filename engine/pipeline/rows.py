"""Record batches -> Arrow RecordBatches of metadata rows, filled from the native column decoders.

One row per metadata record (control records are not rows). Columns (ROW_FIELDS, in order):

    cluster, offset, batch_epoch (the batch's partitionLeaderEpoch), timestamp (the batch's
    maxTimestamp: KRaft writes one timestamp per batch), record_type (Kafka's record name),
    record_version, then typed columns for the hot records (null where a record has no such field):
      topic_id (Kafka's base64url form), topic_name            TopicRecord, Partition*, RemoveTopic
      partition, leader, leader_epoch, partition_epoch,         PartitionRecord; PartitionChangeRecord
      leader_recovery_state, replicas, isr                      as written: leader -2 = unchanged,
                                                                null lists / recovery state = unchanged
      directories (Kafka's base64url ids)                       Partition*: null = none named (or, in
                                                                a PartitionRecord, all MIGRATING);
                                                                [] = a change setting all MIGRATING
      broker_id, broker_epoch, fenced, in_controlled_shutdown,  RegisterBroker, UnregisterBroker,
      rack                                                      Fence/Unfence, BrokerRegistrationChange
                                                                (fenced null: no fencing change)
      feature_name, feature_level                               FeatureLevelRecord
      config_resource_type, config_resource_name,               ConfigRecord (value null = delete)
      config_name, config_value
    and json: the record as ``kafka-dump-log --cluster-metadata-decoder`` prints it, for every record
    the typed columns do not hold completely: the side-stream records (registrations, producer ids,
    ACLs, quotas, SCRAM, tokens), printed from their decoded column rows (column_fields); other
    record types, records with ``extras`` (a change's directories, unknown tags, long lists) and
    changes with ELR or adding/removing replicas (no typed column here), decoded by the generic
    codec, which also fills their typed columns.

Hot rows never become Python objects: each column is assembled from the decoder's numpy tables as
(rows, values) parts put in record order by numpy scatters (_Columns). Strings are built straight
from the decoder's blobs (Arrow buffers over the same bytes); topic ids are base64url-encoded in
numpy, once per run of equal ids. Building is ~0.1-0.2 µs per row; under Spark the JVM's copy of
each Arrow row costs several times that (docs/SPARK.md, Performance).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kraftlog.engine.records import column_fields
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.metadata import MetadataRecord
from kraftlog.engine.records.metadata_columns import CHANGE_LIST_COUNTS, MORE_CHANGE_LISTS, MetadataColumns

# (name, Arrow type); the Spark schema (source.SPARK_SCHEMA) is the same, field for field.
ROW_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("cluster", pa.string()), ("offset", pa.int64()), ("batch_epoch", pa.int32()),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("record_type", pa.string()), ("record_version", pa.int16()),
    ("topic_id", pa.string()), ("topic_name", pa.string()), ("partition", pa.int32()), ("leader", pa.int32()),
    ("leader_epoch", pa.int32()), ("partition_epoch", pa.int32()), ("leader_recovery_state", pa.int8()),
    ("replicas", pa.list_(pa.int32())), ("isr", pa.list_(pa.int32())), ("directories", pa.list_(pa.string())),
    ("broker_id", pa.int32()), ("broker_epoch", pa.int64()), ("fenced", pa.bool_()),
    ("in_controlled_shutdown", pa.bool_()), ("rack", pa.string()),
    ("feature_name", pa.string()), ("feature_level", pa.int16()),
    ("config_resource_type", pa.int8()), ("config_resource_name", pa.string()), ("config_name", pa.string()),
    ("config_value", pa.string()), ("json", pa.string()),
)
ROW_NAMES = tuple(n for n, _ in ROW_FIELDS)
_TYPES = dict(ROW_FIELDS)
ARROW_SCHEMA = pa.schema([pa.field(n, t) for n, t in ROW_FIELDS])

CORRUPT_RECORD_TYPE = "__corrupt__"  # a marker row for skipped bytes (on_corrupt="skip")
_MAX_API_KEY = 256  # names "apiKey<N>" for unknown keys below it, "unknown" above
RECORD_TYPE_NAMES = [codec.BY_API_KEY[k].name if k in codec.BY_API_KEY else f"apiKey{k}"
                     for k in range(_MAX_API_KEY)]
API_KEYS = {name: k for k, name in enumerate(RECORD_TYPE_NAMES) if k in codec.BY_API_KEY}
_TYPE_DICTIONARY = pa.array(RECORD_TYPE_NAMES + ["unknown"], pa.string())
_B64URL = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", dtype=np.uint8)
UUID_CHARS = 22  # Kafka's Uuid.toString: 16 bytes as unpadded base64url


# Two base64url characters per 12-bit value, little-endian uint16 so a (k, 12) array viewed as bytes
# reads in order.
_B64URL_PAIRS = ((_B64URL[np.arange(4096) & 63].astype(np.uint16) << 8) | _B64URL[np.arange(4096) >> 6]).astype("<u2")


def uuid_strings(halves: np.ndarray) -> pa.Array:
    """uint64[k, 2] (most, least significant) -> Kafka's base64url strings, without a Python loop.
    Consecutive equal ids (a topic's partitions) are encoded once and repeated with a take."""
    k = len(halves)
    if k > 1:
        starts = np.empty(k, dtype=bool)
        starts[0] = True
        np.any(halves[1:] != halves[:-1], axis=1, out=starts[1:])
        runs = int(starts.sum())
        if runs * 2 < k:
            return _uuid_strings(halves[starts]).take(pa.array(np.cumsum(starts) - 1))
    return _uuid_strings(halves)


def _uuid_strings(halves: np.ndarray) -> pa.Array:
    """16 bytes + 2 zero bytes = 12 groups of 12 bits = 24 characters; the first 22 are Kafka's."""
    k = len(halves)
    raw = np.zeros((k, 18), dtype=np.uint8)
    raw[:, :16] = np.ascontiguousarray(halves).astype(">u8").view(np.uint8).reshape(k, 16)
    groups = raw.reshape(k, 6, 3).astype(np.uint32)
    word = (groups[:, :, 0] << 16) | (groups[:, :, 1] << 8) | groups[:, :, 2]
    pairs = np.empty((k, 6, 2), dtype="<u2")
    pairs[:, :, 0] = _B64URL_PAIRS[word >> 12]
    pairs[:, :, 1] = _B64URL_PAIRS[word & 4095]
    chars = np.ascontiguousarray(pairs.view(np.uint8).reshape(k, 24)[:, :UUID_CHARS])
    offsets = np.arange(k + 1, dtype=np.int32) * UUID_CHARS
    return pa.StringArray.from_buffers(k, pa.py_buffer(offsets), pa.py_buffer(chars))


def blob_strings(blob, offsets: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
    """Strings blob[offsets[i]:offsets[i+1]] as an Arrow array over the blob's bytes."""
    k = len(offsets) - 1
    base = int(offsets[0]) if k >= 0 else 0
    rel = (offsets - base).astype(np.int32)
    data = memoryview(blob)[base:int(offsets[-1])] if k > 0 else b""
    mask = None if null is None or not null.any() else pa.py_buffer(np.packbits(~null, bitorder="little"))
    return pa.StringArray.from_buffers(k, pa.py_buffer(rel), pa.py_buffer(data), mask)


def constant_strings(value: str, n: int) -> pa.Array:
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def directory_lists(raw: np.ndarray, counts: np.ndarray) -> pa.Array:
    """uint8[k, W*16] directory ids (the first counts[r] of row r) -> list<string> of Kafka's
    base64url ids, without a Python object per id."""
    k, width = len(counts), raw.shape[1] // 16
    present = np.arange(width)[None, :] < counts[:, None].astype(np.int64)
    ids = np.ascontiguousarray(raw.reshape(k, width, 16)[present])
    halves = ids.view(">u8").reshape(len(ids), 2).astype(np.uint64)
    offsets = np.zeros(k + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), uuid_strings(halves))


def list_column(padded: np.ndarray, counts: np.ndarray) -> pa.Array:
    """-1 padded int32[k, W] with counts (-1 = null) -> list<int32>."""
    counts = counts.astype(np.int32)
    valid = counts >= 0
    width = padded.shape[1] if padded.ndim == 2 else 0
    used = np.minimum(np.where(valid, counts, 0), width)
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(used, out=offsets[1:])
    if width and offsets[-1] == len(counts) * width:
        values = padded.reshape(-1)  # every row full: the padded rows are the values
    elif width:
        values = padded[np.arange(width)[None, :] < used[:, None]]
    else:
        values = np.zeros(0, dtype=np.int32)
    mask = None if valid.all() else pa.array(~valid)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values.astype(np.int32, copy=False)), mask=mask)


class _Columns:
    """Each output column as parts (record rows, values); ``finish`` puts them in row order.

    Assembly is numpy on the parts' buffers, not an Arrow concat + take: fixed-width values and
    validity are scattered into one array; strings and lists get their lengths scattered, offsets
    by cumsum, and their bytes / child values reused as they are when the parts' rows are ascending
    and do not interleave (the usual case: each table's records are in offset order), else moved
    to their places with one scatter. Topic ids stay uint64 halves until the column is complete,
    then are encoded once (UUID_CHARS bytes per non-null row)."""

    def __init__(self, n: int):
        self.n = n
        self.parts: dict[str, list[tuple[np.ndarray, pa.Array]]] = {}
        self.uuid_parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}

    def put(self, name: str, rows: np.ndarray, values) -> None:
        if len(rows) == 0:
            return
        array = values if isinstance(values, pa.Array) else pa.array(values, _TYPES[name])
        if array.type != _TYPES[name]:
            array = array.cast(_TYPES[name])
        self.parts.setdefault(name, []).append((np.asarray(rows, dtype=np.int64), array))

    def put_uuids(self, name: str, rows: np.ndarray, halves: np.ndarray) -> None:
        """Topic ids as uint64[k, 2] halves (encoded to Kafka's strings by ``finish``)."""
        if len(rows):
            self.uuid_parts.setdefault(name, []).append((np.asarray(rows, dtype=np.int64), halves))

    def finish(self, name: str) -> pa.Array:
        kind = _TYPES[name]
        uuids = self.uuid_parts.get(name)
        parts = self.parts.get(name)
        if uuids and not parts:
            return _uuid_column(self.n, uuids)
        parts = [(rows, uuid_strings(halves)) for rows, halves in uuids or ()] + (parts or [])
        if not parts:
            return pa.nulls(self.n, kind)
        if len(parts) == 1 and len(parts[0][0]) == self.n and _is_identity(parts[0][0]):
            return parts[0][1]
        if kind == pa.bool_():
            return _scatter_bools(self.n, parts)
        if pa.types.is_integer(kind):
            return _scatter_fixed(self.n, kind, parts)
        if kind == pa.string() or (kind == _INT_LIST and all(a.values.null_count == 0 for _, a in parts)):
            return _scatter_variable(self.n, kind, parts)
        return _take_parts(self.n, kind, parts)


_INT_LIST = pa.list_(pa.int32())


def _is_identity(rows: np.ndarray) -> bool:
    return bool(rows[0] == 0 and rows[-1] == len(rows) - 1 and (np.diff(rows) == 1).all())


def _validity(array: pa.Array) -> np.ndarray | None:
    """bool per element (None: no nulls)."""
    if array.null_count == 0:
        return None
    return pc.is_valid(array).to_numpy(zero_copy_only=False)


def _mask_buffer(valid: np.ndarray) -> tuple[pa.Buffer | None, int]:
    """(Arrow validity bitmap or None when every row is valid, null count)."""
    nulls = len(valid) - int(np.count_nonzero(valid))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def _scatter_valid(n: int, parts) -> np.ndarray:
    valid = np.zeros(n, dtype=bool)
    for rows, array in parts:
        part_valid = _validity(array)
        valid[rows] = True if part_valid is None else part_valid
    return valid


def _scatter_fixed(n: int, kind: pa.DataType, parts) -> pa.Array:
    dtype = np.dtype(kind.to_pandas_dtype())
    values = np.zeros(n, dtype=dtype)
    for rows, array in parts:
        # the data buffer as it is: null slots hold some value, masked by the validity below
        values[rows] = np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)
    mask, nulls = _mask_buffer(_scatter_valid(n, parts))
    return pa.Array.from_buffers(kind, n, [mask, pa.py_buffer(values)], null_count=nulls)


def _scatter_bools(n: int, parts) -> pa.Array:
    values = np.zeros(n, dtype=bool)
    for rows, array in parts:
        values[rows] = pc.fill_null(array, False).to_numpy(zero_copy_only=False)
    mask, nulls = _mask_buffer(_scatter_valid(n, parts))
    return pa.Array.from_buffers(pa.bool_(), n, [mask, pa.py_buffer(np.packbits(values, bitorder="little"))],
                                 null_count=nulls)


def _var_offsets(array: pa.Array) -> np.ndarray:
    """A string or list array's len + 1 offsets (into its data buffer / child values)."""
    return np.frombuffer(array.buffers()[1], dtype=np.int32, count=len(array) + 1, offset=array.offset * 4)


def _var_values(array: pa.Array) -> np.ndarray:
    """The bytes (string) or int32 child values (list) its offsets index."""
    if pa.types.is_string(array.type):
        data = array.buffers()[2]
        return np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    child = array.values  # ListArray.values: the whole child, indexed by the absolute offsets
    return np.frombuffer(child.buffers()[1], dtype=np.int32, count=len(child), offset=child.offset * 4)


def _ordered(parts) -> bool:
    """Rows ascending within each part and the parts one after another (their values in order)."""
    last = -1
    for rows, _ in parts:
        if rows[0] <= last or (len(rows) > 1 and not (np.diff(rows) > 0).all()):
            return False
        last = rows[-1]
    return True


def _scatter_variable(n: int, kind: pa.DataType, parts) -> pa.Array:
    parts = sorted(parts, key=lambda part: int(part[0][0]))
    lengths = np.zeros(n, dtype=np.int64)
    offsets = [_var_offsets(array) for _, array in parts]
    for (rows, _), offs in zip(parts, offsets, strict=True):
        lengths[rows] = np.diff(offs)  # a null slot keeps its (normally zero) length: still valid Arrow
    out_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_offsets[1:])
    if out_offsets[-1] > np.iinfo(np.int32).max:
        return _take_parts(n, kind, parts)  # past 32-bit offsets: let Arrow report it
    ranges = [_var_values(array)[offs[0]:offs[-1]] for (_, array), offs in zip(parts, offsets, strict=True)]
    if _ordered(parts):
        values = ranges[0] if len(ranges) == 1 else np.concatenate(ranges)
    else:
        values = np.empty(int(out_offsets[-1]), dtype=ranges[0].dtype)
        for (rows, _), offs, source in zip(parts, offsets, ranges, strict=True):
            shift = np.repeat(out_offsets[rows] - offs[:-1], np.diff(offs))
            values[np.arange(offs[0], offs[-1], dtype=np.int64) + shift] = source
    mask, nulls = _mask_buffer(_scatter_valid(n, parts))
    offsets_buffer = pa.py_buffer(out_offsets.astype(np.int32))
    if kind == pa.string():
        return pa.StringArray.from_buffers(n, offsets_buffer, pa.py_buffer(values), mask, nulls)
    return pa.Array.from_buffers(kind, n, [mask, offsets_buffer], null_count=nulls,
                                 children=[pa.array(values, pa.int32())])


def _take_parts(n: int, kind: pa.DataType, parts) -> pa.Array:
    """The general assembly: concatenate the parts and one take (a trailing null for empty rows)."""
    where = np.full(n, -1, dtype=np.int64)
    done = 0
    for rows, array in parts:
        where[rows] = done + np.arange(len(rows))
        done += len(array)
    arrays = [array for _, array in parts] + [pa.nulls(1, kind)]
    where[where < 0] = done
    return pa.concat_arrays(arrays).take(pa.array(where))


def _uuid_column(n: int, parts) -> pa.Array:
    """Topic id strings of the rows ``parts`` cover (others null); each id encoded once."""
    halves = np.zeros((n, 2), dtype=np.uint64)
    ids = halves.view(np.dtype((np.void, 16))).reshape(n)  # one 16-byte element per row: a 1-D scatter
    valid = np.zeros(n, dtype=bool)
    for rows, part in parts:
        ids[rows] = np.ascontiguousarray(part, dtype=np.uint64).view(ids.dtype).reshape(len(part))
        valid[rows] = True
    present = np.flatnonzero(valid)
    strings = uuid_strings(halves[present] if len(present) < n else halves)
    # the compact strings are in row order: their bytes stay, offsets repeat across null rows
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(valid * np.int32(UUID_CHARS), out=offsets[1:])
    mask, nulls = _mask_buffer(valid)
    data = strings.buffers()[2]
    start = _var_offsets(strings)[0]
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), data[start:] if start else data, mask, nulls)


@dataclass
class RowFilter:
    """Which records to keep: api keys (None = all) and the offset range [low, high)."""

    api_keys: frozenset[int] | None = None
    low: int | None = None
    high: int | None = None

    def mask(self, offsets: np.ndarray, api_keys: np.ndarray) -> np.ndarray | None:
        keep = None
        if self.api_keys is not None:
            keep = np.isin(api_keys, np.fromiter(self.api_keys, dtype=np.int16, count=len(self.api_keys)))
        if self.low is not None:
            keep = (offsets >= self.low) if keep is None else keep & (offsets >= self.low)
        if self.high is not None:
            keep = (offsets < self.high) if keep is None else keep & (offsets < self.high)
        return keep


def to_record_batch(cols: MetadataColumns, batches: np.ndarray, cluster: str, *,
                    row_filter: RowFilter | None = None, schema: pa.Schema = ARROW_SCHEMA) -> pa.RecordBatch:
    """The rows of a decoded region. ``batches`` is walk_batches' header table of the same region
    (batch epoch and timestamp per record come from it)."""
    keep = row_filter.mask(cols.offsets, cols.api_keys) if row_filter is not None else None
    selected = np.flatnonzero(keep) if keep is not None else None
    n_all = len(cols.offsets)
    # position of each kept record in the output (-1 = dropped)
    if selected is None:
        out_row = None
        n = n_all
    else:
        out_row = np.full(n_all, -1, dtype=np.int64)
        out_row[selected] = np.arange(len(selected))
        n = len(selected)
    offsets = cols.offsets if selected is None else cols.offsets[selected]
    api_keys = cols.api_keys if selected is None else cols.api_keys[selected]
    versions = cols.versions if selected is None else cols.versions[selected]
    c = _Columns(n)
    epochs, stamps = _batch_fields(batches, offsets)
    arrays = {
        "cluster": constant_strings(cluster, n),
        "offset": pa.array(offsets, pa.int64()),
        "batch_epoch": pa.array(epochs, pa.int32()),
        "timestamp": pa.array(stamps * 1000, pa.int64()).cast(_TYPES["timestamp"]),
        "record_type": _TYPE_DICTIONARY.take(pa.array(np.where(api_keys < _MAX_API_KEY, api_keys,
                                                                len(RECORD_TYPE_NAMES)).astype(np.int32))),
        "record_version": pa.array(versions, pa.int16()),
    }
    generic = _hot_columns(cols, c, out_row)
    generic.extend(_table_rows(cols.other, out_row))
    generic.extend(_side_rows(cols, c, out_row))
    if generic:
        _generic_rows(cols, c, sorted(set(generic)), out_row)
    for name in ROW_NAMES:
        if name not in arrays:
            arrays[name] = c.finish(name)
    return pa.RecordBatch.from_arrays([arrays[name] for name in ROW_NAMES], schema=schema)


def _batch_fields(batches: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per record: its batch's partitionLeaderEpoch and maxTimestamp (ms)."""
    from kraftlog.engine.records.metadata_columns import B_BASE_OFFSET, B_LEADER_EPOCH, B_MAX_TIMESTAMP

    if not len(offsets):
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    k = np.searchsorted(batches[:, B_BASE_OFFSET], offsets, side="right") - 1
    return batches[k, B_LEADER_EPOCH].astype(np.int32), batches[k, B_MAX_TIMESTAMP].astype(np.int64)


def _table_rows(table, out_row: np.ndarray | None) -> list[int]:
    """Record indexes (kept ones) of a table's rows: for the generic path."""
    rows = table.record_index.astype(np.int64)
    if out_row is not None:
        rows = rows[out_row[rows] >= 0]
    return rows.tolist()


def _pick(table, out_row: np.ndarray | None, generic: np.ndarray | None = None):
    """(table rows to emit, their output rows, record indexes of extras rows to decode generically).
    ``generic``: the rows to decode generically, when more than the extras ones. The rows are
    ``slice(None)`` when they are all of the table (no extras, none filtered out), so the callers'
    column lookups are views, not copies."""
    rec = table.record_index.astype(np.int64)
    generic = table.extras if generic is None else generic
    take = ~generic
    if out_row is not None:
        kept = out_row[rec] >= 0
        extras = rec[kept & generic]
        take &= kept
        rows = np.flatnonzero(take)
        return _all_or(rows, len(rec)), out_row[rec[rows]], extras.tolist()
    rows = np.flatnonzero(take)
    return _all_or(rows, len(rec)), rec[rows], rec[generic].tolist()


def _change_rows_to_decode(ch) -> np.ndarray:
    """A change's removing / adding replicas, ELR and last-known ELR have no typed column here: the
    rows carrying any of them go through the generic path (their json) with the extras rows."""
    out = ch.extras.copy()
    for name in MORE_CHANGE_LISTS:
        out |= getattr(ch, CHANGE_LIST_COUNTS[name]) >= 0
    return out


def _all_or(rows: np.ndarray, k: int) -> np.ndarray | slice:
    return slice(None) if len(rows) == k else rows


def _rows_of(array: pa.Array, rows: np.ndarray | slice) -> pa.Array:
    """array[rows] (``rows`` from _pick)."""
    return array if isinstance(rows, slice) else array.take(pa.array(rows))


def _hot_columns(cols: MetadataColumns, c: _Columns, out_row: np.ndarray | None) -> list[int]:
    generic: list[int] = []
    t = cols.topics
    if len(t):
        rows, out, extra = _pick(t, out_row)
        generic += extra
        c.put_uuids("topic_id", out, t.topic_id[rows])
        names = blob_strings(t.name_blob, t.name_offsets)
        c.put("topic_name", out, _rows_of(names, rows))
    p = cols.partitions
    if len(p):
        rows, out, extra = _pick(p, out_row)
        generic += extra
        c.put_uuids("topic_id", out, p.topic_id[rows])
        for name, col in (("partition", "partition_id"), ("leader", "leader"), ("leader_epoch", "leader_epoch"),
                          ("partition_epoch", "partition_epoch"), ("leader_recovery_state", "leader_recovery_state")):
            c.put(name, out, getattr(p, col)[rows])
        c.put("replicas", out, list_column(p.replicas[rows], p.replica_count[rows]))
        c.put("isr", out, list_column(p.isr[rows], p.isr_count[rows]))
        counts = p.directory_count[rows]
        named = np.flatnonzero(counts > 0)
        if len(named):
            c.put("directories", out[named], directory_lists(p.directories[rows][named], counts[named]))
    ch = cols.partition_changes
    if len(ch):
        rows, out, extra = _pick(ch, out_row, _change_rows_to_decode(ch))
        generic += extra
        c.put_uuids("topic_id", out, ch.topic_id[rows])
        c.put("partition", out, ch.partition_id[rows])
        c.put("leader", out, ch.leader[rows])
        lrs = ch.leader_recovery_state[rows]
        c.put("leader_recovery_state", out, pa.array(lrs, pa.int8(), mask=lrs == -1))
        c.put("replicas", out, list_column(ch.replicas[rows], ch.replica_count[rows]))
        c.put("isr", out, list_column(ch.isr[rows], ch.isr_count[rows]))
    r = cols.remove_topics
    if len(r):
        rows, out, extra = _pick(r, out_row)
        generic += extra
        c.put_uuids("topic_id", out, r.topic_id[rows])
    g = cols.configs
    if len(g):
        rows, out, extra = _pick(g, out_row)
        generic += extra
        c.put("config_resource_type", out, g.resource_type[rows])
        c.put("config_resource_name", out, _rows_of(blob_strings(g.config_blob, g.resource_name_offsets), rows))
        c.put("config_name", out, _rows_of(blob_strings(g.config_blob, g.name_offsets), rows))
        c.put("config_value", out, _rows_of(blob_strings(g.config_blob, g.value_offsets, g.value_null), rows))
    f = cols.features
    if len(f):
        rows, out, extra = _pick(f, out_row)
        generic += extra
        c.put("feature_name", out, _rows_of(blob_strings(f.feature_blob, f.name_offsets), rows))
        c.put("feature_level", out, f.feature_level[rows])
    fe = cols.fence
    if len(fe):
        rows, out, extra = _pick(fe, out_row)
        generic += extra
        c.put("broker_id", out, fe.broker_id[rows])
        c.put("broker_epoch", out, fe.broker_epoch[rows])
        c.put("fenced", out, fe.fenced[rows])
    bc = cols.broker_changes
    if len(bc):
        rows, out, extra = _pick(bc, out_row)
        generic += extra
        c.put("broker_id", out, bc.broker_id[rows])
        c.put("broker_epoch", out, bc.broker_epoch[rows])
        fenced = bc.fenced[rows]
        c.put("fenced", out, pa.array(fenced == 1, pa.bool_(), mask=fenced == -1))
        ics = bc.in_controlled_shutdown[rows]
        c.put("in_controlled_shutdown", out, pa.array(ics == 1, pa.bool_(), mask=ics == -1))
    return generic


def _side_rows(cols: MetadataColumns, c: _Columns, out_row: np.ndarray | None) -> list[int]:
    """The side-stream tables (registrations, producer ids, ACLs, quotas, SCRAM, tokens): their
    records hold fields the row columns do not (a registration's endpoints, a quota's entities,
    ...), so each row carries json, built from its column row's fields (column_fields) as the
    generic codec's decoding would print, without decoding the bytes again. Returns the records
    of extras rows, for the generic path."""
    generic: list[int] = []
    for name, fields_of in column_fields.BY_TABLE.items():
        table = getattr(cols, name)
        if not len(table):
            continue
        rows, out, extra = _pick(table, out_row)
        generic += extra
        rows = np.arange(len(table))[rows]
        versions = cols.versions[table.record_index[rows]].tolist()
        records = [MetadataRecord(record_type, version, fields) for (record_type, fields), version
                   in zip((fields_of(table, row) for row in rows.tolist()), versions, strict=True)]
        _put_rows(c, out, [_record_json(r) for r in records], [_typed_values(r.record_type, r.data) for r in records])
    return generic


# -- the generic path: rare records, decoded one by one ----------------------------------------------
_FENCING = {1: True, -1: False}  # BrokerRegistrationChangeRecord.Fenced: 1 fence, -1 unfence, 0 none


def _directory_strings(directories, *, migrating_is_none: bool) -> list[str] | None:
    """The ``directories`` column of a generically decoded record: None when it names none (null
    and empty both mean "unchanged" in a change, "every replica MIGRATING" in a PartitionRecord),
    [] for an all-MIGRATING list in a change (it sets them), None for one in a PartitionRecord (as
    the columns give it), else Kafka's base64url ids."""
    if not directories:
        return None
    if all(d.int == 0 for d in directories):
        return None if migrating_is_none else []
    return [codec.uuid_to_kafka(d) for d in directories]


def _typed_values(record_type: str, d: dict) -> dict:
    """Typed column values of one generically decoded record."""
    tid = d.get("TopicId")
    out: dict = {}
    if tid is not None and record_type in ("TopicRecord", "PartitionRecord", "PartitionChangeRecord",
                                            "RemoveTopicRecord"):
        out["topic_id"] = codec.uuid_to_kafka(tid)
    if record_type == "TopicRecord":
        out["topic_name"] = d["Name"]
    elif record_type == "PartitionRecord":
        out.update(partition=d["PartitionId"], leader=d["Leader"], leader_epoch=d["LeaderEpoch"],
                   partition_epoch=d["PartitionEpoch"], leader_recovery_state=d.get("LeaderRecoveryState", 0),
                   replicas=list(d["Replicas"]), isr=list(d["Isr"]),
                   directories=_directory_strings(d.get("Directories"), migrating_is_none=True))
    elif record_type == "PartitionChangeRecord":
        lrs = d.get("LeaderRecoveryState", -1)
        out.update(partition=d["PartitionId"], leader=d.get("Leader", -2),
                   leader_recovery_state=None if lrs == -1 else lrs,
                   replicas=None if d.get("Replicas") is None else list(d["Replicas"]),
                   isr=None if d.get("Isr") is None else list(d["Isr"]),
                   directories=_directory_strings(d.get("Directories"), migrating_is_none=False))
    elif record_type == "ConfigRecord":
        out.update(config_resource_type=d["ResourceType"], config_resource_name=d["ResourceName"],
                   config_name=d["Name"], config_value=d["Value"])
    elif record_type == "FeatureLevelRecord":
        out.update(feature_name=d["Name"], feature_level=d["FeatureLevel"])
    elif record_type in ("FenceBrokerRecord", "UnfenceBrokerRecord"):
        out.update(broker_id=d["Id"], broker_epoch=d["Epoch"], fenced=record_type == "FenceBrokerRecord")
    elif record_type == "BrokerRegistrationChangeRecord":
        ics = d.get("InControlledShutdown", 0)
        out.update(broker_id=d["BrokerId"], broker_epoch=d["BrokerEpoch"], fenced=_FENCING.get(d.get("Fenced", 0)),
                   in_controlled_shutdown=True if ics == 1 else None)
    elif record_type == "RegisterBrokerRecord":
        out.update(broker_id=d["BrokerId"], broker_epoch=d["BrokerEpoch"], fenced=d["Fenced"],
                   in_controlled_shutdown=d.get("InControlledShutdown", False), rack=d["Rack"])
    elif record_type == "UnregisterBrokerRecord":
        out.update(broker_id=d["BrokerId"], broker_epoch=d["BrokerEpoch"])
    return out


def _generic_rows(cols: MetadataColumns, c: _Columns, records: list[int], out_row: np.ndarray | None) -> None:
    typed, json_values = [], []
    for i in records:
        pos, length = int(cols.value_pos[i]), int(cols.value_len[i])
        try:
            record = codec.decode_record(cols.data, pos, pos + length)
        except codec.UnknownRecordTypeError:
            raw = bytes(memoryview(cols.data)[pos:pos + length])
            json_values.append(json.dumps({"type": "UNKNOWN", "apiKey": int(cols.api_keys[i]),
                                           "version": int(cols.versions[i]),
                                           "value": base64.b64encode(raw).decode("ascii")}))
            typed.append({})
        else:
            json_values.append(_record_json(record))
            typed.append(_typed_values(record.record_type, record.data))
    rows = np.asarray(records, dtype=np.int64)
    _put_rows(c, rows if out_row is None else out_row[rows], json_values, typed)


def _record_json(record: MetadataRecord) -> str:
    return json.dumps(codec.to_json(record), separators=(",", ":"))


def _put_rows(c: _Columns, out: np.ndarray, json_values: list[str], typed: list[dict]) -> None:
    """Output rows ``out``: their json and the typed columns some of them have."""
    c.put("json", out, pa.array(json_values, pa.string()))
    for name in _GENERIC_TYPED:
        column = [t.get(name) for t in typed]
        if any(v is not None for v in column):
            c.put(name, out, pa.array(column, _TYPES[name]))


_GENERIC_TYPED = frozenset(ROW_NAMES[6:-1])


def corrupt_row(cluster: str, path: str, position: int, reason: str, skipped_bytes: int,
                schema: pa.Schema = ARROW_SCHEMA) -> pa.RecordBatch:
    """The marker row for bytes skipped with on_corrupt="skip": counted, never silently dropped."""
    arrays = []
    payload = json.dumps({"path": path, "position": position, "reason": reason, "skipped_bytes": skipped_bytes})
    for name, kind in ROW_FIELDS:
        value = {"cluster": cluster, "record_type": CORRUPT_RECORD_TYPE, "json": payload}.get(name)
        arrays.append(pa.array([value], kind))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
