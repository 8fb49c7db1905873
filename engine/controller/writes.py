"""The active controller's one write executor (Kafka's QuorumController event queue running
ControllerResults of the control managers).

A manager (controller.py's handlers, features.py, registration.py) plans a write as a pure function
of the image: a ``ControllerResult`` holding the records to write and the response to give once
they are in the image. ``WriteExecutor.run`` is the only code that writes:

    not active      the refusal NOT_CONTROLLER, nothing planned
    exclusive       the lock, then every pipelined write settled (below), so the plan sees every
                    earlier write in the image
    bootstrap       metadata.version first if the image has none (it decides every record's version)
    propose + wait  the records as one proposal (``atomic``) or split as Kafka's non-atomic
                    appendRecords; validated first (validation.py), then awaited into the image
    errors          one mapping: leadership lost -> NOT_CONTROLLER, not committed in time ->
                    REQUEST_TIMED_OUT, refused before proposing (a controller bug) -> UNKNOWN_SERVER_ERROR

Writers that are not request handlers (fencing, healing, heartbeat transitions) enter
``exclusive()`` and call ``write`` / ``write_many`` / ``write_proposals`` themselves and catch
``WRITE_ERRORS``.

Pipelined writes (the group-committed CreateTopics, Kafka's QuorumController pipelining):
``pipeline`` validates and proposes under the bare ``lock`` and returns at once, so the next
CreateTopics plans and proposes while the earlier one commits (on a 2-core machine the active
controller sat idle ~75% of a CreateTopics run waiting for commits). Such a plan must see what is
proposed but not yet in the image: CreateTopics only adds topics, so what it must see of a
pending write is its topic names, which the handler keeps itself (controller.py). Every other
writer plans against the image alone, so ``exclusive()`` first waits until every pipelined write
has settled: committed and in the image, or failed with the leadership (NotLeaderError). A
pipelined write that only timed out is still pending: its records may yet commit, so it keeps
holding writers off (up to write_timeout_ms each time, then TimeoutError) until Raft decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from kio.schema.errors import ErrorCode

from kraftlog.engine.controller.speculation import Speculation
from kraftlog.engine.controller.validation import InvalidRecordsError, check_records
from kraftlog.engine.image import versions
from kraftlog.engine.image.image import METADATA_VERSION, MetadataImage, Provenance
from kraftlog.engine.records import metadata as codec
from kraftlog.errors import KraftlogError
from kraftlog.raft.types import NotLeaderError

log = logging.getLogger("kraftlog.controller")

R = TypeVar("R")


class NotActiveError(KraftlogError):
    """This node is not, or stopped being, the active controller."""


WRITE_ERRORS = (NotActiveError, TimeoutError, InvalidRecordsError)


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[R]):
    """What a manager decided: ``records`` to write (``atomic``: as one proposal, else split as
    Kafka's non-atomic appendRecords) and the ``response`` to answer once they are in the image;
    or ``after``, called with the image once they are in it, which gives the response (an answer
    that reports the state after the write, a log line, in-memory state such as sessions)."""

    records: Sequence[bytes] = ()
    response: R | None = None
    atomic: bool = True
    after: Callable[[MetadataImage], R] | None = None


def failure(exc: BaseException, what: str) -> tuple[ErrorCode, str]:
    """The error code and message of a write of ``what`` that did not happen."""
    if isinstance(exc, NotActiveError):
        return ErrorCode.not_controller, f"lost leadership before the write of {what} was committed"
    if isinstance(exc, TimeoutError):
        return ErrorCode.request_timed_out, f"the write of {what} was not committed in time"
    log.error("refused to propose %s: %s", what, exc)
    return ErrorCode.unknown_server_error, f"the write of {what} was refused before proposing: {exc}"


Plan = Callable[[MetadataImage], "ControllerResult[R] | Awaitable[ControllerResult[R]]"]


class WriteExecutor:
    """Writes through ``driver`` (a RaftDriver: ``propose``, ``config``) and waits for
    ``publisher`` (an ImagePublisher: ``image``, ``next_offset``, ``wait_applied``)."""

    def __init__(self, driver, publisher, *, is_active: Callable[[], bool], write_timeout_ms: int,
                 max_records_per_batch: int):
        self.driver, self.publisher = driver, publisher
        self.is_active = is_active
        self.write_timeout_ms = write_timeout_ms
        self.max_records_per_batch = max_records_per_batch
        self.lock = asyncio.Lock()
        self.proposals = 0  # proposals made (a counter tests and benchmarks read)
        self._pending = 0  # pipelined writes not yet settled (module docstring)
        self._settled = asyncio.Event()
        self._settled.set()

    @contextlib.asynccontextmanager
    async def exclusive(self):
        """The lock, held once every pipelined write has settled: what a write planned against
        the image alone needs (module docstring). TimeoutError if one has not settled within
        write_timeout_ms (a write proposed before a lost quorum or a stalled leader)."""
        async with self.lock:
            if not self._settled.is_set():
                await asyncio.wait_for(self._settled.wait(), self.write_timeout_ms / 1000)
            yield

    async def run(self, plan: Plan, *, refuse: Callable[[ErrorCode, str], R], what: str) -> R:
        """Plan against the image under the lock and write what the plan says (module docstring);
        ``refuse(code, message)`` builds the answer of a write that could not happen."""
        if not self.is_active():
            return refuse(ErrorCode.not_controller, "not the active controller")
        try:
            async with self.exclusive():
                await self.ensure_bootstrapped()
                result = plan(self.publisher.image)
                if inspect.isawaitable(result):
                    result = await result
                if result.records:
                    await (self.write(list(result.records)) if result.atomic else self.write_many(list(result.records)))
                return result.response if result.after is None else result.after(self.publisher.image)
        except WRITE_ERRORS as exc:
            return refuse(*failure(exc, what))

    async def ensure_bootstrapped(self) -> None:
        """Write metadata.version first if the image has none (call with the lock held): every
        write runs this, so no record is written before the level that decides its version."""
        if not self.publisher.image.features.metadata_version:
            await self.write([codec.encode_record("FeatureLevelRecord", 0, {
                "Name": METADATA_VERSION, "FeatureLevel": versions.LATEST})])
            log.info("bootstrapped metadata.version %s", versions.name(versions.LATEST))

    async def write(self, records: list[bytes]) -> int:
        """Propose ``records`` as one proposal (call with the lock held); return once they are in
        the image. Returns the offset of the first record."""
        base, _ = await self.write_proposals([records])
        return base

    async def write_many(self, records: list[bytes]) -> int:
        """Write ``records`` in order, split into proposals of at most ``max_records_per_batch``
        records and the driver's max_batch_bytes (Kafka's non-atomic appendRecords): all are
        proposed at once, in order, and this returns once the last is in the image. Returns the
        offset of the last record (with nothing to write: the last offset in the image)."""
        if not records:
            return self.publisher.next_offset - 1
        driver_config = getattr(self.driver, "config", None)
        max_records = min(self.max_records_per_batch,
                          getattr(driver_config, "max_batch_records", self.max_records_per_batch))
        max_bytes = getattr(driver_config, "max_batch_bytes", 1 << 62)
        chunks, chunk, size = [], [], 0
        for value in records:
            if chunk and (len(chunk) >= max_records or size + len(value) > max_bytes):
                chunks.append(chunk)
                chunk, size = [], 0
            chunk.append(value)
            size += len(value)
        if chunk:
            chunks.append(chunk)
        _, last = await self.write_proposals(chunks)
        return last

    async def write_proposals(self, proposals: list[list[bytes]]) -> tuple[int, int]:
        """Propose each list as one proposal, in order (call with the lock held); return (first
        offset, last offset) once all are in the image."""
        return await self.committed(self.pipeline(proposals))

    def pipeline(self, proposals: list[list[bytes]]) -> asyncio.Future:
        """Validate ``proposals`` and propose each list as one proposal, in order (call with the
        lock held), and return at once: the lock may pass to the next writer before they commit
        (module docstring). Await the result with ``committed``."""
        if not self.is_active():
            raise NotActiveError()
        values = [v for records in proposals for v in records]
        publisher = self.publisher
        append_point = getattr(self.driver, "append_point", None)  # a RaftDriver has it
        base_offset, epoch = append_point() if append_point is not None else (publisher.next_offset, -1)
        # never propose what this controller could not replay (validation.py): InvalidRecordsError.
        # It replays them onto the image of the writes before them (speculation.py), and
        # pipelined writes before these only add topics these do not name (the handler's rule).
        checked = check_records(publisher.speculations.tail_image(publisher.image), values, base_offset=base_offset)
        try:
            futures = [self.driver.propose(records) for records in proposals]
        except NotLeaderError:
            publisher.speculations.clear()
            raise NotActiveError() from None
        # a metadata.version change is replayed at commit: lowering it reloads the image (controller.py)
        if checked is not None and append_point is not None and not checked.feature_levels:
            publisher.speculate(Speculation(base_offset, base_offset + len(values), epoch, checked.delta,
                                            checked.delta.apply(Provenance(base_offset + len(values) - 1, epoch)),
                                            checked.manifest, tuple(futures)))
        self._pending += 1
        self._settled.clear()
        self.proposals += len(proposals)
        settling = asyncio.ensure_future(self._settle(futures))
        # a write whose waiter timed out still settles; its outcome is then nobody's to read
        settling.add_done_callback(lambda f: f.cancelled() or f.exception())
        return settling

    async def committed(self, settling: asyncio.Future) -> tuple[int, int]:
        """(first offset, last offset) of a pipelined write once it is in the image: NotActiveError
        if the leadership went first, TimeoutError after write_timeout_ms (it stays pending)."""
        try:
            return await asyncio.wait_for(asyncio.shield(settling), self.write_timeout_ms / 1000)
        except NotLeaderError:
            raise NotActiveError() from None

    async def _settle(self, futures: list[asyncio.Future]) -> tuple[int, int]:
        """Wait for every proposal of one write: each either commits or fails with the leadership
        (raft/aio/driver.py), so this always ends; then for the image to hold the last."""
        try:
            done = await asyncio.gather(*futures, return_exceptions=True)
            failed = next((d for d in done if isinstance(d, BaseException)), None)
            if failed is not None:
                raise failed
            await self.publisher.wait_applied(done[-1][1])
            return done[0][0], done[-1][1]
        finally:
            self._pending -= 1
            if not self._pending:
                self._settled.set()
