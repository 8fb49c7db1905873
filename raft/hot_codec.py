"""Fetch v17 and Produce v10, the messages of every commit, laid out by hand for the one shape
raft uses.

kio's generic writer and reader cost ~40-60 us and ~15-30 us a message (the etcd issue's
profile: kio and the conversions were ~40% of a commit's Python time: four Fetch round trips
and a Produce a commit); these take a few. kio stays the reference: the tests compare every byte written here with kio's
and every value read here with what the kio path reads. A frame of any other shape (several
topics or partitions, tags we do not know, a forgotten-topics list, bytes after the body, a
varint longer than we write) is not ours to judge: the decoders return None and the caller takes
kio's path, which serves or refuses it as before.

Request (after the size prefix; header v2, flexible body):

    api_key i16 = 1 | api_version i16 = 17 | correlation_id i32 | client_id i16 length + UTF-8 (-1 null)
    | header tags uvarint (0)
    MaxWaitMs i32 | MinBytes i32 | MaxBytes i32 | IsolationLevel i8 | SessionId i32 | SessionEpoch i32
    | Topics uvarint(1 + 1) | TopicId uuid | Partitions uvarint(1 + 1)
    | Partition i32 | CurrentLeaderEpoch i32 | FetchOffset i64 | LastFetchedEpoch i32
      | LogStartOffset i64 | PartitionMaxBytes i32 | partition tags (0, or tag 0 ReplicaDirectoryId uuid)
    | topic tags (0) | ForgottenTopicsData uvarint(0 + 1) | RackId compact string
    | tags: 0 ClusterId compact nullable string (when not null),
            1 ReplicaState{ReplicaId i32, ReplicaEpoch i64, tags} (when not (-1, -1))

Response (after the size prefix; header v1):

    correlation_id i32 | header tags (0)
    ThrottleTimeMs i32 | ErrorCode i16 | SessionId i32 | Responses uvarint(1 + 1) | TopicId uuid
    | Partitions uvarint(1 + 1)
    | PartitionIndex i32 | ErrorCode i16 | HighWatermark i64 | LastStableOffset i64 | LogStartOffset i64
      | AbortedTransactions compact nullable array (null) | PreferredReadReplica i32
      | Records compact nullable bytes | partition tags, each written only when not its default:
        0 DivergingEpoch{Epoch i32, EndOffset i64, tags}, 1 CurrentLeader{LeaderId i32, LeaderEpoch i32,
        tags}, 2 SnapshotId{EndOffset i64, Epoch i32, tags}
    | topic tags (0) | tags (0; NodeEndpoints is tag 0)

Produce request v10 (header v2 as above, api_key 0): TransactionalId compact nullable string (null)
    | Acks i16 | TimeoutMs i32 | TopicData uvarint(1 + 1) | Name compact string (__cluster_metadata)
    | PartitionData uvarint(1 + 1) | Index i32 (0) | Records compact nullable bytes | partition tags (0)
    | topic tags (0) | tags (0)

Produce response v10 (header v1): Responses uvarint(1 + 1) | Name compact string | PartitionResponses
    uvarint(1 + 1) | Index i32 | ErrorCode i16 | BaseOffset i64 | LogAppendTimeMs i64 (-1)
    | LogStartOffset i64 (-1) | RecordErrors uvarint(0 + 1) | ErrorMessage compact nullable string
    | partition tags: 0 CurrentLeader{LeaderId i32, LeaderEpoch i32, tags} (when not (-1, -1))
    | topic tags (0) | ThrottleTimeMs i32 | tags (0; NodeEndpoints is tag 0)

The client writes the Produce request and reads its response with the same layouts
(encode_produce_request, decode_produce_response); the leader reads and writes the other ends.

Compact lengths are uvarint(n + 1), 0 meaning null; a tagged field is uvarint tag | uvarint size |
value. Values that fit in one varint byte (< 0x80) are the common case and read inline.
"""

from __future__ import annotations

import functools
import struct

from kraftlog.engine.records.wire import decode_uvarint, encode_uvarint
from kraftlog.errors import UndecodableRecordError
from kraftlog.raft.messages import FetchRequest, FetchResponse
from kraftlog.raft.types import NO_EPOCH, NO_ID, Errors, OffsetAndEpoch
from kraftlog.raft.wire import (
    API_FETCH,
    API_PRODUCE,
    APIS,
    MAX_EPOCH,
    METADATA_TOPIC,
    METADATA_TOPIC_ID,
    PRODUCE_API,
    SIZE,
    BatchRun,
    ClientBatch,
    WireFormatError,
    check_epochs,
    client_records,
    encode_batches,
    error_of,
    split_batches,
)

# the fields wire.check_epochs walks in a Fetch request and response, checked here by hand
# (tests/test_hot_codec.py holds these equal to what it walks)
REQUEST_EPOCH_FIELDS = ("current_leader_epoch", "last_fetched_epoch")
RESPONSE_EPOCH_FIELDS = ("leader_epoch", "diverging_epoch", "snapshot_id")
FETCH_VERSION = APIS[FetchRequest].version  # the one version raft speaks (wire.py's table)
_KEY = struct.Struct(">hhi")  # api_key, api_version, correlation_id
FETCH_V17_KEY = _KEY.pack(API_FETCH, FETCH_VERSION, 0)[:4]  # a request frame's first four bytes
PRODUCE_VERSION = PRODUCE_API.version
PRODUCE_V10_KEY = _KEY.pack(API_PRODUCE, PRODUCE_VERSION, 0)[:4]
_I16 = struct.Struct(">h")
_REQUEST_FIXED = struct.Struct(">iiibii")  # MaxWaitMs, MinBytes, MaxBytes, IsolationLevel, SessionId, SessionEpoch
_REQUEST_PARTITION = struct.Struct(">iiqiqi")  # Partition .. PartitionMaxBytes
_REPLICA_STATE = struct.Struct(">iqB")  # ReplicaId, ReplicaEpoch, its tags (0)
_RESPONSE_HEAD = struct.Struct(">iBihi")  # correlation_id, header tags 0, ThrottleTimeMs, ErrorCode, SessionId
_RESPONSE_PARTITION = struct.Struct(">ihqqq")  # PartitionIndex, ErrorCode, HighWatermark, LSO, LogStartOffset
_I32 = struct.Struct(">i")
_DIVERGING = struct.Struct(">BBiqB")  # tag 0, size 13, Epoch, EndOffset, tags
_LEADER = struct.Struct(">BBiiB")  # tag 1, size 9, LeaderId, LeaderEpoch, tags
_SNAPSHOT = struct.Struct(">BBqiB")  # tag 2, size 13, EndOffset, Epoch, tags
_ONE_TOPIC = b"\x02" + METADATA_TOPIC_ID.bytes + b"\x02"  # one topic (the metadata topic), one partition
_PRODUCE_ONE_TOPIC = b"\x02" + bytes([len(METADATA_TOPIC) + 1]) + METADATA_TOPIC.encode() + b"\x02"  # by name
_PRODUCE_PARTITION = struct.Struct(">ihqqqB")  # Index, ErrorCode, BaseOffset, LogAppendTimeMs, LogStartOffset,
#                                                RecordErrors (empty: uvarint 1)
_PRODUCE_LEADER = struct.Struct(">BBBiiB")  # partition tags 1, tag 0, size 9, LeaderId, LeaderEpoch, its tags
_PRODUCE_TAIL = struct.Struct(">BiB")  # topic tags, ThrottleTimeMs, tags
_PRODUCE_HEAD = struct.Struct(">Bhi")  # TransactionalId (null: 0), Acks, TimeoutMs
_PRODUCE_ACKS_TIMEOUT = 2 + 4  # Acks i16, TimeoutMs i32: raft answers once committed, whatever they say
_CORRELATION = struct.Struct(">iB")  # a response header v1: correlation_id, tags (0)
_UUID_BYTES = 16
_DEFAULT_SESSION_EPOCH = -1  # FetchRequest.SessionEpoch's default: no fetch session
_NO_OFFSET = -1  # LastStableOffset's default, which raft leaves


def _compact_string(value: str) -> bytes:
    data = value.encode()
    return encode_uvarint(len(data) + 1) + data


# ---- requests -----------------------------------------------------------------------------------


def encode_fetch_request(correlation_id: int, client_id: str | None, request: FetchRequest) -> bytes:
    """The whole frame (size prefix included) of ``request``: the bytes kio would write."""
    client, tail = _fetch_request_ends(client_id, request.cluster_id, request.replica_id, request.rack)
    payload = b"".join((
        _KEY.pack(API_FETCH, FETCH_VERSION, correlation_id), client,
        _REQUEST_FIXED.pack(request.max_wait_ms, 0, request.max_bytes, 0, 0, _DEFAULT_SESSION_EPOCH),
        _ONE_TOPIC,
        _REQUEST_PARTITION.pack(0, request.current_leader_epoch, request.fetch_offset, request.last_fetched_epoch,
                                request.log_start_offset, request.max_bytes),
        tail))
    return SIZE.pack(len(payload)) + payload


@functools.lru_cache(maxsize=64)
def _fetch_request_ends(client_id: str | None, cluster_id: str | None, replica_id: int,
                        rack: str | None) -> tuple[bytes, bytes]:
    """(client id and header tags, everything after the partition) of a Fetch request: the same
    bytes on every Fetch a follower sends (only the offsets, epochs and correlation id move), so
    made once per sender rather than once a commit."""
    if client_id is None:
        client = b"\xff\xff"
    else:
        data = client_id.encode()
        client = _I16.pack(len(data)) + data
    tags = []
    if cluster_id is not None:
        value = _compact_string(cluster_id)
        tags.append(b"\x00" + encode_uvarint(len(value)) + value)
    if replica_id != NO_ID:  # ReplicaState{ReplicaId, ReplicaEpoch -1}; its default is (-1, -1)
        tags.append(b"\x01\x0d" + _REPLICA_STATE.pack(replica_id, -1, 0))
    tail = b"".join((
        b"\x00\x00\x01",  # partition tags, topic tags, no forgotten topics
        _compact_string(rack or ""),
        encode_uvarint(len(tags)), *tags))
    return client + b"\x00", tail  # the header's tags (none) end the client part


def decode_fetch_request(frame) -> tuple[int, int, FetchRequest] | None:
    """(correlation id, sender, request) of a Fetch v17 request frame (no size prefix) in the
    shape above, else None (kio's path decides). An epoch past MAX_EPOCH raises WireFormatError
    as on kio's path."""
    try:
        decoded = _decode_fetch_request(memoryview(frame))
    except (struct.error, IndexError, UnicodeDecodeError, UndecodableRecordError, _NotOurs):
        return None
    corr, request = decoded
    # the epochs of REQUEST_EPOCH_FIELDS, checked inline (wire.check_epochs' generic walk was ~2 us
    # of each of a commit's Fetches); it still raises, with its message, for one past MAX_EPOCH
    if request.current_leader_epoch > MAX_EPOCH or request.last_fetched_epoch > MAX_EPOCH:
        check_epochs(request, "FetchRequest")
    return corr, request.replica_id, request


class _NotOurs(Exception):
    """A frame in a shape these decoders leave to kio."""


def _byte(view: memoryview, pos: int, expected: int) -> int:
    if view[pos] != expected:
        raise _NotOurs
    return pos + 1


def _small_uvarint(view: memoryview, pos: int) -> tuple[int, int]:
    b = view[pos]
    if b >= 0x80:
        raise _NotOurs  # we never write a count or a short string this long
    return b, pos + 1


def _after_request_header(view: memoryview) -> int:
    """Where the body starts, after the client id and the header's tags (none)."""
    (client_len,) = _I16.unpack_from(view, 8)
    if client_len < -1:
        raise _NotOurs
    pos = 10 + max(client_len, 0)
    if client_len > 0:
        str(view[10:pos], "utf-8")  # kio reads it as text: invalid UTF-8 is kio's to refuse
    return _byte(view, pos, 0)  # header tags


def _decode_fetch_request(view: memoryview) -> tuple[int, FetchRequest]:
    api_key, version, corr = _KEY.unpack_from(view, 0)
    if api_key != API_FETCH or version != FETCH_VERSION:
        raise _NotOurs
    pos = _after_request_header(view)
    max_wait_ms, _, max_bytes, _, _, _ = _REQUEST_FIXED.unpack_from(view, pos)
    pos = _byte(view, pos + _REQUEST_FIXED.size, 2)  # one topic
    pos = _byte(view, pos + _UUID_BYTES, 2)  # its topic id (ignored, as on kio's path), one partition
    _, leader_epoch, fetch_offset, last_epoch, log_start, partition_max_bytes = \
        _REQUEST_PARTITION.unpack_from(view, pos)
    cluster_id, replica_id, rack = _fetch_request_tail(bytes(view[pos + _REQUEST_PARTITION.size:]))
    return corr, FetchRequest(cluster_id, replica_id, max_wait_ms, min(max_bytes, partition_max_bytes), leader_epoch,
                              fetch_offset, last_epoch, log_start, rack)


@functools.lru_cache(maxsize=64)
def _fetch_request_tail(tail: bytes) -> tuple[str | None, int, str | None]:
    """(cluster id, replica id, rack) from the bytes after a Fetch request's partition fields, to
    the frame's end: the same bytes on every Fetch of one sender (encode_fetch_request's
    _fetch_request_ends), so read once per sender. Raises _NotOurs (not cached) for any other shape."""
    view = memoryview(tail)
    if view[0] == 1:  # partition tags: only ReplicaDirectoryId (tag 0), which raft does not use
        pos = _byte(view, _byte(view, 1, 0), _UUID_BYTES) + _UUID_BYTES
    else:
        pos = _byte(view, 0, 0)
    pos = _byte(view, _byte(view, pos, 0), 1)  # topic tags, no forgotten topics
    rack_len, pos = _small_uvarint(view, pos)
    if rack_len == 0:
        raise _NotOurs  # RackId is not nullable
    rack = str(view[pos:pos + rack_len - 1], "utf-8")
    pos += rack_len - 1
    cluster_id, replica_id, pos = _fetch_request_tags(view, pos)
    if pos != len(view):
        raise _NotOurs  # trailing bytes: kio's path counts them
    return cluster_id, replica_id, rack or None


def _fetch_request_tags(view: memoryview, pos: int) -> tuple[str | None, int, int]:
    cluster_id, replica_id = None, NO_ID
    count, pos = _small_uvarint(view, pos)
    last_tag = -1
    for _ in range(count):
        tag, pos = _small_uvarint(view, pos)
        size, pos = _small_uvarint(view, pos)
        if tag <= last_tag:
            raise _NotOurs
        last_tag = tag
        end = pos + size
        if tag == 0:
            length, at = _small_uvarint(view, pos)
            if length == 0 or at + length - 1 != end:
                raise _NotOurs
            cluster_id = str(view[at:end], "utf-8")
        elif tag == 1 and size == _REPLICA_STATE.size:
            replica_id, _, state_tags = _REPLICA_STATE.unpack_from(view, pos)
            if state_tags:
                raise _NotOurs
        else:
            raise _NotOurs
        pos = end
    return cluster_id, replica_id, pos


# ---- responses ----------------------------------------------------------------------------------


def encode_fetch_response(correlation_id: int, response: FetchResponse) -> bytes:
    """The whole frame (size prefix included) answering with ``response``: the bytes kio would
    write. The records are copied once, into the frame (a run's straight from its view)."""
    tags = []
    div, snap = response.diverging_epoch, response.snapshot_id
    if div is not None and (div.epoch, div.offset) != (-1, -1):
        tags.append(_DIVERGING.pack(0, 13, div.epoch, div.offset, 0))
    if (response.leader_id, response.leader_epoch) != (-1, -1):
        tags.append(_LEADER.pack(1, 9, response.leader_id, response.leader_epoch, 0))
    if snap is not None and (snap.offset, snap.epoch) != (-1, -1):
        tags.append(_SNAPSHOT.pack(2, 13, snap.offset, snap.epoch, 0))
    batches = response.batches
    # a run (a leader's read: a view of the segment map) joins the frame as the view it is, so
    # its records are copied once, by the join below (bytes(run.raw) first was a second 8 MiB copy)
    records = (batches.raw if type(batches) is BatchRun else encode_batches(batches)) if batches else None
    parts = [
        _RESPONSE_HEAD.pack(correlation_id, 0, 0, int(response.error_code), 0),
        _ONE_TOPIC,
        _RESPONSE_PARTITION.pack(0, int(response.partition_error), response.high_watermark, _NO_OFFSET,
                                 response.log_start_offset),
        b"\x00",  # AbortedTransactions: null
        _I32.pack(response.preferred_read_replica),
        b"\x00" if records is None else encode_uvarint(len(records) + 1)]
    if records is not None:
        parts.append(records)
    parts.append(encode_uvarint(len(tags)))
    parts.extend(tags)
    parts.append(b"\x00\x00")  # topic tags, response tags
    size = sum(map(len, parts))
    return b"".join((SIZE.pack(size), *parts))


def decode_fetch_response(frame) -> FetchResponse | None:
    """The FetchResponse in a Fetch v17 response frame (no size prefix) in the shape above, else
    None (kio's path decides). Records that do not frame as batches, an error code raft does not
    know and an epoch past MAX_EPOCH raise WireFormatError, as on kio's path."""
    view = memoryview(frame)
    try:
        fields = _decode_fetch_response(view)
    except (struct.error, UndecodableRecordError, _NotOurs, IndexError):
        return None
    (error, partition_error, high_watermark, log_start, preferred, records, leader, div, snap) = fields
    batches = ()
    if records is not None and len(records):
        try:
            batches = split_batches(records, what="Fetch response records")
        except UndecodableRecordError as exc:
            raise WireFormatError(str(exc)) from None
    response = FetchResponse(error_of(error), error_of(partition_error), leader[0], leader[1], high_watermark,
                             log_start, div, snap, batches, preferred)
    # RESPONSE_EPOCH_FIELDS inline, as for the request
    if leader[1] > MAX_EPOCH or (div is not None and div.epoch > MAX_EPOCH) or \
            (snap is not None and snap.epoch > MAX_EPOCH):
        check_epochs(response, "FetchResponse")
    return response


def _decode_fetch_response(view: memoryview):
    _, header_tags, _, error, _ = _RESPONSE_HEAD.unpack_from(view, 0)
    if header_tags:
        raise _NotOurs
    pos = _byte(view, _RESPONSE_HEAD.size, 2)  # one topic
    pos = _byte(view, pos + _UUID_BYTES, 2)  # its id, one partition
    _, partition_error, high_watermark, _, log_start = _RESPONSE_PARTITION.unpack_from(view, pos)
    pos += _RESPONSE_PARTITION.size
    if view[pos] > 1:  # AbortedTransactions: null or empty (raft has no transactions)
        raise _NotOurs
    (preferred,) = _I32.unpack_from(view, pos + 1)
    pos += 1 + _I32.size
    length, pos = decode_uvarint(view, pos, 5)
    records = None
    if length:
        end = pos + length - 1
        if end > len(view):
            raise _NotOurs
        records, pos = view[pos:end], end
    leader, div, snap = (NO_ID, NO_EPOCH), None, None
    count, pos = _small_uvarint(view, pos)
    last_tag = -1
    for _ in range(count):
        tag = view[pos]
        if tag <= last_tag:
            raise _NotOurs
        last_tag = tag
        if tag == 0:
            _, size, epoch, end_offset, more = _DIVERGING.unpack_from(view, pos)
            div, pos = _offset_and_epoch(end_offset, epoch), pos + _DIVERGING.size
        elif tag == 1:
            _, size, leader_id, leader_epoch, more = _LEADER.unpack_from(view, pos)
            leader, pos = (leader_id, leader_epoch), pos + _LEADER.size
        elif tag == 2:
            _, size, end_offset, epoch, more = _SNAPSHOT.unpack_from(view, pos)
            snap, pos = _offset_and_epoch(end_offset, epoch), pos + _SNAPSHOT.size
        else:
            raise _NotOurs
        if more or size != (9 if tag == 1 else 13):
            raise _NotOurs
    pos = _byte(view, _byte(view, pos, 0), 0)  # topic tags, response tags
    if pos != len(view):
        raise _NotOurs
    return error, partition_error, high_watermark, log_start, preferred, records, leader, div, snap


def _offset_and_epoch(offset: int, epoch: int) -> OffsetAndEpoch | None:
    return None if epoch < 0 or offset < 0 else OffsetAndEpoch(offset, epoch)


# ---- Produce (the kraftlog client API, served by the leader) --------------------------------------


def decode_produce_request(frame) -> tuple[int, ClientBatch | list[bytes]] | None:
    """(correlation id, records as wire.client_records gives them) of a Produce v10 request frame (no size prefix) for
    __cluster_metadata partition 0 in the shape above, else None (kio's path decides, and
    refuses other topics and partitions). Records that do not decode raise WireFormatError, as
    on kio's path."""
    view = memoryview(frame)
    try:
        corr, records = _decode_produce_request(view)
    except (struct.error, IndexError, UnicodeDecodeError, UndecodableRecordError, _NotOurs):
        return None
    return corr, client_records(records)


def _decode_produce_request(view: memoryview):
    api_key, version, corr = _KEY.unpack_from(view, 0)
    if api_key != API_PRODUCE or version != PRODUCE_VERSION:
        raise _NotOurs
    pos = _after_request_header(view)
    pos = _byte(view, pos, 0) + _PRODUCE_ACKS_TIMEOUT  # TransactionalId: null
    end = pos + len(_PRODUCE_ONE_TOPIC)
    if view[pos:end] != _PRODUCE_ONE_TOPIC:
        raise _NotOurs
    (index,) = _I32.unpack_from(view, end)
    if index != 0:
        raise _NotOurs
    length, pos = decode_uvarint(view, end + 4, 5)
    records = None
    if length:
        records, pos = view[pos:pos + length - 1], pos + length - 1
        if pos > len(view):
            raise _NotOurs
    if view[pos:] != b"\x00\x00\x00":  # partition, topic and request tags; nothing after
        raise _NotOurs
    return corr, records


def encode_produce_request(correlation_id: int, client_id: str, records, timeout_ms: int) -> bytes:
    """The whole frame (size prefix included) of wire.produce_request's Produce v10 with
    ``records`` (whole batches, e.g. build_batch_from_values' bytes): the bytes kio would write.
    The client proposes through this; the leader reads it with decode_produce_request."""
    client = client_id.encode()
    payload = b"".join((
        _KEY.pack(API_PRODUCE, PRODUCE_VERSION, correlation_id), _I16.pack(len(client)), client, b"\x00",
        _PRODUCE_HEAD.pack(0, -1, timeout_ms),  # TransactionalId null, Acks -1, TimeoutMs
        _PRODUCE_ONE_TOPIC, _I32.pack(0), encode_uvarint(len(records) + 1), records,
        b"\x00\x00\x00"))  # partition, topic and request tags
    return SIZE.pack(len(payload)) + payload


def decode_produce_response(frame) -> tuple[int, tuple[Errors, int, int, int, str | None]] | None:
    """(correlation id, wire.produce_result's tuple) of a Produce v10 response frame (no size
    prefix) in encode_produce_response's shape, else None (kio's path decides)."""
    view = memoryview(frame)
    try:
        corr, header_tags = _CORRELATION.unpack_from(view, 0)
        pos = 5 + len(_PRODUCE_ONE_TOPIC)
        if header_tags or view[5:pos] != _PRODUCE_ONE_TOPIC:
            return None
        index, error, base_offset, append_time, log_start, record_errors = _PRODUCE_PARTITION.unpack_from(view, pos)
        if (append_time, log_start) != (-1, -1):  # what raft writes; kio reads the time as a datetime
            return None
        pos += _PRODUCE_PARTITION.size
        message, pos = _compact_nullable_string(view, pos)
        leader = (NO_ID, NO_EPOCH)
        if view[pos] == 1:  # the partition's one tag: CurrentLeader
            ntags, tag, size, leader_id, leader_epoch, leader_tags = _PRODUCE_LEADER.unpack_from(view, pos)
            if (tag, size, leader_tags) != (0, 9, 0):
                return None
            leader, pos = (leader_id, leader_epoch), pos + _PRODUCE_LEADER.size
        elif view[pos] == 0:
            pos += 1
        else:
            return None
        topic_tags, _, tags = _PRODUCE_TAIL.unpack_from(view, pos)
        if index != 0 or record_errors != 1 or topic_tags or tags or pos + _PRODUCE_TAIL.size != len(view):
            return None
        return corr, (error_of(error), base_offset, leader[0], leader[1], message)
    except (struct.error, IndexError, UnicodeDecodeError, WireFormatError, _NotOurs):
        return None


def _compact_nullable_string(view: memoryview, pos: int) -> tuple[str | None, int]:
    length, pos = _small_uvarint(view, pos)
    if not length:
        return None, pos
    end = pos + length - 1
    if end > len(view):
        raise _NotOurs
    return str(view[pos:end], "utf-8"), end


def encode_produce_response(correlation_id: int, error, base_offset: int, leader_id: int = NO_ID,
                            leader_epoch: int = NO_EPOCH, message: str | None = None) -> bytes:
    """The whole frame (size prefix included) of wire.produce_response's answer: kio's bytes."""
    leader = b"\x00" if (leader_id, leader_epoch) == (-1, -1) else \
        _PRODUCE_LEADER.pack(1, 0, 9, leader_id, leader_epoch, 0)
    payload = b"".join((
        _CORRELATION.pack(correlation_id, 0), _PRODUCE_ONE_TOPIC,
        _PRODUCE_PARTITION.pack(0, int(error), base_offset, -1, -1, 1),
        b"\x00" if message is None else _compact_string(message), leader, _PRODUCE_TAIL.pack(0, 0, 0)))
    return SIZE.pack(len(payload)) + payload
