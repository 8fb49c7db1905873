"""The command line's values, checked where they are parsed: one converter per kind of value, used
as argparse's ``type=`` for a flag and by ``node run --config`` for the same setting in a file, so
a flag and its properties key accept exactly the same values and refuse the rest in the same words.

A converter takes the text and returns the value, or raises ``argparse.ArgumentTypeError`` whose
text names the value and what is allowed; argparse prints it as one line (``argument --listen:
...``), and --config puts the file and key in front of it.
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
from collections.abc import Callable

INT32_MAX = (1 << 31) - 1  # node ids, timeouts and sizes are int32 on Kafka's wire and in its files
PORT_MAX = 65535
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

Bad = argparse.ArgumentTypeError


def _int(text: str, low: int, high: int, what: str) -> int:
    try:
        value = int(text, 10)
    except (TypeError, ValueError):
        raise Bad(f"{text!r} is not {what}") from None
    if not low <= value <= high:
        raise Bad(f"{text!r} is not {what}")
    return value


def node_id(text: str) -> int:
    return _int(text, 0, INT32_MAX, f"a node id (0..{INT32_MAX})")


def positive(unit: str) -> Callable[[str], int]:
    """A duration or size that must be > 0 (a zero election timeout has no range to draw from; a zero
    session timeout fences every broker at once)."""
    def convert(text: str) -> int:
        return _int(text, 1, INT32_MAX, f"a number of {unit} > 0 (1..{INT32_MAX})")
    convert.__name__ = f"positive {unit}"
    return convert


def non_negative(unit: str) -> Callable[[str], int]:
    def convert(text: str) -> int:
        return _int(text, 0, INT32_MAX, f"a number of {unit} >= 0 (0..{INT32_MAX})")
    convert.__name__ = f"non-negative {unit}"
    return convert


def percentage(text: str) -> int:
    return _int(text, 0, 100, "a percentage (0..100)")


def boolean(text: str) -> bool:
    """A Kafka boolean setting: true or false (any case)."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise Bad(f"{text!r} is not true or false")
    return value == "true"


def port(text: str) -> int:
    """A port to listen on: 0 lets the kernel choose."""
    return _int(text, 0, PORT_MAX, f"a port (0..{PORT_MAX}; 0: any free port)")


def host_port(text: str) -> str:
    """HOST:PORT to listen on, as given (the host is resolved when the node binds it)."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise Bad(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:9093)")
    try:
        value = int(port_text, 10)
    except ValueError:
        raise Bad(f"{text!r}: the port {port_text!r} is not a number 0..{PORT_MAX}") from None
    if not 0 <= value <= PORT_MAX:
        raise Bad(f"{text!r}: the port is not 0..{PORT_MAX}")
    return text


def voters(text: str) -> str:
    """``controller.quorum.voters`` (ID@HOST:PORT,...), checked by the node's own parser and kept
    as text (the node parses it again where it is used)."""
    from kraftlog.engine.node.raftnode import parse_voters  # raft and asyncio only when the flag is given

    try:
        parse_voters(text)
    except ValueError as exc:
        raise Bad(str(exc)) from None
    return text


def listen_fd(text: str) -> int:
    """An inherited file descriptor that is an open socket."""
    fd = _int(text, 0, INT32_MAX, "a file descriptor (>= 0)")
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        raise Bad(f"{fd} is not an open file descriptor in this process") from None
    if not stat.S_ISSOCK(mode):
        raise Bad(f"file descriptor {fd} is not a socket")
    return fd


def log_level(text: str) -> str:
    level = text.upper()
    if level not in LOG_LEVELS or not isinstance(logging.getLevelName(level), int):
        raise Bad(f"{text!r} is not a log level ({', '.join(LOG_LEVELS)})")
    return level
