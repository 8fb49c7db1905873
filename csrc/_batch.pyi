from collections.abc import Buffer, Iterator, Sequence

import numpy as np

from kraftlog.engine.records.batch_types import BatchColumns, Record, ScanResult
from kraftlog.engine.records.layout import BatchHeader

IMPLEMENTATION: str

def build_batch(
    records: Sequence[Record | tuple],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = 0,
    codec: int = 0,
    is_control: bool = False,
    is_transactional: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    base_timestamp_ms: int | None = None,
) -> bytes: ...
def build_batch_from_values(
    values: Sequence[Buffer | None],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = 0,
    codec: int = 0,
    is_control: bool = False,
    is_transactional: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    base_timestamp_ms: int | None = None,
    timestamp_ms: int | None = None,
) -> bytes: ...
def build_control_batch(
    control_type: int,
    value: bytes,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = 0,
    timestamp_ms: int | None = None,
) -> bytes: ...
def validate_batch(buf: Buffer, pos: int = 0, *, path: str | None = None) -> BatchHeader: ...
def iter_records(buf: Buffer, pos: int = 0) -> Iterator[Record]: ...
def pass_through_count(buf: Buffer) -> int: ...
def decode_columns(buf: Buffer, pos: int = 0) -> BatchColumns: ...
def decode_columns_many(buf: Buffer, start: int = 0, end: int | None = None) -> BatchColumns: ...
def scan_batches(buf: Buffer, start: int = 0, end: int | None = None, *, verify_crc: bool = True) -> ScanResult: ...
def split_headers(buf: Buffer) -> np.ndarray | None: ...
