"""Proves the leader's Produce pass-through: a client's one record batch in build_batch_from_values'
shape (batch.pass_through_count's rule) is appended as the client wrote it, with only base offset
and partitionLeaderEpoch stamped, and the log then holds the same bytes the unpack path writes for
the same values and timestamp; every other batch (compressed, keyed, with headers, producer state,
a control or transactional batch, inconsistent counts, offset deltas or max timestamp, trailing
bytes, damage) is unpacked and rebuilt or refused, never appended as sent; native and pure twins
agree on every input; kafka-python's and aiokafka's batch builders (what their producers send)
pass; in a real three-node cluster a passed-through batch is its own batch between lingering
proposals, and a Produce over TCP stores the client's bytes.
"""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.engine.node.raftlog import EngineRaftLog, FileSnapshotStore
from kraftlog.engine.node.raftnode import RaftClient, _produce_result
from kraftlog.engine.protocol.connection import ClientConnection
from kraftlog.engine.records import batch as batch_codec
from kraftlog.engine.records import batch_pure
from kraftlog.engine.records.layout import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER, LEADER_EPOCH_OFFSET
from kraftlog.raft import hot_codec, wire
from kraftlog.raft.aio.driver import DriverConfig
from kraftlog.raft.types import ClientBatch
from tests.test_raft_driver import _leader, _started_nodes

VALUES = st.lists(st.binary(max_size=200), min_size=1, max_size=6)
TS_MS = 1_700_000_000_000


def _recrc(raw: bytearray) -> bytes:
    """``raw`` with its CRC recomputed: a batch whose header lies but whose CRC is right."""
    import crc32c
    struct.pack_into(">I", raw, CRC_OFFSET, crc32c.crc32c(bytes(raw[ATTRIBUTES_OFFSET:])))
    return bytes(raw)


def _patched(raw: bytes, field: int, value) -> bytes:
    """``raw`` with header field number ``field`` (layout.HEADER's order) set, CRC recomputed."""
    fields = list(HEADER.unpack_from(raw, 0))
    fields[field] = value
    out = bytearray(raw)
    HEADER.pack_into(out, 0, *fields)
    return _recrc(out)


def _both(raw) -> int:
    """pass_through_count of the chosen module and of the pure twin, which must agree."""
    chosen = batch_codec.pass_through_count(raw)  # native unless KRAFTLOG_NO_EXTENSIONS=1
    assert chosen == batch_pure.pass_through_count(raw)
    return chosen


@pytest.mark.twin
@settings(max_examples=300, deadline=None)
@given(VALUES, st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=3), st.integers(0, 1 << 16),
       st.booleans())
def test_twins_agree_and_only_an_intact_batch_passes(values, edits, cut, truncate):
    raw = batch_codec.build_batch_from_values(values, timestamp_ms=TS_MS)
    assert _both(raw) == len(values)
    damaged = bytearray(raw)
    for pos, byte in edits:
        damaged[pos % len(damaged)] = byte
    if truncate:
        damaged = damaged[:cut % len(damaged)]
    count = _both(bytes(damaged))
    if count:  # damage outside the CRC (base offset, leader epoch) only: the values are intact
        assert bytes(damaged[LEADER_EPOCH_OFFSET + 4:]) == raw[LEADER_EPOCH_OFFSET + 4:]
        assert [r.value for r in batch_codec.iter_records(bytes(damaged))] == values


@pytest.mark.twin
def test_batches_outside_the_rule_are_unpacked_or_refused():
    values = [b"a", b"bc", b""]
    raw = batch_codec.build_batch_from_values(values, timestamp_ms=TS_MS)
    ATTRS, LAST_DELTA, MAX_TS, PID, PEPOCH, BSEQ, COUNT = 5, 6, 8, 9, 10, 11, 12
    unpacked = {  # each decodes (the unpack path takes it) but is not appended as sent
        "zstd": batch_codec.build_batch_from_values(values, timestamp_ms=TS_MS, codec=batch_codec.CODEC_ZSTD),
        "keyed": batch_codec.build_batch([batch_codec.Record(b"k", b"a", (), TS_MS)]),
        "headers": batch_codec.build_batch([batch_codec.Record(None, b"a", (("h", b"x"),), TS_MS)]),
        "producer id": _patched(raw, PID, 7),
        "producer epoch": _patched(raw, PEPOCH, 0),
        "base sequence": _patched(raw, BSEQ, 0),
        "log-append time": _patched(raw, ATTRS, 8),
        "transactional": _patched(raw, ATTRS, batch_codec.TRANSACTIONAL_BIT),
        "max timestamp": _patched(raw, MAX_TS, TS_MS + 1),
        "two batches": raw + batch_codec.build_batch_from_values(values, base_offset=3, timestamp_ms=TS_MS),
    }
    for what, batch in unpacked.items():
        assert _both(batch) == 0, what
        assert type(wire.client_records(batch)) is list, what
    assert wire.client_records(unpacked["zstd"]) == values  # rebuilt uncompressed by the leader
    refused = {  # the unpack path refuses these too: a clear error answer, nothing appended
        "bad crc": raw[:-1] + bytes([raw[-1] ^ 1]),
        "record count": _patched(raw, COUNT, 4),
        "last offset delta": _patched(raw, LAST_DELTA, 1),
        "trailing byte": raw + b"\x00",
        "cut": raw[:-1],
    }
    for what, batch in refused.items():
        assert _both(batch) == 0, what
        with pytest.raises(wire.WireFormatError):
            wire.client_records(batch)
    # a control batch is not a proposal: never passed through (the unpack path reads its value)
    control = batch_codec.build_control_batch(batch_codec.CONTROL_LEADER_CHANGE, b"\x00" * 8)
    assert _both(control) == 0 and type(wire.client_records(control)) is list
    # the offset deltas are checked record by record: 0, 0 instead of 0, 1 (each within
    # lastOffsetDelta, so only the order check catches it); the unpack path rebuilds the values
    two = bytearray(batch_codec.build_batch_from_values([b"x", b"y"], timestamp_ms=TS_MS))
    second = two.rindex(b"\x02\x01\x02y")  # offsetDelta 1 (zigzag 2), null key, value length 1, y
    two[second] = 0
    assert _both(_recrc(two)) == 0
    assert wire.client_records(_recrc(two)) == [b"x", b"y"]


@pytest.mark.twin
def test_kafka_python_and_aiokafka_batches_pass_through():
    """The batch builders kafka-python's and aiokafka's producers fill (no key, no headers, no
    compression, not idempotent) make batches the leader appends as sent."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
    from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaBuilder
    values = [b"v1", b"v" * 300, b""]
    for builder in (KafkaBuilder(2, 0, False, -1, -1, -1, 1 << 20), AioBuilder(2, 0, False, -1, -1, -1, 1 << 20)):
        for i, value in enumerate(values):
            builder.append(i, timestamp=TS_MS + i, key=None, value=value, headers=[])
        raw = bytes(builder.build())
        assert _both(raw) == 3, type(builder)
        records = wire.client_records(memoryview(raw))
        assert type(records) is ClientBatch and records.raw == raw and list(records) == values


def _stored(log: EngineRaftLog) -> bytes:
    return b"".join(bytes(b.raw) for b in log.read(0, 1 << 20))


@settings(max_examples=60, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=4))
def test_pass_through_and_unpack_store_the_same_bytes(tmp_path_factory, proposals):
    """Each proposal appended once as values (rebuilt, stamped with the leader's clock) and once
    as the client's batch carrying that same timestamp: the two logs are byte-identical."""
    unpack_dir, pass_dir = tmp_path_factory.mktemp("unpack"), tmp_path_factory.mktemp("pass")
    unpack = EngineRaftLog(unpack_dir / "log", FileSnapshotStore(unpack_dir / "snap"))
    passed = EngineRaftLog(pass_dir / "log", FileSnapshotStore(pass_dir / "snap"))
    try:
        for epoch, values in enumerate(proposals, start=1):
            info = unpack.append_as_leader(values, epoch)
            (built,) = unpack.read(info.first_offset, 1 << 20)
            ts = batch_codec.validate_batch(bytes(built.raw)).base_timestamp
            client = wire.client_records(batch_codec.build_batch_from_values(values, timestamp_ms=ts))
            assert type(client) is ClientBatch
            assert passed.append_as_leader(client, epoch) == info
        assert _stored(passed) == _stored(unpack)
        assert [list(b.records) for b in passed.read(0, 1 << 20)] == proposals
    finally:
        unpack.close()
        passed.close()


def test_a_client_batch_is_its_own_batch_between_lingering_proposals_and_kept_as_sent(tmp_path):
    """In a real cluster: values, a client batch and values queued in one linger window append as
    three batches (the values are not merged across it); a Produce over TCP of a kafka-python
    batch is stored as those bytes with only offset and epoch stamped, and commits everywhere."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    async def scenario():
        voters, nodes = await _started_nodes(tmp_path, DriverConfig(linger_ms=50))
        try:
            leader = await _leader(nodes)
            before = len(leader.log.read(0, 1 << 20))
            client_batch = wire.client_records(batch_codec.build_batch_from_values([b"c1", b"c2", b"c3"]))
            futures = [leader.driver.propose([b"a1", b"a2"]), leader.driver.propose([b"b1"]),
                       leader.driver.propose(client_batch), leader.driver.propose([b"d1"])]
            results = await asyncio.wait_for(asyncio.gather(*futures), 10)
            new = leader.log.read(0, 1 << 20)[before:]
            assert [list(b.records) for b in new] == [[b"a1", b"a2", b"b1"], [b"c1", b"c2", b"c3"], [b"d1"]]
            assert [last - base + 1 for base, last in results] == [2, 1, 3, 1]
            assert bytes(new[1].raw)[LEADER_EPOCH_OFFSET + 4:] == client_batch.raw[LEADER_EPOCH_OFFSET + 4:]

            builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
            for i, value in enumerate((b"k1", b"k2")):
                builder.append(i, timestamp=TS_MS + i, key=None, value=value, headers=[])
            sent = bytes(builder.build())
            conn = ClientConnection(*voters[leader.node_id])
            await conn.open()
            try:
                error, base, *_ = await conn.request_frame(
                    lambda corr: hot_codec.encode_produce_request(corr, "t", sent, 5000), _produce_result,
                    timeout_s=10)
            finally:
                await conn.close()
            assert error.name == "NONE"
            (stored,) = leader.log.read(base, 1 << 20)
            stored = bytes(stored.raw)
            assert stored[LEADER_EPOCH_OFFSET + 4:] == sent[LEADER_EPOCH_OFFSET + 4:]  # CRC, timestamps as sent
            assert struct.unpack_from(">qii", stored) == (base, len(sent) - 12, leader.core.epoch)
            client = RaftClient(voters)
            try:
                records = await client.read_committed(base)
            finally:
                await client.close()
            assert [v for _, v in records][:2] == [b"k1", b"k2"]
        finally:
            for node in nodes:
                await node.stop(resign=False)

    asyncio.run(scenario())
