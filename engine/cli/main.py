"""The `kraftlog` command line: one entry point, subcommand groups shaped like Kafka's tools.

Each group lives in its own module and registers itself in COMMANDS; the parser imports a group's
module only when that group runs, so `kraftlog --version` and `--help` stay fast. Every operating
error ends as one line on stderr and a non-zero exit; `--debug` shows the traceback instead. The
expected failures are caught once, here: our typed errors (KraftlogError), a missing optional
extra, and OSError (an unreadable directory, an address in use, a host that does not resolve);
a closed output pipe ends the command quietly. Bad values never get this far: each is refused
where it is parsed (engine/cli/values.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from kraftlog import __version__
from kraftlog.engine.cli.tools.common import drop_stdout
from kraftlog.errors import KraftlogError
from kraftlog.extras import missing_module_text

# group name -> (module that defines `register(subparsers)`, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("kraftlog.engine.cli.demo", "run the guided tour of kraftlog on this machine"),
    "bench": ("kraftlog.engine.cli.bench_cmd", "run the benchmarks beside their peers and write a report"),
    "log": ("kraftlog.engine.cli.tools.log_cmd", "dump, verify and repair log segments (kafka-dump-log)"),
    "image": ("kraftlog.engine.cli.tools.image_cmd", "show or browse the metadata image (kafka-metadata-shell)"),
    "snapshot": ("kraftlog.engine.cli.tools.snapshot_cmd", "list, dump, export and import the snapshots of a node's store"),
    "storage": ("kraftlog.engine.cli.tools.storage_cmd", "random-uuid, format and info (kafka-storage)"),
    "quorum": ("kraftlog.engine.cli.tools.quorum_cmd", "describe a live metadata quorum (kafka-metadata-quorum)"),
    "features": ("kraftlog.engine.cli.tools.features_cmd", "describe, upgrade, downgrade metadata.version (kafka-features)"),
    "spark": ("kraftlog.engine.cli.spark_cmd", "replay and analyse metadata logs (one cluster or a fleet) on Apache Spark"),
    "gen": ("kraftlog.engine.cli.tools.gen_cmd", "write the reference metadata workload as a log directory"),
    "node": ("kraftlog.engine.cli.node_cmd", "run a KRaft controller node (kraftlog node run)"),
}

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv`` (default: this process's arguments). Every group is listed, but only
    the group ``argv`` names registers its flags: that imports its module, and `kraftlog
    --version` or `--help` import none (no asyncio, ssl, numpy or bench report)."""
    parser = argparse.ArgumentParser(
        prog="kraftlog",
        description="kraftlog: an embeddable, Kafka-compatible cluster metadata log.",
        epilog="Example: kraftlog demo",
    )
    parser.add_argument("--version", action="version", version=f"kraftlog {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = _group_named(sys.argv[1:] if argv is None else argv)
    for name, (module, help_text) in COMMANDS.items():
        group = sub.add_parser(name, help=help_text, description=help_text)
        group.set_defaults(_module=module)
        if name == named:
            if name == "node":
                _without_hypothesis()
            importlib.import_module(module).register(group)
    return parser


def _without_hypothesis() -> None:
    """kio registers a hypothesis strategy for each of its phantom types at import whenever
    hypothesis is importable (kio/static/_phantom.py): 0.2-0.3 s of a node's start wherever the
    test extra is installed, for strategies a server never draws. A node process imports kio
    without it (a process that already imported hypothesis keeps it)."""
    sys.modules.setdefault("hypothesis", None)


def _group_named(argv: list[str]) -> str | None:
    """The group ``argv`` runs: its first word that is not an option of the top parser."""
    return next((word for word in argv if not word.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.run(args) or EXIT_OK)
    except KraftlogError as exc:
        return _fail(args, str(exc))
    except ModuleNotFoundError as exc:
        # A command whose optional extra is not installed (kraftlog spark without kraftlog[spark]).
        text = missing_module_text(exc)
        if text is None:
            raise
        return _fail(args, text)
    except BrokenPipeError:  # the reader of our output went away (`... | head`): not an error
        drop_stdout()
        return EXIT_OK
    except OSError as exc:  # unreadable or unwritable paths, a full disk, an address in use or unknown
        return _fail(args, _os_error_text(exc))
    except KeyboardInterrupt:
        print(f"kraftlog {args.command}: interrupted", file=sys.stderr)
        return 130


def _os_error_text(exc: OSError) -> str:
    """'<path>: Permission denied' (both paths of a rename), else the system's words alone."""
    words = exc.strerror or str(exc)
    paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
    return f"{' -> '.join(paths)}: {words}" if paths else words


def command_words(args: argparse.Namespace) -> str:
    """'kraftlog spark replay': the group and its subcommand as typed (each group's subcommand
    parser stores its name in ``<group>_command``)."""
    sub = getattr(args, f"{args.command}_command", None)
    return " ".join(["kraftlog", args.command, *([sub] if sub else [])])


def _fail(args: argparse.Namespace, text: str) -> int:
    """One line on stderr and exit 1; with --debug, the traceback of the exception being handled."""
    if args.debug:
        raise
    print(f"{command_words(args)}: error: {text}", file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
