"""Snapshot ids and the byte layouts the LMDB store keeps (one definition for readers and writers).

An LMDB environment ``<log_dir>/snapshots/`` holds three named databases. Every key starts with
the 12-byte snapshot id, big-endian, so LMDB's byte order is (end offset, epoch) order:

    id key (12 bytes)     end_offset u64 BE | epoch u32 BE

    "manifests"  id key                      -> manifest (below): the snapshot exists iff this does
    "chunks"     id key | chunk_no u32 BE    -> chunk header (below) | payload
    "index"      id key | table name ASCII   -> index blob header (below) | numpy rows

Manifest (MANIFEST, big-endian, 96 bytes):

    offset  size  field
    0       4     magic b"KLSM"
    4       2     format version (1)
    6       2     metadata.version (the FeatureLevelRecord of the stream; 0 when it has none)
    8       8     end offset (== the key's)
    16      4     epoch (== the key's)
    20      4     flags: bit 0 image form (no change records: the lazy image may answer),
                  bit 1 the stream holds compressed record batches
    24      8     records (every record of the stream, control records included)
    32      8     record batches
    40      4     chunks
    44      1     chunk codec (0 none, 1 zstd)
    45      3     zero
    48      8     stream bytes (the .checkpoint form's size)
    56      4     CRC-32C of the whole stream
    60      8     LastContainedLogTimestamp of the SnapshotHeader
    68      8     created (ms since the epoch, the writer's clock)
    76      8     stored bytes (chunk payloads + index blobs: what the snapshot costs in LMDB)
    84      8     zero
    92      4     CRC-32C of bytes [0, 92), seeded with the CRC of the key

Chunk value (CHUNK_HEADER, big-endian, 17 bytes, then the payload):

    0       4     CRC-32C of bytes [4, end), seeded with the CRC of the chunk's key (so a chunk
                  read under another key, or another snapshot's chunk, does not verify)
    4       1     codec: 0 none (payload = raw stream bytes), 1 zstd (one zstd frame)
    5       4     raw bytes (the chunk's share of the stream; whole record batches only)
    9       8     stream position of the chunk's first byte

Index blob (INDEX_HEADER, big-endian, 12 bytes, then ``rows`` rows of the table's dtype, which is
little-endian and fixed per format version, see index.py):

    0       4     CRC-32C of bytes [4, end), seeded with the CRC of the key
    4       8     rows
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kraftlog.engine.records.wire import crc32c

ID_KEY = struct.Struct(">QI")
CHUNK_NO = struct.Struct(">I")
MANIFEST_MAGIC = b"KLSM"
FORMAT_VERSION = 1
MANIFEST = struct.Struct(">4sHhqiIqqIB3xqIqqq8x")
MANIFEST_CRC = struct.Struct(">I")
MANIFEST_BYTES = MANIFEST.size + MANIFEST_CRC.size
CHUNK_HEADER = struct.Struct(">IBIq")
INDEX_HEADER = struct.Struct(">Iq")
CODEC_NONE, CODEC_ZSTD = 0, 1
FLAG_IMAGE_FORM = 1
FLAG_COMPRESSED_BATCHES = 2
EPOCH_MAX = (1 << 31) - 1
END_OFFSET_MAX = (1 << 63) - 1

assert MANIFEST_BYTES == 96 and CHUNK_HEADER.size == 17 and INDEX_HEADER.size == 12


class SnapshotId(NamedTuple):
    """Kafka's snapshot id: the end offset (exclusive: the first offset not in the snapshot) and the
    epoch of the last record it contains. Orders by (end_offset, epoch) like the LMDB keys."""

    end_offset: int
    epoch: int

    @property
    def offset(self) -> int:
        """The end offset under raft's OffsetAndEpoch name, so a SnapshotId can stand for one."""
        return self.end_offset

    @property
    def file_name(self) -> str:
        """Kafka's snapshot file name: ``%020d-%010d.checkpoint``."""
        return f"{self.end_offset:020d}-{self.epoch:010d}.checkpoint"

    def __str__(self) -> str:
        return f"{self.end_offset}-{self.epoch}"


def as_id(snapshot_id) -> SnapshotId:
    """Any (end offset, epoch) pair (raft's OffsetAndEpoch included) as a checked SnapshotId."""
    end_offset, epoch = int(snapshot_id[0]), int(snapshot_id[1])
    if not 0 <= end_offset <= END_OFFSET_MAX or not 0 <= epoch <= EPOCH_MAX:
        raise ValueError(f"snapshot id ({end_offset}, {epoch}) outside 0..2^63-1 / 0..2^31-1")
    return SnapshotId(end_offset, epoch)


def id_key(snapshot_id: SnapshotId) -> bytes:
    return ID_KEY.pack(snapshot_id.end_offset, snapshot_id.epoch)


def id_from_key(key) -> SnapshotId:
    return SnapshotId(*ID_KEY.unpack_from(key, 0))


def chunk_key(snapshot_id: SnapshotId, chunk_no: int) -> bytes:
    return id_key(snapshot_id) + CHUNK_NO.pack(chunk_no)


def index_key(snapshot_id: SnapshotId, table: str) -> bytes:
    return id_key(snapshot_id) + table.encode("ascii")


def key_crc(key: bytes) -> int:
    return crc32c(key)


class Manifest(NamedTuple):
    """What the "manifests" database says about one finished snapshot."""

    snapshot_id: SnapshotId
    metadata_version: int
    flags: int
    record_count: int
    batch_count: int
    chunk_count: int
    chunk_codec: int
    stream_bytes: int
    stream_crc: int
    last_contained_log_timestamp_ms: int
    created_ms: int
    stored_bytes: int

    @property
    def image_form(self) -> bool:
        return bool(self.flags & FLAG_IMAGE_FORM)

    def pack(self) -> bytes:
        sid = self.snapshot_id
        body = MANIFEST.pack(MANIFEST_MAGIC, FORMAT_VERSION, self.metadata_version, sid.end_offset, sid.epoch,
                             self.flags, self.record_count, self.batch_count, self.chunk_count, self.chunk_codec,
                             self.stream_bytes, self.stream_crc, self.last_contained_log_timestamp_ms,
                             self.created_ms, self.stored_bytes)
        return body + MANIFEST_CRC.pack(crc32c(body, key_crc(id_key(sid))))


def unpack_manifest(key: bytes, value) -> tuple[Manifest | None, str | None]:
    """(manifest, None) when ``value`` verifies under ``key``, else (None, what is wrong)."""
    if len(value) != MANIFEST_BYTES:
        return None, f"{len(value)} bytes, {MANIFEST_BYTES} expected"
    stored = MANIFEST_CRC.unpack_from(value, MANIFEST.size)[0]
    computed = crc32c(memoryview(value)[:MANIFEST.size], key_crc(bytes(key)))
    if stored != computed:
        return None, f"CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
    (magic, version, metadata_version, end_offset, epoch, flags, records, batches, chunks, codec, stream_bytes,
     stream_crc, last_ts, created, stored_bytes) = MANIFEST.unpack_from(value, 0)
    if magic != MANIFEST_MAGIC or version != FORMAT_VERSION:
        return None, f"unknown manifest magic {magic!r} / format {version}"
    sid = id_from_key(key)
    if (end_offset, epoch) != sid:
        return None, f"names snapshot {end_offset}-{epoch} under the key of {sid}"
    return Manifest(sid, metadata_version, flags, records, batches, chunks, codec, stream_bytes, stream_crc,
                    last_ts, created, stored_bytes), None
