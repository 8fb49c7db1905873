"""`kraftlog image show|shell` and `kraftlog storage random-uuid|format|info`, end to end.

The image tests run on a log written by `kraftlog gen` without churn, so what the image must hold
follows from the workload's definition (Kafka's benchmark shape: 10 partitions per topic, RF 3,
replicas assigned round-robin over the brokers, leader = first replica, ISR = replicas) rather than
from the code under test. The shell is driven through piped stdin, as a script would.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_contract import assert_one_line_error

CLI = [sys.executable, "-m", "kraftlog.engine.cli.main"]
TOPICS = 120
PARTITIONS = TOPICS * 10
BROKERS = 3  # max(RF, partitions * RF // 10,000 rounded down to a multiple of 3) for this size


def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, input=input, timeout=120)


def expected_replicas(topic: int, partition: int) -> list[int]:
    row = topic * 10 + partition
    return [(row + k) % BROKERS for k in range(3)]


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> str:
    directory = str(tmp_path_factory.mktemp("img") / "meta")
    proc = run("gen", directory, "--partitions", str(PARTITIONS), "--records-per-batch", "64", "--segment-bytes",
               "30000", "--metadata-version", "3.9-IV0", "--checkpoint")
    assert proc.returncode == 0, proc.stderr
    return directory


def checkpoint_of(log_dir: str) -> str:
    return os.path.join(log_dir, next(n for n in os.listdir(log_dir) if n.endswith(".checkpoint")))


# -- image show ----------------------------------------------------------------------------------------------------


def test_show_summary_counts_match_the_workload(log_dir):
    """The summary (JSON) holds the workload's topics, partitions, brokers and metadata.version; the
    run is quiet when piped (nothing on stderr)."""
    proc = run("image", "show", log_dir, "--json")
    assert proc.returncode == 0 and proc.stderr == ""
    facts = json.loads(proc.stdout)
    assert (facts["topics"], facts["partitions"], facts["brokers"]) == (TOPICS, PARTITIONS, BROKERS)
    assert facts["metadataVersion"] == "3.9-IV0" and facts["fencedBrokers"] == 0
    assert facts["recordsLoaded"] == 1 + 2 * BROKERS + TOPICS * 11


def test_show_of_the_checkpoint_equals_the_log(log_dir):
    """The image read from gen's .checkpoint snapshot has the same facts as the one replayed from the log."""
    from_log = json.loads(run("image", "show", log_dir, "--json").stdout)
    from_snapshot = json.loads(run("image", "show", checkpoint_of(log_dir), "--json").stdout)
    assert from_snapshot["kind"] == "checkpoint"
    for key in ("provenance", "metadataVersion", "brokers", "topics", "partitions", "endOffset"):
        assert from_snapshot[key] == from_log[key], key


def test_show_partition_leaf_follows_round_robin(log_dir):
    """A partition leaf: replicas and ISR round-robin, leader the first replica (text and JSON)."""
    for topic, partition in ((0, 0), (7, 3), (TOPICS - 1, 9)):
        path = f"/image/topics/byName/topic-{topic:06d}/{partition}"
        replicas = expected_replicas(topic, partition)
        text = run("image", "show", log_dir, path)
        assert text.returncode == 0
        assert text.stdout.startswith(f"PartitionRegistration(replicas={replicas}, ")
        assert f"leader={replicas[0]}," in text.stdout
        data = json.loads(run("image", "show", log_dir, path, "--json").stdout)
        assert data["replicas"] == replicas and data["isr"] == replicas and data["leader"] == replicas[0]


def test_show_missing_path_is_one_line(log_dir):
    assert_one_line_error(run("image", "show", log_dir, "/image/topics/byName/no-such-topic"), 1, "no such path")


def test_show_on_a_corrupt_log_names_file_position_and_repair(log_dir, tmp_path):
    """A flipped byte mid-segment: one line with the segment, the position and the repair command."""
    import shutil

    copy = str(tmp_path / "c")
    shutil.copytree(log_dir, copy)
    segment = sorted(n for n in os.listdir(copy) if n.endswith(".log"))[1]
    path = os.path.join(copy, segment)
    raw = bytearray(Path(path).read_bytes())
    raw[200] ^= 0xFF  # inside the first batch (its records), after the 61-byte header
    Path(path).write_bytes(bytes(raw))
    assert_one_line_error(run("image", "show", copy), 1, f"{path}: position 0:", "kraftlog log repair")


def test_show_errors_are_one_line(tmp_path):
    """Missing source, a directory without a log, a file that is not a snapshot."""
    assert_one_line_error(run("image", "show", str(tmp_path / "none")), 1, "does not exist")
    assert_one_line_error(run("image", "show", str(tmp_path)), 1, "holds no log segments")
    (tmp_path / "x.txt").write_text("hello")
    assert_one_line_error(run("image", "show", str(tmp_path / "x.txt")), 1, "not a .checkpoint")


# -- image shell ---------------------------------------------------------------------------------------------------


def test_shell_script_through_stdin(log_dir):
    """Piped commands: no prompt, each command's output in order, globbing, cd/pwd, exit stops the script."""
    script = "\n".join([
        "ls /image",
        "cd /image/topics/byName",
        "pwd",
        "ls topic-00000[12]",
        "cat topic-000002/5",
        "cd ../../cluster/brokers",
        "ls",
        "cat /image/features/metadataVersion",
        "find /image/producerIds",
        "exit",
        "pwd",
    ]) + "\n"
    proc = run("image", "shell", log_dir, input=script)
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    top = ["provenance", "features", "cluster", "topics", "configs", "clientQuotas", "producerIds", "acls", "scram",
           "delegationToken"]
    assert lines[:10] == top
    assert lines[10] == "/image/topics/byName"
    children = ["name", "id", "epoch"] + [str(p) for p in range(10)]
    assert lines[11:11 + 2 * (len(children) + 1) + 1] == (
        ["/image/topics/byName/topic-000001:"] + children + ["", "/image/topics/byName/topic-000002:"] + children)
    rest = lines[11 + 2 * (len(children) + 1) + 1:]
    assert rest[0].startswith(f"PartitionRegistration(replicas={expected_replicas(2, 5)}")
    assert rest[1:1 + BROKERS] == [str(b) for b in range(BROKERS)]
    assert rest[1 + BROKERS] == "3.9-IV0"
    assert rest[2 + BROKERS:] == ["/image/producerIds", "/image/producerIds/brokerEpoch",
                                  "/image/producerIds/brokerId", "/image/producerIds/nextProducerId"]


def test_shell_tree_and_find_cover_a_topic(log_dir):
    """tree prints a topic with its 10 partitions' values; find lists the topic's 13 paths plus itself."""
    proc = run("image", "shell", log_dir, input="tree /image/topics/byName/topic-000004\n"
                                                "find /image/topics/byName/topic-000004\n")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0] == "topic-000004:" and lines[1] == "  name: topic-000004"
    partitions = [x for x in lines if x.startswith("  ") and "PartitionRegistration" in x]
    assert len(partitions) == 10
    found = [x for x in lines if x.startswith("/image/")]
    assert len(found) == 14 and found[0] == "/image/topics/byName/topic-000004"


def test_shell_by_id_reaches_the_same_topic(log_dir):
    """/image/topics/byId/<id> is the topic whose id byName reports."""
    topic_id = run("image", "shell", log_dir, "cat", "/image/topics/byName/topic-000009/id").stdout.strip()
    assert len(base64.urlsafe_b64decode(topic_id + "==")) == 16
    name = run("image", "shell", log_dir, "cat", f"/image/topics/byId/{topic_id}/name").stdout.strip()
    assert name == "topic-000009"


def test_shell_failures_are_one_line_each_and_the_script_goes_on(log_dir):
    """An unknown path, cat of a directory and an unknown command each print one stderr line; later
    commands still run; the exit status is 1."""
    proc = run("image", "shell", log_dir, input="cat /image/nope\ncat /image\nfrobnicate\npwd\n")
    assert proc.returncode == 1
    errors = proc.stderr.splitlines()
    assert len(errors) == 3 and "Traceback" not in proc.stderr
    assert "No such file" in errors[0] and "Is a directory" in errors[1] and "unknown command" in errors[2]
    assert proc.stdout.splitlines() == ["/image"]


def test_shell_errors_name_the_command_group(tmp_path):
    """Before: 'kraftlog []: error: ...' (the shell's own COMMAND words shadowed the group name)."""
    missing = str(tmp_path / "nope")
    assert_one_line_error(run("image", "shell", missing), 1, f"kraftlog image shell: error: {missing} does not exist")


def test_shell_reads_a_checkpoint_file(log_dir):
    """The shell loads a .checkpoint snapshot as well as a log directory."""
    proc = run("image", "shell", checkpoint_of(log_dir), input="ls /image/topics/byName\n")
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == [f"topic-{t:06d}" for t in range(TOPICS)]


# -- storage -------------------------------------------------------------------------------------------------------


def read_properties(path: str) -> dict[str, str]:
    """A minimal Java-properties reader (comments, key=value)."""
    out = {}
    for line in Path(path).read_text(encoding="latin-1").splitlines():
        line = line.strip()
        if line and line[0] not in "#!":
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_random_uuid_is_kafka_base64url():
    """22 base64url characters decoding to 16 bytes, different each time, never starting with '-'."""
    ids = {run("storage", "random-uuid").stdout.strip() for _ in range(3)}
    assert len(ids) == 3
    for text in ids:
        assert len(text) == 22 and not text.startswith("-")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16


def test_format_writes_meta_properties_and_refuses_to_reformat(tmp_path):
    """format writes Kafka's v1 meta.properties; a second format is refused, --force rewrites it."""
    cluster = run("storage", "random-uuid").stdout.strip()
    target = str(tmp_path / "node")
    proc = run("storage", "format", "--cluster-id", cluster, "--node-id", "3", "--dir", target)
    assert proc.returncode == 0, proc.stderr
    props = read_properties(os.path.join(target, "meta.properties"))
    assert props["version"] == "1" and props["cluster.id"] == cluster and props["node.id"] == "3"
    assert len(base64.urlsafe_b64decode(props["directory.id"] + "==")) == 16
    assert_one_line_error(run("storage", "format", "--cluster-id", cluster, "--node-id", "3", "--dir", target),
                          1, "already formatted")
    assert run("storage", "format", "--cluster-id", cluster, "--node-id", "4", "--dir", target,
               "--force").returncode == 0
    assert read_properties(os.path.join(target, "meta.properties"))["node.id"] == "4"


def test_format_refuses_bad_input_and_directories_with_data(tmp_path):
    """A bad cluster id, a negative node id, a non-empty directory: one line each, nothing written."""
    cluster = run("storage", "random-uuid").stdout.strip()
    assert_one_line_error(run("storage", "format", "--cluster-id", "not-a-uuid", "--node-id", "1", "--dir",
                              str(tmp_path / "a")), 1, "not a Kafka uuid")
    # a bad flag value is a usage error, refused where it is parsed (engine/cli/values.py)
    assert_one_line_error(run("storage", "format", "--cluster-id", cluster, "--node-id", "-1", "--dir",
                              str(tmp_path / "b")), 2, "--node-id", "'-1'")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "00000000000000000000.log").write_bytes(b"")
    assert_one_line_error(run("storage", "format", "--cluster-id", cluster, "--node-id", "1", "--dir", str(busy)),
                          1, "not empty")
    assert not (busy / "meta.properties").exists()
    assert_one_line_error(run("storage", "format", "--node-id", "1", "--dir", str(tmp_path / "c")), 2,
                          "--cluster-id")


def test_info_reports_metadata_and_the_log(tmp_path, log_dir):
    """info prints meta.properties and where the log is (Kafka's __cluster_metadata-0 layout)."""
    import shutil

    cluster = run("storage", "random-uuid").stdout.strip()
    node = str(tmp_path / "node")
    assert run("storage", "format", "--cluster-id", cluster, "--node-id", "1", "--dir", node).returncode == 0
    before = run("storage", "info", "--dir", node)
    assert before.returncode == 0 and f"cluster.id={cluster}" in before.stdout and "Found log: none" in before.stdout
    shutil.copytree(log_dir, os.path.join(node, "__cluster_metadata-0"))
    after = run("storage", "info", "--dir", node)
    end = 1 + 2 * BROKERS + TOPICS * 11 + 1
    assert "__cluster_metadata-0: " in after.stdout and f"offsets 0..{end - 1}," in after.stdout
    assert run("log", "verify", node).returncode == 0  # the tools find the log under the node directory


def test_info_errors_are_one_line(tmp_path, log_dir):
    """A missing directory and an unformatted one (with the format command to run)."""
    assert_one_line_error(run("storage", "info", "--dir", str(tmp_path / "none")), 1, "does not exist")
    assert_one_line_error(run("storage", "info", "--dir", log_dir), 1, "not formatted", "kraftlog storage format")


def test_help_has_examples():
    for command in (["image", "show"], ["image", "shell"], ["storage", "format"], ["storage", "info"],
                    ["storage", "random-uuid"]):
        proc = run(*command, "--help")
        assert proc.returncode == 0 and "example" in proc.stdout.lower(), command
