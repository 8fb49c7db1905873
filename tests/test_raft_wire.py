"""Proves raft/wire.py speaks Kafka's wire protocol: every raft message survives a round trip
through a whole frame (size prefix, header v2 / response header v1, kio body) with generated
field values; the frame header bytes are laid out as Kafka lays them out (checked by hand-
decoding with struct, not with our code); LeaderChange control records decode with kio's own
LeaderChangeMessage reader; raw record batches pass through untouched and their records decode
lazily; and damaged or foreign bytes raise only WireFormatError / CorruptRecordError.
"""

from __future__ import annotations

import contextlib
import dataclasses
import struct

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage
from kio.serial import entity_reader

from kraftlog.engine.records import batch as batch_codec
from kraftlog.engine.records.layout import SMALL_RUN_BATCHES
from kraftlog.engine.records.metadata import decode_control
from kraftlog.errors import CorruptRecordError
from kraftlog.raft import wire
from kraftlog.raft.control import encode_leader_change
from kraftlog.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    ReplicaDescription,
    VoteRequest,
    VoteResponse,
)
from kraftlog.raft.types import Errors, LogBatch, OffsetAndEpoch

pytestmark = pytest.mark.twin  # record batches go through the native batch codec (and its twin)

i32 = st.integers(-1, 2**31 - 1)
i64 = st.integers(-1, 2**63 - 1)
nonneg32 = st.integers(0, 2**31 - 1)
epoch32 = st.integers(-1, wire.MAX_EPOCH)  # epochs a node accepts from a peer (2^31 - 1 could never be followed)
errors = st.sampled_from(list(Errors))
cluster = st.one_of(st.none(), st.text(min_size=1, max_size=20))
oae = st.builds(OffsetAndEpoch, st.integers(0, 2**62), st.integers(0, wire.MAX_EPOCH))

REQUESTS = st.one_of(
    st.builds(VoteRequest, cluster, i32, epoch32, i32, epoch32, i64, st.booleans()),
    st.builds(FetchRequest, cluster, i32, st.integers(0, 2**31 // 1000 - 1), nonneg32, epoch32, i64, epoch32, i64,
              st.one_of(st.none(), st.text(min_size=1, max_size=12))),
    st.builds(BeginQuorumEpochRequest, cluster, i32, i32, epoch32),
    st.builds(EndQuorumEpochRequest, cluster, i32, epoch32, st.lists(nonneg32, max_size=5).map(tuple)),
    st.builds(FetchSnapshotRequest, cluster, i32, i32, epoch32, oae, i64),
    st.just(DescribeQuorumRequest()),
)
replica = st.builds(ReplicaDescription, i32, i64, i64, i64)


@settings(max_examples=300, deadline=None)
@given(REQUESTS, st.integers(0, 2**31 - 1), st.one_of(st.none(), st.text(max_size=10)))
# 1001 ms once came back as 1000 (a float conversion of the timedelta; found by hypothesis in CI)
@example(FetchRequest(None, 0, 1001, 0, 0, 0, 0, 0), 0, None)
def test_every_request_round_trips_through_a_frame(body, corr, client_id):
    """encode -> frame -> parse gives back the same value, the same correlation id and client id."""
    frame = wire.encode_request_envelope(Envelope(1, 2, corr, body), client_id)
    (size,) = struct.unpack_from(">i", frame, 0)
    assert size == len(frame) - 4
    rf = wire.parse_request(frame[4:])
    assert (rf.correlation_id, rf.client_id) == (corr, client_id)
    _, back = wire.request_from_kio(rf.body)
    assert back == body


def test_request_header_is_kafkas_layout():
    """size i32 | api key i16 | version i16 | correlation id i32 | client id (i16 len + bytes) |
    tagged fields: read back with struct, independent of our code and of kio."""
    body = VoteRequest("c1", 3, 7, 1, 6, 42, True)
    frame = wire.encode_request_envelope(Envelope(1, 3, 99, body), "node-1")
    size, key, version, corr, id_len = struct.unpack_from(">ihhih", frame, 0)
    assert (size, key, version, corr) == (len(frame) - 4, 52, 2, 99)
    assert frame[14:14 + id_len] == b"node-1" and frame[14 + id_len] == 0  # no header tagged fields
    # Fetch is api key 1 v17, DescribeQuorum 55 v2, FetchSnapshot 59 v1
    for b, api in ((FetchRequest(None, 2, 0, 10, 1, 0, 0, 0), (1, 17)),
                   (DescribeQuorumRequest(), (55, 2)),
                   (FetchSnapshotRequest(None, 2, 10, 1, OffsetAndEpoch(5, 1), 0), (59, 1)),
                   (BeginQuorumEpochRequest(None, 2, 1, 1), (53, 1)),
                   (EndQuorumEpochRequest(None, 1, 1, (2,)), (54, 1))):
        f = wire.encode_request_envelope(Envelope(1, 2, 5, b), None)
        assert struct.unpack_from(">hh", f, 4) == api
        assert struct.unpack_from(">h", f, 12) == (-1,)  # null client id


@settings(max_examples=200, deadline=None)
@given(errors, errors, i32, epoch32, st.booleans(), st.booleans(), st.integers(0, 2**31 - 1))
def test_vote_response_round_trips_and_restores_pre_vote(err, perr, leader, epoch, granted, pre_vote, corr):
    """PreVote is not in the Vote response: it comes back from the request it answers."""
    request = VoteRequest(None, 1, 1, 2, 1, 1, pre_vote)
    body = VoteResponse(err, leader, epoch, granted, pre_vote, perr)
    frame = wire.encode_response_body(corr, body)
    assert struct.unpack_from(">ii", frame, 0) == (len(frame) - 4, corr)
    got_corr, back = wire.decode_response_body(frame[4:], request)
    assert (got_corr, back) == (corr, body)


@settings(max_examples=200, deadline=None)
@given(errors, errors, i32, epoch32, i64, st.integers(0, 2**62), st.one_of(st.none(), oae), st.one_of(st.none(), oae),
       st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=5), max_size=4), i32)
def test_fetch_response_round_trips_with_record_batches(err, perr, leader, epoch, hw, start, div, snap, payloads,
                                                        preferred):
    """Batches become record batches v2 in Records and come back with offsets, epochs, payloads;
    PreferredReadReplica (KIP-392) comes back as sent."""
    batches, offset = [], 0
    for i, recs in enumerate(payloads):
        batches.append(LogBatch(offset, i + 1, tuple(recs)))
        offset += len(recs)
    body = FetchResponse(err, perr, leader, epoch, hw, start, div, snap, tuple(batches), preferred)
    request = FetchRequest(None, 2, 0, 1 << 20, 1, 0, 0, 0)
    _, back = wire.decode_response_body(wire.encode_response_body(7, body)[4:], request)
    assert (back.error_code, back.partition_error, back.leader_id, back.leader_epoch, back.high_watermark,
            back.log_start_offset, back.diverging_epoch, back.snapshot_id, back.preferred_read_replica) == \
        (err, perr, leader, epoch, hw, start, div, snap, preferred)
    assert [(b.base_offset, b.epoch, b.control, tuple(b.records)) for b in back.batches] == \
        [(b.base_offset, b.epoch, False, b.records) for b in batches]
    # what a follower stores is exactly what came: the raw bytes are kept and re-sent as they are
    for b in back.batches:
        assert wire.encode_batch(b) is b.raw


def test_kip392_fields_sit_where_kafka_reads_them():
    """RackId (Fetch v11+) and PreferredReadReplica (FetchResponse v11+) as kio's own readers see
    them: no rack goes out as the empty string Kafka uses for "no rack", and a response that
    names no replica carries -1."""
    frame = wire.encode_request_envelope(Envelope(7, 2, 5, FetchRequest(None, 7, 0, 10, 1, 0, 0, 0, "eu-1a")), None)
    assert wire.parse_request(frame[4:]).body.rack_id == "eu-1a"
    frame = wire.encode_request_envelope(Envelope(7, 2, 5, FetchRequest(None, 7, 0, 10, 1, 0, 0, 0)), None)
    msg = wire.parse_request(frame[4:]).body
    assert msg.rack_id == "" and wire.request_from_kio(msg)[1].rack is None
    for preferred in (3, -1):
        frame = wire.encode_response_body(1, FetchResponse(Errors.NONE, Errors.NONE, 1, 4, 10,
                                                           preferred_read_replica=preferred))
        _, msg = wire.parse_response(frame[4:], wire.APIS[FetchRequest].response)
        assert msg.responses[0].partitions[0].preferred_read_replica == preferred
    frame = wire.encode_response_body(1, FetchResponse(Errors.NONE, Errors.OFFSET_NOT_AVAILABLE, 1, 4, 10))
    _, back = wire.decode_response_body(frame[4:], FetchRequest(None, 7, 0, 10, 1, 0, 0, 0))
    assert back.partition_error is Errors.OFFSET_NOT_AVAILABLE and back.preferred_read_replica == -1


@settings(max_examples=100, deadline=None)
@given(errors, errors, i32, epoch32, st.one_of(st.none(), oae), st.integers(0, 2**40), st.integers(0, 2**40),
       st.binary(max_size=100))
def test_fetch_snapshot_response_round_trips(err, perr, leader, epoch, sid, size, position, data):
    body = FetchSnapshotResponse(err, perr, leader, epoch, sid, size, position, data)
    req = FetchSnapshotRequest(None, 2, 10, 1, OffsetAndEpoch(5, 1), 0)
    _, back = wire.decode_response_body(wire.encode_response_body(1, body)[4:], req)
    assert back == body


@settings(max_examples=100, deadline=None)
@given(errors, errors, i32, epoch32, i64, st.lists(replica, max_size=5).map(tuple),
       st.lists(replica, max_size=3).map(tuple))
def test_describe_quorum_and_epoch_responses_round_trip(err, perr, leader, epoch, hw, voters, observers):
    body = DescribeQuorumResponse(err, perr, leader, epoch, hw, voters, observers)
    _, back = wire.decode_response_body(wire.encode_response_body(1, body)[4:], DescribeQuorumRequest())
    assert back == body
    for req, resp in ((BeginQuorumEpochRequest(None, 1, 2, 3), BeginQuorumEpochResponse(err, leader, epoch, perr)),
                      (EndQuorumEpochRequest(None, 2, 3, ()), EndQuorumEpochResponse(err, leader, epoch, perr))):
        _, back = wire.decode_response_body(wire.encode_response_body(2, resp)[4:], req)
        assert back == resp


@given(st.integers(0, 2**31 - 1), st.sets(st.integers(0, 2**31 - 1), max_size=6),
       st.sets(st.integers(0, 2**31 - 1), max_size=6))
def test_leader_change_goes_out_as_kafkas_control_record(leader, voters, granting):
    """A control LogBatch carrying the core's interim LeaderChange becomes a Kafka control batch
    (control bit, key version 0 type 2) whose value kio's LeaderChangeMessage v0 reader accepts."""
    raw = wire.encode_batch(LogBatch(5, 3, (encode_leader_change(leader, voters, granting),), True))
    header = batch_codec.validate_batch(raw)
    assert header.is_control and (header.base_offset, header.partition_leader_epoch) == (5, 3)
    (record,) = list(batch_codec.iter_records(raw))
    assert struct.unpack(">hh", record.key) == (0, 2)
    msg, size = entity_reader(LeaderChangeMessage)(record.value, 0)
    assert size == len(record.value)
    assert msg.leader_id == leader
    assert [v.voter_id for v in msg.voters] == sorted(voters)
    assert [v.voter_id for v in msg.granting_voters] == sorted(granting)
    assert decode_control(record.key, record.value).data["LeaderId"] == leader


def test_lazy_records_count_without_decoding_and_check_the_crc_when_decoded():
    """len() comes from the header; a flipped payload byte is caught only when records are read."""
    raw = bytearray(batch_codec.build_batch_from_values([b"a" * 10, b"b" * 10], base_offset=4,
                                                        partition_leader_epoch=2))
    (b,) = wire.split_batches(bytes(raw))
    assert (b.base_offset, b.epoch, len(b.records), b.next_offset) == (4, 2, 2, 6)
    assert list(b.records) == [b"a" * 10, b"b" * 10]
    raw[-3] ^= 0xFF
    (bad,) = wire.split_batches(bytes(raw))
    assert len(bad.records) == 2
    with pytest.raises(CorruptRecordError):
        list(bad.records)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_requests_raise_only_wire_format_errors(junk):
    """Any bytes either decode as a request we speak or raise WireFormatError (nothing else)."""
    with contextlib.suppress(wire.WireFormatError):
        wire.parse_request(junk)


@settings(max_examples=200, deadline=None)
@given(REQUESTS, st.data())
def test_damaged_request_frames_raise_only_wire_format_errors(body, data):
    """A real frame, truncated or with a byte changed, is refused or decodes; never crashes."""
    frame = bytearray(wire.encode_request_envelope(Envelope(1, 2, 3, body), "x")[4:])
    cut = data.draw(st.integers(0, len(frame)))
    pos = data.draw(st.integers(0, len(frame) - 1))
    frame[pos] = data.draw(st.integers(0, 255))
    for candidate in (bytes(frame[:cut]), bytes(frame)):
        try:
            rf = wire.parse_request(candidate)
            wire.request_from_kio(rf.body)
        except wire.WireFormatError:
            pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120))
def test_split_batches_refuses_garbage_with_corrupt_record_error(junk):
    with contextlib.suppress(CorruptRecordError):
        wire.split_batches(junk)


def test_produce_request_carries_values_and_response_names_the_leader():
    """The client API: Produce v10 for __cluster_metadata/0 with acks=-1, answered with the base
    offset, or with NOT_LEADER_OR_FOLLOWER and CurrentLeader."""
    body = wire.produce_request([b"k1", b"", b"v" * 300], timeout_ms=1500)
    frame = wire.frame_request(0, 10, 9, "c", body)
    assert struct.unpack_from(">hh", frame, 4) == (0, 10)
    rf = wire.parse_request(frame[4:])
    assert rf.body.acks == -1
    assert list(wire.produce_values(rf.body)) == [b"k1", b"", b"v" * 300]
    resp = wire.frame_response(9, wire.produce_response(Errors.NOT_LEADER_OR_FOLLOWER, -1, 3, 7))
    corr, msg = wire.parse_response(resp[4:], wire.PRODUCE_API.response)
    assert corr == 9 and wire.produce_result(msg)[:4] == (Errors.NOT_LEADER_OR_FOLLOWER, -1, 3, 7)


def test_api_versions_answer_lists_every_raft_api_with_header_v0():
    frame = wire.frame_response(4, wire.api_versions_response(3), header_v0=True)
    corr, msg = wire.parse_response(frame[4:], wire._API_VERSIONS[3][1], header_v0=True)
    keys = {k.api_key: (k.min_version, k.max_version) for k in msg.api_keys}
    assert corr == 4 and keys[52] == (2, 2) and keys[1] == (17, 17) and keys[59] == (1, 1)
    assert {0, 1, 18, 52, 53, 54, 55, 59} == set(keys)


def test_unknown_api_is_refused_and_trailing_bytes_are_counted():
    """An unknown API is refused; bytes after a well-formed body are accepted and counted, as
    Kafka's RequestContext.parseRequest does (librdkafka sends 4 after Metadata v9+'s null array)."""
    frame = wire.encode_request_envelope(Envelope(1, 2, 3, DescribeQuorumRequest()), None)[4:]
    with pytest.raises(wire.WireFormatError, match="unsupported API"):
        wire.parse_request(struct.pack(">hhi", 3, 12, 1) + frame[8:])
    assert wire.parse_request(frame).trailing_bytes == 0
    padded = wire.parse_request(frame + b"\0\0\0\0")
    assert padded.trailing_bytes == 4 and padded.body == wire.parse_request(frame).body


def test_a_damaged_array_length_is_a_wire_format_error_not_a_crash():
    """Found by the fuzz test in CI: byte 16 of this frame set to 33 makes kio decode the topics
    array as null; parsing must refuse it with WireFormatError (not TypeError)."""
    frame = bytearray(wire.encode_request_envelope(Envelope(1, 2, 3, EndQuorumEpochRequest("00", 0, 0, ())), "x")[4:])
    frame[16] = 33
    with pytest.raises(wire.WireFormatError):
        wire.request_from_kio(wire.parse_request(bytes(frame)).body)


@pytest.mark.parametrize("make", [
    lambda e: VoteRequest("c1", 3, e, 3, 1, 42, False),
    lambda e: VoteRequest("c1", 3, 5, 3, e, 42, False),
    lambda e: BeginQuorumEpochRequest(None, 2, 1, e),
    lambda e: EndQuorumEpochRequest(None, 1, e, (2,)),
    lambda e: FetchRequest(None, 2, 0, 10, e, 0, 0, 0),
    lambda e: FetchSnapshotRequest(None, 2, 10, 1, OffsetAndEpoch(5, e), 0),
])
def test_requests_naming_an_unusable_epoch_are_malformed(make):
    """An epoch a node could never follow with an election (2^31 - 1 on int32 fields) is refused at
    the wire: adopting it would wedge the node for good. The largest usable epoch still passes."""
    ok = wire.request_to_kio(make(wire.MAX_EPOCH))
    assert wire.request_from_kio(ok)[1] == make(wire.MAX_EPOCH)
    with pytest.raises(wire.WireFormatError, match="above the largest usable epoch"):
        wire.request_from_kio(wire.request_to_kio(make(wire.MAX_EPOCH + 1)))


def test_responses_naming_an_unusable_epoch_are_malformed():
    """The same bound on what a peer answers (the leader epoch of a Vote response)."""
    request = VoteRequest("c1", 3, 5, 3, 1, 42, False)
    for epoch, ok in ((wire.MAX_EPOCH, True), (wire.MAX_EPOCH + 1, False)):
        frame = wire.encode_response_body(7, VoteResponse(Errors.NONE, 2, epoch, True, False, Errors.NONE))
        if ok:
            assert wire.decode_response_body(frame[4:], request)[1].leader_epoch == epoch
        else:
            with pytest.raises(wire.WireFormatError, match="leader_epoch"):
                wire.decode_response_body(frame[4:], request)


@pytest.mark.parametrize("make", [
    lambda e: FetchResponse(Errors.NONE, Errors.NONE, 1, e),
    lambda e: FetchResponse(Errors.NONE, Errors.NONE, 1, 5, diverging_epoch=OffsetAndEpoch(10, e)),
    lambda e: FetchResponse(Errors.NONE, Errors.NONE, 1, 5, snapshot_id=OffsetAndEpoch(10, e)),
    lambda e: FetchRequest(None, 2, 0, 10, 5, 0, e, 0),
])
def test_every_epoch_a_message_carries_is_bounded(make):
    """check_epochs reads each message type's epoch fields from a per-type list: named *epoch*,
    or an OffsetAndEpoch (which may be None). Each of them is bounded, None passes."""
    wire.check_epochs(make(wire.MAX_EPOCH), "m")
    wire.check_epochs(FetchResponse(Errors.NONE, Errors.NONE, 1, 5), "m")  # no snapshot id, no divergence
    with pytest.raises(wire.WireFormatError, match="above the largest usable epoch"):
        wire.check_epochs(make(wire.MAX_EPOCH + 1), "m")


def test_an_unknown_error_code_is_malformed():
    assert wire.error_of(0) is Errors.NONE and wire.error_of(Errors.FENCED_LEADER_EPOCH) is Errors.FENCED_LEADER_EPOCH
    with pytest.raises(wire.WireFormatError, match="error code 30000 is not one raft knows"):
        wire.error_of(30000)


def test_produce_with_null_topics_is_malformed():
    """A Produce whose topic array (or partition array) is null is a malformed request, not a
    TypeError inside the handler."""
    body = wire.produce_request([b"v"], timeout_ms=100)
    for damaged in (dataclasses.replace(body, topic_data=None),
                    dataclasses.replace(body, topic_data=(dataclasses.replace(body.topic_data[0],
                                                                              partition_data=None),))):
        with pytest.raises(wire.WireFormatError, match="__cluster_metadata partition 0"):
            wire.produce_values(damaged)


@st.composite
def header_runs(draw):
    """(bases, counts, lasts) of a run of batch headers: continuing and dense, with at times one
    batch that is not dense or does not continue the one before."""
    n = draw(st.integers(1, 80))
    base, bases, counts, lasts = draw(st.integers(0, 2**40)), [], [], []
    for _ in range(n):
        count = draw(st.integers(1, 5))
        bases.append(base + draw(st.sampled_from([0] * 20 + [-1, 1])))
        counts.append(count)
        lasts.append(bases[-1] + count - 1 + draw(st.sampled_from([0] * 20 + [-1, 1])))
        base = bases[-1] + count
    return bases, counts, lasts


@settings(max_examples=400, deadline=None)
@given(header_runs())
def test_split_checks_agree_on_short_and_long_runs(run):
    """The loop (runs of up to SMALL_RUN_BATCHES) and numpy name the same first broken batch."""
    import numpy as np

    bases, counts, lasts = run
    assert wire._first_broken_loop(bases, counts, lasts) == \
        wire._first_broken_vectorised(np.array(bases), np.array(counts), np.array(lasts))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=80), st.data())
def test_take_agrees_on_short_and_long_runs(counts, data):
    import numpy as np

    bases = np.cumsum([0, *counts[:-1]]) + 100
    run = wire.BatchRun(memoryview(b""), bases, np.array(counts), np.zeros(len(counts), np.int32),
                        np.zeros(len(counts), np.int16), np.zeros(len(counts), np.int64),
                        np.zeros(len(counts), np.int64))
    end = data.draw(st.integers(90, int(bases[-1]) + counts[-1] + 5))
    most_batches, most_records = data.draw(st.integers(0, 90)), data.draw(st.integers(0, 300))
    assert wire._take_loop(bases.tolist(), counts, end, most_batches, most_records) == \
        run._take_vectorised(end, most_batches, most_records)
    assert run.record_count == sum(counts)  # a list's sum up to SMALL_RUN_BATCHES, numpy's above


@st.composite
def batch_buffers(draw):
    """Runs of batches as raft sends them, sometimes broken: a gap or overlap between batches, a
    byte edit anywhere (header or records), a cut, a control batch, several epochs."""
    offset, parts = draw(st.integers(0, 2**40)), []
    for _ in range(draw(st.integers(0, 40))):
        values = draw(st.lists(st.binary(max_size=30), min_size=1, max_size=4))
        parts.append(batch_codec.build_batch_from_values(values, base_offset=offset, timestamp_ms=1,
                                                         partition_leader_epoch=draw(st.integers(0, 5))))
        offset += len(values) + draw(st.sampled_from([0] * 30 + [-1, 1]))
    buf = bytearray(b"".join(parts))
    for pos, byte in draw(st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=2)):
        if buf:
            buf[pos % len(buf)] = byte
    if buf and draw(st.booleans()):
        buf = buf[:draw(st.integers(0, len(buf)))]
    return bytes(buf)


@settings(max_examples=400, deadline=None)
@given(batch_buffers())
def test_split_headers_is_the_scan_in_one_pass(buf):
    """batch.split_headers (native and twin alike) gives the rows split_batches' scan would, or
    None exactly where the scan path raises; split_batches reads the same either way."""
    from kraftlog.engine.records import batch_pure

    native, twin = batch_codec.split_headers(buf), batch_pure.split_headers(buf)
    assert (native is None) == (twin is None)
    try:
        scanned = _split_by_scan(buf)
    except CorruptRecordError:
        assert native is None
        with pytest.raises(CorruptRecordError):
            wire.split_batches(buf)
        return
    assert native is not None and native.tolist() == twin.tolist() == scanned
    run = wire.split_batches(buf)
    assert [list(map(int, row)) for row in (run._bases, run._counts, run._epochs, run._attributes, run._positions,
                                            run._sizes)] == scanned


def _split_by_scan(buf) -> list[list[int]]:
    """The rows of a BatchRun as split_batches made them from scan_batches before split_headers."""
    scan = batch_codec.scan_batches(buf, verify_crc=False)
    if scan.error_position is not None:
        raise CorruptRecordError(scan.error_reason, position=scan.error_position)
    bases, counts = scan.base_offsets.tolist(), scan.record_counts.tolist()
    if wire._first_broken_loop(bases, counts, scan.last_offsets.tolist()) is not None:
        raise CorruptRecordError("broken", position=0)
    return [bases, counts, scan.partition_leader_epochs.tolist(), scan.attributes.tolist(), scan.positions.tolist(),
            scan.size_bytes.tolist()]


def _header_of(batch: wire.WireBatch) -> tuple:
    """What a WireBatch says without decoding its records (a generated buffer's CRC may be broken)."""
    return batch.base_offset, batch.epoch, len(batch.records), batch.control, bytes(batch.raw)


def _run_on_arrays(run: wire.BatchRun) -> wire.BatchRun:
    """``run`` with its rows as numpy arrays whatever its length: the long-run code path, which the
    list rows of a short run (BatchRun's invariant) must agree with."""
    import numpy as np

    ref = object.__new__(wire.BatchRun)
    ref._view = run._view
    for name in ("_bases", "_counts", "_epochs", "_attributes", "_positions", "_sizes"):
        setattr(ref, name, np.asarray(getattr(run, name), dtype=np.int64))
    return ref


@settings(max_examples=300, deadline=None)
@given(batch_buffers(), st.data())
def test_short_run_on_lists_reads_as_the_array_path(buf, data):
    """A short run (a commit's one small batch) keeps its rows as lists: every read of it (batches,
    bytes, offsets, counts, take, slices) gives what the same rows as numpy arrays give."""
    try:
        run = wire.split_batches(buf)
    except CorruptRecordError:
        return
    assert run.nbytes == len(run.raw) == len(buf)
    assert run[:] is run and run[:len(run) + 1] is run  # a whole slice is the (immutable) run itself
    if len(run) > SMALL_RUN_BATCHES:
        assert all(type(getattr(run, row)) is not list for row in ("_bases", "_counts", "_sizes"))
        return
    assert type(run._bases) is list and type(run._sizes) is list
    ref = _run_on_arrays(run)
    assert [_header_of(b) for b in run] == [_header_of(b) for b in ref] and len(run) == len(ref)
    assert bytes(run.raw) == bytes(ref.raw) == buf
    if not len(run):
        return
    assert (run.base_offset, run.next_offset, run.record_count) == (ref.base_offset, ref.next_offset,
                                                                    ref.record_count)
    assert list(run.epochs) == ref.epochs.tolist() and list(run.counts) == ref.counts.tolist()
    k = data.draw(st.integers(0, len(run) - 1))
    assert _header_of(run[k]) == _header_of(ref[k])
    start, stop = data.draw(st.integers(0, len(run))), data.draw(st.integers(0, len(run)))
    assert bytes(run[start:stop].raw) == bytes(ref[start:stop].raw)
    assert run[start:stop].nbytes == ref[start:stop].nbytes == len(run[start:stop].raw)
    end = data.draw(st.integers(run.base_offset - 1, run.next_offset + 1))
    most_batches, most_records = data.draw(st.integers(0, len(run) + 1)), data.draw(st.integers(0, 200))
    assert run.take(end, most_batches, most_records) == ref.take(end, most_batches, most_records)


def test_a_short_slice_of_a_long_run_holds_lists():
    """A long run keeps arrays; a slice of it down to SMALL_RUN_BATCHES batches holds lists (the
    invariant every short-run reader relies on), and reads the same batches."""
    n = SMALL_RUN_BATCHES + 3
    buf = b"".join(batch_codec.build_batch_from_values([b"v%d" % i], base_offset=i, timestamp_ms=1)
                   for i in range(n))
    run = wire.split_batches(buf)
    assert len(run) == n and type(run._bases) is not list
    short = run[2:2 + SMALL_RUN_BATCHES]
    assert type(short._bases) is list and type(short._positions) is list
    assert list(short) == list(run)[2:2 + SMALL_RUN_BATCHES] and [_header_of(b) for b in short] == \
        [_header_of(b) for b in run][2:2 + SMALL_RUN_BATCHES]
    assert (short.base_offset, short.next_offset, short.record_count) == (2, 2 + SMALL_RUN_BATCHES, SMALL_RUN_BATCHES)
