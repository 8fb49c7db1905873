"""The compression codecs of record batches v2: one compressed block per batch, inflated within a bound.

A compressed batch keeps its 61-byte header (engine/records/layout.py) as it is; only the records
section after it is compressed, as one block, and recordCount still counts records. The codec is
attributes bits 0-2:

    1 gzip    RFC 1952 gzip members (Java's GZIPOutputStream writes one)
    2 snappy  either xerial's framing, as Kafka's Java client writes it:
                  magic 82 53 4E 41 50 50 59 00 ("\\x82SNAPPY\\0"), version i32, compatible
                  version i32 (big-endian), then blocks: length i32 (big-endian), one raw snappy
                  block of that many bytes
              or one raw snappy block, as librdkafka may write it. A raw block starts with its
              uncompressed length as an unsigned varint.
    3 lz4     one LZ4 frame (KIP-57): magic 04 22 4D 18 (u32le 0x184D2204), FLG, BD, [content
              size u64le], [dictionary id u32le], header checksum; blocks of size u32le (high bit:
              stored uncompressed; 0: end mark) [+ u32 block checksum]; [u32 content checksum]
    4 zstd    one zstd frame (RFC 8878); see _zstd_frame_extent
    5-7       no codec: UnsupportedCodecError (Kafka refuses them too)

Bounded inflation: a records section may inflate to at most MAX_INFLATED_BYTES. Each codec's
bound is known before the output is allocated (zstd and lz4 from their block headers, snappy
from each block's length prefix, gzip by inflating with a maximum output length), so neither a
bomb nor a header that lies about its size makes a reader allocate past the limit.
"""

from __future__ import annotations

import struct
import threading
import zlib
from typing import TYPE_CHECKING

from kraftlog.engine.records.layout import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD

if TYPE_CHECKING:
    import zstandard

# The codec libraries (cramjam: snappy and lz4; zstandard) are imported inside the functions that
# use them, on first use: the log and the batch codec import this module for its constants and
# Problem, and a process that never meets a compressed batch should not pay for loading them
# (bench row startup.import_log_s). After the first call an import is a sys.modules lookup.

CODEC_NAMES = {0: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}
COMPRESSION_CODECS = (CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD)

# Decompression-bomb guard: one records section may inflate to at most this many bytes
# (KRaft's own batches stay under 8 MiB; Kafka's default message.max.bytes is about 1 MiB).
MAX_INFLATED_BYTES = 64 * 1024 * 1024

ZSTD_LEVEL = 3  # Kafka's default levels (KIP-390)
GZIP_LEVEL = 6  # java.util.zip.Deflater's default
LZ4_LEVEL = 9


class Problem(Exception):
    """Bytes that do not inflate; the caller names the batch (position, path)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def codec_name(codec: int) -> str:
    return CODEC_NAMES.get(codec, "unknown")


def _over_limit(name: str) -> Problem:
    return Problem(f"{name} records would decompress past the {MAX_INFLATED_BYTES}-byte limit")


# ---------------------------------------------------------------------------------------------
# gzip

_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer around the deflate stream


def _inflate_gzip(data) -> bytes:
    out = bytearray()
    rest = bytes(data)
    while True:  # Java's GZIPInputStream reads concatenated members: so do we
        inflater = zlib.decompressobj(_GZIP_WBITS)
        try:
            out += inflater.decompress(rest, MAX_INFLATED_BYTES + 1 - len(out))
        except zlib.error as exc:
            raise Problem(f"gzip records do not decompress: {exc}") from None
        if len(out) > MAX_INFLATED_BYTES or inflater.unconsumed_tail:
            raise _over_limit("gzip")
        if not inflater.eof:
            raise Problem("gzip records are truncated")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)


def _deflate_gzip(data) -> bytes:
    deflater = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    return deflater.compress(data) + deflater.flush()


# ---------------------------------------------------------------------------------------------
# snappy

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
_XERIAL_VERSION = 1
_XERIAL_BLOCK_BYTES = 32 * 1024  # xerial SnappyOutputStream's default block size
_BLOCK_LENGTH = struct.Struct(">i")


def _snappy_block(block, budget_bytes: int) -> bytes:
    """One raw snappy block, refused before inflating when its length prefix exceeds the budget."""
    import cramjam
    try:
        size = int(cramjam.snappy.decompress_raw_len(block))
        if size > budget_bytes:
            raise _over_limit("snappy")
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise Problem(f"snappy records do not decompress: {exc}") from None


def _inflate_snappy(data) -> bytes:
    data = bytes(data)
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_block(data, MAX_INFLATED_BYTES)
    if len(data) < _XERIAL_HEADER.size:
        raise Problem("snappy records end inside the xerial header")
    out = bytearray()
    pos = _XERIAL_HEADER.size  # version and compatible version are not checked, as xerial's reader
    while pos < len(data):  # each block advances pos by >= 4 bytes
        if pos + _BLOCK_LENGTH.size > len(data):
            raise Problem("snappy records end inside a xerial block length")
        (size,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += _BLOCK_LENGTH.size
        if size < 0 or size > len(data) - pos:
            raise Problem(f"snappy xerial block of {size} bytes runs past the records")
        out += _snappy_block(data[pos:pos + size], MAX_INFLATED_BYTES - len(out))
        pos += size
    return bytes(out)


def _deflate_snappy(data) -> bytes:
    """xerial framing, as Kafka's Java client writes it (every Kafka reader accepts it)."""
    import cramjam
    view = memoryview(data)
    out = bytearray(_XERIAL_HEADER.pack(_XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_VERSION))
    for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK_BYTES]))
        out += _BLOCK_LENGTH.pack(len(block))
        out += block
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# lz4

_LZ4_MAGIC = 0x184D2204
_LZ4_FLG_VERSION = 0x40  # bits 6-7 must be 01
_LZ4_FLG_BLOCK_CHECKSUM = 0x10
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_FLG_CONTENT_CHECKSUM = 0x04
_LZ4_FLG_DICT_ID = 0x01
_LZ4_BLOCK_MAX_BYTES = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}  # BD bits 4-6
_LZ4_UNCOMPRESSED_BIT = 0x80000000


def _lz4_frame_bound(frame: bytes) -> int:
    """Upper bound of what the LZ4 frame inflates to, from its block headers; checks that the
    frame fills the records exactly."""
    n = len(frame)
    if n < 7 or int.from_bytes(frame[0:4], "little") != _LZ4_MAGIC:
        raise Problem("lz4 records do not start with an LZ4 frame")
    flg, bd = frame[4], frame[5]
    if flg & 0xC0 != _LZ4_FLG_VERSION or (bd >> 4) & 7 not in _LZ4_BLOCK_MAX_BYTES:
        raise Problem(f"lz4 frame header is not valid (FLG {flg:#04x}, BD {bd:#04x})")
    block_max = _LZ4_BLOCK_MAX_BYTES[(bd >> 4) & 7]
    pos = 6 + (8 if flg & _LZ4_FLG_CONTENT_SIZE else 0) + (4 if flg & _LZ4_FLG_DICT_ID else 0) + 1
    trailer = 4 if flg & _LZ4_FLG_BLOCK_CHECKSUM else 0
    bound = 0
    while True:  # each block advances pos by >= 4 bytes
        if pos + 4 > n:
            raise Problem("lz4 frame is truncated")
        word = int.from_bytes(frame[pos:pos + 4], "little")
        pos += 4
        if word == 0:
            break
        size = word & ~_LZ4_UNCOMPRESSED_BIT
        if size > block_max:
            raise Problem(f"lz4 block of {size} bytes is larger than the frame's {block_max}-byte blocks")
        pos += size + trailer
        bound += size if word & _LZ4_UNCOMPRESSED_BIT else block_max
        if bound > MAX_INFLATED_BYTES:
            raise _over_limit("lz4")
    pos += 4 if flg & _LZ4_FLG_CONTENT_CHECKSUM else 0
    if pos != n:
        raise Problem("lz4 frame is truncated" if pos > n else f"{n - pos} bytes after the lz4 frame")
    return bound


def _inflate_lz4(data) -> bytes:
    import cramjam
    frame = bytes(data)
    _lz4_frame_bound(frame)
    try:
        return bytes(cramjam.lz4.decompress(frame))
    except cramjam.DecompressionError as exc:
        raise Problem(f"lz4 records do not decompress: {exc}") from None


def _deflate_lz4(data) -> bytes:
    import cramjam
    # Independent blocks and no content checksum: what Kafka's KafkaLZ4BlockInputStream reads (KIP-57).
    compressor = cramjam.lz4.Compressor(level=LZ4_LEVEL, content_checksum=False, block_linked=False)
    compressor.compress(bytes(data))
    return bytes(compressor.finish())


# ---------------------------------------------------------------------------------------------
# zstd

_local = threading.local()  # zstd contexts are not thread-safe: one per thread


def _zstd_compressor() -> zstandard.ZstdCompressor:
    import zstandard
    cctx = getattr(_local, "cctx", None)
    if cctx is None:
        cctx = _local.cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return cctx


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    import zstandard
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = _local.dctx = zstandard.ZstdDecompressor()
    return dctx


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_BLOCK_MAX_BYTES = 128 * 1024  # zstd format: no block regenerates more than 128 KiB


def _zstd_frame_extent(frame) -> tuple[int, int]:
    """(bytes of the first zstd frame, upper bound of what it decompresses to), from its block
    headers (RFC 8878 section 3.1.1), without decompressing anything.

    Frame: magic u32le, frame header (frame_header_size), blocks, optional 4-byte checksum.
    Block header: 3 bytes little-endian: bit 0 last block, bits 1-2 type (0 raw, 1 RLE,
    2 compressed, 3 reserved), bits 3-23 size (RLE: regenerated size; content is one byte).
    """
    import zstandard
    n = len(frame)
    if n < 5 or int.from_bytes(frame[0:4], "little") != _ZSTD_MAGIC:
        raise Problem("zstd records do not start with a zstd frame")
    try:
        pos = zstandard.frame_header_size(frame)
    except zstandard.ZstdError as exc:
        raise Problem(f"zstd records have a bad frame header: {exc}") from None
    has_checksum = frame[4] & 0x04
    bound = 0
    while True:  # each block advances pos by >= 3 bytes: at most n / 3 rounds
        if pos + 3 > n:
            raise Problem("zstd frame is truncated")
        head = frame[pos] | frame[pos + 1] << 8 | frame[pos + 2] << 16
        pos += 3
        kind, size = (head >> 1) & 3, head >> 3
        if kind == 3 or size > _ZSTD_BLOCK_MAX_BYTES:
            raise Problem("zstd frame has an invalid block")
        pos += 1 if kind == 1 else size
        bound += _ZSTD_BLOCK_MAX_BYTES if kind == 2 else size
        if bound > MAX_INFLATED_BYTES:
            raise _over_limit("zstd")
        if head & 1:
            break
    pos += 4 if has_checksum else 0
    if pos > n:
        raise Problem("zstd frame is truncated")
    return pos, bound


def _inflate_zstd(frame) -> bytes:
    import zstandard
    extent, bound = _zstd_frame_extent(frame)
    if extent != len(frame):
        raise Problem(f"{len(frame) - extent} bytes after the zstd frame")
    try:
        declared = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as exc:  # a frame header our walk accepted but zstd does not (reserved bits)
        raise Problem(f"zstd frame header is not valid: {exc}") from None
    if declared > bound:
        raise Problem(f"zstd frame declares {declared} bytes but its blocks hold at most {bound}")
    if bound == 0:
        return b""
    try:
        return _zstd_decompressor().decompress(frame, max_output_size=bound)
    except zstandard.ZstdError as exc:
        raise Problem(f"zstd records do not decompress: {exc}") from None


def _deflate_zstd(data) -> bytes:
    # With its content size, so readers allocate once.
    return _zstd_compressor().compress(data)


# ---------------------------------------------------------------------------------------------

_INFLATE = {CODEC_GZIP: _inflate_gzip, CODEC_SNAPPY: _inflate_snappy, CODEC_LZ4: _inflate_lz4,
            CODEC_ZSTD: _inflate_zstd}
_DEFLATE = {CODEC_GZIP: _deflate_gzip, CODEC_SNAPPY: _deflate_snappy, CODEC_LZ4: _deflate_lz4,
            CODEC_ZSTD: _deflate_zstd}


def inflate(codec: int, section) -> bytes:
    """The records section ``section`` of a batch compressed with ``codec`` (one of
    COMPRESSION_CODECS), inflated within MAX_INFLATED_BYTES; Problem when it does not inflate."""
    return _INFLATE[codec](section)


def deflate(codec: int, records) -> bytes:
    """The records section ``records`` compressed with ``codec`` (one of COMPRESSION_CODECS)."""
    return _DEFLATE[codec](records)
