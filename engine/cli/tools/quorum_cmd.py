"""`kraftlog quorum describe --status | --replication`: kafka-metadata-quorum against a live quorum.

Asks the given addresses for DescribeQuorum (Kafka's API 55, over the wire) until one answers as
the leader (a follower's answer names the leader and, in v2's Nodes, its endpoint: asked next),
then prints the same fields and columns as Kafka's tool (the cluster id from a Metadata answer of
that node, rows leader first):
    --status       ClusterId, LeaderId, LeaderEpoch, HighWatermark, MaxFollowerLag,
                   MaxFollowerLagTimeMs, CurrentVoters, CurrentObservers
    --replication  NodeId, LogEndOffset, Lag, LastFetchTimestamp, LastCaughtUpTimestamp, Status
"""

from __future__ import annotations

import argparse
import asyncio
import time

from kraftlog.engine.cli import values
from kraftlog.engine.node import tls
from kraftlog.errors import KraftlogError


class QuorumUnreachableError(KraftlogError):
    """No address answered DescribeQuorum as the leader."""


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="quorum_command", metavar="COMMAND", required=True)
    describe = sub.add_parser(
        "describe", help="describe the metadata quorum (like kafka-metadata-quorum describe)",
        epilog="Example: kraftlog quorum describe --status --bootstrap-controller 127.0.0.1:9093,127.0.0.1:9094")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true", help="leader, epoch, high watermark, lag, voters, observers")
    what.add_argument("--replication", action="store_true", help="one row per voter and observer")
    where = describe.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-controller", metavar="HOST:PORT[,...]", help="controller (voter) addresses")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="any node's address")
    describe.add_argument("--human-readable", action="store_true", help="timestamps as 'N ms ago'")
    describe.add_argument("--cluster-id", default=None, help="print this cluster id instead of asking the node "
                          "(DescribeQuorum does not carry it; a bare Raft log node serves no Metadata)")
    describe.add_argument("--timeout-ms", type=int, default=5000, help="give up after this long (default 5000)")
    tls.add_tls_arguments(describe)
    describe.set_defaults(run=run)


def parse_addresses(text: str) -> list[tuple[str, int]]:
    out = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise KraftlogError(f"bad address {item!r}: expected HOST:PORT")
        if not 1 <= int(port) <= values.PORT_MAX:  # dialled, so 0 is no port either
            raise KraftlogError(f"bad address {item!r}: the port is not 1..{values.PORT_MAX}")
        out.append((host, int(port)))
    if not out:
        raise KraftlogError("no address given")
    return out


async def _describe(addresses: list[tuple[str, int]], timeout_ms: int, ssl_context=None):
    """(the leader's DescribeQuorum answer, the address that gave it). An address that names the
    leader (DescribeQuorum v2 Nodes carry the voters' endpoints) sends the next question there."""
    from kraftlog.engine.node.raftnode import RaftClient
    from kraftlog.raft.types import Errors

    queue, asked, tried = list(addresses), set(), []
    while queue:
        host, port = address = queue.pop(0)
        if address in asked:
            continue
        asked.add(address)
        client = RaftClient({0: address}, attempt_timeout_ms=min(timeout_ms, 2000), ssl_context=ssl_context)
        try:
            resp = await asyncio.wait_for(client.describe_quorum(0, timeout_ms=timeout_ms), timeout_ms / 1000)
        except Exception as exc:  # noqa: BLE001 - an unreachable address is reported with the others
            tried.append(f"{host}:{port} ({type(exc).__name__})")
            continue
        finally:
            await client.close()
        if resp.partition_error is Errors.NONE:
            return resp, address
        leader_at = next(((h, p) for n, h, p in resp.nodes if n == resp.leader_id), None)
        if leader_at is not None:
            queue.insert(0, leader_at)
        leader = f", leader is node {resp.leader_id}" if resp.leader_id >= 0 else ""
        tried.append(f"{host}:{port} ({resp.partition_error.name}{leader})")
    raise QuorumUnreachableError(f"no leader answered DescribeQuorum; tried {', '.join(tried)} "
                                 "(give every controller's address to --bootstrap-controller)")


async def _cluster_id(address: tuple[str, int], timeout_ms: int, ssl_context=None) -> str | None:
    """The cluster id from a Metadata answer of ``address`` (as Kafka's tool asks DescribeCluster);
    None when the node serves no Metadata (a bare Raft log node) or does not answer in time."""
    from kio.schema.metadata.v12 import request as md_req

    from kraftlog.engine.protocol.connection import ClientConnection
    from kraftlog.engine.protocol.metadata_response import EpochMetadataResponse  # our answers carry a tag

    conn = ClientConnection(*address, ssl_context=ssl_context)
    try:
        await asyncio.wait_for(conn.open(), timeout_ms / 1000)
        answer = await conn.request(3, 12, md_req.MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                                  include_topic_authorized_operations=False),
                                    EpochMetadataResponse, timeout_s=timeout_ms / 1000)
        return answer.cluster_id
    except Exception:  # noqa: BLE001 - no Metadata here: the row says unknown
        return None
    finally:
        await conn.close()


async def _describe_with_cluster_id(addresses, timeout_ms: int, ssl_context, cluster_id: str | None):
    resp, address = await _describe(addresses, timeout_ms, ssl_context)
    if cluster_id is None:
        cluster_id = await _cluster_id(address, timeout_ms, ssl_context)
    return resp, cluster_id


def status_lines(resp, cluster_id: str | None) -> list[str]:
    leader = next((v for v in resp.voters if v.replica_id == resp.leader_id), None)
    followers = [v for v in resp.voters if v.replica_id != resp.leader_id]
    leader_end = leader.log_end_offset if leader else resp.high_watermark
    max_lag = max((leader_end - v.log_end_offset for v in followers), default=0)
    caught_up = [v.last_caught_up_ms for v in followers if v.last_caught_up_ms >= 0]
    lag_time = (leader.last_caught_up_ms - min(caught_up)) if leader and caught_up else 0
    rows = [("ClusterId", cluster_id or "(unknown: the node serves no Metadata; see --cluster-id)"),
            ("LeaderId", resp.leader_id),
            ("LeaderEpoch", resp.leader_epoch), ("HighWatermark", resp.high_watermark),
            ("MaxFollowerLag", max_lag), ("MaxFollowerLagTimeMs", max(lag_time, 0)),
            ("CurrentVoters", "[" + ",".join(str(v.replica_id) for v in resp.voters) + "]"),
            ("CurrentObservers", "[" + ",".join(str(o.replica_id) for o in resp.observers) + "]")]
    return [f"{name + ':':<24}{value}" for name, value in rows]


def replication_lines(resp, human_readable: bool, now_ms: int | None = None) -> list[str]:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    leader_end = next((v.log_end_offset for v in resp.voters if v.replica_id == resp.leader_id), resp.high_watermark)

    def stamp(ms: int) -> str:
        if ms < 0:
            return "-1"
        return f"{max(now_ms - ms, 0)} ms ago" if human_readable else str(ms)

    header = ["NodeId", "LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"]
    rows = []
    leader = [(v, "Leader") for v in resp.voters if v.replica_id == resp.leader_id]
    followers = [(v, "Follower") for v in resp.voters if v.replica_id != resp.leader_id]
    for replica, status in leader + followers + [(o, "Observer") for o in resp.observers]:  # Kafka's order
        rows.append([str(replica.replica_id), str(replica.log_end_offset), str(max(leader_end - replica.log_end_offset, 0)),
                     stamp(replica.last_fetch_ms), stamp(replica.last_caught_up_ms), status])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]


def run(args: argparse.Namespace) -> int:
    addresses = parse_addresses(args.bootstrap_controller or args.bootstrap_server)
    context = tls.client_context(args)
    if args.status:
        resp, cluster_id = asyncio.run(_describe_with_cluster_id(addresses, args.timeout_ms, context, args.cluster_id))
        lines = status_lines(resp, cluster_id)
    else:
        resp, _ = asyncio.run(_describe(addresses, args.timeout_ms, context))
        lines = replication_lines(resp, args.human_readable)
    print("\n".join(lines))
    return 0
