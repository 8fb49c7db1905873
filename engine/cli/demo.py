"""`kraftlog demo`: a guided tour of a live KRaft cluster on this machine, in well under a minute.

It starts a real cluster as separate processes on 127.0.0.1 speaking Kafka's wire protocol (fsync
on): 3 controllers (a Raft quorum; the leader is the active controller) and 2 brokers (Raft
observers that pull the metadata log), or one combined node with ``--single-node``. Then it
creates Kafka's reference workload through the active controller, shows the quorum as
`kafka-metadata-quorum` does, SIGKILLs the active controller and times the failover, fences and
unfences a broker, restarts a broker from its own snapshot, replays a controller's directory
from disk into a metadata image, and stores that image in LMDB and as a Kafka .checkpoint. Then a
table of the timings and ``demo: ok``. The steps are in demo_parts/steps.py.

Processes: every node is stopped whatever happens (normal end, error, SIGINT/SIGTERM: see
demo_parts/cluster.py InterruptGuard), and dies with the demo even if the demo is SIGKILLed
(demo_parts/node_main.py). The data directory stays for the tools unless --clean (then it is
removed once the tour succeeded; a failed tour always leaves it, node logs included).
"""

from __future__ import annotations

import argparse
import os
import sys

from kraftlog.engine.cli.tools.common import pipe_safe, strict

DEFAULT_DIR = "./kraftlog-demo-data"
DEFAULT_PARTITIONS = 100_000
CONTROLLER_IDS = (1, 2, 3)
BROKER_IDS = (4, 5)
SINGLE_NODE_IDS = (1,)
EXIT_INTERRUPTED = 130

EXAMPLE = """examples:
  kraftlog demo                                   # 3 controllers + 2 brokers, 100,000 partitions
  kraftlog demo --single-node                     # one combined controller+broker
  kraftlog demo --partitions 1000000              # Kafka's full benchmark size
  kraftlog demo --quiet --dir /tmp/demo --clean   # just the table; remove the data at the end
afterwards, on the data it leaves:
  kraftlog log verify ./kraftlog-demo-data/node-1/__cluster_metadata-0
  kraftlog image show ./kraftlog-demo-data/node-4/__cluster_metadata-0"""


def register(parser: argparse.ArgumentParser) -> None:
    strict(parser)
    parser.epilog = EXAMPLE
    parser.add_argument("--dir", default=DEFAULT_DIR, metavar="DIR",
                        help=f"data directory for the nodes, the snapshot store and the checkpoint (default {DEFAULT_DIR})")
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS, metavar="N",
                        help=f"partitions in the workload (default {DEFAULT_PARTITIONS:,}; 1000000 is Kafka's full "
                             "benchmark size)")
    parser.add_argument("--single-node", action="store_true",
                        help="one combined controller+broker process instead of 3 controllers + 2 brokers")
    parser.add_argument("--force", action="store_true",
                        help="use --dir even if it holds other things (only the demo's own entries are replaced)")
    parser.add_argument("--clean", action="store_true",
                        help="remove what the demo wrote once it succeeded (implies --force at the start)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="print only the final table (no narration, no progress bars)")
    parser.set_defaults(run=pipe_safe(run))


def _check(args: argparse.Namespace) -> None:
    from kraftlog.engine.cli.demo_parts.errors import DemoError

    if args.partitions < 10:
        raise DemoError(f"--partitions must be at least 10 (one topic of 10 partitions), got {args.partitions}")


def node_ids(single_node: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(controller ids, broker-only ids) of the tour's cluster."""
    return (SINGLE_NODE_IDS, ()) if single_node else (CONTROLLER_IDS, BROKER_IDS)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from kraftlog.engine.cli.demo_parts import datadir
    from kraftlog.engine.cli.demo_parts.cluster import InterruptGuard
    from kraftlog.engine.cli.demo_parts.narrator import Narrator
    from kraftlog.engine.cli.tools.common import show_progress
    from kraftlog.engine.node.metaprops import random_uuid
    from kraftlog.engine.records.schema import uuid_to_kafka

    _check(args)
    controllers, brokers = node_ids(args.single_node)
    all_ids = (*controllers, *brokers)
    data_dir = os.path.abspath(args.dir)
    note = datadir.prepare(data_dir, all_ids, force=args.force or args.clean)
    narrator = Narrator(quiet=args.quiet, progress=show_progress(args))
    holder: dict = {}
    # An interrupted or failed tour drops its connections with requests in flight; asyncio then
    # logs each write to a closed peer and each abandoned request's future. The demo reports its
    # own failure in one line, so asyncio's logger stays quiet unless --debug.
    asyncio_log = logging.getLogger("asyncio")
    was_disabled = asyncio_log.disabled
    asyncio_log.disabled = not getattr(args, "debug", False)
    with InterruptGuard(lambda: holder.get("cluster")) as guard:
        try:
            asyncio.run(_tour(narrator, data_dir, args.partitions, (controllers, brokers),
                              uuid_to_kafka(random_uuid()), holder, guard, note, keep_data=not args.clean))
        except asyncio.CancelledError:
            if guard.signum is None:
                raise
        finally:
            cluster = holder.get("cluster")
            if cluster is not None:
                cluster.close()  # kills and reaps anything still running (idempotent)
            asyncio_log.disabled = was_disabled
    if guard.signum is not None:
        print(f"kraftlog demo: interrupted by {guard.signal_name}; stopped the node processes; data left in "
              f"{data_dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.clean:
        datadir.clean(data_dir, all_ids)
    return 0


async def _tour(narrator, data_dir: str, partitions: int, ids, cluster_id: str, holder: dict, guard,
                note: str | None, *, keep_data: bool) -> None:
    import asyncio

    from kraftlog.engine.cli.demo_parts import steps
    from kraftlog.engine.cli.demo_parts.admin import Admin
    from kraftlog.engine.cli.demo_parts.cluster import NodeCluster
    from kraftlog.engine.node.raftnode import RaftClient

    controllers, brokers = ids
    guard.attach()
    asyncio.get_running_loop().set_exception_handler(_quiet_abandoned_requests)
    cluster = holder["cluster"] = NodeCluster(data_dir, controllers, broker_ids=brokers, cluster_id=cluster_id,
                                              combined=not brokers)
    client = RaftClient(cluster.voters)
    admin = Admin(cluster)
    tour = steps.Tour(narrator, cluster, data_dir, partitions, client=client, admin=admin)
    shape = "one combined controller+broker" if not brokers else \
        f"{len(controllers)} controllers + {len(brokers)} brokers"
    narrator.intro(f"kraftlog demo: a KRaft cluster of {shape} as processes on 127.0.0.1, {partitions:,} partitions "
                   f"created through the active controller, a controller killed, a broker fenced and restarted, the "
                   f"metadata replayed and snapshotted. Data: {data_dir}")
    if note:
        narrator.intro(f"({note})")
    try:
        await steps.cluster_step(tour)
        await steps.workload_step(tour)
        await steps.failover_step(tour)
        await steps.fencing_step(tour)
        await steps.restart_step(tour)
        await steps.stop_cluster(tour)
    finally:
        await admin.close()
        await client.close()
        await cluster.stop_all()
    steps.replay_step(tour)
    steps.snapshot_step(tour)
    _next_commands(narrator, tour, keep_data)
    narrator.summary(f"kraftlog demo: {partitions:,} partitions, {shape} on 127.0.0.1, fsync on")


def _quiet_abandoned_requests(loop, context: dict) -> None:
    """Drop "exception never retrieved" reports of requests abandoned on a dropped connection
    (pipelined Produce requests of an interrupted tour; reported when garbage-collected, possibly
    after the loop closed); everything else goes to asyncio's default handler."""
    from kraftlog.engine.protocol.connection import ClientError

    if isinstance(context.get("exception"), ClientError | ConnectionError) and "future" in context:
        return
    loop.default_exception_handler(context)


def _next_commands(narrator, tour, keep_data: bool) -> None:
    from kraftlog.engine.cli.demo_parts import steps
    from kraftlog.engine.cli.demo_parts.datadir import CHECKPOINTS

    c = tour.cluster
    log_dir = c.nodes[tour.leader].log_dir
    broker_dir = c.nodes[c.brokers[-1]].log_dir
    checkpoints = os.path.join(tour.data_dir, CHECKPOINTS)
    name, pid = tour.lookup
    narrator.step(steps.STEPS, steps.STEPS, "the data stays; look at it with the tools:" if keep_data else
                  "the data is removed now (--clean); without --clean, the tools would read it with:")
    narrator.say(f"kraftlog log verify {log_dir}")
    narrator.say(f"kraftlog log dump {os.path.join(log_dir, '00000000000000000000.log')} | head")
    narrator.say(f"kraftlog image show {broker_dir} /image/topics/byName/{name}/{pid}")
    checkpoint = sorted(os.listdir(checkpoints))[-1] if os.path.isdir(checkpoints) else ""
    narrator.say(f"kraftlog image show {os.path.join(checkpoints, checkpoint)}")
    narrator.say(f"echo 'ls /image/cluster/brokers' | kraftlog image shell {log_dir}")
