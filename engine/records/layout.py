"""Record batch v2 (magic 2) header layout: the one definition every reader and writer uses.

    offset  size  field                  notes
    0       8     baseOffset i64         rewritten by the log on append; not covered by the CRC
    8       4     batchLength i32        bytes after this field: total size = 12 + batchLength
    12      4     partitionLeaderEpoch   rewritten by the leader on append; not covered by the CRC
    16      1     magic i8               always 2
    17      4     crc u32                CRC-32C of bytes [21, 12 + batchLength)
    21      2     attributes i16         bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd: compression.py), bit 3 timestamp type,
                                         bit 4 transactional, bit 5 control, bit 6 delete horizon
    23      4     lastOffsetDelta i32
    27      8     baseTimestamp i64
    35      8     maxTimestamp i64
    43      8     producerId i64
    51      2     producerEpoch i16
    53      4     baseSequence i32
    57      4     recordCount i32
    61            records (possibly compressed as one block)

All integers are big-endian. Because the CRC starts at `attributes`, a log can assign offsets and
leader epochs to a pre-built batch without recomputing it.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kraftlog.errors import CorruptRecordError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
MAGIC = 2
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers [ATTRIBUTES_OFFSET, end of batch)
LAST_OFFSET_DELTA_OFFSET = 23
LENGTH_OFFSET = 8
LEADER_EPOCH_OFFSET = 12
RECORD_COUNT_OFFSET = 57
# Smallest batchLength a valid batch can carry: header fields after batchLength, zero records.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

CODEC_MASK = 0x07
CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

HEADER = struct.Struct(">qiibIhiqqqhii")
assert HEADER.size == HEADER_SIZE


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size_bytes(self) -> int:
        """Bytes the whole batch occupies in a log."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)


def parse_header(buf, pos: int = 0, *, path: str | None = None) -> BatchHeader:
    """Read the 61-byte header at ``pos`` and check what can be checked without the body.

    Raises CorruptRecordError when fewer than 61 bytes remain, the magic is not 2, batchLength is
    too small for a header, or lastOffsetDelta is negative. The CRC is not checked here.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"truncated batch header: {len(buf) - pos} of {HEADER_SIZE} bytes",
                                 position=pos, path=path)
    header = BatchHeader._make(HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unsupported batch magic {header.magic}", position=pos, path=path)
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batch length {header.batch_length} is smaller than a header",
                                 position=pos, path=path)
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise CorruptRecordError("negative lastOffsetDelta or recordCount", position=pos, path=path)
    return header


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign the batch's base offset in place (outside the CRC)."""
    struct.pack_into(">q", buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Assign the batch's partition leader epoch in place (outside the CRC)."""
    struct.pack_into(">i", buf, pos + LEADER_EPOCH_OFFSET, epoch)


# Not a byte layout: the length of a run of batches up to which per-batch header work (a follower's
# append, raft's checks of a Fetch answer) runs as a Python loop rather than in numpy, whose fixed
# cost (~1 us an operation) outweighs its per-batch gain on a commit's one-batch runs.
SMALL_RUN_BATCHES = 32
