"""Older API versions (engine/protocol/older_versions.py): requests read at version N become the
served version's request, answers go back as version N, and what goes back is checked with
decoders that are not ours (aiokafka's and kafka-python's protocol classes), at every version of
each range."""

from __future__ import annotations

import datetime
import io
import uuid

import pytest
from aiokafka.protocol import admin as aio_admin
from aiokafka.protocol import metadata as aio_metadata
from kafka.protocol.metadata import MetadataResponse as KafkaPythonMetadataResponse
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from kraftlog.engine.broker.metadata_answer import answer_metadata
from kraftlog.engine.image.image import MetadataImage, Provenance
from kraftlog.engine.node.node import supported_api_versions
from kraftlog.engine.protocol import older_versions
from kraftlog.engine.protocol.apis import (
    API_CREATE_PARTITIONS,
    API_CREATE_TOPICS,
    API_DELETE_TOPICS,
    API_METADATA,
    CONTROLLER_APIS,
)
from kraftlog.engine.protocol.responses import refusal


def _encode(entity) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def _image() -> MetadataImage:
    image = MetadataImage.empty()
    topic_id = uuid.uuid4()
    records = [
        ("RegisterBrokerRecord", {"BrokerId": 1, "BrokerEpoch": 0, "IncarnationId": uuid.uuid4(),
                                  "EndPoints": [{"Name": "PLAINTEXT", "Host": "h1", "Port": 9001, "SecurityProtocol": 0}],
                                  "Features": [], "Rack": "r1", "Fenced": False}),
        ("TopicRecord", {"Name": "orders", "TopicId": topic_id}),
        ("PartitionRecord", {"TopicId": topic_id, "PartitionId": 0, "Replicas": [1, 2], "Isr": [1], "Leader": 1,
                             "LeaderEpoch": 4, "PartitionEpoch": 5, "RemovingReplicas": [], "AddingReplicas": []}),
        ("PartitionRecord", {"TopicId": topic_id, "PartitionId": 1, "Replicas": [2], "Isr": [2], "Leader": 2,
                             "LeaderEpoch": 1, "PartitionEpoch": 1, "RemovingReplicas": [], "AddingReplicas": []}),
    ]
    for offset, (kind, data) in enumerate(records):
        delta = image.delta()
        delta.replay(kind, data, topic_epoch=offset)
        image = delta.apply(Provenance(offset, 1, 0))
    return image


def test_the_ranges_are_kafka_4_baselines_up_to_the_served_version():
    ranges = {k: (lo, hi) for k, lo, hi in supported_api_versions()}
    assert ranges[API_METADATA] == (4, 12)
    assert ranges[API_CREATE_TOPICS] == (2, 7)
    assert ranges[API_DELETE_TOPICS] == (1, 6)
    assert ranges[API_CREATE_PARTITIONS] == (0, 3)
    assert ranges[62] == (4, 4)  # BrokerRegistration: one version, as before


@pytest.mark.parametrize("version", range(4, 13))
def test_metadata_at_every_version_reads_as_v12_and_answers_in_its_own_shape(version):
    req_type = older_versions.request_type(API_METADATA, version)
    topic_type = req_type.__dataclass_fields__["topics"].type
    element = topic_type.__args__[0].__args__[0]  # tuple[MetadataRequestTopic, ...] | None
    flags = ({} if version < 8 else {"include_topic_authorized_operations": True}
             | ({"include_cluster_authorized_operations": False} if version <= 10 else {}))
    named = req_type(topics=(element(name="orders", **({"topic_id": None} if version >= 10 else {})),), **flags)
    served = older_versions.to_served(API_METADATA, named, CONTROLLER_APIS[API_METADATA][1])
    assert [t.name for t in served.topics] == ["orders"]
    assert served.include_topic_authorized_operations is (version >= 8)  # absent before v8: false
    everything = older_versions.to_served(API_METADATA, req_type(topics=None, **flags),
                                          CONTROLLER_APIS[API_METADATA][1])
    assert everything.topics is None  # null = every topic, from v1 on

    answer = answer_metadata(_image(), served, cluster_id="c1", controller_id=1)
    back = older_versions.from_served(answer, older_versions.response_type(API_METADATA, version))
    raw = _encode(back)
    theirs = KafkaPythonMetadataResponse.decode(raw, version=version)
    assert [(b.node_id, b.host, b.port, b.rack) for b in theirs.brokers] == [(1, "h1", 9001, "r1")]
    assert (theirs.cluster_id, theirs.controller_id) == ("c1", 1)
    (t,) = theirs.topics
    assert t.name == "orders" and t.error_code == 0
    parts = {p.partition_index: p for p in t.partitions}
    assert (parts[0].leader_id, parts[0].replica_nodes, parts[0].isr_nodes) == (1, [1, 2], [1])
    if version >= 5:
        assert parts[0].offline_replicas == [2]  # broker 2 never registered
    assert parts[1].error_code == 5 and parts[1].leader_id == -1  # LEADER_NOT_AVAILABLE
    if version >= 7:
        assert parts[0].leader_epoch == 4
    if version <= 5:  # aiokafka speaks these: its decoder reads the same answer
        aio = getattr(aio_metadata, f"MetadataResponse_v{version}").decode(io.BytesIO(raw))
        assert aio.topics[0][1] == "orders"


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics_at_every_version(version):
    req_type = older_versions.request_type(API_CREATE_TOPICS, version)
    topic_type = req_type.__dataclass_fields__["topics"].type.__args__[0]
    config_type = topic_type.__dataclass_fields__["configs"].type.__args__[0]
    old = req_type(topics=(topic_type(name="t", num_partitions=i32(3), replication_factor=i16(2), assignments=(),
                                      configs=(config_type(name="retention.ms", value="1000"),)),),
                   timeout=datetime.timedelta(milliseconds=1500), validate_only=True)
    served = older_versions.to_served(API_CREATE_TOPICS, old, CONTROLLER_APIS[API_CREATE_TOPICS][1])
    (t,) = served.topics
    assert (t.name, t.num_partitions, t.replication_factor, [(c.name, c.value) for c in t.configs]) == \
        ("t", 3, 2, [("retention.ms", "1000")])
    assert served.timeout == datetime.timedelta(milliseconds=1500) and served.validate_only is True

    answer = refusal(API_CREATE_TOPICS, served, ErrorCode.invalid_replication_factor, "two brokers only")
    back = older_versions.from_served(answer, older_versions.response_type(API_CREATE_TOPICS, version))
    raw = _encode(back)
    if version <= 3:
        aio = getattr(aio_admin, f"CreateTopicsResponse_v{version}").decode(io.BytesIO(raw))
        assert aio.topic_errors[0][:3] == ("t", 38, "two brokers only")
    assert back.topics[0].error_code is ErrorCode.invalid_replication_factor


@pytest.mark.parametrize("version", range(1, 7))
def test_delete_topics_names_become_topic_states(version):
    req_type = older_versions.request_type(API_DELETE_TOPICS, version)
    if version < 6:
        old = req_type(topic_names=("a", "b"), timeout=datetime.timedelta(milliseconds=900))
    else:
        state = req_type.__dataclass_fields__["topics"].type.__args__[0]
        old = req_type(topics=(state(name="a", topic_id=uuid.UUID(int=0)), state(name="b", topic_id=uuid.UUID(int=0))),
                       timeout=datetime.timedelta(milliseconds=900))
    served = older_versions.to_served(API_DELETE_TOPICS, old, CONTROLLER_APIS[API_DELETE_TOPICS][1])
    assert [(t.name, t.topic_id) for t in served.topics] == [("a", uuid.UUID(int=0)), ("b", uuid.UUID(int=0))]
    assert served.timeout == datetime.timedelta(milliseconds=900)

    answer = refusal(API_DELETE_TOPICS, served, ErrorCode.unknown_topic_or_partition, None)
    back = older_versions.from_served(answer, older_versions.response_type(API_DELETE_TOPICS, version))
    raw = _encode(back)
    if version <= 3:
        aio = getattr(aio_admin, f"DeleteTopicsResponse_v{version}").decode(io.BytesIO(raw))
        assert [tuple(r) for r in aio.topic_error_codes] == [("a", 3), ("b", 3)]
    assert [r.error_code for r in back.responses] == [ErrorCode.unknown_topic_or_partition] * 2


@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions_at_every_version(version):
    req_type = older_versions.request_type(API_CREATE_PARTITIONS, version)
    topic_type = req_type.__dataclass_fields__["topics"].type.__args__[0]
    old = req_type(topics=(topic_type(name="t", count=i32(5), assignments=None),),
                   timeout=datetime.timedelta(milliseconds=700), validate_only=False)
    served = older_versions.to_served(API_CREATE_PARTITIONS, old, CONTROLLER_APIS[API_CREATE_PARTITIONS][1])
    assert [(t.name, t.count, t.assignments) for t in served.topics] == [("t", 5, None)]
    answer = refusal(API_CREATE_PARTITIONS, served, ErrorCode.invalid_partitions, "fewer")
    back = older_versions.from_served(answer, older_versions.response_type(API_CREATE_PARTITIONS, version))
    assert [(r.name, r.error_code, r.error_message) for r in back.results] == [("t", ErrorCode.invalid_partitions,
                                                                               "fewer")]
    _encode(back)  # kio writes it at that version


def test_zero_values_for_fields_an_older_version_lacks():
    """Kafka's zero values, by kio field type (used for a field without a schema default)."""
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i32Timedelta, i64

    zero = older_versions._zero
    assert zero(i32Timedelta) == datetime.timedelta(0)
    assert (zero(i64), zero(BrokerId), zero(TopicName), zero(bool)) == (0, 0, "", False)
    assert zero(uuid.UUID) == uuid.UUID(int=0) and zero(uuid.UUID | None) is None
    assert zero(tuple[int, ...]) == () and zero(ErrorCode) is ErrorCode.none
    with pytest.raises(TypeError, match="no zero value"):
        zero(float)
