"""`kraftlog log tail`: follow a live cluster's committed metadata log (engine/client/tail.py).

One JSON object per record on stdout, in offset order, each offset once:
    {"offset": 12, "epoch": 2, "type": "TOPIC_RECORD", "version": 0, "data": {...}}
    {"offset": 5, "epoch": 1, "control": true, "type": "LEADER_CHANGE", ...}
A record that does not decode is printed with "error" instead of its data. A part of the log the
node no longer has (its log starts after a snapshot) is said on stderr, and the tail goes on
after it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys

from kraftlog.engine.cli.tools.common import ToolError, add_command, pipe_safe
from kraftlog.errors import KraftlogError

# engine/client/tail.py and the record codec are imported when the command runs: registering the
# group must stay cheap (`kraftlog --help` imports no asyncio or numpy)

EXAMPLE = """examples:
  kraftlog log tail --bootstrap-server 127.0.0.1:9093
  kraftlog log tail --bootstrap-server 1@h1:9093,2@h2:9093 --rack rack-a --from-offset 1200 --max-records 10

Any controller answers on its controller listener with committed records only (Fetch as a
consumer, KIP-392); a broker listener serves no Fetch, as Kafka's split has it.
With --rack, servers given as ID@HOST:PORT can be chosen by the leader as the rack's read replica."""

LEADER_CHANGE_KEY = struct.pack(">hh", 0, 2)  # control record key: version 0, type LEADER_CHANGE


def register(sub: argparse._SubParsersAction) -> None:
    tail = add_command(sub, "tail", "follow the committed metadata log of a live cluster, one JSON record per line",
                       EXAMPLE, pipe_safe(run_tail))
    tail.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                      help="nodes to read from, in order of preference (ID@HOST:PORT names the node)")
    tail.add_argument("--from-offset", type=int, default=0, metavar="N",
                      help="the first offset to print (default 0: from the start of the log)")
    tail.add_argument("--rack", default=None, help="the reader's rack: the leader may name a replica in it")
    tail.add_argument("--max-records", type=int, default=None, metavar="N",
                      help="stop after N records (default: follow until interrupted)")
    tail.add_argument("--give-up-after-ms", type=int, default=30_000, metavar="MS",
                      help="exit 1 when no server has answered for this long (default 30000)")


def run_tail(args: argparse.Namespace) -> int:
    from kraftlog.engine.client.tail import TailError, parse_servers

    try:
        servers = parse_servers(args.bootstrap_server)
    except ValueError as exc:
        raise ToolError(f"--bootstrap-server: {exc}") from None
    for flag, value in (("--from-offset", args.from_offset), ("--max-records", args.max_records),
                        ("--give-up-after-ms", args.give_up_after_ms)):
        if value is not None and value < 0:
            raise ToolError(f"{flag} {value}: must not be negative")
    try:
        return asyncio.run(_follow(servers, args))
    except KeyboardInterrupt:
        return 0
    except TailError as exc:
        raise ToolError(str(exc)) from None


async def _follow(servers, args: argparse.Namespace) -> int:
    from kraftlog.engine.client.tail import MetadataLogTail, TailGap

    tail = MetadataLogTail(servers, from_offset=args.from_offset, rack=args.rack,
                           give_up_after_ms=args.give_up_after_ms)
    left = args.max_records
    try:
        async for item in tail:
            if isinstance(item, TailGap):
                where = f" (they are in snapshot {item.snapshot_id.offset}-{item.snapshot_id.epoch})" \
                    if item.snapshot_id is not None else ""
                print(f"kraftlog log tail: offsets {item.from_offset}-{item.to_offset - 1} are no longer in the "
                      f"log{where}; going on from {item.to_offset}", file=sys.stderr, flush=True)
                continue
            for i, value in enumerate(item.records):
                if left is not None and left <= 0:
                    return 0
                sys.stdout.write(json.dumps(_record(item.base_offset + i, item.epoch, item.control, value),
                                            separators=(",", ":"), ensure_ascii=False) + "\n")
                if left is not None:
                    left -= 1
            sys.stdout.flush()
            if left is not None and left <= 0:
                return 0
    finally:
        await tail.close()
    return 0


def _record(offset: int, epoch: int, control: bool, value: bytes) -> dict:
    from kraftlog.engine.records import metadata as codec

    head = {"offset": offset, "epoch": epoch} | ({"control": True} if control else {})
    try:
        record = codec.decode_control(LEADER_CHANGE_KEY, value) if control else codec.decode_record(value)
    except KraftlogError as exc:
        return head | {"error": str(exc), "size": len(value)}
    return head | codec.to_json(record)
