"""The active controller replays its own writes once (engine/controller/speculation.py): the
replay made when it checked the records is published when they commit, and whenever the commit
is not certain to be those records at those offsets, the commit is replayed instead.

Every test compares the controller's image with a fresh Loader's replay of exactly the bytes
that were committed, so a wrongly adopted speculation fails it. The driver here holds proposals
until the test commits them (one batch each, one run of several, shifted, in another epoch, or
with a proposal failed), so no outcome depends on timing; the last test runs a real RaftDriver.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from types import SimpleNamespace

import pytest
from image_summary import full_summary
from kio.schema.create_topics.v7 import request as ct_req
from kio.static.primitive import i16, i32

from kraftlog.engine.controller.controller import ControllerConfig, ImagePublisher
from kraftlog.engine.image import versions
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.node.node import MetadataNode
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec
from kraftlog.raft import wire
from kraftlog.raft.aio.driver import DriverConfig
from kraftlog.raft.core import RaftConfig
from kraftlog.raft.state import Role
from kraftlog.raft.types import NotLeaderError
from tests.test_controller_partitions import serve_active

LEVEL = versions.LATEST
EPOCH = 1
NOOP = codec.encode_record("NoOpRecord", 0, {})


def _bootstrap_values() -> list[bytes]:
    return [codec.encode_record("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": LEVEL}),
            codec.encode_record("RegisterBrokerRecord", versions.register_broker_record_version(LEVEL), {
                "BrokerId": 101, "IncarnationId": uuid.UUID(int=101), "BrokerEpoch": 5, "EndPoints": [],
                "Features": [], "Rack": None, "Fenced": False, "LogDirs": []}, allow_loss=True)]


class _Driver:
    """A RaftDriver stand-in with RaftDriver.append_point: proposals wait until the test commits
    them as record batches (WireBatches, as the engine log hands them to the listener)."""

    def __init__(self, publisher: ImagePublisher):
        self.core = SimpleNamespace(role=Role.LEADER, epoch=EPOCH)
        self.config = DriverConfig()
        self.publisher = publisher
        self.end = publisher.next_offset
        self.held: list[tuple[list[bytes], asyncio.Future]] = []
        self.committed: list[bytes] = []  # every committed batch's bytes, in log order
        self.timestamp_ms = 1_700_000_000_000

    def append_point(self) -> tuple[int, int]:
        return self.end + sum(len(values) for values, _ in self.held), EPOCH

    def propose(self, values):
        future = asyncio.get_running_loop().create_future()
        self.held.append((list(values), future))
        return future

    def batch(self, values: list[bytes], *, epoch: int = EPOCH) -> bytes:
        self.timestamp_ms += 1
        raw = batch.build_batch_from_values(values, base_offset=self.end, partition_leader_epoch=epoch,
                                            timestamp_ms=self.timestamp_ms)
        self.end += len(values)
        self.committed.append(raw)
        return raw

    def commit(self, *, together: bool = False, epoch: int = EPOCH, split: bool = False) -> None:
        """Commit every held proposal in order: a batch each (``split``: the first cut in two), all
        delivered in one run when ``together``."""
        held, self.held = self.held, []
        raws, results = [], []
        for k, (values, future) in enumerate(held):
            base = self.end
            if split and k == 0 and len(values) > 1:
                raws += [self.batch(values[:1], epoch=epoch), self.batch(values[1:], epoch=epoch)]
            else:
                raws.append(self.batch(values, epoch=epoch))
            results.append((future, (base, self.end - 1)))
        run = wire.split_batches(b"".join(raws))
        if together:
            self.publisher.handle_commits(run)
        else:
            for b in run:
                self.publisher.handle_commit(b)
        for future, result in results:
            future.set_result(result)

    def fail_first(self) -> None:
        """The first held proposal fails (its append did), so the next ones land at lower offsets."""
        values, future = self.held.pop(0)
        future.set_exception(NotLeaderError(1, EPOCH, -1))

    def commit_foreign(self) -> None:
        """A record nobody here proposed, committed before the held ones (their offsets shift)."""
        self.publisher.handle_commit(wire.split_batches(self.batch([NOOP]))[0])


def _request(*names: str) -> ct_req.CreateTopicsRequest:
    return ct_req.CreateTopicsRequest(topics=tuple(
        ct_req.CreatableTopic(name=n, num_partitions=i32(3), replication_factor=i16(1), assignments=(), configs=())
        for n in names))


def _replayed(driver: _Driver) -> Loader:
    loader = Loader()
    loader.replay(b"".join(driver.committed))
    return loader


def _run(scenario) -> None:
    async def main():
        publisher = ImagePublisher()
        driver = _Driver(publisher)
        driver.publisher.handle_commit(wire.split_batches(driver.batch(_bootstrap_values()))[0])
        await serve_active(publisher, driver, ControllerConfig(fence_check_interval_ms=600_000), scenario,
                           rng=random.Random(5))

    asyncio.run(main())


def _same_as_replay(controller, driver) -> None:
    image, replayed = controller.publisher.image, _replayed(driver).image
    assert full_summary(image) == full_summary(replayed)
    assert image.provenance == replayed.provenance
    assert controller.publisher.next_offset == driver.end


async def _propose_creates(controller, driver, *batches: tuple[str, ...]) -> list[asyncio.Future]:
    answers = []
    for names in batches:
        answers.append(asyncio.ensure_future(controller.create_topics(_request(*names))))
        while len(driver.held) < len(answers):
            await asyncio.sleep(0)
    return answers


@pytest.mark.parametrize("together", [False, True], ids=["a-batch-each", "one-run"])
def test_pipelined_creates_are_published_from_their_check_without_a_second_replay(together):
    """Three pipelined CreateTopics, each checked against the one before it: their commits
    publish the checked images (one per write, in order, even from one delivered run); the loader
    never replays them, and the image equals a replay of the committed bytes, KIP-232 topic epochs
    (offsets) and the provenance's batch timestamp included."""
    async def scenario(controller, driver):
        publisher = controller.publisher
        published, replays = [], []
        publisher.loader.publishers.append(lambda delta, image, manifest: published.append(image))
        real_replay = publisher.loader.replay_decoded
        publisher.loader.replay_decoded = lambda *a, **k: replays.append(1) or real_replay(*a, **k)
        answers = await _propose_creates(controller, driver, ("a", "b"), ("c",), ("d", "e"))
        assert len(publisher.speculations) == 3
        driver.commit(together=together)
        for a in answers:
            assert all(int(t.error_code) == 0 for t in (await a).topics)
        assert publisher.speculations.adopted == 3 and not replays
        assert [sorted(i.topics.topic_names()) for i in published] == [
            ["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d", "e"]]
        _same_as_replay(controller, driver)

    _run(scenario)


@pytest.mark.parametrize("mismatch", ["foreign-record-first", "another-epoch", "first-failed", "split-batch"])
def test_commits_other_than_the_speculated_ones_are_replayed(mismatch):
    """A commit that is not certainly the speculated records at the speculated offsets (a record
    nobody here proposed shifts them; the batches carry another epoch; the first proposal failed,
    so the second's records sit at the first's offsets; a delivery ends inside a speculation)
    drops the chain and is replayed: the image is the replay of what was committed."""
    async def scenario(controller, driver):
        publisher = controller.publisher
        # two writes of one topic each: the same record count, so a failed first leaves the second
        # at exactly the first's speculated offsets
        await _propose_creates(controller, driver, ("a",), ("c",))
        assert len(publisher.speculations) == 2
        if mismatch == "foreign-record-first":
            driver.commit_foreign()
        elif mismatch == "first-failed":
            driver.fail_first()
            await asyncio.sleep(0)  # the failed future's callbacks run
        driver.commit(epoch=EPOCH + 1 if mismatch == "another-epoch" else EPOCH, split=mismatch == "split-batch")
        await asyncio.sleep(0)
        assert publisher.speculations.adopted == 0 and len(publisher.speculations) == 0
        names = set(publisher.image.topics.topic_names())
        assert names == ({"c"} if mismatch == "first-failed" else {"a", "c"})
        _same_as_replay(controller, driver)

    _run(scenario)


def test_a_metadata_version_write_is_replayed_at_commit():
    """A FeatureLevelRecord (lowering metadata.version reloads the image at commit) is never
    speculated on."""
    async def scenario(controller, driver):
        async with controller.executor.exclusive():
            write = asyncio.ensure_future(controller.executor.write([codec.encode_record(
                "FeatureLevelRecord", 0, {"Name": "transaction.version", "FeatureLevel": 1})]))
            while not driver.held:
                await asyncio.sleep(0)
            assert len(controller.publisher.speculations) == 0
            driver.commit()
            await write
        assert controller.publisher.image.features.finalized["transaction.version"] == 1
        _same_as_replay(controller, driver)

    _run(scenario)


def test_a_real_raft_leader_publishes_its_pipelined_creates_from_their_checks(tmp_path):
    """A one-voter MetadataNode (a real RaftDriver, engine log and fsyncs): 20 CreateTopics in
    flight at once are all adopted (none replayed, none dropped), and the controller's image equals
    a fresh replay of its own log."""
    async def scenario():
        node = MetadataNode(1, {1: ("127.0.0.1", 0)}, str(tmp_path / "n1"), cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
                            config=RaftConfig(election_timeout_ms=150, election_backoff_max_ms=100),
                            controller_config=ControllerConfig(fence_check_interval_ms=600_000), seed=1)
        await node.start()
        try:
            controller, publisher = node.controller, node.machine
            while not controller.is_active:
                await asyncio.sleep(0.01)
            async with controller.executor.exclusive():
                await controller.executor.ensure_bootstrapped()
                await controller.executor.write(_bootstrap_values()[1:])
            adopted, replays = publisher.speculations.adopted, []
            for name in ("replay", "replay_decoded"):  # the two ways a commit is replayed
                real = getattr(publisher.loader, name)
                setattr(publisher.loader, name, lambda *a, real=real, **k: replays.append(1) or real(*a, **k))
            answers = await asyncio.gather(*(controller.create_topics(_request(f"t{k:02d}-a", f"t{k:02d}-b"))
                                             for k in range(20)))
            assert all(int(t.error_code) == 0 for a in answers for t in a.topics)
            # group commit may check several requests as one write: at least one, all adopted
            assert publisher.speculations.adopted > adopted and publisher.speculations.dropped == 0
            assert not replays
            replayed = Loader()
            replayed.replay(node.log.read(0, 1 << 30).raw)
            assert len(list(replayed.image.topics.topic_names())) == 40
            assert full_summary(publisher.image) == full_summary(replayed.image)
            assert publisher.image.provenance == replayed.image.provenance
        finally:
            await node.stop(resign=False)

    asyncio.run(scenario())
