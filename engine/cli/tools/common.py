"""What every operator tool shares: one-line usage errors, output rules, the log-directory lookup.

Output rules (the same in every tool):
- results go to stdout, plain text (or JSON lines with --json), never coloured, so a pipe gets
  exactly the data;
- progress goes to stderr and only when stderr is a terminal and --quiet was not given;
- an operating error is a KraftlogError: cli.py prints it as one line on stderr, exit 1;
- a usage error (unknown flag, missing argument) is one line on stderr, exit 2: argparse's
  default prints the whole usage first, which buries the message, so the parsers of the tool
  groups are made "strict" here.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable

from kraftlog.engine.layout import METADATA_LOG_DIRNAME
from kraftlog.errors import KraftlogError

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2
# Kafka keeps the metadata log in this partition directory under a log dir (log.dirs /
# metadata.log.dir); the tools accept either that log dir or the partition directory itself.
REPAIR_HINT = "kraftlog log repair {dir} --truncate-at-first-corruption"


class ToolError(KraftlogError):
    """An operating error of a tool (bad path, unformatted directory, refused operation)."""


class NotALogDirectoryError(ToolError):
    """The directory does not exist or holds no log segments."""


class CorruptLogError(ToolError):
    """Bytes on disk that fail their checks; the message starts with the file and position."""

    def __init__(self, path: str, position: int, reason: str, hint: str):
        super().__init__(f"{path}: position {position}: {reason}; {hint}")
        self.path, self.position, self.reason = path, position, reason


# ------------------------------------------------------------------------------------ parsers


def _one_line_error(parser: argparse.ArgumentParser, message: str):
    """argparse's error(), as one line: '<prog>: error: <message> (see <prog> --help)'."""
    parser.exit(EXIT_USAGE, f"{parser.prog}: error: {message} (see {parser.prog} --help)\n")


def _strict_parse_known_args(parser: argparse.ArgumentParser, original: Callable, args=None, namespace=None):
    """Refuse unknown arguments here, so the message names this command (not the top parser)."""
    namespace, extras = original(args, namespace)
    if extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    return namespace, extras


def strict(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make ``parser`` report usage errors as one line and reject unknown arguments itself."""
    parser.error = functools.partial(_one_line_error, parser)  # type: ignore[method-assign]
    parser.parse_known_args = functools.partial(  # type: ignore[method-assign]
        _strict_parse_known_args, parser, parser.parse_known_args)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def add_commands(group: argparse.ArgumentParser, dest: str) -> argparse._SubParsersAction:
    """Subcommands of a tool group; running the group alone prints its help (exit 2)."""
    strict(group)
    group.set_defaults(run=functools.partial(_group_help, group))
    return group.add_subparsers(dest=dest, metavar="COMMAND")


def add_command(sub: argparse._SubParsersAction, name: str, help_text: str, example: str,
                run: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_text, description=help_text, epilog=example)
    strict(parser)
    parser.set_defaults(run=run)
    return parser


def _group_help(group: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    group.print_help(sys.stderr)
    return EXIT_USAGE


def add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="no progress bars (they are also off when stderr is not a terminal)")


def show_progress(args: argparse.Namespace) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def pipe_safe(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A reader that closed the pipe early (`... | head`) ends the command quietly, exit 0."""

    @functools.wraps(run)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            code = run(args)
            sys.stdout.flush()
            return code
        except BrokenPipeError:
            drop_stdout()
            return EXIT_OK

    return wrapper


def drop_stdout() -> None:
    """After a reader closed the pipe (`... | head`): point stdout at /dev/null so the interpreter's
    final flush does not fail again, and the command ends quietly."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def exists(path: str) -> bool:
    """os.path.exists, except that a path this user may not look at raises PermissionError (the
    command line prints it as one line) instead of reading as missing: "does not exist" about a
    file that does exist sends an operator to recreate it."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def warn(command: str, message: str) -> None:
    """A one-line warning on stderr (not an error: the command goes on)."""
    print(f"kraftlog {command}: warning: {message}", file=sys.stderr)


# ------------------------------------------------------------------------------ log directories


def is_segment_name(name: str) -> bool:
    stem, _, suffix = name.partition(".")
    return suffix == "log" and len(stem) == 20 and stem.isdigit()


def resolve_log_dir(path: str) -> str:
    """The partition directory holding the segments: ``path`` itself, or its Kafka-style
    ``__cluster_metadata-0`` subdirectory. Raises NotALogDirectoryError naming what is wrong."""
    if not exists(path):
        raise NotALogDirectoryError(f"{path} does not exist")
    if not os.path.isdir(path):
        raise NotALogDirectoryError(f"{path} is not a directory")
    for candidate in (path, os.path.join(path, METADATA_LOG_DIRNAME)):
        if os.path.isdir(candidate) and any(is_segment_name(n) for n in os.listdir(candidate)):
            return candidate
    raise NotALogDirectoryError(
        f"{path} holds no log segments (<20-digit offset>.log files, here or in {METADATA_LOG_DIRNAME}/); "
        f"write one with: kraftlog gen {path} --partitions 1000")
