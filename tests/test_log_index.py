"""Proves the log's native index/walk functions (kraftlog._index) agree with their pure twin and
with simple reference implementations (bisect, a Python header walk) on generated inputs, and
that the OffsetIndex / TimeIndex files follow Kafka's layout (big-endian i32/i32 and i64/i32)."""

from __future__ import annotations

import array
import bisect
import os
import struct

import crc32c as reference_crc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog import _accel
from kraftlog.engine.log import index
from kraftlog.engine.log import index_pure as pure
from kraftlog.engine.log.fs import RealFileSystem
from kraftlog.errors import CorruptRecordError

pytestmark = pytest.mark.twin

HEADER = struct.Struct(">qiibIhiqqqhii")


def raw_batch(base_offset: int, count: int, body: bytes, max_ts: int = 1000, epoch: int = 3) -> bytes:
    """A record batch v2 whose records section is ``body`` (opaque here), with a correct CRC."""
    length = HEADER.size - 12 + len(body)
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, max_ts - 5, max_ts, -1, -1, -1, count) + body
    crc = reference_crc.crc32c(after_crc)
    return struct.pack(">qiibI", base_offset, length, epoch, 2, crc) + after_crc


def batches_strategy():
    """A list of (count, body size, max timestamp) describing consecutive batches."""
    return st.lists(st.tuples(st.integers(1, 40), st.integers(0, 300), st.integers(-1, 10**12)), max_size=30)


def build_log(desc, base=100):
    out, offset, meta = bytearray(), base, []
    for count, body, ts in desc:
        b = raw_batch(offset, count, bytes(body), ts)
        meta.append((len(out), len(b), offset + count - 1, ts))
        out += b
        offset += count
    return bytes(out), meta


def test_the_expected_implementation_is_loaded():
    assert ("pure" if _accel.FORCE_PURE else "native") == index.IMPLEMENTATION


@given(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=200, unique=True), st.integers(-(2**31) - 5, 2**31 + 5))
def test_offset_index_search_matches_bisect(keys, target):
    """The native/pure binary search returns the last slot with key <= target, like bisect."""
    keys.sort()
    buf = b"".join(struct.pack(">ii", k, i * 10) for i, k in enumerate(keys))
    expected = bisect.bisect_right(keys, target) - 1
    assert index.offset_index_search(buf, len(keys), target) == expected
    assert pure.offset_index_search(buf, len(keys), target) == expected


@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=200, unique=True), st.integers(-(2**63), 2**63 - 1))
def test_time_index_search_matches_bisect(keys, target):
    keys.sort()
    buf = bytearray(b"".join(struct.pack(">qi", k, i) for i, k in enumerate(keys)) + b"\xff" * 24)
    expected = bisect.bisect_right(keys, target) - 1
    assert index.time_index_search(buf, len(keys), target) == expected
    assert pure.time_index_search(buf, len(keys), target) == expected


def test_search_refuses_more_entries_than_the_buffer_holds():
    with pytest.raises(ValueError):
        index.offset_index_search(bytes(16), 3, 0)


@given(batches_strategy(), st.integers(90, 700))
def test_find_batch_matches_a_python_walk(desc, target):
    """find_batch returns the first batch whose last offset >= target (or the end)."""
    buf, meta = build_log(desc)
    expected = next((pos for pos, _, last, _ in meta if last >= target), len(buf))
    assert index.find_batch(buf, 0, len(buf), target) == expected
    assert pure.find_batch(buf, 0, len(buf), target) == expected


@given(batches_strategy(), st.integers(0, 3000), st.integers(90, 700), st.booleans())
def test_read_span_matches_a_python_walk(desc, max_bytes, limit, min_one):
    buf, meta = build_log(desc)
    end = 0
    for i, (pos, size, last, _) in enumerate(meta):
        if last >= limit or (pos + size > max_bytes and not (min_one and i == 0)):
            break
        end = pos + size
    assert index.read_span(buf, 0, len(buf), max_bytes, limit, min_one) == end
    assert pure.read_span(buf, 0, len(buf), max_bytes, limit, min_one) == end


@given(batches_strategy(), st.integers(0, 200))
def test_walk_batches_stops_at_a_torn_tail(desc, cut):
    """Walking headers over a log cut short reaches exactly the last whole batch."""
    buf, meta = build_log(desc)
    torn = buf[: max(0, len(buf) - cut)]
    whole = [m for m in meta if m[0] + m[1] <= len(torn)]
    expected = (whole[-1][0] + whole[-1][1], whole[-1][2]) if whole else (0, -1)
    assert index.walk_batches(torn, 0, len(torn)) == expected
    assert pure.walk_batches(torn, 0, len(torn)) == expected


@given(batches_strategy(), st.booleans())
def test_check_batches_describes_every_batch(desc, verify):
    buf, meta = build_log(desc)
    native_out, pure_out = array.array("q", bytes(8 * 6 * 40)), array.array("q", bytes(8 * 6 * 40))
    n = index.check_batches(buf, verify, native_out)
    assert n == pure.check_batches(buf, verify, pure_out) == len(meta)
    assert native_out == pure_out
    for i, (pos, size, last, ts) in enumerate(meta):
        row = native_out[i * 6:(i + 1) * 6]
        assert (row[0], row[1], row[2] + row[3], row[4], row[5]) == (pos, size, last, ts, 3)


@pytest.mark.parametrize("impl", [index, pure], ids=["selected", "pure"])
def test_check_batches_rejects_a_flipped_bit_and_trailing_bytes(impl):
    buf = bytearray(raw_batch(0, 3, b"x" * 50) + raw_batch(3, 1, b"y" * 10))
    out = array.array("q", bytes(8 * 6 * 4))
    buf[-3] ^= 0x10
    with pytest.raises(CorruptRecordError, match="CRC") as err:
        impl.check_batches(buf, True, out)
    assert err.value.position == len(buf) - (61 + 10)
    assert impl.check_batches(buf, False, out) == 2  # without CRC only the structure is checked
    with pytest.raises(CorruptRecordError):
        impl.check_batches(bytes(buf) + b"\x00" * 5, False, out)


@settings(max_examples=60)
@given(batches_strategy(), st.integers(0, 500), st.integers(1, 10), st.integers(1, 10))
def test_build_indexes_twins_agree_and_follow_the_sparse_rule(desc, interval, off_cap, time_cap):
    """Native and pure write the same bytes; entries follow Kafka's 'more than interval bytes since
    the last entry' rule, computed here independently."""
    buf, meta = build_log(desc, base=1000)
    cols = [np.array([m[k] for m in meta], dtype=np.int64) for k in range(4)]
    positions, sizes, lasts, stamps = cols
    results = []
    for impl in (index, pure):
        ob, tb = bytearray(off_cap * 8), bytearray(time_cap * 12)
        results.append((impl.build_indexes(positions, sizes, lasts, stamps, 1000, interval, ob, tb), bytes(ob), bytes(tb)))
    assert results[0] == results[1]
    (n_off, n_time, since, max_ts, _), ob, _ = results[0]
    expected, gap = [], 0
    for pos, size, last, _ in meta:
        if gap > interval:
            expected.append((last - 1000, pos))
            gap = 0
        gap += size
    expected = expected[:off_cap]
    assert n_off == len(expected)
    assert [struct.unpack_from(">ii", ob, 8 * i) for i in range(n_off)] == expected
    assert max_ts == max([m[3] for m in meta], default=-1)
    assert since == gap


def test_offset_index_file_round_trip(tmp_path):
    """Entries are big-endian (relative offset i32, position i32); a sealed file holds exactly them."""
    fs = RealFileSystem()
    path = str(tmp_path / "00000000000000000100.index")
    idx = index.OffsetIndex(fs, path, 100, 8 * 1000)
    idx.make_writable()
    assert (tmp_path / "00000000000000000100.index").stat().st_size == 8000  # pre-allocated
    for i in range(10):
        assert idx.append(100 + 5 * i + 4, 4096 * i)
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(100 + 23) == (100 + 19, 4096 * 3)
    idx.truncate_to(100 + 19)
    assert idx.entries == 3
    idx.seal()
    raw = (tmp_path / "00000000000000000100.index").read_bytes()
    assert raw == b"".join(struct.pack(">ii", 5 * i + 4, 4096 * i) for i in range(3))
    idx.close()
    again = index.OffsetIndex(fs, path, 100, 8 * 1000)
    again.load_trimmed()
    assert again.entries == 3 and again.last_entry() == (114, 8192)
    again.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads the mapping's flags from Linux's /proc")
def test_a_writable_index_is_mapped_without_read_ahead(tmp_path):
    """The active segment's index files are sparse past their entries: their maps are advised
    random access (VmFlags "rr"), so the first entry written does not read megabytes of zeros
    ahead into the page cache (2-2.5 ms per index with an 8 MiB read_ahead_kb)."""
    fs = RealFileSystem()
    path = str(tmp_path / "00000000000000000000.index")
    idx = index.OffsetIndex(fs, path, 0, 10 << 20)
    idx.make_writable()
    try:
        assert idx.append(0, 0)
        with open("/proc/self/smaps") as smaps:
            blocks = smaps.read().split("\n")
        at = next(i for i, line in enumerate(blocks) if line.endswith(path))
        flags = next(line for line in blocks[at:] if line.startswith("VmFlags:")).split()[1:]
        assert "rr" in flags
    finally:
        idx.close()


def test_time_index_only_grows(tmp_path):
    fs = RealFileSystem()
    idx = index.TimeIndex(fs, str(tmp_path / "x.timeindex"), 50, 12 * 10)
    idx.make_writable()
    assert idx.maybe_append(1000, 55)
    assert not idx.maybe_append(1000, 60)  # same timestamp: no entry
    assert not idx.maybe_append(-1, 61)
    assert idx.maybe_append(2000, 70)
    assert idx.lookup(1500) == (1000, 55)
    assert idx.lookup(999) == (-1, 50)
    idx.seal()
    assert (tmp_path / "x.timeindex").read_bytes() == struct.pack(">qi", 1000, 5) + struct.pack(">qi", 2000, 20)
    idx.close()


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(1, 50), st.integers(0, 5000), st.integers(-1, 40)), max_size=40),
       max_entries=st.integers(1, 30), split=st.integers(0, 40))
def test_index_runs_write_what_entry_by_entry_appends_write(tmp_path_factory, steps, max_entries, split):
    """OffsetIndex.append_run and TimeIndex.maybe_append_run (a far follower's append indexes a
    few hundred entries at once) leave the same entries and bytes as append / maybe_append one
    by one, stopping at a full index the same way; an offset that does not grow is refused."""
    directory = tmp_path_factory.mktemp("runs")
    fs = RealFileSystem()
    one = [index.OffsetIndex(fs, str(directory / "a.index"), 100, max_entries * 8),
           index.TimeIndex(fs, str(directory / "a.timeindex"), 100, max_entries * 12)]
    run = [index.OffsetIndex(fs, str(directory / "b.index"), 100, max_entries * 8),
           index.TimeIndex(fs, str(directory / "b.timeindex"), 100, max_entries * 12)]
    offset, position, entries = 100, 0, []
    for gap, size, ts in steps:
        offset, position = offset + gap, position + size + 1
        entries.append((offset, position, ts, offset))
    for last, pos, ts, ts_offset in entries:
        one[0].append(last, pos)
        one[1].maybe_append(ts, ts_offset)
    for part in (entries[:split], entries[split:]):  # two runs: the second continues the first
        run[0].append_run([(e[0], e[1]) for e in part])
        run[1].maybe_append_run([(e[2], e[3]) for e in part])
    for a, b in zip(one, run, strict=True):
        assert (a.entries, a.raw_entries()) == (b.entries, b.raw_entries())
    if entries and run[0].entries < max_entries:
        with pytest.raises(ValueError, match="does not follow"):
            run[0].append_run([(entries[-1][0], 10**6)])
    for i in (*one, *run):
        i.close()


@st.composite
def described_runs(draw):
    """check_batches rows (position, size, base offset, last offset delta, max timestamp, epoch) of
    consecutive batches of a segment at base 100, and where an append boundary falls."""
    rows, position, offset, ts = [], 0, 100, -1
    for _ in range(draw(st.integers(0, 120))):
        size, delta = draw(st.integers(61, 900)), draw(st.integers(0, 3))
        ts = draw(st.one_of(st.just(-1), st.integers(ts - 5, ts + 50)))
        rows.append((position, size, offset, delta, ts, 1))
        position, offset = position + size, offset + delta + 1
    return rows, draw(st.integers(0, len(rows)))


@settings(max_examples=80, deadline=None)
@given(described_runs(), st.integers(0, 3000), st.integers(1, 40))
def test_a_long_run_is_indexed_natively_as_short_runs_are_in_python(tmp_path_factory, run, interval, max_entries):
    """Segment.commit_batches indexes a long run (more than SMALL_RUN_BATCHES: a far follower's
    append) with index_run in one native pass, a short one with index_entries + append_run: the
    same entries, bytes and state (bytes since the last entry, max timestamp and its offset),
    appends continuing each other and stopping at a full index alike; index_run's twins agree."""
    import array as array_module

    from kraftlog.engine.log.segment import Segment
    from kraftlog.engine.records.layout import SMALL_RUN_BATCHES

    rows, cut = run
    directory = tmp_path_factory.mktemp("commit")
    fs = RealFileSystem()
    segments = []
    for name, step in (("short", SMALL_RUN_BATCHES), ("long", None)):
        os.makedirs(directory / name)
        seg = Segment(fs, str(directory / name), 100, index_interval_bytes=interval,
                      max_index_bytes=max_entries * 12, create=True)
        for part in (rows[:cut], rows[cut:]):  # two appends, the second continuing the first
            for at in range(0, len(part), step or max(1, len(part))):
                chunk = part[at:at + step] if step else part  # a short whole part: Python in both
                fields = array_module.array("q", [v for row in chunk for v in row])
                seg.commit_batches(fields, len(chunk))
        segments.append(seg)
    short, long = segments
    assert (short.bytes_since_last_index_entry, short.max_timestamp, short.offset_of_max_timestamp) == \
        (long.bytes_since_last_index_entry, long.max_timestamp, long.offset_of_max_timestamp)
    for a, b in ((short.offset_index, long.offset_index), (short.time_index, long.time_index)):
        assert (a.entries, a.raw_entries()) == (b.entries, b.raw_entries())
    fields = array_module.array("q", [v for row in rows for v in row])
    outputs = []
    for impl in (index, pure):
        ob, tb = bytearray(8 * max_entries), bytearray(12 * max_entries)
        outputs.append((impl.index_run(fields, len(rows), 100, interval, 7, 3, 101, 2, ob, tb), bytes(ob), bytes(tb)))
    assert outputs[0] == outputs[1]
    for seg in segments:
        seg.close()
