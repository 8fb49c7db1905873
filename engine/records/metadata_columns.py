"""Hot metadata records decoded straight from record-batch bytes into column arrays.

``decode_metadata_region(buf, start, end)`` walks the whole record batches in buf[start:end] (a
segment's mmap, a snapshot, any bytes) and returns a MetadataColumns: numpy arrays per record and
one table per hot record type, with no Python object per record. The record types the columns
hold, at the versions named, are

    TopicRecord v0 (topics)               PartitionRecord v0-2 (partitions)
    PartitionChangeRecord v0-2            RemoveTopicRecord v0 (remove_topics)
    ConfigRecord v0 (configs)             FeatureLevelRecord v0 (features)
    Fence/UnfenceBrokerRecord v0 (fence)  BrokerRegistrationChangeRecord v0-2 (broker_changes)
    RegisterBrokerRecord v0-3 (broker_registrations)
    ProducerIdsRecord v0 (producer_ids)   (Remove)AccessControlEntryRecord v0 (acls)
    ClientQuotaRecord v0 (client_quotas)  (Remove)UserScramCredentialRecord v0 (scram)
    (Remove)DelegationTokenRecord v0 (delegation_tokens)

Every other record (another apiKey, or an unknown version of these) is listed in ``other``: the
image decodes those few with the generic codec (metadata.decode_record) from value_pos/value_len.
An unknown apiKey or version is not an error here.

Steps: ``walk_batches`` (native or twin) checks every batch header and CRC; compressed batches
(gzip, snappy, lz4, zstd) are inflated here, once per batch and bounded by MAX_INFLATED_BYTES
(engine/records/compression.py), into one new buffer that then holds every batch's records
section; ``decode_sections`` (native or twin) decodes the records. Control
batches are counted and skipped. Native: kraftlog._metadata; twin: metadata_columns_pure.
"""

from __future__ import annotations

import numpy as np

from kraftlog._accel import select
from kraftlog.engine.records import compression
from kraftlog.engine.records.compression import COMPRESSION_CODECS, MAX_INFLATED_BYTES, codec_name
from kraftlog.engine.records.layout import (
    CODEC_MASK,
    CODEC_NONE,
    CONTROL_BIT,
    HEADER_SIZE,
)
from kraftlog.errors import CorruptRecordError, UnsupportedCodecError

_impl = select("kraftlog._metadata", "kraftlog.engine.records.metadata_columns_pure")
implementation_module = _impl  # for decode_region_with

IMPLEMENTATION: str = _impl.IMPLEMENTATION
walk_batches = _impl.walk_batches
sections_of = _impl.sections_of
decode_sections = _impl.decode_sections

# A replica/ISR list longer than this is not put in the list columns: its row has extras = True,
# its count column holds the real length (clipped to int16), its list row the first entries.
LIST_MAX_WIDTH: int = _impl.LIST_MAX_WIDTH

# The PartitionChangeRecord lists the partition_changes table holds past ISR and replicas, each
# with its <name>_count column (-1: null)
MORE_CHANGE_LISTS: tuple[str, ...] = _impl.MORE_LIST_COLUMNS
# every list of the partition_changes table -> its count column
CHANGE_LIST_COUNTS: dict[str, str] = {"replicas": "replica_count", "isr": "isr_count",
                                      **{name: name + "_count" for name in MORE_CHANGE_LISTS}}

# walk_batches columns
B_POS, B_SIZE, B_BASE_OFFSET, B_LAST_OFFSET_DELTA, B_LEADER_EPOCH, B_MAX_TIMESTAMP, B_ATTRIBUTES, \
    B_RECORD_COUNT = range(8)
# decode_sections columns
S_START, S_END, S_BASE_OFFSET, S_RECORD_COUNT, S_CONTROL = range(5)

class ColumnTable:
    """One table: numpy columns (and bytes blobs) as attributes; len() is its row count.

    Every table has ``record_index`` (int32: the row's record in the per-record arrays) and
    ``extras`` (bool: the record carries something the columns do not hold; decode it with the
    generic codec). The columns of each table are listed on MetadataColumns.
    """

    def __init__(self, kind: str, columns: dict):
        self.kind = kind
        self.__dict__.update(columns)

    def __len__(self) -> int:
        return len(self.record_index)

    def columns(self) -> list[str]:
        return [k for k in self.__dict__ if k != "kind"]

    def __repr__(self) -> str:
        return f"<{self.kind}: {len(self)} rows>"


class MetadataColumns:
    """The decoded region.

    Per record, in log order (control records excluded), n entries each:
        offsets int64, api_keys int16, versions int16, kind_rows int32 (the row in its kind's
        table, or in ``other``), value_pos int64, value_len int32 (the framed value in ``data``).
    ``data``: the input buffer when no batch was compressed; else a new bytes holding every
    metadata batch's (inflated) records section, and value_pos points into it.
    Provenance: last_offset (-1 when no batch), last_epoch, last_timestamp_ms (maxTimestamp of the
    last batch, control batches included), batch_count, control_record_count.
    ``batches``: walk_batches' table (B_* columns, positions in ``source``, the input's bytes), so
    a caller can cut whole batches out of the input again (the loader holds back the batches of a
    transaction still open at the end of a region).

    Tables (``extras`` bool in all of them):
        topics: record_index, topic_id uint64[k,2] (msb, lsb), name_offsets int64[k+1] into name_blob
        partitions: record_index, topic_id, partition_id, leader, leader_epoch, partition_epoch
            (int32), leader_recovery_state int8, replicas int32[m,W] (-1 padded), replica_count
            int16, isr int32[m,Wi], isr_count int16, directories uint8[m,W*16] (the replicas'
            directory ids in replica order, zero padded) with directory_count int16 (0 when the
            record has none or all are MIGRATING; else one per replica: a count that differs
            from the replicas' is a record the columns leave to the generic codec, extras)
        partition_changes: record_index, topic_id, partition_id, leader (-2 unchanged, -1 none),
            leader_recovery_state int8 (-1 unchanged), isr/replicas (-1 padded) with
            isr_count/replica_count int16 (-1 = null = unchanged); removing_replicas,
            adding_replicas, eligible_leader_replicas, last_known_elr (-1 padded, 0 wide when no
            record of the region carries the list) with <name>_count int16 (-1 = null). A record
            with Directories (or unknown tags) has extras.
        remove_topics: record_index, topic_id
        configs: record_index, resource_type int8, resource_name_offsets / name_offsets /
            value_offsets int64[c+1] into config_blob, value_null bool
        features: record_index, name_offsets into feature_blob, feature_level int16
        fence: record_index, broker_id int32, broker_epoch int64, fenced bool (True: FenceBroker)
        broker_changes: record_index, broker_id, broker_epoch, fenced int8 (-1 none, 0 unfence,
            1 fence), in_controlled_shutdown int8 (-1 none, 1 in controlled shutdown)
        broker_registrations: record_index, broker_id, broker_epoch, incarnation_id uint64[r,2],
            fenced bool, in_controlled_shutdown bool, is_migrating_zk_broker bool (False before v2),
            rack_offsets into broker_blob, rack_null bool; three flat lists like
            client_quotas.entity_end: endpoint_end into the endpoints (endpoint_name_offsets /
            endpoint_host_offsets into broker_blob, endpoint_port uint16,
            endpoint_security_protocol int16), feature_end into the features (feature_name_offsets
            into broker_blob, feature_min_version / feature_max_version int16), log_dir_end into
            log_dirs uint64[d,2] (empty before v3). Unknown tags, here or in an endpoint or a
            feature, set extras.
        producer_ids: record_index, broker_id int32, broker_epoch int64, next_producer_id int64
        acls: record_index, acl_id uint64[r,2], removed bool (a RemoveAccessControlEntryRecord: its
            other columns 0 and empty), resource_type, pattern_type, operation, permission_type int8,
            resource_name_offsets / principal_offsets / host_offsets into acl_blob
        client_quotas: record_index, key_offsets into key_blob, value float64, remove bool,
            entity_end int64 (its entities are entity_end[row - 1] (0 for row 0) .. entity_end[row]
            of the flat entity list: entity_type_offsets / entity_name_offsets into entity_blob,
            entity_name_null bool)
        scram: record_index, removed bool (a RemoveUserScramCredentialRecord: name and mechanism
            only), mechanism int8, iterations int32, name_offsets / salt_offsets /
            stored_key_offsets / server_key_offsets into scram_blob (the keys are bytes, not text)
        delegation_tokens: record_index, removed bool (a RemoveDelegationTokenRecord: token id only),
            issue_timestamp_ms / max_timestamp_ms / expiration_timestamp_ms int64, owner_offsets /
            requester_offsets / token_id_offsets into token_blob, renewer_end int64 (like
            client_quotas.entity_end, into the flat renewer list: renewer_offsets into token_blob)
        other: record_index
    """

    TABLES = ("topics", "partitions", "partition_changes", "remove_topics", "configs", "features",
              "fence", "broker_changes", "broker_registrations", "producer_ids",
              "acls", "client_quotas", "scram", "delegation_tokens", "other")

    def __init__(self, decoded: dict, data, batches: np.ndarray, source=None):
        for name in ("offsets", "api_keys", "versions", "kind_rows", "value_pos", "value_len"):
            setattr(self, name, decoded[name])
        for name in self.TABLES:
            setattr(self, name, ColumnTable(name, decoded[name]))
        self.data = data
        self.source = data if source is None else source
        self.batches = batches
        self.batch_count = len(batches)
        control = (batches[:, B_ATTRIBUTES] & CONTROL_BIT) != 0
        self.control_record_count = int(batches[control, B_RECORD_COUNT].sum())
        if len(batches):
            last = batches[-1]
            self.last_offset = int(last[B_BASE_OFFSET]) + int(last[B_LAST_OFFSET_DELTA])
            self.last_epoch = int(last[B_LEADER_EPOCH])
            self.last_timestamp_ms = int(last[B_MAX_TIMESTAMP])
        else:
            self.last_offset, self.last_epoch, self.last_timestamp_ms = -1, -1, -1

    def __len__(self) -> int:
        return len(self.offsets)

    def value(self, index: int) -> memoryview:
        """The framed value of record ``index`` (for metadata.decode_record)."""
        pos = int(self.value_pos[index])
        return memoryview(self.data)[pos:pos + int(self.value_len[index])]

    def __repr__(self) -> str:
        sizes = ", ".join(f"{t}={len(getattr(self, t))}" for t in self.TABLES)
        return f"<MetadataColumns {len(self)} records, {self.batch_count} batches: {sizes}>"


def _byte_view(buf) -> memoryview:
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def inflate(codec: int, section, *, position: int, path: str | None) -> bytes:
    """A compressed records section, inflated within MAX_INFLATED_BYTES; CorruptRecordError (the
    batch's ``position``) when it does not inflate."""
    try:
        return compression.inflate(codec, section)
    except compression.Problem as exc:
        raise CorruptRecordError(exc.reason, position=position, path=path) from None


def _sections(impl, view: memoryview, batches: np.ndarray, path: str | None):
    """(data, sections, origins): the records sections to decode, positions in ``data``.

    origins[s] is the input position of section s's batch, or -1 - position for a compressed
    batch. Without any codec bits set (the common case: one native pass), data is None and the
    sections lie in ``view`` itself."""
    sections, first_coded = impl.sections_of(batches)
    if first_coded < 0:
        return None, sections, batches[:, B_POS]
    codecs = batches[:, B_ATTRIBUTES] & CODEC_MASK
    control = (batches[:, B_ATTRIBUTES] & CONTROL_BIT) != 0
    for k in np.flatnonzero(~np.isin(codecs, (CODEC_NONE, *COMPRESSION_CODECS))):
        raise UnsupportedCodecError(int(codecs[k]), position=int(batches[k, B_POS]), path=path)
    sections = np.empty((len(batches), 5), dtype=np.int64)
    sections[:, S_START] = batches[:, B_POS] + HEADER_SIZE
    sections[:, S_END] = batches[:, B_POS] + batches[:, B_SIZE]
    sections[:, S_BASE_OFFSET] = batches[:, B_BASE_OFFSET]
    sections[:, S_RECORD_COUNT] = batches[:, B_RECORD_COUNT]
    sections[:, S_CONTROL] = control
    origins = batches[:, B_POS].copy()
    if not np.any((codecs != CODEC_NONE) & ~control):
        return None, sections, origins
    # Some metadata batch is compressed: gather every metadata section into one new buffer.
    pieces, pos = [], 0
    for k in range(len(batches)):
        start, end = int(sections[k, S_START]), int(sections[k, S_END])
        if control[k]:
            sections[k, S_START] = sections[k, S_END] = pos
            continue
        if codecs[k] != CODEC_NONE:
            piece = inflate(int(codecs[k]), view[start:end], position=int(batches[k, B_POS]), path=path)
            origins[k] = -1 - origins[k]
        else:
            piece = view[start:end]
        pieces.append(piece)
        sections[k, S_START] = pos
        pos += len(piece)
        sections[k, S_END] = pos
    return b"".join(pieces), sections, origins


def _relocate(exc: CorruptRecordError, sections: np.ndarray, origins: np.ndarray, batches: np.ndarray,
              path: str | None) -> CorruptRecordError:
    """An error at a position of the gathered buffer, re-stated at the input's batch."""
    pos = exc.position if exc.position is not None else 0
    k = getattr(exc, "section", -1)
    if k < 0:  # a record's bytes lie strictly inside one non-empty section
        metadata = np.flatnonzero((sections[:, S_CONTROL] == 0) & (sections[:, S_END] > sections[:, S_START]))
        k = metadata[max(int(np.searchsorted(sections[metadata, S_START], pos, side="right")) - 1, 0)]
    rel = pos - int(sections[k, S_START])
    origin = int(origins[k])
    if origin < 0:
        return CorruptRecordError(f"{exc.reason} (byte {rel} of the inflated records of the "
                                  f"{codec_name(int(batches[k, B_ATTRIBUTES]) & CODEC_MASK)} batch)", position=-1 - origin, path=path)
    return CorruptRecordError(exc.reason, position=origin + HEADER_SIZE + rel, path=path)


def decode_metadata_region(buf, start: int = 0, end: int | None = None, *, verify_crc: bool = True,
                           path: str | None = None) -> MetadataColumns:
    """Decode every whole record batch in buf[start:end] into a MetadataColumns.

    Raises CorruptRecordError (position in ``buf``, ``path``) on a bad header or CRC, a truncated
    batch, a section that does not inflate, or an undecodable record; UnsupportedCodecError on a
    codec 5-7 batch (the message names its offset and
    apiKey when known).
    """
    return decode_region_with(_impl, buf, start, end, verify_crc=verify_crc, path=path)


def decode_region_with(impl, buf, start: int = 0, end: int | None = None, *, verify_crc: bool = True,
                       path: str | None = None) -> MetadataColumns:
    """decode_metadata_region on a chosen implementation (the native module or the twin module):
    what the tests and benchmarks use to run both on the same bytes."""
    view = _byte_view(buf)
    batches = impl.walk_batches(view, start, end, verify_crc, path)
    gathered, sections, origins = _sections(impl, view, batches, path)
    if gathered is None:
        return MetadataColumns(impl.decode_sections(view, sections, path), buf, batches)
    try:
        decoded = impl.decode_sections(gathered, sections, None)
    except CorruptRecordError as exc:
        raise _relocate(exc, sections, origins, batches, path) from None
    return MetadataColumns(decoded, gathered, batches, view)


__all__ = [
    "CHANGE_LIST_COUNTS", "IMPLEMENTATION", "LIST_MAX_WIDTH", "MAX_INFLATED_BYTES", "MORE_CHANGE_LISTS", "ColumnTable",
    "MetadataColumns",
    "decode_metadata_region", "decode_region_with", "decode_sections", "inflate", "sections_of", "walk_batches",
]
