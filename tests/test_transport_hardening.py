"""Proves that the transport is bounded and fault isolated, and that mutual TLS admits only
certificates signed by the cluster CA.

Frames (in process): the size prefix alone refuses an oversized or negative frame, before any
body byte is waited for; frames cut at arbitrary chunk boundaries come out whole and in order;
a peer that goes away mid-frame, a frame that fails to decode, and a handler that raises
something unexpected each close that connection with exactly one log line.

A running node (slow: one real `kraftlog node run` process): garbage, negative and oversized
size prefixes, truncated frames, an unknown API or version, bodies kio cannot decode,
hypothesis-fuzzed frames and mutated ApiVersions/Metadata requests,
each on its own connection; after each one a fresh ApiVersions request on another connection is
answered, a connection opened at the start still is, and the node's stderr holds exactly one
line for every connection it closed (none for the connections it answered and that closed
cleanly). Requests with bytes after a well-formed body are answered (as Kafka answers them).
Dozens of half-sent frames held open at once block nobody.

TLS (in process, RaftTransport pairs): certificates from a throwaway CA made with the openssl
CLI; a client with a CA-signed certificate talks, as do two transports to each other; a client
without a certificate, with one from another CA, speaking plain text, or silent past the
handshake timeout is refused with one log line, and the good connection goes on. The settings
module refuses missing, unreadable, mismatched and half-given files with TlsConfigError.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import logging
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from kraftlog.engine.cli import main as cli
from kraftlog.engine.node import tls
from kraftlog.engine.node.localcluster import LocalCluster, wait_until
from kraftlog.engine.node.raftnode import RaftClient
from kraftlog.engine.protocol.connection import ClientConnection, ClientError
from kraftlog.raft import wire
from kraftlog.raft.aio.transport import FrameConnection, RaftTransport, TransportConfig
from kraftlog.raft.messages import Envelope, VoteRequest, VoteResponse
from kraftlog.raft.types import Errors

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
TRANSPORT_LOGGER = "kraftlog.raft.transport"


# ---- frames, in process ------------------------------------------------------------------------------


class _FakeTransport:
    """The two things FrameConnection asks of a transport: write and close (and a peer name)."""

    def __init__(self):
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 4242) if name == "peername" else None


def _frame_conn(max_frame_bytes: int = 1024, handler=None):
    frames: list[bytes] = []
    conn = FrameConnection("inbound", max_frame_bytes, handler or (lambda c, f: frames.append(f)))
    conn.connection_made(_FakeTransport())
    return conn, frames


def _lines(caplog, needle: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == TRANSPORT_LOGGER and needle in r.getMessage()]


@pytest.mark.parametrize("size", [1025, 1 << 30, 0x7FFFFFFF, -1, -(1 << 31)])
def test_size_prefix_outside_bounds_closes_before_any_body(caplog, size):
    """A negative or above-maximum size closes the connection on the 4 prefix bytes alone: no
    body byte is awaited, nothing is buffered, no frame is delivered, one line is logged."""
    conn, frames = _frame_conn(1024)
    with caplog.at_level(logging.WARNING, TRANSPORT_LOGGER):
        conn.data_received(struct.pack(">i", size))
        conn.data_received(b"x" * 100)  # whatever follows is ignored
    assert conn.closed and conn.transport.closed
    assert frames == [] and conn.buffered_bytes == 0
    assert _lines(caplog, "127.0.0.1:4242") == [f"closing connection from 127.0.0.1:4242: frame size {size} "
                                                f"outside [0, 1024]"]


@settings(max_examples=60)
@given(payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=8), cuts=st.lists(st.integers(0, 2000)))
def test_frames_cut_anywhere_come_out_whole(payloads, cuts):
    """Frames (size i32 | payload) split at arbitrary byte positions are delivered whole, in order."""
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    conn, frames = _frame_conn(1024)
    edges = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    for a, b in zip(edges, edges[1:], strict=False):
        conn.data_received(stream[a:b])
    assert frames == payloads
    assert not conn.closed and conn.buffered_bytes == 0


class _SmallBufferConnection(FrameConnection):
    READ_BUFFER_BYTES = 16  # so frames of a few hundred bytes take the large-frame path


@settings(max_examples=60)
@given(payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=8),
       reads=st.lists(st.integers(1, 500), min_size=1))
def test_frames_read_into_the_buffer_in_any_sizes_come_out_whole(payloads, reads):
    """The socket's reads (get_buffer, then buffer_updated with what was read) of any size, with
    frames larger than the read buffer: each frame is delivered whole, in order, and a large
    frame's own buffer is dropped once it is delivered."""
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    frames: list[bytes] = []
    conn = _SmallBufferConnection("inbound", 1024, lambda c, f: frames.append(f))
    conn.connection_made(_FakeTransport())
    at, k = 0, 0
    while at < len(stream):
        room = conn.get_buffer(-1)
        assert len(room) > 0
        n = min(len(room), reads[k % len(reads)], len(stream) - at)
        room[:n] = stream[at:at + n]
        del room
        conn.buffer_updated(n)
        at, k = at + n, k + 1
    assert frames == payloads
    assert conn.buffered_bytes == 0 and len(conn._buf) == _SmallBufferConnection.READ_BUFFER_BYTES


def test_large_frame_over_a_socket_arrives_in_few_reads():
    """An 8 MiB frame over loopback (a Fetch answer at fetch_max_bytes) comes out whole, read
    into a buffer of its size: far fewer reads than asyncio's 256 KiB ones would take (32)."""
    payload = bytes(range(256)) * (8 * 4096)
    got: list[bytes] = []
    reads = 0

    class Counting(FrameConnection):
        def buffer_updated(self, nbytes):
            nonlocal reads
            reads += 1
            super().buffer_updated(nbytes)

    async def main():
        done = asyncio.get_running_loop().create_future()
        server = await asyncio.get_running_loop().create_server(
            lambda: Counting("inbound", 16 << 20, lambda c, f: (got.append(f), done.set_result(None))),
            "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", len(payload)) + payload)
        await writer.drain()
        await asyncio.wait_for(done, 10)
        writer.close()
        server.close()

    asyncio.run(main())
    assert got == [payload]
    assert 0 < reads < 32


def test_data_before_connection_made_waits_for_the_transport():
    """Bytes delivered before connection_made (TLS via start_tls) are parsed once it comes."""
    frames: list[bytes] = []
    conn = FrameConnection("inbound", 1024, lambda c, f: frames.append(f))
    conn.data_received(struct.pack(">i", 3) + b"abc" + struct.pack(">i", 1))
    assert frames == []
    conn.connection_made(_FakeTransport())
    assert frames == [b"abc"]
    conn.data_received(b"z")
    assert frames == [b"abc", b"z"]


@pytest.mark.parametrize("lend", [False, True])
def test_a_large_frame_is_lent_as_a_view_only_when_asked(lend):
    """With lend_large_frames (a peer link's responses), a frame that fills a buffer of its own
    comes out as a read-only view of it, equal to the payload and unchanged by what the
    connection reads next (that buffer is never refilled); small frames, and every frame without
    the option, come out as bytes."""
    frames: list = []
    conn = FrameConnection("to a peer", 1 << 22, lambda c, f: frames.append(f), lend_large_frames=lend)
    conn.connection_made(_FakeTransport())
    large = bytes(range(256)) * 1000  # 256,000 bytes: more than READ_BUFFER_BYTES
    conn.data_received(struct.pack(">i", 3) + b"abc" + struct.pack(">i", len(large)) + large[:100_000])
    conn.data_received(large[100_000:])
    conn.data_received(struct.pack(">i", len(large)) + bytes(len(large)))  # the next frame: zeros
    assert [bytes(f) for f in frames] == [b"abc", large, bytes(len(large))]
    assert type(frames[0]) is bytes
    if lend:
        assert type(frames[1]) is memoryview and frames[1].readonly
    else:
        assert type(frames[1]) is bytes
    assert bytes(frames[1]) == large  # still the first frame's bytes after the second was read


def test_a_half_read_answer_is_reported_until_it_is_whole():
    """RaftTransport.receiving_response says whether an answer on a peer link is partly read
    (the driver holds its next delivery piece back meanwhile): not before a byte came, yes
    from the first bytes of a frame on, no again once the frame was cut out."""
    transport = RaftTransport(1, {1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2), 3: ("127.0.0.1", 3)})
    conn, frames = _frame_conn(max_frame_bytes=1 << 20)
    assert not transport.receiving_response()  # no connection yet
    transport.links[3].conn = conn
    assert not transport.receiving_response()
    frame = struct.pack(">i", 200_000) + bytes(200_000)
    conn.data_received(frame[:2])
    assert transport.receiving_response()  # a prefix, not yet whole
    conn.data_received(frame[2:150_000])
    assert transport.receiving_response() and frames == []
    conn.data_received(frame[150_000:])
    assert len(frames) == 1 and not transport.receiving_response()


@pytest.mark.parametrize("received,want", [(b"\x00\x00", 4), (struct.pack(">i", 10) + b"abc", 14)])
def test_peer_gone_mid_frame_logs_once(caplog, received, want):
    """EOF inside a size prefix or a body: one line saying how much of the frame had come."""
    conn, frames = _frame_conn()
    with caplog.at_level(logging.WARNING, TRANSPORT_LOGGER):
        conn.data_received(received)
        conn.connection_lost(None)
    assert frames == []
    assert _lines(caplog, "4242") == [f"closing connection from 127.0.0.1:4242: closed by the peer in the middle "
                                      f"of a frame ({len(received)} of {want} bytes)"]


def test_clean_close_between_frames_is_silent(caplog):
    """A peer that closes after whole frames is normal: no line."""
    conn, frames = _frame_conn()
    with caplog.at_level(logging.DEBUG, TRANSPORT_LOGGER):
        conn.data_received(struct.pack(">i", 2) + b"ok")
        conn.connection_lost(None)
    assert frames == [b"ok"] and _lines(caplog, "4242") == []


def test_handler_errors_close_only_that_connection(caplog):
    """WireFormatError -> WARNING, anything else -> ERROR naming the type; either way one line,
    the connection closes, and the frames after the bad one in the same read are not handled."""
    seen = []

    def handler(conn, frame):
        seen.append(frame)
        if frame == b"bad":
            raise wire.WireFormatError("bad frame")
        if frame == b"bug":
            raise TypeError("object of type 'NoneType' has no len()")

    with caplog.at_level(logging.DEBUG, TRANSPORT_LOGGER):
        for bad, level in ((b"bad", logging.WARNING), (b"bug", logging.ERROR)):
            seen.clear()
            conn, _ = _frame_conn(handler=handler)
            conn.data_received(b"".join(struct.pack(">i", len(p)) + p for p in (b"ok", bad, b"never")))
            assert seen == [b"ok", bad] and conn.closed
            lines = [r for r in caplog.records if r.levelno >= logging.WARNING and "closing" in r.getMessage()]
            assert len(lines) == 1 and lines[0].levelno == level
            assert ("unexpected TypeError" in lines[0].getMessage()) == (bad == b"bug")
            conn.connection_lost(None)  # the close that follows adds no second line
            assert len([r for r in caplog.records if "closing" in r.getMessage()]) == 1
            caplog.clear()


def test_transport_config_refuses_a_useless_maximum():
    """max_frame_bytes below a request header's size cannot work: refused at construction."""
    with pytest.raises(ValueError, match="max_frame_bytes"):
        TransportConfig(max_frame_bytes=8)
    assert RaftTransport(1, {}, TransportConfig(max_frame_bytes=4096)).config.max_frame_bytes == 4096


def test_unencodable_response_closes_only_its_connection(caplog):
    """A response the core built with a value its wire type cannot hold (an epoch past i32)
    does not raise into the driver: that requester's connection closes, with the traceback
    logged, and another requester is answered."""
    from kio.schema.describe_quorum.v2 import response as kdescribe_resp

    from kraftlog.raft.messages import DescribeQuorumRequest, DescribeQuorumResponse

    async def scenario():
        server = RaftTransport(1, {})
        requests: list[Envelope] = []
        server.on_envelope = requests.append
        port = await server.start()
        api = wire.APIS[DescribeQuorumRequest]
        body = wire.request_to_kio(DescribeQuorumRequest())
        conns = [ClientConnection("127.0.0.1", port) for _ in range(2)]
        try:
            for c in conns:
                await c.open()
            pending = [c.request(api.key, api.version, body, kdescribe_resp.DescribeQuorumResponse) for c in conns]
            for _ in range(100):
                if len(requests) == 2:
                    break
                await asyncio.sleep(0.01)
            bad, good = requests
            server.send(Envelope(1, bad.source, bad.correlation_id,
                                 DescribeQuorumResponse(Errors.NONE, Errors.NONE, 1, 2**31)))  # must not raise
            server.send(Envelope(1, good.source, good.correlation_id,
                                 DescribeQuorumResponse(Errors.NONE, Errors.NONE, 1, 7)))
            with pytest.raises(ClientError):
                await asyncio.wait_for(pending[0], 5)
            answer = await asyncio.wait_for(pending[1], 5)
            assert answer.topics[0].partitions[0].leader_epoch == 7
        finally:
            for c in conns:
                await c.close()
            await server.close()

    with caplog.at_level(logging.ERROR, TRANSPORT_LOGGER):
        asyncio.run(scenario())
    (record,) = [r for r in caplog.records if "cannot encode" in r.getMessage()]
    assert record.exc_info is not None


def test_trailing_bytes_are_counted_and_logged_at_debug(caplog):
    """An ApiVersions request with 4 bytes after its body is answered; the transport counts it
    (requests_with_trailing_bytes, exported as a node metric) and logs one DEBUG line."""

    async def scenario():
        server = RaftTransport(1, {})
        port = await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_with_trailing(_api_versions_frame(9), b"\x00\x00\x00\x00"))
            await writer.drain()
            size, correlation_id = struct.unpack(">ii", await asyncio.wait_for(reader.readexactly(8), 30))
            writer.close()
            return correlation_id, server.requests_with_trailing_bytes, server.frames_rejected
        finally:
            await server.close()

    with caplog.at_level(logging.DEBUG, TRANSPORT_LOGGER):
        assert asyncio.run(scenario()) == (9, 1, 0)
    assert [r.levelno for r in caplog.records if "4 bytes after the body of API 18" in r.getMessage()] == [logging.DEBUG]


def test_a_produce_hot_codec_reads_skips_the_kio_guard_and_any_other_is_guarded(monkeypatch):
    """The kio length guard walks only frames kio will read: a Produce v10 in hot_codec's shape is
    read by hot_codec (which checks its own lengths) and not walked; one it leaves to kio (here
    with trailing bytes) is walked before kio reads it; and a subclass that reads requests its own
    way (NodeTransport refuses Produce after reading it with kio) gets every Produce walked first."""
    from kraftlog.engine.records import batch as batch_codec
    from kraftlog.raft import hot_codec
    from kraftlog.raft.aio import transport as transport_module

    walked = []
    guard = transport_module.check_request_lengths
    monkeypatch.setattr(transport_module, "check_request_lengths", lambda frame: walked.append(1) or guard(frame))
    frame = hot_codec.encode_produce_request(4, "c", batch_codec.build_batch_from_values([b"v"]), 500)

    taken: list = []  # what reached the handler

    class Refusing(RaftTransport):
        def _on_request(self, conn, frame):
            taken.append("refused")

    for transport_type, data, want in ((RaftTransport, frame, 0), (RaftTransport, _with_trailing(frame, b"\0"), 1),
                                       (Refusing, frame, 1)):
        server, taken[:], walked[:] = transport_type(1, {}), [], []
        server.on_produce = lambda values, reply: taken.append(list(values))
        conn = server._new_inbound()
        conn.transport = type("Sink", (), {"write": lambda self, data: None})()
        conn.data_received(data)
        assert not conn.closed and len(walked) == want, (transport_type, want)
        assert taken == (["refused"] if transport_type is Refusing else [[b"v"]])


# ---- the kio length guard -------------------------------------------------------------------------------


def _served_types() -> list[tuple[int, int, type, type]]:
    """(api key, version, kio request type, kio response type) of everything a node answers."""
    from kraftlog.engine.node.node import NODE_CONTROLLER_APIS

    rows = {(a.key, a.version): (a.request, a.response) for a in wire.APIS.values()}
    rows[(wire.PRODUCE_API.key, wire.PRODUCE_API.version)] = (wire.PRODUCE_API.request, wire.PRODUCE_API.response)
    for v, (req, resp, _) in wire._API_VERSIONS.items():
        rows[(18, v)] = (req, resp)
    for key, (version, req, resp) in NODE_CONTROLLER_APIS.items():
        rows[(key, version)] = (req, resp)
    return [(k, v, req, resp) for (k, v), (req, resp) in sorted(rows.items())]


SERVED = _served_types()
# kio's Records (record batches as bytes) has no strategy of its own; any bytes make a frame
st.register_type_strategy(Records, st.binary(max_size=40).map(Records))


def _encode(kio_type, value) -> bytes | None:
    out = io.BytesIO()
    try:
        entity_writer(kio_type)(out, value)
    except Exception:  # noqa: BLE001 - a generated value kio cannot write (out of its range): not a frame
        return None
    return out.getvalue()


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_length_guard_walks_valid_frames_exactly_as_kio_reads_them(data):
    """Every request a node serves and every response type, generated by hypothesis from kio's
    own types and written by kio: the guard accepts it and ends where kio's reader ends."""
    from kraftlog.raft.aio.transport import check_request_lengths, check_response_lengths

    key, version, req_type, resp_type = data.draw(st.sampled_from(SERVED))
    request = data.draw(st.from_type(req_type))
    body = _encode(req_type, request)
    assume(body is not None)
    frame = wire.frame_request(key, version, 5, data.draw(st.none() | st.text(max_size=5)), request)[4:]
    end = check_request_lengths(frame)
    header, pos = entity_reader(RequestHeaderV2 if req_type.__flexible__ else RequestHeaderV1)(frame, 0)
    _, size = entity_reader(req_type)(frame, pos)
    assert end == pos + size == len(frame)

    response = data.draw(st.from_type(resp_type))
    assume(_encode(resp_type, response) is not None)
    header_v0 = key == 18
    frame = wire.frame_response(9, response, header_v0=header_v0)[4:]
    assert check_response_lengths(frame, resp_type, header_v0=header_v0) == len(frame)


_CRASH_FUZZ = r'''
import random, struct, sys
from kio import index
from kio.serial import entity_reader
from kio.schema.request_header.v2.header import RequestHeader
from kraftlog.raft import wire
from kraftlog.raft.aio.transport import check_request_lengths
corpus = [bytes.fromhex(line) for line in open(sys.argv[1]).read().split()]
rng = random.Random(int(sys.argv[2]))
# huge lengths/counts as uvarints and as i16/i32 (kio reserves memory from them)
big = [b"\xff\xff\xff\xff\x0f", b"\xb1\x9b\xbf\xad\x75", b"\x80\x80\x80\x80\x08", b"\xff\xff\xff\x7f", b"\x7f\xff\xff\xff"]
refused = parsed = kio_raised = 0
for _ in range(int(sys.argv[3])):
    f = bytearray(rng.choice(corpus))
    for _ in range(rng.randrange(1, 4)):
        pos = rng.randrange(4, len(f) + 1)  # the api key and version stay: the frame keeps its type
        if rng.random() < 0.5:
            f[pos:pos + rng.randrange(0, 6)] = rng.choice(big)
        elif pos < len(f):
            f[pos] = rng.randrange(256)
    if rng.random() < 0.2:
        del f[rng.randrange(4, len(f) + 1):]
    f = bytes(f)
    try:
        check_request_lengths(f)
    except wire.WireFormatError:
        refused += 1
        continue
    try:
        header, pos = entity_reader(RequestHeader)(f, 0)
        entity_reader(index.load_request_schema(*struct.unpack_from(">hh", f, 0)))(f, pos)
        parsed += 1
    except Exception:
        kio_raised += 1
print(refused, parsed, kio_raised)
'''


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
def test_guarded_kio_never_aborts_on_mutated_frames(tmp_path):
    """In a child process (an abort cannot be caught in this one): valid frames of every served
    API with huge varint/i32 lengths and random bytes spliced in anywhere; every frame the guard
    lets through is read by kio, which may raise but must not kill the process. A control run
    shows that the same kind of frame, unguarded, does kill it (so the test can fail)."""
    corpus = []
    for key, version, req_type, _ in SERVED:
        value = st.from_type(req_type).example()
        if _encode(req_type, value) is not None:
            corpus.append(wire.frame_request(key, version, 1, "fuzz", value)[4:].hex())
    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_text("\n".join(corpus))
    script = tmp_path / "fuzz.py"
    script.write_text(_CRASH_FUZZ)
    run = subprocess.run([sys.executable, str(script), str(corpus_file), "7", "12000"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, f"kio aborted behind the guard: {run.stderr[-2000:]}"
    refused, parsed, kio_raised = map(int, run.stdout.split())
    assert refused > 1000 and kio_raised > 500, (refused, parsed, kio_raised)  # both sides of the guard ran

    control = subprocess.run([sys.executable, "-c", (
        "import struct\nfrom kio.serial import entity_reader\n"
        "from kio.schema.metadata.v12.request import MetadataRequest\n"
        "entity_reader(MetadataRequest)(b'\\xb1\\x9b\\xbf\\xadu)P=\\xdf\\x90QU\\x9e', 0)")],
        capture_output=True, timeout=60)
    assert control.returncode < 0, ("kio no longer aborts on a huge array length: the length guard in "
                                    "raft/aio/transport.py may be retired")


# ---- a running node ---------------------------------------------------------------------------------------


def _api_versions_frame(correlation_id: int) -> bytes:
    return wire.frame_request(18, 3, correlation_id, "hardening-test",
                              ApiVersionsRequest(client_software_name="t", client_software_version="0"))


def _metadata_frame(correlation_id: int) -> bytes:
    return wire.frame_request(3, 12, correlation_id, "hardening-test", md_req.MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))


def _raw_request(api_key: int, version: int, body: bytes) -> bytes:
    """size | request header v2 (key, version, correlation 1, null client id, no tags) | body"""
    payload = struct.pack(">hhih", api_key, version, 1, -1) + b"\x00" + body
    return struct.pack(">i", len(payload)) + payload


def _with_trailing(frame: bytes, extra: bytes) -> bytes:
    return struct.pack(">i", len(frame) - 4 + len(extra)) + frame[4:] + extra


class _OneNode(LocalCluster):
    def command(self, i: int, listen_fd: int) -> list[str]:
        return [sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd)]


class _Node:
    """One running node plus helpers that talk to it with blocking sockets."""

    def __init__(self, cluster: _OneNode):
        self.cluster = cluster
        self._since: dict[int, int] = {}  # port -> length of the node's stderr when we connected from it
        self.address = cluster.addresses[1]
        self.keeper = socket.create_connection(self.address)  # open for the whole module
        self.keeper.settimeout(5)
        self.served = self.api_versions(self.keeper, 1)  # (api key, min version, max version)
        self.wait_caught_up()

    def wait_caught_up(self) -> None:
        """A starting node's broker answers Metadata only after Kafka's initial catch-up: the
        module's tests start from a node that answers it (on a connection that waits)."""
        with socket.create_connection(self.address) as s:
            s.settimeout(120)
            s.sendall(_metadata_frame(2))
            (size,) = struct.unpack(">i", _recv_exactly(s, 4))
            assert size > 8
            _recv_exactly(s, size)

    def api_versions(self, sock: socket.socket, correlation_id: int) -> list[tuple[int, int, int]]:
        sock.sendall(_api_versions_frame(correlation_id))
        (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
        corr, body = wire.parse_response(_recv_exactly(sock, size), ApiVersionsResponse, header_v0=True)
        assert corr == correlation_id
        return [(k.api_key, k.min_version, k.max_version) for k in body.api_keys]

    def stderr(self) -> str:
        return self.cluster.stderr_of(1)

    def connect(self) -> socket.socket:
        """A new connection; only the node's log lines written from now on count for its port (the
        module makes thousands of connections, and the kernel reuses ephemeral ports)."""
        s = socket.create_connection(self.address)
        self._since[s.getsockname()[1]] = len(self.stderr())
        return s

    def lines_for(self, port: int) -> list[str]:
        needle = f"127.0.0.1:{port}:"
        return [line for line in self.stderr()[self._since.get(port, 0):].splitlines() if needle in line]

    def send(self, data: bytes, *, half_close: bool = True, timeout_s: float = 5) -> tuple[int, bytes, float]:
        """Send ``data`` on a new connection (then half-close), read until the node closes:
        (our port, what came back, seconds until EOF)."""
        with self.connect() as s:
            s.settimeout(timeout_s)
            port = s.getsockname()[1]
            started = time.monotonic()
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
            got = bytearray()
            with contextlib.suppress(ConnectionResetError):
                while chunk := s.recv(65536):
                    got += chunk
            return port, bytes(got), time.monotonic() - started

    def assert_serving(self, correlation_id: int) -> None:
        """A fresh connection, and the one kept open since the start, both answer ApiVersions."""
        with socket.create_connection(self.address) as fresh:
            fresh.settimeout(5)
            for sock in (fresh, self.keeper):
                assert (52, 2, 2) in self.api_versions(sock, correlation_id)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, f"connection closed after {len(out)} of {n} bytes"
        out += chunk
    return bytes(out)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    cluster = _OneNode(str(tmp_path_factory.mktemp("node")), n=1)
    try:
        assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", "1",
                         "--dir", cluster.dir_of(1)]) == 0
        cluster.start(1)
        n = _Node(cluster)
        yield n
        n.keeper.close()
        codes = cluster.stop_all()
        assert codes == {1: 0}, cluster.stderr_of(1)[-3000:]
    finally:
        cluster.close()


MAX = 100 * 1024 * 1024  # the node's default max_frame_bytes (Kafka's socket.request.max.bytes)
BAD_INPUTS = {
    "http request": (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "frame size 1195725856 outside"),
    "negative size": (struct.pack(">i", -7), "frame size -7 outside"),
    "size above max": (struct.pack(">i", MAX + 1), f"frame size {MAX + 1} outside"),
    "prefix cut short": (b"\x00\x00", "in the middle of a frame (2 of 4 bytes)"),
    "body cut short": (struct.pack(">i", 1000) + b"\x00\x12\x00\x03" + b"\x00" * 20,
                       "in the middle of a frame (28 of 1004 bytes)"),
    "shorter than a header": (struct.pack(">i", 3) + b"abc", "shorter than a request header"),
    "unknown api key": (_raw_request(9999, 0, b""), "unsupported API key 9999"),
    "unknown version": (_raw_request(3, 99, b""), "unsupported API key 3 version 99"),
    "apiversions body garbage": (_raw_request(18, 3, b"\xff\xff\xff\xff\xff\xff"), "malformed"),
    "vote body cut": (_raw_request(52, 2, b"\x05ab"), "malformed request (API 52 v2)"),
    "fetch body zeros": (_raw_request(1, 17, b"\x00" * 40), "malformed request (API 1 v17)"),
    "createtopics junk": (_raw_request(19, 7, b"\xff" * 10), "malformed request (API 19"),
    # a compact array length of ~2**32 elements in 13 bytes: kio's native reader would reserve
    # hundreds of GB and abort the process; the length guard refuses it first
    "metadata huge array": (_raw_request(3, 12, b"\xb1\x9b\xbf\xadu)P=\xdf\x90QU\x9e"),
                            "malformed request (API 3 v12): array of"),
    # the metadata node refuses a Produce by reading it with kio: a huge topic array (after a null
    # transactional id, acks and timeout) must meet the guard first, or kio aborts the process
    "produce huge array": (_raw_request(0, 10, b"\x00\xff\xff\x00\x00\x03\xe8\xb1\x9b\xbf\xadu)P=\xdf\x90QU\x9e"),
                           "malformed request (API 0 v10): array of"),
}
# Well-formed bodies followed by bytes: answered, as Kafka's RequestContext.parseRequest answers them
# (librdkafka writes a 4-byte placeholder after Metadata v9+'s null topics array).
TRAILING_INPUTS = {
    "metadata trailing byte": _with_trailing(_metadata_frame(5), b"\x00"),
    "metadata librdkafka placeholder": _with_trailing(_metadata_frame(5), b"\x00\x00\x00\x00"),
    "describequorum trailing": _raw_request(55, 2, b"\x02\x13__cluster_metadata\x02\x00\x00\x00\x00\x00\x00\x00x"),
    "apiversions trailing": _with_trailing(_api_versions_frame(6), b"zz"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_frame_closes_one_connection_with_one_line(node, name):
    """Each malformed input closes its own connection, logged once with the peer and the reason,
    and the node answers a fresh connection and the long-lived one afterwards."""
    data, reason = BAD_INPUTS[name]
    port, answer, _ = node.send(data)
    assert answer == b"", f"{name}: the node answered {answer[:40]!r}"
    lines = node.lines_for(port)
    assert len(lines) == 1, (name, lines)
    assert "closing connection from 127.0.0.1:" in lines[0] and reason in lines[0], lines[0]
    assert "ERROR" not in lines[0] and "unexpected" not in lines[0], lines[0]
    node.assert_serving(len(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TRAILING_INPUTS))
def test_bytes_after_a_well_formed_body_are_answered_not_refused(node, name):
    """Bytes after a well-formed body: the request is answered (its correlation id comes back),
    nothing is logged at the default level, and the node goes on serving."""
    port, answer, _ = node.send(TRAILING_INPUTS[name])
    assert len(answer) > 8, f"{name}: the node closed without answering"
    size, correlation_id = struct.unpack_from(">ii", answer)
    assert size == len(answer) - 4 and correlation_id in (1, 5, 6), (size, correlation_id)
    assert node.lines_for(port) == []
    node.assert_serving(len(name))


@pytest.mark.slow
def test_a_handler_bug_still_costs_only_its_connection(node):
    """A Produce whose topic array is null decodes (kio allows null) and then trips a check
    that expects a tuple: whatever the handler raises, that connection closes with one line
    and the node goes on serving. (Today the line says "unexpected TypeError": raft/wire.py
    produce_values should refuse the null array as malformed.)"""
    # Produce v10 body: transactional_id null | acks -1 | timeout 1000 ms | topic_data null | no tags
    data = _raw_request(0, 10, b"\x00" + struct.pack(">hi", -1, 1000) + b"\x00" + b"\x00")
    port, answer, _ = node.send(data)
    assert answer == b""
    assert len(node.lines_for(port)) == 1
    node.assert_serving(77)


@pytest.mark.slow
def test_oversized_prefix_is_refused_without_waiting_for_the_body(node):
    """The node closes on a 4-byte prefix of MAX+1 (no half-close, no body): it did not wait
    to collect 100 MiB."""
    port, answer, seconds = node.send(struct.pack(">i", MAX + 1), half_close=False)
    assert answer == b"" and seconds < 2
    assert len(node.lines_for(port)) == 1


@pytest.mark.slow
def test_well_formed_requests_are_answered_and_close_silently(node):
    """The control case: valid ApiVersions and Metadata frames are answered, and a clean close
    after them logs nothing."""
    for frame in (_api_versions_frame(11), _metadata_frame(12), _api_versions_frame(13) + _metadata_frame(14)):
        port, answer, _ = node.send(frame)
        assert len(answer) > 8
        assert node.lines_for(port) == []


def test_api_versions_of_an_unserved_version_is_answered_with_the_served_range(node):
    """KIP-511: ApiVersions at a version the node does not serve (v5 here, v99) gets v0's shape with
    UNSUPPORTED_VERSION and the ApiVersions range the node serves, on an open connection, so a
    client can retry at once; nothing is logged. v0 itself is served (clients from before KIP-511
    ask at v0-v2): its answer lists the APIs."""
    from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0

    with node.connect() as s:
        s.settimeout(5)
        v0 = struct.pack(">hhih", 18, 0, 20, -1)  # request header v1 (no tags: v0 is not flexible), empty body
        s.sendall(struct.pack(">i", len(v0)) + v0)
        (size,) = struct.unpack(">i", _recv_exactly(s, 4))
        corr, body = wire.parse_response(_recv_exactly(s, size), ApiVersionsResponseV0, header_v0=True)
        assert corr == 20 and body.error_code == ErrorCode.none
        rows = [(k.api_key, k.min_version, k.max_version) for k in body.api_keys]
        assert (18, 0, 4) in rows and (52, 2, 2) in rows
    for version, correlation_id in ((5, 21), (99, 22)):
        with node.connect() as s:
            s.settimeout(5)
            port = s.getsockname()[1]
            s.sendall(_raw_request(18, version, b"")[:8] + struct.pack(">i", correlation_id)
                      + _raw_request(18, version, b"")[12:])
            (size,) = struct.unpack(">i", _recv_exactly(s, 4))
            corr, body = wire.parse_response(_recv_exactly(s, size), ApiVersionsResponseV0, header_v0=True)
            assert corr == correlation_id
            assert body.error_code == ErrorCode.unsupported_version
            assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 4)]
            assert (52, 2, 2) in node.api_versions(s, correlation_id + 100)  # the connection stays usable
        assert node.lines_for(port) == []


@pytest.mark.slow
def test_many_half_sent_frames_block_nobody(node):
    """Sixty connections each holding part of a frame: the node keeps answering others; when
    they go away, each gets its one line."""
    held = []
    try:
        for i in range(60):
            s = node.connect()
            s.sendall(struct.pack(">i", 50 + i) + b"\x00\x12" + b"\x00" * (i % 7))
            held.append(s)
        node.assert_serving(99)
        ports = [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(len(node.lines_for(p)) != 1 for p in ports):
        time.sleep(0.05)
    assert all(len(node.lines_for(p)) == 1 for p in ports)
    node.assert_serving(100)


def _check_fuzz_case(node, data: bytes) -> None:
    port, answer, _ = node.send(data)
    lines = node.lines_for(port)
    # a peer that half-closed inside a frame sees the node close before the node's connection_lost
    # callback has logged it (a later loop pass): give the line a moment to arrive
    deadline = time.monotonic() + 2
    while not answer and not lines and time.monotonic() < deadline:
        time.sleep(0.01)
        lines = node.lines_for(port)
    # at most one line per connection; a connection that got no answer was closed with its line
    assert len(lines) <= 1, lines
    if not answer:
        assert len(lines) == 1, f"closed without a line for {data[:60]!r}"
    for line in lines:
        assert "unexpected" not in line and " ERROR " not in line, f"decoder missed a case: {line} ({data[:80]!r})"
    node.assert_serving(7)


_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.slow
@_FUZZ
@given(st.data())
def test_fuzzed_frames_with_plausible_sizes(node, data):
    """Random bodies behind a size prefix that matches, falls short of, or overshoots them: pure
    noise, or a well-formed header of an API and version the node serves (so every decoder it
    has, controller APIs included, gets random input) followed by noise."""
    served = data.draw(st.sampled_from(node.served))
    header = struct.pack(">hhih", served[0], data.draw(st.integers(served[1], served[2])), 1, -1) + b"\x00"
    body = data.draw(st.one_of(st.binary(max_size=80), st.binary(max_size=120).map(lambda b: header + b)))
    delta = data.draw(st.sampled_from([0, 0, 0, 0, -1, 1, 5]))
    _check_fuzz_case(node, struct.pack(">i", max(0, len(body) + delta)) + body)


@pytest.mark.slow
@_FUZZ
@given(st.data())
def test_mutated_valid_requests(node, data):
    """Valid ApiVersions v3 / Metadata v12 frames with bytes flipped, cut or appended; the size
    prefix is recomputed or left as it was."""
    frame = bytearray(data.draw(st.sampled_from([_api_versions_frame(21), _metadata_frame(22)])))
    for pos, value in data.draw(st.lists(st.tuples(st.integers(4, len(frame) - 1), st.integers(0, 255)),
                                         max_size=4)):
        frame[pos] = value
    cut = data.draw(st.integers(5, len(frame)))
    frame = frame[:cut] + data.draw(st.binary(max_size=6))
    if data.draw(st.integers(0, 3)):  # mostly a matching size, so the decoders see the damage
        frame[:4] = struct.pack(">i", len(frame) - 4)
    _check_fuzz_case(node, bytes(frame))


# ---- TLS -------------------------------------------------------------------------------------------------


def _openssl(*args: str, cwd) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _make_ca(d, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def _make_leaf(d, name: str, ca: str) -> None:
    """A certificate for ``name`` signed by ``ca``: good for both ends of a connection (a node
    listens and dials), named kraftlog-node and 127.0.0.1."""
    (d / f"{name}.ext").write_text("subjectAltName=DNS:kraftlog-node,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                                   "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """ca -> node1, node2, client; rogue-ca -> rogue (a certificate the cluster must refuse)."""
    assert shutil.which("openssl"), "the TLS tests make their certificates with the openssl CLI"
    d = tmp_path_factory.mktemp("pki")
    _make_ca(d, "ca")
    _make_ca(d, "rogue-ca")
    for name in ("node1", "node2", "client"):
        _make_leaf(d, name, "ca")
    _make_leaf(d, "rogue", "rogue-ca")
    return d


def _args(pki, name: str, ca: str = "ca", server_name: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(tls_cert=str(pki / f"{name}.pem"), tls_key=str(pki / f"{name}.key"),
                              tls_ca=str(pki / f"{ca}.pem"), tls_server_name=server_name)


def _trusting_client_without_certificate(pki) -> ssl.SSLContext:
    """A client context that trusts the cluster CA but presents no certificate of its own."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(str(pki / "ca.pem"))
    return ctx


async def _api_versions(conn: ClientConnection, timeout_s: float = 5):
    req_type, resp_type = ApiVersionsRequest, ApiVersionsResponse
    return await asyncio.wait_for(conn.request(18, 3, req_type(client_software_name="t", client_software_version="0"),
                                               resp_type, header_v0=True), timeout_s)


async def _refused(port: int, ssl_context: ssl.SSLContext | None) -> int:
    """Connect from a known local port and try ApiVersions; assert it is refused; return the port."""
    sock = socket.create_connection(("127.0.0.1", port))
    local = sock.getsockname()[1]
    tls_kw = {} if ssl_context is None else {"ssl": ssl_context, "server_hostname": "127.0.0.1"}
    try:
        reader, writer = await asyncio.open_connection(sock=sock, **tls_kw)
    except (ssl.SSLError, OSError):
        return local  # refused during the handshake, as the client sees it
    try:
        writer.write(_api_versions_frame(1))
        # TLS 1.3: the client finishes first; the server's refusal arrives as an alert on read
        got = await asyncio.wait_for(reader.read(100), 5)
        assert got == b"", f"answered: {got!r}"
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return local


def test_tls_admits_only_certificates_from_the_cluster_ca(pki, caplog):
    """A CA-signed client talks; no certificate, a rogue CA's certificate, plain text, and a
    client that does not trust the server are each refused with one line naming the peer; the
    good connection, open throughout, keeps working, and so does a new one."""
    no_cert = _trusting_client_without_certificate(pki)

    async def scenario():
        server = RaftTransport(1, {}, server_ssl=tls.server_context(_args(pki, "node1")))
        port = await server.start()
        good = ClientConnection("127.0.0.1", port, ssl_context=tls.client_context(_args(pki, "client")))
        try:
            await good.open()
            assert (await _api_versions(good)).api_keys
            refused = {}
            for what, ctx in (("no certificate", no_cert), ("rogue CA", tls.client_context(_args(pki, "rogue"))),
                              ("plain text", None),
                              ("distrusts the server", tls.client_context(_args(pki, "client", ca="rogue-ca")))):
                refused[what] = await _refused(port, ctx)
                assert (await _api_versions(good)).api_keys, f"good client broken after {what}"
            fresh = ClientConnection("127.0.0.1", port, ssl_context=tls.client_context(_args(pki, "client")))
            await fresh.open()
            assert (await _api_versions(fresh)).api_keys
            await fresh.close()
            # the server's side of the last refusal may finish after the client's
            await wait_until(lambda: asyncio.sleep(0, server.handshakes_failed == len(refused)), 10,
                             "the server counting every failed handshake")
            return refused
        finally:
            await good.close()
            await server.close()

    with caplog.at_level(logging.WARNING, TRANSPORT_LOGGER):
        refused = asyncio.run(scenario())
    for what, local in refused.items():
        lines = _lines(caplog, f"127.0.0.1:{local}:")
        assert len(lines) == 1 and "TLS handshake failed" in lines[0], (what, lines)
    assert "CERTIFICATE_VERIFY_FAILED" in _lines(caplog, f":{refused['rogue CA']}:")[0]


def test_tls_between_two_transports_and_rogue_peers(pki, caplog):
    """Node 2 (client_ssl, checking the name kraftlog-node) sends a Vote to node 1 (server_ssl)
    and gets the answer back on the same connection. Two rogue transports send Votes too: one
    trusts the cluster CA but holds a rogue CA's certificate (node 1 refuses it), one trusts only
    the rogue CA (it refuses node 1, and logs that it did); neither Vote is ever delivered, and
    node 2 keeps talking."""
    async def scenario():
        n1 = RaftTransport(1, {}, server_ssl=tls.server_context(_args(pki, "node1")))
        port = await n1.start()
        peers = {1: ("127.0.0.1", port)}
        n2 = RaftTransport(2, peers, client_ssl=tls.client_context(_args(pki, "node2", server_name="kraftlog-node")))
        rogues = [RaftTransport(3, peers, client_ssl=tls.client_context(_args(pki, "rogue", ca="ca"))),
                  RaftTransport(4, peers, client_ssl=tls.client_context(_args(pki, "rogue", ca="rogue-ca")))]
        at_n1: list[Envelope] = []
        at_n2: asyncio.Queue = asyncio.Queue()
        n1.on_envelope = at_n1.append
        n2.on_envelope = at_n2.put_nowait
        try:
            for round_ in range(2):
                for rogue in rogues:
                    rogue.send(Envelope(rogue.node_id, 1, 100 + round_,
                                        VoteRequest(CLUSTER_ID, 1, 5, rogue.node_id, 0, 0, False)))
                n2.send(Envelope(2, 1, 7 + round_, VoteRequest(CLUSTER_ID, 1, 5, 2, 0, 0, False)))
                for _ in range(100):
                    if at_n1:
                        break
                    await asyncio.sleep(0.02)
                (req,) = at_n1
                at_n1.clear()
                assert req.source == 2 and req.body.replica_id == 2
                n1.send(Envelope(1, 2, req.correlation_id, VoteResponse(Errors.NONE, -1, 5, True)))
                resp = await asyncio.wait_for(at_n2.get(), 5)
                assert resp.correlation_id == 7 + round_ and resp.body.vote_granted
                await asyncio.sleep(0.1)
                assert at_n1 == []  # no rogue vote arrived
            return n1.handshakes_failed
        finally:
            for t in (*rogues, n2, n1):
                await t.close()

    with caplog.at_level(logging.WARNING, TRANSPORT_LOGGER):
        assert asyncio.run(scenario()) >= 2
    assert any("CERTIFICATE_VERIFY_FAILED" in line for line in _lines(caplog, "TLS handshake failed"))
    assert _lines(caplog, "TLS handshake with node 1 at 127.0.0.1:")  # the second rogue's own refusal


def test_three_raft_nodes_elect_and_commit_over_mutual_tls(pki, tmp_path):
    """The whole raft path over TLS: three RaftNodes on one loop, each listening with server_ssl
    and dialling with client_ssl, elect a leader; a RaftClient with a client certificate
    proposes through it; every node commits the same bytes. A client without TLS gets nothing."""
    from kraftlog.engine.node.raftnode import RaftNode
    from kraftlog.raft.core import RaftConfig
    from kraftlog.raft.state import Role

    class TlsNode(RaftNode):
        def make_transport(self, node_id, voters):
            args = _args(pki, f"node{1 + node_id % 2}")  # node1/node2 certificates: any CA-signed one is a member
            return RaftTransport(node_id, voters, server_ssl=tls.server_context(args),
                                 client_ssl=tls.client_context(args))

    async def scenario():
        socks = []
        for _ in range(3):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(64)
            socks.append(s)
        voters = {i + 1: ("127.0.0.1", s.getsockname()[1]) for i, s in enumerate(socks)}
        config = RaftConfig(election_timeout_ms=150, election_backoff_max_ms=100, fetch_timeout_ms=300,
                            request_timeout_ms=300, fetch_max_wait_ms=100)
        nodes = [TlsNode(i, voters, str(tmp_path / f"n{i}"), cluster_id="t", config=config, seed=i) for i in voters]
        for node, s in zip(nodes, socks, strict=True):
            await node.start(sock=s)
        client = RaftClient(voters, ssl_context=tls.client_context(_args(pki, "client")))
        plain = RaftClient(voters, attempt_timeout_ms=300)
        try:
            base = await client.propose([b"over", b"tls"], timeout_ms=10_000)
            assert any(n.core.role is Role.LEADER for n in nodes)
            loop = asyncio.get_running_loop()
            end = loop.time() + 10
            while any(n.machine.next_offset < base + 2 for n in nodes) and loop.time() < end:
                await asyncio.sleep(0.01)
            assert all(n.machine.next_offset >= base + 2 for n in nodes)
            assert len({n.machine.digest for n in nodes}) == 1
            with pytest.raises(ClientError):
                await plain.propose([b"plain"], timeout_ms=1000)
            assert sum(n.transport.handshakes_failed for n in nodes) >= 1
        finally:
            await client.close()
            await plain.close()
            for n in nodes:
                await n.stop(resign=False)

    asyncio.run(scenario())


def test_tls_server_name_check(pki):
    """With --tls-server-name the client checks the server certificate's name (whatever address
    it dialled): the name in the certificate passes, another name is refused by the client."""
    async def scenario():
        server = RaftTransport(1, {}, server_ssl=tls.server_context(_args(pki, "node1")))
        port = await server.start()
        try:
            ok = ClientConnection("127.0.0.1", port,
                                   ssl_context=tls.client_context(_args(pki, "client", server_name="kraftlog-node")))
            await ok.open()
            assert (await _api_versions(ok)).api_keys
            await ok.close()
            wrong = ClientConnection("127.0.0.1", port,
                                      ssl_context=tls.client_context(_args(pki, "client", server_name="other-node")))
            with pytest.raises(ssl.SSLCertVerificationError, match="other-node"):
                await wrong.open()
            client = RaftClient({1: ("127.0.0.1", port)},
                                ssl_context=tls.client_context(_args(pki, "client", server_name="kraftlog-node")))
            assert (18, 0, 4) in await client.api_versions(1)
            await client.close()
        finally:
            await server.close()

    asyncio.run(scenario())


def test_tls_handshake_timeout_closes_a_silent_connection(pki, caplog):
    """A client that connects to the TLS listener and sends nothing is closed after
    tls_handshake_timeout_ms, with one line."""
    async def scenario():
        server = RaftTransport(1, {}, TransportConfig(tls_handshake_timeout_ms=200),
                               server_ssl=tls.server_context(_args(pki, "node1")))
        port = await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            local = writer.get_extra_info("sockname")[1]
            started = asyncio.get_running_loop().time()
            assert await asyncio.wait_for(reader.read(10), 5) == b""
            waited = asyncio.get_running_loop().time() - started
            writer.close()
            assert server.handshakes_failed == 1
            return local, waited
        finally:
            await server.close()

    with caplog.at_level(logging.WARNING, TRANSPORT_LOGGER):
        local, waited = asyncio.run(scenario())
    assert 0.15 < waited < 3
    (line,) = _lines(caplog, f"127.0.0.1:{local}:")
    assert "TLS handshake failed" in line


def test_client_connection_fails_pending_requests_on_a_tls_refusal(pki):
    """A client without a certificate sees its request fail with ClientError (TLS 1.3 reports
    the refusal after the client's side of the handshake), not hang."""
    no_cert = _trusting_client_without_certificate(pki)

    async def scenario():
        server = RaftTransport(1, {}, server_ssl=tls.server_context(_args(pki, "node1")))
        port = await server.start()
        try:
            conn = ClientConnection("127.0.0.1", port, ssl_context=no_cert)
            try:
                await conn.open()
            except ssl.SSLError:
                return  # refused at the handshake already (TLS 1.2)
            with pytest.raises(ClientError):
                await _api_versions(conn)
            await conn.close()
        finally:
            await server.close()

    asyncio.run(scenario())


# ---- TLS settings ----------------------------------------------------------------------------------------


def test_tls_flags_parse_and_build_contexts(pki):
    """The four flags parse; no flag means TLS off (None); the contexts require a peer
    certificate, and the client checks a name only when one is given."""
    parser = argparse.ArgumentParser()
    tls.add_tls_arguments(parser)
    args = parser.parse_args(["--tls-cert", str(pki / "node1.pem"), "--tls-key", str(pki / "node1.key"),
                              "--tls-ca", str(pki / "ca.pem")])
    server, client = tls.server_context(args), tls.client_context(args)
    assert server.verify_mode == ssl.CERT_REQUIRED and client.verify_mode == ssl.CERT_REQUIRED
    assert client.check_hostname is False and server.minimum_version >= ssl.TLSVersion.TLSv1_2
    named = tls.client_context(argparse.Namespace(**{**vars(args), "tls_server_name": "kraftlog-node"}))
    assert named.check_hostname is True
    assert tls.server_context(parser.parse_args([])) is None and tls.client_context(parser.parse_args([])) is None


def test_tls_settings_errors_name_the_flag_and_file(pki, tmp_path):
    """Missing, a directory, not PEM, a key of another certificate, an encrypted key, half the
    flags, or a server name alone: TlsConfigError (a KraftlogError) naming what is wrong."""
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    _openssl("pkey", "-in", str(pki / "client.key"), "-aes256", "-passout", "pass:secret",
             "-out", str(tmp_path / "encrypted.key"), cwd=tmp_path)
    good = vars(_args(pki, "node1"))
    cases = {
        "missing cert": ({"tls_cert": str(tmp_path / "nope.pem")}, "--tls-cert", "no such file"),
        "directory key": ({"tls_key": str(tmp_path)}, "--tls-key", "is a directory"),
        "junk cert": ({"tls_cert": str(tmp_path / "junk.pem")}, "--tls-cert", "not a PEM certificate"),
        "other key": ({"tls_key": str(pki / "client.key")}, "--tls-key", "KEY_VALUES_MISMATCH"),
        "encrypted key": ({"tls_key": str(tmp_path / "encrypted.key")}, "--tls-key", "encrypted"),
        "junk ca": ({"tls_ca": str(tmp_path / "junk.pem")}, "--tls-ca", "no PEM CA certificate"),
        "half given": ({"tls_ca": None}, "missing --tls-ca", ""),
        "name alone": ({"tls_cert": None, "tls_key": None, "tls_ca": None, "tls_server_name": "x"},
                       "--tls-server-name needs", ""),
    }
    for what, (change, flag, reason) in cases.items():
        args = argparse.Namespace(**{**good, **change})
        for build in (tls.server_context, tls.client_context):
            with pytest.raises(tls.TlsConfigError) as info:
                build(args)
            assert flag in str(info.value) and reason in str(info.value), (what, str(info.value))
    # a file that exists but fails to read (EIO at offset 0, even for root)
    with pytest.raises(tls.TlsConfigError, match="--tls-key /proc/self/mem: cannot be read"):
        tls.server_context(argparse.Namespace(**{**good, "tls_key": "/proc/self/mem"}))


def test_a_large_frame_is_written_without_a_copy_of_its_unsent_tail():
    """FrameConnection.write hands a large bytes frame to the transport as a memoryview (asyncio
    keeps ``data[sent:]`` of what the socket did not take: a copy for bytes, none for a view);
    small frames and mutable buffers go as they are."""
    conn, _ = _frame_conn()
    handed = []
    conn.transport.write = handed.append
    large, small, mutable = bytes(FrameConnection.READ_BUFFER_BYTES + 1), b"x" * 10, bytearray(1 << 20)
    for data in (large, small, mutable):
        conn.write(data)
    assert type(handed[0]) is memoryview and handed[0].obj is large
    assert handed[1] is small and handed[2] is mutable
