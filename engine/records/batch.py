"""Record batch v2 (magic 2): build, validate, decode and scan. The native module kraftlog._batch
when built, else its pure twin kraftlog.engine.records.batch_pure (same functions, same errors);
the types and helpers both share are in batch_types.py, so the native path never loads the twin.

Everything outside this module imports these names from here, never kraftlog._batch directly.
Header layout: engine/records/layout.py; records layout: batch_pure's docstring.

    build_batch / build_batch_from_values / build_control_batch   -> bytes of one batch
    validate_batch(buf, pos)          header checks + CRC -> BatchHeader
    iter_records(buf, pos)            Record objects (slow path)
    pass_through_count(buf)           records of one batch a leader appends as the client wrote it, else 0
    decode_columns(buf, pos)          one batch -> BatchColumns (numpy arrays, no per-record objects)
    decode_columns_many(buf, s, e)    every batch of a region -> one BatchColumns
    scan_batches(buf, s, e)           where the valid batches of a region end (log recovery)

Corrupt bytes raise kraftlog.errors.CorruptRecordError, a batch of codec 5-7 UnsupportedCodecError
(both are UndecodableRecordError); bad arguments raise ValueError/TypeError/OverflowError. Codecs:
engine/records/compression.py.
"""

from kraftlog._accel import select
from kraftlog.engine.records.batch_types import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_KRAFT_VERSION,
    CONTROL_KRAFT_VOTERS,
    CONTROL_LEADER_CHANGE,
    CONTROL_SNAPSHOT_FOOTER,
    CONTROL_SNAPSHOT_HEADER,
    MIN_RECORD_SIZE_BYTES,
    BatchColumns,
    Record,
    ScanResult,
    control_record_key,
    parse_control_record_key,
)
from kraftlog.engine.records.compression import CODEC_NAMES, COMPRESSION_CODECS, MAX_INFLATED_BYTES
from kraftlog.engine.records.layout import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    CONTROL_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
)

_impl = select("kraftlog._batch", "kraftlog.engine.records.batch_pure")

IMPLEMENTATION: str = _impl.IMPLEMENTATION
build_batch = _impl.build_batch
build_batch_from_values = _impl.build_batch_from_values
build_control_batch = _impl.build_control_batch
validate_batch = _impl.validate_batch
iter_records = _impl.iter_records
pass_through_count = _impl.pass_through_count
decode_columns = _impl.decode_columns
decode_columns_many = _impl.decode_columns_many
scan_batches = _impl.scan_batches
split_headers = _impl.split_headers

__all__ = [
    "CODEC_GZIP", "CODEC_LZ4", "CODEC_NAMES", "CODEC_NONE", "CODEC_SNAPPY", "CODEC_ZSTD", "COMPRESSION_CODECS",
    "CONTROL_ABORT", "CONTROL_BIT", "CONTROL_COMMIT", "CONTROL_KRAFT_VERSION",
    "CONTROL_KRAFT_VOTERS", "CONTROL_LEADER_CHANGE", "CONTROL_SNAPSHOT_FOOTER", "CONTROL_SNAPSHOT_HEADER",
    "IMPLEMENTATION", "MIN_RECORD_SIZE_BYTES", "MAX_INFLATED_BYTES", "TRANSACTIONAL_BIT",
    "BatchColumns", "BatchHeader", "Record", "ScanResult", "build_batch", "build_batch_from_values",
    "build_control_batch", "control_record_key", "decode_columns", "decode_columns_many", "iter_records",
    "parse_control_record_key", "pass_through_count", "scan_batches", "split_headers", "validate_batch",
]
