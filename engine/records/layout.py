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

Native code reads the same facts from csrc/batch_header.h (KL_*_AT offsets, kl_check_batch_header);
tests/test_batch_header.py checks each of its values against the names here, and that
check_header_bytes (the twins' header check) and the C check refuse the same headers.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kraftlog.errors import CorruptRecordError

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
LEADER_EPOCH_OFFSET = 12
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
MAGIC = 2
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers [ATTRIBUTES_OFFSET, end of batch)
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
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
_INT64_MAX = (1 << 63) - 1
_CHECKED = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_I32 = struct.Struct(">i")

# What check_header_bytes finds wrong, in the order it looks. csrc/batch_header.h's KL_BATCH_*
# carry the same numbers (tests/test_batch_header.py), and so do batch_types' P_* problem codes.
HEADER_OK = 0
HEADER_TRUNCATED = 1  # fewer than HEADER_SIZE bytes
HEADER_BAD_MAGIC = 2
HEADER_SHORT_LENGTH = 3  # batchLength < MIN_BATCH_LENGTH
HEADER_NEGATIVE = 4  # lastOffsetDelta or recordCount < 0
HEADER_OFFSET_OVERFLOW = 5  # baseOffset + lastOffsetDelta > int64 max
BATCH_TRUNCATED = 6  # the batch runs past the bytes available


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


def check_header_bytes(buf, pos: int, end: int, assigned_offsets: bool = True) -> tuple[int, int]:
    """The one header check of the pure twins, as csrc/batch_header.h's kl_check_batch_header is the
    native modules': the same checks in the same order. Returns (HEADER_OK, the batch's size in
    bytes), else (the first problem, the declared size for BATCH_TRUNCATED or 0). ``end`` bounds
    the readable bytes; the CRC is not checked. ``assigned_offsets`` is False only for a batch
    whose baseOffset the log is about to assign (stamping): it is then not checked for overflow.
    """
    if end - pos < HEADER_SIZE:
        return HEADER_TRUNCATED, 0
    base_offset, length, _, magic = _CHECKED.unpack_from(buf, pos)
    if magic != MAGIC:
        return HEADER_BAD_MAGIC, 0
    if length < MIN_BATCH_LENGTH:
        return HEADER_SHORT_LENGTH, 0
    last_delta = _I32.unpack_from(buf, pos + LAST_OFFSET_DELTA_OFFSET)[0]
    if last_delta < 0 or _I32.unpack_from(buf, pos + RECORD_COUNT_OFFSET)[0] < 0:
        return HEADER_NEGATIVE, 0
    if assigned_offsets and base_offset > _INT64_MAX - last_delta:
        return HEADER_OFFSET_OVERFLOW, 0
    size = LOG_OVERHEAD + length
    if size > end - pos:
        return BATCH_TRUNCATED, size
    return HEADER_OK, size


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
