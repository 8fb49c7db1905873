"""Micro benchmarks of the segmented log beside the system calls it is built on (data and report
rows: bench/rows_log.py): unsynced append of pre-built 64 KiB batches vs os.write of the same
bytes, random read by offset vs os.pread at a known position, crash recovery vs the crc32c package
over the same bytes. Sizes are small here (32 MiB) so the suite stays quick."""

from __future__ import annotations

import os
import random
import shutil
import tempfile

import crc32c
import pytest

from kraftlog.bench import rows_log as data
from kraftlog.engine.log.log import CLEAN_SHUTDOWN_NAME, Log

LOG_BYTES = 32 << 20


@pytest.fixture
def fresh_dir():
    d = tempfile.mkdtemp(prefix="kraftlog-bench-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def built():
    b = data.BuiltLog(LOG_BYTES)
    yield b
    b.cleanup()


@pytest.mark.benchmark(group="append 32 MiB of 64 KiB batches, unsynced")
def test_append_ours(benchmark, fresh_dir):
    """Only the appends are timed: each round gets a fresh, already opened log (setup)."""
    batch, count, logs = data.batch_bytes(), LOG_BYTES // len(data.batch_bytes()), []

    def setup():
        log = Log(os.path.join(fresh_dir, str(len(logs))), data.config())
        log.initialize_leader_epoch(1)
        logs.append(log)
        return (log,), {}

    def run(log):
        for _ in range(count):
            log.append_as_leader(batch, 1)

    benchmark.pedantic(run, setup=setup, rounds=3, iterations=1)
    for log in logs:
        assert log.end_offset == count * data.BATCH_VALUES
        log.close()


@pytest.mark.benchmark(group="append 32 MiB of 64 KiB batches, unsynced")
def test_append_os_write(benchmark, fresh_dir):
    """The peer: the same bytes with os.write into a fresh file per round (open/close timed too,
    a few us)."""
    counter = iter(range(10**6))
    seconds = benchmark.pedantic(lambda: data.write_all(os.path.join(fresh_dir, str(next(counter))), LOG_BYTES),
                                 rounds=3, iterations=1)
    assert seconds > 0


@pytest.mark.benchmark(group="random read of one offset")
def test_random_read_ours(benchmark, built):
    rng = random.Random(3)
    with Log(built.path, data.config()) as log:
        info = benchmark(lambda: log.read(rng.randrange(built.end_offset), 65536))
        assert len(info.records) > 0


@pytest.mark.benchmark(group="random read of one offset")
def test_random_read_pread(benchmark, built):
    rng = random.Random(3)
    fd = os.open(os.path.join(built.path, f"{0:020d}.log"), os.O_RDONLY)
    try:
        out = benchmark(lambda: os.pread(fd, built.batch_len, rng.randrange(built.batches) * built.batch_len))
        assert len(out) == built.batch_len
    finally:
        os.close(fd)


@pytest.mark.benchmark(group="recovery scan of 32 MiB")
def test_recovery_ours(benchmark, built):
    """Only the reopen after a crash is timed (CRC of every batch, index rebuild); the close after
    it, with its fsyncs, happens in the next round's setup."""
    opened = []

    def setup():
        while opened:
            opened.pop().close()
        marker = os.path.join(built.path, CLEAN_SHUTDOWN_NAME)
        if os.path.exists(marker):
            os.remove(marker)
        return (), {}

    def run():
        opened.append(Log(built.path, data.config()))
        return opened[-1]

    log = benchmark.pedantic(run, setup=setup, rounds=3, iterations=1)
    assert log.recovered_unclean and log.end_offset == built.end_offset
    setup()


@pytest.mark.benchmark(group="recovery scan of 32 MiB")
def test_recovery_crc32c_package(benchmark, built):
    with open(os.path.join(built.path, f"{0:020d}.log"), "rb") as f:
        blob = f.read()
    assert benchmark(crc32c.crc32c, blob) == crc32c.crc32c(blob)
