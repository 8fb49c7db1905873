"""CreateTopics v7, the one shape every admin client sends, laid out by hand (as raft/hot_codec.py
lays out Fetch and Produce).

The active controller's CPU per CreateTopics of 100 topics (issue #22's profile, ~12 ms a
request) went ~0.7 ms to building the answer's kio result objects, ~0.7 ms to kio's generic
writer, and ~10% to the transport's generic length guard (check_request_lengths, a Python walk of
kio's schema) plus kio's reader. Here:

  * the request's lengths are checked by a walk of this one shape (no objects built), then kio's
    native reader makes the kio values the controller reads: it is fast (~20 us for 100 topics;
    building them in Python took ~100), it was the guard's generic walk that was slow (~240 us);
  * the answer is TopicResult tuples, written by encode_response straight to the frame.

kio stays the reference: tests/test_hot_create_topics.py holds every byte written here equal to
kio's, every request read here equal to what the old path reads, and on damaged frames this side
either steps aside or agrees. A frame of any other shape (manual assignments, tags, bytes after
the body, a null where the schema allows none, a bool byte other than 0 or 1, a varint longer
than three bytes or padded, anything cut short) is not ours to judge: decode_request returns None
and the node takes the old path (the length guard, then kio), which serves or refuses it exactly
as before. A frame decode_request reads has had every length checked here, so the guard is
skipped for it (kio's reader must never see a length past the frame: see "the kio length guard"
in raft/aio/transport.py).

Request (after the size prefix; header v2, flexible body):

    api_key i16 = 19 | api_version i16 = 7 | correlation_id i32 | client_id i16 length + UTF-8 (-1 null)
    | header tags uvarint (0)
    | Topics uvarint(n + 1), each:
        Name compact string | NumPartitions i32 | ReplicationFactor i16
        | Assignments uvarint(0 + 1) (empty: anything else is kio's)
        | Configs uvarint(m + 1), each: Name compact string | Value compact nullable string | tags (0)
        | topic tags (0)
    | timeoutMs i32 | validateOnly bool (0 or 1) | tags (0)

Response (after the size prefix; header v1):

    correlation_id i32 | header tags (0)
    | ThrottleTimeMs i32 | Topics uvarint(n + 1), each:
        Name compact string | TopicId uuid (zeros when none) | ErrorCode i16
        | ErrorMessage compact nullable string | NumPartitions i32 | ReplicationFactor i16
        | Configs compact nullable array (null on a refused topic, empty on a created one: the
          controller returns no configs) | topic tags (0; TopicConfigErrorCode, tag 0, is never set)
    | tags (0)

Compact lengths are uvarint(n + 1), 0 meaning null. Lengths and counts below 0x80 (one byte) are
the common case and read inline.

TopicResult and CreateTopicsAnswer carry the attribute names of kio's response types, so
older_versions.from_served converts them down field by field as it does a kio answer, and code
that reads an answer (tests, the demo) reads them as it reads one; only a writer needs to know
(engine/node/node.py frames them with encode_response).
"""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import NamedTuple

from kio.schema.create_topics.v7 import request as kcreate_req
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from kraftlog.engine.protocol.apis import API_CREATE_TOPICS, CONTROLLER_APIS
from kraftlog.engine.records.wire import encode_uvarint

CREATE_TOPICS_VERSION = CONTROLLER_APIS[API_CREATE_TOPICS][0]  # the served version (apis.py's table)
_READER = entity_reader(CONTROLLER_APIS[API_CREATE_TOPICS][1])
_KEY = struct.Struct(">hhi")  # api_key, api_version, correlation_id
CREATE_TOPICS_V7_KEY = _KEY.pack(API_CREATE_TOPICS, CREATE_TOPICS_VERSION, 0)[:4]  # a request frame's first four bytes
_I16 = struct.Struct(">h")
_ASSIGNMENTS_AT = 4 + 2  # after a topic's name: NumPartitions i32, ReplicationFactor i16, then Assignments
_TOPIC_FIXED_BYTES = _ASSIGNMENTS_AT + 1  # ... and Assignments (empty: one byte)
_VALIDATE_ONLY_AT = 4  # after the topics: timeoutMs i32, validateOnly, tags
_TAIL_BYTES = _VALIDATE_ONLY_AT + 1 + 1
# the fewest bytes a topic (a config) takes: a count that cannot fit in what is left is the old
# path's to refuse (its guard says so), never looped over here
_TOPIC_MIN_BYTES = 1 + _TOPIC_FIXED_BYTES + 1 + 1  # Name "", fixed fields, Configs empty, tags
_CONFIG_MIN_BYTES = 3  # Name "", Value null, tags

_RESPONSE_HEAD = struct.Struct(">iBi")  # correlation_id, header tags (0), ThrottleTimeMs
_RESULT_AFTER_NAME = struct.Struct(">16sh")  # TopicId, ErrorCode
_RESULT_TAIL = struct.Struct(">ihBB")  # NumPartitions, ReplicationFactor, Configs (0 null, 1 empty), topic tags
# a created topic's whole result after its name: TopicId, ErrorCode, ErrorMessage null, NumPartitions,
# ReplicationFactor, Configs empty, tags (0): one pack per topic on the common path
_CREATED_AFTER_NAME = struct.Struct(">16shBihBB")
_SIZE = struct.Struct(">i")
_SMALL = [bytes((n,)) for n in range(0x80)]  # one-byte varints (a short name's length), made once
_NO_TOPIC_ID = bytes(16)  # kio writes a None TopicId as Kafka's Uuid.ZERO_UUID
_NO_VALUE = -1  # NumPartitions / ReplicationFactor of a refused topic: the schema's default


# ---- the answer's values ------------------------------------------------------------------------


class TopicResult(NamedTuple):
    """One topic of a CreateTopics answer: kio's CreatableTopicResult's fields (configs () for a
    created topic, None for a refused one; TopicConfigErrorCode is always 0)."""

    name: str
    topic_id: uuid.UUID | None
    error_code: ErrorCode
    error_message: str | None
    num_partitions: int = _NO_VALUE
    replication_factor: int = _NO_VALUE
    configs: tuple | None = None


class CreateTopicsAnswer(NamedTuple):
    """A CreateTopics v7 answer: kio's CreateTopicsResponse's fields (``throttle_time``: kio's
    timedelta, for older_versions' conversion)."""

    topics: tuple[TopicResult, ...]
    throttle_time_ms: int = 0

    @property
    def throttle_time(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.throttle_time_ms)


# ---- the request --------------------------------------------------------------------------------


class _NotOurs(Exception):
    """A frame in a shape this decoder leaves to the old path."""


def decode_request(frame) -> tuple[int, kcreate_req.CreateTopicsRequest] | None:
    """(correlation id, kio body) of a CreateTopics v7 request frame (no size prefix) in the shape
    above, else None (the old path decides). Every length is checked here against the frame,
    field by field, before kio's native reader sees any byte (its speed is why it still reads the
    values: ~20 us for 100 topics, where building them in Python took ~100)."""
    if type(frame) is not bytes:
        frame = bytes(frame)  # kio's reader takes bytes (inbound frames are; a view is copied once)
    try:
        body_at = _check(frame)
        body, size = _READER(frame, body_at)
    except Exception:  # noqa: BLE001 - cut short, another shape, or kio refusing what it reads (invalid
        return None  # UTF-8 in a name): the old path decides, and says why
    if body_at + size != len(frame):  # never, if _check walks what kio reads (the tests hold it so)
        return None
    return _KEY.unpack_from(frame, 0)[2], body


def _check(frame: bytes) -> int:
    """Where the body starts, of a request in the shape above that ends at the frame's end;
    _NotOurs (or an IndexError / struct.error past the end, a UnicodeDecodeError) for any other."""
    api_key, version, _ = _KEY.unpack_from(frame, 0)
    if api_key != API_CREATE_TOPICS or version != CREATE_TOPICS_VERSION:
        raise _NotOurs
    (client_len,) = _I16.unpack_from(frame, 8)
    if client_len < -1:
        raise _NotOurs
    pos = 10 + max(client_len, 0)
    end = len(frame)
    if client_len > 0:
        str(frame[10:pos], "utf-8")  # kio's header reader reads it as text: invalid UTF-8 is the old path's to refuse
    if frame[pos]:
        raise _NotOurs  # header tags
    body_at = pos = pos + 1
    count, pos = _uvarint(frame, pos)
    if count == 0 or (count - 1) * _TOPIC_MIN_BYTES > end - pos:
        raise _NotOurs  # null (not nullable), or more topics than the bytes left could hold
    for _ in range(count - 1):
        pos = _string(frame, pos, end)
        if frame[pos + _ASSIGNMENTS_AT] != 1:
            raise _NotOurs  # manual assignments (or null): kio's
        pos += _TOPIC_FIXED_BYTES
        configs, pos = _uvarint(frame, pos)
        if configs == 0 or (configs - 1) * _CONFIG_MIN_BYTES > end - pos:
            raise _NotOurs
        for _ in range(configs - 1):
            pos = _string(frame, pos, end)
            pos = _string(frame, pos, end) if frame[pos] else pos + 1  # Value: 0 is null
            if frame[pos]:
                raise _NotOurs  # config tags
            pos += 1
        if frame[pos]:
            raise _NotOurs  # topic tags
        pos += 1
    if frame[pos + _VALIDATE_ONLY_AT] > 1 or frame[pos + _TAIL_BYTES - 1] or pos + _TAIL_BYTES != end:
        raise _NotOurs  # a bool byte kio refuses, tags, or bytes after the body (the old path counts them)
    return body_at


def _uvarint(frame, pos: int) -> tuple[int, int]:
    """A length or count of at most three bytes, in its shortest form (what every client writes):
    a longer or padded varint is the old path's, so this walk and kio never read one differently."""
    b = frame[pos]
    if b < 0x80:
        return b, pos + 1
    c = frame[pos + 1]
    if c < 0x80:
        if c == 0:
            raise _NotOurs
        return (b & 0x7F) | c << 7, pos + 2
    d = frame[pos + 2]
    if d == 0 or d >= 0x80:
        raise _NotOurs
    return (b & 0x7F) | (c & 0x7F) << 7 | d << 14, pos + 3


def _string(frame, pos: int, end: int) -> int:
    """Past a compact string that is not null, checked to end inside the frame."""
    length, pos = _uvarint(frame, pos)
    stop = pos + length - 1
    if length == 0 or stop > end:
        raise _NotOurs  # null where the schema allows none, or a string past the end
    return stop


# ---- the response -------------------------------------------------------------------------------


def encode_response(correlation_id: int, answer: CreateTopicsAnswer) -> bytes:
    """The whole frame (size prefix included) answering with ``answer``: the bytes kio writes for
    the same CreateTopicsResponse v7."""
    topics = answer.topics
    parts = [_RESPONSE_HEAD.pack(correlation_id, 0, answer.throttle_time_ms), encode_uvarint(len(topics) + 1)]
    append = parts.append
    for name, topic_id, error_code, message, partitions, rf, configs in topics:
        data = name.encode()
        n = len(data) + 1
        append(_SMALL[n] if n < 0x80 else encode_uvarint(n))
        append(data)
        if configs:
            raise ValueError(f"CreateTopics result for {name!r} carries configs: encode_response writes none")
        topic_id = _NO_TOPIC_ID if topic_id is None else topic_id.bytes
        if message is None and configs is not None:  # a created topic: the common case, one pack
            append(_CREATED_AFTER_NAME.pack(topic_id, error_code, 0, partitions, rf, 1, 0))
            continue
        append(_RESULT_AFTER_NAME.pack(topic_id, error_code))
        if message is None:
            append(b"\x00")
        else:
            data = message.encode()
            append(encode_uvarint(len(data) + 1))
            append(data)
        append(_RESULT_TAIL.pack(partitions, rf, 0 if configs is None else 1, 0))
    append(b"\x00")  # the response's tags
    payload = b"".join(parts)
    return _SIZE.pack(len(payload)) + payload
