"""Proves every command meets bad input with one line on stderr naming the value and what is wrong,
a non-zero exit and no traceback: a table of bad flags and --config files (run as this user), and
a table of unreadable directories and files run as an unprivileged user (root reads everything,
so as root those rows run through setpriv as nobody)."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import pytest
from cli_contract import assert_one_line_error

CLI = [sys.executable, "-m", "kraftlog.engine.cli.main"]
TIMEOUT_S = 60  # a bad value that is not refused starts a node; it is killed here and the row fails
NOBODY = 65534
EXIT_ERROR, EXIT_USAGE = 1, 2


@dataclass(frozen=True)
class Case:
    argv: str  # {placeholders} are the workspace's paths and ports
    code: int
    needles: tuple[str, ...]  # each must appear in the one stderr line
    wrong: tuple[str, ...] = field(default=())  # must not appear (misleading advice)


NODE = "node run --node-id 1 --controller-quorum-voters 1@127.0.0.1:{free} --dir {node}"

BAD_VALUES = {
    "listen-negative-port": Case(NODE + " --listen 127.0.0.1:-5", EXIT_USAGE, ("--listen", "127.0.0.1:-5", "0..65535")),
    "listen-port-too-big": Case(NODE + " --listen 127.0.0.1:70000", EXIT_USAGE, ("--listen", "70000", "0..65535")),
    "listen-no-port": Case(NODE + " --listen 127.0.0.1", EXIT_USAGE, ("--listen", "'127.0.0.1'", "HOST:PORT")),
    "listen-unresolvable-host": Case(NODE + " --listen nohost.invalid:0", EXIT_ERROR, ("nohost.invalid:0",)),
    "listen-port-in-use": Case(NODE + " --listen 127.0.0.1:{busy}", EXIT_ERROR, ("127.0.0.1:{busy}", "in use")),
    "metrics-port-negative": Case(NODE + " --metrics-port -1", EXIT_USAGE, ("--metrics-port", "-1", "0..65535")),
    "listen-fd-not-open": Case(NODE + " --listen-fd 99", EXIT_USAGE, ("--listen-fd", "99", "not an open")),
    "listen-fd-negative": Case(NODE + " --listen-fd -1", EXIT_USAGE, ("--listen-fd", "-1")),
    "listen-fd-not-a-socket": Case(NODE + " --listen-fd 0", EXIT_USAGE, ("--listen-fd", "0", "not a socket")),
    "log-level-unknown": Case(NODE + " --log-level LOUD", EXIT_USAGE, ("--log-level", "LOUD", "INFO")),
    "config-binary": Case("node run --config {binary}", EXIT_ERROR, ("{binary}", "not a text")),
    "config-listener-port": Case("node run --config {listeners}", EXIT_ERROR, ("listeners", "notaport")),
    "config-sasl-listener": Case("node run --config {sasl}", EXIT_ERROR, ("CLIENTS", "SASL_PLAINTEXT", "no SASL")),
    "config-ssl-without-tls": Case("node run --config {ssl}", EXIT_ERROR, ("CLIENTS", "SSL", "--tls-cert")),
    "config-negative-session": Case("node run --config {negative}", EXIT_ERROR,
                                    ("broker.session.timeout.ms", "-3", "> 0")),
    "imbalance-percentage-too-big": Case(NODE + " --leader-imbalance-per-broker-percentage 150", EXIT_USAGE,
                                         ("--leader-imbalance-per-broker-percentage", "150", "0..100")),
    "rebalance-not-boolean": Case(NODE + " --auto-leader-rebalance-enable maybe", EXIT_USAGE,
                                  ("--auto-leader-rebalance-enable", "maybe", "true or false")),
    "election-timeout-zero": Case(NODE + " --election-timeout-ms 0", EXIT_USAGE, ("--election-timeout-ms", "0", "> 0")),
    "voters-duplicate-id": Case("node run --node-id 1 --dir {node} --controller-quorum-voters "
                                "1@127.0.0.1:39093,1@127.0.0.1:39094", EXIT_USAGE, ("voter id 1", "twice")),
    "voters-duplicate-address": Case("node run --node-id 1 --dir {node} --controller-quorum-voters "
                                     "1@127.0.0.1:39093,2@127.0.0.1:39093", EXIT_USAGE, ("127.0.0.1:39093", "twice")),
    "voter-port-zero": Case("node run --node-id 1 --dir {node} --controller-quorum-voters 1@127.0.0.1:0",
                            EXIT_USAGE, ("1@127.0.0.1:0", "1..65535")),
    "voter-port-too-big": Case("node run --node-id 1 --dir {node} --controller-quorum-voters 1@127.0.0.1:99999",
                               EXIT_USAGE, ("1@127.0.0.1:99999", "1..65535")),
    "voter-not-id-at-address": Case("node run --node-id 1 --dir {node} --controller-quorum-voters h:1",
                                    EXIT_USAGE, ("'h:1'", "ID@HOST:PORT")),
    "session-timeout-negative": Case(NODE + " --session-timeout-ms -1", EXIT_USAGE, ("--session-timeout-ms", "-1")),
    "heartbeat-negative": Case(NODE + " --heartbeat-interval-ms -5", EXIT_USAGE, ("--heartbeat-interval-ms", "-5")),
    "snapshot-bytes-negative": Case(NODE + " --snapshot-max-new-bytes -1", EXIT_USAGE,
                                    ("--snapshot-max-new-bytes", "-1")),
    "snapshot-interval-negative": Case(NODE + " --snapshot-interval-ms -1", EXIT_USAGE,
                                       ("--snapshot-interval-ms", "-1")),
    "node-id-too-big": Case(NODE.replace("--node-id 1", "--node-id 99999999999"), EXIT_USAGE,
                            ("--node-id", "99999999999", "2147483647")),
    "bootstrap-port-too-big": Case("quorum describe --status --bootstrap-controller 127.0.0.1:70000", EXIT_ERROR,
                                   ("'127.0.0.1:70000'", "1..65535")),
    "format-node-id-too-big": Case("storage format --cluster-id {cluster} --node-id 99999999999 --dir {fresh}",
                                   EXIT_USAGE, ("--node-id", "99999999999", "2147483647")),
    "dump-max-bytes-negative": Case("log dump {meta}/00000000000000000000.log --max-bytes -1", EXIT_USAGE,
                                    ("--max-bytes", "-1")),
    "format-node-id-negative": Case("storage format --cluster-id {cluster} --node-id -1 --dir {fresh}",
                                    EXIT_USAGE, ("--node-id", "-1")),
}

# Run as an unprivileged user on root's files: a directory it cannot enter, a segment it cannot read.
UNREADABLE = {
    "log-verify-locked-dir": Case("log verify {locked_meta}", EXIT_ERROR, ("{locked_meta}", "Permission denied"),
                                  ("does not exist",)),
    "log-verify-locked-segment": Case("log verify {locked_segment_dir}", EXIT_ERROR,
                                      ("00000000000000000000.log", "Permission denied")),
    "log-repair-locked-dir": Case("log repair {locked_meta} --truncate-at-first-corruption", EXIT_ERROR,
                                  ("{locked_meta}", "Permission denied"), ("does not exist",)),
    "log-repair-locked-segment": Case("log repair {locked_segment_dir} --truncate-at-first-corruption", EXIT_ERROR,
                                      ("00000000000000000000.log", "Permission denied")),
    "log-dump-locked-segment": Case("log dump {locked_segment_dir}/00000000000000000000.log", EXIT_ERROR,
                                    ("00000000000000000000.log", "Permission denied"), ("does not exist",)),
    "log-dump-segment-in-locked-dir": Case("log dump {locked_meta}/00000000000000000000.log", EXIT_ERROR,
                                           ("00000000000000000000.log", "Permission denied"), ("does not exist",)),
    "image-show-locked-dir": Case("image show {locked_meta}", EXIT_ERROR, ("{locked_meta}", "Permission denied"),
                                  ("does not exist",)),
    "snapshot-list-locked-node": Case("snapshot list {locked_node}", EXIT_ERROR,
                                      ("{locked_node}", "Permission denied")),
    "snapshot-export-locked-node": Case("snapshot export {locked_node} --out {ws}/out", EXIT_ERROR,
                                        ("{locked_node}", "Permission denied")),
    "storage-format-unwritable": Case("storage format --cluster-id {cluster} --node-id 1 --dir {ws}/root-only/new",
                                      EXIT_ERROR, ("{ws}/root-only/new", "Permission denied")),
    "storage-info-locked-node": Case("storage info --dir {locked_node}", EXIT_ERROR,
                                     ("{locked_node}", "Permission denied"), ("not formatted", "storage format")),
    "node-run-locked-node": Case(NODE.replace("{node}", "{locked_node}"), EXIT_ERROR,
                                 ("{locked_node}", "Permission denied"), ("not formatted", "storage format")),
}


def _cli(argv: list[str], *, as_nobody: bool = False) -> subprocess.CompletedProcess:
    prefix = []
    if as_nobody and os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "running as root without setpriv: the unreadable-file rows cannot run as another user"
        prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return subprocess.run([*prefix, *CLI, *argv], capture_output=True, text=True, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL, cwd="/")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def workspace():
    """Paths and ports the rows name. Under /tmp with mode 755, not in pytest's tmp_path (mode 700:
    an unprivileged user could not reach anything in it)."""
    ws = tempfile.mkdtemp(prefix="kraftlog-bad-input-", dir="/tmp")
    os.chmod(ws, 0o755)  # the unprivileged user reaches everything but what is locked on purpose
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    cluster = _cli(["storage", "random-uuid"]).stdout.strip()
    places = {"ws": ws, "cluster": cluster, "free": str(_free_port()), "busy": str(busy.getsockname()[1]),
              "node": f"{ws}/node", "fresh": f"{ws}/fresh", "meta": f"{ws}/meta", "binary": f"{ws}/binary.properties",
              "listeners": f"{ws}/listeners.properties", "negative": f"{ws}/negative.properties",
              "sasl": f"{ws}/sasl.properties", "ssl": f"{ws}/ssl.properties",
              "locked_meta": f"{ws}/locked-meta", "locked_segment_dir": f"{ws}/locked-segment",
              "locked_node": f"{ws}/locked-node"}
    for argv in (["storage", "format", "--cluster-id", cluster, "--node-id", "1", "--dir", places["node"]],
                 ["gen", places["meta"], "--partitions", "100", "--quiet"]):
        done = _cli(argv)
        assert done.returncode == 0, done.stderr
    with open(places["binary"], "wb") as f:
        f.write(bytes(range(256)) * 4)
    os.makedirs(f"{ws}/junk")
    with open(f"{ws}/junk/00000000000000000000.log", "wb") as f:
        f.write(random.Random(7).randbytes(4096))
    base = f"node.id=1\ncontroller.quorum.voters=1@127.0.0.1:{places['free']}\nlog.dirs={places['node']}\n"
    with open(places["listeners"], "w") as f:
        f.write(base + "listeners=CONTROLLER://127.0.0.1:notaport\n")
    with open(places["negative"], "w") as f:
        f.write(base + "broker.session.timeout.ms=-3\n")
    split = (f"process.roles=broker,controller\ncontroller.listener.names=CONTROLLER\n"
             f"listeners=CLIENTS://127.0.0.1:0,CONTROLLER://127.0.0.1:{places['free']}\n")
    for name, protocol in (("sasl", "SASL_PLAINTEXT"), ("ssl", "SSL")):
        with open(places[name], "w") as f:
            f.write(base + split + f"listener.security.protocol.map=CONTROLLER:PLAINTEXT,CLIENTS:{protocol}\n")
    shutil.copytree(places["meta"], places["locked_meta"])
    shutil.copytree(places["meta"], places["locked_segment_dir"])
    shutil.copytree(places["node"], places["locked_node"])
    os.makedirs(f"{ws}/root-only")
    # Mode 000 / 555 lock out the owner too, so the rows hold when the suite itself runs unprivileged
    # (then the rows run as this user); as root they run as nobody, whom these modes lock out as well.
    locked = {places["locked_meta"]: 0o000, places["locked_node"]: 0o000, f"{ws}/root-only": 0o555,
              f"{places['locked_segment_dir']}/00000000000000000000.log": 0o000}
    for path, mode in locked.items():
        os.chmod(path, mode)
    yield places
    busy.close()
    for path in locked:
        os.chmod(path, 0o755)
    shutil.rmtree(ws)


def _check(case: Case, places: dict, *, as_nobody: bool = False) -> None:
    argv = case.argv.format(**places).split()
    try:
        proc = _cli(argv, as_nobody=as_nobody)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kraftlog {' '.join(argv)} was not refused: it ran for {TIMEOUT_S} s")
    needles = [n.format(**places) for n in case.needles]
    line = assert_one_line_error(proc, case.code, *needles)
    assert "Traceback" not in proc.stdout
    for text in case.wrong:
        assert text not in line, f"misleading: {line}"


@pytest.mark.parametrize("as_nobody", [False, True], ids=["this-user", "unprivileged"])
@pytest.mark.parametrize("name", BAD_VALUES)
def test_a_bad_value_is_one_line(name, as_nobody, workspace):
    _check(BAD_VALUES[name], workspace, as_nobody=as_nobody)


@pytest.mark.parametrize("name", UNREADABLE)
def test_an_unreadable_path_is_one_line_as_an_unprivileged_user(name, workspace):
    _check(UNREADABLE[name], workspace, as_nobody=True)


def test_the_unreadable_rows_really_run_unprivileged(workspace):
    """The rows above prove something only if the locked paths are unreadable to their user."""
    probe = "import os, sys; print(os.access(sys.argv[1], os.R_OK), os.access(sys.argv[2], os.R_OK))"
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if os.geteuid() == 0 else []
    proc = subprocess.run([*prefix, sys.executable, "-c", probe, workspace["locked_meta"],
                           f"{workspace['locked_segment_dir']}/00000000000000000000.log"],
                          capture_output=True, text=True, timeout=30)
    assert proc.stdout.split() == ["False", "False"], proc


def test_dump_of_bytes_that_are_not_batches_exits_0_and_help_says_so(workspace):
    """As Kafka's kafka-dump-log: a file of random bytes is reported, not refused."""
    proc = _cli(["log", "dump", f"{workspace['ws']}/junk/00000000000000000000.log"])
    assert proc.returncode == 0 and "Traceback" not in proc.stderr + proc.stdout, proc
    assert "invalid" in proc.stdout.lower() or "corrupt" in proc.stdout.lower(), proc.stdout
    help_text = " ".join(_cli(["log", "dump", "--help"]).stdout.split())
    assert "dump exits 0 whatever the bytes hold" in help_text and "kafka-dump-log" in help_text


def test_a_closed_pipe_ends_quietly(workspace):
    """`kraftlog ... | head -1`: the reader goes away; no BrokenPipeError traceback, exit 0."""
    with subprocess.Popen([*CLI, "log", "dump", workspace["meta"] + "/00000000000000000000.log"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/") as proc:
        proc.stdout.readline()
        proc.stdout.close()
        stderr = proc.stderr.read().decode()
        assert proc.wait(timeout=TIMEOUT_S) == 0, stderr
    assert stderr == ""

