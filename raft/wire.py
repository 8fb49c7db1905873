"""Kafka's wire protocol for raft's messages: frames, headers, and converters between the
values of raft/messages.py and kio's generated message types. No I/O here: the transport
(raft/aio/transport.py) moves the bytes; this module only turns them into values and back.

Frames (Kafka's):

    request  = size i32 | header v2 | body          size = bytes after the size field
    header v2 = request_api_key i16 | request_api_version i16 | correlation_id i32 |
                client_id (i16 length + UTF-8, -1 = null) | tagged fields (uvarint count, 0 here)
    response = size i32 | header v1 | body          header v1 = correlation_id i32 | tagged fields
                                                    (ApiVersions answers with header v0: no tags)

Every body is read and written by kio (``entity_reader`` / ``entity_writer``); nothing here
hand-codes a message. APIs and the one version each side speaks (Kafka 4.x, KIP-853/996):

    Vote 52 v2 (PreVote), BeginQuorumEpoch 53 v1, EndQuorumEpoch 54 v1, DescribeQuorum 55 v2,
    Fetch 1 v17, FetchSnapshot 59 v1, ApiVersions 18 v3-v4, Produce 0 v10 (the kraftlog client
    API: propose records to the leader, answered once they are committed).

The metadata partition is topic ``__cluster_metadata`` partition 0; Fetch v13+ names topics by
id, and the metadata topic's id is Kafka's fixed ``Uuid(0, 1)``.

Record batches travel as ``LogBatch`` values. A batch read from the engine log or from the
wire is a ``WireBatch``: it keeps its raw record-batch-v2 bytes, so a leader forwards what it
stored and a follower stores what it received without re-encoding, and its ``records`` decode
lazily (``LazyRecords``: the count comes from the header; the values only when iterated).
Control batches carry Kafka's control records (key ``version i16, type i16``; LeaderChange =
type 2 with the LeaderChangeMessage body); a plain ``LogBatch`` whose control payload is the
core's interim LeaderChange encoding (raft/control.py) is converted on the way out.
"""

from __future__ import annotations

import datetime
import functools
import io
import struct
import typing
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from kio.schema.api_versions.v0 import request as kav0_req
from kio.schema.api_versions.v0 import response as kav0_resp
from kio.schema.api_versions.v1 import request as kav1_req
from kio.schema.api_versions.v1 import response as kav1_resp
from kio.schema.api_versions.v2 import request as kav2_req
from kio.schema.api_versions.v2 import response as kav2_resp
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3.response import ApiVersion
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsRequestV4
from kio.schema.api_versions.v4.response import ApiVersion as ApiVersionV4
from kio.schema.api_versions.v4.response import ApiVersionsResponse as ApiVersionsResponseV4
from kio.schema.begin_quorum_epoch.v1 import request as kbegin_req
from kio.schema.begin_quorum_epoch.v1 import response as kbegin_resp
from kio.schema.describe_quorum.v0 import request as kdescribe0_req
from kio.schema.describe_quorum.v0 import response as kdescribe0_resp
from kio.schema.describe_quorum.v1 import request as kdescribe1_req
from kio.schema.describe_quorum.v1 import response as kdescribe1_resp
from kio.schema.describe_quorum.v2 import request as kdescribe_req
from kio.schema.describe_quorum.v2 import response as kdescribe_resp
from kio.schema.end_quorum_epoch.v1 import request as kend_req
from kio.schema.end_quorum_epoch.v1 import response as kend_resp
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17 import request as kfetch_req
from kio.schema.fetch.v17 import response as kfetch_resp
from kio.schema.fetch_snapshot.v1 import request as ksnap_req
from kio.schema.fetch_snapshot.v1 import response as ksnap_resp
from kio.schema.produce.v10 import request as kproduce_req
from kio.schema.produce.v10 import response as kproduce_resp
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.schema.vote.v2 import request as kvote_req
from kio.schema.vote.v2 import response as kvote_resp
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i16, i32, i64, u16

from kraftlog.engine.records import batch as batch_codec
from kraftlog.engine.records.layout import CONTROL_BIT, SMALL_RUN_BATCHES
from kraftlog.engine.records.metadata import encode_control
from kraftlog.errors import CorruptRecordError, UndecodableRecordError
from kraftlog.raft.control import LEADER_CHANGE_TYPE, decode_leader_change
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
from kraftlog.raft.types import NO_EPOCH, NO_ID, ClientBatch, Errors, LogBatch, OffsetAndEpoch, RaftError

METADATA_TOPIC = "__cluster_metadata"
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID = Uuid(0, 1)
METADATA_PARTITION = 0

API_PRODUCE, API_FETCH, API_API_VERSIONS = 0, 1, 18
API_VOTE, API_BEGIN_QUORUM_EPOCH, API_END_QUORUM_EPOCH, API_DESCRIBE_QUORUM = 52, 53, 54, 55
API_FETCH_SNAPSHOT = 59

SIZE = struct.Struct(">i")  # the frame's size prefix
_HEADER_KEY = struct.Struct(">hhi")  # request_api_key i16 | request_api_version i16 | correlation_id i32


class WireFormatError(RaftError):
    """A frame that does not decode as the Kafka message it claims to be (or an API/version we
    do not speak). The transport closes the connection it came on."""


# ---- the API table ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Api:
    key: int
    version: int
    request: type
    response: type


# our request type -> (api key, version, kio request type, kio response type)
APIS: dict[type, Api] = {
    VoteRequest: Api(API_VOTE, 2, kvote_req.VoteRequest, kvote_resp.VoteResponse),
    BeginQuorumEpochRequest: Api(API_BEGIN_QUORUM_EPOCH, 1, kbegin_req.BeginQuorumEpochRequest,
                                 kbegin_resp.BeginQuorumEpochResponse),
    EndQuorumEpochRequest: Api(API_END_QUORUM_EPOCH, 1, kend_req.EndQuorumEpochRequest,
                               kend_resp.EndQuorumEpochResponse),
    DescribeQuorumRequest: Api(API_DESCRIBE_QUORUM, 2, kdescribe_req.DescribeQuorumRequest,
                               kdescribe_resp.DescribeQuorumResponse),
    FetchRequest: Api(API_FETCH, 17, kfetch_req.FetchRequest, kfetch_resp.FetchResponse),
    FetchSnapshotRequest: Api(API_FETCH_SNAPSHOT, 1, ksnap_req.FetchSnapshotRequest,
                              ksnap_resp.FetchSnapshotResponse),
}
PRODUCE_API = Api(API_PRODUCE, 10, kproduce_req.ProduceRequest, kproduce_resp.ProduceResponse)
# ApiVersions v0-v2 too (non-flexible, request header v1): clients from before KIP-511 (aiokafka)
# ask at those versions and give up when the answer is not one they read
_API_VERSIONS = {0: (kav0_req.ApiVersionsRequest, kav0_resp.ApiVersionsResponse, kav0_resp.ApiVersion),
                 1: (kav1_req.ApiVersionsRequest, kav1_resp.ApiVersionsResponse, kav1_resp.ApiVersion),
                 2: (kav2_req.ApiVersionsRequest, kav2_resp.ApiVersionsResponse, kav2_resp.ApiVersion),
                 3: (ApiVersionsRequestV3, ApiVersionsResponseV3, ApiVersion),
                 4: (ApiVersionsRequestV4, ApiVersionsResponseV4, ApiVersionV4)}
# (api key, version) -> kio request type, for everything a node answers
REQUEST_TYPES: dict[tuple[int, int], type] = {(a.key, a.version): a.request for a in APIS.values()}
REQUEST_TYPES[(PRODUCE_API.key, PRODUCE_API.version)] = PRODUCE_API.request
for _v, (_req, _resp, _) in _API_VERSIONS.items():
    REQUEST_TYPES[(API_API_VERSIONS, _v)] = _req
# DescribeQuorum v0-v1 too: the metadata-quorum tools of Kafka 3.3-3.8 ask at those versions
DESCRIBE_QUORUM_OLDER = {0: kdescribe0_resp, 1: kdescribe1_resp}
REQUEST_TYPES[(API_DESCRIBE_QUORUM, 0)] = kdescribe0_req.DescribeQuorumRequest
REQUEST_TYPES[(API_DESCRIBE_QUORUM, 1)] = kdescribe1_req.DescribeQuorumRequest
_DESCRIBE_QUORUM_REQUESTS = (kdescribe0_req.DescribeQuorumRequest, kdescribe1_req.DescribeQuorumRequest,
                             kdescribe_req.DescribeQuorumRequest)
API_BY_KEY = {a.key: a for a in APIS.values()}


def supported_api_versions() -> list[tuple[int, int, int]]:
    """(api key, min version, max version) for ApiVersions answers."""
    rows = [(a.key, min(DESCRIBE_QUORUM_OLDER) if a.key == API_DESCRIBE_QUORUM else a.version, a.version)
            for a in APIS.values()]
    rows.append((API_PRODUCE, PRODUCE_API.version, PRODUCE_API.version))
    rows.append((API_API_VERSIONS, min(_API_VERSIONS), max(_API_VERSIONS)))
    return sorted(rows)


# ---- frames -------------------------------------------------------------------------------


def _write(entity) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def _read(kio_type, buf, pos: int, what: str):
    """Decode one kio entity at ``pos``; any failure is a WireFormatError naming the API."""
    try:
        value, size = entity_reader(kio_type)(buf, pos)
    except Exception as exc:  # kio raises many kinds (ValueError, IndexError, UnicodeDecodeError, ...)
        raise WireFormatError(f"malformed {what} at byte {pos}: {type(exc).__name__}: {exc}") from None
    return value, pos + size


def frame_request(api_key: int, version: int, correlation_id: int, client_id: str | None, body) -> bytes:
    """size | request header (v2 before a flexible body, v1 before an older one) | body"""
    header_type = RequestHeader if type(body).__flexible__ else RequestHeaderV1
    header = header_type(request_api_key=i16(api_key), request_api_version=i16(version),
                         correlation_id=i32(correlation_id), client_id=client_id)
    payload = _write(header) + _write(body)
    return SIZE.pack(len(payload)) + payload


def frame_response(correlation_id: int, body, *, header_v0: bool = False) -> bytes:
    header = (ResponseHeaderV0 if header_v0 else ResponseHeaderV1)(correlation_id=i32(correlation_id))
    payload = _write(header) + _write(body)
    return SIZE.pack(len(payload)) + payload


@dataclass(frozen=True, slots=True)
class RequestFrame:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: object
    trailing_bytes: int = 0  # bytes after a well-formed body: accepted, as Kafka does (parse_request)


def peek_request_header(frame) -> tuple[int, int, int]:
    """(api key, version, correlation id) of a request frame (without its size prefix)."""
    if len(frame) < _HEADER_KEY.size:
        raise WireFormatError(f"request of {len(frame)} bytes is shorter than a request header")
    return _HEADER_KEY.unpack_from(frame, 0)


def parse_request(frame) -> RequestFrame:
    """Decode a request frame (the bytes after the size prefix). Raises WireFormatError for an
    unknown API or version or a malformed header or body.

    Bytes after a well-formed body are accepted and counted in ``trailing_bytes``, as Kafka's
    RequestContext.parseRequest ignores them: librdkafka writes a 4-byte placeholder after
    Metadata v9+'s null topics array, for one."""
    api_key, version, _ = peek_request_header(frame)
    kio_type = REQUEST_TYPES.get((api_key, version))
    if kio_type is None:
        raise WireFormatError(f"unsupported API key {api_key} version {version}")
    header_type = RequestHeader if kio_type.__flexible__ else RequestHeaderV1
    header, pos = _read(header_type, frame, 0, "request header")
    body, pos = _read(kio_type, frame, pos, f"request body (API {api_key} v{version})")
    return RequestFrame(api_key, version, header.correlation_id, header.client_id, body, len(frame) - pos)


def response_correlation_id(frame) -> int:
    if len(frame) < 4:
        raise WireFormatError(f"response of {len(frame)} bytes is shorter than its correlation id")
    return SIZE.unpack_from(frame, 0)[0]


def parse_response(frame, kio_type, *, header_v0: bool = False):
    """Decode a response frame of the given kio type; returns (correlation id, body)."""
    header, pos = _read(ResponseHeaderV0 if header_v0 else ResponseHeaderV1, frame, 0, "response header")
    body, pos = _read(kio_type, frame, pos, f"{kio_type.__name__}")
    if pos != len(frame):
        raise WireFormatError(f"{len(frame) - pos} bytes after the body of {kio_type.__name__}")
    return header.correlation_id, body


# ---- record batches -----------------------------------------------------------------------


class LazyRecords(Sequence):
    """The record values of one raw batch, decoded on first use (CRC checked then).

    ``len()`` comes from the header's recordCount, so the core's offset arithmetic never
    decodes anything; iterating or indexing decodes the whole batch once into bytes values.
    """

    __slots__ = ("_raw", "_count", "_values")

    def __init__(self, raw, count: int):
        self._raw = raw
        self._count = count
        self._values: tuple[bytes, ...] | None = None

    def _decoded(self) -> tuple[bytes, ...]:
        if self._values is None:
            cols = batch_codec.decode_columns(self._raw, 0)
            data, offs, lens = cols.data, cols.value_offsets.tolist(), cols.value_lengths.tolist()
            self._values = tuple(b"" if n < 0 else bytes(data[o:o + n]) for o, n in zip(offs, lens, strict=True))
        return self._values

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i):
        return self._decoded()[i]

    def __iter__(self):
        return iter(self._decoded())

    def __eq__(self, other) -> bool:
        if isinstance(other, LazyRecords | tuple | list):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self):
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"LazyRecords({self._count} records)"


class WireBatch(LogBatch):
    """A LogBatch that keeps the record batch v2 bytes it came from (``raw``)."""

    __slots__ = ("raw",)

    @classmethod
    def of(cls, raw, base_offset: int, epoch: int, record_count: int, control: bool) -> WireBatch:
        """Wrap one whole batch whose header split_batches read."""
        b = cls(base_offset, epoch, LazyRecords(raw, record_count), control)
        object.__setattr__(b, "raw", raw)
        return b

    def size_bytes(self) -> int:
        """The batch's real size (its bytes), without decoding a record."""
        return len(self.raw)


_WHOLE = slice(None)


class BatchRun(Sequence):
    """Consecutive whole record batches v2 in one buffer, as a sequence of WireBatch made on
    demand. The header fields sit in rows from one native scan, so a caller that takes batches
    in bulk (raft's deliveries, a Fetch answer, a follower's append) builds no per-batch object:
    ``take`` counts what fits, ``raw`` is the bytes of all of them, ``[:k]`` a shorter run.

    Invariant: the six rows are lists when the run holds at most SMALL_RUN_BATCHES batches and
    numpy arrays when it holds more (``_rows`` keeps it). A commit's run is one small batch, and
    every reader walks a short run as a Python loop: lists spare it six numpy row views and the
    ``tolist()`` calls each reader made of them (numpy's fixed cost is ~1 us an operation)."""

    __slots__ = ("_view", "_bases", "_counts", "_epochs", "_attributes", "_positions", "_sizes")

    def __init__(self, view, bases, counts, epochs, attributes, positions, sizes):
        if type(bases) is not list or len(bases) > SMALL_RUN_BATCHES:  # split_batches' short rows are lists already
            bases, counts, epochs, attributes, positions, sizes = _rows(bases, counts, epochs, attributes, positions,
                                                                        sizes)
        self._view, self._bases, self._counts, self._epochs = view, bases, counts, epochs
        self._attributes, self._positions, self._sizes = attributes, positions, sizes

    def __len__(self) -> int:
        return len(self._bases)

    def __getitem__(self, i):
        if isinstance(i, slice):
            if i == _WHOLE or (i.start in (None, 0) and i.step is None and i.stop is not None
                               and i.stop >= len(self._bases)):
                return self  # every batch (a delivery of the whole run): the run is immutable
            return BatchRun(self._view, self._bases[i], self._counts[i], self._epochs[i], self._attributes[i],
                            self._positions[i], self._sizes[i])
        at, size = int(self._positions[i]), int(self._sizes[i])
        return WireBatch.of(self._view[at:at + size], int(self._bases[i]), int(self._epochs[i]),
                            int(self._counts[i]), bool(self._attributes[i] & CONTROL_BIT))

    def __iter__(self):
        view, make = self._view, WireBatch.of
        for base, epoch, count, attributes, at, size in zip(
                _listed(self._bases), _listed(self._epochs), _listed(self._counts), _listed(self._attributes),
                _listed(self._positions), _listed(self._sizes), strict=True):
            yield make(view[at:at + size], base, epoch, count, bool(attributes & CONTROL_BIT))

    def raws(self):
        """Each batch's bytes (views), for a reader that needs nothing else of them: no WireBatch made."""
        view = self._view
        for at, size in zip(_listed(self._positions), _listed(self._sizes), strict=True):
            yield view[at:at + size]

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None

    @property
    def raw(self) -> memoryview:
        """The bytes of every batch of the run (a view: no copy)."""
        if not len(self._bases):
            return self._view[0:0]
        return self._view[int(self._positions[0]):int(self._positions[-1] + self._sizes[-1])]

    @property
    def nbytes(self) -> int:
        """``len(self.raw)`` without making the view (the tail memo and the core's deliveries ask
        it of every run of a commit: a view and its slice bounds were ~2 us each time)."""
        if not len(self._bases):
            return 0
        return int(self._positions[-1] + self._sizes[-1] - self._positions[0])

    @property
    def base_offset(self) -> int:
        return int(self._bases[0])

    @property
    def next_offset(self) -> int:
        return int(self._bases[-1] + self._counts[-1])

    @property
    def record_count(self) -> int:
        if type(self._counts) is list:
            return sum(self._counts)
        return int(self._counts.sum())

    @property
    def epochs(self) -> list[int] | np.ndarray:
        """The batches' partition leader epochs: a list for a short run, an array for a long one."""
        return self._epochs

    @property
    def counts(self) -> list[int] | np.ndarray:
        """The batches' record counts: a list for a short run, an array for a long one."""
        return self._counts

    def take(self, end_offset: int, max_batches: int, max_records: int) -> int:
        """How many leading batches end at or below ``end_offset``, at most ``max_batches``, taking
        batches while fewer than ``max_records`` records were taken before each."""
        if type(self._bases) is list:
            return _take_loop(self._bases, self._counts, end_offset, max_batches, max_records)
        return self._take_vectorised(end_offset, max_batches, max_records)

    def _take_vectorised(self, end_offset: int, max_batches: int, max_records: int) -> int:
        bases, counts = np.asarray(self._bases), np.asarray(self._counts)
        ends = bases + counts
        k = min(int(np.searchsorted(ends, end_offset, side="right")), max_batches)
        before = np.cumsum(counts[:k]) - counts[:k]
        return int(np.searchsorted(before, max_records, side="left"))


def _rows(*rows) -> tuple:
    """BatchRun's rows in the shape its invariant asks: lists up to SMALL_RUN_BATCHES batches,
    arrays above (a short slice of a long run's arrays becomes lists, a long list arrays)."""
    if len(rows[0]) <= SMALL_RUN_BATCHES:
        return tuple(_listed(row) for row in rows)
    return tuple(row if type(row) is np.ndarray else np.asarray(row, dtype=np.int64) for row in rows)


def _listed(row) -> list[int]:
    return row if type(row) is list else row.tolist()


def _take_loop(bases: list, counts: list, end_offset: int, max_batches: int, max_records: int) -> int:
    taken = records = 0
    for base, count in zip(bases, counts, strict=True):
        if taken == max_batches or base + count > end_offset or records >= max_records:
            break
        taken += 1
        records += count
    return taken


def split_batches(buf, *, what: str = "records") -> BatchRun:
    """Cut a buffer of whole record batches v2 into a BatchRun of WireBatches (zero copy when
    ``buf`` is a memoryview). Checks framing only (magic, lengths, lastOffsetDelta + 1 ==
    recordCount, offsets continuing batch to batch, whole batches); CRCs are checked when the
    records are decoded or appended to the engine log.

    The headers are walked by the native scanner in one pass (a follower's 8 MiB Fetch answer
    holds ~100,000 one-record batches: a Python walk cost ~8 us a batch)."""
    view = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
    headers = batch_codec.split_headers(view)  # one pass; None: the scan below names the problem
    if headers is not None:
        # a commit's answer (one small batch): the rows as lists in one tolist() call, not six
        # numpy row views that BatchRun would turn into lists one by one (its invariant)
        return BatchRun(view, *(headers.tolist() if headers.shape[1] <= SMALL_RUN_BATCHES else headers))
    scan = batch_codec.scan_batches(view, 0, len(view), verify_crc=False)
    if scan.error_position is not None:
        raise CorruptRecordError(f"{what}: {scan.error_reason}", position=scan.error_position)
    bases, counts, positions = scan.base_offsets, scan.record_counts.astype(np.int64), scan.positions
    if len(bases) <= SMALL_RUN_BATCHES:
        broken = _first_broken_loop(bases.tolist(), counts.tolist(), scan.last_offsets.tolist())
    else:
        broken = _first_broken_vectorised(bases, counts, scan.last_offsets)
    if broken is not None:
        k, problem = broken
        raise CorruptRecordError(f"{what}: {problem}", position=int(positions[k]))
    return BatchRun(view, bases, counts, scan.partition_leader_epochs, scan.attributes, positions, scan.size_bytes)


# raft's batches hold one offset per record (nothing compacted) and continue each other: the first
# batch that breaks either rule, and how (the loop for short runs, numpy for long ones; both tested)


def _not_dense(count: int, base: int, last: int) -> str:
    return f"recordCount {count} with lastOffsetDelta {last - base}"


def _not_continuing(base: int, previous_end: int) -> str:
    return f"batch at offset {base} does not continue the one before (which ends at {previous_end})"


def _first_broken_loop(bases: list, counts: list, lasts: list) -> tuple[int, str] | None:
    end = None
    for k, (base, count, last) in enumerate(zip(bases, counts, lasts, strict=True)):
        if last - base + 1 != count:
            return k, _not_dense(count, base, last)
        if end is not None and base != end:
            return k, _not_continuing(base, end)
        end = base + count
    return None


def _first_broken_vectorised(bases, counts, lasts) -> tuple[int, str] | None:
    not_dense = lasts - bases + 1 != counts
    gaps = np.concatenate(([False], bases[1:] != bases[:-1] + counts[:-1]))
    broken = not_dense | gaps
    if not broken.any():
        return None
    k = int(broken.argmax())
    if not_dense[k]:
        return k, _not_dense(int(counts[k]), int(bases[k]), int(lasts[k]))
    return k, _not_continuing(int(bases[k]), int(bases[k - 1] + counts[k - 1]))


def leader_change_value(payload: bytes) -> bytes:
    """The core's interim LeaderChange payload (raft/control.py) as Kafka's LeaderChangeMessage
    v0 body (the value of a control record of type 2)."""
    lc = decode_leader_change(payload)
    _, value = encode_control(LEADER_CHANGE_TYPE, 0, {
        "LeaderId": lc.leader_id,
        "Voters": [{"VoterId": v} for v in lc.voters],
        "GrantingVoters": [{"VoterId": v} for v in lc.granting_voters],
    })
    return value


def encode_batch(batch: LogBatch) -> bytes:
    """One LogBatch as record batch v2 bytes (its raw bytes when it has them)."""
    raw = getattr(batch, "raw", None)
    if raw is not None:
        return raw
    if batch.control:
        if len(batch.records) != 1:
            raise ValueError(f"a control batch holds one record, got {len(batch.records)}")
        return batch_codec.build_control_batch(LEADER_CHANGE_TYPE, leader_change_value(batch.records[0]),
                                               base_offset=batch.base_offset,
                                               partition_leader_epoch=batch.epoch)
    return batch_codec.build_batch_from_values(list(batch.records), base_offset=batch.base_offset,
                                               partition_leader_epoch=batch.epoch)


def encode_batches(batches: Sequence[LogBatch]) -> bytes:
    if type(batches) is BatchRun:  # one slice of the bytes they came in
        return bytes(batches.raw)
    return b"".join(encode_batch(b) for b in batches)


# ---- requests: ours -> kio ------------------------------------------------------------------


_ERRORS_BY_CODE = {int(e): e for e in Errors}  # a dict lookup: Errors(code) costs ~0.4 us a call


def error_of(code) -> Errors:
    error = _ERRORS_BY_CODE.get(int(code))
    if error is None:
        raise WireFormatError(f"error code {int(code)} is not one raft knows")
    return error


def _code(e: Errors) -> ErrorCode:
    return ErrorCode(int(e))


def _one_partition(topics, what: str):
    # A damaged length decodes as a null array (None): refuse it like any other wrong shape.
    if not topics or len(topics) != 1 or not topics[0].partitions or len(topics[0].partitions) != 1:
        raise WireFormatError(f"{what}: expected exactly one topic with one partition")
    return topics[0], topics[0].partitions[0]


def _ms(td) -> int:
    # Integer arithmetic: total_seconds() * 1000 is a float (1.001 s -> 1000.9999...) and int() would
    # truncate it to the wrong millisecond.
    return td // datetime.timedelta(milliseconds=1)


def request_to_kio(body):
    """Our request value -> kio request entity."""
    t = type(body)
    if t is VoteRequest:
        p = kvote_req.PartitionData(partition_index=i32(0), replica_epoch=i32(body.replica_epoch),
                                    replica_id=i32(body.replica_id), replica_directory_id=None,
                                    voter_directory_id=None, last_offset_epoch=i32(body.last_offset_epoch),
                                    last_offset=i64(body.last_offset), pre_vote=body.pre_vote)
        return kvote_req.VoteRequest(cluster_id=body.cluster_id, voter_id=i32(body.voter_id),
                                     topics=(kvote_req.TopicData(topic_name=METADATA_TOPIC, partitions=(p,)),))
    if t is FetchRequest:
        p = kfetch_req.FetchPartition(partition=i32(0), current_leader_epoch=i32(body.current_leader_epoch),
                                      fetch_offset=i64(body.fetch_offset),
                                      last_fetched_epoch=i32(body.last_fetched_epoch),
                                      log_start_offset=i64(body.log_start_offset),
                                      partition_max_bytes=i32(body.max_bytes))
        return kfetch_req.FetchRequest(
            cluster_id=body.cluster_id, replica_state=kfetch_req.ReplicaState(replica_id=i32(body.replica_id)),
            max_wait=datetime.timedelta(milliseconds=body.max_wait_ms), min_bytes=i32(0),
            max_bytes=i32(body.max_bytes),
            topics=(kfetch_req.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=(p,)),), forgotten_topics_data=(),
            rack_id=body.rack or "")  # RackId is a non-null string: "" means no rack
    if t is BeginQuorumEpochRequest:
        p = kbegin_req.PartitionData(partition_index=i32(0), voter_directory_id=None,
                                     leader_id=i32(body.leader_id), leader_epoch=i32(body.leader_epoch))
        return kbegin_req.BeginQuorumEpochRequest(
            cluster_id=body.cluster_id, voter_id=i32(body.voter_id),
            topics=(kbegin_req.TopicData(topic_name=METADATA_TOPIC, partitions=(p,)),), leader_endpoints=())
    if t is EndQuorumEpochRequest:
        p = kend_req.PartitionData(partition_index=i32(0), leader_id=i32(body.leader_id),
                                   leader_epoch=i32(body.leader_epoch),
                                   preferred_candidates=tuple(
                                       kend_req.ReplicaInfo(candidate_id=i32(c), candidate_directory_id=None)
                                       for c in body.preferred_successors))
        return kend_req.EndQuorumEpochRequest(
            cluster_id=body.cluster_id,
            topics=(kend_req.TopicData(topic_name=METADATA_TOPIC, partitions=(p,)),), leader_endpoints=())
    if t is FetchSnapshotRequest:
        p = ksnap_req.PartitionSnapshot(partition=i32(0), current_leader_epoch=i32(body.current_leader_epoch),
                                        snapshot_id=ksnap_req.SnapshotId(end_offset=i64(body.snapshot_id.offset),
                                                                         epoch=i32(body.snapshot_id.epoch)),
                                        position=i64(body.position))
        return ksnap_req.FetchSnapshotRequest(
            cluster_id=body.cluster_id, replica_id=i32(body.replica_id), max_bytes=i32(body.max_bytes),
            topics=(ksnap_req.TopicSnapshot(name=METADATA_TOPIC, partitions=(p,)),))
    if t is DescribeQuorumRequest:
        return kdescribe_req.DescribeQuorumRequest(topics=(kdescribe_req.TopicData(
            topic_name=METADATA_TOPIC, partitions=(kdescribe_req.PartitionData(partition_index=i32(0)),)),))
    raise TypeError(f"not a raft request: {t.__name__}")


def request_from_kio(msg) -> tuple[int, object]:
    """kio request entity -> (the sending node's id, our request value). The sender comes from
    the message itself (candidate, leader or replica id), as Kafka's handlers read it; an
    admin's DescribeQuorum has none (NO_ID). A message whose shape is wrong (e.g. a null array
    from a damaged frame) raises WireFormatError."""
    try:
        sender, request = _request_from_kio(msg)
    except (TypeError, AttributeError, ValueError) as exc:
        raise WireFormatError(f"malformed {type(msg).__name__}: {exc}") from exc
    check_epochs(request, type(msg).__name__)
    return sender, request


# The largest epoch a peer may name. A node that adopts epoch e may need e + 1 (an election), and
# epochs are int32 on the wire and in the log: one request naming 2^31 - 1 would otherwise wedge
# the node for good (its next election cannot be written, and the epoch is persisted).
MAX_EPOCH = (1 << 31) - 2


def check_epochs(value, what: str) -> None:
    """WireFormatError when any epoch ``value`` carries (its *epoch* fields, snapshot ids and
    diverging epochs included) is above MAX_EPOCH."""
    for name in _epoch_fields(type(value)):
        field_value = getattr(value, name)
        if isinstance(field_value, OffsetAndEpoch):
            field_value = field_value.epoch
            name = f"{name}.epoch"
        if isinstance(field_value, int) and field_value > MAX_EPOCH:
            raise WireFormatError(f"{what}: {name} {field_value} is above the largest usable epoch {MAX_EPOCH}")


@functools.cache
def _epoch_fields(message_type: type) -> tuple[str, ...]:
    """The fields of a message type that may carry an epoch: named *epoch*, or an OffsetAndEpoch
    (a snapshot id, a diverging epoch), which may be None. Per type, once: a Fetch is checked
    on every round trip, and walking all its fields cost most of a microsecond."""
    hints = typing.get_type_hints(message_type) if hasattr(message_type, "__dataclass_fields__") else {}
    return tuple(name for name in getattr(message_type, "__dataclass_fields__", ())
                 if "epoch" in name or OffsetAndEpoch in typing.get_args(hints.get(name)) + (hints.get(name),))


def _request_from_kio(msg) -> tuple[int, object]:
    if isinstance(msg, kvote_req.VoteRequest):
        _, p = _one_partition(msg.topics, "Vote")
        return p.replica_id, VoteRequest(msg.cluster_id, msg.voter_id, p.replica_epoch, p.replica_id,
                                         p.last_offset_epoch, p.last_offset, p.pre_vote)
    if isinstance(msg, kfetch_req.FetchRequest):
        _, p = _one_partition(msg.topics, "Fetch")
        rid = msg.replica_state.replica_id
        return rid, FetchRequest(msg.cluster_id, rid, _ms(msg.max_wait), min(msg.max_bytes, p.partition_max_bytes),
                                 p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.log_start_offset,
                                 msg.rack_id or None)
    if isinstance(msg, kbegin_req.BeginQuorumEpochRequest):
        _, p = _one_partition(msg.topics, "BeginQuorumEpoch")
        return p.leader_id, BeginQuorumEpochRequest(msg.cluster_id, msg.voter_id, p.leader_id, p.leader_epoch)
    if isinstance(msg, kend_req.EndQuorumEpochRequest):
        _, p = _one_partition(msg.topics, "EndQuorumEpoch")
        return p.leader_id, EndQuorumEpochRequest(msg.cluster_id, p.leader_id, p.leader_epoch,
                                                  tuple(c.candidate_id for c in p.preferred_candidates))
    if isinstance(msg, ksnap_req.FetchSnapshotRequest):
        _, p = _one_partition(msg.topics, "FetchSnapshot")
        sid = OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        return msg.replica_id, FetchSnapshotRequest(msg.cluster_id, msg.replica_id, msg.max_bytes,
                                                    p.current_leader_epoch, sid, p.position)
    if isinstance(msg, _DESCRIBE_QUORUM_REQUESTS):
        _one_partition(msg.topics, "DescribeQuorum")
        return NO_ID, DescribeQuorumRequest()
    raise WireFormatError(f"not a raft request: {type(msg).__name__}")


# ---- responses: ours -> kio -----------------------------------------------------------------


def response_to_kio(body):
    """Our response value -> kio response entity."""
    t = type(body)
    if t is FetchResponse:
        div = body.diverging_epoch
        snap = body.snapshot_id
        p = kfetch_resp.PartitionData(
            partition_index=i32(0), error_code=_code(body.partition_error), high_watermark=i64(body.high_watermark),
            log_start_offset=i64(body.log_start_offset),
            diverging_epoch=(kfetch_resp.EpochEndOffset() if div is None else
                             kfetch_resp.EpochEndOffset(epoch=i32(div.epoch), end_offset=i64(div.offset))),
            current_leader=kfetch_resp.LeaderIdAndEpoch(leader_id=i32(body.leader_id),
                                                        leader_epoch=i32(body.leader_epoch)),
            snapshot_id=(kfetch_resp.SnapshotId() if snap is None else
                         kfetch_resp.SnapshotId(end_offset=i64(snap.offset), epoch=i32(snap.epoch))),
            aborted_transactions=None, preferred_read_replica=i32(body.preferred_read_replica),
            records=Records(encode_batches(body.batches)) if body.batches else None)
        return kfetch_resp.FetchResponse(
            throttle_time=datetime.timedelta(0), error_code=_code(body.error_code),
            responses=(kfetch_resp.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID, partitions=(p,)),))
    if t is VoteResponse:
        p = kvote_resp.PartitionData(partition_index=i32(0), error_code=_code(body.partition_error),
                                     leader_id=i32(body.leader_id), leader_epoch=i32(body.leader_epoch),
                                     vote_granted=body.vote_granted)
        return kvote_resp.VoteResponse(error_code=_code(body.error_code), topics=(
            kvote_resp.TopicData(topic_name=METADATA_TOPIC, partitions=(p,)),))
    if t is BeginQuorumEpochResponse:
        p = kbegin_resp.PartitionData(partition_index=i32(0), error_code=_code(body.partition_error),
                                      leader_id=i32(body.leader_id), leader_epoch=i32(body.leader_epoch))
        return kbegin_resp.BeginQuorumEpochResponse(error_code=_code(body.error_code), topics=(
            kbegin_resp.TopicData(topic_name=METADATA_TOPIC, partitions=(p,)),))
    if t is EndQuorumEpochResponse:
        p = kend_resp.PartitionData(partition_index=i32(0), error_code=_code(body.partition_error),
                                    leader_id=i32(body.leader_id), leader_epoch=i32(body.leader_epoch))
        return kend_resp.EndQuorumEpochResponse(error_code=_code(body.error_code), topics=(
            kend_resp.TopicData(topic_name=METADATA_TOPIC, partitions=(p,)),))
    if t is FetchSnapshotResponse:
        sid = body.snapshot_id or OffsetAndEpoch(-1, -1)
        p = ksnap_resp.PartitionSnapshot(
            index=i32(0), error_code=_code(body.partition_error),
            snapshot_id=ksnap_resp.SnapshotId(end_offset=i64(sid.offset), epoch=i32(sid.epoch)),
            current_leader=ksnap_resp.LeaderIdAndEpoch(leader_id=i32(body.leader_id),
                                                       leader_epoch=i32(body.leader_epoch)),
            size=i64(body.size), position=i64(body.position), unaligned_records=Records(body.data))
        return ksnap_resp.FetchSnapshotResponse(
            throttle_time=datetime.timedelta(0), error_code=_code(body.error_code),
            topics=(ksnap_resp.TopicSnapshot(name=METADATA_TOPIC, partitions=(p,)),))
    if t is DescribeQuorumResponse:
        return _describe_quorum_to_kio(body, kdescribe_resp)
    raise TypeError(f"not a raft response: {t.__name__}")


def _describe_quorum_to_kio(body: DescribeQuorumResponse, schema, version: int = 2):
    """DescribeQuorum in the kio types of ``schema`` (v0, v1 or v2 response module): v0 has no
    timestamps, v0-v1 no error message, replica directory or Nodes."""
    def state(r):
        fields = dict(replica_id=i32(r.replica_id), log_end_offset=i64(r.log_end_offset))
        if version >= 1:
            fields.update(last_fetch_timestamp=i64(r.last_fetch_ms), last_caught_up_timestamp=i64(r.last_caught_up_ms))
        if version >= 2:
            fields.update(replica_directory_id=None)
        return schema.ReplicaState(**fields)

    newest = version >= 2
    p = schema.PartitionData(
        partition_index=i32(0), error_code=_code(body.partition_error), **({"error_message": None} if newest else {}),
        leader_id=i32(body.leader_id), leader_epoch=i32(body.leader_epoch), high_watermark=i64(body.high_watermark),
        current_voters=tuple(map(state, body.voters)), observers=tuple(map(state, body.observers)))
    topics = (schema.TopicData(topic_name=METADATA_TOPIC, partitions=(p,)),)
    if not newest:
        return schema.DescribeQuorumResponse(error_code=_code(body.error_code), topics=topics)
    nodes = tuple(schema.Node(node_id=i32(n), listeners=(schema.Listener(name="CONTROLLER", host=host, port=u16(port)),))
                  for n, host, port in body.nodes)
    return schema.DescribeQuorumResponse(error_code=_code(body.error_code), error_message=None, topics=topics,
                                         nodes=nodes)


def response_from_kio(msg, request=None):
    """kio response entity -> our response value. ``request`` is the request it answers (Vote's
    PreVote is not echoed on the wire, so it is restored from there). A message whose shape is
    wrong raises WireFormatError."""
    try:
        response = _response_from_kio(msg, request)
    except (TypeError, AttributeError, ValueError) as exc:
        raise WireFormatError(f"malformed {type(msg).__name__}: {exc}") from exc
    check_epochs(response, type(msg).__name__)
    return response


def _response_from_kio(msg, request=None):
    if isinstance(msg, kfetch_resp.FetchResponse):
        _, p = _one_partition(msg.responses, "Fetch response")
        div = p.diverging_epoch
        snap = p.snapshot_id
        batches = ()
        if p.records:
            try:
                batches = split_batches(p.records, what="Fetch response records")
            except UndecodableRecordError as exc:
                raise WireFormatError(str(exc)) from None
        return FetchResponse(
            error_of(msg.error_code), error_of(p.error_code), p.current_leader.leader_id, p.current_leader.leader_epoch,
            p.high_watermark, p.log_start_offset,
            None if div.epoch < 0 or div.end_offset < 0 else OffsetAndEpoch(div.end_offset, div.epoch),
            None if snap.epoch < 0 or snap.end_offset < 0 else OffsetAndEpoch(snap.end_offset, snap.epoch),
            batches, p.preferred_read_replica)
    if isinstance(msg, kvote_resp.VoteResponse):
        _, p = _one_partition(msg.topics, "Vote response")
        pre_vote = bool(request is not None and request.pre_vote)
        return VoteResponse(error_of(msg.error_code), p.leader_id, p.leader_epoch, p.vote_granted, pre_vote,
                            error_of(p.error_code))
    if isinstance(msg, kbegin_resp.BeginQuorumEpochResponse):
        _, p = _one_partition(msg.topics, "BeginQuorumEpoch response")
        return BeginQuorumEpochResponse(error_of(msg.error_code), p.leader_id, p.leader_epoch, error_of(p.error_code))
    if isinstance(msg, kend_resp.EndQuorumEpochResponse):
        _, p = _one_partition(msg.topics, "EndQuorumEpoch response")
        return EndQuorumEpochResponse(error_of(msg.error_code), p.leader_id, p.leader_epoch, error_of(p.error_code))
    if isinstance(msg, ksnap_resp.FetchSnapshotResponse):
        _, p = _one_partition(msg.topics, "FetchSnapshot response")
        sid = p.snapshot_id
        return FetchSnapshotResponse(
            error_of(msg.error_code), error_of(p.error_code), p.current_leader.leader_id, p.current_leader.leader_epoch,
            None if sid.epoch < 0 or sid.end_offset < 0 else OffsetAndEpoch(sid.end_offset, sid.epoch),
            p.size, p.position, bytes(p.unaligned_records))
    if isinstance(msg, kdescribe_resp.DescribeQuorumResponse):
        if not msg.topics:  # a top-level error answers with no topics
            return DescribeQuorumResponse(error_of(msg.error_code), Errors.NONE)
        _, p = _one_partition(msg.topics, "DescribeQuorum response")

        def replicas(states):
            return tuple(ReplicaDescription(s.replica_id, s.log_end_offset, s.last_fetch_timestamp,
                                            s.last_caught_up_timestamp) for s in states)

        nodes = tuple((n.node_id, li.host, li.port) for n in msg.nodes for li in n.listeners[:1])
        return DescribeQuorumResponse(error_of(msg.error_code), error_of(p.error_code), p.leader_id, p.leader_epoch,
                                      p.high_watermark, replicas(p.current_voters), replicas(p.observers), nodes)
    raise WireFormatError(f"not a raft response: {type(msg).__name__}")


# ---- whole envelopes ----------------------------------------------------------------------------


def encode_request_envelope(env: Envelope, client_id: str | None) -> bytes:
    """An outbound request envelope as one frame (its correlation id on the wire)."""
    api = APIS[type(env.body)]
    return frame_request(api.key, api.version, env.correlation_id, client_id, request_to_kio(env.body))


def encode_response_body(correlation_id: int, body, version: int | None = None) -> bytes:
    """The response frame; ``version`` matters only for the APIs served at several versions
    (DescribeQuorum v0-v2), the others have one."""
    if version is not None and type(body) is DescribeQuorumResponse and version in DESCRIBE_QUORUM_OLDER:
        return frame_response(correlation_id, _describe_quorum_to_kio(body, DESCRIBE_QUORUM_OLDER[version], version))
    return frame_response(correlation_id, response_to_kio(body))


def decode_response_body(frame, request) -> tuple[int, object]:
    """(correlation id, our response value) of a response frame answering ``request``."""
    corr, msg = parse_response(frame, APIS[type(request)].response)
    return corr, response_from_kio(msg, request)


# ---- ApiVersions and Produce (the kraftlog client API) ------------------------------------------


def api_versions_response(version: int, rows: Sequence[tuple[int, int, int]] | None = None, **extra):
    """Our ApiVersions answer at ``version`` (0-4; always with response header v0): ``rows``
    (api key, min, max; default raft's) and, from v3, ``extra`` tagged fields."""
    _, resp_type, row_type = _API_VERSIONS[version]
    keys = tuple(row_type(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                 for k, lo, hi in (supported_api_versions() if rows is None else rows))
    if version >= 1:  # ThrottleTimeMs from v1
        extra["throttle_time"] = datetime.timedelta(0)
    return resp_type(error_code=ErrorCode.none, api_keys=keys, **extra)


def produce_request(values: Sequence[bytes], *, timeout_ms: int) -> object:
    """A Produce v10 request with acks=-1 carrying ``values`` as one record batch for the
    metadata partition: the kraftlog way to propose records."""
    records = Records(batch_codec.build_batch_from_values(list(values)))
    part = kproduce_req.PartitionProduceData(index=i32(METADATA_PARTITION), records=records)
    return kproduce_req.ProduceRequest(acks=i16(-1), timeout=datetime.timedelta(milliseconds=timeout_ms),
                                       topic_data=(kproduce_req.TopicProduceData(name=METADATA_TOPIC,
                                                                                 partition_data=(part,)),))


def produce_values(msg) -> ClientBatch | list[bytes]:
    """The records of a Produce request for the metadata partition (CRC checked), as the leader
    proposes them (client_records)."""
    topics = msg.topic_data
    if topics is None or len(topics) != 1 or topics[0].partition_data is None or len(topics[0].partition_data) != 1 or topics[0].name != METADATA_TOPIC \
            or topics[0].partition_data[0].index != METADATA_PARTITION:
        raise WireFormatError("Produce must name __cluster_metadata partition 0, and nothing else")
    return client_records(topics[0].partition_data[0].records)


def client_records(records) -> ClientBatch | list[bytes]:
    """A Produce request's records as the leader proposes them: a ClientBatch when they are one
    batch it may append as written, else their values (record_values: compressed, several
    batches, keys or headers, producer state... are unpacked and rebuilt, or refused)."""
    if records:
        count = batch_codec.pass_through_count(records)
        if count:
            return ClientBatch(bytes(records), count)
    return record_values(records)


def record_values(records) -> list[bytes]:
    """The record values of a Produce request's records (null or empty: none; CRC checked)."""
    if not records:
        return []
    try:
        values: list[bytes] = []
        for b in split_batches(records, what="Produce records"):
            values.extend(b.records)
    except UndecodableRecordError as exc:
        raise WireFormatError(str(exc)) from None
    return values


def produce_response(error: Errors, base_offset: int, leader_id: int = NO_ID, leader_epoch: int = NO_EPOCH,
                     message: str | None = None):
    part = kproduce_resp.PartitionProduceResponse(
        index=i32(METADATA_PARTITION), error_code=_code(error), base_offset=i64(base_offset), record_errors=(),
        error_message=message,
        current_leader=kproduce_resp.LeaderIdAndEpoch(leader_id=i32(leader_id), leader_epoch=i32(leader_epoch)))
    return kproduce_resp.ProduceResponse(responses=(kproduce_resp.TopicProduceResponse(
        name=METADATA_TOPIC, partition_responses=(part,)),))


def produce_result(msg) -> tuple[Errors, int, int, int, str | None]:
    """(error, base offset, leader id, leader epoch, message) of a Produce v10 response."""
    if not msg.responses or len(msg.responses) != 1 or not msg.responses[0].partition_responses \
            or len(msg.responses[0].partition_responses) != 1:
        raise WireFormatError("Produce response: expected exactly one topic with one partition")
    p = msg.responses[0].partition_responses[0]
    return (error_of(p.error_code), p.base_offset, p.current_leader.leader_id, p.current_leader.leader_epoch,
            p.error_message)
