"""Kafka's Metadata request (v12) answered from a MetadataImage: the one answer every node role
gives (a controller from what it has replayed, a broker from the image it pulled).

Brokers listed are the live ones (registered, unfenced, not shutting down): a client must not be
sent to a fenced broker. Partitions carry their leader epoch (KIP-232/KIP-320): a client compares
it with what it has cached to refuse an answer older than one it already acted on.

Per partition, as Kafka's KRaft brokers answer (KRaftMetadataCache.getPartitionMetadata): a leader
that is not a registered broker (-1 included) gives LEADER_NOT_AVAILABLE with leader -1, which
clients retry; offline_replicas lists the replicas whose broker is unregistered or fenced.

ControllerId: a broker (or combined node) names a random live broker, as Kafka's brokers do since
KIP-590: clients send their "controller" requests (CreateTopics, ...) to it and it forwards them
to the active controller (engine/broker/forwarding.py). A controller-only node names the active
controller (KIP-919's answer to a client that bootstraps to the controllers). ``controller_for``
picks; the caller passes the answer to ``answer_metadata``.

Two tagged fields of our own ride on the v12 answer: engine/protocol/metadata_response.py.
"""

from __future__ import annotations

import random

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import response as kmetadata_resp
from kio.static.primitive import i32, i64

from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.protocol.metadata_response import (
    EpochMetadataResponse,
    EpochMetadataResponseTopic,
)
from kraftlog.engine.protocol.responses import NO_THROTTLE


def answer_metadata(image: MetadataImage, req, *, cluster_id: str | None, controller_id: int,
                    listener_name: str | None = None) -> kmetadata_resp.MetadataResponse:
    """Brokers (live ones) and topics (all, or the ones named) with their partitions, topic epochs
    and the image's offset (an ``EpochMetadataResponse``, a subclass of kio's). Each broker is
    given at its endpoint named ``listener_name`` (the listener the request came in on, as Kafka
    answers), else at its first one (its inter.broker.listener.name)."""
    topics = image.topics
    names = sorted(topics.topic_names()) if req.topics is None else [t.name for t in req.topics]
    out = []
    registered = image.cluster.brokers
    for name in names:
        view = topics.topic(name) if name is not None else None
        if view is None:
            out.append(EpochMetadataResponseTopic(
                error_code=ErrorCode.unknown_topic_or_partition, name=name, topic_id=None, partitions=()))
            continue
        parts = tuple(_partition(p, registered)
                      for p in sorted(topics.partitions_of(name), key=lambda p: p.partition_id))
        out.append(EpochMetadataResponseTopic(error_code=ErrorCode.none, name=name, topic_id=view.topic_id,
                                              partitions=parts, topic_epoch=i64(view.topic_epoch)))
    brokers = tuple(_broker(b, listener_name) for b in image.cluster.live_brokers())
    return EpochMetadataResponse(throttle_time=NO_THROTTLE, brokers=brokers, cluster_id=cluster_id,
                                 controller_id=i32(controller_id), topics=tuple(out),
                                 metadata_offset=i64(image.provenance.offset))


def _broker(b, listener_name: str | None) -> kmetadata_resp.MetadataResponseBroker:
    endpoint = next((e for e in b.endpoints if e.name == listener_name), b.endpoints[0] if b.endpoints else None)
    return kmetadata_resp.MetadataResponseBroker(
        node_id=i32(b.broker_id), host=endpoint.host if endpoint else "", port=i32(endpoint.port if endpoint else 0),
        rack=b.rack)


def _partition(p, registered) -> kmetadata_resp.MetadataResponsePartition:
    has_leader = p.leader in registered
    offline = tuple(i32(r) for r in p.replicas if r not in registered or registered[r].fenced)
    return kmetadata_resp.MetadataResponsePartition(
        error_code=ErrorCode.none if has_leader else ErrorCode.leader_not_available,
        partition_index=i32(p.partition_id), leader_id=i32(p.leader if has_leader else -1),
        leader_epoch=i32(p.leader_epoch), replica_nodes=tuple(i32(r) for r in p.replicas),
        isr_nodes=tuple(i32(r) for r in p.isr), offline_replicas=offline)


def controller_for(image: MetadataImage, *, answering_broker: bool, active_controller: int,
                   rng: random.Random | None = None) -> int:
    """The ControllerId of a Metadata answer (see the module docstring): a random live broker
    (-1 when there is none) when a broker answers, else the active controller."""
    if not answering_broker:
        return active_controller
    live = image.cluster.live_brokers()
    return (rng or random).choice(live).broker_id if live else -1
