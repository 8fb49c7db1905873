"""Proves engine/log/batch_fields.py's two paths agree: the loop (short runs) and numpy (long runs)
give the same continuity verdict, last offset, max timestamp, new epochs, shifted positions and
sparse index entries for any run; and a log that a follower fills with long runs ends with the
same segment files, indexes included, as one filled batch by batch (the loop's path)."""

from __future__ import annotations

import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.engine.log import batch_fields
from kraftlog.engine.log.errors import InvalidAppendError
from kraftlog.engine.log.index import CHECK_FIELDS
from kraftlog.engine.log.log import Log, LogConfig
from kraftlog.engine.records.batch import build_batch_from_values


@st.composite
def runs(draw):
    """(fields, n, expected): described batches that continue each other, sometimes with one
    that does not, epochs mostly rising with a few going down, timestamps with ties."""
    n = draw(st.integers(1, 200))
    base = draw(st.integers(0, 2**40))
    expected = base if draw(st.integers(0, 9)) else base + draw(st.integers(-3, 3))
    fields, position, epoch = array.array("q", bytes(8 * CHECK_FIELDS * n)), 0, draw(st.integers(-1, 5))
    broken = draw(st.integers(-1, n - 1)) if draw(st.booleans()) else -1
    for i in range(n):
        size, delta = draw(st.integers(61, 5000)), draw(st.integers(0, 4))
        epoch += draw(st.sampled_from([0, 0, 0, 1, 2, -1]))
        k = i * CHECK_FIELDS
        fields[k:k + CHECK_FIELDS] = array.array("q", [
            position, size, base + (1 if i == broken else 0), delta, draw(st.integers(-1, 50)), epoch])
        position += size
        base += delta + 1
    return fields, n, expected


def _outcome(run, fields, *args):
    copy = array.array("q", fields)
    try:
        return run(copy, *args), copy.tolist()
    except InvalidAppendError as exc:
        return str(exc), None


@settings(max_examples=400, deadline=None)
@given(runs(), st.integers(0, 1 << 30), st.one_of(st.none(), st.integers(-1, 6)))
def test_continuity_epochs_and_positions_agree(run, position, latest):
    fields, n, expected = run
    latest = -1 if latest is None else latest
    loop = _outcome(batch_fields._continue_loop, fields, n, position, expected, latest)
    vectorised = _outcome(batch_fields._continue_vectorised, fields, n, position, expected, latest)
    assert loop[0] == vectorised[0]
    if loop[1] is not None:  # on success the positions moved alike
        assert loop[1] == vectorised[1]


def test_the_long_run_path_is_the_one_a_catch_up_takes():
    assert batch_fields.SMALL_RUN_BATCHES < 4096  # a catch-up's runs are max_batches_per_append long


@pytest.mark.parametrize("batches", [3 * batch_fields.SMALL_RUN_BATCHES + 5])
def test_a_log_filled_in_long_runs_has_the_files_of_one_filled_batch_by_batch(tmp_path, batches):
    values = [[f"record {i}".encode() * (1 + i % 7)] for i in range(batches)]
    data = [build_batch_from_values(v, base_offset=i, partition_leader_epoch=1 + i // 40) for i, v in
            enumerate(values)]
    config = LogConfig(index_interval_bytes=300)
    for name, chunks in (("runs", [b"".join(data[:60]), b"".join(data[60:])]), ("single", data)):
        log = Log(tmp_path / name, config)
        for chunk in chunks:
            log.append_as_follower(chunk)
        log.close()
    for path in sorted((tmp_path / "single").iterdir()):
        assert path.read_bytes() == (tmp_path / "runs" / path.name).read_bytes(), path.name
