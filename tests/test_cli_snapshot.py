"""`kraftlog snapshot list|dump|export|import`, end to end through the real CLI.

A node directory is laid out as a node lays it out (`kraftlog storage format`, then
``__cluster_metadata-0/snapshots``) and two snapshots are written into its LMDB store with
``SnapshotStore.write_image``: the reference workload (1000-1) and the same workload after churn
(2000-3). Every command then runs as a subprocess. Expected values come from the store's own API in
this process, the workload's definition, kafka-python's batch reader, the byte layout of record
batches, or `kraftlog log dump` of the exported file, never from the output under test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from cli_contract import assert_one_line_error
from image_summary import summary
from kafka.record.memory_records import MemoryRecords

from kraftlog.engine.image import versions
from kraftlog.engine.image import workload as wl
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.image.writer import write_image
from kraftlog.engine.records import batch
from kraftlog.engine.snapshot import SnapshotId, SnapshotStore, SnapshotStoreConfig
from kraftlog.engine.snapshot.layout import chunk_key, id_key

# The commands run the native batch scan / CRC / record codecs; the twin run repeats them on the
# pure-Python twins (KRAFTLOG_NO_EXTENSIONS=1 reaches the subprocesses through the environment).
pytestmark = pytest.mark.twin

CLI = [sys.executable, "-m", "kraftlog.engine.cli.main"]
SHAPE = wl.WorkloadShape.scaled(600, replicas_per_broker=300, metadata_version=versions.LEVELS["3.9-IV0"])
OLD, NEW = SnapshotId(1000, 1), SnapshotId(2000, 3)
# Small chunks and batches, so a snapshot spans several chunks (one can be damaged alone).
SMALL = SnapshotStoreConfig(sync=False, metasync=False, chunk_target_bytes=16 * 1024, batch_target_bytes=4096)
LOG_DIR, STORE_DIR = "__cluster_metadata-0", "snapshots"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)


def replay(values: list[bytes]):
    log = b"".join(batch.build_batch_from_values(values[i:i + 200], base_offset=i) for i in range(0, len(values), 200))
    return Loader().replay(log)


def store_of(node: str) -> str:
    return os.path.join(node, LOG_DIR, STORE_DIR)


@pytest.fixture(scope="module")
def images():
    base = list(wl.generate(SHAPE))
    return {OLD: replay(base), NEW: replay(base + list(wl.churn(SHAPE, 300, seed=5)))}


@pytest.fixture(scope="module")
def node(tmp_path_factory, images) -> dict:
    """A formatted node directory whose store holds OLD and NEW; shared read-only."""
    root = tmp_path_factory.mktemp("snap")
    directory = str(root / "n1")
    proc = run("storage", "format", "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg", "--node-id", "1", "--dir", directory)
    assert proc.returncode == 0, proc.stderr
    os.makedirs(os.path.join(directory, LOG_DIR))
    before_ms = time.time_ns() // 1_000_000
    with SnapshotStore(store_of(directory), SMALL) as store:
        manifests = {sid: store.write_image(sid, images[sid])[0] for sid in (OLD, NEW)}
    after_ms = time.time_ns() // 1_000_000
    return {"dir": directory, "root": str(root), "manifests": manifests, "window_ms": (before_ms, after_ms)}


@pytest.fixture
def copy(node, tmp_path) -> str:
    """A private copy of the node directory, for tests that write to or damage it."""
    target = str(tmp_path / "copy")
    shutil.copytree(node["dir"], target)
    return target


def export(node_dir: str, out: str, *extra: str) -> str:
    proc = run("snapshot", "export", node_dir, "--format", "checkpoint", "--out", out, *extra)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def batch_spans(data: bytes) -> list[tuple[int, int]]:
    """(position, size) of every record batch, from the v2 framing alone: a batch is its 8-byte base
    offset, a 4-byte big-endian length, then that many bytes."""
    spans, position = [], 0
    while position + 12 <= len(data):
        size = 12 + int.from_bytes(data[position + 8:position + 12], "big")
        spans.append((position, size))
        position += size
    return spans


def flip(store_path: str, db_name: bytes, key: bytes, at: int) -> None:
    """Flip one stored byte of a value, as a bad sector would (LMDB's own pages stay sound)."""
    with SnapshotStore(store_path, SMALL) as store:
        db = store.env.open_db(db_name)
        with store.env.begin(write=True, db=db) as txn:
            value = bytearray(txn.get(key))
            value[at % len(value)] ^= 0x40
            txn.put(key, bytes(value))


# -- list --------------------------------------------------------------------------------------------


def test_list_reads_the_store_from_the_node_dir_the_log_dir_or_the_store_itself(node):
    """The three spellings of DIR give the same rows; each row holds the manifest's facts, the
    workload's metadata.version and a creation time inside the window the fixture wrote in."""
    outputs = [run("snapshot", "list", path, "--json")
               for path in (node["dir"], os.path.join(node["dir"], LOG_DIR), store_of(node["dir"]))]
    assert all(p.returncode == 0 and p.stderr == "" for p in outputs)
    assert outputs[0].stdout == outputs[1].stdout == outputs[2].stdout
    rows = [json.loads(line) for line in outputs[0].stdout.splitlines()]
    assert [(r["endOffset"], r["epoch"]) for r in rows] == [OLD, NEW]
    low, high = node["window_ms"]
    for row in rows:
        m = node["manifests"][SnapshotId(row["endOffset"], row["epoch"])]
        assert (row["records"], row["batches"], row["streamBytes"], row["storedBytes"]) == (
            m.record_count, m.batch_count, m.stream_bytes, m.stored_bytes)
        assert row["metadataVersion"] == "3.9-IV0" and row["verified"] is None
        assert low <= row["createdMs"] <= high
    assert rows[0]["records"] == len(write_image(replay(list(wl.generate(SHAPE)))).values) + 2  # + header, footer


def test_list_text_is_a_table_and_verify_marks_every_snapshot(node):
    """The text form: a header row and one row per snapshot with its end offset, epoch and
    metadata.version; --verify turns the last column from '-' into 'ok' and exits 0."""
    plain, verified = run("snapshot", "list", node["dir"]), run("snapshot", "list", node["dir"], "--verify")
    assert plain.returncode == verified.returncode == 0
    for proc, mark in ((plain, "-"), (verified, "ok")):
        header, *rows = proc.stdout.splitlines()
        assert header.split()[:2] == ["END", "OFFSET"] and header.split()[-1] == "VERIFIED"
        assert [row.split()[:2] for row in rows] == [[str(s.end_offset), str(s.epoch)] for s in (OLD, NEW)]
        assert all(row.split()[-2:] == ["3.9-IV0", mark] for row in rows)
    rows = [json.loads(line) for line in run("snapshot", "list", node["dir"], "--verify", "--json").stdout.splitlines()]
    assert [r["verified"] for r in rows] == [True, True]


# -- dump --------------------------------------------------------------------------------------------


def test_dump_prints_what_log_dump_prints_for_the_exported_file(node, tmp_path):
    """`snapshot dump` and `log dump` of the exported .checkpoint agree line for line (text and
    JSON), apart from the name of what is dumped; --snapshot picks the older one."""
    out = str(tmp_path)
    export(node["dir"], out)
    exported = os.path.join(out, NEW.file_name)
    ours, theirs = run("snapshot", "dump", node["dir"]), run("log", "dump", exported)
    assert ours.returncode == theirs.returncode == 0
    ours_lines, theirs_lines = ours.stdout.splitlines(), theirs.stdout.splitlines()
    assert ours_lines[0].startswith("Dumping ") and ours_lines[0].endswith(f"#{NEW}")
    assert ours_lines[1:] == theirs_lines[1:] and ours_lines[1] == f"Snapshot end offset: {NEW.end_offset}, epoch: 3"
    assert sum(line.startswith("| offset: ") for line in ours_lines) == node["manifests"][NEW].record_count

    def objects(proc):
        assert proc.returncode == 0, proc.stderr
        rows = [json.loads(line) for line in proc.stdout.splitlines()]
        return [{k: v for k, v in r.items() if k != "file"} for r in rows]

    assert objects(run("snapshot", "dump", node["dir"], "--json")) == objects(run("log", "dump", "--json", exported))
    older = run("snapshot", "dump", node["dir"], "--snapshot", str(OLD), "--batches-only")
    assert older.stdout.splitlines()[1] == "Snapshot end offset: 1000, epoch: 1"
    assert len(older.stdout.splitlines()) == 2 + node["manifests"][OLD].batch_count


# -- export / import ---------------------------------------------------------------------------------


def test_export_writes_a_checkpoint_that_kafka_python_log_dump_and_image_show_read(node, tmp_path):
    """The exported file has Kafka's name, every batch CRC-valid to kafka-python, the manifest's
    batch and record counts; `image show` on it finds the workload's topics, partitions, brokers."""
    out = str(tmp_path)
    export(node["dir"], out, "--snapshot", str(OLD))
    path = os.path.join(out, OLD.file_name)
    assert sorted(os.listdir(out)) == [OLD.file_name]  # no staging directory or .part left behind
    with open(path, "rb") as f:
        records = MemoryRecords(f.read())
    batches = []
    while records.has_next():
        batches.append(records.next_batch())
    m = node["manifests"][OLD]
    assert len(batches) == m.batch_count and all(b.validate_crc() for b in batches)
    assert sum(len(list(b)) for b in batches) == m.record_count
    shown = run("image", "show", path, "--json")
    assert shown.returncode == 0, shown.stderr
    facts = json.loads(shown.stdout)
    assert (facts["topics"], facts["partitions"], facts["brokers"]) == (SHAPE.topics, SHAPE.partitions, SHAPE.brokers)
    assert facts["endOffset"] == OLD.end_offset and facts["metadataVersion"] == "3.9-IV0"


def test_export_then_import_into_another_node_gives_the_same_image(node, images, tmp_path):
    """export -> import into a second node directory (its store is created) -> the store loads
    the image that was written, not the other one; importing the same id again is refused unless
    --replace."""
    out = str(tmp_path / "out")
    os.makedirs(out)
    export(node["dir"], out, "--snapshot", str(OLD))
    other = str(tmp_path / "n2")
    os.makedirs(os.path.join(other, LOG_DIR))
    path = os.path.join(out, OLD.file_name)
    proc = run("snapshot", "import", other, path)
    assert proc.returncode == 0, proc.stderr
    assert f"as snapshot {OLD}" in proc.stdout
    with SnapshotStore(store_of(other), SMALL) as store:
        assert store.ids() == [OLD]
        loaded = store.load_image(OLD)
    assert summary(loaded) == summary(images[OLD]) != summary(images[NEW])
    assert_one_line_error(run("snapshot", "import", other, path), 1, str(OLD), "already", "--replace")
    assert run("snapshot", "import", other, path, "--replace").returncode == 0


def test_export_to_a_file_name_writes_the_same_bytes_and_warns_about_the_name(node, tmp_path):
    """--out FILE writes exactly the bytes of the Kafka-named export, warns (one line) that the name
    carries no id, and refuses to overwrite an existing file unless --force."""
    canonical_dir = str(tmp_path / "a")
    os.makedirs(canonical_dir)
    export(node["dir"], canonical_dir)
    target = str(tmp_path / "copy.checkpoint")
    proc = run("snapshot", "export", node["dir"], "--out", target)
    assert proc.returncode == 0 and len(proc.stderr.splitlines()) == 1 and "warning" in proc.stderr
    with open(target, "rb") as a, open(os.path.join(canonical_dir, NEW.file_name), "rb") as b:
        assert a.read() == b.read()
    assert_one_line_error(run("snapshot", "export", node["dir"], "--out", target), 1, target, "exists", "--force")
    assert run("snapshot", "export", node["dir"], "--out", target, "--force").returncode == 0
    assert sorted(os.listdir(tmp_path)) == ["a", "copy.checkpoint"]


def test_import_applies_retention_and_refuses_what_it_would_delete(node, copy, tmp_path):
    """The store keeps its 3 newest: a 4th, newer import reports the one it pushed out; an import
    older than all 3 is refused and stores nothing."""
    export(node["dir"], str(tmp_path), "--snapshot", str(OLD))
    path = os.path.join(str(tmp_path), OLD.file_name)
    assert run("snapshot", "import", copy, path, "--snapshot", "3000-3").returncode == 0
    proc = run("snapshot", "import", copy, path, "--snapshot", "4000-4")
    assert proc.returncode == 0 and f"Retention removed {OLD}" in proc.stdout
    assert_one_line_error(run("snapshot", "import", copy, path, "--snapshot", "500-1"), 1, "500-1", "retention")
    with SnapshotStore(store_of(copy), SMALL) as store:
        assert store.ids() == [NEW, SnapshotId(3000, 3), SnapshotId(4000, 4)]


# -- corruption ----------------------------------------------------------------------------------------


def test_import_refuses_a_corrupt_or_truncated_checkpoint_naming_file_and_position(node, copy, tmp_path):
    """A flipped byte inside a batch, and a file cut inside its last batch: one line naming the
    file and the position of the broken batch; the store is left as it was."""
    export(node["dir"], str(tmp_path), "--snapshot", str(OLD))
    with open(os.path.join(str(tmp_path), OLD.file_name), "rb") as f:
        good = f.read()
    spans = batch_spans(good)
    damaged = bytearray(good)
    position, size = spans[len(spans) // 2]
    damaged[position + size // 2] ^= 0x01
    bad = tmp_path / "bad" / SnapshotId(5000, 5).file_name
    bad.parent.mkdir()
    bad.write_bytes(bytes(damaged))
    assert_one_line_error(run("snapshot", "import", copy, str(bad)), 1, str(bad), f"position {position}", "CRC")
    last_position, last_size = spans[-1]
    bad.write_bytes(good[:last_position + last_size // 2])
    assert_one_line_error(run("snapshot", "import", copy, str(bad)), 1, str(bad), f"position {last_position}")
    with SnapshotStore(store_of(copy), SMALL) as store:
        assert store.ids() == [OLD, NEW]


def test_a_damaged_chunk_fails_verify_dump_and_export_with_one_line(node, copy, tmp_path):
    """One flipped byte in a chunk of NEW: list (manifests only) still passes; list --verify marks
    NEW corrupt and OLD ok and exits 1 naming the chunk; dump and export of NEW fail naming it
    and leave no file; OLD still exports."""
    bad_chunk = node["manifests"][NEW].chunk_count // 2
    flip(store_of(copy), b"chunks", chunk_key(NEW, bad_chunk), 40)
    assert run("snapshot", "list", copy).returncode == 0
    proc = run("snapshot", "list", copy, "--verify")
    line = assert_one_line_error(proc, 1, str(NEW), f"chunk {bad_chunk}", "CRC mismatch")
    assert "1 of 2" in line
    rows = proc.stdout.splitlines()
    assert rows[1].split()[-1] == "ok" and rows[2].split()[-1] == "CORRUPT"
    assert_one_line_error(run("snapshot", "dump", copy), 1, str(NEW), f"chunk {bad_chunk}")
    out = str(tmp_path / "out")
    os.makedirs(out)
    assert_one_line_error(run("snapshot", "export", copy, "--out", out), 1, str(NEW), f"chunk {bad_chunk}")
    assert os.listdir(out) == []
    export(copy, out, "--snapshot", str(OLD))
    assert os.listdir(out) == [OLD.file_name]


def test_a_damaged_manifest_fails_list_even_without_verify(copy):
    """A manifest whose CRC fails is reported by a plain list: its row says CORRUPT, exit 1."""
    flip(store_of(copy), b"manifests", id_key(OLD), 30)
    proc = run("snapshot", "list", copy)
    assert_one_line_error(proc, 1, str(OLD), "manifest")
    assert proc.stdout.splitlines()[1].split()[-1] == "CORRUPT"


# -- a running node ----------------------------------------------------------------------------------


def test_import_refuses_while_a_node_runs_on_the_directory_unless_forced(node, tmp_path):
    """A real `kraftlog node run` holds the store open: import names its pid and refuses; --force
    imports with one warning line; once the node is gone, import runs without one."""
    export(node["dir"], str(tmp_path), "--snapshot", str(OLD))
    path = os.path.join(str(tmp_path), OLD.file_name)
    directory = str(tmp_path / "live")
    assert run("storage", "format", "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg", "--node-id", "1",
               "--dir", directory).returncode == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([*CLI, "node", "run", "--node-id", "1", "--controller-quorum-voters",
                             f"1@127.0.0.1:{port}", "--dir", directory], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline().startswith(b"READY node=1")
        assert_one_line_error(run("snapshot", "import", directory, path), 1, f"process {proc.pid}", "--force")
        forced = run("snapshot", "import", directory, path, "--force")
        assert forced.returncode == 0 and len(forced.stderr.splitlines()) == 1 and "warning" in forced.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
    after = run("snapshot", "import", directory, path, "--snapshot", "3000-3")
    assert after.returncode == 0 and after.stderr == ""


# -- usage and operating errors ----------------------------------------------------------------------


def test_every_error_is_one_line_with_exit_1_or_2(node, tmp_path):
    """Missing dir, a file, a dir without a store, an unknown snapshot, an empty store, a broken
    LMDB file, a missing or unnamed import file, a missing export directory (exit 1); a bad id,
    a bad format, a missing argument, an unknown flag (exit 2)."""
    d = node["dir"]
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "file").write_text("x")
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "data.mdb").write_bytes(b"not an lmdb file" * 512)
    unnamed = tmp_path / "snap.bin"
    unnamed.write_bytes(b"")
    emptystore = tmp_path / "es"
    SnapshotStore(emptystore, SMALL).close()
    busy = tmp_path / "busy"  # neither empty nor a node directory: no place for a store
    busy.mkdir()
    (busy / "notes.txt").write_text("x")
    cases = [
        (("list", str(tmp_path / "missing")), 1, ("missing", "does not exist")),
        (("list", str(tmp_path / "file")), 1, ("file", "not a directory")),
        (("dump", str(empty)), 1, (str(empty), "no snapshot store")),
        (("dump", d, "--snapshot", "5-1"), 1, ("5-1", "not in", str(OLD), str(NEW))),
        (("export", d, "--snapshot", "5-1", "--out", str(tmp_path)), 1, ("5-1", "not in")),
        (("dump", str(emptystore)), 1, (str(emptystore), "no snapshot")),
        (("list", str(garbage)), 1, (str(garbage), "LMDB")),
        (("import", d, str(tmp_path / "nope.checkpoint")), 1, ("nope.checkpoint", "does not exist")),
        (("import", d, str(unnamed)), 1, ("snap.bin", "--snapshot")),
        (("import", str(busy), str(unnamed), "--snapshot", "1-1"), 1, (str(busy), "nowhere to create a store")),
        (("import", str(empty), str(unnamed), "--snapshot", "1-1"), 1, ("snap.bin", "header and a footer")),
        (("export", d, "--out", str(tmp_path / "no" / "x.checkpoint")), 1, ("does not exist",)),
        (("dump", d, "--snapshot", "12-x"), 2, ("--snapshot", "12-x")),
        (("export", d, "--format", "json", "--out", str(tmp_path)), 2, ("--format",)),
        (("export", d), 2, ("--out",)),
        (("list",), 2, ("DIR",)),
        (("list", d, "--bogus"), 2, ("--bogus",)),
    ]
    with ThreadPoolExecutor(max_workers=3) as pool:  # independent subprocesses: overlap their start-up
        procs = list(pool.map(lambda case: run("snapshot", *case[0]), cases))
    for (_, code, needles), proc in zip(cases, procs, strict=True):
        assert_one_line_error(proc, code, *needles)
    assert sorted(os.listdir(tmp_path)) == ["busy", "empty", "es", "file", "garbage", "snap.bin"]
    assert os.listdir(empty) == []  # a failed import creates nothing


def test_import_into_a_fresh_or_formatted_directory_creates_the_store_that_image_show_reads(node, images, tmp_path):
    """A directory with no log yet (empty, or only `storage format`ed) gets the store in the
    node layout; `image show` then reads a store with no segments from its newest snapshot."""
    out = str(tmp_path / "out")
    os.makedirs(out)
    export(node["dir"], out, "--snapshot", str(NEW))
    path = os.path.join(out, NEW.file_name)
    fresh, formatted = str(tmp_path / "fresh"), str(tmp_path / "formatted")
    os.makedirs(fresh)
    assert run("storage", "format", "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qg", "--node-id", "2",
               "--dir", formatted).returncode == 0
    for target in (fresh, formatted):
        proc = run("snapshot", "import", target, path)
        assert proc.returncode == 0, proc.stderr
        with SnapshotStore(store_of(target), SMALL) as store:
            assert store.ids() == [NEW]
        show = run("image", "show", "--json", target)
        assert show.returncode == 0, show.stderr
        facts = json.loads(show.stdout)
        assert (facts["topics"], facts["partitions"]) == (images[NEW].topics.live_topics,
                                                          images[NEW].topics.partition_count)
        assert "no log segments" in show.stderr and str(NEW.end_offset) in show.stderr
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "something").write_text("x")
    assert_one_line_error(run("snapshot", "import", str(busy), path), 1, "nowhere to create a store")


@pytest.mark.parametrize("cut", ["empty", "header only", "no footer"])
def test_an_incomplete_checkpoint_is_an_error_in_every_tool(node, tmp_path, cut):
    """image show, log verify, log dump and snapshot import refuse a .checkpoint cut short (log
    dump after printing what is there, as Kafka's tool prints); a whole one verifies."""
    out = str(tmp_path / "out")
    os.makedirs(out)
    export(node["dir"], out, "--snapshot", str(OLD))
    path = os.path.join(out, OLD.file_name)
    with open(path, "rb") as f:
        good = f.read()
    verified = run("log", "verify", path)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith(f"OK: {path}") and "header and footer in place" in verified.stdout
    spans = batch_spans(good)
    keep = {"empty": 0, "header only": spans[0][0] + spans[0][1], "no footer": spans[-1][0]}[cut]
    with open(path, "wb") as f:
        f.write(good[:keep])
    for command in (("image", "show"), ("log", "verify"), ("snapshot", "import", str(tmp_path / "n3"))):
        if command[0] == "snapshot":
            os.makedirs(command[2], exist_ok=True)
        assert_one_line_error(run(*command, path), 1, path)
    dumped = run("log", "dump", path)
    assert_one_line_error(dumped, 1, path, "not a whole snapshot")
    assert dumped.stdout.startswith(f"Dumping {path}")
