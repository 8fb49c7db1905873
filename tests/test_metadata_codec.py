"""Proves the generic metadata/control record codec: every record type round-trips at every version
with generated values, absent fields take their defaults, lossy downgrades are reported, unknown
tagged fields survive, bad bytes raise typed errors with positions, hand-built byte layouts from
Kafka's format rules decode, and kio (an independent implementation) agrees on the control records.

kio 0.6.5 ships generated types for the KRaft control messages (LeaderChangeMessage v0/v1,
SnapshotHeader/Footer, KRaftVersion, Voters) but none for the metadata records (no
kio.schema.*_record for PartitionRecord etc.), so the independent check covers the control records.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import re
import struct
import typing
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage as LeaderChangeV0
from kio.schema.leader_change_message.v1.data import LeaderChangeMessage as LeaderChangeV1
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.schema.voters_record.v0.data import VotersRecord
from kio.serial import entity_reader, entity_writer

from kraftlog import _accel
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records import wire, wire_pure
from kraftlog.engine.records.metadata import (
    UNKNOWN_TAGS,
    FieldsLostError,
    UnknownRecordTypeError,
    UnsupportedRecordVersionError,
    decode_control,
    decode_record,
    encode_control,
    encode_record,
    fields_lost,
    to_json,
)
from kraftlog.engine.records.schema import (
    CONTROL_TYPES,
    INT_TYPES,
    RECORD_TYPES,
    STRUCT_DEFAULT,
    FieldSchema,
    RecordSchema,
    parse_schema_table,
)
from kraftlog.errors import CorruptRecordError

pytestmark = pytest.mark.twin

ZERO = uuid.UUID(int=0)
ALL_VERSIONS = [(s, v) for s in [*RECORD_TYPES.values(), *CONTROL_TYPES.values()]
                for v in range(s.valid_versions[0], s.valid_versions[1] + 1)]
FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def uvarint(n: int) -> bytes:
    """Unsigned varint written from the format rule (7 bits per byte, low first, high bit = more)."""
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def cstr(s: str | None) -> bytes:
    return b"\x00" if s is None else uvarint(len(s.encode()) + 1) + s.encode()


def carr_i32(xs: list[int] | None) -> bytes:
    return b"\x00" if xs is None else uvarint(len(xs) + 1) + b"".join(struct.pack(">i", x) for x in xs)


# ---- expected values, built from the table's facts -----------------------------------------------

def fresh_default(f: FieldSchema):
    if f.default is STRUCT_DEFAULT:
        return {sub.name: fresh_default(sub) for sub in f.fields}
    if f.default == () and f.is_array:
        return []
    return f.default


def expected(fields: tuple[FieldSchema, ...], data: dict, version: int) -> dict:
    """What decoding must return: the given values where the version has them, defaults elsewhere."""
    out = {}
    for f in fields:
        if f.present_in(version) and f.name in data:
            value = data[f.name]
            if f.fields and value is not None:
                value = ([expected(f.fields, x, version) for x in value] if f.is_array
                         else expected(f.fields, value, version))
            out[f.name] = value
        else:
            out[f.name] = fresh_default(f)
    return out


def scalar_strategy(type_: str):
    if type_ in INT_TYPES:
        return st.integers(*INT_TYPES[type_])
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "string": st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
        | st.text(min_size=120, max_size=140),  # lengths past one varint byte
        "bytes": st.binary(max_size=8),
        "uuid": st.uuids() | st.just(ZERO),
    }[type_]


def struct_strategy(fields: tuple[FieldSchema, ...], version: int):
    present = {f.name: field_strategy(f, version) for f in fields if f.present_in(version)}
    return st.fixed_dictionaries({}, optional=present)


def field_strategy(f: FieldSchema, version: int):
    if f.fields:
        element = struct_strategy(f.fields, version)
    else:
        element = scalar_strategy(f.element_type)
    s = st.lists(element, max_size=4) | st.lists(element, min_size=130, max_size=140) if (
        f.is_array and not f.fields) else st.lists(element, max_size=3) if f.is_array else element
    return st.none() | s if f.nullable_in(version) else s


def record_strategy(schema: RecordSchema, version: int):
    s = struct_strategy(schema.fields, version)
    if schema.kind == "control":  # the body's Version field states the version it was written at
        s = s.map(lambda d: {**d, "Version": version})
    return s


def roundtrip(schema: RecordSchema, version: int, data: dict):
    if schema.kind == "control":
        key, value = encode_control(schema.api_key, version, data)
        return (key, value), decode_control(key, value)
    value = encode_record(schema.name, version, data)
    return value, decode_record(value)


# ---- round trips -----------------------------------------------------------------------------------

def test_the_expected_varint_implementation_is_loaded():
    """The codec's varints come from the native module unless the twins are forced."""
    assert ("pure" if _accel.FORCE_PURE else "native") == wire.IMPLEMENTATION


@pytest.mark.parametrize("schema, version", ALL_VERSIONS, ids=[f"{s.name}-v{v}" for s, v in ALL_VERSIONS])
def test_every_record_type_round_trips_at_every_version(schema, version):
    """encode -> decode gives back the data (defaults filled in), and re-encoding gives the same bytes."""
    @FAST
    @given(record_strategy(schema, version))
    def check(data):
        encoded, record = roundtrip(schema, version, data)
        assert (record.record_type, record.version, record.control) == (schema.name, version, schema.kind == "control")
        assert record.data == expected(schema.fields, data, version)
        again = (encode_control(schema.api_key, version, record.data) if schema.kind == "control"
                 else encode_record(schema.api_key, version, record.data))
        assert again == encoded
        assert fields_lost(schema.name, record.data, version) == []
        json.dumps(to_json(record))  # always JSON-serialisable
    check()


def test_the_table_covers_every_version_of_every_record():
    """The parametrised round trip above really spans every version (34 metadata + 6 control)."""
    assert len(ALL_VERSIONS) == sum(s.valid_versions[1] - s.valid_versions[0] + 1
                                    for s in [*RECORD_TYPES.values(), *CONTROL_TYPES.values()])
    assert ("PartitionRecord", 2) in {(s.name, v) for s, v in ALL_VERSIONS}


def test_absent_fields_take_their_defaults():
    """A field the version lacks, or the data omits, decodes to the schema default."""
    record = decode_record(encode_record("PartitionRecord", 0, {"TopicId": uuid.UUID(int=7)}))
    d = record.data
    assert (d["PartitionId"], d["Leader"], d["LeaderEpoch"], d["PartitionEpoch"]) == (-1, -1, -1, -1)
    assert d["Directories"] == [] and d["EligibleLeaderReplicas"] is None and d["LastKnownElr"] is None
    assert d["LeaderRecoveryState"] == 0 and d["Replicas"] == []
    change = decode_record(encode_record("PartitionChangeRecord", 2, {})).data
    assert change["Leader"] == -2 and change["LeaderRecoveryState"] == -1 and change["Isr"] is None
    broker = decode_record(encode_record("RegisterBrokerRecord", 0, {})).data
    assert broker["Fenced"] is True and broker["InControlledShutdown"] is False and broker["Rack"] == ""
    assert broker["IncarnationId"] == ZERO and broker["LogDirs"] == []


# ---- lossy downgrades ------------------------------------------------------------------------------

def test_fields_lost_names_non_default_fields_the_version_lacks():
    """PartitionRecord v2 -> v1 loses the ELR fields, -> v0 also Directories; defaults are not losses."""
    data = {"PartitionId": 1, "Replicas": [1, 2], "Directories": [uuid.UUID(int=5)] * 2,
            "EligibleLeaderReplicas": [2], "LastKnownElr": None}
    assert fields_lost("PartitionRecord", data, 2) == []
    assert fields_lost("PartitionRecord", data, 1) == ["EligibleLeaderReplicas"]
    assert fields_lost("PartitionRecord", data, 0) == ["Directories", "EligibleLeaderReplicas"]
    assert fields_lost(3, {**data, "Directories": []}, 0) == ["EligibleLeaderReplicas"]
    with pytest.raises(FieldsLostError) as info:
        encode_record("PartitionRecord", 1, data)
    assert info.value.fields == ["EligibleLeaderReplicas"]
    lossy = decode_record(encode_record("PartitionRecord", 1, data, allow_loss=True))
    assert lossy.data["EligibleLeaderReplicas"] is None and lossy.data["Directories"] == data["Directories"]


def test_fields_lost_reaches_into_nested_structs():
    """A LeaderChangeMessage voter's directory id is lost at v0 and named by its path."""
    data = {"Voters": [{"VoterId": 1}, {"VoterId": 2, "VoterDirectoryId": uuid.UUID(int=9)}]}
    assert fields_lost("LeaderChangeMessage", data, 0) == ["Voters[1].VoterDirectoryId"]
    assert codec.MetadataRecord("LeaderChangeMessage", 1, data, 2, True).fields_lost(1) == []
    with pytest.raises(FieldsLostError):
        encode_control(2, 0, data)


@pytest.mark.parametrize("name", ["PartitionRecord", "PartitionChangeRecord", "RegisterBrokerRecord",
                                  "BrokerRegistrationChangeRecord"])
def test_downgrade_loses_exactly_what_fields_lost_reports(name):
    """For generated data at the newest version, every older version keeps the rest and resets the lost."""
    schema = RECORD_TYPES[name]
    newest = schema.valid_versions[1]

    @FAST
    @given(record_strategy(schema, newest))
    def check(data):
        full = expected(schema.fields, data, newest)
        for version in range(schema.valid_versions[0], newest):
            lost = fields_lost(name, full, version)
            absent = [f.name for f in schema.fields if not f.present_in(version)]
            assert lost == [n for n in absent if full[n] != fresh_default(schema.field(n))]
            if not lost:
                encode_record(name, version, full)  # no error when nothing is lost
            back = decode_record(encode_record(name, version, full, allow_loss=True)).data
            assert back == expected(schema.fields, full, version)
    check()


# ---- byte layouts written by hand from the format rules --------------------------------------------

def test_partition_change_record_layout_with_tagged_fields():
    """Frame, fixed fields, then tagged fields in ascending tag order, each tag/size/value."""
    topic = uuid.UUID(int=0x0102030405060708090A0B0C0D0E0F10)
    tagged = [(0, carr_i32([1, 2])), (1, struct.pack(">i", 2)), (5, struct.pack(">b", 1)),
              (6, carr_i32([3]))]
    body = struct.pack(">i", 7) + topic.bytes + uvarint(len(tagged)) + b"".join(
        uvarint(t) + uvarint(len(v)) + v for t, v in tagged)
    raw = uvarint(1) + uvarint(5) + uvarint(2) + body
    data = {"PartitionId": 7, "TopicId": topic, "Isr": [1, 2], "Leader": 2, "LeaderRecoveryState": 1,
            "EligibleLeaderReplicas": [3]}
    assert encode_record("PartitionChangeRecord", 2, data) == raw
    assert decode_record(raw).data == expected(RECORD_TYPES["PartitionChangeRecord"].fields, data, 2)


def test_register_broker_record_layout_with_struct_arrays():
    """Compact arrays of structs, each struct closed by its own (empty) tagged-field count."""
    inc = uuid.UUID(int=42)
    endpoint = cstr("PLAINTEXT") + cstr("h1") + struct.pack(">Hh", 9092, 0) + b"\x00"
    feature = cstr("metadata.version") + struct.pack(">hh", 1, 26) + b"\x00"
    body = (struct.pack(">i", 3) + inc.bytes + struct.pack(">q", 11) + uvarint(2) + endpoint
            + uvarint(2) + feature + cstr(None) + b"\x01" + b"\x00" + b"\x00")
    raw = uvarint(1) + uvarint(0) + uvarint(1) + body
    record = decode_record(raw)
    assert record.record_type == "RegisterBrokerRecord" and record.version == 1
    assert record.data["EndPoints"] == [{"Name": "PLAINTEXT", "Host": "h1", "Port": 9092, "SecurityProtocol": 0}]
    assert record.data["Features"] == [{"Name": "metadata.version", "MinSupportedVersion": 1,
                                        "MaxSupportedVersion": 26}]
    assert record.data["Rack"] is None and record.data["Fenced"] is True
    assert encode_record("RegisterBrokerRecord", 1, record.data) == raw


def test_control_record_key_and_value_layout():
    """Key = version 0 int16 + type int16; value = the body, starting with its Version int16."""
    key, value = encode_control("SnapshotHeaderRecord", 0, {"LastContainedLogTimestamp": 1234})
    assert key == struct.pack(">hh", 0, 3)
    assert value == struct.pack(">hq", 0, 1234) + b"\x00"
    voter_dir = uuid.UUID(int=3)
    key, value = encode_control("LEADER_CHANGE", 1, {"LeaderId": 4, "Voters": [{"VoterId": 4, "VoterDirectoryId": voter_dir}]})
    assert key == struct.pack(">hh", 0, 2)
    assert value == (struct.pack(">hi", 1, 4) + uvarint(2) + struct.pack(">i", 4) + voter_dir.bytes + b"\x00"
                     + uvarint(1) + b"\x00")
    # A key of a higher key version is read as version 0, as Kafka does.
    assert decode_control(struct.pack(">hh", 3, 2), value).data["LeaderId"] == 4


def test_non_flexible_versions_use_fixed_width_lengths():
    """A schema without flexible versions: int16 string length, int32 bytes/array lengths, no tags."""
    text = """
    Legacy 900 v0-1 flex1+
      Name   string   0+  null
      Blob   bytes    0+
      Ids    []int32  0+  null
      Tags   []string 0+
    """.replace("\n    ", "\n")
    schema = parse_schema_table(text)["Legacy"]
    plan_v0 = codec._StructPlan(schema.fields, 0, False, "Legacy")
    out = bytearray()
    plan_v0.write(out, {"Name": None, "Blob": b"xy", "Ids": [5], "Tags": ["a"]})
    assert bytes(out) == (struct.pack(">h", -1) + struct.pack(">i", 2) + b"xy" + struct.pack(">ii", 1, 5)
                          + struct.pack(">ih", 1, 1) + b"a")
    data, end = plan_v0.read(bytes(out), 0, len(out))
    assert end == len(out) and data == {"Name": None, "Blob": b"xy", "Ids": [5], "Tags": ["a"]}
    plan_v1 = codec._StructPlan(schema.fields, 1, True, "Legacy")
    out1 = bytearray()
    plan_v1.write(out1, data)
    assert bytes(out1) == b"\x00" + b"\x03xy" + b"\x02" + struct.pack(">i", 5) + b"\x02\x02a" + b"\x00"


# ---- unknown tagged fields ---------------------------------------------------------------------------

def test_unknown_tagged_fields_are_kept_and_written_back():
    """Tags the version does not know (top level and inside a struct array) survive a round trip."""
    topic = uuid.UUID(int=1)
    raw = (uvarint(1) + uvarint(2) + uvarint(0) + cstr("t") + topic.bytes
           + uvarint(2) + uvarint(3) + uvarint(2) + b"hi" + uvarint(300) + uvarint(1) + b"!")
    record = decode_record(raw)
    assert record.data == {"Name": "t", "TopicId": topic, UNKNOWN_TAGS: {3: b"hi", 300: b"!"}}
    assert encode_record("TopicRecord", 0, record.data) == raw
    # A known tag at a version that lacks it (PartitionChangeRecord v0, tag 8 = Directories from v1)
    # is unknown there, and the record still round-trips.
    v0 = uvarint(1) + uvarint(5) + uvarint(0) + struct.pack(">i", 1) + topic.bytes + uvarint(1) + uvarint(8) + uvarint(1) + b"\x00"
    change = decode_record(v0)
    assert change.data[UNKNOWN_TAGS] == {8: b"\x00"} and change.data["Directories"] is None
    assert encode_record(5, 0, change.data) == v0
    # Inside each element of a struct array.
    endpoint = cstr("E") + cstr("h") + struct.pack(">Hh", 1, 2) + uvarint(1) + uvarint(7) + uvarint(1) + b"z"
    broker = (uvarint(1) + uvarint(27) + uvarint(0) + struct.pack(">i", 1) + topic.bytes + b"\x00"
              + uvarint(2) + endpoint + uvarint(1) + b"\x00")
    reg = decode_record(broker)
    assert reg.data["EndPoints"][0][UNKNOWN_TAGS] == {7: b"z"}
    assert encode_record("RegisterControllerRecord", 0, reg.data) == broker


# ---- bad bytes ---------------------------------------------------------------------------------------

def sample_value() -> bytes:
    return encode_record("RegisterBrokerRecord", 3, {
        "BrokerId": 1, "EndPoints": [{"Name": "A", "Host": "h", "Port": 1}], "Rack": "r",
        "Features": [{"Name": "f", "MaxSupportedVersion": 3}], "LogDirs": [uuid.UUID(int=2)]})


def test_every_truncation_raises_a_typed_error_with_a_position():
    """Cutting a valid value anywhere gives CorruptRecordError whose position lies inside the value."""
    raw = sample_value()
    for cut in range(len(raw)):
        with pytest.raises(CorruptRecordError) as info:
            decode_record(raw[:cut])
        assert info.value.position is not None and 0 <= info.value.position <= cut


def test_frame_type_version_and_garbage_errors():
    """Frame version, unknown apiKey/version and trailing bytes each raise the right typed error."""
    body = encode_record("FenceBrokerRecord", 0, {"Id": 1, "Epoch": 2})[3:]
    with pytest.raises(CorruptRecordError, match="2.8 preview"):
        decode_record(b"\x00\x07\x00" + body)
    with pytest.raises(CorruptRecordError, match="frame version 2"):
        decode_record(b"\x02\x07\x00" + body)
    with pytest.raises(UnknownRecordTypeError) as unknown:
        decode_record(b"\x01\x06\x00" + body)
    assert unknown.value.api_key == 6 and unknown.value.position == 1
    with pytest.raises(UnsupportedRecordVersionError) as unsupported:
        decode_record(b"\x01\x03\x03" + body)
    assert (unsupported.value.api_key, unsupported.value.version) == (3, 3)
    assert isinstance(unsupported.value, UnknownRecordTypeError)
    with pytest.raises(CorruptRecordError, match="2 byte.s. of garbage after FenceBrokerRecord") as garbage:
        decode_record(b"\x01\x07\x00" + body + b"ab")
    assert garbage.value.position == 3 + len(body)


def test_malformed_field_values_are_refused():
    """Null in a non-nullable string, bad UTF-8, a tagged size that lies, an oversized count."""
    head = uvarint(1) + uvarint(2) + uvarint(0)
    topic = uuid.UUID(int=1).bytes
    with pytest.raises(CorruptRecordError, match="TopicRecord.Name: null"):
        decode_record(head + b"\x00" + topic + b"\x00")
    with pytest.raises(CorruptRecordError, match="UTF-8") as bad_utf8:
        decode_record(head + b"\x02\xff" + topic + b"\x00")
    assert bad_utf8.value.position == 3
    fence_head = uvarint(1) + uvarint(17) + uvarint(0) + struct.pack(">iq", 1, 1)
    with pytest.raises(CorruptRecordError, match="declares 2 bytes"):
        decode_record(fence_head + uvarint(1) + uvarint(0) + uvarint(2) + b"\x01\x00")
    with pytest.raises(CorruptRecordError, match="cannot fit"):
        decode_record(uvarint(1) + uvarint(3) + uvarint(0) + struct.pack(">i", 1) + topic + uvarint(100000))
    with pytest.raises(UnknownRecordTypeError):
        decode_control(struct.pack(">hh", 0, 0), b"\x00\x00")  # ABORT marker: not a KRaft control record
    with pytest.raises(UnsupportedRecordVersionError):
        decode_control(struct.pack(">hh", 0, 3), struct.pack(">hq", 5, 1) + b"\x00")
    with pytest.raises(CorruptRecordError):
        decode_control(b"\x00\x00\x02", b"")


@FAST
@given(st.binary(max_size=60))
def test_arbitrary_bytes_decode_or_raise_corrupt_record_error(noise):
    """Random bytes (after a valid frame head or not) either decode to a record that re-encodes
    stably, or raise CorruptRecordError at a position inside the buffer; nothing else escapes."""
    for head in (b"\x01\x03\x02", b"\x01\x00\x03", b"\x01\x05\x01", b""):
        raw = head + noise
        try:
            record = decode_record(raw)
        except CorruptRecordError as exc:
            assert exc.position is not None and 0 <= exc.position <= len(raw)
        else:  # what decoded re-encodes to a canonical form that is stable
            canonical = encode_record(record.api_key, record.version, record.data)
            assert encode_record(record.api_key, record.version, decode_record(canonical).data) == canonical


def test_decode_honours_pos_end_and_any_buffer():
    """A value in the middle of a larger bytearray / memoryview decodes with pos and end."""
    raw = sample_value()
    big = bytearray(b"junk" + raw + b"tail")
    for buf in (big, memoryview(big), bytes(big)):
        assert decode_record(buf, 4, 4 + len(raw)) == decode_record(raw)
    with pytest.raises(CorruptRecordError):
        decode_record(big, 4, 4 + len(raw) + 1)  # one byte of "tail" is garbage


def test_programmer_errors_fail_loudly():
    """Unknown names, versions, fields and out-of-range values raise ValueError at encode."""
    with pytest.raises(ValueError, match="no metadata or control record"):
        encode_record("NopeRecord", 0, {})
    with pytest.raises(ValueError, match="no version 3"):
        encode_record("PartitionRecord", 3, {})
    with pytest.raises(ValueError, match=r"no such field\(s\) \['Leeder'\]"):
        encode_record("PartitionRecord", 0, {"Leeder": 1})
    with pytest.raises(ValueError, match="PartitionRecord.Leader"):
        encode_record("PartitionRecord", 0, {"Leader": 1 << 40})
    with pytest.raises(ValueError, match="non-nullable"):
        encode_record("TopicRecord", 0, {"Name": None})
    with pytest.raises(ValueError, match="Version field"):
        encode_control(3, 0, {"Version": 1})


# ---- JSON view ---------------------------------------------------------------------------------------

def test_to_json_matches_the_dump_log_shape():
    """UPPER_SNAKE type, camelCase fields, base64url UUIDs, default tagged fields left out."""
    topic = uuid.UUID("c667a1c1-0a34-4801-969e-c12c92dd2bc3")
    record = decode_record(encode_record("PartitionRecord", 1, {"PartitionId": 0, "TopicId": topic,
                                                                "Replicas": [1], "Isr": [1], "Leader": 1}))
    out = to_json(record)
    assert out["type"] == "PARTITION_RECORD" and out["version"] == 1
    assert out["data"]["topicId"] == base64.urlsafe_b64encode(topic.bytes).decode().rstrip("=")
    assert "leaderRecoveryState" not in out["data"]  # tagged and default
    assert out["data"]["directories"] == [] and "eligibleLeaderReplicas" not in out["data"]
    assert list(out["data"])[:3] == ["partitionId", "topicId", "replicas"]
    zero = to_json(decode_record(encode_record("RemoveTopicRecord", 0, {})))
    assert zero == {"type": "REMOVE_TOPIC_RECORD", "version": 0, "data": {"topicId": "AAAAAAAAAAAAAAAAAAAAAA"}}
    scram = to_json(decode_record(encode_record("UserScramCredentialRecord", 0, {"Salt": b"\xff\x00"})))
    assert scram["data"]["salt"] == "/wA="
    assert to_json(decode_record(encode_record(21, 0, {})))["type"] == "ZK_MIGRATION_STATE_RECORD"
    k, v = encode_control(6, 0, {"Voters": [{"VoterId": 1, "KRaftVersionFeature": {"MaxSupportedVersion": 1}}]})
    voters = to_json(decode_control(k, v))
    assert voters["type"] == "KRAFT_VOTERS"
    assert voters["data"]["voters"][0]["kRaftVersionFeature"] == {"minSupportedVersion": 0, "maxSupportedVersion": 1}


# ---- native and pure varints give the same codec results -------------------------------------------

@FAST
@given(record_strategy(RECORD_TYPES["RegisterBrokerRecord"], 3), st.binary(max_size=40))
def test_native_and_pure_varints_agree_through_the_codec(data, noise):
    """The codec over the pure-Python varints encodes and decodes exactly as over the active ones."""
    def run(decode_uvarint, encode_uvarint):
        saved = codec.decode_uvarint, codec.encode_uvarint
        codec.decode_uvarint, codec.encode_uvarint = decode_uvarint, encode_uvarint
        try:
            raw = encode_record("RegisterBrokerRecord", 3, data)
            try:
                junk = decode_record(b"\x01\x00\x03" + noise).data
            except CorruptRecordError as exc:
                junk = ("error", exc.reason, exc.position)
            return raw, decode_record(raw).data, junk
        finally:
            codec.decode_uvarint, codec.encode_uvarint = saved

    assert run(wire_pure.decode_uvarint, wire_pure.encode_uvarint) == run(wire.decode_uvarint, wire.encode_uvarint)


# ---- kio, an independent implementation of the control messages ------------------------------------

KIO = {(2, 0): LeaderChangeV0, (2, 1): LeaderChangeV1, (3, 0): SnapshotHeaderRecord,
       (4, 0): SnapshotFooterRecord, (5, 0): KRaftVersionRecord, (6, 0): VotersRecord}


def snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()  # KRaftVersionFeature -> k_raft_version_feature


def to_kio(cls, fields: tuple[FieldSchema, ...], data: dict):
    hints = typing.get_type_hints(cls)
    by_snake = {snake(f.name): f for f in fields}
    kwargs = {}
    for kf in dataclasses.fields(cls):
        f = by_snake[kf.name]
        value = data[f.name]
        if f.fields:
            hint = hints[kf.name]
            inner = typing.get_args(hint)[0] if f.is_array else hint
            value = (tuple(to_kio(inner, f.fields, x) for x in value) if f.is_array
                     else to_kio(inner, f.fields, value))
        elif f.is_array:
            value = tuple(value)
        kwargs[kf.name] = value
    return cls(**kwargs)


def from_kio(entity, fields: tuple[FieldSchema, ...], version: int) -> dict:
    by_snake = {snake(f.name): f for f in fields}
    out = {f.name: fresh_default(f) for f in fields}
    for kf in dataclasses.fields(entity):
        f = by_snake[kf.name]
        value = getattr(entity, kf.name)
        if f.type == "uuid" and value is None:
            value = ZERO  # kio reads the all-zero uuid as None
        elif f.fields:
            value = ([from_kio(x, f.fields, version) for x in value] if f.is_array
                     else from_kio(value, f.fields, version))
        elif f.is_array:
            value = list(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            value = int(value)
        out[f.name] = value
    return out


@pytest.mark.parametrize("control_type, version", sorted(KIO), ids=[f"{t}-v{v}" for t, v in sorted(KIO)])
def test_control_records_agree_with_kio(control_type, version):
    """Our bytes decode with kio to the same message, and kio's bytes decode with ours (both ways)."""
    schema, cls = CONTROL_TYPES[control_type], KIO[(control_type, version)]
    read, write = entity_reader(cls), entity_writer(cls)

    @FAST
    @given(record_strategy(schema, version))
    def check(data):
        full = expected(schema.fields, data, version)
        _, ours = encode_control(control_type, version, data)
        theirs, size = read(memoryview(ours), 0)
        assert size == len(ours)
        assert from_kio(theirs, schema.fields, version) == full
        buf = io.BytesIO()
        write(buf, to_kio(cls, schema.fields, full))
        assert buf.getvalue() == ours
        assert decode_control(struct.pack(">hh", 0, control_type), buf.getvalue()).data == full
    check()
