"""Proves raft/fetch_codec.py is kio, faster: every Fetch v17 frame it writes is byte for byte the
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

from kraftlog.raft import fetch_codec, wire
from kraftlog.raft.aio.transport import check_request_lengths, check_response_lengths
from kraftlog.raft.messages import Envelope, FetchRequest, FetchResponse
from kraftlog.raft.types import Errors, LogBatch, OffsetAndEpoch

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
    frame = fetch_codec.encode_request(corr, client_id, request)
    assert frame == wire.encode_request_envelope(Envelope(1, 2, corr, request), client_id)
    decoded = fetch_codec.decode_request(frame[4:])
    expected = kio_request(frame[4:])
    assert expected[3] == 0 and expected[:3] == (corr, request.replica_id, request)
    if decoded is not None:  # long strings take kio's path (varints of one byte only here)
        assert decoded == expected[:3]
    else:
        assert max(len((s or "").encode()) for s in (request.cluster_id, request.rack)) >= 0x7F


@settings(max_examples=300, deadline=None)
@given(responses(), st.integers(0, 2**31 - 1))
def test_responses_are_kios_bytes_and_read_back_as_kio_reads_them(response, corr):
    frame = fetch_codec.encode_response(corr, response)
    assert frame == wire.encode_response_body(corr, response)
    decoded = fetch_codec.decode_response(frame[4:])
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
    assert fetch_codec.decode_request(frame) == kio_request(frame)[:3]

    two = replace(base, topics=(replace(topic, partitions=(partition, replace(partition, partition=ki32(1)))),))
    forgotten = replace(base, forgotten_topics_data=(
        kfetch_req.ForgottenTopic(topic_id=uuid.uuid4(), partitions=(ki32(0),)),))
    for other in (two, forgotten):
        assert fetch_codec.decode_request(wire.frame_request(1, 17, 9, "k", other)[4:]) is None
    ours = fetch_codec.encode_request(9, "k", FetchRequest(None, 3, 0, 0, 0, 0, 0, 0))[4:]
    assert fetch_codec.decode_request(ours + b"\x00\x00") is None  # kio's path counts trailing bytes
    assert kio_request(ours + b"\x00\x00")[3] == 2


def test_unusable_epochs_and_unknown_error_codes_are_refused_as_kio_refuses_them():
    frame = fetch_codec.encode_request(1, None, FetchRequest(None, 2, 0, 0, wire.MAX_EPOCH + 1, 0, 0, 0))[4:]
    with pytest.raises(wire.WireFormatError, match="current_leader_epoch"):
        fetch_codec.decode_request(frame)
    with pytest.raises(wire.WireFormatError, match="current_leader_epoch"):
        kio_request(frame)
    good = bytearray(fetch_codec.encode_response(1, FetchResponse(Errors.NONE, Errors.NONE, 1, 2, 0, 0))[4:])
    good[9:11] = (999).to_bytes(2, "big")  # the top-level ErrorCode: a code raft does not know
    for decode in (fetch_codec.decode_response, kio_response):
        with pytest.raises(wire.WireFormatError, match="999"):
            decode(bytes(good))


def _outcome(decode, frame):
    try:
        return "ok", decode(frame)
    except wire.WireFormatError:
        return "refused", None


@settings(max_examples=500, deadline=None)
@given(REQUESTS, st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=3),
       st.integers(0, 1 << 16), st.booleans())
def test_damaged_requests_are_left_to_kio_or_read_as_kio_reads_them(request, edits, cut, truncate):
    frame = bytearray(fetch_codec.encode_request(5, "n", request)[4:])
    for pos, byte in edits:
        frame[pos % len(frame)] = byte
    if truncate:
        frame = frame[:cut % len(frame)]
    fast = _outcome(fetch_codec.decode_request, bytes(frame))
    event("stepped aside" if fast == ("ok", None) else f"fast {fast[0]}")
    if fast == ("ok", None):
        return  # stepped aside: the transport runs kio's path, which is the reference
    slow = _outcome(kio_request, bytes(frame))
    assert fast[0] == slow[0]
    if fast[0] == "ok":
        assert fast[1] == slow[1][:3]


@settings(max_examples=500, deadline=None)
@given(responses(), st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=3),
       st.integers(0, 1 << 16), st.booleans())
def test_damaged_responses_are_left_to_kio_or_read_as_kio_reads_them(response, edits, cut, truncate):
    frame = bytearray(fetch_codec.encode_response(5, response)[4:])
    for pos, byte in edits:
        frame[pos % len(frame)] = byte
    if truncate:
        frame = frame[:cut % len(frame)]
    fast = _outcome(fetch_codec.decode_response, bytes(frame))
    event("stepped aside" if fast == ("ok", None) else f"fast {fast[0]}")
    if fast == ("ok", None):
        return
    slow = _outcome(kio_response, bytes(frame))
    assert fast[0] == slow[0]
    if fast[0] == "ok":
        assert comparable(fast[1]) == comparable(slow[1])
