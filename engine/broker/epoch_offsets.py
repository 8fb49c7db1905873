"""OffsetsForLeaderEpoch (API 23, v4) on the metadata log (``__cluster_metadata``, partition 0),
answered by any node from its own log: a fetcher that saw epoch E asks where E ends here, and
truncates what it has beyond that (KIP-101/KIP-320; KIP-392 lets it ask a follower).

Per partition, Kafka's rules:
    - any topic/partition other than __cluster_metadata-0: UNKNOWN_TOPIC_OR_PARTITION;
    - CurrentLeaderEpoch (unless -1) is checked against this node's epoch: older ->
      FENCED_LEADER_EPOCH, newer -> UNKNOWN_LEADER_EPOCH (this node has not heard of it yet);
    - the answer is (the largest epoch <= the requested one, the offset where it ends): the start
      offset of the next epoch, or the log end offset for the latest epoch; an epoch below every
      known one answers the log start (raft's EngineRaftLog.end_offset_for_epoch);
    - a consumer (ReplicaId -1) must not learn of uncommitted records: its end offset is capped
      at the high watermark; a replica gets the log end.
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v4 import request as kreq
from kio.schema.offset_for_leader_epoch.v4 import response as kresp
from kio.static.primitive import i32, i64

METADATA_TOPIC, METADATA_PARTITION = "__cluster_metadata", 0
CONSUMER_REPLICA_ID = -1


def _result(partition: int, code: ErrorCode, epoch: int = -1, end_offset: int = -1) -> kresp.EpochEndOffset:
    return kresp.EpochEndOffset(error_code=code, partition=i32(partition), leader_epoch=i32(epoch),
                                end_offset=i64(end_offset))


def answer(req: kreq.OffsetForLeaderEpochRequest, *, raft_log, current_epoch: int,
           high_watermark: int) -> kresp.OffsetForLeaderEpochResponse:
    """The answer from ``raft_log`` (raft's ReplicatedLog) at ``current_epoch`` / ``high_watermark``."""
    consumer = int(req.replica_id) == CONSUMER_REPLICA_ID
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            partition = int(p.partition)
            if t.topic != METADATA_TOPIC or partition != METADATA_PARTITION:
                parts.append(_result(partition, ErrorCode.unknown_topic_or_partition))
                continue
            asked = int(p.current_leader_epoch)
            if asked != -1 and asked < current_epoch:
                parts.append(_result(partition, ErrorCode.fenced_leader_epoch))
                continue
            if asked > current_epoch:
                parts.append(_result(partition, ErrorCode.unknown_leader_epoch))
                continue
            end_offset, epoch = raft_log.end_offset_for_epoch(int(p.leader_epoch))
            if consumer:
                end_offset = min(end_offset, high_watermark)
            parts.append(_result(partition, ErrorCode.none, epoch, end_offset))
        topics.append(kresp.OffsetForLeaderTopicResult(topic=t.topic, partitions=tuple(parts)))
    return kresp.OffsetForLeaderEpochResponse(throttle_time=datetime.timedelta(0), topics=tuple(topics))
