"""Proves decode_metadata_region: the native decoder and its pure twin produce identical columns
from the same batches (every hot record kind at every version, mixed with other kinds, unknown
apiKeys/versions and control batches, uncompressed and zstd), the columns agree with the generic
codec (metadata.decode_record) record by record, corrupt bytes raise only CorruptRecordError (the
same reason and position from both implementations, the same accept/refuse decision as the
generic codec), and provenance (offsets, epochs, timestamps, counts) matches the batch headers."""

from __future__ import annotations

import functools
import struct
import uuid

import crc32c as reference_crc
import numpy as np
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from kraftlog import _accel
from kraftlog.engine.records import batch, compression, layout
from kraftlog.engine.records import metadata_columns as mc
from kraftlog.engine.records import metadata_columns_pure as pure
from kraftlog.engine.records.metadata import UNKNOWN_TAGS, decode_record, encode_control, encode_record
from kraftlog.engine.records.schema import BY_API_KEY
from kraftlog.engine.records.wire import decode_uvarint, encode_uvarint
from kraftlog.errors import CorruptRecordError, UndecodableRecordError, UnsupportedCodecError

pytestmark = pytest.mark.twin

NATIVE = mc.implementation_module
ZERO = uuid.UUID(int=0)
W_MAX = mc.LIST_MAX_WIDTH
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# (record name, version) -> table; everything else lands in "other"
HOT = {("TopicRecord", 0): "topics", ("RemoveTopicRecord", 0): "remove_topics",
       ("ConfigRecord", 0): "configs", ("FeatureLevelRecord", 0): "features",
       ("FenceBrokerRecord", 0): "fence", ("UnfenceBrokerRecord", 0): "fence",
       ("ProducerIdsRecord", 0): "producer_ids", ("AccessControlEntryRecord", 0): "acls",
       ("RemoveAccessControlEntryRecord", 0): "acls", ("ClientQuotaRecord", 0): "client_quotas",
       ("UserScramCredentialRecord", 0): "scram", ("RemoveUserScramCredentialRecord", 0): "scram",
       ("DelegationTokenRecord", 0): "delegation_tokens", ("RemoveDelegationTokenRecord", 0): "delegation_tokens"}
HOT.update({("PartitionRecord", v): "partitions" for v in range(3)})
HOT.update({("PartitionChangeRecord", v): "partition_changes" for v in range(3)})
HOT.update({("BrokerRegistrationChangeRecord", v): "broker_changes" for v in range(3)})
HOT.update({("RegisterBrokerRecord", v): "broker_registrations" for v in range(4)})


# ---- strategies: (value bytes) of every kind ------------------------------------------------------

i8 = st.integers(-(1 << 7), (1 << 7) - 1)
i16 = st.integers(-(1 << 15), (1 << 15) - 1)
i32 = st.integers(-(1 << 31), (1 << 31) - 1)
i64 = st.integers(-(1 << 63), (1 << 63) - 1)
uuids = st.one_of(st.just(ZERO), st.uuids())
text = st.text(max_size=10)
ids = st.lists(st.integers(-1, 400), max_size=5)
wide = st.lists(st.integers(0, 400), min_size=W_MAX + 1, max_size=W_MAX + 3)  # longer than the columns hold
lists = st.integers(0, 9).flatmap(lambda k: wide if k == 0 else ids)
maybe_lists = st.one_of(st.none(), ids)
sometimes_empty = st.one_of(st.just([]), st.just([]), ids)
unknown_tags = st.one_of(st.just({}), st.just({}),
                         st.dictionaries(st.integers(10, 40), st.binary(max_size=4), min_size=1, max_size=2))


def _with_tags(data: dict, tags: dict) -> dict:
    if tags:
        data[UNKNOWN_TAGS] = tags
    return data


@st.composite
def topic(draw):
    return "TopicRecord", 0, _with_tags({"Name": draw(text), "TopicId": draw(uuids)}, draw(unknown_tags))


@st.composite
def partition(draw):
    v = draw(st.integers(0, 2))
    d = {"PartitionId": draw(i32), "TopicId": draw(uuids), "Replicas": draw(lists), "Isr": draw(lists),
         "RemovingReplicas": draw(sometimes_empty), "AddingReplicas": draw(sometimes_empty),
         "Leader": draw(i32), "LeaderEpoch": draw(i32), "PartitionEpoch": draw(i32),
         "LeaderRecoveryState": draw(st.one_of(st.just(0), i8))}
    if v >= 1:
        n = len(d["Replicas"])  # one directory per replica is the valid shape (the columns carry it)
        d["Directories"] = draw(st.one_of(st.just([]), st.lists(st.just(ZERO), min_size=1, max_size=3),
                                          st.lists(uuids, min_size=n, max_size=n),
                                          st.lists(st.sampled_from([ZERO, *_DIRS]), min_size=n, max_size=n),
                                          st.lists(uuids, min_size=1, max_size=3)))
    if v >= 2:
        d["EligibleLeaderReplicas"] = draw(st.one_of(st.none(), st.none(), ids))
        d["LastKnownElr"] = draw(st.one_of(st.none(), st.none(), ids))
    return "PartitionRecord", v, _with_tags(d, draw(unknown_tags))


_DIRS = [uuid.UUID(int=2 + k) for k in range(3)]  # a few brokers' directories, repeated across records


@st.composite
def partition_change(draw):
    v = draw(st.integers(0, 2))
    d = {"PartitionId": draw(i32), "TopicId": draw(uuids), "Isr": draw(st.one_of(st.none(), lists)),
         "Leader": draw(st.one_of(st.just(-2), st.just(-1), i32)), "Replicas": draw(st.one_of(st.none(), lists)),
         "RemovingReplicas": draw(st.one_of(st.none(), st.none(), ids)),
         "AddingReplicas": draw(st.one_of(st.none(), st.none(), ids)),
         "LeaderRecoveryState": draw(st.one_of(st.just(-1), i8))}
    if v >= 1:
        d["Directories"] = draw(st.one_of(st.none(), st.none(), st.lists(uuids, max_size=3)))
    if v >= 2:
        d["EligibleLeaderReplicas"] = draw(st.one_of(st.none(), st.none(), ids))
        d["LastKnownElr"] = draw(st.one_of(st.none(), st.none(), ids))
    return "PartitionChangeRecord", v, _with_tags(d, draw(unknown_tags))


@st.composite
def config(draw):
    d = {"ResourceType": draw(i8), "ResourceName": draw(text), "Name": draw(text),
         "Value": draw(st.one_of(st.none(), text))}
    return "ConfigRecord", 0, _with_tags(d, draw(unknown_tags))


@st.composite
def feature(draw):
    return "FeatureLevelRecord", 0, _with_tags({"Name": draw(text), "FeatureLevel": draw(i16)}, draw(unknown_tags))


@st.composite
def fence(draw):
    name = draw(st.sampled_from(["FenceBrokerRecord", "UnfenceBrokerRecord"]))
    return name, 0, _with_tags({"Id": draw(i32), "Epoch": draw(i64)}, draw(unknown_tags))


@st.composite
def producer_ids(draw):
    d = {"BrokerId": draw(i32), "BrokerEpoch": draw(i64), "NextProducerId": draw(i64)}
    return "ProducerIdsRecord", 0, _with_tags(d, draw(unknown_tags))


@st.composite
def acl(draw):
    if draw(st.booleans()):
        return "RemoveAccessControlEntryRecord", 0, _with_tags({"Id": draw(uuids)}, draw(unknown_tags))
    d = {"Id": draw(uuids), "ResourceType": draw(i8), "ResourceName": draw(text), "PatternType": draw(i8),
         "Principal": draw(text), "Host": draw(text), "Operation": draw(i8), "PermissionType": draw(i8)}
    return "AccessControlEntryRecord", 0, _with_tags(d, draw(unknown_tags))


@st.composite
def client_quota(draw):
    entity = st.fixed_dictionaries({"EntityType": text, "EntityName": st.one_of(st.none(), text)})
    d = {"Entity": draw(st.lists(st.builds(lambda e, tags: _with_tags(e, tags), entity, unknown_tags), max_size=3)),
         "Key": draw(text), "Value": draw(st.floats(allow_nan=False)), "Remove": draw(st.booleans())}
    return "ClientQuotaRecord", 0, _with_tags(d, draw(unknown_tags))


@st.composite
def scram(draw):
    d = {"Name": draw(text), "Mechanism": draw(i8)}
    if draw(st.booleans()):
        return "RemoveUserScramCredentialRecord", 0, _with_tags(d, draw(unknown_tags))
    d.update({"Salt": draw(st.binary(max_size=6)), "StoredKey": draw(st.binary(max_size=6)),
              "ServerKey": draw(st.binary(max_size=6)), "Iterations": draw(i32)})
    return "UserScramCredentialRecord", 0, _with_tags(d, draw(unknown_tags))


@st.composite
def token(draw):
    if draw(st.booleans()):
        return "RemoveDelegationTokenRecord", 0, _with_tags({"TokenId": draw(text)}, draw(unknown_tags))
    d = {"Owner": draw(text), "Requester": draw(text), "Renewers": draw(st.lists(text, max_size=3)),
         "IssueTimestamp": draw(i64), "MaxTimestamp": draw(i64), "ExpirationTimestamp": draw(i64),
         "TokenId": draw(text)}
    return "DelegationTokenRecord", 0, _with_tags(d, draw(unknown_tags))


@st.composite
def remove_topic(draw):
    return "RemoveTopicRecord", 0, _with_tags({"TopicId": draw(uuids)}, draw(unknown_tags))


@st.composite
def broker_change(draw):
    v = draw(st.integers(0, 2))
    d = {"BrokerId": draw(i32), "BrokerEpoch": draw(i64), "Fenced": draw(st.one_of(st.sampled_from([-1, 0, 1]), i8))}
    if v >= 1:
        d["InControlledShutdown"] = draw(st.one_of(st.sampled_from([0, 1]), i8))
    if v >= 2:
        d["LogDirs"] = draw(st.lists(uuids, max_size=2))
    return "BrokerRegistrationChangeRecord", v, _with_tags(d, draw(unknown_tags))


@st.composite
def register_broker(draw):
    v = draw(st.integers(0, 3))
    endpoint = st.fixed_dictionaries({"Name": text, "Host": text, "Port": st.integers(0, 65535),
                                      "SecurityProtocol": i16})
    feature_range = st.fixed_dictionaries({"Name": text, "MinSupportedVersion": i16, "MaxSupportedVersion": i16})
    tagged = functools.partial(st.builds, lambda e, tags: _with_tags(e, tags))
    d = {"BrokerId": draw(i32), "IncarnationId": draw(uuids), "BrokerEpoch": draw(i64),
         "EndPoints": draw(st.lists(tagged(endpoint, unknown_tags), max_size=3)),
         "Features": draw(st.lists(tagged(feature_range, unknown_tags), max_size=2)),
         "Rack": draw(st.one_of(st.none(), text)), "Fenced": draw(st.booleans())}
    if v >= 1:
        d["InControlledShutdown"] = draw(st.booleans())
    if v >= 2:
        d["IsMigratingZkBroker"] = draw(st.booleans())
    if v >= 3:
        d["LogDirs"] = draw(st.lists(uuids, max_size=3))
    return "RegisterBrokerRecord", v, _with_tags(d, draw(unknown_tags))


@st.composite
def other_known(draw):
    name = draw(st.sampled_from(["NoOpRecord", "UnregisterBrokerRecord", "RegisterControllerRecord", "ZkMigrationStateRecord"]))
    return name, 0, {}


@st.composite
def unknown_frame(draw):
    """Raw framed values the generic codec does not know: another apiKey, or an unknown version of
    a hot kind (the decoders must list them in ``other``, not fail)."""
    api_key, version = draw(st.one_of(
        st.tuples(st.sampled_from([6, 13, 16, 28, 100, 0x7FFF]), st.integers(0, 3)),
        st.tuples(st.just(2), st.integers(1, 4)), st.tuples(st.just(3), st.integers(3, 6)),
        st.tuples(st.just(0), st.integers(4, 0x7FFF))))
    return b"\x01" + encode_uvarint(api_key) + encode_uvarint(version) + draw(st.binary(max_size=12))


def _encode(spec) -> bytes:
    return spec if isinstance(spec, bytes) else encode_record(*spec)


records = st.one_of(topic(), partition(), partition(), partition_change(), config(), feature(), fence(),
                    remove_topic(), broker_change(), register_broker(), producer_ids(), acl(), client_quota(), scram(), token(), other_known(),
                    unknown_frame())


@st.composite
def regions(draw, max_records=25):
    """(region bytes, values in log order, batch headers): metadata batches of random sizes, each
    uncompressed or zstd, with control batches between them."""
    values = [_encode(spec) for spec in draw(st.lists(records, max_size=max_records))]
    out, offset, i = bytearray(), draw(st.integers(0, 1 << 40)), 0
    headers = []
    while True:
        remaining = i < len(values)
        if not remaining and (len(headers) > 12 or not draw(st.booleans())):
            break
        if not remaining or draw(st.integers(0, 3)) == 0:
            key_value = encode_control("LeaderChangeMessage", 0, {"LeaderId": 1, "Voters": [], "GrantingVoters": []})
            b = batch.build_control_batch(2, key_value[1], base_offset=offset,
                                          partition_leader_epoch=draw(st.integers(0, 99)),
                                          timestamp_ms=draw(st.integers(0, 1 << 42)))
        else:
            n = draw(st.integers(1, 6))
            chunk = values[i:i + n]
            i += len(chunk)
            b = batch.build_batch_from_values(chunk, base_offset=offset,
                                              partition_leader_epoch=draw(st.integers(0, 99)),
                                              codec=draw(st.sampled_from([layout.CODEC_NONE, layout.CODEC_ZSTD])),
                                              timestamp_ms=draw(st.integers(0, 1 << 42)))
        header = layout.parse_header(b)
        headers.append(header)
        offset = header.next_offset + draw(st.integers(0, 3))
        out += b
    return bytes(out), values, headers


# ---- comparing columns ----------------------------------------------------------------------------

def snapshot(cols: mc.MetadataColumns) -> dict:
    """Every array (dtype, shape, bytes), blob and scalar of a MetadataColumns, comparable with ==."""
    out = {}
    for key, value in vars(cols).items():
        if isinstance(value, mc.ColumnTable):
            for col, arr in vars(value).items():
                out[f"{key}.{col}"] = _comparable(arr)
        elif key != "data":
            out[key] = _comparable(value)
    return out


def _comparable(value):
    if isinstance(value, np.ndarray):
        return value.dtype.str, value.shape, value.tobytes()
    return value


def both(buf, **kwargs):
    """(native columns, twin columns) of the same bytes, checked identical."""
    native = mc.decode_region_with(NATIVE, buf, **kwargs)
    twin = mc.decode_region_with(pure, buf, **kwargs)
    assert snapshot(native) == snapshot(twin)
    return native


def outcome(impl, buf, **kwargs):
    try:
        return "ok", snapshot(mc.decode_region_with(impl, buf, **kwargs))
    except UndecodableRecordError as exc:  # corrupt bytes, or an edit made the codec bits name codec 5-7
        return "error", type(exc).__name__, exc.reason, exc.position


def _uuid_pair(u: uuid.UUID) -> list[int]:
    return [u.int >> 64, u.int & ((1 << 64) - 1)]


def _string(blob: bytes, offsets: np.ndarray, row: int) -> str:
    return blob[offsets[row]:offsets[row + 1]].decode()


def _row(values, width: int) -> list[int]:
    values = list(values or [])[:width]
    return values + [-1] * (width - len(values))


def _expected_width(lengths, least: int = 1) -> int:
    return max([least] + [min(n, W_MAX) for n in lengths])


# the change lists past ISR and replicas: their column, and the field (a list column is 0 wide
# when no record of the region carries the list)
MORE_LISTS = {"removing_replicas": "RemovingReplicas", "adding_replicas": "AddingReplicas",
              "eligible_leader_replicas": "EligibleLeaderReplicas", "last_known_elr": "LastKnownElr"}


# ---- the independent check: the generic codec, record by record ------------------------------------

def check_against_generic(cols: mc.MetadataColumns, values: list[bytes]) -> None:
    assert len(cols) == len(values)
    decoded = []
    for i, value in enumerate(values):
        assert bytes(cols.value(i)) == value
        frame_key, frame_version = _frame(value)
        assert (cols.api_keys[i], cols.versions[i]) == (frame_key, frame_version)
        try:
            rec = decode_record(value)
        except CorruptRecordError:  # unknown apiKey or version: the generic codec refuses it too
            rec = None
        table_name = HOT.get((rec.record_type, rec.version), "other") if rec else "other"
        table = getattr(cols, table_name)
        row = int(cols.kind_rows[i])
        assert table.record_index[row] == i
        decoded.append((rec, table_name, row))
    _check_widths(cols, [d for d in decoded if d[1] in ("partitions", "partition_changes")])
    for (rec, table_name, row), value in zip(decoded, values, strict=True):
        if table_name != "other":
            # a value that is not its own canonical encoding (a tag twice, say) may be left to the
            # generic codec (extras), which reads it as Kafka does: the last occurrence wins
            canonical = encode_record(rec.record_type, rec.version, rec.data) == value
            CHECKS[table_name](getattr(cols, table_name), row, rec.data, rec, canonical)
    for name in mc.MetadataColumns.TABLES:
        assert len(getattr(cols, name)) == sum(1 for d in decoded if d[1] == name)


def _frame(value: bytes) -> tuple[int, int]:
    _, pos = decode_uvarint(value, 0, 5)
    key, pos = decode_uvarint(value, pos, 5)
    version, _ = decode_uvarint(value, pos, 5)
    return key, version


def _check_widths(cols, decoded) -> None:
    parts = [rec.data for rec, name, _ in decoded if name == "partitions"]
    changes = [rec.data for rec, name, _ in decoded if name == "partition_changes"]
    assert cols.partitions.replicas.shape[1] == _expected_width(len(d["Replicas"]) for d in parts)
    assert cols.partitions.isr.shape[1] == _expected_width(len(d["Isr"]) for d in parts)
    assert cols.partition_changes.replicas.shape[1] == _expected_width(
        len(d["Replicas"]) for d in changes if d["Replicas"] is not None)
    assert cols.partition_changes.isr.shape[1] == _expected_width(len(d["Isr"]) for d in changes if d["Isr"] is not None)
    for column, field in MORE_LISTS.items():
        assert getattr(cols.partition_changes, column).shape[1] == _expected_width(
            (len(d[field]) for d in changes if d.get(field) is not None), least=0), column


def _too_wide(*lists) -> bool:
    return any(v is not None and len(v) > W_MAX for v in lists)


def check_topic(t, row, d, rec, canonical=True):
    assert list(t.topic_id[row]) == _uuid_pair(d["TopicId"])
    assert _string(t.name_blob, t.name_offsets, row) == d["Name"]
    assert t.extras[row] == bool(d.get(UNKNOWN_TAGS))


def check_partition(t, row, d, rec, canonical=True):
    assert list(t.topic_id[row]) == _uuid_pair(d["TopicId"])
    for col, field in (("partition_id", "PartitionId"), ("leader", "Leader"), ("leader_epoch", "LeaderEpoch"),
                       ("partition_epoch", "PartitionEpoch"), ("leader_recovery_state", "LeaderRecoveryState")):
        assert getattr(t, col)[row] == d[field], col
    assert list(t.replicas[row]) == _row(d["Replicas"], t.replicas.shape[1])
    assert list(t.isr[row]) == _row(d["Isr"], t.isr.shape[1])
    assert t.replica_count[row] == len(d["Replicas"]) and t.isr_count[row] == len(d["Isr"])
    dirs = d.get("Directories", [])
    carried = any(u != ZERO for u in dirs) and len(dirs) == len(d["Replicas"]) and not _too_wide(d["Replicas"])
    extras = (bool(d["RemovingReplicas"]) or bool(d["AddingReplicas"])
              or (any(u != ZERO for u in dirs) and not carried)
              or d.get("EligibleLeaderReplicas") is not None or d.get("LastKnownElr") is not None
              or bool(d.get(UNKNOWN_TAGS)) or _too_wide(d["Replicas"], d["Isr"]))
    assert t.extras[row] == extras
    # directories ride in the columns when there is one per replica and one is not MIGRATING
    assert t.directory_count[row] == (len(dirs) if carried else 0)
    if carried:
        assert bytes(t.directories[row, :16 * len(dirs)]) == b"".join(u.bytes for u in dirs)


def check_change(t, row, d, rec, canonical=True):
    assert list(t.topic_id[row]) == _uuid_pair(d["TopicId"])
    assert t.partition_id[row] == d["PartitionId"] and t.leader[row] == d["Leader"]
    assert t.leader_recovery_state[row] == d["LeaderRecoveryState"]
    counts = {"isr": "isr_count", "replicas": "replica_count", **{c: c + "_count" for c in MORE_LISTS}}
    for col, field in (("isr", "Isr"), ("replicas", "Replicas"), *MORE_LISTS.items()):
        values = d.get(field)  # ELR and last-known ELR are v2+: absent before
        assert list(getattr(t, col)[row]) == _row(values, getattr(t, col).shape[1]), col
        assert getattr(t, counts[col])[row] == (-1 if values is None else min(len(values), 2**15 - 1)), col
    extras = (d.get("Directories") is not None or bool(d.get(UNKNOWN_TAGS))
              or _too_wide(d["Isr"], d["Replicas"], *(d.get(f) for f in MORE_LISTS.values())))
    assert t.extras[row] == extras


def check_remove(t, row, d, rec, canonical=True):
    assert list(t.topic_id[row]) == _uuid_pair(d["TopicId"])
    assert t.extras[row] == bool(d.get(UNKNOWN_TAGS))


def check_config(t, row, d, rec, canonical=True):
    assert t.resource_type[row] == d["ResourceType"]
    assert _string(t.config_blob, t.resource_name_offsets, row) == d["ResourceName"]
    assert _string(t.config_blob, t.name_offsets, row) == d["Name"]
    assert t.value_null[row] == (d["Value"] is None)
    assert _string(t.config_blob, t.value_offsets, row) == (d["Value"] or "")
    assert t.extras[row] == bool(d.get(UNKNOWN_TAGS))


def check_feature(t, row, d, rec, canonical=True):
    assert _string(t.feature_blob, t.name_offsets, row) == d["Name"]
    assert t.feature_level[row] == d["FeatureLevel"]
    assert t.extras[row] == bool(d.get(UNKNOWN_TAGS))


def check_fence(t, row, d, rec, canonical=True):
    assert t.broker_id[row] == d["Id"] and t.broker_epoch[row] == d["Epoch"]
    assert t.fenced[row] == (rec.record_type == "FenceBrokerRecord")
    assert t.extras[row] == bool(d.get(UNKNOWN_TAGS))


# BrokerRegistrationFencingChange: FENCE(1), NONE(0), UNFENCE(-1) -> column 1 / -1 / 0
FENCING = {1: 1, 0: -1, -1: 0}


def check_broker_change(t, row, d, rec, canonical=True):
    assert t.broker_id[row] == d["BrokerId"] and t.broker_epoch[row] == d["BrokerEpoch"]
    assert t.fenced[row] == FENCING.get(d["Fenced"], -1)
    ics = d["InControlledShutdown"]
    assert t.in_controlled_shutdown[row] == (1 if ics == 1 else -1)
    extras = (bool(d["LogDirs"]) or bool(d.get(UNKNOWN_TAGS)) or d["Fenced"] not in FENCING
              or ics not in (0, 1))
    assert t.extras[row] == extras or (t.extras[row] and not canonical)


def check_producer_ids(t, row, d, rec, canonical=True):
    assert (t.broker_id[row], t.broker_epoch[row]) == (d["BrokerId"], d["BrokerEpoch"])
    assert t.next_producer_id[row] == d["NextProducerId"]
    assert t.extras[row] == bool(d.get(UNKNOWN_TAGS))


def _slice(ends, row) -> range:
    """The flat-list entries of ``row`` (ends[row - 1] .. ends[row], from 0 for row 0)."""
    return range(int(ends[row - 1]) if row else 0, int(ends[row]))


def check_registration(t, row, d, rec, canonical=True):
    assert t.broker_id[row] == d["BrokerId"] and t.broker_epoch[row] == d["BrokerEpoch"]
    assert list(t.incarnation_id[row]) == _uuid_pair(d["IncarnationId"])
    assert t.fenced[row] == d["Fenced"] and t.in_controlled_shutdown[row] == d["InControlledShutdown"]
    assert t.is_migrating_zk_broker[row] == d["IsMigratingZkBroker"]
    assert t.rack_null[row] == (d["Rack"] is None)
    blob = t.broker_blob
    assert _string(blob, t.rack_offsets, row) == (d["Rack"] or "")
    endpoints = [(_string(blob, t.endpoint_name_offsets, e), _string(blob, t.endpoint_host_offsets, e),
                  t.endpoint_port[e], t.endpoint_security_protocol[e]) for e in _slice(t.endpoint_end, row)]
    assert endpoints == [(e["Name"], e["Host"], e["Port"], e["SecurityProtocol"]) for e in d["EndPoints"]]
    features = [(_string(blob, t.feature_name_offsets, f), t.feature_min_version[f], t.feature_max_version[f])
                for f in _slice(t.feature_end, row)]
    assert features == [(f["Name"], f["MinSupportedVersion"], f["MaxSupportedVersion"]) for f in d["Features"]]
    assert [_uuid_pair_of(t.log_dirs[k]) for k in _slice(t.log_dir_end, row)] == list(d["LogDirs"])
    tagged = bool(d.get(UNKNOWN_TAGS)) or any(x.get(UNKNOWN_TAGS) for x in d["EndPoints"] + d["Features"])
    assert t.extras[row] == tagged


def _uuid_pair_of(halves) -> uuid.UUID:
    return uuid.UUID(int=(int(halves[0]) << 64) | int(halves[1]))


def check_acl(t, row, d, rec, canonical=True):
    removed = rec.record_type == "RemoveAccessControlEntryRecord"
    assert list(t.acl_id[row]) == _uuid_pair(d["Id"]) and t.removed[row] == removed
    ints = ("ResourceType", "PatternType", "Operation", "PermissionType")
    got = [t.resource_type[row], t.pattern_type[row], t.operation[row], t.permission_type[row]]
    assert got == ([0] * 4 if removed else [d[k] for k in ints])
    strings = [_string(t.acl_blob, getattr(t, k), row) for k in ("resource_name_offsets", "principal_offsets", "host_offsets")]
    assert strings == ([""] * 3 if removed else [d["ResourceName"], d["Principal"], d["Host"]])
    assert t.extras[row] == bool(d.get(UNKNOWN_TAGS))


def check_quota(t, row, d, rec, canonical=True):
    first = int(t.entity_end[row - 1]) if row else 0
    got = [(_string(t.entity_blob, t.entity_type_offsets, e),
            None if t.entity_name_null[e] else _string(t.entity_blob, t.entity_name_offsets, e))
           for e in range(first, int(t.entity_end[row]))]
    assert got == [(e["EntityType"], e["EntityName"]) for e in d["Entity"]]
    assert _string(t.key_blob, t.key_offsets, row) == d["Key"]
    assert t.value[row] == d["Value"] and t.remove[row] == d["Remove"]
    tagged = bool(d.get(UNKNOWN_TAGS)) or any(e.get(UNKNOWN_TAGS) for e in d["Entity"])
    assert t.extras[row] == tagged


def check_scram(t, row, d, rec, canonical=True):
    removed = rec.record_type == "RemoveUserScramCredentialRecord"
    assert _string(t.scram_blob, t.name_offsets, row) == d["Name"] and t.mechanism[row] == d["Mechanism"]
    assert t.removed[row] == removed and t.iterations[row] == (0 if removed else d["Iterations"])
    keys = [t.scram_blob[int(o[row]):int(o[row + 1])] for o in (t.salt_offsets, t.stored_key_offsets, t.server_key_offsets)]
    assert keys == ([b""] * 3 if removed else [d["Salt"], d["StoredKey"], d["ServerKey"]])
    assert t.extras[row] == bool(d.get(UNKNOWN_TAGS))


def check_token(t, row, d, rec, canonical=True):
    removed = rec.record_type == "RemoveDelegationTokenRecord"
    blob = t.token_blob
    assert _string(blob, t.token_id_offsets, row) == d["TokenId"] and t.removed[row] == removed
    first = int(t.renewer_end[row - 1]) if row else 0
    got = {"Owner": _string(blob, t.owner_offsets, row), "Requester": _string(blob, t.requester_offsets, row),
           "Renewers": [_string(blob, t.renewer_offsets, r) for r in range(first, int(t.renewer_end[row]))],
           "IssueTimestamp": t.issue_timestamp_ms[row], "MaxTimestamp": t.max_timestamp_ms[row],
           "ExpirationTimestamp": t.expiration_timestamp_ms[row]}
    empty = {"Owner": "", "Requester": "", "Renewers": [], "IssueTimestamp": 0, "MaxTimestamp": 0,
             "ExpirationTimestamp": 0}
    assert got == (empty if removed else {k: d[k] for k in empty})
    assert t.extras[row] == bool(d.get(UNKNOWN_TAGS))


CHECKS = {"topics": check_topic, "partitions": check_partition, "partition_changes": check_change,
          "remove_topics": check_remove, "configs": check_config, "features": check_feature,
          "fence": check_fence, "broker_changes": check_broker_change, "broker_registrations": check_registration,
          "producer_ids": check_producer_ids, "acls": check_acl, "client_quotas": check_quota, "scram": check_scram, "delegation_tokens": check_token}


# ---- tests -----------------------------------------------------------------------------------------

def test_the_expected_implementation_is_loaded():
    """The public module runs on the native decoder unless the twins are forced."""
    assert ("pure" if _accel.FORCE_PURE else "native") == mc.IMPLEMENTATION
    assert pure.IMPLEMENTATION == "pure"
    assert NATIVE.LIST_MAX_WIDTH == pure.LIST_MAX_WIDTH


@FAST
@given(regions())
def test_sections_of_the_batch_table_agree_with_the_twin(region_values_headers):
    """sections_of (native and twin): each batch's records section, its offsets and control flag
    from the headers, and the first batch with codec bits set (none: the region decodes in place)."""
    region, _, headers = region_values_headers
    table = NATIVE.walk_batches(region, 0, None, True, None)
    native, first = NATIVE.sections_of(table)
    twin, twin_first = pure.sections_of(table)
    assert native.dtype == twin.dtype == np.int64 and (native == twin).all() and first == twin_first
    coded = [k for k, h in enumerate(headers) if h.attributes & layout.CODEC_MASK]
    assert first == (coded[0] if coded else -1)
    for k, h in enumerate(headers):
        assert native[k].tolist() == [int(table[k, 0]) + layout.HEADER_SIZE, int(table[k, 0]) + int(table[k, 1]),
                                      h.base_offset, h.record_count, int(h.is_control)]


@FAST
@given(regions())
def test_native_twin_and_generic_codec_agree(region_values_headers):
    """Both implementations give identical columns, and every column matches the generic codec."""
    region, values, headers = region_values_headers
    cols = both(region)
    check_against_generic(cols, values)
    expected_offsets = [h.base_offset + k for h in headers if not h.is_control for k in range(h.record_count)]
    assert cols.offsets.tolist() == expected_offsets
    assert cols.batch_count == len(headers)
    assert cols.control_record_count == sum(h.record_count for h in headers if h.is_control)
    last = headers[-1] if headers else None
    assert cols.last_offset == (last.last_offset if last else -1)
    assert cols.last_epoch == (last.partition_leader_epoch if last else -1)
    assert cols.last_timestamp_ms == (last.max_timestamp if last else -1)
    compressed = any(h.codec == layout.CODEC_ZSTD and not h.is_control for h in headers)
    assert (cols.data is region) == (not compressed)


KINDS = {"topic": topic(), "partition": partition(), "partition_change": partition_change(), "config": config(),
         "feature": feature(), "fence": fence(), "remove_topic": remove_topic(), "broker_change": broker_change(),
         "register_broker": register_broker(), "producer_ids": producer_ids(), "acl": acl(), "client_quota": client_quota(), "scram": scram(), "token": token(), "other": st.one_of(other_known(), unknown_frame())}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_matches_the_generic_codec(kind):
    """One kind at a time (every version, optional fields and unknown tags drawn): columns from
    both implementations equal what the generic codec decodes from the same values."""

    @settings(max_examples=60, deadline=None)
    @given(st.lists(KINDS[kind], min_size=1, max_size=5), st.sampled_from([layout.CODEC_NONE, layout.CODEC_ZSTD]))
    def run(specs, codec):
        values = [_encode(spec) for spec in specs]
        cols = both(batch.build_batch_from_values(values, base_offset=3, codec=codec))
        check_against_generic(cols, values)

    run()


@FAST
@given(regions(max_records=8), st.binary(max_size=9), st.binary(max_size=9))
def test_a_region_inside_a_larger_buffer_keeps_absolute_positions(region_values_headers, before, after):
    """start/end select the region; value_pos refers to the buffer passed in (memoryview too)."""
    region, values, _ = region_values_headers
    buf = memoryview(bytearray(before + region + after))
    cols = both(buf, start=len(before), end=len(before) + len(region))
    check_against_generic(cols, values)


@settings(max_examples=150, deadline=None)
@given(regions(max_records=10), st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1,
                                          max_size=3), st.integers(0, 1 << 20), st.booleans())
def test_mutated_regions_raise_only_undecodable_record_errors_and_the_twins_agree(
        region_values_headers, edits, cut, truncate):
    """Random byte edits (CRC not checked, so the decoders see them) and truncations: the outcome is
    columns, CorruptRecordError, or UnsupportedCodecError when an edit lands on the codec bits (not
    known to be corrupt, just unreadable); native and twin give the same columns or the same error."""
    region = bytearray(region_values_headers[0])
    if not region:
        return
    for pos, byte in edits:
        region[pos % len(region)] = byte
    if truncate:
        region = region[:cut % len(region)]
    data = bytes(region)
    native = outcome(NATIVE, data, verify_crc=False)
    event(f"region {native[0]}")
    assert native == outcome(pure, data, verify_crc=False)


@st.composite
def mutated_value(draw):
    """A valid value of a hot kind with a few bytes changed, inserted or removed."""
    value = bytearray(_encode(draw(st.one_of(topic(), partition(), partition_change(), config(), feature(), fence(),
                                             remove_topic(), broker_change(), register_broker(), producer_ids(), acl(),
                                             client_quota(), scram(), token()))))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.integers(0, 2))
        pos = draw(st.integers(0, len(value)))
        if op == 0 and pos < len(value):
            value[pos] = draw(st.integers(0, 255))
        elif op == 1:
            value[pos:pos] = bytes([draw(st.integers(0, 255))])
        else:
            del value[pos:pos + draw(st.integers(1, 3))]
    return bytes(value)


@settings(max_examples=300, deadline=None)
@given(mutated_value(), st.sampled_from([layout.CODEC_NONE, layout.CODEC_ZSTD]))
# found by this test: InControlledShutdown tagged twice (0xff, then 1); the generic codec keeps the
# last, the column decoders leave the record to it (extras)
@example(b"\x01\x11\x01" + bytes(12) + b"\x02\x01\x01\xff\x01\x01\x01", layout.CODEC_NONE)
def test_mutated_values_decode_or_fail_like_the_generic_codec(value, codec):
    """Inside valid batches, a mutated value is refused by the column decoders exactly when the
    generic codec refuses it (for the hot kinds/versions), and native and twin agree on it."""
    region = batch.build_batch_from_values([value], base_offset=7, codec=codec)
    native, twin = outcome(NATIVE, region), outcome(pure, region)
    assert native == twin
    frame = _valid_frame(value)
    if frame is None:  # frameVersion, apiKey or version unreadable: both decoders refuse
        assert native[0] == "error"
        return
    schema = BY_API_KEY.get(frame[0])
    if schema is None or (schema.name, frame[1]) not in HOT:
        assert native[0] == "ok"  # other kinds are listed, never decoded here
        return
    try:
        decode_record(value)
        generic_ok = True
    except CorruptRecordError:
        generic_ok = False
    assert (native[0] == "ok") == generic_ok, native
    event(f"hot value {native[0]}")
    if generic_ok:
        check_against_generic(mc.decode_region_with(NATIVE, region), [value])


def test_a_repeated_log_dirs_tag_keeps_the_last_like_the_generic_codec():
    """RegisterBrokerRecord v3 with tag 0 (LogDirs) twice: both implementations hold the second
    list only (the generic codec's last-wins), as a plain row without extras."""
    first, second = uuid.UUID(int=7), uuid.UUID(int=(9 << 64) | 11)
    value = encode_record("RegisterBrokerRecord", 3, {"BrokerId": 1, "BrokerEpoch": 2, "IncarnationId": ZERO,
                                                      "LogDirs": [first]})
    single = b"\x01\x00\x11\x02" + first.bytes  # one tagged field: tag 0, 17 bytes, one uuid
    assert value.endswith(single)
    value = value[:-len(single)] + b"\x02" + b"\x00\x11\x02" + first.bytes + b"\x00\x11\x02" + second.bytes
    assert decode_record(value).data["LogDirs"] == [second]
    cols = both(batch.build_batch_from_values([value]))
    t = cols.broker_registrations
    assert t.log_dir_end.tolist() == [1] and t.log_dirs.tolist() == [_uuid_pair(second)]
    assert not t.extras[0]
    check_against_generic(cols, [value])


def _valid_frame(value: bytes):
    """(apiKey, version) when the frame header decodes (frameVersion 1, both <= 0x7fff), else None."""
    try:
        frame, pos = decode_uvarint(value, 0, 5)
        key, pos = decode_uvarint(value, pos, 5)
        version, _ = decode_uvarint(value, pos, 5)
    except CorruptRecordError:
        return None
    return (key, version) if frame == 1 and key <= 0x7FFF and version <= 0x7FFF else None


def test_bad_crc_truncation_and_codec_are_refused_at_the_batch():
    """A flipped byte fails the CRC at its batch; a cut batch, a corrupt gzip batch and a codec that
    does not exist are refused at their batch."""
    values = [encode_record("TopicRecord", 0, {"Name": "t", "TopicId": uuid.uuid4()})] * 3
    b1 = batch.build_batch_from_values(values, base_offset=0)
    b2 = batch.build_batch_from_values(values, base_offset=3)
    region = bytearray(b1 + b2)
    region[len(b1) + 70] ^= 0xFF
    for impl in (NATIVE, pure):
        with pytest.raises(CorruptRecordError) as info:
            mc.decode_region_with(impl, bytes(region), path="seg.log")
        assert info.value.position == len(b1) and "CRC" in info.value.reason
        assert "seg.log" in str(info.value)
        with pytest.raises(CorruptRecordError) as info:
            mc.decode_region_with(impl, b1 + b2[:-1])
        assert info.value.position == len(b1) and "truncated batch" in info.value.reason
        with pytest.raises(CorruptRecordError) as info:
            mc.decode_region_with(impl, b1 + b2[:30])
        assert info.value.position == len(b1) and "truncated batch header" in info.value.reason
    gzip = bytearray(b2)
    gzip[22] |= 1  # attributes low byte: codec 1
    struct.pack_into(">I", gzip, layout.CRC_OFFSET, reference_crc.crc32c(bytes(gzip[layout.ATTRIBUTES_OFFSET:])))
    with pytest.raises(CorruptRecordError) as info:
        mc.decode_metadata_region(b1 + bytes(gzip))
    assert info.value.position == len(b1) and "gzip" in info.value.reason
    unknown = bytearray(b2)
    unknown[22] |= 5  # codec bits name codec 5, which no Kafka version defines
    struct.pack_into(">I", unknown, layout.CRC_OFFSET,
                     reference_crc.crc32c(bytes(unknown[layout.ATTRIBUTES_OFFSET:])))
    for impl in (NATIVE, pure):
        with pytest.raises(UnsupportedCodecError) as info:
            mc.decode_region_with(impl, b1 + bytes(unknown))
        assert info.value.position == len(b1) and info.value.codec == 5


@pytest.mark.parametrize("first_codec", [layout.CODEC_NONE, layout.CODEC_ZSTD])
@pytest.mark.parametrize("codec", [layout.CODEC_NONE, layout.CODEC_ZSTD])
def test_an_undecodable_record_names_its_offset_and_api_key(first_codec, codec):
    """A PartitionRecord cut short: the error names its offset and apiKey; the position is inside
    the record's value in the input (uncompressed batch, even when another batch is zstd and the
    records were gathered into a new buffer) or at its batch (zstd)."""
    good = encode_record("TopicRecord", 0, {"Name": "t", "TopicId": uuid.uuid4()})
    bad = encode_record("PartitionRecord", 0, {"TopicId": uuid.uuid4(), "Replicas": [1, 2]})[:-6]
    first = batch.build_batch_from_values([good], base_offset=40, codec=first_codec)
    region = first + batch.build_batch_from_values([good, bad], base_offset=41, codec=codec)
    value_at = region.find(bad)
    for impl in (NATIVE, pure):
        with pytest.raises(CorruptRecordError) as info:
            mc.decode_region_with(impl, region)
        assert "offset 42" in info.value.reason and "apiKey 3" in info.value.reason
        if codec == layout.CODEC_NONE:
            assert value_at <= info.value.position < value_at + len(bad)
        else:
            assert info.value.position == len(first) and "zstd" in info.value.reason


def test_an_mmapped_segment_decodes_in_place(tmp_path):
    """A read-only mmap of a segment file decodes without a copy: data is the mmap itself."""
    import mmap

    values = [encode_record("FenceBrokerRecord", 0, {"Id": 3, "Epoch": 9})] * 4
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batch.build_batch_from_values(values[:2]) + batch.build_batch_from_values(values[2:], base_offset=2))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as segment:
        cols = both(segment, path=str(path))
        assert cols.data is segment and cols.fence.broker_id.tolist() == [3] * 4
        check_against_generic(cols, values)
        del cols  # the columns hold the mmap's buffer; release before closing


def test_the_zstd_size_bound_is_enforced(monkeypatch):
    """A zstd section that inflates past MAX_INFLATED_BYTES is refused, not allocated."""
    values = [encode_record("FeatureLevelRecord", 0, {"Name": "x" * 200, "FeatureLevel": 1})] * 20
    region = batch.build_batch_from_values(values, codec=layout.CODEC_ZSTD)
    assert len(mc.decode_metadata_region(region).features) == 20
    monkeypatch.setattr(compression, "MAX_INFLATED_BYTES", 1000)
    with pytest.raises(CorruptRecordError, match="limit"):
        mc.decode_metadata_region(region)


def test_an_empty_region_has_no_rows_and_no_provenance():
    """No batches: every table empty, last_offset/epoch/timestamp -1, lists still one wide."""
    cols = both(b"")
    assert len(cols) == 0 and cols.batch_count == 0 and cols.last_offset == -1 and cols.last_epoch == -1
    assert cols.partitions.replicas.shape == (0, 1) and cols.topics.name_offsets.tolist() == [0]


def test_record_count_must_match_the_records_section():
    """A batch whose recordCount disagrees with its records is corrupt (CRC recomputed)."""
    value = encode_record("NoOpRecord", 0, {})
    good = bytearray(batch.build_batch_from_values([value, value], base_offset=5))
    struct.pack_into(">i", good, layout.RECORD_COUNT_OFFSET, 3)
    struct.pack_into(">I", good, layout.CRC_OFFSET, reference_crc.crc32c(bytes(good[layout.ATTRIBUTES_OFFSET:])))
    for impl in (NATIVE, pure):
        with pytest.raises(CorruptRecordError, match="recordCount is 3"):
            mc.decode_region_with(impl, bytes(good))
