"""Proves what the failover benchmark relies on in the shared launcher (engine/node/localcluster.py):
a killed node's port, whose listening socket the launcher keeps for restarts, still accepts
connections that nobody answers, and after ``release_port`` refuses them, as the port of a crashed
process that owned its socket does."""

from __future__ import annotations

import socket
import sys

import pytest

from kraftlog.engine.node.localcluster import LocalCluster


class _Sleepers(LocalCluster):
    """Nodes that only say READY and wait (the launcher's contract, nothing else)."""

    def command(self, i: int, listen_fd: int) -> list[str]:
        return [sys.executable, "-c", f"import time; print('READY node={i}', flush=True); time.sleep(60)"]


def test_a_dead_nodes_kept_port_accepts_and_a_released_one_refuses(tmp_path):
    cluster = _Sleepers(str(tmp_path), 2)
    try:
        cluster.start_all()
        for i in (1, 2):
            cluster.kill(i)
        # kept: the kernel completes the handshake for a process that no longer exists
        with socket.create_connection(cluster.address(1), timeout=2) as s:
            s.settimeout(0.2)
            s.sendall(b"\0\0\0\1x")
            with pytest.raises(TimeoutError):
                s.recv(1)
        cluster.release_port(2)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(cluster.address(2), timeout=2).close()
    finally:
        cluster.close()
