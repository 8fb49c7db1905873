"""`kraftlog gen` and `kraftlog log dump|verify|repair`, end to end through the real CLI.

Every command runs as a subprocess (``python -m kraftlog.engine.cli.main``) on a log written by
`kraftlog gen` into a temporary directory. Expected values come from an independent reader
(kafka-python's record-batch reader: offsets, positions, CRCs, sizes, CRC validity) or from the
workload's own parameters, never from the output of the code under test.
"""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_contract import assert_one_line_error
from kafka.record.memory_records import MemoryRecords

# The commands run the native scan/CRC/index code; `make test` runs them again on the pure twins
# (KRAFTLOG_NO_EXTENSIONS=1 reaches the subprocesses through the environment).
pytestmark = pytest.mark.twin

CLI = [sys.executable, "-m", "kraftlog.engine.cli.main"]
PARTITIONS = 2000  # 200 topics x 10 partitions, 3 brokers
CHURN = 300
RECORDS_PER_BATCH = 100
SEGMENT_BYTES = 40_000


def run(*args: str, input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, input=input, timeout=120,
                          env={**os.environ, **(env or {})})


def kafka_batches(path: str) -> tuple[list[tuple[int, object]], int]:
    """(position, kafka-python DefaultRecordBatch) of every whole batch, and the bytes they cover."""
    with open(path, "rb") as f:
        records = MemoryRecords(f.read())
    out, position = [], 0
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        out.append((position, batch))
        position += batch.size_in_bytes
    return out, position


def segment_paths(directory: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if re.fullmatch(r"\d{20}\.log", n))


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> str:
    """One generated log (several segments) plus its checkpoint, shared read-only by the tests."""
    directory = str(tmp_path_factory.mktemp("cli") / "meta")
    proc = run("gen", directory, "--partitions", str(PARTITIONS), "--churn", str(CHURN), "--records-per-batch",
               str(RECORDS_PER_BATCH), "--segment-bytes", str(SEGMENT_BYTES), "--seed", "7", "--checkpoint")
    assert proc.returncode == 0, proc.stderr
    return directory


@pytest.fixture()
def copy(generated, tmp_path) -> str:
    """A private copy of the generated log, for tests that damage or repair it."""
    target = str(tmp_path / "copy")
    shutil.copytree(generated, target)
    return target


def total_records() -> int:
    # FeatureLevel + (register + unfence) per broker + per topic (TopicRecord + 10 PartitionRecords) + churn,
    # plus the LeaderChange control record gen writes first.
    brokers = 3
    return 1 + 2 * brokers + (PARTITIONS // 10) * 11 + CHURN + 1


# -- gen -----------------------------------------------------------------------------------------------------------


def test_gen_writes_a_segmented_log_that_kafka_python_reads(generated):
    """gen's log: several segments, contiguous offsets, every CRC valid per kafka-python, all records there."""
    paths = segment_paths(generated)
    assert len(paths) > 3
    expected_next, records = 0, 0
    for path in paths:
        batches, covered = kafka_batches(path)
        assert covered == os.path.getsize(path)
        assert int(os.path.basename(path)[:20]) == expected_next
        for _, batch in batches:
            assert batch.validate_crc()
            assert batch.base_offset == expected_next
            expected_next = batch.base_offset + batch.last_offset_delta + 1
            records += batch.records_count
    assert records == expected_next == total_records()
    checkpoints = [n for n in os.listdir(generated) if n.endswith(".checkpoint")]
    assert checkpoints == [f"{total_records():020d}-{1:010d}.checkpoint"]


def test_gen_refuses_a_directory_that_holds_a_log(generated):
    """Writing over an existing log is refused with one line."""
    assert_one_line_error(run("gen", generated, "--partitions", "10"), 1, "already holds a log")


def test_gen_refuses_an_unknown_metadata_version(tmp_path):
    """An unknown metadata.version is one line naming it, and nothing is created."""
    target = str(tmp_path / "x")
    assert_one_line_error(run("gen", target, "--partitions", "10", "--metadata-version", "9.9-IV9"), 1, "9.9-IV9")
    assert not os.path.exists(target)


def test_gen_at_an_older_metadata_version_writes_older_record_versions(tmp_path):
    """--metadata-version 3.6-IV2 writes PartitionRecord v0 (no Directories field): checked on the raw bytes."""
    target = str(tmp_path / "old")
    assert run("gen", target, "--partitions", "20", "--metadata-version", "3.6-IV2").returncode == 0
    versions = set()
    for path in segment_paths(target):
        for _, batch in kafka_batches(path)[0]:
            for record in batch:
                if record.value and record.value[1] == 3:  # frame version 1, apiKey 3 = PartitionRecord
                    versions.add(record.value[2])
    assert versions == {0}


def test_gen_shows_progress_on_a_terminal_and_not_with_quiet(tmp_path):
    """On a terminal stderr gets a progress bar with a records/s rate; --quiet removes it."""
    def stderr_on_pty(*args: str) -> str:
        master, slave = pty.openpty()
        proc = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=slave, env={**os.environ,
                                "COLUMNS": "120", "TERM": "xterm"})
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        assert proc.wait(timeout=60) == 0
        return b"".join(chunks).decode(errors="replace")

    assert "records/s" in stderr_on_pty("gen", str(tmp_path / "a"), "--partitions", "50000")
    assert "records/s" not in stderr_on_pty("gen", str(tmp_path / "b"), "--partitions", "50000", "--quiet")


# -- dump ----------------------------------------------------------------------------------------------------------

BATCH_LINE = re.compile(
    r"^baseOffset: (-?\d+) lastOffset: (-?\d+) count: (\d+) baseSequence: (-?\d+) lastSequence: (-?\d+) "
    r"producerId: (-?\d+) producerEpoch: (-?\d+) partitionLeaderEpoch: (-?\d+) isTransactional: (true|false) "
    r"isControl: (true|false) deleteHorizonMs: OptionalLong.empty position: (\d+) CreateTime: (-?\d+) "
    r"size: (\d+) magic: 2 compresscodec: none crc: (\d+) isvalid: (true|false)$")
RECORD_LINE = re.compile(r"^\| offset: (\d+) CreateTime: (-?\d+) keySize: (-?\d+) valueSize: (-?\d+) "
                         r"sequence: -1 headerKeys: \[\] (payload: |LeaderChange: )(.*)$")


def test_dump_batch_and_record_lines_match_kafka_python(generated):
    """Every batch line (Kafka's field order) and record line agrees with kafka-python's view of the file."""
    path = segment_paths(generated)[1]
    proc = run("log", "dump", path)
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0] == f"Dumping {path}"
    assert lines[1] == f"Log starting offset: {int(os.path.basename(path)[:20])}"
    batch_lines = [BATCH_LINE.match(x) for x in lines if x.startswith("baseOffset")]
    record_lines = [RECORD_LINE.match(x) for x in lines if x.startswith("|")]
    batches, _ = kafka_batches(path)
    assert len(batch_lines) == len(batches) and all(batch_lines)
    for m, (position, b) in zip(batch_lines, batches, strict=True):
        assert int(m[1]) == b.base_offset and int(m[2]) == b.base_offset + b.last_offset_delta
        assert int(m[3]) == b.records_count and int(m[8]) == b.leader_epoch
        assert int(m[11]) == position and int(m[12]) == b.max_timestamp and int(m[13]) == b.size_in_bytes
        assert int(m[14]) == b.crc and m[15] == "true"
    kafka_records = [r for _, b in batches for r in b]
    assert len(record_lines) == len(kafka_records) and all(record_lines)
    for m, r in zip(record_lines, kafka_records, strict=True):
        assert int(m[1]) == r.offset and int(m[2]) == r.timestamp and int(m[4]) == len(r.value)
        payload = json.loads(m[6])
        assert payload["type"].endswith("_RECORD") and "data" in payload


def test_dump_decodes_the_workload_topics_and_the_leader_change(generated):
    """Across all segments the TOPIC_RECORD payloads name exactly the workload's topics, and offset 0
    is the LeaderChange control record gen writes (leader 1)."""
    proc = run("log", "dump", "--json", *segment_paths(generated))
    assert proc.returncode == 0
    objs = [json.loads(line) for line in proc.stdout.splitlines()]
    records = [o for o in objs if o["kind"] == "record"]
    assert len(records) == total_records()
    assert [o["offset"] for o in records] == list(range(total_records()))
    names = {o["payload"]["data"]["name"] for o in records if o.get("payload", {}).get("type") == "TOPIC_RECORD"}
    assert names == {f"topic-{t:06d}" for t in range(PARTITIONS // 10)}
    assert records[0]["control"]["type"] == "LEADER_CHANGE" and records[0]["control"]["data"]["leaderId"] == 1
    batches = [o for o in objs if o["kind"] == "batch"]
    assert batches[0]["isControl"] is True and all(not b["isControl"] for b in batches[1:])


def test_dump_of_a_checkpoint_shows_the_snapshot_frame(generated):
    """A .checkpoint dump names the snapshot id and starts/ends with SnapshotHeader/SnapshotFooter."""
    name = next(n for n in os.listdir(generated) if n.endswith(".checkpoint"))
    proc = run("log", "dump", os.path.join(generated, name))
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[1] == f"Snapshot end offset: {total_records()}, epoch: 1"
    records = [x for x in lines if x.startswith("|")]
    assert " SnapshotHeader {" in records[0] and records[-1].endswith(' SnapshotFooter {"version":0}')
    assert all(" payload: {" in r for r in records[1:-1])


def test_dump_of_index_files_lists_entries_that_point_at_batches(generated):
    """.index entries name a batch's last offset and its position (checked with kafka-python)."""
    path = segment_paths(generated)[1]
    proc = run("log", "dump", path[:-4] + ".index")
    assert proc.returncode == 0
    entries = [tuple(map(int, m.groups())) for m in re.finditer(r"offset: (\d+) position: (\d+)", proc.stdout)]
    assert entries
    by_position = {p: b.base_offset + b.last_offset_delta for p, b in kafka_batches(path)[0]}
    assert all(by_position[position] == offset for offset, position in entries)


def test_dump_reports_a_flipped_byte_and_goes_on(copy):
    """A byte flipped mid-segment: that batch is isvalid: false (as kafka-python's CRC check says),
    the batches after it still print, exit 0."""
    path = segment_paths(copy)[2]
    batches, _ = kafka_batches(path)
    position, victim = batches[1]
    with open(path, "r+b") as f:
        f.seek(position + victim.size_in_bytes // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    expected = [b.validate_crc() for _, b in kafka_batches(path)[0]]
    assert expected.count(False) == 1
    proc = run("log", "dump", path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    valid = [m[15] == "true" for m in (BATCH_LINE.match(x) for x in proc.stdout.splitlines()) if m]
    assert valid == expected
    assert "| invalid batch, records not decoded: CRC mismatch" in proc.stdout
    assert "invalid bytes" not in proc.stdout


def test_dump_reports_a_cut_tail_as_invalid_bytes(copy):
    """A segment cut inside its last batch: 'Found N invalid bytes at the end of NAME, from position P',
    P being where kafka-python's whole batches end."""
    path = segment_paths(copy)[-1]
    size = os.path.getsize(path)
    os.truncate(path, size - 50)
    _, covered = kafka_batches(path)
    proc = run("log", "dump", path)
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[-1] == (f"Found {size - 50 - covered} invalid bytes at the end of "
                                            f"{os.path.basename(path)}, from position {covered}")


def test_dump_errors_are_one_line(generated, tmp_path):
    """A missing file, a directory and an unknown file kind are refused before anything is printed."""
    assert_one_line_error(run("log", "dump", str(tmp_path / "nope.log")), 1, "does not exist")
    assert_one_line_error(run("log", "dump", generated), 1, "is a directory")
    other = tmp_path / "notes.txt"
    other.write_text("x")
    proc = run("log", "dump", segment_paths(generated)[0], str(other))
    assert_one_line_error(proc, 1, "notes.txt")
    assert proc.stdout == ""


# -- verify --------------------------------------------------------------------------------------------------------


def test_verify_accepts_the_generated_log(generated):
    """A clean log: exit 0, one line per segment, the OK line with the offsets kafka-python sees."""
    proc = run("log", "verify", generated)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.splitlines()[-1].startswith(f"OK: {len(segment_paths(generated))} segment(s), offsets "
                                                   f"0..{total_records() - 1}, {total_records():,} records")


def test_verify_reports_a_flipped_byte_with_file_and_position(copy):
    """A flipped byte mid-segment: exit 1, one stderr line naming the segment, the bad batch's
    position (from kafka-python) and the repair command."""
    path = segment_paths(copy)[3]
    position, victim = kafka_batches(path)[0][1]
    with open(path, "r+b") as f:
        f.seek(position + 70)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x01]))
    assert not kafka_batches(path)[0][1][1].validate_crc()
    assert_one_line_error(run("log", "verify", copy), 1, f"{path}: position {position}:", "CRC mismatch",
                          "kraftlog log repair")


def test_verify_reports_a_cut_tail(copy):
    """A tail cut inside the last batch is reported as a torn tail at the last whole batch's end."""
    path = segment_paths(copy)[-1]
    os.truncate(path, os.path.getsize(path) - 7)
    _, covered = kafka_batches(path)
    assert_one_line_error(run("log", "verify", copy), 1, f"position {covered}:", "torn tail")


def test_preallocated_zeros_after_the_last_batch_are_the_logs_end(copy):
    """A node killed while its active segment was preallocated (LogConfig.preallocate_bytes)
    leaves zeros after the last batch: verify and image show read the log to its last batch;
    zeros in a segment that is not the last are still damage."""
    last = segment_paths(copy)[-1]
    with open(last, "ab") as f:
        f.write(bytes(4096))
    proc = run("log", "verify", copy)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert f"offsets 0..{total_records() - 1}, {total_records():,} records" in proc.stdout.splitlines()[-1]
    shown = run("image", "show", copy)
    assert shown.returncode == 0 and shown.stderr == "", shown.stderr
    first = segment_paths(copy)[0]
    _, covered = kafka_batches(first)
    with open(first, "ab") as f:
        f.write(bytes(4096))
    assert_one_line_error(run("log", "verify", copy), 1, f"{first}: position {covered}:", "invalid batch")


def test_verify_reports_a_missing_segment_as_an_offset_gap(copy):
    """A middle segment removed: the next one does not continue the offsets."""
    paths = segment_paths(copy)
    os.remove(paths[2])
    expected = int(os.path.basename(paths[2])[:20])
    assert_one_line_error(run("log", "verify", copy), 1, os.path.basename(paths[3]),
                          f"the previous segment ends at {expected}")


def test_verify_checks_the_offset_index_against_the_log(copy):
    """An .index entry pointing at the wrong position is a problem in a cleanly shut down log."""
    path = segment_paths(copy)[1][:-4] + ".index"
    raw = bytearray(Path(path).read_bytes())
    assert len(raw) >= 8
    raw[4:8] = (int.from_bytes(raw[4:8], "big") + 1).to_bytes(4, "big")
    Path(path).write_bytes(bytes(raw))
    assert_one_line_error(run("log", "verify", copy), 1, os.path.basename(path), "not the start of a batch")


def test_verify_errors_are_one_line(tmp_path):
    """A missing directory and a directory without segments are one line each; --debug shows the traceback."""
    assert_one_line_error(run("log", "verify", str(tmp_path / "missing")), 1, "does not exist")
    assert_one_line_error(run("log", "verify", str(tmp_path)), 1, "holds no log segments")
    debug = run("--debug", "log", "verify", str(tmp_path / "missing"))
    assert debug.returncode != 0 and "Traceback" in debug.stderr


# -- repair --------------------------------------------------------------------------------------------------------


def test_repair_cuts_at_the_first_corruption_and_keeps_a_backup(copy, generated):
    """Repair of a flipped byte: the segment is cut at the bad batch, its tail and every later segment
    are in the backup byte for byte, the log verifies again and ends where the bad batch started."""
    paths = segment_paths(copy)
    target = paths[2]
    position, victim = kafka_batches(target)[0][1]
    original = Path(target).read_bytes()
    damaged = bytearray(original)
    damaged[position + 100] ^= 0x10
    Path(target).write_bytes(bytes(damaged))

    dry = run("log", "repair", copy, "--truncate-at-first-corruption", "--dry-run")
    assert dry.returncode == 1 and "would cut" in dry.stdout
    assert Path(target).read_bytes() == bytes(damaged)

    proc = run("log", "repair", copy, "--truncate-at-first-corruption")
    assert proc.returncode == 0, proc.stderr
    backups = [n for n in os.listdir(copy) if n.startswith("repair-backup-")]
    assert len(backups) == 1
    backup = os.path.join(copy, backups[0])
    assert os.path.getsize(target) == position
    saved = Path(backup, os.path.basename(target) + f".from-{position}")
    assert saved.read_bytes() == bytes(damaged[position:])
    for later in paths[3:]:
        assert not os.path.exists(later)
        name = os.path.basename(later)
        assert Path(backup, name).read_bytes() == Path(generated, name).read_bytes()
    assert os.path.exists(os.path.join(backup, "REPAIR.txt"))
    verify = run("log", "verify", copy)
    assert verify.returncode == 0
    assert f"offsets 0..{victim.base_offset - 1}," in verify.stdout.splitlines()[-1]


def test_repair_of_a_clean_log_changes_nothing(copy):
    """Nothing to repair: exit 0, no backup directory."""
    proc = run("log", "repair", copy, "--truncate-at-first-corruption")
    assert proc.returncode == 0 and "nothing to repair" in proc.stdout
    assert not [n for n in os.listdir(copy) if n.startswith("repair-backup-")]


def test_repair_requires_the_explicit_flag(copy):
    """Without --truncate-at-first-corruption: a one-line usage error, exit 2."""
    assert_one_line_error(run("log", "repair", copy), 2, "--truncate-at-first-corruption")


def test_usage_errors_are_one_line():
    """Unknown flags and subcommands: one line, exit 2; --help of each command has an example."""
    assert_one_line_error(run("log", "verify", "x", "--bogus"), 2, "unrecognized arguments: --bogus")
    assert_one_line_error(run("log", "frobnicate"), 2, "invalid choice")
    assert_one_line_error(run("gen", "x", "--partitions", "many"), 2, "--partitions")
    for command in (["log", "dump"], ["log", "verify"], ["log", "repair"], ["gen"]):
        proc = run(*command, "--help")
        assert proc.returncode == 0 and "example" in proc.stdout.lower()


def test_dump_of_a_batch_written_by_kafka_python(tmp_path):
    """A producer-style batch built by kafka-python (zstd, transactional, producer id/epoch, a base
    sequence that wraps, keys and headers): the batch line carries those fields in Kafka's words,
    record sequences wrap as Kafka's, header keys are listed, and a value that is not a metadata
    record prints Kafka's 'Error at <offset>, skipping.' payload."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, 4, 1, 4242, 3, 2_147_483_646, 1 << 20)
    feature = bytes([1, 12, 0, 17])  # frame 1, apiKey 12 (FeatureLevelRecord) v0, then a cut-short body
    values = [b"hello" * 400, feature, b"\x00"]
    for i, value in enumerate(values):
        builder.append(i, 1_700_000_000_000 + i, b"k%d" % i, value, [("h1", b"x"), ("h2", None)])
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(builder.build()))
    proc = run("log", "dump", str(path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    epoch = kafka_batches(str(path))[0][0][1].leader_epoch
    assert (f"baseSequence: 2147483646 lastSequence: 0 producerId: 4242 producerEpoch: 3 partitionLeaderEpoch: {epoch} "
            "isTransactional: true isControl: false") in lines[2]
    assert "compresscodec: zstd" in lines[2] and lines[2].endswith("isvalid: true")
    records = [x for x in lines if x.startswith("|")]
    assert [re.search(r"sequence: (\d+)", r)[1] for r in records] == ["2147483646", "2147483647", "0"]
    assert all("keySize: 2 " in r and "headerKeys: [h1,h2]" in r for r in records)
    assert all(f"payload: Error at {i}, skipping." in r for i, r in enumerate(records))
