"""EngineRaftLog's tail memo: a read it answers is byte for byte what the engine log answers.

The memo (engine/node/raftlog.py ``_tail``) serves the reads of the batches at the log's end
without touching the log. Hypothesis runs random sequences of the operations raft performs
(leader and follower appends, reads at any offset, truncations, start moves) and compares each
read with a read of the same log that bypasses the memo.
"""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.engine.node.raftlog import TAIL_MEMO_MAX_BYTES, EngineRaftLog, FileSnapshotStore
from kraftlog.raft.wire import split_batches

OPS = st.lists(st.one_of(
    st.tuples(st.just("lead"), st.integers(1, 4), st.integers(0, 300)),  # records, value size
    st.tuples(st.just("follow"), st.integers(1, 3), st.integers(0, 300)),  # batches copied from a twin log
    st.tuples(st.just("read"), st.integers(0, 40), st.sampled_from([1, 200, 4096, 1 << 20])),
    st.tuples(st.just("read until"), st.integers(0, 40), st.integers(0, 40)),  # a delivery up to the HW
    st.tuples(st.just("truncate"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("start"), st.integers(0, 40), st.just(0)),
), max_size=40)


def _uncached(log: EngineRaftLog, offset: int, max_bytes: int) -> bytes:
    info = log.log.read(offset, max_bytes)
    return bytes(info.records)


def _raw(batches) -> bytes:
    return b"".join(bytes(b.raw) for b in batches)


def _source_batches(count: int, size: int, base_offset: int, epoch: int, scratch: str):
    """``count`` one-record batches at ``base_offset``, as a leader's log would send them."""
    source = EngineRaftLog(scratch, FileSnapshotStore(scratch + "-snap"))
    try:
        source.truncate_fully_and_start_at(base_offset, epoch)
        for k in range(count):
            source.append_as_leader([bytes([k % 251]) * size], epoch)
        return split_batches(_raw(source.read(base_offset, 1 << 20)))
    finally:
        source.close()


def _apply(log: EngineRaftLog, op, epoch: int, tmp: str, step: int) -> None:
    kind, a, b = op
    if kind == "lead":
        log.append_as_leader([bytes([a]) * b] * a, epoch)
    elif kind == "follow":
        log.append_as_follower(_source_batches(a, b, log.end_offset(), epoch, f"{tmp}/src{step}"), epoch)
    elif kind == "read":
        offset = a % (log.end_offset() + 1)
        if offset < log.start_offset():
            with pytest.raises(ValueError):
                log.read(offset, b)
        else:
            assert _raw(log.read(offset, b)) == _uncached(log, offset, b), (offset, b)
    elif kind == "read until":
        whole = _uncached(log, log.start_offset(), 1 << 30)
        bases = [x.base_offset for x in split_batches(whole)] if whole else [log.end_offset()]
        offset = bases[a % len(bases)]  # where raft's deliveries read: a batch's start
        _check_read_until(log, offset, offset + 1 + b % 8)
    elif kind == "truncate":
        bases = [x.base_offset for x in log.read(log.start_offset(), 1 << 30)]
        if bases:
            log.truncate_to(bases[a % len(bases)])
    elif kind == "start":
        ends = [x.base_offset for x in log.read(log.start_offset(), 1 << 30)][1:] + [log.end_offset()]
        log.delete_before(ends[a % len(ends)], epoch)


def _check_read_until(log: EngineRaftLog, offset: int, until: int) -> None:
    """A read told it may stop at ``until``: a prefix of the log's answer that still holds every
    batch starting below ``until``."""
    got, whole = _raw(log.read(offset, 1 << 20, until_offset=until)), _uncached(log, offset, 1 << 20)
    assert whole.startswith(got)
    below = [b for b in split_batches(whole)] if whole else []
    needed = b"".join(bytes(b.raw) for b in below if b.base_offset < until)
    assert got.startswith(needed)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_reads_through_the_memo_equal_the_logs(ops):
    with tempfile.TemporaryDirectory() as tmp:
        log = EngineRaftLog(f"{tmp}/log", FileSnapshotStore(f"{tmp}/snap"))
        try:
            for step, op in enumerate(ops):
                _apply(log, op, 1, tmp, step)
                end = log.end_offset()
                if end > log.start_offset():  # the read raft makes most: the newest batch
                    last = list(log.read(log.start_offset(), 1 << 30))[-1].base_offset
                    assert _raw(log.read(last, 1 << 20)) == _uncached(log, last, 1 << 20)
        finally:
            log.close()


def test_the_memo_answers_the_newest_batch_without_a_log_read(tmp_path, monkeypatch):
    """The point of the memo: the leader's reads of its newest batch, and a follower's of what it
    just appended, do not read the log (a failing Log.read would show it)."""
    leader = EngineRaftLog(tmp_path / "leader", FileSnapshotStore(tmp_path / "ls"))
    follower = EngineRaftLog(tmp_path / "follower", FileSnapshotStore(tmp_path / "fs"))
    try:
        leader.append_as_leader([b"a"], 1)
        info = leader.append_as_leader([b"b", b"c"], 1)
        with monkeypatch.context() as patched:
            patched.setattr(leader.log, "read", _no_read)
            assert [b.records for b in leader.read(info.first_offset, 4096)] == [(b"b", b"c")]
        follower.append_as_follower(split_batches(_raw(leader.read(0, 1 << 20))), 1)
        monkeypatch.setattr(follower.log, "read", _no_read)
        assert [b.records for b in follower.read(0, 4096)] == [(b"a",), (b"b", b"c")]
    finally:
        monkeypatch.undo()
        leader.close()
        follower.close()


def test_the_memo_steps_aside_when_it_cannot_answer(tmp_path):
    """A read past the memo's bytes, one inside it, one after a truncation and one of a big
    append all go to the log (and still answer right)."""
    log = EngineRaftLog(tmp_path / "log", FileSnapshotStore(tmp_path / "snap"))
    try:
        log.append_as_leader([b"x" * 100], 1)
        log.append_as_leader([b"y" * 100, b"z"], 1)
        assert [b.records for b in log.read(1, 10)] == [(b"y" * 100, b"z")]  # min one batch, past max_bytes
        assert [b.base_offset for b in log.read(0, 1 << 20)] == [0, 1]
        log.truncate_to(1)
        assert log.read(1, 1 << 20) == ()
        log.append_as_leader([b"w"], 2)
        assert [(b.base_offset, b.epoch) for b in log.read(1, 1 << 20)] == [(1, 2)]
        big = log.append_as_leader([b"q" * (TAIL_MEMO_MAX_BYTES + 1)], 2)
        assert [len(b.records[0]) for b in log.read(big.first_offset, 1 << 20)] == [TAIL_MEMO_MAX_BYTES + 1]
    finally:
        log.close()


def _no_read(*_args, **_kwargs):
    raise AssertionError("the engine log was read")


def _rows(run) -> tuple:
    return (bytes(run.raw), list(run._bases), list(run._counts), list(run._epochs), list(run._attributes),
            list(run._positions), list(run._sizes))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=6), st.integers(0, 1 << 40), st.integers(0, 1 << 30),
       st.sampled_from(["values", "client", "control"]))
def test_a_leader_append_s_memo_run_is_the_run_split_batches_makes(values, base_offset, epoch, kind):
    """The leader's memo of its append (``_stamped_run``, made from the batch's header without a
    scan) is, row for row and byte for byte, what split_batches makes of the stamped bytes: for a
    batch built from values, a Produce's batch taken as written, and a LeaderChange control batch."""
    from kraftlog.engine.node.raftlog import _stamped_run
    from kraftlog.engine.records import batch as batch_codec
    from kraftlog.engine.records.layout import BASE_OFFSET_OFFSET, LEADER_EPOCH_OFFSET

    if kind == "control":
        from kraftlog.raft.control import encode_leader_change
        from kraftlog.raft.wire import leader_change_value

        built = batch_codec.build_control_batch(batch_codec.CONTROL_LEADER_CHANGE,
                                                leader_change_value(encode_leader_change(1, [1, 2, 3], [1, 2])))
    else:
        built = batch_codec.build_batch_from_values(values)
        if kind == "client":
            built = memoryview(bytearray(built)).toreadonly()  # a view of a Produce frame, as the transport lends it
    count = 1 if kind == "control" else len(values)
    stamped = bytearray(built)
    stamped[BASE_OFFSET_OFFSET:BASE_OFFSET_OFFSET + 8] = base_offset.to_bytes(8, "big", signed=True)
    stamped[LEADER_EPOCH_OFFSET:LEADER_EPOCH_OFFSET + 4] = epoch.to_bytes(4, "big", signed=True)
    made = _stamped_run(built, base_offset, base_offset + count - 1, epoch)
    assert _rows(made) == _rows(split_batches(bytes(stamped)))
    assert [b.base_offset for b in made] == [base_offset] and made.next_offset == base_offset + count
    assert bytes(built[:8]) == bytes(8)  # ``built`` left as it was (built at base offset 0)
    with pytest.raises(TypeError):
        made.raw[0] = 1  # the memo's bytes cannot be written through the run


def test_a_leader_append_that_is_not_one_batch_falls_back_to_the_scan():
    """Bytes that are not one whole batch ending where the append says take split_batches (which
    names the problem) rather than a hand-made run."""
    from kraftlog.engine.node.raftlog import _stamped_run
    from kraftlog.engine.records import batch as batch_codec
    from kraftlog.errors import CorruptRecordError

    one = batch_codec.build_batch_from_values([b"a", b"b"])
    with pytest.raises(CorruptRecordError):
        _stamped_run(one + batch_codec.build_batch_from_values([b"c"]), 5, 7, 1)  # 2nd batch's base 0: not 7
    with pytest.raises(CorruptRecordError):
        _stamped_run(one[:-1], 5, 6, 1)  # a torn batch
    assert len(_stamped_run(one, 5, 6, 1)) == 1
    assert _rows(_stamped_run(one, 5, 9, 1)) == _rows(split_batches(bytes(_stamped_run(one, 5, 6, 1).raw)))
