"""The asyncio driver: runs one RaftCore on one event loop with a real clock, real storage and
the TCP transport, exactly the way the simulator (tests/raft_sim/cluster.py) drives it:

    inbound message  -> core.step(envelope), then a poll is scheduled (coalesced: every message
                        that arrived in one loop iteration is stepped before one poll, so one
                        fsync covers them all: group commit; see "wake-ups" below)
    poll             -> ready = core.poll(); act on it (persist -> send -> apply, raft/ready.py);
                        repeat while the Ready is not empty (at most ``polls_per_run_max``), then
                        arm one timer at ``ready.next_poll_ms``
    proposal         -> queued; appended as one batch when ``max_batch_records`` or
                        ``max_batch_bytes`` is reached, or ``linger_ms`` after the first queued
                        record (0 = at the end of the current loop iteration); its future resolves
                        with (base offset, last offset) once the high watermark passes it. A
                        Produce from the transport is answered in the same pass that sees the
                        high watermark pass it, before that Ready's messages leave: the commit's
                        answer is the one message on the client's critical path, while the
                        Fetch answers carrying the new high watermark are not

Wake-ups. A transport with ``on_read_done`` (RaftTransport) says when the frames of one socket
read have all been handed over; the pass they ask for then runs right there if no other callback
of this loop iteration is queued (asyncio's ready queue is empty, so nothing else could join the
group commit before the next select), else in the next iteration as any other wake-up does. A
sequential commit thus costs each follower one loop iteration instead of two, and the leader two
fewer: a select and a callback less on every hop of the commit's path.

Every Ready is acted on by raft/ready.py's ``execute_ready`` (the one executor the simulator and
the unit harness use too): persist -> send -> apply, the leader's Fetch responses before the
flush when no election state changes, runs of commits to the listener in bulk.

A wake-up never holds the loop for long: it stops polling ``pass_budget_ms`` after its first
Ready is acted on (or after ``polls_per_run_max`` Readies), and right after a Ready that
delivered a piece of a committed backlog (the core asks to be polled again at once); it runs
again in the next loop iteration, after the sockets have been read, or, while a peer's answer is
half read, once that answer is whole (the loop reads the rest as it comes and steps it at once;
``receive_hold_max_ms`` at most).
So a node applying a long backlog (a restart, a far follower, a 100,000-record fencing) keeps
answering Fetches and votes meanwhile, a far follower reads its next Fetch answer between two
pieces of replay, and the core's per-poll delivery bounds (``deliveries_max_batches``,
``deliveries_max_records``) bound each piece.

A proposal's outcome is unknown when this node stops leading before the high watermark passes
it: its future then fails with NotLeaderError (the records may still commit under the next
leader, or be truncated).

Faults are decided, never suffered (Kafka's and etcd's rule: a node that cannot persist what it
promised must not go on promising):

    leader append out of space   the proposals fail (NotLeaderError), the leader resigns (another
                                 voter leads) and one ERROR line says why; the append was rolled back
    follower append out of space one WARNING line per Fetch answer it could not take; nothing was
                                 appended or promised, so it goes on fetching and catches up once
                                 space returns
    a peer's invalid data        (a bad batch in a Fetch answer) raised to the transport, which
                                 closes that connection with one ERROR line; the follower fetches again
    anything else                (a failed flush or quorum-state write, another storage error on
                                 an append, a listener that raised) the driver stops: one CRITICAL line, every
                                 waiter fails, ``failure`` holds the error and ``on_fatal(error)`` is
                                 called; the process must exit non-zero (raftnode.serve does), never
                                 live on with a dead driver
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kraftlog.raft.messages import Envelope
from kraftlog.raft.ready import StepFault, execute_ready, out_of_space, step_fault
from kraftlog.raft.state import Role
from kraftlog.raft.types import NO_ID, ClientBatch, Errors, NotLeaderError

log = logging.getLogger("kraftlog.raft.driver")


class MonotonicClock:
    """The core's clock: monotonic milliseconds, the same clock asyncio's loop.time() reads."""

    def milliseconds(self) -> int:
        return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class DriverConfig:
    linger_ms: int = 0  # how long the first queued proposal waits for more (0: this loop iteration)
    max_batch_records: int = 10_000  # records per appended batch
    max_batch_bytes: int = 1 << 20  # payload bytes per appended batch
    max_queued_records: int = 1_000_000  # proposals beyond this are refused (backpressure)
    polls_per_run_max: int = 16  # Readies acted on per wake-up before yielding to the loop
    # a wake-up polls no more Readies after this long (I/O runs in between); a delivery piece of
    # a backlog ends it sooner (see the module docstring)
    pass_budget_ms: int = 4
    # a pass that left delivery pieces for later while a peer's answer is half read (a Fetch
    # answer of megabytes arrives in reads of the socket buffer, ~2 MiB) holds the next piece
    # back until the answer is whole, looking again every receive_wait_ms: the loop reads the
    # answer as it comes meanwhile and steps it at once (a piece of replay, ~2 ms, between two
    # reads stalls the leader's socket writes: a far follower's catch-up ran ~10% slower). A
    # peer that sends slowly holds the backlog back receive_hold_max_ms at most
    receive_wait_ms: int = 1
    receive_hold_max_ms: int = 20


# resolve((base offset, last offset), None) once committed, or resolve(None, NotLeaderError)
Resolver = Callable[[tuple[int, int] | None, BaseException | None], None]


@dataclass(slots=True)
class _Waiter:
    base_offset: int
    last_offset: int
    epoch: int
    resolve: Resolver


def _size_bytes(values: Sequence[bytes]) -> int:
    """What a proposal adds to the queue's byte count: its values' bytes, or a Produce batch's
    whole size (a few bytes a record more than its values; counting them would decode them)."""
    return len(values.raw) if type(values) is ClientBatch else sum(len(v) for v in values)


def _future_resolver(future: asyncio.Future) -> Resolver:
    def resolve(result: tuple[int, int] | None, error: BaseException | None) -> None:
        if future.done():
            return  # cancelled by its owner
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)
    return resolve


class RaftDriver:
    """Drives ``core`` with ``log``, ``quorum_store``, ``snapshots`` (the same objects the core
    was built with), feeding committed batches to ``listener`` and sending through ``channel``
    (a RaftTransport, whose ``on_envelope``/``on_produce`` this driver takes over)."""

    def __init__(self, core, *, log, quorum_store, snapshots, listener, channel, config: DriverConfig | None = None):
        self.core = core
        self.log = log
        self.quorum_store = quorum_store
        self.snapshots = snapshots
        self.listener = listener
        self.channel = channel
        self.config = config or DriverConfig()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ms = -1
        self._queued: list[tuple[Sequence[bytes], Resolver]] = []
        self._queued_records = 0
        self._queued_bytes = 0
        self._linger: asyncio.TimerHandle | None = None
        self._linger_due = False
        self._waiters: deque[_Waiter] = deque()
        self._stopped = False
        self.polls = 0
        self.failure: BaseException | None = None  # why the driver stopped on a fault (see the docstring)
        self.on_fatal: Callable[[BaseException], None] | None = None
        # the pass a transport's read asks for runs at the read's end (_read_done), when the
        # transport promises to say when that is (see "wake-ups" in the module docstring)
        self._read_end_run = False
        in_read = hasattr(channel, "on_read_done")
        if in_read:
            channel.on_read_done = self._read_done
        if hasattr(channel, "on_envelope"):
            channel.on_envelope = self._on_read_envelope if in_read else self.on_envelope
        if hasattr(channel, "on_produce"):
            channel.on_produce = self._on_read_produce if in_read else self.on_produce
        self._receiving: Callable[[], bool] = getattr(channel, "receiving_response", lambda: False)
        self._piece_due = False  # the armed timer continues a pass cut short (a backlog's next piece)
        self._held_since_ms = 0  # when that piece began to wait for a half-read answer (0: it has not)

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Begin polling on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._wake()

    async def stop(self, *, resign: bool = True, grace_ms: int = 200) -> None:
        """Resign if leading (EndQuorumEpoch to the others, best placed first), give the messages
        ``grace_ms`` to leave, then stop polling. The caller closes transport and log."""
        if resign and self.core.role is Role.LEADER and not self._stopped:
            self.core.resign()
            self._run()
            await asyncio.sleep(grace_ms / 1000)
        self._stopped = True
        self._fail_waiters()
        for handle in (self._timer, self._linger):
            if handle is not None:
                handle.cancel()

    # ---- inputs -----------------------------------------------------------------------------

    def snapshot_written(self, snapshot_id) -> bool:
        """The listener finished snapshot ``snapshot_id`` in the store: let the core drop the log
        before it (the deletion is flushed by the next Ready)."""
        if self._stopped:
            return False
        moved = self.core.snapshot_written(snapshot_id)
        self._wake()
        return moved


    def on_envelope(self, env: Envelope) -> None:
        if self._step(env):
            self._wake()

    def _on_read_envelope(self, env: Envelope) -> None:
        """on_envelope for a transport's read: the pass waits for the read's end (_read_done)."""
        if self._step(env):
            self._wake_at_read_end()

    def _step(self, env: Envelope) -> bool:
        """Step ``env``; False when the driver is (or just got) stopped."""
        if self._stopped:
            return False
        try:
            self.core.step(env)
        except Exception as exc:
            fault = step_fault(exc)
            if fault is StepFault.INVALID_DATA:
                raise  # the transport closes that connection (one ERROR line)
            if fault is StepFault.STOP:
                self._die(exc)
                return False
            log.warning("node %d: cannot append what the leader sent (%s); fetching again until space returns",
                        self.core.node_id, exc)
        return True

    def append_point(self) -> tuple[int, int]:
        """(offset, epoch) the first record of the next proposal gets if every proposal queued
        before it is appended: the log end plus what is queued (a leader appends proposals in
        order, and nothing else, once its epoch's LeaderChange is written). A prediction: an
        append that fails shifts later ones, which the failed proposal's future reports."""
        return self.core.log.end_offset() + self._queued_records, self.core.epoch

    def propose(self, values: Sequence[bytes]) -> asyncio.Future:
        """Queue ``values`` for the log; the future gives (base offset, last offset) once they are
        committed. Raises NotLeaderError at once on a node that is not the leader."""
        future = self._loop.create_future()
        self._enqueue(values, _future_resolver(future))
        return future

    def on_produce(self, values, reply, *, in_read: bool = False) -> None:
        """The client API (a Produce request from the transport): answered from the pass that
        sees it committed (no future, no extra loop iteration: see the module docstring)."""
        core = self.core
        if not values:
            reply(Errors.INVALID_REQUEST, -1, core.leader_id, core.epoch, "no records")
            return

        def resolve(result: tuple[int, int] | None, error: BaseException | None) -> None:
            if error is None:
                reply(Errors.NONE, result[0], core.leader_id, core.epoch)
            else:
                reply(Errors.NOT_LEADER_OR_FOLLOWER, -1, core.leader_id, core.epoch)

        try:
            self._enqueue(values, resolve, in_read=in_read)
        except NotLeaderError:
            reply(Errors.NOT_LEADER_OR_FOLLOWER, -1, core.leader_id, core.epoch)

    def _on_read_produce(self, values, reply) -> None:
        self.on_produce(values, reply, in_read=True)

    def _enqueue(self, values: Sequence[bytes], resolve: Resolver, *, in_read: bool = False) -> None:
        core = self.core
        if core.role is not Role.LEADER or self._stopped:
            raise NotLeaderError(core.node_id, core.epoch, core.leader_id)
        if not values:
            raise ValueError("a proposal needs at least one record")
        if self._queued_records + len(values) > self.config.max_queued_records:
            raise NotLeaderError(core.node_id, core.epoch, core.node_id)  # overloaded: try again later
        self._queued.append((values, resolve))
        self._queued_records += len(values)
        self._queued_bytes += _size_bytes(values)
        cfg = self.config
        if self._queued_records >= cfg.max_batch_records or self._queued_bytes >= cfg.max_batch_bytes \
                or cfg.linger_ms <= 0:
            self._linger_due = True
            if in_read:
                self._wake_at_read_end()
            else:
                self._wake()
        elif self._linger is None:
            self._linger = self._loop.call_later(cfg.linger_ms / 1000, self._linger_fired)

    def _linger_fired(self) -> None:
        self._linger = None
        self._linger_due = True
        self._wake()

    # ---- the loop ---------------------------------------------------------------------------------

    def _wake(self) -> None:
        if not self._scheduled and not self._stopped:
            self._scheduled = True
            self._loop.call_soon(self._run)

    def _wake_at_read_end(self) -> None:
        if not self._scheduled and not self._stopped:
            self._scheduled = True
            self._read_end_run = True

    def _read_done(self) -> None:
        """The transport's read ended: its messages' pass runs now, or in the next loop iteration
        when other callbacks of this one may still bring messages ("wake-ups", module docstring)."""
        if not self._read_end_run:
            return
        self._read_end_run = False
        if getattr(self._loop, "_ready", True):  # not CPython's loop (no _ready): always the next iteration
            self._loop.call_soon(self._run)
        else:
            self._run()

    def _timer_fired(self) -> None:
        self._timer = None
        self._timer_at_ms = -1
        if self._piece_due and self._hold_piece():
            return
        self._run()

    def _hold_piece(self) -> bool:
        """Whether the backlog's next piece waits (a peer's answer is half read, and has held it
        back for less than receive_hold_max_ms): the timer then looks again receive_wait_ms later."""
        if not self._receiving():
            return False
        now_ms = time.monotonic_ns() // 1_000_000
        if not self._held_since_ms:
            self._held_since_ms = now_ms
        cfg = self.config
        if now_ms - self._held_since_ms >= cfg.receive_hold_max_ms:
            return False
        self._arm_timer(now_ms + cfg.receive_wait_ms)
        return True

    def _run(self) -> None:
        self._scheduled = False
        if self._stopped:
            return
        try:
            self._pass()
        except Exception as exc:  # noqa: BLE001 - decided here (see the docstring)
            self._die(exc)

    def _die(self, exc: BaseException) -> None:
        """Stop for good on a fault: one line, waiters failed, timers gone, the owner told."""
        log.critical("node %d: raft stopped: %s: %s", self.core.node_id, type(exc).__name__, exc,
                     exc_info=log.isEnabledFor(logging.DEBUG))
        self.failure = exc
        self._stopped = True
        self._fail_waiters()
        for handle in (self._timer, self._linger):
            if handle is not None:
                handle.cancel()
        if self.on_fatal is not None:
            self.on_fatal(exc)

    def _pass(self) -> None:
        self._piece_due = False
        self._held_since_ms = 0
        if self._waiters:
            # the read that woke this pass (a follower's Fetch) may have moved the high watermark
            # past waiting proposals: a Produce's answer is the one message on its client's path,
            # and leaves before the poll makes this pass's deliveries and Ready (its commit is on
            # a majority's disks already; the poll only adds what to persist, send and apply next)
            self._settle_waiters()
        if self._linger_due:
            self._append_queued()
        ready = None
        core = self.core
        before = (core.role, core.epoch, core.leader_id)
        give_up_ns = 0
        out_of_time = False
        for _ in range(self.config.polls_per_run_max):
            ready = self.core.poll()
            self.polls += 1
            self._settle_waiters()
            execute_ready(ready, quorum_store=self.quorum_store, log=self.log, channel=self.channel,
                          listener=self.listener, snapshots=self.snapshots)
            if ready.is_empty:
                break
            now_ns = time.monotonic_ns()
            if ready.deliveries and ready.next_poll_ms <= now_ns // 1_000_000:
                # a piece of a committed backlog, and more to come: the next piece waits one loop
                # iteration, in which the sockets are read (a far follower's next Fetch answer
                # arrives in reads of the kernel's socket buffer, ~2 MiB, one per iteration)
                out_of_time = True
                break
            if not give_up_ns:
                # the budget bounds the polls after the first, which persists and answers what
                # woke the pass: its fsync alone may outlast a 4 ms budget, and a commit would
                # then pay a loop iteration more for the empty poll that follows
                give_up_ns = now_ns + self.config.pass_budget_ms * 1_000_000
            elif now_ns >= give_up_ns:
                out_of_time = True
                break
        after = (core.role, core.epoch, core.leader_id)
        if after != before:
            log.info("node %d: %s(epoch %d) -> %s(epoch %d, leader %d)", core.node_id, before[0].value, before[1],
                     after[0].value, after[1], after[2])
        # out of time with work left: the timer fires in the next loop iteration, after the sockets
        # (once the answer is whole while one is half read: see DriverConfig.receive_wait_ms)
        if not out_of_time:
            self._arm_timer(ready.next_poll_ms)
            return
        self._piece_due = True
        if self._receiving():
            self._held_since_ms = now_ns // 1_000_000
            self._arm_timer(self._held_since_ms + self.config.receive_wait_ms)
        else:
            self._arm_timer(0)

    def _arm_timer(self, at_ms: int) -> None:
        if self._timer is not None:
            # an armed timer at or before at_ms stays: when it fires, the pass it runs arms the next
            # one. The next poll time moves later on almost every pass (a parked Fetch's deadline
            # is now + its wait), and a cancel plus call_at per pass was ~2% of a commit's CPU.
            if self._timer_at_ms <= at_ms:
                return
            self._timer.cancel()
        self._timer_at_ms = at_ms
        self._timer = self._loop.call_at(at_ms / 1000, self._timer_fired)

    # ---- proposals ---------------------------------------------------------------------------------

    def _append_queued(self) -> None:
        self._linger_due = False
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        queued, self._queued = self._queued, []
        self._queued_records = self._queued_bytes = 0
        core = self.core
        if core.role is not Role.LEADER:
            error = NotLeaderError(core.node_id, core.epoch, core.leader_id)
            for _, resolve in queued:
                resolve(None, error)
            return
        cfg = self.config
        batch: list[bytes] = []
        owners: list[tuple[int, Resolver]] = []  # (record count, resolver) in batch order
        size = 0
        for values, resolve in queued:
            if type(values) is ClientBatch:
                # a Produce's batch is appended as its own batch, as the client wrote it: merging
                # it into the lingering values would unpack it (what ClientBatch saves). The queue
                # bounds still held it (_enqueue), and a lone proposal above max_batch_records is
                # one batch on either path
                if batch:
                    self._append_batch(batch, owners)
                    batch, owners, size = [], [], 0
                self._append_batch(values, [(len(values), resolve)])
                continue
            if batch and (len(batch) + len(values) > cfg.max_batch_records
                          or size + sum(len(v) for v in values) > cfg.max_batch_bytes):
                self._append_batch(batch, owners)
                batch, owners, size = [], [], 0
            batch.extend(values)
            owners.append((len(values), resolve))
            size += sum(len(v) for v in values)
        if batch:
            self._append_batch(batch, owners)

    def _append_batch(self, records: Sequence[bytes], owners: list[tuple[int, Resolver]]) -> None:
        core = self.core
        try:
            last = core.append(records)
        except NotLeaderError as exc:  # resigned earlier in this pass (out of space)
            for _, resolve in owners:
                resolve(None, exc)
            return
        except Exception as exc:
            if not out_of_space(exc):
                raise
            log.error("node %d: the log is out of space (%s); resigning so another voter leads", core.node_id, exc)
            error = NotLeaderError(core.node_id, core.epoch, NO_ID)
            for _, resolve in owners:
                resolve(None, error)
            core.resign()
            return
        offset = last - len(records) + 1
        epoch = core.epoch
        for count, resolve in owners:
            self._waiters.append(_Waiter(offset, offset + count - 1, epoch, resolve))
            offset += count

    def _settle_waiters(self) -> None:
        waiters = self._waiters
        if not waiters:
            return
        core = self.core
        if core.role is not Role.LEADER or core.epoch != waiters[0].epoch:
            self._fail_waiters()
            return
        hw = core.high_watermark
        while waiters and waiters[0].last_offset < hw:
            w = waiters.popleft()
            w.resolve((w.base_offset, w.last_offset), None)

    def _fail_waiters(self) -> None:
        core = self.core
        error = NotLeaderError(core.node_id, core.epoch, core.leader_id)
        while self._waiters:
            self._waiters.popleft().resolve(None, error)
        queued, self._queued = self._queued, []
        self._queued_records = self._queued_bytes = 0
        for _, resolve in queued:
            resolve(None, error)
