"""Report rows beside etcd (issue 22): a three-node etcd cluster and a three-voter ``raftnode``
cluster on loopback, on the same machine, in the same run, measured in alternating rounds so both
see the same load. Same payload on both sides: sequential 100-byte writes from one client, 3
voters, fsync on (etcd's default; raftnode fsyncs every flush the protocol asks for).

    raft.commit_p50_vs_etcd     commit p50 with one write in flight: kraftlog's
                                ``RaftClient.propose`` (Produce acks=-1 to the leader) against
                                etcd's ``KV.Put`` over gRPC (one channel to the leader: one HTTP/2
                                connection). Ratio etcd / kraftlog (higher is better); both p50s
                                and p99s in the row, and etcd's v3 JSON gateway (``POST
                                /v3/kv/put``, one keep-alive HTTP connection) measured beside.
    raft.cpu_per_commit_vs_etcd CPU seconds (user + sys, psutil) of all three node processes and
                                their children per commit, over the same rounds. Ratio etcd (gRPC)
                                / kraftlog; the gateway's figure beside.
    raft.throughput_vs_etcd     committed records/s with batching: kraftlog's pipelined Produce
                                (rows_raft's BATCH_RECORDS records per request, WINDOW in flight)
                                against etcd's best of ETCD_LOADS: many concurrent gRPC puts, and
                                many concurrent Txns of ETCD_TXN_PUTS puts (etcd's batch: one Raft
                                entry; --max-txn-ops raised to our batch size) over gRPC and over
                                the gateway. Ratio kraftlog / etcd.

gRPC is etcd's own API and the faster one here (p50 ~15% lower, ~20% less etcd CPU per commit,
~3x the batched rate of the gateway, whose JSON and in-process gRPC hop etcd pays for); it is
driven through grpcio's generic calls with the few protobuf messages encoded by hand (no etcd
client package: the ones on PyPI are unmaintained).

Without an ``etcd`` binary (in .venv/bin, where the Makefile unpacks Debian's ``etcd-server``, or
on PATH) each row is reported as skipped ("etcd not installed"): not a failure, and never left out.
etcd cannot inherit a listening socket, so its ports come from binding port 0 and closing (a start
that loses the race is retried); every process is killed and every directory removed when a row
ends, whatever happens.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from kraftlog.bench.rows_raft import BATCH_RECORDS, PAYLOAD_BYTES, WINDOW, NodeCluster, free_ports
from kraftlog.bench.timing import percentile, row

ETCD_NOT_INSTALLED = "etcd not installed"
ETCD_NODES = 3
ETCD_START_TIMEOUT_S = 120  # a loaded 2-core machine starts three etcd processes in ~1-10 s
ETCD_START_ATTEMPTS = 3  # a port taken between our bind-and-close and etcd's bind: start again
ETCD_REQUEST_TIMEOUT_S = 60
# etcd's batch is a Txn (one Raft entry). It refuses more than --max-txn-ops (128 by default) puts
# in one; the throughput cluster raises that to our batch size, so both sides batch alike.
ETCD_TXN_PUTS = BATCH_RECORDS
# concurrent calls, each with one request in flight: the most that still helped etcd here (2 cores,
# loaded: gRPC puts 64 -> 128 -> 256 calls gave 4.8k, 5.5k, 6.2k puts/s; Txns 4 -> 16 calls 56k ->
# 67k records/s; the gateway's single puts topped out at 3.8k with 128 connections, its Txns at 24k);
# the Python client used ~0.2-0.3 of a core, so etcd is the limit
ETCD_PUT_CALLS = 256
ETCD_TXN_CALLS = 16
ETCD_GRPC_CHANNELS = 4  # HTTP/2 connections the gRPC calls share
DISTINCT_KEYS = 1000  # sequential writes cycle over this many keys (a log of distinct entries)
PROPOSE_TIMEOUT_MS = 20_000
THROUGHPUT_BATCHES = WINDOW * 4  # Produce requests per pipelined call (as rows_raft does)
_CACHE: dict = {}


def etcd_search_path() -> str:
    """Where the Makefile puts etcd (beside this interpreter, in .venv/bin), then PATH."""
    return os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


def etcd_binary(search_path: str | None = None) -> str | None:
    return shutil.which("etcd", path=etcd_search_path() if search_path is None else search_path)


def skipped_row(name: str, unit: str, goal: str) -> dict:
    """The row when there is no etcd to compare with: present in the report, saying why."""
    return row(name, unit, None, None, peer="etcd", peer_value=None, higher_is_better=True, goal=goal, met=False,
               skipped=ETCD_NOT_INSTALLED)


def tree_cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of these processes and all their live children."""
    total = 0.0
    for pid in pids:
        proc = psutil.Process(pid)
        for p in (proc, *proc.children(recursive=True)):
            times = p.cpu_times()
            total += times.user + times.system
    return total


# ---- etcd ---------------------------------------------------------------------------------------------


def etcd_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60).stdout
    first = out.splitlines()[0] if out else ""
    return first.split(":", 1)[1].strip() if ":" in first else "?"


class EtcdCluster:
    """Three etcd processes on 127.0.0.1 (data in a temp dir, etcd's defaults otherwise: fsync on,
    100 ms heartbeat); ``leader_address`` is the (host, port) of the leader's client URL (gRPC and
    the JSON gateway both serve there). ``close()`` kills them and removes the data."""

    def __init__(self, binary: str, *extra_args: str):
        self.binary = binary
        self.extra_args = list(extra_args)
        self.directory = tempfile.mkdtemp(prefix="kraftlog-etcd-bench-")
        self.procs: list[subprocess.Popen] = []
        self.client_ports: list[int] = []
        try:
            self._start_with_retries()
            self.leader_address = ("127.0.0.1", self._leader_port())
        except BaseException:
            self.close()
            raise

    def _start_with_retries(self) -> None:
        for attempt in range(1, ETCD_START_ATTEMPTS + 1):
            self._launch(attempt)
            try:
                self._wait_healthy()
                return
            except RuntimeError:
                if attempt == ETCD_START_ATTEMPTS:
                    raise
                self._kill()

    def _launch(self, attempt: int) -> None:
        ports = free_ports(2 * ETCD_NODES)
        peer_ports, self.client_ports = ports[:ETCD_NODES], ports[ETCD_NODES:]
        names = [f"etcd{i}" for i in range(ETCD_NODES)]
        initial = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(names, peer_ports, strict=True))
        for name, peer, client in zip(names, peer_ports, self.client_ports, strict=True):
            peer_url, client_url = f"http://127.0.0.1:{peer}", f"http://127.0.0.1:{client}"
            err = open(os.path.join(self.directory, f"{name}.err"), "a")  # noqa: SIM115 (closed in _kill)
            argv = [self.binary, "--name", name, "--data-dir", os.path.join(self.directory, f"{name}-{attempt}"),
                    "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                    "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                    "--initial-cluster", initial, "--initial-cluster-state", "new",
                    "--initial-cluster-token", f"kraftlog-bench-{attempt}", "--logger", "zap", "--log-level", "warn",
                    *self.extra_args]
            p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
            p.err_file = err
            self.procs.append(p)

    def _wait_healthy(self) -> None:
        """Until every member answers /health true (a leader is elected and serves reads)."""
        deadline = time.monotonic() + ETCD_START_TIMEOUT_S
        pending = set(self.client_ports)
        while pending:
            if any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"an etcd process exited while starting: {self.stderr()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd not healthy within {ETCD_START_TIMEOUT_S} s: {self.stderr()[-2000:]}")
            pending = {port for port in pending if not _healthy(port)}
            if pending:
                time.sleep(0.05)

    def _leader_port(self) -> int:
        for port in self.client_ports:
            status = _post_json(port, "/v3/maintenance/status", {})
            if status["leader"] == status["header"]["member_id"]:
                return port
        raise RuntimeError("no etcd member says it leads")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stderr(self) -> str:
        out = []
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(".err"):
                with open(os.path.join(self.directory, name), errors="replace") as f:
                    out.append(f"{name}: {f.read()}")
        return "\n".join(out)

    def _kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait(10)
            p.err_file.close()
        self.procs.clear()

    def close(self) -> None:
        self._kill()
        shutil.rmtree(self.directory, ignore_errors=True)


def _healthy(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/health")
        resp = conn.getresponse()
        return resp.status == 200 and json.loads(resp.read()).get("health") == "true"
    except (OSError, ValueError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def _post_json(port: int, path: str, body: dict) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=ETCD_REQUEST_TIMEOUT_S)
    try:
        conn.request("POST", path, json.dumps(body).encode())
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"etcd {path} answered {resp.status}: {data[:200]!r}")
        return json.loads(data)
    finally:
        conn.close()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def put_body(key: bytes, value: bytes) -> bytes:
    return json.dumps({"key": _b64(key), "value": _b64(value)}).encode()


def txn_body(keys: list[bytes], value: bytes) -> bytes:
    """One Txn with no compare and a put per key (keys must differ: etcd refuses a duplicate)."""
    puts = [{"request_put": {"key": _b64(k), "value": _b64(value)}} for k in keys]
    return json.dumps({"compare": [], "success": puts, "failure": []}).encode()


# etcd's gRPC messages (api/etcdserverpb/rpc.proto), encoded by hand: every field used is bytes or
# a message, i.e. wire type 2 (tag = field << 3 | 2, varint length, data).
#   PutRequest { bytes key = 1; bytes value = 2; }
#   RequestOp  { oneof request { RangeRequest request_range = 1; PutRequest request_put = 2; ... } }
#   TxnRequest { repeated Compare compare = 1; repeated RequestOp success = 2; ... }
#   TxnResponse { ResponseHeader header = 1; bool succeeded = 2; ... }
GRPC_PUT = "/etcdserverpb.KV/Put"
GRPC_TXN = "/etcdserverpb.KV/Txn"


def grpc_target(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


def _pb_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _pb_field(number: int, data: bytes) -> bytes:
    return _pb_varint(number << 3 | 2) + _pb_varint(len(data)) + data


def pb_put(key: bytes, value: bytes) -> bytes:
    return _pb_field(1, key) + _pb_field(2, value)


def pb_txn(keys: list[bytes], value: bytes) -> bytes:
    """A TxnRequest with no compare and a put per key in ``success``."""
    return b"".join(_pb_field(2, _pb_field(2, pb_put(k, value))) for k in keys)


def pb_txn_succeeded(response: bytes) -> bool:
    """TxnResponse.succeeded (field 2, varint), after the length-delimited header (field 1)."""
    at = 0
    while at < len(response):
        tag, at = _pb_read_varint(response, at)
        if tag == 2 << 3:  # succeeded, wire type 0
            value, _ = _pb_read_varint(response, at)
            return value == 1
        if tag & 7 != 2:
            return False
        length, at = _pb_read_varint(response, at)
        at += length
    return False


def _pb_read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


# ---- the two sides of a sequential round ------------------------------------------------------------------


class EtcdGrpcSide:
    """etcd's sequential writer: ``KV.Put`` on one gRPC channel to the leader."""

    name = "etcd"

    def __init__(self, cluster: EtcdCluster):
        import grpc

        self.cluster = cluster
        self.channel = grpc.insecure_channel(grpc_target(cluster.leader_address))
        self.put = self.channel.unary_unary(GRPC_PUT)  # no serializers: bytes in, bytes out
        value = b"v" * PAYLOAD_BYTES
        self.bodies = [pb_put(b"bench/%04d" % k, value) for k in range(DISTINCT_KEYS)]

    @property
    def pids(self) -> list[int]:
        return self.cluster.pids

    def sequential(self, count: int) -> list[float]:
        """``count`` puts, each answered before the next is sent: latencies in ms (a failed
        put raises grpc.RpcError)."""
        out = []
        for i in range(count):
            started = time.perf_counter()
            self.put(self.bodies[i % DISTINCT_KEYS], timeout=ETCD_REQUEST_TIMEOUT_S)
            out.append((time.perf_counter() - started) * 1000)
        return out

    def close(self) -> None:
        self.channel.close()


class EtcdGatewaySide:
    """etcd's sequential writer through its v3 JSON gateway: one keep-alive HTTP connection."""

    name = "etcd-gateway"

    def __init__(self, cluster: EtcdCluster):
        self.cluster = cluster
        self.conn = http.client.HTTPConnection(*cluster.leader_address, timeout=ETCD_REQUEST_TIMEOUT_S)
        value = b"v" * PAYLOAD_BYTES
        self.bodies = [put_body(b"bench/%04d" % k, value) for k in range(DISTINCT_KEYS)]

    @property
    def pids(self) -> list[int]:
        return self.cluster.pids

    def sequential(self, count: int) -> list[float]:
        """``count`` puts, each answered before the next is sent: latencies in ms."""
        out = []
        for i in range(count):
            started = time.perf_counter()
            self.conn.request("POST", "/v3/kv/put", self.bodies[i % DISTINCT_KEYS])
            resp = self.conn.getresponse()
            data = resp.read()
            out.append((time.perf_counter() - started) * 1000)
            if resp.status != 200:
                raise RuntimeError(f"etcd put answered {resp.status}: {data[:200]!r}")
        return out

    def close(self) -> None:
        self.conn.close()


class KraftlogSide:
    """kraftlog's sequential writer: ``RaftClient.propose`` of one record, on an event loop kept
    across rounds (so the connection to the leader is kept too)."""

    name = "kraftlog"

    def __init__(self, cluster: NodeCluster):
        from kraftlog.engine.node.raftnode import RaftClient

        self.cluster = cluster
        self.runner = asyncio.Runner()
        self.client = RaftClient(cluster.voters)  # connects on its first proposal, on the runner's loop
        self.payload = b"v" * PAYLOAD_BYTES

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.cluster.procs.values()]

    def sequential(self, count: int) -> list[float]:
        return self.runner.run(self._sequential(count))

    async def _sequential(self, count: int) -> list[float]:
        out = []
        for _ in range(count):
            started = time.perf_counter()
            await self.client.propose([self.payload], timeout_ms=PROPOSE_TIMEOUT_MS)
            out.append((time.perf_counter() - started) * 1000)
        return out

    def close(self) -> None:
        try:
            self.runner.run(self.client.close())
        finally:
            self.runner.close()


@dataclass
class Tally:
    """What the rounds measured for one system: every latency (ms), node CPU seconds, writes."""

    latencies_ms: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    writes: int = 0
    round_cpu_per_commit_ms: list[float] = field(default_factory=list)

    def add_round(self, latencies_ms: list[float], cpu_s: float) -> None:
        self.latencies_ms.extend(latencies_ms)
        self.cpu_s += cpu_s
        self.writes += len(latencies_ms)
        self.round_cpu_per_commit_ms.append(cpu_s / len(latencies_ms) * 1000)

    def percentile_ms(self, p: float) -> float:
        return percentile(sorted(self.latencies_ms), p)

    @property
    def cpu_per_commit_ms(self) -> float:
        return self.cpu_s / self.writes * 1000


def timed_round(side, count: int) -> tuple[list[float], float]:
    """One round of ``count`` sequential writes: (latencies in ms, CPU seconds of the side's nodes)."""
    cpu_before = tree_cpu_s(side.pids)
    latencies = side.sequential(count)
    return latencies, tree_cpu_s(side.pids) - cpu_before


def alternate_rounds(sides: list, rounds: int, writes_per_round: int, warmup: int) -> dict[str, Tally]:
    """``rounds`` rounds per side, alternating (and the order flipped every round so neither
    always runs first); ``warmup`` untimed writes per side before."""
    for side in sides:
        side.sequential(warmup)
    tallies = {side.name: Tally() for side in sides}
    for r in range(rounds):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            tallies[side.name].add_round(*timed_round(side, writes_per_round))
    return tallies


@dataclass(frozen=True)
class SequentialPlan:
    rounds: int
    writes_per_round: int
    warmup: int


def sequential_plan(quick: bool) -> SequentialPlan:
    return SequentialPlan(2, 150, 30) if quick else SequentialPlan(4, 500, 100)


def sequential_tallies(binary: str, plan: SequentialPlan) -> dict[str, Tally]:
    """Start both clusters, run the alternating rounds, stop both (whatever happens)."""
    etcd = EtcdCluster(binary)
    sides = []
    try:
        ours = NodeCluster()
        try:
            sides.append(EtcdGrpcSide(etcd))
            sides.append(EtcdGatewaySide(etcd))
            sides.append(KraftlogSide(ours))
            return alternate_rounds(sides, plan.rounds, plan.writes_per_round, plan.warmup)
        finally:
            for side in sides:
                side.close()
            ours.close()
    finally:
        etcd.close()


def cached_sequential(quick: bool, binary: str) -> dict[str, Tally]:
    """The commit and CPU rows share one run."""
    key = ("seq", quick, binary)
    if key not in _CACHE:
        _CACHE[key] = sequential_tallies(binary, sequential_plan(quick))
    return _CACHE[key]


# ---- batched throughput --------------------------------------------------------------------------------------


async def _http_client(host: str, port: int, path: str, bodies: list[bytes], deadline: float,
                       records_per_request: int) -> int:
    """One keep-alive connection, one request in flight, until ``deadline`` (loop time): the
    records it had committed. Requests are pre-built bytes and answers are only framed (by
    Content-Length, or chunks for the larger Txn answers), so the client costs little beside etcd."""
    reader, writer = await asyncio.open_connection(host, port)
    requests = [(f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(b)}\r\n\r\n").encode() + b for b in bodies]
    loop = asyncio.get_running_loop()
    done = 0
    try:
        while done == 0 or loop.time() < deadline:  # at least one answer, however slow the start
            writer.write(requests[done % len(requests)])
            head = await reader.readuntil(b"\r\n\r\n")
            body = await _read_body(reader, head)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"etcd {path} answered {head.split(b' ', 2)[1:2]}: {body[:200]!r}")
            done += 1
        return done * records_per_request
    finally:
        writer.close()


async def _read_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    headers = head.lower()
    marker = headers.find(b"\r\ncontent-length:")
    if marker >= 0:
        end = headers.index(b"\r\n", marker + 2)
        return await reader.readexactly(int(headers[marker + 17:end]))
    if b"\r\ntransfer-encoding: chunked" not in headers:
        raise RuntimeError(f"etcd answered without a body length: {head[:300]!r}")
    chunks = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        chunk = await reader.readexactly(size + 2)  # the chunk and its CRLF
        if size == 0:
            return b"".join(chunks)
        chunks.append(chunk[:-2])


async def _grpc_client(call, bodies: list[bytes], deadline: float, records_per_request: int, txn: bool) -> int:
    """One gRPC call in flight at a time on a shared channel, until ``deadline`` (loop time): the
    records it had committed (a failed call raises grpc.RpcError)."""
    loop = asyncio.get_running_loop()
    done = 0
    while done == 0 or loop.time() < deadline:  # at least one answer, however slow the start
        answer = await call(bodies[done % len(bodies)], timeout=ETCD_REQUEST_TIMEOUT_S)
        if txn and not pb_txn_succeeded(answer):
            raise RuntimeError("an etcd Txn without compares did not succeed")
        done += 1
    return done * records_per_request


@dataclass(frozen=True)
class EtcdLoad:
    """One way of loading etcd: ``calls`` concurrent clients, each with one request in flight."""

    label: str
    api: str  # "grpc" (method is the gRPC path) or "gateway" (method is the HTTP path)
    method: str
    calls: int
    records_per_request: int
    bodies_per_call: Callable[[int], list[bytes]]


def _keys(prefix: str, call: int, request: int, n: int) -> list[bytes]:
    """Keys that differ within a request (etcd refuses a Txn that puts one key twice)."""
    return [f"{prefix}/{call:03d}/{request}/{j:04d}".encode() for j in range(n)]


def _grpc_put_bodies(call: int) -> list[bytes]:
    return [pb_put(k, b"t" * PAYLOAD_BYTES) for k in _keys("gp", call, 0, 100)]


def _grpc_txn_bodies(call: int) -> list[bytes]:
    return [pb_txn(_keys("gt", call, r, ETCD_TXN_PUTS), b"t" * PAYLOAD_BYTES) for r in range(3)]


def _gateway_txn_bodies(call: int) -> list[bytes]:
    return [txn_body(_keys("ht", call, r, ETCD_TXN_PUTS), b"t" * PAYLOAD_BYTES) for r in range(3)]


ETCD_LOADS = (
    EtcdLoad(f"gRPC, {ETCD_PUT_CALLS} concurrent puts", "grpc", GRPC_PUT, ETCD_PUT_CALLS, 1, _grpc_put_bodies),
    EtcdLoad(f"gRPC, {ETCD_TXN_CALLS} concurrent Txns of {ETCD_TXN_PUTS} puts", "grpc", GRPC_TXN, ETCD_TXN_CALLS,
             ETCD_TXN_PUTS, _grpc_txn_bodies),
    EtcdLoad(f"JSON gateway, {ETCD_TXN_CALLS} connections each with a Txn of {ETCD_TXN_PUTS} puts", "gateway",
             "/v3/kv/txn", ETCD_TXN_CALLS, ETCD_TXN_PUTS, _gateway_txn_bodies),
)


async def etcd_rate(address: tuple[str, int], load: EtcdLoad, seconds: float) -> float:
    """Records/s committed by ``load`` over ``seconds``."""
    import grpc

    bodies = [load.bodies_per_call(i) for i in range(load.calls)]  # built before the clock starts
    channels = [grpc.aio.insecure_channel(grpc_target(address)) for _ in range(ETCD_GRPC_CHANNELS)] \
        if load.api == "grpc" else []
    deadline = asyncio.get_running_loop().time() + seconds
    try:
        if channels:
            calls = [ch.unary_unary(load.method) for ch in channels]
            clients = [_grpc_client(calls[i % len(calls)], bodies[i], deadline, load.records_per_request,
                                    load.method == GRPC_TXN) for i in range(load.calls)]
        else:
            clients = [_http_client(*address, load.method, bodies[i], deadline, load.records_per_request)
                       for i in range(load.calls)]
        started = time.perf_counter()
        counts = await asyncio.gather(*clients)
        return sum(counts) / (time.perf_counter() - started)
    finally:
        for ch in channels:
            await ch.close()


async def kraftlog_rate(client, seconds: float) -> float:
    """Records/s committed by pipelined Produce (BATCH_RECORDS per request, WINDOW in flight)."""
    from kraftlog.raft import wire

    body = wire.produce_request([b"t" * PAYLOAD_BYTES] * BATCH_RECORDS, timeout_ms=PROPOSE_TIMEOUT_MS)
    records, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        await client.produce_pipelined(client.leader_id, [body] * THROUGHPUT_BATCHES, window=WINDOW)
        records += THROUGHPUT_BATCHES * BATCH_RECORDS
    return records / (time.perf_counter() - started)


@dataclass
class ThroughputResult:
    ours: list[float]  # records/s per round
    etcd: dict[str, list[float]]  # load label -> records/s per round

    def etcd_best(self) -> tuple[str, float]:
        label = max(self.etcd, key=lambda k: statistics.median(self.etcd[k]))
        return label, statistics.median(self.etcd[label])


async def _throughput_rounds(etcd: EtcdCluster, ours: NodeCluster, rounds: int, seconds: float) -> ThroughputResult:
    from kraftlog.engine.node.raftnode import RaftClient

    client = RaftClient(ours.voters)
    try:
        await client.propose([b"warm"], timeout_ms=PROPOSE_TIMEOUT_MS)  # finds the leader
        await kraftlog_rate(client, 0.2)
        for load in ETCD_LOADS:
            await etcd_rate(etcd.leader_address, load, 0.2)
        result = ThroughputResult([], {load.label: [] for load in ETCD_LOADS})
        for _ in range(rounds):
            result.ours.append(await kraftlog_rate(client, seconds))
            for load in ETCD_LOADS:
                result.etcd[load.label].append(await etcd_rate(etcd.leader_address, load, seconds))
        return result
    finally:
        await client.close()


def throughput_result(binary: str, rounds: int, seconds: float) -> ThroughputResult:
    etcd = EtcdCluster(binary, "--max-txn-ops", str(ETCD_TXN_PUTS))
    try:
        ours = NodeCluster("--max-batch-records", "20000", "--max-batch-bytes", str(4 << 20))
        try:
            return asyncio.run(_throughput_rounds(etcd, ours, rounds, seconds))
        finally:
            ours.close()
    finally:
        etcd.close()


# ---- rows -------------------------------------------------------------------------------------------------


def _peer(binary: str, how: str) -> str:
    return f"etcd {etcd_version(binary)}, 3 nodes, {how}"


def _sides(tallies: dict[str, Tally]) -> tuple[Tally, Tally, Tally]:
    return tallies[KraftlogSide.name], tallies[EtcdGrpcSide.name], tallies[EtcdGatewaySide.name]


def commit_p50_row(tallies: dict[str, Tally], peer: str) -> dict:
    ours, etcd, gateway = _sides(tallies)
    p50, etcd_p50 = ours.percentile_ms(50), etcd.percentile_ms(50)
    p99, etcd_p99 = ours.percentile_ms(99), etcd.percentile_ms(99)
    return row("raft.commit_p50_vs_etcd", "ms", p50, ours.percentile_ms(75) - ours.percentile_ms(25),
               peer=peer, peer_value=etcd_p50, higher_is_better=False, goal="<= 1.0x etcd's p50 (ratio >= 1)",
               met=p50 <= etcd_p50, p99_ms=p99, etcd_p99_ms=etcd_p99, p99_ratio=etcd_p99 / p99,
               p99_met=p99 <= 1.5 * etcd_p99, samples=ours.writes, etcd_samples=etcd.writes,
               gateway_p50_ms=gateway.percentile_ms(50), gateway_p99_ms=gateway.percentile_ms(99),
               notes="one client, one 100-byte write in flight, fsync on, alternating rounds; ratio = etcd p50 / "
                     "kraftlog p50, the report's higher-is-better direction (p99 goal: <= 1.5x etcd's); "
                     "gateway_*: etcd through its JSON gateway, one keep-alive HTTP connection")


def cpu_row(tallies: dict[str, Tally], peer: str) -> dict:
    ours, etcd, gateway = _sides(tallies)
    spread = max(ours.round_cpu_per_commit_ms) - min(ours.round_cpu_per_commit_ms)
    return row("raft.cpu_per_commit_vs_etcd", "ms CPU/commit", ours.cpu_per_commit_ms, spread, peer=peer,
               peer_value=etcd.cpu_per_commit_ms, higher_is_better=False, goal="<= 1.0x etcd's (ratio >= 1)",
               met=ours.cpu_per_commit_ms <= etcd.cpu_per_commit_ms, cpu_s=ours.cpu_s, etcd_cpu_s=etcd.cpu_s,
               commits=ours.writes, etcd_commits=etcd.writes,
               rounds_ms=ours.round_cpu_per_commit_ms, etcd_rounds_ms=etcd.round_cpu_per_commit_ms,
               gateway_cpu_per_commit_ms=gateway.cpu_per_commit_ms,
               notes="user + sys of the three node processes (and children) over the sequential rounds; "
                     "gateway_*: etcd's through its JSON gateway")


def throughput_row(result: ThroughputResult, peer_binary: str, *, scale: str | None) -> dict:
    ours = statistics.median(result.ours)
    label, etcd = result.etcd_best()
    return row("raft.throughput_vs_etcd", "records/s", ours, max(result.ours) - min(result.ours),
               peer=_peer(peer_binary, label), peer_value=etcd, higher_is_better=True,
               goal=">= 2x etcd", met=ours >= 2 * etcd, scale=scale,
               etcd_by_load={k: statistics.median(v) for k, v in result.etcd.items()}, rounds=len(result.ours),
               notes=f"kraftlog: pipelined Produce, {BATCH_RECORDS} x {PAYLOAD_BYTES}-byte records per request, "
                     f"{WINDOW} in flight; etcd: the faster of its loads (etcd_by_load); fsync on both")


def commit_p50_vs_etcd(quick: bool) -> dict:
    binary = etcd_binary()
    if binary is None:
        return skipped_row("raft.commit_p50_vs_etcd", "ms", "<= 1.0x etcd's p50")
    return commit_p50_row(cached_sequential(quick, binary), _peer(binary, "gRPC KV.Put on one channel"))


def cpu_per_commit_vs_etcd(quick: bool) -> dict:
    binary = etcd_binary()
    if binary is None:
        return skipped_row("raft.cpu_per_commit_vs_etcd", "ms CPU/commit", "<= 1.0x etcd's")
    return cpu_row(cached_sequential(quick, binary), _peer(binary, "gRPC KV.Put"))


def throughput_vs_etcd(quick: bool) -> dict:
    binary = etcd_binary()
    if binary is None:
        return skipped_row("raft.throughput_vs_etcd", "records/s", ">= 2x etcd")
    rounds, seconds = (1, 2.0) if quick else (3, 4.0)
    return throughput_row(throughput_result(binary, rounds, seconds), binary,
                          scale=f"{rounds} x {seconds:g} s rounds" if quick else None)


ROWS = {
    "raft.commit_p50_vs_etcd": commit_p50_vs_etcd,
    "raft.cpu_per_commit_vs_etcd": cpu_per_commit_vs_etcd,
    "raft.throughput_vs_etcd": throughput_vs_etcd,
}
