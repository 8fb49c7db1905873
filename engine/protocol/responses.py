"""Answers to the topic APIs, ElectLeaders and UpdateFeatures built from a request, for the controller's
handlers and for a request nobody acted on (``refusal``: not the active controller, timed out, no
controller reachable from a forwarding broker): the shapes each API's clients read.

CreateTopics answers are hot_create_topics' tuples, not kio values (building 100 kio results
cost ~0.35 ms, kio's writer ~0.7 ms more): the node writes them with its encoder, and
older_versions converts them down as it converts kio values.
"""

from __future__ import annotations

import datetime
import uuid

from kio.schema.create_partitions.v3 import response as kpartitions_resp
from kio.schema.delete_topics.v6 import response as kdelete_resp
from kio.schema.elect_leaders.v2 import response as kelect_resp
from kio.schema.errors import ErrorCode
from kio.schema.update_features.v1 import response as kupdate_resp
from kio.static.primitive import i32

from kraftlog.engine.protocol.apis import (
    API_CREATE_PARTITIONS,
    API_CREATE_TOPICS,
    API_DELETE_TOPICS,
    API_ELECT_LEADERS,
    API_UPDATE_FEATURES,
)
from kraftlog.engine.protocol.hot_create_topics import CreateTopicsAnswer, TopicResult

ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: "no topic id" in requests
NO_THROTTLE = datetime.timedelta(0)


def given_id(topic_id) -> uuid.UUID | None:
    """A topic id field, None when absent (null or Kafka's ZERO_UUID)."""
    return None if topic_id is None or topic_id == ZERO_UUID else topic_id


def refusal(api_key: int, req, code: ErrorCode, message: str):
    """The answer to a CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders or UpdateFeatures
    request that was not acted on: ``code`` and ``message`` on every topic (or feature, partition)
    it names."""
    if api_key == API_CREATE_TOPICS:
        return create_response([topic_result(t.name, code, message) for t in req.topics])
    if api_key == API_DELETE_TOPICS:
        return delete_response([deleted_result(t.name, t.topic_id, code, message) for t in req.topics])
    if api_key == API_CREATE_PARTITIONS:
        return partitions_response([partitions_result(n, code, message)
                                    for n in dict.fromkeys(t.name for t in req.topics)])
    if api_key == API_UPDATE_FEATURES:  # the top-level error, repeated on every feature
        return kupdate_resp.UpdateFeaturesResponse(
            throttle_time=NO_THROTTLE, error_code=code, error_message=message,
            results=tuple(kupdate_resp.UpdatableFeatureResult(feature=u.feature, error_code=code, error_message=message)
                          for u in req.feature_updates))
    if api_key == API_ELECT_LEADERS:  # the top-level error, repeated on every named partition (v0 has
        # no top-level error), as Kafka's ElectLeadersRequest.getErrorResponse
        return elect_response(code, [(t.topic, [(p, code, message) for p in t.partitions])
                                     for t in req.topic_partitions or ()])
    raise ValueError(f"no refusal for API {api_key}")


def elect_response(code: ErrorCode, results) -> kelect_resp.ElectLeadersResponse:
    """ElectLeaders v2: ``results`` are (topic, [(partition, error code, message)]) pairs."""
    return kelect_resp.ElectLeadersResponse(throttle_time=NO_THROTTLE, error_code=code, replica_election_results=tuple(
        kelect_resp.ReplicaElectionResult(topic=topic, partition_result=tuple(
            kelect_resp.PartitionResult(partition_id=i32(p), error_code=c, error_message=m) for p, c, m in parts))
        for topic, parts in results))


def deleted_result(name: str | None, topic_id, code: ErrorCode, message: str | None) -> kdelete_resp.DeletableTopicResult:
    return kdelete_resp.DeletableTopicResult(name=name, topic_id=given_id(topic_id) or ZERO_UUID,
                                             error_code=code, error_message=message)


def delete_response(results) -> kdelete_resp.DeleteTopicsResponse:
    return kdelete_resp.DeleteTopicsResponse(throttle_time=NO_THROTTLE, responses=tuple(results))


def partitions_result(name: str, code: ErrorCode, message: str | None) -> kpartitions_resp.CreatePartitionsTopicResult:
    return kpartitions_resp.CreatePartitionsTopicResult(name=name, error_code=code, error_message=message)


def partitions_response(results) -> kpartitions_resp.CreatePartitionsResponse:
    return kpartitions_resp.CreatePartitionsResponse(throttle_time=NO_THROTTLE, results=tuple(results))


def topic_result(name: str, code: ErrorCode, message: str | None) -> TopicResult:
    """A topic CreateTopics refused: no id, no configs, NumPartitions and ReplicationFactor -1."""
    return TopicResult(name, None, code, message)


def created_result(name: str, topic_id, partitions: int, replication_factor: int) -> TopicResult:
    return TopicResult(name, topic_id, ErrorCode.none, None, partitions, replication_factor, ())


def create_response(results) -> CreateTopicsAnswer:
    return CreateTopicsAnswer(tuple(results))
