"""Proves the Arrow row builder under the Spark data source without Spark: every record of a log
region becomes one row whose typed columns equal what the generic codec decodes (including
records the column decoders mark as extras: directories, ELR, lists wider than LIST_MAX_WIDTH,
records of other types, unknown api keys; side-stream records printed from their column rows),
filters keep exactly the selected rows, splits cut large segments at batch starts only, and a
torn tail of the last segment is not a row nor an error. Runs on the native decoders and again on
the pure twins."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.engine.pipeline import inputs, reader, sample
from kraftlog.engine.pipeline import rows as rw
from kraftlog.engine.records import batch, metadata_columns
from kraftlog.engine.records import metadata as codec
from kraftlog.engine.records.schema import uuid_to_kafka

pytestmark = pytest.mark.twin

WIDE = metadata_columns.LIST_MAX_WIDTH + 3


def odd_cases() -> list[tuple[bytes, bool]]:
    """(record, whether its row must carry json: another record type, or extras the columns lack)."""
    t = uuid.UUID(int=0x1234)
    wide = list(range(WIDE))
    part = {"Replicas": [0, 1, 2], "Isr": [0, 1], "Leader": 0, "LeaderEpoch": 4, "PartitionEpoch": 7}
    return [
        (codec.encode_record("TopicRecord", 0, {"Name": "odd", "TopicId": t}), False),
        (codec.encode_record("PartitionRecord", 2, {"PartitionId": 0, "TopicId": t, **part,
                                                    "Directories": [uuid.UUID(int=5)] * 3,
                                                    "EligibleLeaderReplicas": [2]}), True),
        (codec.encode_record("PartitionRecord", 0, {"PartitionId": 1, "TopicId": t, **part, "Replicas": wide,
                                                    "Isr": wide}), True),
        (codec.encode_record("PartitionChangeRecord", 0, {"PartitionId": 1, "TopicId": t, "Isr": wide[:-1]}), True),
        (codec.encode_record("PartitionChangeRecord", 0, {"PartitionId": 0, "TopicId": t, "Leader": -1,
                                                          "LeaderRecoveryState": 1}), False),
        # directories: one per replica rides in the columns; all MIGRATING is "none"; a change's go generic
        (codec.encode_record("PartitionRecord", 1, {"PartitionId": 2, "TopicId": t, **part, "RemovingReplicas": [],
                                                    "AddingReplicas": [], "Directories": [uuid.UUID(int=9),
                                                                                          uuid.UUID(int=1),
                                                                                          uuid.UUID(int=(3 << 64) | 4)]}),
         False),
        (codec.encode_record("PartitionRecord", 1, {"PartitionId": 3, "TopicId": t, **part, "RemovingReplicas": [],
                                                    "AddingReplicas": [], "Directories": [uuid.UUID(int=0)] * 3}), False),
        (codec.encode_record("PartitionChangeRecord", 1, {"PartitionId": 2, "TopicId": t,
                                                          "Directories": [uuid.UUID(int=0)] * 3}), True),
        (codec.encode_record("PartitionChangeRecord", 1, {"PartitionId": 3, "TopicId": t,
                                                          "Directories": [uuid.UUID(int=7)] * 3}), True),
        (codec.encode_record("NoOpRecord", 0, {}), True),
        (codec.encode_record("UnregisterBrokerRecord", 0, {"BrokerId": 7, "BrokerEpoch": 70}), True),
        # a table of its own for the loader, but the rows have no columns for it: the codec's json
        (codec.encode_record("ProducerIdsRecord", 0, {"BrokerId": 1, "BrokerEpoch": 5, "NextProducerId": 9}), True),
        (codec.encode_record("AccessControlEntryRecord", 0, {
            "Id": uuid.UUID(int=3), "ResourceType": 2, "ResourceName": "t", "PatternType": 3, "Principal": "User:a",
            "Host": "*", "Operation": 4, "PermissionType": 3}), True),
        (codec.encode_record("RemoveAccessControlEntryRecord", 0, {"Id": uuid.UUID(int=3)}), True),
        (codec.encode_record("ClientQuotaRecord", 0, {
            "Entity": [{"EntityType": "user", "EntityName": None}], "Key": "producer_byte_rate", "Value": 1.5,
            "Remove": False}), True),
        (codec.encode_record("UserScramCredentialRecord", 0, {
            "Name": "alice", "Mechanism": 1, "Salt": b"s", "StoredKey": b"k", "ServerKey": b"v", "Iterations": 4096}), True),
        (codec.encode_record("RemoveUserScramCredentialRecord", 0, {"Name": "alice", "Mechanism": 1}), True),
        (codec.encode_record("DelegationTokenRecord", 0, {
            "Owner": "User:a", "Requester": "User:a", "Renewers": ["User:b"], "IssueTimestamp": 1, "MaxTimestamp": 3,
            "ExpirationTimestamp": 2, "TokenId": "t1"}), True),
        (codec.encode_record("RemoveDelegationTokenRecord", 0, {"TokenId": "t1"}), True),
        (codec.encode_record("BrokerRegistrationChangeRecord", 1, {"BrokerId": 1, "BrokerEpoch": 101,
                                                                   "Fenced": -1}), False),
        (codec.encode_record("ConfigRecord", 0, {"ResourceType": 4, "ResourceName": "", "Name": "x",
                                                 "Value": None}), False),
        (bytes([1, 99, 0, 0]), True),  # an unknown api key: a row with its raw bytes in json, not an error
    ]


@pytest.fixture(scope="module")
def values():
    return sample.workload_values(500, 400, replicas_per_broker=100) + [v for v, _ in odd_cases()]


def region(values: list[bytes], per_batch: int = 40) -> bytes:
    return b"".join(batch.build_batch_from_values(values[i:i + per_batch], base_offset=i, partition_leader_epoch=9,
                                                  timestamp_ms=1_000 + i) for i in range(0, len(values), per_batch))


def decode_rows(buf: bytes, row_filter=None) -> list[dict]:
    cols = metadata_columns.decode_metadata_region(buf)
    headers = metadata_columns.walk_batches(memoryview(buf), 0, len(buf), False, None)
    return rw.to_record_batch(cols, headers, "c", row_filter=row_filter).to_pylist()


def test_every_row_equals_the_generic_codec(values):
    """Typed columns, record type/version, batch epoch and timestamp match the generic decoding."""
    got = decode_rows(region(values))
    assert [r["offset"] for r in got] == list(range(len(values)))
    for r, value in zip(got, values, strict=True):
        assert r["cluster"] == "c" and r["batch_epoch"] == 9
        assert r["timestamp"].timestamp() * 1000 == 1_000 + r["offset"] // 40 * 40
        try:
            record = codec.decode_record(value)
        except codec.UnknownRecordTypeError:
            assert json.loads(r["json"])["apiKey"] == 99 and r["record_type"] == "apiKey99"
            assert all(r[name] is None for name in rw.ROW_NAMES[6:-1])
            continue
        assert (r["record_type"], r["record_version"]) == (record.record_type, record.version)
        want = rw._typed_values(record.record_type, record.data)
        for name in rw.ROW_NAMES[6:-1]:
            assert r[name] == want.get(name), (r["offset"], name)
        if "TopicId" in record.data:
            assert r["topic_id"] == uuid_to_kafka(record.data["TopicId"])
        if r["json"] is not None:
            assert json.loads(r["json"]) == json.loads(json.dumps(codec.to_json(record)))


def test_only_extras_and_other_records_carry_json(values):
    """Records the columns hold completely have no json; other types and extras rows have it."""
    got = decode_rows(region(values))
    first_odd = len(values) - len(odd_cases())
    with_json = {r["offset"] for r in got if r["json"] is not None}
    want = {first_odd + i for i, (_, needs) in enumerate(odd_cases()) if needs}
    want |= {r["offset"] for r in got[:first_odd] if r["record_type"] == "RegisterBrokerRecord"}  # endpoints
    assert with_json == want


def test_row_filter_keeps_exactly_the_selected_records(values):
    """api keys and [low, high) select the same rows as filtering the full decoding."""
    buf = region(values)
    full = decode_rows(buf)
    keys = frozenset({rw.API_KEYS["PartitionChangeRecord"], rw.API_KEYS["NoOpRecord"], rw.API_KEYS["TopicRecord"]})
    picked = decode_rows(buf, rw.RowFilter(keys, 100, len(values) - 2))
    want = [r for r in full if rw.API_KEYS.get(r["record_type"]) in keys and 100 <= r["offset"] < len(values) - 2]
    assert picked == want and len(want) > 10


def test_uuid_strings_match_kafka_form():
    """The numpy base64url encoder equals Kafka's Uuid.toString for random ids."""
    rng = np.random.default_rng(3)
    halves = rng.integers(0, 2**64 - 1, size=(200, 2), dtype=np.uint64)
    got = rw.uuid_strings(halves).to_pylist()
    want = [uuid_to_kafka(uuid.UUID(int=(int(h) << 64) | int(lo))) for h, lo in halves.tolist()]
    assert got == want


@pytest.mark.parametrize("tail", ["torn", "preallocated"])
def test_splits_cut_at_batch_starts_and_a_torn_tail_is_not_a_row(values, tmp_path, tail):
    """Large segments are cut at batch starts (reading every split gives every record once); bytes of
    a half-written batch at the end of the last segment, or the zeros a live log preallocated
    there, are neither rows nor an error."""
    directory = sample.write_log_dir(tmp_path / "c", values, segment_bytes=60_000, per_batch=40)
    segments = inputs.segment_files(directory)
    with open(segments[-1][1], "ab") as f:  # a writer mid-append, or its reserved space
        f.write(batch.build_batch_from_values(values[:5], base_offset=len(values))[:70] if tail == "torn"
                else bytes(9000))
    splits = inputs.plan([directory], split_bytes=15_000)
    assert len(splits) > len(segments)
    for s in splits:
        if s.start:
            assert s.start in batch.scan_batches(Path(s.path).read_bytes(), 0, verify_crc=False).positions
    offsets = [o for s in splits for b in reader.read_split(s) for o in b.column("offset").to_pylist()]
    assert offsets == list(range(len(values)))
    table = pa.Table.from_batches([b for s in splits for b in reader.read_split(s)])
    assert table.schema == rw.ARROW_SCHEMA


def test_a_checkpoint_file_is_read_without_its_control_records(values, tmp_path):
    """A Kafka snapshot file (batches framed by SnapshotHeader/Footer control records) is one split
    whose rows are exactly its metadata records."""
    _, header = codec.encode_control("SnapshotHeaderRecord", 0, {"Version": 0, "LastContainedLogTimestamp": 5})
    _, footer = codec.encode_control("SnapshotFooterRecord", 0, {"Version": 0})
    body = values[:300]
    data = (batch.build_control_batch(3, header, base_offset=0)
            + b"".join(batch.build_batch_from_values(body[i:i + 100], base_offset=1 + i) for i in range(0, 300, 100))
            + batch.build_control_batch(4, footer, base_offset=301))
    path = tmp_path / "c9" / f"{302:020d}-{7:010d}.checkpoint"
    path.parent.mkdir()
    path.write_bytes(data)
    splits = inputs.plan([str(path)])
    assert [(s.kind, s.cluster) for s in splits] == [("snapshot", "c9")]
    got = [r for b in reader.read_split(splits[0]) for r in b.to_pylist()]
    assert [r["offset"] for r in got] == list(range(1, 301))
    assert [r["record_type"] for r in got] == [codec.decode_record(v).record_type for v in body]


_KINDS = {"partition": st.integers(-(1 << 31), (1 << 31) - 1), "broker_epoch": st.integers(-(1 << 63), (1 << 63) - 1),
          "leader_recovery_state": st.integers(-128, 127), "fenced": st.booleans(), "topic_name": st.text(max_size=6),
          "replicas": st.lists(st.integers(-5, 1 << 20), max_size=4)}


@st.composite
def column_parts(draw):
    """(n, column name, parts): disjoint row sets with values (None = null), some shuffled, some
    given as slices of larger arrays (non-zero Arrow offsets), some topic ids as uint64 halves."""
    n = draw(st.integers(1, 60))
    name = draw(st.sampled_from([*_KINDS, "topic_id"]))
    owner = draw(st.lists(st.integers(-1, 3), min_size=n, max_size=n))  # which part holds each row (-1: none)
    parts = []
    for k in range(4):
        rows = [i for i, o in enumerate(owner) if o == k]
        if not rows:
            continue
        if draw(st.booleans()):
            rows = draw(st.permutations(rows))
        if name == "topic_id" and k % 2 == 0:
            ids = draw(st.lists(st.integers(0, 3), min_size=len(rows), max_size=len(rows)))  # repeats: runs
            parts.append(("uuids", rows, np.array([[7 * i, (1 << 64) - 1 - i] for i in ids], dtype=np.uint64)))
            continue
        values_of = st.text(max_size=6) if name == "topic_id" else _KINDS[name]
        values = draw(st.lists(st.none() | values_of, min_size=len(rows), max_size=len(rows)))
        pad = draw(st.integers(0, 3))
        array = pa.array([None] * pad + values, rw._TYPES[name]).slice(pad)
        parts.append(("arrow", rows, array))
    return n, name, parts


@settings(max_examples=300, deadline=None)
@given(column_parts())
def test_column_assembly_puts_every_value_in_its_row(case):
    """The numpy assembly of a column from parts (scatter, reused buffers, topic ids encoded once)
    gives each row exactly the value its part holds for it, null elsewhere, as valid Arrow."""
    n, name, parts = case
    c = rw._Columns(n)
    want: list = [None] * n
    for how, rows, values in parts:
        if how == "uuids":
            c.put_uuids(name, np.array(rows), values)
            for r, (hi, lo) in zip(rows, values.tolist(), strict=True):
                want[r] = uuid_to_kafka(uuid.UUID(int=(int(hi) << 64) | int(lo)))
        else:
            c.put(name, np.array(rows), values)
            for r, v in zip(rows, values.to_pylist(), strict=True):
                want[r] = v
    got = c.finish(name)
    got.validate(full=True)
    assert got.type == rw._TYPES[name]
    assert got.to_pylist() == want


_text = st.text(max_size=6)
_i16 = st.integers(-(1 << 15), (1 << 15) - 1)
_ids = st.one_of(st.just(uuid.UUID(int=0)), st.uuids())
_tags = st.one_of(st.just({}), st.just({}), st.just({}), st.dictionaries(st.integers(10, 20), st.binary(max_size=3),
                                                                         min_size=1, max_size=1))


def _tagged(data: dict, tags: dict) -> dict:
    return {**data, codec.UNKNOWN_TAGS: tags} if tags else data


@st.composite
def side_records(draw) -> bytes:
    """A record of a side-stream table at any version its table holds, its optional fields drawn,
    sometimes with unknown tags (extras: the generic path)."""
    kind = draw(st.sampled_from(["register", "producer_ids", "acl", "quota", "scram", "token"]))
    tags = draw(_tags)
    if kind == "register":
        version = draw(st.integers(0, 3))
        endpoint = st.fixed_dictionaries({"Name": _text, "Host": _text, "Port": st.integers(0, 65535),
                                          "SecurityProtocol": _i16})
        feature = st.fixed_dictionaries({"Name": _text, "MinSupportedVersion": _i16, "MaxSupportedVersion": _i16})
        data = {"BrokerId": draw(st.integers(0, 9)), "IncarnationId": draw(_ids), "BrokerEpoch": draw(st.integers(-1, 1 << 40)),
                "EndPoints": draw(st.lists(endpoint, max_size=3)), "Features": draw(st.lists(feature, max_size=2)),
                "Rack": draw(st.none() | _text), "Fenced": draw(st.booleans()),
                "InControlledShutdown": draw(st.booleans()), "IsMigratingZkBroker": draw(st.booleans()),
                "LogDirs": draw(st.lists(_ids, max_size=2))}
        return codec.encode_record("RegisterBrokerRecord", version, _tagged(data, tags), allow_loss=True)
    if kind == "producer_ids":
        return codec.encode_record("ProducerIdsRecord", 0, _tagged({"BrokerId": draw(st.integers(0, 9)), "BrokerEpoch": 3,
                                                                     "NextProducerId": draw(st.integers(0, 1 << 50))}, tags))
    if kind == "acl":
        if draw(st.booleans()):
            return codec.encode_record("RemoveAccessControlEntryRecord", 0, _tagged({"Id": draw(_ids)}, tags))
        return codec.encode_record("AccessControlEntryRecord", 0, _tagged({
            "Id": draw(_ids), "ResourceType": 2, "ResourceName": draw(_text), "PatternType": 3, "Principal": draw(_text),
            "Host": "*", "Operation": draw(st.integers(-128, 127)), "PermissionType": 3}, tags))
    if kind == "quota":
        entity = st.fixed_dictionaries({"EntityType": _text, "EntityName": st.none() | _text})
        return codec.encode_record("ClientQuotaRecord", 0, _tagged({
            "Entity": draw(st.lists(entity, max_size=2)), "Key": draw(_text),
            "Value": draw(st.floats(allow_nan=False)), "Remove": draw(st.booleans())}, tags))
    if kind == "scram":
        if draw(st.booleans()):
            return codec.encode_record("RemoveUserScramCredentialRecord", 0, _tagged({"Name": draw(_text), "Mechanism": 2},
                                                                                     tags))
        return codec.encode_record("UserScramCredentialRecord", 0, _tagged({
            "Name": draw(_text), "Mechanism": 1, "Salt": draw(st.binary(max_size=4)), "StoredKey": draw(st.binary(max_size=4)),
            "ServerKey": b"v", "Iterations": draw(st.integers(0, 1 << 20))}, tags))
    if draw(st.booleans()):
        return codec.encode_record("RemoveDelegationTokenRecord", 0, _tagged({"TokenId": draw(_text)}, tags))
    return codec.encode_record("DelegationTokenRecord", 0, _tagged({
        "Owner": draw(_text), "Requester": "User:a", "Renewers": draw(st.lists(_text, max_size=2)), "IssueTimestamp": 1,
        "MaxTimestamp": draw(st.integers(0, 1 << 40)), "ExpirationTimestamp": 2, "TokenId": draw(_text)}, tags))


@settings(max_examples=100, deadline=None)
@given(st.lists(side_records(), min_size=1, max_size=12), st.data())
def test_side_stream_rows_built_from_the_columns_equal_the_codec_built_ones(side, data):
    """Registrations, producer ids, ACLs, quotas, SCRAM credentials and tokens (and their removals)
    between hot records: each row's json and typed columns, built from its column row's fields,
    equal what the generic codec's decoding gives (rows with unknown tags are that decoding), also
    under a row filter."""
    hot = sample.workload_values(20, 10, replicas_per_broker=10)[:10]
    values = list(hot)
    for value in side:
        values.insert(data.draw(st.integers(0, len(values))), value)
    buf = region(values, per_batch=5)
    got = decode_rows(buf)
    assert [r["offset"] for r in got] == list(range(len(values)))
    for r, value in zip(got, values, strict=True):
        record = codec.decode_record(value)
        if value in side:
            assert r["json"] == json.dumps(codec.to_json(record), separators=(",", ":"))
        want = rw._typed_values(record.record_type, record.data)
        assert {name: r[name] for name in rw.ROW_NAMES[6:-1]} == {name: want.get(name) for name in rw.ROW_NAMES[6:-1]}
    low = data.draw(st.integers(0, len(values)))
    picked = decode_rows(buf, rw.RowFilter(None, low, None))
    assert picked == got[low:]
