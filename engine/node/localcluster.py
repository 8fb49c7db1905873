"""Node processes on 127.0.0.1 with ephemeral ports: the launcher tests and benchmarks share.

Each node's listening socket is bound here (port 0), kept open, and inherited by the node process
(`--listen-fd`): ports are chosen by the kernel, nothing races for them, and a restarted node keeps
its address. A node is up when it prints its ``READY`` line on stdout. Everything started is
killed by ``close()`` (also on a failed start), so a failing test never leaves processes behind.
Subclasses say how to start node ``i`` (``command``).
"""

from __future__ import annotations

import abc
import asyncio
import os
import signal
import socket
import subprocess


class LocalCluster(abc.ABC):
    def __init__(self, directory: str, n: int = 3, *, observers: tuple[int, ...] = (), backlog: int = 128):
        """Voters 1..n, plus ``observers`` (node ids that are not voters, e.g. brokers)."""
        self.directory = directory
        self.socks: dict[int, socket.socket] = {}
        for i in [*range(1, n + 1), *observers]:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(backlog)
            s.set_inheritable(True)
            self.socks[i] = s
        self.addresses = {i: ("127.0.0.1", s.getsockname()[1]) for i, s in self.socks.items()}
        self.voters = {i: self.addresses[i] for i in range(1, n + 1)}
        self.voters_arg = ",".join(f"{i}@{h}:{p}" for i, (h, p) in self.voters.items())
        self.procs: dict[int, subprocess.Popen] = {}

    @abc.abstractmethod
    def command(self, i: int, listen_fd: int) -> list[str]:
        """The argv that starts node ``i`` listening on the inherited ``listen_fd``."""

    def address(self, i: int) -> tuple[str, int]:
        """Node ``i``'s (host, port): what the demo's Admin asks of a cluster."""
        return self.addresses[i]

    def dir_of(self, i: int) -> str:
        return os.path.join(self.directory, f"n{i}")

    def _err_path(self, i: int) -> str:
        return os.path.join(self.directory, f"node{i}.err")

    def start(self, i: int, *, wait_ready: bool = True) -> None:
        """Launch node ``i`` and wait for its READY line (``wait_ready=False``: a test that expects
        the node to stop on its own waits for ``procs[i]`` instead)."""
        self._launch(i)
        if wait_ready:
            self._wait_ready(i)

    def start_together(self) -> None:
        """Launch every node at once (as after a restart of all of them), then wait for each READY."""
        try:
            for i in self.socks:
                self._launch(i)
            for i in self.socks:
                self._wait_ready(i)
        except BaseException:
            self.close()
            raise

    def _launch(self, i: int) -> None:
        s = self.socks[i]
        os.makedirs(self.directory, exist_ok=True)
        err = open(self._err_path(i), "a")  # noqa: SIM115 (closed when the process is reaped)
        p = subprocess.Popen(self.command(i, s.fileno()), pass_fds=(s.fileno(),), stdout=subprocess.PIPE, stderr=err)
        p.err_file = err
        self.procs[i] = p

    def _wait_ready(self, i: int) -> None:
        line = self.procs[i].stdout.readline()
        if not line.startswith(b"READY node=%d" % i):
            raise RuntimeError(f"node {i} did not start ({line!r}): {self.stderr_of(i)[-2000:]}")

    def start_all(self) -> None:
        try:
            for i in self.socks:
                self.start(i)
        except BaseException:
            self.close()
            raise

    def kill(self, i: int, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to node ``i`` and reap it: its exit code."""
        p = self.procs.pop(i)
        p.send_signal(sig)
        code = p.wait(10)
        p.err_file.close()
        return code

    def release_port(self, i: int) -> None:
        """Close this process's copy of node ``i``'s listening socket. Kept, it goes on accepting
        connections for a node that is dead (the kernel queues them, nobody answers), so every
        client attempt to that port waits its whole timeout; released, the port refuses them,
        as it does after a crash of a process that owns its socket. Node ``i`` cannot be
        restarted on that port afterwards."""
        self.socks.pop(i).close()

    def stop_all(self, timeout_s: float = 15) -> dict[int, int]:
        """SIGTERM every node (a leader resigns first) and wait: node id -> exit code."""
        for p in self.procs.values():
            p.send_signal(signal.SIGTERM)
        codes = {i: p.wait(timeout_s) for i, p in self.procs.items()}
        for p in self.procs.values():
            p.err_file.close()
        self.procs.clear()
        return codes

    def stderr_of(self, i: int) -> str:
        try:
            with open(self._err_path(i)) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
        for p in self.procs.values():
            p.wait(10)
            p.err_file.close()
        self.procs.clear()
        for s in self.socks.values():
            s.close()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


async def wait_until(predicate, timeout_s: float, what: str, *, error: type[Exception] = AssertionError,
                     transient_errors: bool = True, poll_s: float = 0.05):
    """Poll ``predicate`` (async) every ``poll_s`` until it returns something true, and return that.
    With ``transient_errors``, a predicate that raises OSError, ClientError or TimeoutError (a node
    restarting, a connection lost) counts as not yet; without, it propagates at once. ``error``
    (naming ``what`` and the last value or failure) at the deadline."""
    from kraftlog.engine.protocol.connection import ClientError

    transient = (OSError, ClientError, TimeoutError) if transient_errors else ()
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    last = None
    while loop.time() < end:
        try:
            last = await predicate()
        except transient as exc:
            last = exc
        else:
            if last:
                return last
        await asyncio.sleep(poll_s)
    raise error(f"{what} not reached within {timeout_s} s (last: {last!r})")
