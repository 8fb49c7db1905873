"""Proves the I/O side of raft in one process: the engine-log adapter answers every
ReplicatedLog question exactly as the simulator's in-memory log does (differential, generated
operation sequences), survives a reopen with its start epoch, and stores LeaderChange as Kafka's
control record; the quorum-state file is Kafka's JSON and replaced atomically; the file snapshot
store verifies sizes; and three RaftNodes (core + driver + TCP transport + engine log) on one
event loop over loopback elect a leader, batch proposals, commit on every node, refuse proposals
on followers, and close only a connection that sends an oversized frame. A driver pass stops
polling its budget after its first Ready (a backlog's pieces yield to the sockets).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raft_sim.storage import MemLog

from kraftlog.engine.node.raftlog import EngineRaftLog, FileSnapshotStore
from kraftlog.engine.node.raftnode import CountingStateMachine, RaftClient, RaftNode
from kraftlog.engine.records import batch as batch_codec
from kraftlog.engine.records.layout import SMALL_RUN_BATCHES
from kraftlog.errors import CorruptRecordError
from kraftlog.raft import wire
from kraftlog.raft.aio.driver import DriverConfig
from kraftlog.raft.aio.quorum_file import QuorumStateFile
from kraftlog.raft.control import encode_leader_change
from kraftlog.raft.core import RaftConfig
from kraftlog.raft.state import Role
from kraftlog.raft.types import ElectionState, LogBatch, NotLeaderError, OffsetAndEpoch

# ---- the engine-log adapter against the simulator's log ----------------------------------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("leader"), st.integers(0, 2), st.integers(1, 4)),  # epoch bump, records
    st.tuples(st.just("follower"), st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.just("truncate"), st.integers(0, 40)),
    st.tuples(st.just("flush")),
), min_size=1, max_size=25)


def _observe(log, max_epoch: int):
    return (log.start_offset(), log.end_offset(), log.last_fetched_epoch(),
            [log.end_offset_for_epoch(e) for e in range(max_epoch + 2)],
            [(b.base_offset, b.epoch, b.control, tuple(b.records)) for b in log.read(log.start_offset(), 1 << 20)])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_engine_log_answers_like_the_simulators_log(tmp_path_factory, ops):
    """Same operations on MemLog and EngineRaftLog -> same offsets, epochs, epoch-end answers
    and batches; truncation happens only at batch boundaries (what raft asks for)."""
    d = tmp_path_factory.mktemp("log")
    snaps = FileSnapshotStore(d / "snapshots")
    ours, ref = EngineRaftLog(d / "log", snaps), MemLog()
    epoch, counter = 1, 0
    try:
        for op in ops:
            if op[0] in ("leader", "follower"):
                epoch += op[1]
                values = []
                for _ in range(op[2]):
                    counter += 1
                    values.append(b"r%d" % counter)
                if op[0] == "leader":
                    a, b = ours.append_as_leader(values, epoch), ref.append_as_leader(values, epoch)
                else:
                    batch = LogBatch(ref.end_offset(), epoch, tuple(values))
                    a, b = ours.append_as_follower([batch], epoch), ref.append_as_follower([batch], epoch)
                assert tuple(a) == tuple(b)
            elif op[0] == "truncate":
                bases = [x.base_offset for x in ref.read(0, 1 << 20)] + [ref.end_offset()]
                target = min(bases, key=lambda o: abs(o - op[1]))
                ours.truncate_to(target)
                ref.truncate_to(target)
            else:
                ours.flush()
                ref.flush()
                assert ours.last_flushed_offset() == ref.last_flushed_offset()
            assert _observe(ours, epoch) == _observe(ref, epoch)
    finally:
        ours.close()


@pytest.mark.parametrize("as_run", [False, True])  # LogBatch values, or a Fetch answer's run (its views)
def test_a_follower_append_larger_than_one_log_append_is_taken_whole(tmp_path, as_run):
    """A Fetch answer may carry more batches than one engine-log append takes
    (max_batches_per_append): the adapter appends all of them, in order, and reads them back
    (a run's slices byte for byte as they came)."""
    from kraftlog.engine.log.log import LogConfig
    from kraftlog.engine.node.raftlog import RAFT_LOG_CONFIG

    config = LogConfig(**{**RAFT_LOG_CONFIG.__dict__, "max_batches_per_append": 7})
    log = EngineRaftLog(tmp_path / "log", FileSnapshotStore(tmp_path / "snapshots"), config)
    batches = [LogBatch(i, 1 + i // 20, (b"v%d" % i,)) for i in range(50)]
    sent = wire.encode_batches(batches)
    assert tuple(log.append_as_follower(wire.split_batches(sent) if as_run else batches, 3)) == (0, 49)
    log.flush()
    back = log.read(0, 1 << 20)
    assert [(b.base_offset, b.epoch, tuple(b.records)) for b in back] == \
        [(b.base_offset, b.epoch, b.records) for b in batches]
    if as_run:  # LogBatch values are built again at the append (their timestamps are its own)
        assert bytes(back.raw) == sent
    log.close()


@pytest.mark.parametrize("length", [3, 3 * SMALL_RUN_BATCHES])  # the loop's runs and numpy's
@pytest.mark.parametrize("fault", ["epoch down", "above the leader", None])
def test_a_follower_run_with_a_bad_epoch_is_refused_at_that_batch(tmp_path, length, fault):
    """A run (as a Fetch answer brings it) whose epochs go down or pass the leader's is refused
    naming its first bad batch, and nothing of it is appended; a good one is appended whole."""
    epochs = [1 + i * 2 // length for i in range(length)]  # 1 .. 2, rising
    bad = length - 2
    if fault == "epoch down":
        epochs[bad] = 0
    elif fault == "above the leader":
        epochs[bad] = 4
    raw = b"".join(batch_codec.build_batch_from_values([b"v%d" % i], base_offset=i, partition_leader_epoch=e)
                   for i, e in enumerate(epochs))
    run = wire.split_batches(raw)
    log = EngineRaftLog(tmp_path / "log", FileSnapshotStore(tmp_path / "snapshots"))
    try:
        if fault is None:
            assert tuple(log.append_as_follower(run, 3)) == (0, length - 1)
        else:
            with pytest.raises(ValueError, match=f"bad follower batch at {bad} epoch {epochs[bad]}"):
                log.append_as_follower(run, 3)
            assert log.end_offset() == 0
    finally:
        log.close()


def test_engine_log_keeps_its_start_epoch_across_snapshot_and_reopen(tmp_path):
    """After delete_before(o, e) / truncate_fully_and_start_at(o, e) the start epoch is e, also
    after a reopen (taken from the snapshot at the log start)."""
    snaps = FileSnapshotStore(tmp_path / "snapshots")
    log = EngineRaftLog(tmp_path / "log", snaps)
    for epoch in (1, 1, 2, 3):
        log.append_as_leader([b"x", b"y"], epoch)
    assert log.end_offset() == 8
    snaps.write_chunk(OffsetAndEpoch(4, 2), 0, b"state")
    snaps.finish(OffsetAndEpoch(4, 2), 5)
    assert log.delete_before(4, 2)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(4, 2)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(6, 2)
    with pytest.raises(ValueError):
        log.read(3, 100)
    log.close()
    log = EngineRaftLog(tmp_path / "log", snaps)
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch()) == (4, 8, 3)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(4, 2)
    snaps.write_chunk(OffsetAndEpoch(20, 5), 0, b"later")
    snaps.finish(OffsetAndEpoch(20, 5), 5)
    log.truncate_fully_and_start_at(20, 5)
    log.close()
    log = EngineRaftLog(tmp_path / "log", snaps)
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch()) == (20, 20, 5)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(20, 5)
    log.close()


def test_engine_log_stores_leader_change_as_a_kafka_control_batch(tmp_path):
    log = EngineRaftLog(tmp_path / "log", FileSnapshotStore(tmp_path / "s"))
    log.append_as_leader([encode_leader_change(2, {1, 2, 3}, {2, 3})], 4, control=True)
    log.flush()
    (batch,) = log.read(0, 1000)
    header = batch_codec.validate_batch(batch.raw)
    assert header.is_control and header.partition_leader_epoch == 4 and batch.control
    (record,) = list(batch_codec.iter_records(batch.raw))
    assert struct.unpack(">hh", record.key) == (0, 2)
    log.close()
    # the segment file itself holds the batch (Kafka's format on disk)
    with open(tmp_path / "log" / "00000000000000000000.log", "rb") as f:
        assert f.read() == bytes(batch.raw)


# ---- quorum-state file and snapshot store --------------------------------------------------------


def test_quorum_state_file_is_kafkas_json_and_replaced_atomically(tmp_path):
    store = QuorumStateFile(tmp_path)
    assert store.read() is None
    state = ElectionState(7, 2, 2, frozenset({1, 2, 3}))
    store.write(state)
    doc = json.loads((tmp_path / "quorum-state").read_text())
    assert doc == {"clusterId": "", "leaderId": 2, "leaderEpoch": 7, "votedId": 2, "appliedOffset": 0,
                   "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}], "data_version": 0}
    assert not (tmp_path / "quorum-state.tmp").exists()
    # a crash between writing the temp file and the rename leaves the old state readable
    (tmp_path / "quorum-state.tmp").write_text("{garbage")
    assert QuorumStateFile(tmp_path).read() == state
    (tmp_path / "quorum-state").write_text("{not json")
    with pytest.raises(CorruptRecordError):
        store.read()
    store.clear()
    assert store.read() is None


def test_file_snapshot_store_verifies_size_and_orders_ids(tmp_path):
    s = FileSnapshotStore(tmp_path)
    a, b = OffsetAndEpoch(10, 1), OffsetAndEpoch(20, 2)
    s.write_chunk(a, 0, b"abc")
    s.write_chunk(a, 3, b"de")
    with pytest.raises(ValueError):
        s.write_chunk(a, 9, b"x")
    assert s.snapshot_ids() == []  # invisible until finished
    s.finish(a, 5)
    assert s.read_chunk(a, 1, 3) == b"bcd" and s.size(a) == 5
    s.write_chunk(b, 0, b"xyz")
    with pytest.raises(CorruptRecordError):
        s.finish(b, 4)
    s.write_chunk(b, 0, b"xyzw")
    s.finish(b, 4)
    assert s.snapshot_ids() == [a, b] and s.latest_snapshot_id() == b
    s.delete_before(b)
    assert s.snapshot_ids() == [b] and s.size(a) is None


# ---- three nodes on one loop ------------------------------------------------------------------------

FAST = RaftConfig(election_timeout_ms=150, election_backoff_max_ms=100, fetch_timeout_ms=300,
                  request_timeout_ms=300, fetch_max_wait_ms=100)


def _listening_sockets(n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        out.append(s)
    return out


async def _started_nodes(tmp_path, driver_config: DriverConfig) -> tuple[dict, list[RaftNode]]:
    """Three RaftNodes (FAST timeouts, ``driver_config``) started on loopback listeners: (voters, nodes)."""
    socks = _listening_sockets(3)
    voters = {i + 1: ("127.0.0.1", s.getsockname()[1]) for i, s in enumerate(socks)}
    nodes = [RaftNode(i, voters, str(tmp_path / f"n{i}"), cluster_id="t", config=FAST, seed=i,
                      driver_config=driver_config) for i in voters]
    for node, s in zip(nodes, socks, strict=True):
        await node.start(sock=s)
    return voters, nodes


async def _leader(nodes, timeout_s: float = 10.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while loop.time() < end:
        leaders = [n for n in nodes if n.core.role is Role.LEADER]
        if leaders:
            return leaders[0]
        await asyncio.sleep(0.01)
    raise AssertionError("no leader elected")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=5), min_size=1, max_size=SMALL_RUN_BATCHES + 8),
       st.integers(0, 1 << 40), st.data())
def test_the_counting_machine_reads_a_run_as_its_batches(values, base, data):
    """CountingStateMachine.handle_commit_run (a CommitRun, no WireBatch made) ends in the state
    handle_commit of each batch reaches: records, next offset and digest, for short and long runs."""
    parts, offset = [], base
    for vs in values:
        parts.append(batch_codec.build_batch_from_values(vs, base_offset=offset, timestamp_ms=1))
        offset += len(vs)
    run = wire.split_batches(b"".join(parts))
    cut = data.draw(st.integers(0, len(run)))
    by_run, by_batch = CountingStateMachine(), CountingStateMachine()
    for piece in (run[:cut], run[cut:]):
        if len(piece):  # a CommitRun is never empty (raft/core.py _deliver takes k > 0 batches)
            by_run.handle_commit_run(piece)
    for batch in run:
        by_batch.handle_commit(batch)
    assert (by_run.records, by_run.next_offset, by_run.digest) == \
        (by_batch.records, by_batch.next_offset, by_batch.digest) == (by_batch.records, offset, by_batch.digest)
    assert by_run.records == sum(map(len, values)) and by_run.digest != 0


def test_three_nodes_on_one_loop_elect_batch_and_commit(tmp_path):
    """Election, batched proposals (one appended batch for proposals queued in one loop
    iteration), commit on every node, NotLeaderError on followers, clean stop."""
    async def scenario():
        voters, nodes = await _started_nodes(tmp_path, DriverConfig(linger_ms=5))
        try:
            leader = await _leader(nodes)
            followers = [n for n in nodes if n is not leader]
            with pytest.raises(NotLeaderError):
                followers[0].driver.propose([b"nope"])
            batches_before = len(leader.log.read(0, 1 << 20))
            futures = [leader.driver.propose([b"p%d" % i, b"q%d" % i]) for i in range(50)]
            results = await asyncio.wait_for(asyncio.gather(*futures), 10)
            bases = [r[0] for r in results]
            assert bases == sorted(bases) and len(set(bases)) == 50
            assert all(last - base == 1 for base, last in results)
            # the 50 proposals were queued within the linger window: one batch of 100 records
            new = leader.log.read(0, 1 << 20)[batches_before:]
            assert [len(b.records) for b in new] == [100]
            target = results[-1][1] + 1
            loop = asyncio.get_running_loop()
            end = loop.time() + 10
            while any(n.machine.next_offset < target for n in nodes) and loop.time() < end:
                await asyncio.sleep(0.01)
            assert [n.machine.next_offset for n in nodes] == [target] * 3
            assert len({n.machine.digest for n in nodes}) == 1  # the same bytes committed everywhere
            client = RaftClient(voters)
            records = await client.read_committed(0)
            await client.close()
            assert [v for _, v in records] == [v for i in range(50) for v in (b"p%d" % i, b"q%d" % i)]
        finally:
            for node in nodes:
                await node.stop(resign=False)

    asyncio.run(scenario())


def test_oversized_and_garbage_frames_close_only_their_connection(tmp_path):
    """A size prefix above max_frame_bytes, and a well-sized frame of junk, each close their own
    connection; an earlier client connection keeps working."""
    async def scenario():
        (s,) = _listening_sockets(1)
        port = s.getsockname()[1]
        node = RaftNode(1, {1: ("127.0.0.1", port)}, str(tmp_path / "n1"), config=FAST, seed=1)
        await node.start(sock=s)
        try:
            await _leader([node])
            client = RaftClient({1: ("127.0.0.1", port)})
            assert await client.propose([b"before"]) >= 0
            for junk in (struct.pack(">i", node.transport.config.max_frame_bytes + 1),
                         struct.pack(">i", 12) + b"\x00\x34\x00\x02" + b"\xff" * 8,
                         struct.pack(">i", -5)):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(junk)
                await writer.drain()
                assert await asyncio.wait_for(reader.read(100), 5) == b""  # closed by the node
                writer.close()
            assert await client.propose([b"after"]) >= 0  # the other connection still works
            assert node.transport.frames_rejected >= 1
            await client.close()
        finally:
            await node.stop(resign=False)

    asyncio.run(scenario())


def test_node_restart_keeps_its_log_and_epoch(tmp_path):
    """A single-voter node stopped and started again finds its records and a higher epoch."""
    async def run_once(expect_min: int) -> tuple[int, int]:
        (s,) = _listening_sockets(1)
        voters = {1: ("127.0.0.1", s.getsockname()[1])}
        node = RaftNode(1, voters, str(tmp_path / "solo"), config=FAST, seed=3)
        await node.start(sock=s)
        try:
            leader = await _leader([node])
            base, _ = await asyncio.wait_for(leader.driver.propose([b"v"]), 5)
            assert base >= expect_min
            return base, leader.core.epoch
        finally:
            await node.stop()

    first, epoch1 = asyncio.run(run_once(0))
    second, epoch2 = asyncio.run(run_once(first + 1))
    assert epoch2 > epoch1 and os.path.exists(tmp_path / "solo" / "quorum-state")


def test_the_driver_decides_what_a_failing_step_costs():
    """A peer's invalid data goes back to the transport (the connection closes; the node goes
    on), a full disk on a follower append is survived, any other storage failure stops the driver
    for good and tells its owner (the process then exits non-zero)."""
    import errno

    from kraftlog.raft.aio.driver import RaftDriver

    class Core:
        node_id, role, epoch, leader_id, raises = 1, Role.FOLLOWER, 1, 2, None

        def step(self, env):
            if self.raises is not None:
                raise self.raises

    class Channel:
        on_envelope = on_produce = None

    async def scenario():
        core, fatal = Core(), []
        driver = RaftDriver(core, log=None, quorum_store=None, snapshots=None, listener=None, channel=Channel())
        driver._loop = asyncio.get_running_loop()
        driver._scheduled = True  # no pass runs: only the step's outcome is looked at
        driver.on_fatal = fatal.append
        core.raises = ValueError("bad follower batch at 7")
        with pytest.raises(ValueError):
            driver.on_envelope(object())
        core.raises = OSError(errno.ENOSPC, "No space left on device")
        driver.on_envelope(object())
        assert driver.failure is None and not fatal
        core.raises = OSError(errno.EIO, "Input/output error")
        driver.on_envelope(object())
        assert isinstance(driver.failure, OSError) and fatal == [driver.failure]
        core.raises = None
        driver.on_envelope(object())  # a stopped driver takes nothing more
        assert fatal == [driver.failure]

    asyncio.run(scenario())


def _hand_clock(monkeypatch, start_ns: int) -> list[int]:
    """The driver's monotonic clock as ``[now in ns]``, moved by the test's own hand."""
    from kraftlog.raft.aio import driver as driver_module

    now_ns = [start_ns]
    monkeypatch.setattr(driver_module, "time", type("Clock", (), {"monotonic_ns": staticmethod(lambda: now_ns[0])}))
    return now_ns


class _QuietChannel:
    """A channel the driver must send nothing through; ``receiving`` is what receiving_response
    says (whether a peer's answer is half read)."""

    on_envelope = on_produce = None
    receiving = False

    def send(self, envelope):
        raise AssertionError("nothing to send")

    def receiving_response(self):
        return self.receiving


def test_a_pass_polls_for_its_budget_after_the_first_ready(monkeypatch):
    """The pass budget (4 ms) counts from the end of the first Ready, which persists what woke
    the pass: a slow fsync there does not end the pass (a commit would pay a loop iteration more),
    and delivery pieces after it stop once the budget is spent, with a timer for the next loop
    iteration (after the sockets are read: a far follower takes its next Fetch answer)."""
    from kraftlog.raft.aio import driver as driver_module
    from kraftlog.raft.ready import Commit, Ready

    now_ns = _hand_clock(monkeypatch, 0)

    class Core:
        node_id, role, epoch, leader_id = 1, Role.FOLLOWER, 1, 2

        def poll(self):  # always more to deliver: a backlog
            return Ready(None, True, (), (Commit(object()),), 10**12)

    class Log:
        flushes = 0

        def flush(self):
            self.flushes += 1
            if self.flushes == 1:
                now_ns[0] += 10_000_000  # the first Ready's fsync: 10 ms, over the budget

    class Listener:
        def handle_commit(self, batch):
            now_ns[0] += 3_000_000  # one delivery piece: 3 ms

    async def scenario():
        driver = driver_module.RaftDriver(Core(), log=Log(), quorum_store=None, snapshots=None,
                                          listener=Listener(), channel=_QuietChannel())
        driver._loop = asyncio.get_running_loop()
        driver._pass()
        try:
            # Ready 1 (10 ms + 3 ms), Ready 2 (3 ms after it: within 4), Ready 3 (6 ms: spent)
            assert driver.polls == 3
            assert driver._timer_at_ms == 0  # the rest in the next loop iteration
        finally:
            driver._timer.cancel()

    asyncio.run(scenario())


def test_a_pass_ends_after_a_piece_of_a_backlog(monkeypatch):
    """A Ready that delivers a piece of a committed backlog and asks to be polled again at once
    ends the pass, budget or not: the next piece runs in the next loop iteration, after the
    sockets are read (a far follower's next Fetch answer is not read behind two or three pieces
    of replay), or 1 ms later while an answer is half read (the loop reads the rest meanwhile).
    A Ready that delivers without a backlog (a commit) does not end it."""
    from kraftlog.raft.aio import driver as driver_module
    from kraftlog.raft.ready import Commit, Ready

    now_ns = _hand_clock(monkeypatch, 5_000_000_000)

    class Core:
        node_id, role, epoch, leader_id = 1, Role.FOLLOWER, 1, 2
        backlog = True
        polls = 0

        def poll(self):
            self.polls += 1
            if self.polls > 3:
                return Ready(None, False, (), (), 10**12)
            # "poll again at once" is a next poll time at or before now
            return Ready(None, False, (), (Commit(object()),), 0 if self.backlog else 10**12)

    class Listener:
        def handle_commit(self, batch):
            now_ns[0] += 100_000  # a short piece: 0.1 ms, far within the budget

    async def scenario():
        # a backlog: one piece, the next in the next loop iteration (timer at 0), or 1 ms later
        # while an answer is half read (DriverConfig.receive_wait_ms); no backlog: polls go on
        for backlog, receiving, polls, timer_at_ms in ((True, False, 1, 0), (True, True, 1, 5_000 + 1),
                                                       (False, False, 4, 10**12)):
            core, channel = Core(), _QuietChannel()
            core.backlog, channel.receiving = backlog, receiving
            driver = driver_module.RaftDriver(core, log=None, quorum_store=None, snapshots=None,
                                              listener=Listener(), channel=channel)
            driver._loop = asyncio.get_running_loop()
            driver._pass()
            try:
                assert (driver.polls, driver._timer_at_ms) == (polls, timer_at_ms)
            finally:
                driver._timer.cancel()

    asyncio.run(scenario())


def test_a_backlog_piece_waits_for_a_half_read_answer(monkeypatch):
    """While a peer's answer is half read, the backlog's next piece waits (the timer looks again
    every receive_wait_ms) until the answer is whole, which ends the wait at once (its read's pass
    runs), or until receive_hold_max_ms have passed (a peer that sends slowly holds it back no
    longer than that); also when the answer began to arrive after the last piece's pass ended."""
    from kraftlog.raft.aio import driver as driver_module
    from kraftlog.raft.ready import Commit, Ready

    now_ns = _hand_clock(monkeypatch, 5_000_000_000)

    class Core:
        node_id, role, epoch, leader_id = 1, Role.FOLLOWER, 1, 2
        polls = 0

        def poll(self):
            self.polls += 1
            return Ready(None, False, (), (Commit(object()),), 0)  # a backlog: poll again at once

    class Listener:
        def handle_commit(self, batch):
            pass

    async def scenario():
        core, channel = Core(), _QuietChannel()
        channel.receiving = True  # an answer is half read
        driver = driver_module.RaftDriver(core, log=None, quorum_store=None, snapshots=None,
                                          listener=Listener(), channel=channel)
        driver._loop = asyncio.get_running_loop()
        try:
            driver._pass()
            assert core.polls == 1 and driver._timer_at_ms == 5_001
            # the answer is still half read: each look re-arms the timer and polls nothing
            for _ in range(5):
                now_ns[0] += 1_000_000
                driver._timer_fired()
            assert core.polls == 1 and driver._timer_at_ms == 5_006
            # the answer is whole: the next look runs the piece
            channel.receiving = False
            now_ns[0] += 1_000_000
            driver._timer_fired()
            assert core.polls == 2
            # that pass ended with no answer under way (the next piece due in the next loop
            # iteration); an answer begins to arrive before the timer fires: the piece waits too,
            # and from a peer that sends slowly receive_hold_max_ms, not longer
            assert driver._timer_at_ms == 0
            channel.receiving = True
            held_from_ms = now_ns[0] // 1_000_000
            driver._timer_fired()
            assert core.polls == 2 and driver._timer_at_ms == held_from_ms + 1
            while core.polls == 2:
                now_ns[0] += 1_000_000
                driver._timer_fired()
            assert now_ns[0] // 1_000_000 - held_from_ms == driver.config.receive_hold_max_ms
        finally:
            driver._timer.cancel()

    asyncio.run(scenario())


def test_a_read_s_messages_are_acted_on_at_the_read_s_end():
    """Wake-ups: every message of one transport read is stepped before one poll, run at the read's
    end (on_read_done) without waiting for another loop iteration when no other callback of this
    iteration is queued; when one is (it may bring more messages), the poll waits for the next
    iteration and takes that callback's messages too (group commit). A Produce waits alike."""
    from kraftlog.raft.aio.driver import RaftDriver
    from kraftlog.raft.ready import Ready

    class Core:
        node_id, role, epoch, leader_id, high_watermark = 1, Role.LEADER, 1, 1, 0

        def __init__(self):
            self.steps, self.polls_at, self.appended = [], [], []

        def step(self, env):
            self.steps.append(env)

        def append(self, records):
            self.appended.append(list(records))
            return len(self.appended) - 1

        def poll(self):
            self.polls_at.append((len(self.steps), len(self.appended)))
            return Ready(None, False, (), (), 10**12)

    class Channel:
        on_envelope = on_produce = on_read_done = None

        def send(self, envelope):
            raise AssertionError("nothing to send")

    async def scenario():
        core, channel = Core(), Channel()
        driver = RaftDriver(core, log=None, quorum_store=None, snapshots=None, listener=None, channel=channel)
        driver.start()
        await asyncio.sleep(0)  # start's own wake-up
        core.polls_at.clear()
        # one read, two messages: nothing polled until the read ends, then one poll at once
        channel.on_envelope("a")
        channel.on_envelope("b")
        assert core.polls_at == []
        channel.on_read_done()
        assert core.polls_at == [(2, 0)]
        # another callback queued in this iteration: the poll waits for it (and its message)
        loop = asyncio.get_running_loop()
        loop.call_soon(channel.on_envelope, "c")
        channel.on_envelope("d")
        channel.on_read_done()
        assert core.polls_at == [(2, 0)]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert core.polls_at == [(2, 0), (4, 0)]
        # a Produce is appended at its read's end, in the same way
        channel.on_produce([b"v"], lambda *answer: None)
        assert core.appended == []
        channel.on_read_done()
        assert core.appended == [[b"v"]] and core.polls_at[-1] == (4, 1)
        # a read that brought nothing polls nothing
        channel.on_read_done()
        assert len(core.polls_at) == 3
        await driver.stop(resign=False)

    asyncio.run(scenario())


def test_a_produce_committed_by_a_read_is_answered_before_that_read_s_poll():
    """The answer to a Produce is the one message on its client's path: when a read's messages (a
    follower's Fetch) move the high watermark past it, the pass that read wakes answers it before
    it polls; a read that commits nothing answers nothing, and the pass that sees it commit does."""
    from kraftlog.raft.aio.driver import RaftDriver
    from kraftlog.raft.ready import Ready

    events = []

    class Core:
        node_id, role, epoch, leader_id, high_watermark = 1, Role.LEADER, 1, 1, 0
        end = 0  # the next offset appended

        def step(self, env):
            events.append(("step", env))
            self.high_watermark = env  # the follower's Fetch moves the HW to its fetch offset

        def append(self, records):
            self.end += len(records)
            return self.end - 1

        def poll(self):
            events.append(("poll", self.high_watermark))
            return Ready(None, False, (), (), 10**12)

    class Channel:
        on_envelope = on_produce = on_read_done = None

        def send(self, envelope):
            raise AssertionError("nothing to send")

    def read(*messages):  # one transport read: its messages, then its end
        for m in messages:
            channel.on_envelope(m)
        channel.on_read_done()

    def produce(value):
        channel.on_produce([value], lambda *answer: events.append(("answer", answer[1])))
        channel.on_read_done()

    async def scenario():
        driver = RaftDriver(core, log=None, quorum_store=None, snapshots=None, listener=None, channel=channel)
        driver.start()
        await asyncio.sleep(0)
        del events[:]  # start's own wake-up
        produce(b"v")  # offset 0, polled: not committed yet
        read(1)  # the Fetch that commits it (HW 1): answered before the poll
        produce(b"w")  # offset 1
        read(1)  # a Fetch that commits nothing new
        read(2)  # and the one that commits offset 1
        assert events == [("poll", 0), ("step", 1), ("answer", 0), ("poll", 1), ("poll", 1), ("step", 1),
                          ("poll", 1), ("step", 2), ("answer", 1), ("poll", 2)]
        await driver.stop(resign=False)

    core, channel = Core(), Channel()
    asyncio.run(scenario())
