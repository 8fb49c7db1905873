"""The command loop of `kraftlog image shell`: browse an image like kafka-metadata-shell.

Commands (paths are absolute or relative to the working directory; a path component may be a
glob: ``*``, ``?``, ``[...]``)::

    ls [PATH...]     children of a directory, or the name of a leaf
    cd [PATH]        change directory (no PATH: the root)
    cat PATH...      the value of a leaf
    tree [PATH...]   a directory and everything under it, leaves with their values
    find [PATH...]   every path under PATH
    pwd              the working directory
    help             this list
    exit, quit       leave (so does end of input)

Input: one command per line from stdin; ``#`` starts a comment. The prompt ``[ /image ] >> `` is
written only when stdin and stdout are terminals (line editing through readline then), so a pipe
of commands gives exactly the commands' output. A failed command prints one line on stderr and
the loop goes on; the shell's exit status is 1 if any command failed.
"""

from __future__ import annotations

import contextlib
import fnmatch
import shlex
import sys
from collections.abc import Iterator

from kraftlog.engine.cli.tools.imagetree import Dir, Leaf, lookup, normalise, split

HELP = """ls [PATH...]     list a directory's children (or a leaf's name)
cd [PATH]        change the working directory (no PATH: /)
cat PATH...      print leaves' values
tree [PATH...]   print a subtree with the values of its leaves
find [PATH...]   print every path under PATH
pwd              print the working directory
help             print this help
exit, quit       leave the shell"""
GLOB_CHARS = "*?["


class ShellError(Exception):
    """A command failed; the message is printed on one line and the loop goes on."""


class Shell:
    def __init__(self, tree: Dir, out=None, err=None, cwd: str = "/image"):
        self.tree = tree
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.cwd: list[str] = split(cwd)
        self.failed = False
        self.done = False

    # -- paths ---------------------------------------------------------------------------------------------------

    def pwd(self) -> str:
        return "/" + "/".join(self.cwd)

    def expand(self, path: str) -> list[tuple[list[str], Dir | Leaf]]:
        """Every (absolute parts, node) that ``path`` names; globs match children by name."""
        parts = normalise(self.cwd, path)
        found: list[tuple[list[str], Dir | Leaf]] = [([], self.tree)]
        for part in parts:
            nxt = []
            for prefix, node in found:
                if not isinstance(node, Dir):
                    continue
                if any(c in part for c in GLOB_CHARS):
                    for name in node.names():
                        if fnmatch.fnmatchcase(name, part):
                            child = node.child(name)
                            if child is not None:
                                nxt.append((prefix + [name], child))
                else:
                    child = node.child(part)
                    if child is not None:
                        nxt.append((prefix + [part], child))
            found = nxt
        if not found:
            raise ShellError(f"{path}: No such file or directory")
        return found

    # -- commands ------------------------------------------------------------------------------------------------

    def run_line(self, line: str) -> None:
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            self._fail(f"cannot parse {line.strip()!r}: {exc}")
            return
        if not words:
            return
        command, args = words[0], words[1:]
        handler = getattr(self, "cmd_" + command, None) if command.isidentifier() else None
        if handler is None:
            self._fail(f"{command}: unknown command (try help)")
            return
        try:
            handler(args)
        except ShellError as exc:
            self._fail(f"{command}: {exc}")

    def _fail(self, message: str) -> None:
        self.failed = True
        self.err.write(message + "\n")
        self.err.flush()

    def _print(self, text: str) -> None:
        self.out.write(text + "\n")

    def cmd_pwd(self, args: list[str]) -> None:
        self._print(self.pwd())

    def cmd_help(self, args: list[str]) -> None:
        self._print(HELP)

    def cmd_exit(self, args: list[str]) -> None:
        self.done = True

    cmd_quit = cmd_exit

    def cmd_cd(self, args: list[str]) -> None:
        if len(args) > 1:
            raise ShellError("takes at most one path")
        matches = self.expand(args[0] if args else "/")
        if len(matches) > 1:
            raise ShellError(f"{args[0]}: names {len(matches)} paths")
        parts, node = matches[0]
        if not isinstance(node, Dir):
            raise ShellError(f"{args[0]}: Not a directory")
        self.cwd = parts

    def cmd_ls(self, args: list[str]) -> None:
        targets = [m for path in (args or ["."]) for m in self.expand(path)]
        for i, (parts, node) in enumerate(targets):
            if isinstance(node, Leaf):
                self._print(parts[-1] if parts else "/")
                continue
            if len(targets) > 1:
                self._print(("" if i == 0 else "\n") + "/" + "/".join(parts) + ":")
            for name in node.names():
                self._print(name)

    def cmd_cat(self, args: list[str]) -> None:
        if not args:
            raise ShellError("needs a path")
        for path in args:
            for parts, node in self.expand(path):
                if isinstance(node, Dir):
                    raise ShellError(f"{'/' + '/'.join(parts)}: Is a directory")
                self._print(node.text())

    def cmd_tree(self, args: list[str]) -> None:
        for path in args or ["."]:
            for parts, node in self.expand(path):
                for line in tree_lines(parts[-1] if parts else "/", node, 0):
                    self._print(line)

    def cmd_find(self, args: list[str]) -> None:
        for path in args or ["."]:
            for parts, node in self.expand(path):
                for found in walk(parts, node):
                    self._print(found)

    # -- the loop ------------------------------------------------------------------------------------------------

    def loop(self, stdin=None) -> int:
        stdin = stdin or sys.stdin
        interactive = stdin.isatty() and self.out.isatty()
        if interactive:
            with contextlib.suppress(ImportError):
                import readline  # noqa: F401  (line editing and history for input())
        while not self.done:
            try:
                line = input(f"[ {self.pwd()} ] >> ") if interactive else stdin.readline()
            except EOFError:
                break
            if not interactive and line == "":
                break
            self.run_line(line)
            self.out.flush()
        if interactive:
            self.out.write("\n")
        return 1 if self.failed else 0


def tree_lines(name: str, node: Dir | Leaf, depth: int) -> Iterator[str]:
    indent = "  " * depth
    if isinstance(node, Leaf):
        yield f"{indent}{name}: {node.text()}"
        return
    yield f"{indent}{name}:"
    for child_name in node.names():
        child = node.child(child_name)
        if child is not None:
            yield from tree_lines(child_name, child, depth + 1)


def walk(parts: list[str], node: Dir | Leaf) -> Iterator[str]:
    yield "/" + "/".join(parts)
    if isinstance(node, Dir):
        for name in node.names():
            child = node.child(name)
            if child is not None:
                yield from walk(parts + [name], child)


def resolve(tree: Dir, path: str) -> Dir | Leaf | None:
    """The node at an absolute ``path`` (no globs), or None."""
    return lookup(tree, normalise([], path))
