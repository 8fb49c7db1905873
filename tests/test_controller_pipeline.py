"""CreateTopics is pipelined (engine/controller/writes.py): the next request plans and proposes
while the earlier one is still uncommitted, seeing its topic names; every other writer waits
until pipelined writes settle (committed and in the image, or failed with the leadership), and a
write that only timed out keeps its names taken until Raft decides.

The driver here holds every proposal until the test commits or fails it, so "uncommitted" is a
state the test controls, not a race it hopes to win.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from types import SimpleNamespace

from kio.schema.create_topics.v7 import request as ct_req
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from kraftlog.engine.controller.controller import ControllerConfig, ImagePublisher
from kraftlog.engine.controller.writes import ControllerResult
from kraftlog.engine.image import versions
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec
from kraftlog.raft.aio.driver import DriverConfig
from kraftlog.raft.state import Role
from kraftlog.raft.types import NotLeaderError
from tests.test_controller_partitions import serve_active

LEVEL = versions.LATEST


class _HeldDriver:
    """A RaftDriver stand-in whose proposals wait until ``commit_all`` (into the publisher, one
    batch each, in order) or ``fail_all`` (NotLeaderError, as a lost leadership fails them)."""

    def __init__(self, publisher: ImagePublisher):
        self.core = SimpleNamespace(role=Role.LEADER, epoch=1)
        self.config = DriverConfig()
        self.publisher = publisher
        self.end = publisher.next_offset
        self.log = SimpleNamespace(end_offset=lambda: self.end)
        self.held: list[tuple[list[bytes], asyncio.Future]] = []

    def propose(self, values):
        future = asyncio.get_running_loop().create_future()
        self.held.append((list(values), future))
        return future

    def commit_all(self) -> None:
        held, self.held = self.held, []
        for values, future in held:
            base = self.end
            self.end += len(values)
            raw = batch.build_batch_from_values(values, base_offset=base, timestamp_ms=0)
            self.publisher.handle_commit(SimpleNamespace(raw=raw, next_offset=self.end))
            future.set_result((base, self.end - 1))

    def fail_all(self) -> None:
        held, self.held = self.held, []
        for _, future in held:
            future.set_exception(NotLeaderError(1, 1, -1))


def _request(*names: str) -> ct_req.CreateTopicsRequest:
    return ct_req.CreateTopicsRequest(topics=tuple(
        ct_req.CreatableTopic(name=n, num_partitions=i32(2), replication_factor=i16(1), assignments=(), configs=())
        for n in names))


def _codes(answer) -> list[tuple[str, ErrorCode]]:
    return [(t.name, t.error_code) for t in answer.topics]


async def _until(predicate, turns: int = 10_000) -> None:
    """Let the loop run until ``predicate()`` holds (no clock involved: each turn is one pass of
    the loop, and nothing here waits on time); fail once ``turns`` passes went by without it."""
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not reached in {turns} loop turns")


def _run(scenario, *, write_timeout_ms: int = 60_000) -> None:
    """``scenario(controller, driver)`` against an active controller over one live broker."""
    values = [codec.encode_record("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": LEVEL}),
              codec.encode_record("RegisterBrokerRecord", versions.register_broker_record_version(LEVEL), {
                  "BrokerId": 101, "IncarnationId": uuid.UUID(int=101), "BrokerEpoch": 5, "EndPoints": [],
                  "Features": [], "Rack": None, "Fenced": False, "LogDirs": []}, allow_loss=True)]

    async def main():
        publisher = ImagePublisher()
        raw = batch.build_batch_from_values(values, base_offset=0, timestamp_ms=0)
        publisher.handle_commit(SimpleNamespace(raw=raw, next_offset=len(values)))
        await serve_active(publisher, _HeldDriver(publisher), ControllerConfig(
            fence_check_interval_ms=600_000, write_timeout_ms=write_timeout_ms), scenario, rng=random.Random(7))

    asyncio.run(main())


def test_a_create_plans_and_proposes_while_the_one_before_is_uncommitted():
    """The second request is proposed before the first commits, and it sees the first's names:
    a name the first is creating is TOPIC_ALREADY_EXISTS, a new name is proposed."""
    async def scenario(controller, driver):
        first = asyncio.ensure_future(controller.create_topics(_request("a", "b")))
        await _until(lambda: len(driver.held) == 1)
        second = asyncio.ensure_future(controller.create_topics(_request("b", "c")))
        await _until(lambda: len(driver.held) == 2)  # proposed with the first still uncommitted
        assert not first.done() and not second.done()
        assert "a" not in set(controller.publisher.image.topics.topic_names())
        driver.commit_all()
        ok, exists = ErrorCode.none, ErrorCode.topic_already_exists
        assert _codes(await first) == [("a", ok), ("b", ok)]
        assert _codes(await second) == [("b", exists), ("c", ok)]
        image = controller.publisher.image
        assert set(image.topics.topic_names()) == {"a", "b", "c"}
        assert image.topics.topic("b").topic_id == (await first).topics[1].topic_id

    _run(scenario)


def test_other_writers_plan_only_once_pipelined_creates_are_in_the_image():
    """A write planned against the image alone (here a registration-style ``executor.run``) is not
    planned while a create is uncommitted; once it commits, the plan sees the created topic."""
    async def scenario(controller, driver):
        seen = []

        def plan(image):
            seen.append(set(image.topics.topic_names()))
            return ControllerResult(response="planned")

        create = asyncio.ensure_future(controller.create_topics(_request("x")))
        await _until(lambda: len(driver.held) == 1)
        other = asyncio.ensure_future(controller.executor.run(plan, refuse=lambda code, why: code, what="test"))
        for _ in range(50):  # many loop turns: the plan must not run while "x" is uncommitted
            await asyncio.sleep(0)
        assert seen == [] and not other.done()
        driver.commit_all()
        assert _codes(await create) == [("x", ErrorCode.none)]
        assert await other == "planned"
        assert seen == [{"x"}]

    _run(scenario)


def test_a_lost_leadership_answers_not_controller_and_frees_the_names():
    """Proposals failed by a lost leadership answer NOT_CONTROLLER; their names are no longer
    taken, so a later request (after the leadership came back) may create them."""
    async def scenario(controller, driver):
        first = asyncio.ensure_future(controller.create_topics(_request("lost")))
        await _until(lambda: len(driver.held) == 1)
        driver.fail_all()
        assert _codes(await first) == [("lost", ErrorCode.not_controller)]
        await _until(lambda: not controller._creating)
        again = asyncio.ensure_future(controller.create_topics(_request("lost")))
        await _until(lambda: len(driver.held) == 1)
        driver.commit_all()
        assert _codes(await again) == [("lost", ErrorCode.none)]
        assert controller.publisher.image.topics.topic_row("lost") is not None

    _run(scenario)


def test_a_timed_out_create_keeps_its_names_until_raft_decides():
    """A create not committed within write_timeout_ms answers REQUEST_TIMED_OUT, but its records
    may still commit: its name stays taken (a second create of it is TOPIC_ALREADY_EXISTS, never a
    duplicate TopicRecord every node would fail to replay) and other writers keep waiting (they
    time out too) until it commits; then they plan against the image that holds it."""
    async def scenario(controller, driver):
        first = await controller.create_topics(_request("slow"))  # the driver holds it: it times out
        assert _codes(first) == [("slow", ErrorCode.request_timed_out)]
        again = await controller.create_topics(_request("slow"))  # nothing to write: answered at once
        assert _codes(again) == [("slow", ErrorCode.topic_already_exists)]
        second = await controller.create_topics(_request("fresh"))  # pipelined behind it: times out too
        assert _codes(second) == [("fresh", ErrorCode.request_timed_out)]
        refused = await controller.executor.run(lambda image: ControllerResult(response="planned"),
                                                refuse=lambda code, why: code, what="test")
        assert refused == ErrorCode.request_timed_out  # waited for the pipeline, in vain
        driver.commit_all()
        await _until(lambda: not controller._creating)
        names = set(controller.publisher.image.topics.topic_names())
        assert names == {"slow", "fresh"}
        assert await controller.executor.run(lambda image: ControllerResult(response="planned"),
                                             refuse=lambda code, why: code, what="test") == "planned"

    _run(scenario, write_timeout_ms=200)
