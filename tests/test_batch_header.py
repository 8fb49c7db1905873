"""Proves the record batch header facts have one definition: csrc/batch_header.h (what every native
module reads headers with) names the same offsets, sizes and problem codes as
engine/records/layout.py, and every reader, native and twin, applies the one header check the same
way (the batch codec, the log's index walks and the metadata walk refuse the same headers)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from kraftlog.engine.log import index, index_pure
from kraftlog.engine.records import (
    batch,
    batch_pure,
    batch_types,
    layout,
    metadata_columns,
    metadata_columns_pure,
)
from kraftlog.errors import CorruptRecordError

pytestmark = pytest.mark.twin

HEADER_H = Path(__file__).resolve().parents[1] / "csrc" / "batch_header.h"

# batch_header.h's name -> layout.py's name for the same fact.
SAME_FACT = {
    "KL_BASE_OFFSET_AT": "BASE_OFFSET_OFFSET", "KL_LENGTH_AT": "LENGTH_OFFSET",
    "KL_LEADER_EPOCH_AT": "LEADER_EPOCH_OFFSET", "KL_MAGIC_AT": "MAGIC_OFFSET", "KL_CRC_AT": "CRC_OFFSET",
    "KL_ATTRIBUTES_AT": "ATTRIBUTES_OFFSET", "KL_LAST_OFFSET_DELTA_AT": "LAST_OFFSET_DELTA_OFFSET",
    "KL_BASE_TIMESTAMP_AT": "BASE_TIMESTAMP_OFFSET", "KL_MAX_TIMESTAMP_AT": "MAX_TIMESTAMP_OFFSET",
    "KL_PRODUCER_ID_AT": "PRODUCER_ID_OFFSET", "KL_PRODUCER_EPOCH_AT": "PRODUCER_EPOCH_OFFSET",
    "KL_BASE_SEQUENCE_AT": "BASE_SEQUENCE_OFFSET", "KL_RECORD_COUNT_AT": "RECORD_COUNT_OFFSET",
    "KL_HEADER_SIZE": "HEADER_SIZE", "KL_LOG_OVERHEAD": "LOG_OVERHEAD", "KL_MIN_BATCH_LENGTH": "MIN_BATCH_LENGTH",
    "KL_MAGIC": "MAGIC", "KL_CODEC_MASK": "CODEC_MASK", "KL_CONTROL_BIT": "CONTROL_BIT",
    "KL_BATCH_OK": "HEADER_OK", "KL_BATCH_TRUNCATED_HEADER": "HEADER_TRUNCATED", "KL_BATCH_BAD_MAGIC": "HEADER_BAD_MAGIC",
    "KL_BATCH_SHORT_LENGTH": "HEADER_SHORT_LENGTH", "KL_BATCH_NEGATIVE": "HEADER_NEGATIVE",
    "KL_BATCH_OFFSET_OVERFLOW": "HEADER_OFFSET_OVERFLOW", "KL_BATCH_TRUNCATED": "BATCH_TRUNCATED",
}


def _header_h_enums() -> dict[str, int]:
    """Every `KL_NAME = value` of batch_header.h's enums; a value may name earlier ones."""
    values: dict[str, int] = {}
    for name, expr in re.findall(r"^\s*(KL_\w+)\s*=\s*([^,/]+),", HEADER_H.read_text(), re.M):
        values[name] = eval(expr, {}, dict(values))  # an int literal or KL_A - KL_B
    return values


def test_every_native_header_fact_is_layout_py_s():
    enums = _header_h_enums()
    assert set(enums) == set(SAME_FACT), "a KL_* name without its layout.py twin (or the other way)"
    for c_name, py_name in SAME_FACT.items():
        assert enums[c_name] == getattr(layout, py_name), c_name


def test_layout_offsets_are_where_the_header_struct_puts_the_fields():
    """The named offsets agree with the field order and sizes of layout.HEADER (">qiibIhiqqqhii")."""
    sizes = [struct.calcsize(">" + code) for code in layout.HEADER.format.lstrip(">")]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    named = [layout.BASE_OFFSET_OFFSET, layout.LENGTH_OFFSET, layout.LEADER_EPOCH_OFFSET, layout.MAGIC_OFFSET,
             layout.CRC_OFFSET, layout.ATTRIBUTES_OFFSET, layout.LAST_OFFSET_DELTA_OFFSET,
             layout.BASE_TIMESTAMP_OFFSET, layout.MAX_TIMESTAMP_OFFSET, layout.PRODUCER_ID_OFFSET,
             layout.PRODUCER_EPOCH_OFFSET, layout.BASE_SEQUENCE_OFFSET, layout.RECORD_COUNT_OFFSET]
    assert named == starts and sum(sizes) == layout.HEADER_SIZE


def test_the_header_problem_codes_are_the_codec_s_problem_codes():
    assert [batch_types.P_TRUNCATED_HEADER, batch_types.P_MAGIC, batch_types.P_BATCH_LENGTH, batch_types.P_NEGATIVE,
            batch_types.P_OFFSET_OVERFLOW, batch_types.P_TRUNCATED_BATCH] == [
        layout.HEADER_TRUNCATED, layout.HEADER_BAD_MAGIC, layout.HEADER_SHORT_LENGTH, layout.HEADER_NEGATIVE,
        layout.HEADER_OFFSET_OVERFLOW, layout.BATCH_TRUNCATED]


# ---- one check, every reader ------------------------------------------------------------------

def _good() -> bytearray:
    return bytearray(batch.build_batch([(None, b"a"), (None, b"b")], base_offset=5, partition_leader_epoch=3))


def _set(buf: bytearray, offset: int, fmt: str, value: int) -> bytearray:
    struct.pack_into(fmt, buf, offset, value)
    return buf


# name -> (bytes, the problem layout.check_header_bytes reports)
CASES = {
    "valid": (_good(), layout.HEADER_OK),
    "truncated header": (_good()[:layout.HEADER_SIZE - 1], layout.HEADER_TRUNCATED),
    "bad magic": (_set(_good(), layout.MAGIC_OFFSET, ">b", 1), layout.HEADER_BAD_MAGIC),
    "short length": (_set(_good(), layout.LENGTH_OFFSET, ">i", layout.MIN_BATCH_LENGTH - 1), layout.HEADER_SHORT_LENGTH),
    "negative record count": (_set(_good(), layout.RECORD_COUNT_OFFSET, ">i", -1), layout.HEADER_NEGATIVE),
    "negative last offset delta": (_set(_good(), layout.LAST_OFFSET_DELTA_OFFSET, ">i", -1), layout.HEADER_NEGATIVE),
    "offsets overflow": (_set(_good(), layout.BASE_OFFSET_OFFSET, ">q", (1 << 63) - 1), layout.HEADER_OFFSET_OVERFLOW),
    "truncated batch": (_good()[:-1], layout.BATCH_TRUNCATED),
}


@pytest.mark.parametrize("name", CASES)
def test_the_python_check_finds_each_problem(name):
    buf, expected = CASES[name]
    assert layout.check_header_bytes(buf, 0, len(buf))[0] == expected


def _codec_verdict(impl, buf) -> str:
    scan = impl.scan_batches(bytes(buf), verify_crc=False)
    return "ok" if scan.error_reason is None else scan.error_reason


def _index_verdict(impl, buf) -> tuple:
    try:
        found = impl.find_batch(bytes(buf), 0, len(buf), 0)
    except CorruptRecordError as exc:
        found = exc.reason
    return impl.walk_batches(bytes(buf), 0, len(buf)), found


def _metadata_verdict(impl, buf) -> str:
    try:
        impl.walk_batches(bytes(buf), 0, len(buf), False)
    except CorruptRecordError as exc:
        return exc.reason
    return "ok"


@pytest.mark.parametrize("name", CASES)
def test_every_reader_and_its_twin_refuse_the_same_headers(name):
    buf, expected = CASES[name]
    ok = expected == layout.HEADER_OK
    assert _codec_verdict(batch, buf) == _codec_verdict(batch_pure, buf)
    assert (_codec_verdict(batch, buf) == "ok") == ok
    assert _index_verdict(index, buf) == _index_verdict(index_pure, buf)
    assert (_index_verdict(index, buf)[0][0] == len(buf)) == ok  # the walk passes a batch only when it is sane
    assert _metadata_verdict(metadata_columns, buf) == _metadata_verdict(metadata_columns_pure, buf)
    assert (_metadata_verdict(metadata_columns, buf) == "ok") == ok


def test_a_batch_being_stamped_is_not_refused_for_its_producer_s_base_offset():
    """A leader replaces a producer's baseOffset, so stamping skips only the overflow check (it
    checks the offsets it assigns instead); native and twin agree."""
    buf = bytes(CASES["offsets overflow"][0])
    for impl in (index, index_pure):
        out = bytearray(48 * 4)
        dst = bytearray(len(buf))
        assert impl.stamp_batches(buf, dst, True, 0, 1, memoryview(out).cast("q"))[0] == 1
        assert struct.unpack_from(">q", dst, layout.BASE_OFFSET_OFFSET)[0] == 0
