"""`kraftlog node run`: run one KRaft node (the controller role) in the foreground.

The heavy imports (raft, the image, kio) happen only when the command runs, so `kraftlog --help`
stays fast. See engine/server/node.py for the directory layout and the APIs a node serves.
"""

from __future__ import annotations

import argparse

from kraftlog.engine.server.tools.common import add_command, add_commands

_EXAMPLE = ("example: kraftlog node run --node-id 1 --controller-quorum-voters "
            "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095 --dir /tmp/n1")


def register(parser: argparse.ArgumentParser) -> None:
    sub = add_commands(parser, "node_command")
    parser.epilog = _EXAMPLE
    run = add_command(sub, "run", "run a controller node until SIGTERM (needs a directory formatted by "
                      "kraftlog storage format)", _EXAMPLE, run_node)
    run.add_argument("--node-id", type=int, required=True, metavar="N", help="this node's id (a voter id)")
    run.add_argument("--controller-quorum-voters", required=True, metavar="ID@HOST:PORT,...",
                     help="every controller: id@host:port, comma separated")
    run.add_argument("--dir", required=True, metavar="DIR", help="the formatted node directory")
    run.add_argument("--cluster-id", default=None, metavar="ID",
                     help="refuse to start unless meta.properties holds this cluster id")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--listen", default=None, metavar="HOST:PORT",
                       help="where to listen (default: this node's voter address)")
    where.add_argument("--listen-fd", type=int, default=None, metavar="FD",
                       help="an inherited, bound and listening socket (tests use ephemeral ports this way)")
    run.add_argument("--election-timeout-ms", type=int, default=1000)
    run.add_argument("--fetch-timeout-ms", type=int, default=2000)
    run.add_argument("--request-timeout-ms", type=int, default=2000)
    run.add_argument("--fetch-max-wait-ms", type=int, default=500)
    run.add_argument("--session-timeout-ms", type=int, default=9000,
                     help="a broker without a heartbeat for this long is fenced (broker.session.timeout.ms)")
    run.add_argument("--log-level", default="INFO")


def run_node(args: argparse.Namespace) -> int:
    import asyncio
    import faulthandler
    import logging
    import signal
    import sys

    from kraftlog.engine.server.node import serve

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` dumps every thread's stack to stderr
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format=f"%(asctime)s node{args.node_id} %(name)s %(levelname)s %(message)s")
    return asyncio.run(serve(args))
