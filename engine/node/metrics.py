"""A node's metrics in Prometheus' text format over HTTP (`kraftlog node run --metrics-port P`, off by
default).

What is exported (names: Kafka's, with dots and dashes as underscores, prefixed ``kraftlog_``):

    kraftlog_raft_*                 KIP-595's raft-metrics table (raft/metrics.py): current_leader,
                                    current_epoch, current_vote, log_end_offset, log_end_epoch,
                                    high_watermark, commit_latency_avg/max (ms), election_latency_*,
                                    append_records_rate, fetch_records_rate, poll_idle_ratio_avg;
                                    current_state as a label of kraftlog_raft_current_state
    kraftlog_broker_state           Kafka's BrokerState as a number (NotRunning 0, Starting 1,
                                    Recovery 2, Running 3, PendingControlledShutdown 6,
                                    ShuttingDown 7); -1 on a node without the broker role
    kraftlog_image_offset           the offset of the last record in this node's image
    kraftlog_snapshot_age_ms        milliseconds since this node last wrote a snapshot (since start
                                    when it has written none)
    kraftlog_current_metadata_version   the finalized metadata.version level (Kafka's
                                    CurrentMetadataVersion)
    kraftlog_metadata_apply_errors_total   committed metadata records a broker skipped because they
                                    could not be applied (Kafka's metadata-apply-error-count; a
                                    controller stops on such a record instead)
    kraftlog_requests_total{api}    requests received per API key name
    kraftlog_request_latency_seconds{api}   time from receipt to the response, a histogram

Everything is read on the event loop at scrape time (the HTTP server is an asyncio server on the
node's loop), so the collector never races the Raft driver: no locks, no per-event cost beyond the
request counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

log = logging.getLogger("kraftlog.metrics")

BROKER_STATE_VALUES = {"NotRunning": 0, "Starting": 1, "Recovery": 2, "Running": 3,
                       "PendingControlledShutdown": 6, "ShuttingDown": 7}
API_NAMES = {1: "Fetch", 3: "Metadata", 18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics",
             37: "CreatePartitions", 52: "Vote", 53: "BeginQuorumEpoch", 54: "EndQuorumEpoch",
             55: "DescribeQuorum", 56: "AlterPartition", 57: "UpdateFeatures", 59: "FetchSnapshot",
             62: "BrokerRegistration", 63: "BrokerHeartbeat", 70: "ControllerRegistration", 0: "Produce",
             23: "OffsetForLeaderEpoch"}
MAX_REQUEST_BYTES = 8192  # an HTTP request head larger than this is refused


def api_name(api_key: int) -> str:
    return API_NAMES.get(api_key, str(api_key))


class NodeCollector:
    """Reads a MetadataNode (engine/node/node.py) at scrape time."""

    def __init__(self, node):
        self.node = node
        self.started_ms = time.monotonic() * 1000

    def collect(self):
        node = self.node
        raft = node.core.metrics_snapshot()
        for key, value in raft.items():
            name = "kraftlog_raft_" + key.replace("-", "_")
            if isinstance(value, str):
                g = GaugeMetricFamily(name, f"raft {key} (as a label)", labels=["state"])
                g.add_metric([value], 1)
            else:
                g = GaugeMetricFamily(name, f"raft {key}", value=float(value))
            yield g
        lifecycle = node.lifecycle
        state = BROKER_STATE_VALUES[lifecycle.state.value] if lifecycle is not None else -1
        yield GaugeMetricFamily("kraftlog_broker_state", "Kafka's BrokerState number (-1: no broker role)", value=state)
        yield GaugeMetricFamily("kraftlog_image_offset", "offset of the last record in the image",
                                value=node.machine.next_offset - 1)
        snapshotter = node.snapshotter
        yield GaugeMetricFamily("kraftlog_snapshot_age_ms", "ms since this node last wrote a snapshot",
                                value=time.monotonic() * 1000 - snapshotter.last_ms)
        yield CounterMetricFamily("kraftlog_requests_with_trailing_bytes", "well-formed requests with bytes after "
                                  "the body (served, as Kafka does)", value=node.transport.requests_with_trailing_bytes)
        yield GaugeMetricFamily("kraftlog_current_metadata_version", "finalized metadata.version level",
                                value=node.image.features.metadata_version)
        # Kafka's metadata-apply-error-count: committed records a broker skipped (a controller stops instead)
        yield CounterMetricFamily("kraftlog_metadata_apply_errors", "committed metadata records skipped as unappliable",
                                  value=node.machine.apply_errors)


class NodeMetrics:
    """The registry of one node: the collector plus request counters and latencies."""

    def __init__(self, node):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(NodeCollector(node))
        self.requests = Counter("kraftlog_requests", "requests received", ["api"], registry=self.registry)
        self.latency = Histogram("kraftlog_request_latency_seconds", "receipt to response", ["api"],
                                 registry=self.registry,
                                 buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
        self._server: asyncio.base_events.Server | None = None

    def request_seen(self, api_key: int) -> float:
        """Count a request; returns its start time for ``request_done``."""
        self.requests.labels(api_name(api_key)).inc()
        return time.perf_counter()

    def request_done(self, api_key: int, started: float) -> None:
        self.latency.labels(api_name(api_key)).observe(time.perf_counter() - started)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def serve(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._handle, host, port)
        bound = self._server.sockets[0].getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            if len(head) > MAX_REQUEST_BYTES:
                raise ValueError("request head too large")
            method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if method != "GET" or path.split("?")[0] not in ("/metrics", "/"):
                writer.write(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            else:
                body = self.render()
                writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError, ConnectionError):
            pass  # a broken scrape costs only its own connection
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
