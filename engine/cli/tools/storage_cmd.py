"""`kraftlog storage`: random-uuid, format, info (Kafka's kafka-storage tool, for one directory).

``format`` writes meta.properties (metaprops.py) and nothing else: the node process that needs a
formatted directory comes later. It refuses a directory that is already formatted or holds any
data unless --force; with --force it rewrites meta.properties (with a new directory.id) and
leaves every other file as it is.
"""

from __future__ import annotations

import argparse
import os

from kraftlog.engine.cli import values
from kraftlog.engine.cli.tools.common import (
    METADATA_LOG_DIRNAME,
    NotALogDirectoryError,
    ToolError,
    add_command,
    add_commands,
    exists,
    is_segment_name,
    pipe_safe,
)
from kraftlog.engine.layout import META_PROPERTIES


class NotFormattedError(ToolError):
    """The directory has no meta.properties."""


def register(parser: argparse.ArgumentParser) -> None:
    sub = add_commands(parser, "storage_command")
    parser.epilog = "example: kraftlog storage format --cluster-id $(kraftlog storage random-uuid) --node-id 1 --dir /tmp/n1"
    add_command(sub, "random-uuid", "print a new random cluster id (Kafka's base64url uuid)",
                "example: kraftlog storage random-uuid", pipe_safe(run_random_uuid))

    fmt = add_command(sub, "format", "write meta.properties into a directory (refuses one with data unless --force)",
                      "example: kraftlog storage format --cluster-id $(kraftlog storage random-uuid) "
                      "--node-id 1 --dir /tmp/n1", pipe_safe(run_format))
    fmt.add_argument("--cluster-id", "-t", required=True, metavar="ID",
                     help="the cluster id (from kraftlog storage random-uuid)")
    fmt.add_argument("--node-id", type=values.node_id, required=True, metavar="N",
                     help=f"this node's id (0..{values.INT32_MAX})")
    fmt.add_argument("--dir", required=True, metavar="DIR", help="the directory to format (created if missing)")
    fmt.add_argument("--force", action="store_true",
                     help="format even if the directory is formatted or holds data (other files are kept)")

    info = add_command(sub, "info", "print meta.properties and whether the directory holds a log",
                       "example: kraftlog storage info --dir /tmp/n1", pipe_safe(run_info))
    info.add_argument("--dir", required=True, metavar="DIR", help="the directory to describe")


def run_random_uuid(args: argparse.Namespace) -> int:
    from kraftlog.engine.node import metaprops
    from kraftlog.engine.records.schema import uuid_to_kafka

    print(uuid_to_kafka(metaprops.random_uuid()))
    return 0


def run_format(args: argparse.Namespace) -> int:
    from kraftlog.engine.node import metaprops
    from kraftlog.engine.records.schema import uuid_to_kafka

    metaprops.parse_uuid(args.cluster_id, "--cluster-id")
    directory = args.dir
    if exists(directory) and not os.path.isdir(directory):
        raise ToolError(f"{directory} exists and is not a directory")
    existing = metaprops.read(directory) if os.path.isdir(directory) else None
    if not args.force:
        if existing is not None:
            raise ToolError(f"{directory} is already formatted (cluster.id {existing.get('cluster.id')}, "
                            f"node.id {existing.get('node.id')}); use --force to format it again")
        if os.path.isdir(directory) and os.listdir(directory):
            raise ToolError(f"{directory} is not empty ({len(os.listdir(directory))} entries); format an empty "
                            "directory, or use --force to format it anyway (its files are kept)")
    os.makedirs(directory, exist_ok=True)
    directory_id = uuid_to_kafka(metaprops.random_uuid())
    path = metaprops.write(directory, cluster_id=args.cluster_id, node_id=args.node_id, directory_id=directory_id)
    again = " again (its other files were kept)" if existing is not None or args.force else ""
    print(f"Formatted {directory}{again}: wrote {path} with cluster.id={args.cluster_id} node.id={args.node_id} "
          f"directory.id={directory_id}")
    return 0


def run_info(args: argparse.Namespace) -> int:
    from kraftlog.engine.node import metaprops

    directory = args.dir
    if not exists(directory):
        raise NotALogDirectoryError(f"{directory} does not exist")
    if not os.path.isdir(directory):
        raise NotALogDirectoryError(f"{directory} is not a directory")
    props = metaprops.read(directory)
    if props is None:
        raise NotFormattedError(f"{directory} is not formatted (no {META_PROPERTIES}); format it with: kraftlog "
                                f"storage format --cluster-id $(kraftlog storage random-uuid) --node-id 1 --dir {directory}")
    metaprops.check(directory, props)
    print("Found log directory:")
    print(f"  {directory}")
    print()
    print("Found metadata: {" + ", ".join(f"{k}={props[k]}" for k in sorted(props)) + "}")
    print()
    print(_log_summary(directory))
    return 0


def _log_summary(directory: str) -> str:
    """One line: where the log is, its segments, offsets and size (batch headers only: no CRC)."""
    from kraftlog.engine.cli.tools.segments import map_file, segment_bases
    from kraftlog.engine.log.index import walk_batches
    from kraftlog.engine.log.log import CLEAN_SHUTDOWN_NAME

    for candidate in (directory, os.path.join(directory, METADATA_LOG_DIRNAME)):
        if not os.path.isdir(candidate) or not any(is_segment_name(n) for n in os.listdir(candidate)):
            continue
        bases = segment_bases(candidate)
        paths = [os.path.join(candidate, f"{b:020d}.log") for b in bases]
        size = sum(os.path.getsize(p) for p in paths)
        buf = map_file(paths[-1])
        reached, last = walk_batches(buf, 0, len(buf)) if len(buf) else (0, -1)
        end = last + 1 if last >= 0 else bases[-1]
        clean = "yes" if os.path.exists(os.path.join(candidate, CLEAN_SHUTDOWN_NAME)) else "no"
        torn = f", {len(buf) - reached} bytes after the last whole batch" if reached != len(buf) else ""
        return (f"Found log: {candidate}: {len(bases)} segment(s), offsets {bases[0]}..{end - 1}, {size:,} bytes, "
                f"clean shutdown: {clean}{torn}")
    return f"Found log: none (no segments in {directory} or {os.path.join(directory, METADATA_LOG_DIRNAME)})"
