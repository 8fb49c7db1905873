"""Proves the log's fast paths keep every guarantee of the plain ones: the leader append's native
pass (stamp_batches: copy + CRC + stamp; stamp_headers + write_stamped: CRC in place + pwritev of
the caller's bytes) agrees with its pure twin and with a reference, never touches the caller's
buffer, and rejects exactly what check_batches rejects; all three write paths leave identical
files; deferred indexing still rolls on a full index; the recovery scan through a reused pread
buffer finds exactly what one scan_batches over the whole file finds (same batches, same first
corruption at the same position); recovery of an unchanged log writes and fsyncs no index; and
after a process crash the log claims durable only what is."""

from __future__ import annotations

import array
import errno
import os
import random
import struct
import tempfile

import crc32c as reference_crc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.engine.log import index
from kraftlog.engine.log import index_pure as pure
from kraftlog.engine.log.errors import InvalidAppendError, LogStorageError
from kraftlog.engine.log.fs import FaultFileSystem, RealFileHandle, RealFileSystem
from kraftlog.engine.log.log import CLEAN_SHUTDOWN_NAME, Log, LogConfig
from kraftlog.engine.log.recovery import scan_segment
from kraftlog.engine.log.segment import Segment
from kraftlog.engine.records import batch as batch_codec
from kraftlog.errors import CorruptRecordError

pytestmark = pytest.mark.twin

HEADER = struct.Struct(">qiibIhiqqqhii")
FIELDS = 6
IMPLS = pytest.mark.parametrize("impl", [index, pure], ids=["selected", "pure"])


def raw_batch(base_offset: int, count: int, body: bytes, max_ts: int = 1000, epoch: int = 3) -> bytes:
    """A record batch v2 whose records section is ``body`` (opaque here), with a correct CRC."""
    length = HEADER.size - 12 + len(body)
    after_crc = struct.pack(">hiqqqhii", 0, count - 1, max_ts - 5, max_ts, -1, -1, -1, count) + body
    return struct.pack(">qiibI", base_offset, length, epoch, 2, reference_crc.crc32c(after_crc)) + after_crc


def build(desc) -> tuple[bytes, list[tuple[int, int, int, int]]]:
    """Concatenated batches for (count, body bytes, max timestamp) tuples; (position, size, last
    offset delta, max timestamp) of each. Base offsets are arbitrary: a leader overwrites them."""
    out, meta = bytearray(), []
    for i, (count, body, ts) in enumerate(desc):
        b = raw_batch(1000 * i + 7, count, bytes([i % 251]) * body, ts)
        meta.append((len(out), len(b), count - 1, ts))
        out += b
    return bytes(out), meta


def stamped_reference(buf: bytes, meta, next_offset: int, epoch: int) -> bytes:
    """What a leader writes: each batch with baseOffset = the running next offset and
    partitionLeaderEpoch = epoch; everything else (CRC included) as it was."""
    out = bytearray(buf)
    for pos, _, delta, _ in meta:
        struct.pack_into(">q", out, pos, next_offset)
        struct.pack_into(">i", out, pos + 12, epoch)
        next_offset += delta + 1
    return bytes(out)


DESC = st.lists(st.tuples(st.integers(1, 30), st.integers(0, 400), st.integers(-1, 10**12)), min_size=1,
                max_size=12)


@settings(max_examples=80, deadline=None)
@given(DESC, st.integers(0, 10**9), st.integers(0, 2**31 - 1), st.integers(0, 5), st.integers(0, 10**6))
def test_stamp_batches_twins_agree_with_the_reference(desc, next_offset, epoch, slot, position):
    """Native and pure stamp the same bytes, describe the same fields at the same slots, return the
    same (count, last offset, max timestamp), and leave the caller's bytes alone."""
    buf, meta = build(desc)
    original = bytes(buf)
    results = []
    for impl in (index, pure):
        dst, out = bytearray(len(buf) + 9), array.array("q", bytes(8 * FIELDS * 20))
        got = impl.stamp_batches(buf, dst, True, next_offset, epoch, out, slot, position)
        results.append((got, bytes(dst[:len(buf)]), out.tolist()))
    assert results[0] == results[1]
    (n, last, max_ts), written, fields = results[0]
    deltas = [m[2] for m in meta]
    assert (n, last, max_ts) == (len(meta), next_offset + sum(deltas) + len(meta) - 1, max(m[3] for m in meta))
    assert written == stamped_reference(buf, meta, next_offset, epoch) and buf == original
    base = next_offset
    for i, (pos, size, delta, ts) in enumerate(meta):
        assert fields[(slot + i) * FIELDS:(slot + i + 1) * FIELDS] == [position + pos, size, base, delta, ts, epoch]
        base += delta + 1


@settings(max_examples=60, deadline=None)
@given(DESC, st.integers(0, 10**9), st.integers(0, 2**31 - 1), st.integers(0, 3), st.integers(0, 5000))
def test_stamp_headers_and_write_stamped_write_what_stamp_batches_copies(desc, next_offset, epoch, slot, position):
    """The no-copy path (CRC in place, stamped 16 bytes + the caller's rest in one pwritev) puts
    exactly the bytes of the copy path in the file, at the given position; both implementations."""
    buf, meta = build(desc)
    expected = stamped_reference(buf, meta, next_offset, epoch)
    with tempfile.TemporaryDirectory() as d:
        for impl in (index, pure):
            path = os.path.join(d, impl.IMPLEMENTATION + "-" + str(id(impl)))
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                headers, out = bytearray(16 * 20), array.array("q", bytes(8 * FIELDS * 20))
                got = impl.stamp_headers(buf, headers, True, next_offset, epoch, out, slot, position)
                assert got[0] == len(meta)
                impl.write_stamped(buf, headers, out, slot, got[0], fd, position)
            finally:
                os.close(fd)
            with open(path, "rb") as f:
                data = f.read()
            assert data[:position] == bytes(position) and data[position:] == expected


@IMPLS
def test_stamping_rejects_what_check_batches_rejects(impl):
    """A flipped bit, a cut batch, too many batches: the same error at the same position as
    check_batches, from both stamping functions; without CRC checking only the structure counts."""
    buf = bytearray(raw_batch(0, 3, b"x" * 50) + raw_batch(3, 1, b"y" * 10))
    buf[-3] ^= 0x10
    out, headers, dst = array.array("q", bytes(8 * FIELDS * 4)), bytearray(16 * 4), bytearray(len(buf))
    with pytest.raises(CorruptRecordError, match="CRC") as expected:
        impl.check_batches(buf, True, out)
    for call in (lambda b, v: impl.stamp_batches(b, dst, v, 0, 1, out),
                 lambda b, v: impl.stamp_headers(bytes(b), headers, v, 0, 1, out)):
        with pytest.raises(CorruptRecordError, match="CRC") as err:
            call(buf, True)
        assert err.value.position == expected.value.position == len(buf) - (61 + 10)
        assert call(buf, False)[0] == 2
        with pytest.raises(CorruptRecordError, match="malformed or truncated") as err:
            call(buf[:-4], False)
        assert err.value.position == len(buf) - (61 + 10)
    small = array.array("q", bytes(8 * FIELDS))
    with pytest.raises(ValueError, match="more than 1 batches"):
        impl.stamp_batches(bytes(buf), dst, False, 0, 1, small)
    with pytest.raises(ValueError, match="overflow"):
        impl.stamp_headers(raw_batch(0, 5, b""), headers, True, 2**63 - 3, 1, out)


@IMPLS
def test_write_stamped_reports_the_os_error_and_checks_its_slots(impl, tmp_path):
    buf = raw_batch(0, 2, b"z" * 30)
    headers, out = bytearray(16 * 2), array.array("q", bytes(8 * FIELDS * 2))
    impl.stamp_headers(buf, headers, True, 5, 1, out)
    path = tmp_path / "f"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(OSError) as err:
            impl.write_stamped(buf, headers, out, 0, 1, fd, 0)
        assert err.value.errno == errno.EBADF
        with pytest.raises(ValueError):
            impl.write_stamped(buf, headers, out, 1, 2, fd, 0)
        with pytest.raises(ValueError, match="outside"):
            impl.write_stamped(buf, headers, out, 0, 1, fd, 3)  # described at 0, claimed at 3
    finally:
        os.close(fd)


def test_the_three_write_paths_leave_identical_logs(tmp_path):
    """bytes on a real file system (no copy), a bytearray (copy), and the fault-injecting file
    system (no descriptor: pwrite through the handle) write byte-identical segments and indexes."""
    cfg = LogConfig(segment_bytes=4096, index_interval_bytes=300, flush_interval_messages=None)
    batches = [raw_batch(0, 1 + i % 4, bytes([i]) * (40 + 37 * i), 1000 + i) for i in range(30)]
    results = []
    for name, fs, kind in (("direct", None, bytes), ("copy", None, bytearray), ("fault", FaultFileSystem(), bytes)):
        with Log(tmp_path / name, cfg, fs=fs) as log:
            for i, b in enumerate(batches):
                arg = kind(b)
                log.append_as_leader(arg, 1 + i // 10)
                assert bytes(arg) == b  # the caller's buffer is never written
        results.append({p.name: p.read_bytes() for p in sorted((tmp_path / name).iterdir())})
    assert results[0] == results[1] == results[2]
    assert sum(n.endswith(".log") for n in results[0]) > 3  # it rolled


def test_deferred_indexing_still_rolls_on_a_full_index(tmp_path):
    """Index work is deferred (pending batches); a full index must still roll the segment, no
    entry may be dropped, and reads must see every batch at once."""
    cfg = LogConfig(index_interval_bytes=0, max_index_bytes=24, max_batches_per_append=2)  # 3 / 2 entries
    with Log(tmp_path, cfg) as log:
        for i in range(20):
            log.append_as_leader(raw_batch(0, 2, bytes(20), 1000 + i), 1)  # growing times: time entries too
            if i % 3:
                assert log.read(2 * i).records.tobytes()[:8] == (2 * i).to_bytes(8, "big")
        bases = log.segment_base_offsets()
        assert bases == list(range(0, 40, 6))
    for base in bases[:-1]:
        # 2 time entries (the index is full) -> the segment holds 3 batches: entries for the 2nd and 3rd
        assert os.path.getsize(tmp_path / f"{base:020d}.timeindex") == 24
        assert os.path.getsize(tmp_path / f"{base:020d}.index") == 16
    with Log(tmp_path, cfg) as log:
        assert [int.from_bytes(b[:8], "big") for b in log.batches()] == list(range(0, 40, 2))


# ------------------------------------------------------------------------------- recovery scan

DAMAGE = st.one_of(st.just(("none",)), st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 7)),
                   st.tuples(st.just("cut"), st.integers(1, 3000)), st.tuples(st.just("garbage"), st.binary(min_size=1, max_size=200)),
                   st.tuples(st.just("huge_length"), st.integers(0, 10**6)))


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 3000), st.integers(0, 10**6)), max_size=25), DAMAGE,
       st.integers(61, 5000))
def test_pread_scan_finds_what_a_whole_file_scan_finds(desc, damage, chunk_bytes):
    """Through a small reused buffer (so batches are cut by chunk ends, and some are larger than
    the buffer), the recovery scan returns exactly scan_batches over the whole file: the same
    batches, valid end, first invalid position and reason, whatever the damage."""
    data = bytearray(build(desc)[0]) if desc else bytearray()
    kind = damage[0]
    if kind == "flip" and data:
        data[damage[1] % len(data)] ^= 1 << damage[2]
    elif kind == "cut" and data:
        del data[max(0, len(data) - damage[1]):]
    elif kind == "garbage":
        data += damage[1]
    elif kind == "huge_length" and data:
        starts = [p for p, *_ in build(desc)[1]]
        struct.pack_into(">i", data, starts[damage[1] % len(starts)] + 8, 2**31 - 1)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, f"{0:020d}.log"), "wb") as f:
            f.write(data)
        seg = Segment(RealFileSystem(), d, 0, index_interval_bytes=4096, max_index_bytes=1024)
        try:
            got = scan_segment(seg, len(data), bytearray(chunk_bytes))
        finally:
            seg.close()
    want = batch_codec.scan_batches(bytes(data), 0, len(data))
    assert got[8:] == want[8:]
    for mine, theirs in zip(got[:8], want[:8], strict=True):
        assert mine.tolist() == theirs.tolist()


class CountingFileSystem(RealFileSystem):
    """The real file system, counting what changes or fsyncs each file name (index files here)."""

    def __init__(self):
        self.ops: list[tuple[str, str]] = []

    def open(self, path: str, *, create: bool = False):
        handle = super().open(path, create=create)
        return _CountingHandle(path, handle._fd, self.ops) if path.endswith("index") else handle


class _CountingHandle(RealFileHandle):
    __slots__ = ("_ops",)

    def __init__(self, path: str, fd: int, ops: list):
        super().__init__(path, fd)
        self._ops = ops

    def truncate(self, size: int) -> None:
        self._ops.append(("truncate", os.path.basename(self.path)))
        super().truncate(size)

    def sync(self) -> None:
        self._ops.append(("sync", os.path.basename(self.path)))
        super().sync()

    def map(self, length: int, *, writable: bool = False, populate: bool = False):
        if writable:
            self._ops.append(("map-writable", os.path.basename(self.path)))
        return super().map(length, writable=writable, populate=populate)


def test_recovering_an_unchanged_log_writes_and_fsyncs_no_index(tmp_path):
    """The marker lost after a clean close: recovery CRC-checks everything, finds the indexes it
    would build already on disk, keeps them, and neither it nor the close touches them; the
    marker is back, and a later crash still rebuilds garbage indexes."""
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=200)
    with Log(tmp_path, cfg) as log:
        for i in range(40):
            log.append_as_leader(raw_batch(0, 2, bytes([i]) * 60, 1000 + i), 1)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.endswith("index")}
    assert len(before) >= 4  # two segments or more
    fs = CountingFileSystem()
    os.remove(tmp_path / CLEAN_SHUTDOWN_NAME)
    with Log(tmp_path, cfg, fs=fs) as log:
        assert log.recovered_unclean and log.end_offset == 80
        assert log.read(41).records.tobytes()[:8] == (40).to_bytes(8, "big")
    assert fs.ops == []
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.endswith("index")} == before
    assert (tmp_path / CLEAN_SHUTDOWN_NAME).exists()
    os.remove(tmp_path / CLEAN_SHUTDOWN_NAME)
    name = sorted(before)[0]
    (tmp_path / name).write_bytes(os.urandom(len(before[name])))
    with Log(tmp_path, cfg, fs=fs) as log:
        assert log.recovered_unclean
    assert ("sync", name) in fs.ops
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.endswith("index")} == before


@pytest.mark.parametrize("seed", range(12))
def test_after_a_process_crash_only_durable_offsets_count_as_flushed(seed, tmp_path):
    """A process crash keeps unsynced bytes in the page cache: recovery reads them, but must not
    claim them durable until it fsyncs them. Then a power loss (FaultFileSystem.crash) keeps at
    least what the recovered log called flushed, and after flush() it keeps everything."""
    rng = random.Random(seed)
    cfg = LogConfig(segment_bytes=700, index_interval_bytes=100, flush_interval_messages=None)
    fs = FaultFileSystem()
    first = Log(tmp_path, cfg, fs=fs)
    for i in range(rng.randint(2, 12)):
        first.append_as_leader(raw_batch(0, 3, bytes([i]) * rng.randint(10, 90)), 1)
        if rng.random() < 0.3:
            first.flush()
    end = first.end_offset
    for seg in first._segments:  # the process dies: no close, no marker, no fsync
        seg.close()
    second = Log(tmp_path, cfg, fs=fs)
    assert second.recovered_unclean and second.end_offset == end
    claimed = second.last_flushed_offset
    if rng.random() < 0.5:
        second.flush()
        claimed = second.last_flushed_offset
        assert claimed == end and fs.unsynced_bytes() == 0
    for seg in second._segments:
        seg.close()
    fs.crash(rng)
    with Log(tmp_path, cfg, fs=fs) as third:
        assert claimed <= third.end_offset <= end, f"seed={seed}"


@settings(max_examples=40, deadline=None)
@given(DESC, st.integers(0, 10**6), st.integers(0, 3), st.integers(-2, 2))
def test_stamp_write_is_stamp_headers_then_write_stamped(desc, next_offset, slot, headroom):
    """The merged hot-path call writes what the two calls write, or nothing (count -1) when the
    last offset would pass max_last_offset; both implementations."""
    buf, meta = build(desc)
    last = next_offset + sum(m[2] + 1 for m in meta) - 1
    with tempfile.TemporaryDirectory() as d:
        for impl in (index, pure):
            path = os.path.join(d, f"{id(impl)}")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                headers, out = bytearray(16 * 20), array.array("q", bytes(8 * FIELDS * 20))
                got = impl.stamp_write(buf, headers, True, next_offset, 9, out, slot, 100, fd, last + headroom, 50)
            finally:
                os.close(fd)
            with open(path, "rb") as f:
                data = f.read()
            if headroom < 0:
                assert got[0] == -1 and data == b""
            else:
                assert got == (len(meta), last, max(m[3] for m in meta))
                assert data == bytes(100) + stamped_reference(buf, meta, next_offset, 9)


@IMPLS
def test_stamp_write_limits_the_batch_count_before_writing(impl, tmp_path):
    buf = raw_batch(0, 1, b"a") + raw_batch(1, 1, b"b") + raw_batch(2, 1, b"c")
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        headers, out = bytearray(16 * 8), array.array("q", bytes(8 * FIELDS * 8))
        with pytest.raises(ValueError, match="more than 2 batches"):
            impl.stamp_write(buf, headers, True, 0, 1, out, 0, 0, fd, 2**62, 2)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b""


def test_a_failed_native_write_is_rolled_back(tmp_path):
    """The hot path's write fails (here: the descriptor is read-only): LogStorageError, the file
    is cut back, nothing moved, and the next append succeeds; an invalid batch writes nothing."""
    cfg = LogConfig(flush_interval_messages=None)
    with Log(tmp_path, cfg) as log:
        for i in range(3):
            log.append_as_leader(raw_batch(0, 2, bytes([i]) * 100), 1)
        seg = log._segments[-1]
        size, end, good_fd = seg.size, log.end_offset, seg.fd
        bad_fd = os.open(seg.log_path, os.O_RDONLY)
        seg.fd = bad_fd
        try:
            with pytest.raises(LogStorageError) as err:
                log.append_as_leader(raw_batch(0, 2, b"x" * 100), 1)
            assert err.value.errno == errno.EBADF
        finally:
            seg.fd = good_fd
            os.close(bad_fd)
        assert (log.end_offset, seg.size, os.path.getsize(seg.log_path)) == (end, size, size)
        corrupt = bytearray(raw_batch(0, 2, b"y" * 100))
        corrupt[-1] ^= 1
        with pytest.raises(InvalidAppendError, match="CRC"):
            log.append_as_leader(bytes(corrupt), 1)
        assert os.path.getsize(seg.log_path) == size
        log.append_as_leader(raw_batch(0, 2, b"z" * 100), 1)
        assert log.end_offset == end + 2
    with Log(tmp_path, cfg) as log:
        assert [int.from_bytes(b[:8], "big") for b in log.batches()] == [0, 2, 4, 6]
