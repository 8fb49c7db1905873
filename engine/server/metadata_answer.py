"""Kafka's Metadata request (v12) answered from a MetadataImage: the one answer every node role
gives (a controller from what it has replayed, a broker from the image it pulled).

Brokers listed are the live ones (registered, unfenced, not shutting down): a client must not be
sent to a fenced broker. Partitions carry their leader epoch (KIP-232/KIP-320): a client compares
it with what it has cached to refuse an answer older than one it already acted on.
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import response as kmetadata_resp
from kio.static.primitive import i32

from kraftlog.engine.image.image import MetadataImage

_NO_THROTTLE = datetime.timedelta(0)


def answer_metadata(image: MetadataImage, req, *, cluster_id: str | None,
                    controller_id: int) -> kmetadata_resp.MetadataResponse:
    """Brokers (live ones) and topics (all, or the ones named) with their partitions."""
    topics = image.topics
    names = sorted(topics.topic_names()) if req.topics is None else [t.name for t in req.topics]
    out = []
    for name in names:
        view = topics.topic(name) if name is not None else None
        if view is None:
            out.append(kmetadata_resp.MetadataResponseTopic(
                error_code=ErrorCode.unknown_topic_or_partition, name=name, topic_id=None, partitions=()))
            continue
        parts = tuple(kmetadata_resp.MetadataResponsePartition(
            error_code=ErrorCode.none, partition_index=i32(p.partition_id), leader_id=i32(p.leader),
            leader_epoch=i32(p.leader_epoch), replica_nodes=tuple(i32(r) for r in p.replicas),
            isr_nodes=tuple(i32(r) for r in p.isr), offline_replicas=())
            for p in sorted(topics.partitions_of(name), key=lambda p: p.partition_id))
        out.append(kmetadata_resp.MetadataResponseTopic(error_code=ErrorCode.none, name=name,
                                                        topic_id=view.topic_id, partitions=parts))
    brokers = tuple(kmetadata_resp.MetadataResponseBroker(
        node_id=i32(b.broker_id), host=b.endpoints[0].host if b.endpoints else "",
        port=i32(b.endpoints[0].port if b.endpoints else 0), rack=b.rack)
        for b in image.cluster.live_brokers())
    return kmetadata_resp.MetadataResponse(throttle_time=_NO_THROTTLE, brokers=brokers, cluster_id=cluster_id,
                                           controller_id=i32(controller_id), topics=tuple(out))
