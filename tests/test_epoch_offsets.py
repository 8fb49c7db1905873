"""Proves OffsetsForLeaderEpoch on the metadata log (engine/broker/epoch_offsets.py) against a real
engine log with known epochs: where each epoch ends, the consumer's cap at the high watermark, a
replica's log end, the leader-epoch fencing checks and unknown partitions; and that a running
broker answers it over Kafka's wire (in tests/test_node_brokers.py)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v4 import request as kreq
from kio.static.primitive import i32

from kraftlog.engine.broker.epoch_offsets import answer
from kraftlog.engine.node.raftlog import EngineRaftLog, FileSnapshotStore


def _request(replica_id: int, *asks: tuple[str, int, int, int]) -> kreq.OffsetForLeaderEpochRequest:
    topics = {}
    for topic, partition, current, epoch in asks:
        topics.setdefault(topic, []).append(kreq.OffsetForLeaderPartition(
            partition=i32(partition), current_leader_epoch=i32(current), leader_epoch=i32(epoch)))
    return kreq.OffsetForLeaderEpochRequest(replica_id=i32(replica_id), topics=tuple(
        kreq.OffsetForLeaderTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items()))


def _log(tmp_path) -> EngineRaftLog:
    # epoch 1: offsets 0-2, epoch 3: offsets 3-5 (log end 6)
    log = EngineRaftLog(tmp_path / "log", FileSnapshotStore(tmp_path / "snap"))
    log.append_as_leader([b"a", b"b", b"c"], 1)
    log.append_as_leader([b"d", b"e", b"f"], 3)
    return log


def _rows(resp):
    return [(p.error_code, int(p.leader_epoch), int(p.end_offset)) for t in resp.topics for p in t.partitions]


def test_epoch_ends_consumer_cap_and_replica_log_end(tmp_path):
    """Epoch 1 ends where epoch 3 starts; an unknown epoch 2 maps to epoch 1; the latest epoch ends
    at the log end for a replica and at the high watermark for a consumer."""
    log = _log(tmp_path)
    try:
        asks = [("__cluster_metadata", 0, -1, e) for e in (1, 2, 3, 7)]
        replica = _rows(answer(_request(2, *asks), raft_log=log, current_epoch=3, high_watermark=4))
        consumer = _rows(answer(_request(-1, *asks), raft_log=log, current_epoch=3, high_watermark=4))
    finally:
        log.close()
    ok = ErrorCode.none
    assert replica == [(ok, 1, 3), (ok, 1, 3), (ok, 3, 6), (ok, 3, 6)]
    assert consumer == [(ok, 1, 3), (ok, 1, 3), (ok, 3, 4), (ok, 3, 4)]


def test_fencing_and_unknown_partitions(tmp_path):
    """An older current leader epoch is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH, and
    any partition but __cluster_metadata-0 UNKNOWN_TOPIC_OR_PARTITION."""
    log = _log(tmp_path)
    try:
        rows = _rows(answer(_request(-1, ("__cluster_metadata", 0, 2, 3), ("__cluster_metadata", 0, 4, 3),
                                     ("__cluster_metadata", 1, -1, 3), ("orders", 0, -1, 3)),
                            raft_log=log, current_epoch=3, high_watermark=6))
    finally:
        log.close()
    assert [r[0] for r in rows] == [ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
                                    ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_or_partition]
    assert all(r[1:] == (-1, -1) for r in rows)
