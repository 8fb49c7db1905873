"""Proves that metadata logs whose batches other writers compressed read like their uncompressed
twins: a `kraftlog gen` log is rewritten batch by batch with aiokafka's and kafka-python's record
batch builders, gzip, snappy, lz4 and zstd in turn (the metadata record values our codec encoded,
offsets and leader epochs kept), and then

- the loader (engine/image/logload.py, native and twin) builds the same image from it,
- `image show` prints the same facts (of the log, and of a recompressed `.checkpoint`), `log dump`
  decodes every record, `log verify` says OK;
- a CRC-valid batch in codec 5 is reported by `log verify` as an unsupported codec (not CRC
  corruption); `image show` stops with one line naming the codec, the file and the position, and
  the loader raises UnsupportedCodecError with that file and position;
- a CRC-valid batch whose compressed records do not inflate is reported as undecodable records.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AiokafkaBuilder
from cli_contract import assert_one_line_error
from image_summary import summary
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

from kraftlog.engine.image.logload import load_log_dir
from kraftlog.engine.records import batch, layout
from kraftlog.errors import UnsupportedCodecError

pytestmark = pytest.mark.twin

CLI = [sys.executable, "-m", "kraftlog.engine.cli.main"]
CODECS = [batch.CODEC_GZIP, batch.CODEC_SNAPPY, batch.CODEC_LZ4, batch.CODEC_ZSTD]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def repack_batch(raw: bytes, k: int) -> bytes:
    """The metadata batch ``raw`` rebuilt by a peer's builder with codec CODECS[k % 4] (aiokafka for
    even k, kafka-python for odd), base offset and leader epoch set as a log's append sets them."""
    h = batch.validate_batch(raw)
    builder = (AiokafkaBuilder if k % 2 == 0 else KafkaPythonBuilder)(
        2, CODECS[k % 4], 0, h.producer_id, h.producer_epoch, h.base_sequence, 1 << 30)
    for r in batch.iter_records(raw):
        builder.append(r.offset - h.base_offset, r.timestamp_ms, r.key, r.value, list(r.headers))
    built = bytearray(builder.build())
    assert built[layout.ATTRIBUTES_OFFSET + 1] & layout.CODEC_MASK == CODECS[k % 4]  # really compressed
    layout.set_base_offset(built, 0, h.base_offset)
    layout.set_partition_leader_epoch(built, 0, h.partition_leader_epoch)
    return bytes(built)


def repack_dir(src: str, dst: str) -> int:
    """Copy log directory ``src`` to ``dst`` with every metadata batch repacked (control batches
    kept, indexes left for the next open to rebuild); returns the number of batches repacked."""
    os.makedirs(dst)
    k = 0
    for name in sorted(os.listdir(src)):
        if name.endswith((".index", ".timeindex")):
            continue
        if not name.endswith(".log"):
            shutil.copy(os.path.join(src, name), os.path.join(dst, name))
            continue
        with open(os.path.join(src, name), "rb") as f:
            buf = f.read()
        out, pos = bytearray(), 0
        while pos < len(buf):
            h = batch.validate_batch(buf, pos)
            raw = buf[pos:pos + h.size_bytes]
            out += raw if h.is_control else repack_batch(raw, k)
            k += 0 if h.is_control else 1
            pos += h.size_bytes
        with open(os.path.join(dst, name), "wb") as f:
            f.write(out)
    return k


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> tuple[str, str]:
    """(plain, packed): a generated log and its compressed twin."""
    root = tmp_path_factory.mktemp("codecs")
    plain, packed = str(root / "plain"), str(root / "packed")
    proc = run("gen", plain, "--partitions", "600", "--churn", "100", "--records-per-batch", "50",
               "--segment-bytes", "30000", "--seed", "3", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert repack_dir(plain, packed) >= 8  # every codec, from both builders, twice
    return plain, packed


@pytest.fixture()
def packed_copy(logs, tmp_path) -> str:
    target = str(tmp_path / "copy")
    shutil.copytree(logs[1], target)
    return target


def first_metadata_batch(directory: str) -> tuple[str, int, bytearray]:
    """(segment path, position, bytes) of the first non-control batch of the first segment."""
    path = os.path.join(directory, sorted(n for n in os.listdir(directory) if n.endswith(".log"))[0])
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0
    while batch.validate_batch(buf, pos).is_control:
        pos += batch.validate_batch(buf, pos).size_bytes
    return path, pos, bytearray(buf[pos:pos + batch.validate_batch(buf, pos).size_bytes])


def rewrite(path: str, position: int, new: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(new)


def with_crc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, layout.CRC_OFFSET, crc32c.crc32c(bytes(buf[layout.ATTRIBUTES_OFFSET:])))
    return buf


def test_the_loader_builds_the_same_image_from_the_compressed_twin(logs, tmp_path):
    plain, packed = logs
    copies = [shutil.copytree(d, str(tmp_path / name)) for d, name in ((plain, "p"), (packed, "c"))]
    images = [load_log_dir(d) for d in copies]
    assert summary(images[1]) == summary(images[0])
    assert images[1].topics.partition_count == images[0].topics.partition_count > 0


def test_image_show_and_log_verify_read_the_compressed_twin(logs):
    plain, packed = logs
    facts = []
    for directory in (plain, packed):
        proc = run("image", "show", directory, "--json")
        assert proc.returncode == 0, proc.stderr
        facts.append({k: v for k, v in json.loads(proc.stdout).items() if k not in ("source", "loadSeconds",
                                                                                     "batchesLoaded")})
    assert facts[1] == facts[0] and facts[0]["partitions"] > 0
    verify = run("log", "verify", packed)
    assert verify.returncode == 0, verify.stderr
    assert "every CRC valid, every record decodes" in verify.stdout.splitlines()[-1]


def test_log_dump_decodes_every_record_of_every_codec(logs):
    plain, packed = logs
    for name in sorted(n for n in os.listdir(packed) if n.endswith(".log")):
        lines = [run("log", "dump", os.path.join(d, name)).stdout.splitlines() for d in (plain, packed)]
        records = [[x.split(" payload: ")[-1] for x in out if x.startswith("| offset")] for out in lines]
        assert records[1] == records[0] and len(records[0]) > 0
        assert not any("invalid batch" in x or "Error at" in x for x in lines[1])
        codecs = {x.split("compresscodec: ")[1].split()[0] for x in lines[1] if "compresscodec: " in x}
        assert codecs & {"gzip", "snappy", "lz4", "zstd"}


def repack_checkpoint(src: str, dst: str, records_per_batch: int = 40) -> int:
    """``src`` (a .checkpoint) rewritten with its metadata records in batches of
    ``records_per_batch``, each built by a peer with the next codec; returns the batch count."""
    with open(src, "rb") as f:
        buf = f.read()
    out, pos, k = bytearray(), 0, 0
    while pos < len(buf):
        h = batch.validate_batch(buf, pos)
        raw = buf[pos:pos + h.size_bytes]
        pos += h.size_bytes
        if h.is_control:
            out += raw
            continue
        records = list(batch.iter_records(raw))
        for start in range(0, len(records), records_per_batch):
            chunk = records[start:start + records_per_batch]
            plain = batch.build_batch(chunk, base_offset=chunk[0].offset, partition_leader_epoch=h.partition_leader_epoch)
            out += repack_batch(plain, k)
            k += 1
    with open(dst, "wb") as f:
        f.write(out)
    return k


def test_a_compressed_checkpoint_shows_the_same_image(tmp_path):
    """A `.checkpoint` whose records peers recompressed (every codec) gives `image show` the same
    facts as the original."""
    plain_dir = str(tmp_path / "plain")
    assert run("gen", plain_dir, "--partitions", "300", "--seed", "5", "--checkpoint", "--quiet").returncode == 0
    name = next(n for n in os.listdir(plain_dir) if n.endswith(".checkpoint"))
    packed = str(tmp_path / name)
    assert repack_checkpoint(os.path.join(plain_dir, name), packed) >= len(CODECS)
    facts = []
    for path in (os.path.join(plain_dir, name), packed):
        proc = run("image", "show", path, "--json")
        assert proc.returncode == 0, proc.stderr
        facts.append({k: v for k, v in json.loads(proc.stdout).items() if k not in ("source", "loadSeconds",
                                                                                     "batchesLoaded")})
    assert facts[1] == facts[0] and facts[0]["partitions"] == 300


def test_a_codec_that_does_not_exist_is_reported_as_such_not_as_corruption(packed_copy):
    path, position, raw = first_metadata_batch(packed_copy)
    struct.pack_into(">h", raw, layout.ATTRIBUTES_OFFSET, 5)
    rewrite(path, position, with_crc(raw))
    verify = run("log", "verify", packed_copy)
    line = assert_one_line_error(verify, 1, "every CRC valid", "1 in an unsupported codec", f"position {position}")
    assert "CRC mismatch" not in line
    assert f"unsupported codec: {path}: position {position}" in verify.stdout
    assert "compression codec 5 is not supported" in verify.stdout
    assert_one_line_error(run("image", "show", packed_copy), 1, "compression codec 5 is not supported", path,
                          f"position {position}")
    with pytest.raises(UnsupportedCodecError) as info:
        load_log_dir(packed_copy)
    assert (info.value.codec, info.value.path, info.value.position) == (5, path, position)


def test_compressed_records_that_do_not_inflate_are_undecodable_records(packed_copy):
    path, position, raw = first_metadata_batch(packed_copy)
    end = len(raw)
    raw[layout.HEADER_SIZE + 20:end] = bytes(end - layout.HEADER_SIZE - 20)  # zeros over the compressed block
    rewrite(path, position, with_crc(raw))
    verify = run("log", "verify", packed_copy)
    assert_one_line_error(verify, 1, "every CRC valid", "1 with undecodable records")
    assert f"undecodable records: {path}: position {position}" in verify.stdout
