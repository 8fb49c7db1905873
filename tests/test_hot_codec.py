"""Proves raft/hot_codec.py is kio, faster: every Fetch v17 and Produce v10 frame it writes is byte for byte the
frame kio writes for the same value (kio is an independent implementation of Kafka's schemas);
every frame it reads gives what kio's path gives (parse_request / request_from_kio and
decode_response_body); and on damaged, foreign or differently shaped frames it either steps aside
(None: the transport takes kio's path) or agrees with kio's path, never accepting what kio refuses.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st
from kio.schema.fetch.v17 import request as kfetch_req
from kio.static.primitive import i32 as ki32

from kraftlog.raft import hot_codec, wire
from kraftlog.raft.aio.transport import check_request_lengths, check_response_lengths
from kraftlog.raft.messages import Envelope, FetchRequest, FetchResponse
from kraftlog.raft.types import ClientBatch, Errors, LogBatch, OffsetAndEpoch

pytestmark = pytest.mark.twin  # records go through the native batch scanner (and its twin)

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
epoch = st.integers(-1, wire.MAX_EPOCH)
# up to 80 characters: multi-byte UTF-8 sometimes passes 127 bytes (a 2-byte length: kio's path)
text = st.one_of(st.none(), st.text(max_size=80))
oae = st.builds(OffsetAndEpoch, st.integers(-1, 2**62), st.integers(-1, wire.MAX_EPOCH))

REQUESTS = st.builds(FetchRequest, text, i32, st.integers(0, 2**31 // 1000 - 1), st.integers(0, 2**31 - 1), epoch,
                     i64, epoch, i64, st.one_of(st.none(), st.text(min_size=1, max_size=20)))


@st.composite
def responses(draw):
    batches, offset = [], draw(st.integers(0, 2**40))
    for i in range(draw(st.integers(0, 4))):
        values = draw(st.lists(st.binary(max_size=200), min_size=1, max_size=5))
        batches.append(LogBatch(offset, i + 1, tuple(values)))
        offset += len(values)
    # encoded once (a batch built twice differs in its timestamps): sent as a leader sends them, one
    # run of the bytes in its log, or as a tuple of batches
    run = wire.split_batches(wire.encode_batches(batches)) if batches else ()
    sent = run if draw(st.booleans()) else tuple(run)
    return FetchResponse(draw(st.sampled_from(list(Errors))), draw(st.sampled_from(list(Errors))), draw(i32),
                         draw(epoch), draw(i64), draw(i64), draw(st.one_of(st.none(), oae)),
                         draw(st.one_of(st.none(), oae)), sent, draw(i32))


def kio_request(frame: bytes):
    """What the transport's kio path makes of a request frame: (correlation id, sender, value)."""
    check_request_lengths(frame)
    rf = wire.parse_request(frame)
    sender, value = wire.request_from_kio(rf.body)
    return rf.correlation_id, sender, value, rf.trailing_bytes


def kio_response(frame: bytes):
    check_response_lengths(frame, wire.APIS[FetchRequest].response)
    return wire.decode_response_body(frame, FetchRequest(None, 1, 0, 0, 0, 0, 0, 0))[1]


def comparable(response: FetchResponse):
    """A response with its batches as (offset, epoch, control, raw bytes): runs and tuples alike."""
    return (response.error_code, response.partition_error, response.leader_id, response.leader_epoch,
            response.high_watermark, response.log_start_offset, response.diverging_epoch, response.snapshot_id,
            response.preferred_read_replica,
            [(b.base_offset, b.epoch, b.control, bytes(wire.encode_batch(b))) for b in response.batches])


@settings(max_examples=400, deadline=None)
@given(REQUESTS, st.integers(0, 2**31 - 1), text)
@example(FetchRequest(None, -1, 0, 0, 0, 0, 0, 0, None), 0, None)  # no ReplicaState, no ClusterId: no tags
@example(FetchRequest("c" * 200, 7, 0, 0, 0, 0, 0, 0, "r" * 300), 1, "x" * 400)  # 2-byte varint lengths
def test_requests_are_kios_bytes_and_read_back_as_kio_reads_them(request, corr, client_id):
    frame = hot_codec.encode_fetch_request(corr, client_id, request)
    assert frame == wire.encode_request_envelope(Envelope(1, 2, corr, request), client_id)
    decoded = hot_codec.decode_fetch_request(frame[4:])
    expected = kio_request(frame[4:])
    assert expected[3] == 0 and expected[:3] == (corr, request.replica_id, request)
    if decoded is not None:  # long strings take kio's path (varints of one byte only here)
        assert decoded == expected[:3]
    else:
        assert max(len((s or "").encode()) for s in (request.cluster_id, request.rack)) >= 0x7F


@settings(max_examples=300, deadline=None)
@given(responses(), st.integers(0, 2**31 - 1))
def test_responses_are_kios_bytes_and_read_back_as_kio_reads_them(response, corr):
    frame = hot_codec.encode_fetch_response(corr, response)
    assert frame == wire.encode_response_body(corr, response)
    decoded = hot_codec.decode_fetch_response(frame[4:])
    assert decoded is not None
    assert comparable(decoded) == comparable(kio_response(frame[4:]))


def test_a_kafka_voters_replica_directory_id_is_read_and_other_shapes_go_to_kio():
    """Kafka 4 voters send ReplicaDirectoryId (partition tag 0): read, as kio's path reads it (raft
    does not use it). Two partitions, a forgotten topic or trailing bytes: None, kio's path decides."""
    base = wire.request_to_kio(FetchRequest("c", 3, 500, 1 << 20, 2, 10, 2, 0, "r"))
    topic = base.topics[0]
    partition = topic.partitions[0]
    with_dir = replace(base, topics=(replace(topic, partitions=(
        replace(partition, replica_directory_id=uuid.uuid4()),)),))
    frame = wire.frame_request(1, 17, 9, "k", with_dir)[4:]
    assert hot_codec.decode_fetch_request(frame) == kio_request(frame)[:3]

    two = replace(base, topics=(replace(topic, partitions=(partition, replace(partition, partition=ki32(1)))),))
    forgotten = replace(base, forgotten_topics_data=(
        kfetch_req.ForgottenTopic(topic_id=uuid.uuid4(), partitions=(ki32(0),)),))
    for other in (two, forgotten):
        assert hot_codec.decode_fetch_request(wire.frame_request(1, 17, 9, "k", other)[4:]) is None
    ours = hot_codec.encode_fetch_request(9, "k", FetchRequest(None, 3, 0, 0, 0, 0, 0, 0))[4:]
    assert hot_codec.decode_fetch_request(ours + b"\x00\x00") is None  # kio's path counts trailing bytes
    assert kio_request(ours + b"\x00\x00")[3] == 2


def test_unusable_epochs_and_unknown_error_codes_are_refused_as_kio_refuses_them():
    frame = hot_codec.encode_fetch_request(1, None, FetchRequest(None, 2, 0, 0, wire.MAX_EPOCH + 1, 0, 0, 0))[4:]
    with pytest.raises(wire.WireFormatError, match="current_leader_epoch"):
        hot_codec.decode_fetch_request(frame)
    with pytest.raises(wire.WireFormatError, match="current_leader_epoch"):
        kio_request(frame)
    good = bytearray(hot_codec.encode_fetch_response(1, FetchResponse(Errors.NONE, Errors.NONE, 1, 2, 0, 0))[4:])
    good[9:11] = (999).to_bytes(2, "big")  # the top-level ErrorCode: a code raft does not know
    for decode in (hot_codec.decode_fetch_response, kio_response):
        with pytest.raises(wire.WireFormatError, match="999"):
            decode(bytes(good))


EDITS = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=3)


def check_damaged(frame: bytes, edits, cut: int, truncate: bool, fast_decode, kio_decode, same=lambda v: v):
    """Damage ``frame`` (byte edits, then maybe a cut): the hand decoder steps aside (None: the
    transport takes kio's path, the reference) or agrees with kio's path on refusing or on the
    value (compared through ``same``)."""
    damaged = bytearray(frame)
    for pos, byte in edits:
        damaged[pos % len(damaged)] = byte
    if truncate:
        damaged = damaged[:cut % len(damaged)]
    fast = _outcome(fast_decode, bytes(damaged))
    event("stepped aside" if fast == ("ok", None) else f"fast {fast[0]}")
    if fast == ("ok", None):
        return
    slow = _outcome(kio_decode, bytes(damaged))
    assert fast[0] == slow[0]
    if fast[0] == "ok":
        assert same(fast[1]) == same(slow[1])


def _outcome(decode, frame):
    try:
        return "ok", decode(frame)
    except wire.WireFormatError:
        return "refused", None


@settings(max_examples=500, deadline=None)
@given(REQUESTS, EDITS, st.integers(0, 1 << 16), st.booleans())
def test_damaged_requests_are_left_to_kio_or_read_as_kio_reads_them(request, edits, cut, truncate):
    check_damaged(hot_codec.encode_fetch_request(5, "n", request)[4:], edits, cut, truncate,
                  hot_codec.decode_fetch_request, lambda frame: kio_request(frame)[:3])


@settings(max_examples=500, deadline=None)
@given(responses(), EDITS, st.integers(0, 1 << 16), st.booleans())
def test_damaged_responses_are_left_to_kio_or_read_as_kio_reads_them(response, edits, cut, truncate):
    check_damaged(hot_codec.encode_fetch_response(5, response)[4:], edits, cut, truncate,
                  hot_codec.decode_fetch_response, kio_response, comparable)


# ---- Produce v10 -----------------------------------------------------------------------------------


def kio_produce(frame: bytes):
    check_request_lengths(frame)
    rf = wire.parse_request(frame)
    return rf.correlation_id, wire.produce_values(rf.body)


def produce_read(result):
    """A decoded Produce as compared here: (correlation id, the passed-through batch's bytes or
    None when the values were unpacked, the values)."""
    corr, records = result
    return corr, records.raw if type(records) is ClientBatch else None, list(records)


def produce_frame(values, corr: int = 3, client_id: str | None = "c", timeout_ms: int = 500) -> bytes:
    return wire.frame_request(0, 10, corr, client_id, wire.produce_request(values, timeout_ms=timeout_ms))[4:]


VALUES = st.lists(st.binary(max_size=300), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(VALUES, st.integers(0, 2**31 - 1), text, st.integers(0, 2**31 - 1))
def test_produce_requests_read_as_kio_reads_them(values, corr, client_id, timeout_ms):
    frame = produce_frame(values, corr, client_id, timeout_ms)
    read = produce_read(hot_codec.decode_produce_request(frame))
    assert read == produce_read(kio_produce(frame))
    assert read[0] == corr and read[2] == values
    assert read[1] is not None and read[1] in frame  # the client's batch, to be appended as written


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(list(Errors)), i64, i32, epoch, st.one_of(st.none(), st.text()))
def test_produce_responses_are_kios_bytes(corr, error, base_offset, leader_id, leader_epoch, message):
    frame = hot_codec.encode_produce_response(corr, error, base_offset, leader_id, leader_epoch, message)
    assert frame == wire.frame_response(corr, wire.produce_response(error, base_offset, leader_id, leader_epoch,
                                                                    message))
    _, body = wire.parse_response(frame[4:], wire.PRODUCE_API.response)
    assert wire.produce_result(body) == (error, base_offset, leader_id, leader_epoch, message)


def test_produce_in_other_shapes_goes_to_kio():
    """Another topic or partition, a transactional id, trailing bytes: None (kio's path refuses
    the first two, ignores the id, counts the bytes)."""
    base = wire.produce_request([b"v"], timeout_ms=5)
    topic = base.topic_data[0]
    others = (replace(base, topic_data=(replace(topic, name="other"),)),
              replace(base, topic_data=(replace(topic, partition_data=(
                  replace(topic.partition_data[0], index=ki32(1)),)),)),
              replace(base, transactional_id="tx"))
    for other in others:
        frame = wire.frame_request(0, 10, 1, "c", other)[4:]
        assert hot_codec.decode_produce_request(frame) is None
    assert hot_codec.decode_produce_request(produce_frame([b"v"]) + b"\x00") is None
    with pytest.raises(wire.WireFormatError, match="__cluster_metadata"):
        kio_produce(wire.frame_request(0, 10, 1, "c", others[0])[4:])


@settings(max_examples=500, deadline=None)
@given(VALUES, EDITS, st.integers(0, 1 << 16), st.booleans())
def test_damaged_produce_requests_are_left_to_kio_or_read_as_kio_reads_them(values, edits, cut, truncate):
    check_damaged(produce_frame(values), edits, cut, truncate, hot_codec.decode_produce_request, kio_produce,
                  same=produce_read)


# ---- the client's side of Produce (RaftClient.propose) ----------------------------------------------


def kio_produce_answer(frame: bytes):
    """What the client's kio path makes of a Produce response frame: (correlation id, result)."""
    corr, body = wire.parse_response(frame, wire.PRODUCE_API.response)
    return corr, wire.produce_result(body)


@settings(max_examples=300, deadline=None)
@given(VALUES, st.integers(0, 2**31 - 1), st.text(max_size=80), st.integers(0, 2**31 - 1))
def test_client_produce_requests_are_kios_bytes(values, corr, client_id, timeout_ms):
    body = wire.produce_request(values, timeout_ms=timeout_ms)
    records = bytes(body.topic_data[0].partition_data[0].records)  # one build: a batch has timestamps
    frame = hot_codec.encode_produce_request(corr, client_id, records, timeout_ms)
    assert frame == wire.frame_request(0, 10, corr, client_id, body)
    assert produce_read(hot_codec.decode_produce_request(frame[4:])) == produce_read(kio_produce(frame[4:])) \
        == (corr, records, values)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(list(Errors)), i64, i32, epoch, st.one_of(st.none(), st.text()))
def test_client_reads_produce_responses_as_kio_reads_them(corr, error, base_offset, leader_id, leader_epoch,
                                                          message):
    frame = hot_codec.encode_produce_response(corr, error, base_offset, leader_id, leader_epoch, message)[4:]
    decoded = hot_codec.decode_produce_response(frame)
    if decoded is None:  # only a message too long for one varint byte is left to kio
        assert message is not None and len(message.encode()) + 1 >= 0x80
    else:
        assert decoded == kio_produce_answer(frame) == (corr, (error, base_offset, leader_id, leader_epoch, message))


def test_client_leaves_other_produce_answers_to_kio():
    """Bytes after the body, two partitions' worth of shape, a tag we do not write: None."""
    frame = hot_codec.encode_produce_response(5, Errors.NONE, 42)[4:]
    assert hot_codec.decode_produce_response(frame) == (5, (Errors.NONE, 42, -1, -1, None))
    assert hot_codec.decode_produce_response(frame + b"\x00") is None
    with pytest.raises(wire.WireFormatError):
        kio_produce_answer(frame + b"\x00")
    tagged = bytearray(frame)
    tagged[-1] = 1  # a response tag we do not know
    assert hot_codec.decode_produce_response(bytes(tagged)) is None


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(list(Errors)), i64, st.one_of(st.none(), st.text(max_size=20)), EDITS, st.integers(0, 1 << 16),
       st.booleans())
def test_damaged_produce_answers_are_left_to_kio_or_read_as_kio_reads_them(error, base, message, edits, cut,
                                                                           truncate):
    frame = hot_codec.encode_produce_response(9, error, base, 1, 2, message)[4:]
    check_damaged(frame, edits, cut, truncate, hot_codec.decode_produce_response, kio_produce_answer)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**62), st.integers(0, 2**31 - 1)),
                min_size=2, max_size=5))
def test_a_followers_successive_fetches_are_kios_bytes(moves):
    """A follower's Fetch requests differ only in correlation id, offsets and epochs; the bytes
    made once per sender (_fetch_request_ends) still give kio's frame for each of them."""
    for corr, offset, epoch in moves:
        request = FetchRequest("cluster-x", 2, 500, 8 << 20, epoch, offset, epoch, offset // 2, "rack-a")
        assert hot_codec.encode_fetch_request(corr, "raft-2", request) == \
            wire.encode_request_envelope(Envelope(2, 1, corr, request), "raft-2")


def test_the_hand_checked_epoch_fields_are_the_ones_check_epochs_walks():
    """decode_fetch_request / decode_fetch_response check their epochs inline rather than through
    wire.check_epochs: the fields they name must stay the ones check_epochs would walk."""
    from kraftlog.raft.wire import _epoch_fields

    assert _epoch_fields(FetchRequest) == hot_codec.REQUEST_EPOCH_FIELDS
    assert _epoch_fields(FetchResponse) == hot_codec.RESPONSE_EPOCH_FIELDS


@pytest.mark.parametrize("field", ["current_leader_epoch", "last_fetched_epoch", "leader_epoch", "diverging_epoch",
                                   "snapshot_id"])
def test_each_hand_checked_epoch_past_the_largest_is_refused_as_kio_refuses_it(field):
    """Every epoch the hand decoders check inline, one past MAX_EPOCH: refused with the field's
    name, on the hot path as on kio's."""
    too_big = wire.MAX_EPOCH + 1
    if field in hot_codec.REQUEST_EPOCH_FIELDS:
        request = replace(FetchRequest(None, 2, 0, 0, 5, 0, 5, 0), **{field: too_big})
        frame = hot_codec.encode_fetch_request(1, None, request)[4:]
        decoders = (hot_codec.decode_fetch_request, kio_request)
    else:
        value = too_big if field == "leader_epoch" else OffsetAndEpoch(7, too_big)
        frame = hot_codec.encode_fetch_response(1, replace(FetchResponse(Errors.NONE, Errors.NONE, 1, 2, 0, 0),
                                                           **{field: value}))[4:]
        decoders = (hot_codec.decode_fetch_response, kio_response)
    for decode in decoders:
        with pytest.raises(wire.WireFormatError, match=field):
            decode(frame)
