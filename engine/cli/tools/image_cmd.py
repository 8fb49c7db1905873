"""`kraftlog image`: show and shell, over the image of a log directory or a .checkpoint snapshot.

The image is built read-only (imageload.py), with a progress bar while the log replays, and laid
out as kafka-metadata-shell's /image tree (imagetree.py).
"""

from __future__ import annotations

import argparse
import json
import sys

from kraftlog.engine.cli.tools.common import (
    ToolError,
    add_command,
    add_commands,
    add_quiet,
    pipe_safe,
    show_progress,
)

SHOW_EXAMPLE = """examples:
  kraftlog image show /tmp/meta
  kraftlog image show /tmp/meta /image/topics/byName/topic-000042/3
  kraftlog image show /tmp/meta /image/cluster --json
  kraftlog image show /tmp/meta/00000000000001000061-0000000001.checkpoint /image/features"""
SHELL_EXAMPLE = """examples:
  kraftlog image shell /tmp/meta
  echo 'ls /image/topics/byName' | kraftlog image shell /tmp/meta
  kraftlog image shell /tmp/meta cat /image/features/metadataVersion

commands: ls, cd, cat, tree, find, pwd, help, exit (path components may be globs)"""


def register(parser: argparse.ArgumentParser) -> None:
    sub = add_commands(parser, "image_command")
    parser.epilog = "example: kraftlog image shell /tmp/meta"
    show = add_command(sub, "show", "print the image, or one path of it (a leaf's value, a directory's tree)",
                       SHOW_EXAMPLE, pipe_safe(run_show))
    _source(show)
    show.add_argument("path", nargs="?", default=None, metavar="PATH",
                      help="a path such as /image/topics/byName/NAME/0 (default: a summary of the image)")
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    show.add_argument("--depth", type=int, default=None, metavar="N", help="show directories N levels deep at most")

    shell = add_command(sub, "shell", "browse the image with ls, cd, cat, tree, find (reads commands from stdin)",
                        SHELL_EXAMPLE, pipe_safe(run_shell))
    _source(shell)
    # dest: not "command", which names the CLI group in error lines (engine/cli/main.py)
    shell.add_argument("shell_command", nargs=argparse.REMAINDER, metavar="COMMAND ...",
                       help="run this one command instead of reading commands from stdin")


def _source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="DIR|FILE.checkpoint",
                        help="a log directory (or a node directory holding __cluster_metadata-0), or a snapshot file")
    parser.add_argument("--skip-errors", action="store_true",
                        help="skip records that cannot be applied (counted in the summary) instead of failing")
    add_quiet(parser)


def _load(args: argparse.Namespace):
    from kraftlog.engine.cli.tools import imageload

    return imageload.load(args.source, command="image", progress=show_progress(args), skip_errors=args.skip_errors)


def run_show(args: argparse.Namespace) -> int:
    from kraftlog.engine.cli.tools import imagetree, shell

    if args.depth is not None and args.depth < 0:
        raise ToolError(f"--depth must be >= 0, got {args.depth}")
    loaded = _load(args)
    tree = imagetree.root(loaded.image)
    if args.path is None:
        _summary(loaded, args.json)
        return 0
    node = shell.resolve(tree, args.path if args.path.startswith("/") else "/image/" + args.path)
    if node is None:
        raise ToolError(f"{args.path}: no such path in the image (try: kraftlog image shell {args.source} ls /image)")
    if args.json:
        print(json.dumps(imagetree.to_data(node, args.depth), indent=2, ensure_ascii=False))
        return 0
    if isinstance(node, imagetree.Leaf):
        print(node.text())
        return 0
    name = args.path.rstrip("/").rsplit("/", 1)[-1] or "/"
    for line in _limited_tree(name, node, args.depth):
        print(line)
    return 0


def _limited_tree(name: str, node, depth_limit: int | None, depth: int = 0):
    from kraftlog.engine.cli.tools.imagetree import Leaf

    indent = "  " * depth
    if isinstance(node, Leaf):
        yield f"{indent}{name}: {node.text()}"
        return
    names = node.names()
    if depth_limit is not None and depth >= depth_limit:
        yield f"{indent}{name}: ({len(names)} entries)"
        return
    yield f"{indent}{name}:"
    for child_name in names:
        child = node.child(child_name)
        if child is not None:
            yield from _limited_tree(child_name, child, depth_limit, depth + 1)


def _summary(loaded, as_json: bool) -> None:
    from kraftlog.engine.image import versions

    image, m = loaded.image, loaded.manifest
    brokers = image.cluster.brokers
    facts = {
        "source": loaded.source, "kind": loaded.kind, "endOffset": loaded.end_offset,
        "provenance": {"offset": image.provenance.offset, "epoch": image.provenance.epoch,
                       "timestampMs": image.provenance.timestamp_ms},
        "metadataVersion": versions.name(image.features.metadata_version) if image.features.metadata_version else None,
        "finalizedFeatures": dict(image.features.finalized),
        "brokers": len(brokers), "fencedBrokers": sum(1 for b in brokers.values() if b.fenced),
        "controllers": len(image.cluster.controllers),
        "topics": image.topics.live_topics, "partitions": image.topics.partition_count,
        "configResources": len(image.configs), "clientQuotaEntities": len(image.client_quotas),
        "acls": len(image.acls), "scramCredentials": len(image.scram), "delegationTokens": len(image.delegation_tokens),
        "recordsLoaded": m.records, "batchesLoaded": m.batches, "skippedRecords": m.skipped_records,
        "loadSeconds": round(m.elapsed_s, 3),
    }
    if as_json:
        print(json.dumps(facts, indent=2))
        return
    p = facts["provenance"]
    lines = [
        f"source: {loaded.source} ({loaded.kind}, end offset {loaded.end_offset})",
        f"provenance: last offset {p['offset']}, epoch {p['epoch']}, timestamp {p['timestampMs']}",
        f"metadata.version: {facts['metadataVersion'] or '(not set)'}"
        + "".join(f", {k}={v}" for k, v in sorted(facts["finalizedFeatures"].items())),
        f"brokers: {facts['brokers']} ({facts['fencedBrokers']} fenced), controllers: {facts['controllers']}",
        f"topics: {facts['topics']:,}, partitions: {facts['partitions']:,}",
        f"configs: {facts['configResources']} resources, client quotas: {facts['clientQuotaEntities']}, "
        f"acls: {facts['acls']}, scram: {facts['scramCredentials']}, delegation tokens: {facts['delegationTokens']}",
        f"loaded {m.records:,} records in {m.batches:,} batches in {m.elapsed_s:.3f} s"
        + (f"; skipped {m.skipped_records} records that could not be applied" if m.skipped_records else ""),
    ]
    print("\n".join(lines))


def run_shell(args: argparse.Namespace) -> int:
    import shlex

    from kraftlog.engine.cli.tools import imagetree
    from kraftlog.engine.cli.tools.shell import Shell

    loaded = _load(args)
    sh = Shell(imagetree.root(loaded.image))
    if args.shell_command:
        sh.run_line(" ".join(shlex.quote(w) for w in args.shell_command))
        sys.stdout.flush()
        return 1 if sh.failed else 0
    return sh.loop()
