"""Proves mutual TLS on real node processes: 3 controllers + 1 broker started with --tls-cert /
--tls-key / --tls-ca elect, register the broker (over TLS) and unfence it; the CLI tools with the
client's certificate describe the quorum and the features; without a certificate, or with one from
another CA, the same tools fail with one clear line and the nodes keep serving."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from kraftlog.engine.cli import main as cli
from kraftlog.engine.node.localcluster import LocalCluster
from tests.test_node_controller import CLUSTER_ID
from tests.test_transport_hardening import pki  # noqa: F401 (the fixture: ca -> node1, node2, client; rogue)

pytestmark = pytest.mark.slow

BROKER = 101


def _tls(pki, name: str, ca: str = "ca") -> list[str]:  # noqa: F811
    return ["--tls-cert", str(pki / f"{name}.pem"), "--tls-key", str(pki / f"{name}.key"),
            "--tls-ca", str(pki / f"{ca}.pem")]


class TlsCluster(LocalCluster):
    def __init__(self, directory: str, pki):  # noqa: F811
        super().__init__(directory, 3, observers=(BROKER,))
        self.pki = pki

    def command(self, i: int, listen_fd: int) -> list[str]:
        roles = ["--process-roles", "broker"] if i == BROKER else []
        return [sys.executable, "-m", "kraftlog.engine.cli.main", "node", "run", "--node-id", str(i),
                "--controller-quorum-voters", self.voters_arg, "--dir", self.dir_of(i), "--listen-fd", str(listen_fd),
                "--election-timeout-ms", "300", "--fetch-timeout-ms", "600", "--request-timeout-ms", "400",
                "--fetch-max-wait-ms", "200", "--heartbeat-interval-ms", "200",
                *_tls(self.pki, "node1" if i % 2 else "node2"), *roles]


def _kraftlog(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraftlog.engine.cli.main", *args], capture_output=True,
                          text=True, timeout=60)


def test_tls_cluster_and_tools(tmp_path, pki):  # noqa: F811
    """The scenario of the module docstring."""
    c = TlsCluster(str(tmp_path), pki)
    try:
        for i in c.socks:
            assert cli.main(["storage", "format", "--cluster-id", CLUSTER_ID, "--node-id", str(i),
                             "--dir", c.dir_of(i)]) == 0
        c.start_all()
        boot = ",".join(f"{h}:{p}" for h, p in c.voters.values())

        async def wait_registered():
            for _ in range(300):
                out = await asyncio.to_thread(_kraftlog, "quorum", "describe", "--status", "--bootstrap-controller",
                                              boot, *_tls(pki, "client"))
                if out.returncode == 0 and str(BROKER) in out.stdout.split("CurrentObservers:")[-1]:
                    return out
                await asyncio.sleep(0.1)
            raise AssertionError(f"no TLS quorum with broker {BROKER} as observer: {out.stdout} {out.stderr}")

        out = asyncio.run(wait_registered())
        assert "LeaderId:" in out.stdout
        assert "broker 101 is now unfenced" in c.stderr_of(BROKER) or "registered with controller" in \
            c.stderr_of(BROKER), c.stderr_of(BROKER)[-2000:]

        described = _kraftlog("features", "describe", "--bootstrap-controller", boot, *_tls(pki, "client"))
        assert described.returncode == 0 and "Feature: metadata.version" in described.stdout, described.stderr

        plain = _kraftlog("quorum", "describe", "--status", "--bootstrap-controller", boot, "--timeout-ms", "2000")
        assert plain.returncode == 1 and len(plain.stderr.strip().splitlines()) == 1, plain.stderr
        rogue = _kraftlog("features", "describe", "--bootstrap-controller", boot, *_tls(pki, "rogue", "rogue-ca"),
                          "--timeout-ms", "2000")
        assert rogue.returncode == 1 and len(rogue.stderr.strip().splitlines()) == 1, rogue.stderr
        half = _kraftlog("quorum", "describe", "--status", "--bootstrap-controller", boot, "--tls-cert",
                         str(pki / "client.pem"))
        assert half.returncode != 0 and "--tls-key" in half.stderr and len(half.stderr.strip().splitlines()) == 1

        again = _kraftlog("quorum", "describe", "--status", "--bootstrap-controller", boot, *_tls(pki, "client"))
        assert again.returncode == 0, again.stderr  # refused strangers cost nothing
        for i in (BROKER, 1, 2, 3):
            c.procs[i].terminate()
            assert c.procs[i].wait(20) == 0, c.stderr_of(i)[-3000:]
    finally:
        c.close()
