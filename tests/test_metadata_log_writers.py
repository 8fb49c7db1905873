"""Proves that only controllers write the metadata log (issue #20, item 1).

Fast, in-process: the controller's pre-proposal check (engine/controller/validation.py) refuses a
TopicRecord with an illegal name, a PartitionRecord naming an unregistered replica, an ISR outside
the replicas, a record for an unknown topic and undecodable bytes; it accepts what CreateTopics
writes and leaves the image it checked against untouched; a Controller whose write would carry
such a record answers UNKNOWN_SERVER_ERROR and proposes nothing.

Slow, with real processes and an independent client (a kio ProduceRequest v10 carrying a batch
built by aiokafka): a combined `kraftlog node run` node answers a Produce to __cluster_metadata
with INVALID_TOPIC_EXCEPTION (Kafka's answer for an internal topic) and another topic with
UNKNOWN_TOPIC_OR_PARTITION, logs the reason once per connection, its log end does not move and no
topic appears (Metadata, then `kraftlog image show` on the stopped node); a bare raftnode (the
embedded log backend) still commits the same Produce.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import sys
import uuid
from types import SimpleNamespace

import pytest
from aiokafka.record import default_records as aiokafka_records
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req
from kio.schema.produce.v10 import request as kproduce_req
from kio.schema.produce.v10 import response as kproduce_resp
from kio.static.primitive import Records, i16, i32

from kraftlog.engine.controller import validation
from kraftlog.engine.controller.controller import Controller, ImagePublisher
from kraftlog.engine.image import workload
from kraftlog.engine.image.loader import Loader
from kraftlog.engine.node.raftnode import RaftClient
from kraftlog.engine.protocol.connection import ClientConnection
from kraftlog.engine.protocol.metadata_response import EpochMetadataResponse
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec
from kraftlog.raft.aio.driver import DriverConfig
from kraftlog.raft.state import Role
from tests.test_node_controller import NodeCluster, _ask, wait_until
from tests.test_raft_cluster import ProcessCluster

# ---- the pre-proposal check ----------------------------------------------------------------------


def _loaded(values: list[bytes]):
    loader = Loader()
    loader.replay(batch.build_batch_from_values(values, base_offset=0, timestamp_ms=0))
    return loader


def _partition(topic_id: uuid.UUID, replicas: list[int], isr: list[int], leader: int) -> bytes:
    return codec.encode_record("PartitionRecord", 0, {"PartitionId": 0, "TopicId": topic_id, "Replicas": replicas,
                                                      "Isr": isr, "Leader": leader, "LeaderEpoch": 0,
                                                      "PartitionEpoch": 0})


def test_check_refuses_what_no_node_could_apply_and_accepts_what_create_topics_writes():
    """Each bad record is refused with a message naming it; the good half of a generated
    workload passes, and the image the check replayed onto is unchanged."""
    values = list(workload.generate(workload.WorkloadShape(topics=200, partitions_per_topic=5,
                                                           replicas_per_broker=300)))
    half = len(values) // 2
    loader = _loaded(values[:half])
    image = loader.image
    partitions_before = image.topics.partition_count
    validation.check_records(image, values[half:], base_offset=half)
    assert image.topics.partition_count == partitions_before  # the check replays onto a delta only
    loader.replay(batch.build_batch_from_values(values[half:], base_offset=half, timestamp_ms=0))
    assert loader.image.topics.partition_count == 1000

    known = uuid.uuid4()
    topic = codec.encode_record("TopicRecord", 0, {"Name": "fine", "TopicId": known})
    cases = {
        "bad name": ([codec.encode_record("TopicRecord", 0, {"Name": "bad name!", "TopicId": uuid.uuid4()})],
                     "characters other than"),
        "replica 999": ([topic, _partition(known, [0, 999], [0], 0)], "not a registered broker"),
        "isr outside": ([topic, _partition(known, [0, 1], [0, 2], 0)], "outside its replicas"),
        "leader outside": ([topic, _partition(known, [0, 1], [0, 1], 2)], "leader is not one of its replicas"),
        "unknown topic": ([_partition(uuid.uuid4(), [0], [0], 0)], "unknown topic id"),
        "garbage": ([b"\x01\x02garbage"], "cannot replay"),
    }
    for name, (records, why) in cases.items():
        with pytest.raises(validation.InvalidRecordsError, match=why):
            validation.check_records(loader.image, records, base_offset=10_000)
        assert name  # each case above raised


class _RecordingDriver:
    """A leader that records proposals (none should arrive)."""

    def __init__(self):
        self.core = SimpleNamespace(role=Role.LEADER, epoch=1)
        self.config = DriverConfig()
        self.proposals: list = []
        self.log = SimpleNamespace(end_offset=lambda: 0)

    def propose(self, values):
        self.proposals.append(values)
        raise AssertionError("a refused write was proposed")


def test_controller_refuses_before_proposing_and_answers_unknown_server_error():
    """A write whose records fail the check raises InvalidRecordsError before anything is
    proposed, and the handlers answer it UNKNOWN_SERVER_ERROR (leadership loss and timeouts keep
    NOT_CONTROLLER and REQUEST_TIMED_OUT)."""
    from kraftlog.engine.controller.writes import NotActiveError
    from kraftlog.engine.controller.writes import failure as _write_failure

    loader = _loaded([codec.encode_record("FeatureLevelRecord", 0, {"Name": "metadata.version",
                                                                     "FeatureLevel": 26})])

    async def scenario():
        publisher = ImagePublisher()
        publisher.loader.image = loader.image
        driver = _RecordingDriver()
        controller = Controller(1, None, driver, publisher)
        publisher.leader = (1, 1)
        assert controller.is_active
        bad = [codec.encode_record("TopicRecord", 0, {"Name": "bad name!", "TopicId": uuid.uuid4()})]
        with pytest.raises(validation.InvalidRecordsError) as refused:
            await controller.executor.write(bad)
        assert driver.proposals == []
        return refused.value

    refused = asyncio.run(scenario())
    assert _write_failure(refused, "topics")[0] == ErrorCode.unknown_server_error
    assert _write_failure(NotActiveError(), "topics")[0] == ErrorCode.not_controller
    assert _write_failure(TimeoutError(), "topics")[0] == ErrorCode.request_timed_out


# ---- live: Produce refused on metadata nodes, served by the bare raft node ------------------------------


def _aiokafka_batch(values: list[bytes]) -> bytes:
    builder = aiokafka_records.DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i, v in enumerate(values):
        builder.append(i, 0, None, v, [])
    return bytes(builder.build())


def _produce(topic: str, values: list[bytes], acks: int = -1) -> kproduce_req.ProduceRequest:
    part = kproduce_req.PartitionProduceData(index=i32(0), records=Records(_aiokafka_batch(values)))
    return kproduce_req.ProduceRequest(transactional_id=None, acks=i16(acks),
                                       timeout=datetime.timedelta(seconds=10),
                                       topic_data=(kproduce_req.TopicProduceData(name=topic, partition_data=(part,)),))


BAD_RECORDS = [codec.encode_record("TopicRecord", 0, {"Name": "bad name!", "TopicId": uuid.uuid4()}),
               codec.encode_record("TopicRecord", 0, {"Name": "sneaky", "TopicId": uuid.uuid4()}),
               b"\x01\x02garbage"]


async def _metadata(conn: ClientConnection):
    req = md_req.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                 include_topic_authorized_operations=False)
    return await _ask(conn, 3, 12, req, EpochMetadataResponse)


class _CombinedNode(NodeCluster):
    """One `kraftlog node run` process, controller and broker (single-node mode)."""

    def __init__(self, directory: str):
        super().__init__(directory, 1)


@pytest.mark.slow
def test_combined_node_refuses_produce_and_raftnode_takes_it(tmp_path):
    """The module docstring's live half."""
    cluster = _CombinedNode(str(tmp_path / "combined"))
    raft = ProcessCluster(str(tmp_path / "raft"), 1)
    try:
        cluster.format()
        cluster.start_all()
        raft.start_all()

        async def scenario():
            client = RaftClient(cluster.voters)
            conn = ClientConnection(*cluster.addresses[1])
            await conn.open()
            try:
                async def live():
                    md = await _metadata(conn)
                    return md if {int(b.node_id) for b in md.brokers} == {1} else None

                await wait_until(live, 30, "broker 1 live")
                before = (await client.describe_quorum()).high_watermark
                for _ in range(3):  # a storm: refused each time, logged once
                    r = await _ask(conn, 0, 10, _produce("__cluster_metadata", BAD_RECORDS),
                                   kproduce_resp.ProduceResponse)
                    part = r.responses[0].partition_responses[0]
                    assert part.error_code == ErrorCode.invalid_topic_exception, part
                    assert "internal topic" in part.error_message and int(part.base_offset) == -1
                r = await _ask(conn, 0, 10, _produce("other", BAD_RECORDS), kproduce_resp.ProduceResponse)
                assert r.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
                after = (await client.describe_quorum()).high_watermark
                # three records per Produce: a single accepted one would have moved the end by 3
                assert after < before + 3, (before, after)
                md = await _metadata(conn)
                assert {t.name for t in md.topics} == set(), md.topics
            finally:
                await conn.close()
                await client.close()

            # the bare raft node (the embedded log backend) commits the same Produce
            conn = ClientConnection(*raft.addresses[1])
            await conn.open()
            try:
                async def committed():
                    r = await _ask(conn, 0, 10, _produce("__cluster_metadata", BAD_RECORDS),
                                   kproduce_resp.ProduceResponse)
                    part = r.responses[0].partition_responses[0]
                    return part if part.error_code == ErrorCode.none else None

                first = await wait_until(committed, 30, "raftnode commits a Produce")
                second = await committed()
                assert int(second.base_offset) >= int(first.base_offset) + len(BAD_RECORDS)
            finally:
                await conn.close()

        asyncio.run(scenario())
        cluster.stop_all()
        assert cluster.stderr_of(1).count("refusing Produce") == 1  # once per connection
        out = subprocess.run([sys.executable, "-m", "kraftlog.engine.cli.main", "image", "show", "--json",
                              cluster.dir_of(1)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["topics"] == 0
    finally:
        cluster.close()
        raft.close()
