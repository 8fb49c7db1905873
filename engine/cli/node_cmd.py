"""`kraftlog node run`: run one KRaft node (controller, broker, or both) in the foreground.

The heavy imports (raft, the image, kio) happen only when the command runs, so `kraftlog --help`
stays fast. See engine/node/node.py for the roles, the directory layout and the APIs a node serves.

Settings come from flags, or from ``--config FILE``: a Java properties file with Kafka's names
(below); a flag given on the command line wins over the file. Every other key in the file is
named once in a warning at start (Kafka's "supplied but not used"), so a misspelt key is seen.

    node.id=1
    process.roles=broker,controller
    controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095
    log.dirs=/var/lib/kraftlog/n1          (the first directory is used)
    listeners=PLAINTEXT://:9092,CONTROLLER://:9093
    advertised.listeners=PLAINTEXT://broker1.example:9092
    controller.listener.names=CONTROLLER   (a controller listens on this listener, serving Raft and
                                           the controller RPCs; a broker on every other one,
                                           serving the client APIs; a combined node on both)
    listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT   (or SSL; no SASL)
    inter.broker.listener.name=PLAINTEXT
    controller.quorum.election.timeout.ms=1000
    controller.quorum.fetch.timeout.ms=2000
    controller.quorum.request.timeout.ms=2000
    num.partitions=1                       (CreateTopics with NumPartitions -1)
    default.replication.factor=1           (CreateTopics with ReplicationFactor -1)
    broker.rack=rack-a
    broker.session.timeout.ms=9000
    broker.heartbeat.interval.ms=2000
    metadata.log.max.record.bytes.between.snapshots=20971520
    metadata.log.max.snapshot.interval.ms=3600000
    socket.request.max.bytes=104857600
    auto.leader.rebalance.enable=true
    leader.imbalance.check.interval.seconds=300
    leader.imbalance.per.broker.percentage=10

TLS (``--tls-cert/--tls-key/--tls-ca``, engine/node/tls.py): a TLS listener requires client
certificates signed by the CA, and the node presents its own certificate to the other nodes. With
flags only, every listener is TLS when they are given; with listener.security.protocol.map, the
SSL listeners are, and the links to the controllers when the controller listener is SSL
(engine/node/listeners.py has every listener rule).
"""

from __future__ import annotations

import argparse

from kraftlog.engine.cli import values
from kraftlog.engine.cli.tools.common import ToolError, add_command, add_commands, warn
from kraftlog.engine.node import tls

_EXAMPLE = ("example: kraftlog node run --node-id 1 --controller-quorum-voters "
            "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095 --dir /tmp/n1")

_MS, _BYTES = values.positive("ms"), values.positive("bytes")
# flag dest -> converter: the one check of each value, for its flag and its --config key alike
_CONVERTERS = {
    "node_id": values.node_id,
    "controller_quorum_voters": values.voters,
    "listen": values.host_port,
    "listen_fd": values.listen_fd,
    "election_timeout_ms": _MS,
    "fetch_timeout_ms": _MS,
    "request_timeout_ms": _MS,
    "fetch_max_wait_ms": values.non_negative("ms"),
    "session_timeout_ms": _MS,
    "heartbeat_interval_ms": _MS,
    "snapshot_max_new_bytes": _BYTES,
    "snapshot_interval_ms": _MS,
    "metrics_port": values.port,
    "max_frame_bytes": _BYTES,
    "log_level": values.log_level,
    "auto_leader_rebalance_enable": values.boolean,
    "leader_imbalance_check_interval_seconds": values.positive("seconds"),
    "leader_imbalance_per_broker_percentage": values.percentage,
    "num_partitions": values.positive("partitions"),
    "default_replication_factor": values.positive("replicas"),
}
# properties key -> (argparse dest, converter)
_PROPERTIES = {
    "node.id": ("node_id", values.node_id),
    "process.roles": ("process_roles", str),
    "controller.quorum.voters": ("controller_quorum_voters", values.voters),
    "log.dirs": ("dir", lambda v: v.split(",")[0].strip()),
    # the listener settings are planned together (engine/node/listeners.py, _plan_listeners)
    "listeners": ("listeners", str),
    "advertised.listeners": ("advertised_listeners", str),
    "controller.listener.names": ("controller_listener_names", str),
    "listener.security.protocol.map": ("listener_security_protocol_map", str),
    "inter.broker.listener.name": ("inter_broker_listener_name", str),
    "controller.quorum.election.timeout.ms": ("election_timeout_ms", _CONVERTERS["election_timeout_ms"]),
    "controller.quorum.fetch.timeout.ms": ("fetch_timeout_ms", _CONVERTERS["fetch_timeout_ms"]),
    "controller.quorum.request.timeout.ms": ("request_timeout_ms", _CONVERTERS["request_timeout_ms"]),
    "num.partitions": ("num_partitions", _CONVERTERS["num_partitions"]),
    "default.replication.factor": ("default_replication_factor", _CONVERTERS["default_replication_factor"]),
    "broker.rack": ("rack", str),
    "cluster.id": ("cluster_id", str),
    "broker.session.timeout.ms": ("session_timeout_ms", _CONVERTERS["session_timeout_ms"]),
    "broker.heartbeat.interval.ms": ("heartbeat_interval_ms", _CONVERTERS["heartbeat_interval_ms"]),
    "metadata.log.max.record.bytes.between.snapshots": ("snapshot_max_new_bytes", _CONVERTERS["snapshot_max_new_bytes"]),
    "metadata.log.max.snapshot.interval.ms": ("snapshot_interval_ms", _CONVERTERS["snapshot_interval_ms"]),
    "socket.request.max.bytes": ("max_frame_bytes", _CONVERTERS["max_frame_bytes"]),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", _CONVERTERS["auto_leader_rebalance_enable"]),
    "leader.imbalance.check.interval.seconds": ("leader_imbalance_check_interval_seconds",
                                                _CONVERTERS["leader_imbalance_check_interval_seconds"]),
    "leader.imbalance.per.broker.percentage": ("leader_imbalance_per_broker_percentage",
                                               _CONVERTERS["leader_imbalance_per_broker_percentage"]),
}
_DEFAULTS = {"election_timeout_ms": 1000, "fetch_timeout_ms": 2000, "request_timeout_ms": 2000,
             "fetch_max_wait_ms": 500, "session_timeout_ms": 9000, "heartbeat_interval_ms": 2000,
             "snapshot_max_new_bytes": 20 << 20, "snapshot_interval_ms": 3_600_000, "log_level": "INFO",
             "max_frame_bytes": 100 << 20, "auto_leader_rebalance_enable": True,
             "leader_imbalance_check_interval_seconds": 300, "leader_imbalance_per_broker_percentage": 10,
             "num_partitions": 1, "default_replication_factor": 1}
_FILE_ONLY = ("listeners", "advertised_listeners", "controller_listener_names", "listener_security_protocol_map",
              "inter_broker_listener_name")
_REQUIRED = {"node_id": "--node-id", "controller_quorum_voters": "--controller-quorum-voters", "dir": "--dir"}


def register(parser: argparse.ArgumentParser) -> None:
    sub = add_commands(parser, "node_command")
    parser.epilog = _EXAMPLE
    run = add_command(sub, "run", "run a node (controller, broker or both) until SIGTERM; needs a directory "
                      "formatted by kraftlog storage format", _EXAMPLE, run_node)
    run.add_argument("--config", default=None, metavar="FILE",
                     help="a properties file with Kafka's setting names (flags win over it)")
    run.add_argument("--node-id", type=values.node_id, default=None, metavar="N", help="this node's id")
    run.add_argument("--process-roles", default=None, metavar="ROLES",
                     help="controller, broker or broker,controller (default: both for a one-voter quorum of "
                          "this node, controller for a voter, broker otherwise)")
    run.add_argument("--controller-quorum-voters", type=values.voters, default=None, metavar="ID@HOST:PORT,...",
                     help="every controller: id@host:port, comma separated")
    run.add_argument("--dir", default=None, metavar="DIR", help="the formatted node directory")
    run.add_argument("--cluster-id", default=None, metavar="ID",
                     help="refuse to start unless meta.properties holds this cluster id")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--listen", type=values.host_port, default=None, metavar="HOST:PORT",
                       help="where to listen (default: this node's voter address; a broker 127.0.0.1:0)")
    where.add_argument("--listen-fd", type=values.listen_fd, default=None, metavar="FD",
                       help="an inherited, bound and listening socket (tests use ephemeral ports this way)")
    run.add_argument("--rack", default=None, help="this node's rack (broker.rack): places replicas on brokers, and lets a "
                     "broker fetch the metadata log from a voter of its own rack (KIP-392)")
    for flag, what in (("--election-timeout-ms", None), ("--fetch-timeout-ms", None), ("--request-timeout-ms", None),
                       ("--fetch-max-wait-ms", None),
                       ("--session-timeout-ms", "a broker without a heartbeat for this long is fenced "
                                                "(broker.session.timeout.ms)"),
                       ("--heartbeat-interval-ms", "how often a broker heartbeats (broker.heartbeat.interval.ms)"),
                       ("--snapshot-max-new-bytes", "write a snapshot after this many bytes of new log"),
                       ("--snapshot-interval-ms", "... or after this long with new log")):
        run.add_argument(flag, type=_CONVERTERS[flag[2:].replace("-", "_")], default=None, help=what)
    run.add_argument("--auto-leader-rebalance-enable", type=values.boolean, default=None, metavar="true|false",
                     help="move leaderships back to preferred replicas (auto.leader.rebalance.enable; default true)")
    run.add_argument("--leader-imbalance-check-interval-seconds",
                     type=_CONVERTERS["leader_imbalance_check_interval_seconds"], default=None, metavar="S",
                     help="how often the active controller heals ISRs and checks leader balance "
                          "(leader.imbalance.check.interval.seconds; default 300)")
    run.add_argument("--leader-imbalance-per-broker-percentage",
                     type=_CONVERTERS["leader_imbalance_per_broker_percentage"], default=None, metavar="P",
                     help="rebalance a broker's preferred leaderships once more than P%% of them are led "
                          "elsewhere (leader.imbalance.per.broker.percentage; default 10)")
    run.add_argument("--num-partitions", type=_CONVERTERS["num_partitions"], default=None, metavar="N",
                     help="partitions of a topic created with NumPartitions -1 (num.partitions; default 1)")
    run.add_argument("--default-replication-factor", type=_CONVERTERS["default_replication_factor"], default=None,
                     metavar="N", help="replicas of a topic created with ReplicationFactor -1 "
                                       "(default.replication.factor; default 1)")
    run.add_argument("--max-metadata-version", default=None, metavar="V",
                     help="advertise metadata.version support only up to V (a name like 3.9-IV0 or a level): "
                          "plays a node of an older release, e.g. to test upgrade/downgrade checks")
    run.add_argument("--metrics-port", type=values.port, default=None, metavar="PORT",
                     help="serve Prometheus metrics at http://<listen host>:PORT/metrics (0: any free port, "
                          "logged at start); off when not given")
    run.add_argument("--max-frame-bytes", type=_CONVERTERS["max_frame_bytes"], default=None, metavar="N",
                     help="refuse (close the connection of) a request frame above this size "
                          "(socket.request.max.bytes; default 100 MiB)")
    tls.add_tls_arguments(run)
    run.add_argument("--log-level", type=values.log_level, default=None, metavar="LEVEL",
                     help=f"{', '.join(values.LOG_LEVELS)} (default INFO)")


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill what the flags left unset from ``--config`` and the defaults; ToolError names a
    missing setting or a bad line."""
    for dest in _FILE_ONLY:
        setattr(args, dest, None)
    args.listener_plan = None
    if args.config is not None:
        properties = _read_properties(args.config)
        unused = sorted(k for k in properties if k not in _PROPERTIES)
        if unused:
            warn("node run", f"{args.config}: these settings are not used: {', '.join(unused)}")
        for key, value in properties.items():
            dest, convert = _PROPERTIES.get(key, (None, None))
            if dest is None or getattr(args, dest, None) is not None:
                continue
            try:
                setattr(args, dest, convert(value))
            except (ValueError, values.Bad) as exc:
                raise ToolError(f"{args.config}: {key}={value}: {exc}") from None
        if args.listeners is not None and args.listen is None and args.listen_fd is None:
            args.listener_plan = _plan_listeners(args)
            args.listen = args.listener_plan.opened[0].bind_address
    for dest, value in _DEFAULTS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, value)
    if args.max_metadata_version is not None:
        from kraftlog.engine.image import versions

        args.max_metadata_version = versions.parse(args.max_metadata_version)
    for dest, flag in _REQUIRED.items():
        if getattr(args, dest) is None:
            raise ToolError(f"{flag} is required (or its setting in --config)")
    return args


def _plan_listeners(args: argparse.Namespace):
    """The sockets this node opens from Kafka's listener settings (engine/node/listeners.py);
    ToolError names the setting that cannot work."""
    from kraftlog.engine.node import listeners

    try:
        return listeners.plan(listeners=args.listeners, roles=_roles_of(args),
                              controller_names=args.controller_listener_names,
                              advertised=args.advertised_listeners, protocol_map=args.listener_security_protocol_map,
                              inter_broker=args.inter_broker_listener_name,
                              tls_given=any(getattr(args, f, None) for f in ("tls_cert", "tls_key", "tls_ca")))
    except listeners.ListenerConfigError as exc:
        raise ToolError(f"{args.config}: {exc}") from None


def _roles_of(args: argparse.Namespace) -> set[str]:
    """process.roles, or what the node will take without it (node.parse_roles' rule)."""
    if args.process_roles:
        return {r.strip() for r in args.process_roles.split(",") if r.strip()}
    from kraftlog.engine.node.raftnode import parse_voters

    voters = parse_voters(args.controller_quorum_voters) if args.controller_quorum_voters else {}
    if args.node_id in voters:
        return {"controller", "broker"} if len(voters) == 1 else {"controller"}
    return {"broker"}


def _read_properties(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise ToolError(f"--config {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ToolError(f"--config {path}: not a text properties file (byte {exc.start} is not UTF-8)") from None
    out = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text[0] in "#!":
            continue
        key, sep, value = text.partition("=")
        if not sep:
            raise ToolError(f"{path}:{number}: {text!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def run_node(args: argparse.Namespace) -> int:
    import asyncio
    import faulthandler
    import logging
    import signal
    import sys

    from kraftlog.engine.node.memory import prefault_heap
    from kraftlog.engine.node.node import serve

    args = resolve(args)
    prefault_heap()  # 8 MiB Fetch answers from the heap's faulted pages, not fresh ones (engine/node/memory.py)
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` dumps every thread's stack to stderr
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format=f"%(asctime)s node{args.node_id} %(name)s %(levelname)s %(message)s")
    return asyncio.run(serve(args))
