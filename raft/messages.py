"""The messages the core sends and receives, one frozen value per Kafka request / response.

Every field maps 1:1 onto a field of Kafka's message schema (single topic ``__cluster_metadata``,
partition 0, so the Topics/Partitions nesting collapses into flat fields). The driver builds the
kio type from these and back; the mapping is in each class docstring as
``our_field -> KafkaField``. Ids are node ids (int32), epochs int32, offsets int64.

An ``Envelope`` carries one body between two nodes with a correlation id: a response carries
the correlation id of its request (the driver maps it to the request header's CorrelationId).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kraftlog.raft.types import NO_EPOCH, NO_ID, Errors, LogBatch, OffsetAndEpoch, fast_frozen_init

# --- Vote (api key 52) -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """Vote v2 request. cluster_id -> ClusterId, voter_id -> VoterId,
    replica_epoch -> ReplicaEpoch (the candidate epoch before v2), replica_id -> ReplicaId
    (the candidate id before v2), last_offset_epoch -> LastOffsetEpoch, last_offset -> LastOffset,
    pre_vote -> PreVote (v2+; KIP-996).

    For a real vote ``replica_epoch`` is the candidate's new (bumped) epoch; for a pre-vote it
    is the prospective's current epoch: a pre-vote asks "could I win epoch replica_epoch + 1?"
    without bumping anything. ``last_offset`` is the candidate's log end offset.
    """

    cluster_id: str | None
    voter_id: int
    replica_epoch: int
    replica_id: int
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    """Vote response. error_code -> ErrorCode (top level), partition_error -> PartitionData
    ErrorCode, leader_id -> LeaderId, leader_epoch -> LeaderEpoch, vote_granted -> VoteGranted.
    ``pre_vote`` is not on the wire: the driver restores it from the pending request."""

    error_code: Errors
    leader_id: int
    leader_epoch: int
    vote_granted: bool
    pre_vote: bool = False
    partition_error: Errors = Errors.NONE


# --- BeginQuorumEpoch (53) / EndQuorumEpoch (54) ---------------------------------------


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    """cluster_id -> ClusterId, voter_id -> VoterId, leader_id -> LeaderId,
    leader_epoch -> LeaderEpoch."""

    cluster_id: str | None
    voter_id: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    """error_code -> ErrorCode, partition_error -> PartitionData ErrorCode,
    leader_id -> LeaderId, leader_epoch -> LeaderEpoch."""

    error_code: Errors
    leader_id: int
    leader_epoch: int
    partition_error: Errors = Errors.NONE


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    """cluster_id -> ClusterId, leader_id -> LeaderId, leader_epoch -> LeaderEpoch,
    preferred_successors -> PreferredSuccessors (v0) / PreferredCandidates[].CandidateId (v1):
    the other voters sorted by how far their logs reached, best first."""

    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    """error_code -> ErrorCode, partition_error -> PartitionData ErrorCode,
    leader_id -> LeaderId, leader_epoch -> LeaderEpoch."""

    error_code: Errors
    leader_id: int
    leader_epoch: int
    partition_error: Errors = Errors.NONE


# --- Fetch (1) --------------------------------------------------------------------------


@fast_frozen_init  # made on every commit (raft/types.py)
@dataclass(frozen=True, slots=True)
class FetchRequest:
    """Fetch v13+ for one partition. cluster_id -> ClusterId, replica_id -> ReplicaId
    (ReplicaState.ReplicaId in v15+), max_wait_ms -> MaxWaitMs, max_bytes -> MaxBytes and
    PartitionMaxBytes, current_leader_epoch -> CurrentLeaderEpoch, fetch_offset -> FetchOffset,
    last_fetched_epoch -> LastFetchedEpoch, log_start_offset -> LogStartOffset, rack -> RackId
    (v11+; None on our side is the empty string on the wire).

    Every node sends its rack: the leader learns the voters' racks from their fetches and
    picks a voter in an observer's rack to serve that observer (KIP-392)."""

    cluster_id: str | None
    replica_id: int
    max_wait_ms: int
    max_bytes: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    rack: str | None = None


@fast_frozen_init  # made on every commit (raft/types.py)
@dataclass(frozen=True, slots=True)
class FetchResponse:
    """error_code -> ErrorCode (top level), partition_error -> PartitionData ErrorCode,
    high_watermark -> HighWatermark (-1 when the leader has none yet), log_start_offset ->
    LogStartOffset, diverging_epoch -> DivergingEpoch{Epoch, EndOffset}, leader_id/leader_epoch
    -> CurrentLeader{LeaderId, LeaderEpoch}, snapshot_id -> SnapshotId{EndOffset, Epoch},
    batches -> Records (one record batch v2 per batch), preferred_read_replica ->
    PreferredReadReplica (v11+; NO_ID = keep fetching from the leader).

    A follower answering an observer (KIP-392) names its own leader and epoch in
    leader_id/leader_epoch and its own high watermark; its batches end at that watermark."""

    error_code: Errors
    partition_error: Errors
    leader_id: int
    leader_epoch: int
    high_watermark: int = NO_EPOCH
    log_start_offset: int = 0
    diverging_epoch: OffsetAndEpoch | None = None
    snapshot_id: OffsetAndEpoch | None = None
    batches: tuple[LogBatch, ...] = ()
    preferred_read_replica: int = NO_ID


# --- FetchSnapshot (59) -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    """cluster_id -> ClusterId, replica_id -> ReplicaId, max_bytes -> MaxBytes,
    current_leader_epoch -> CurrentLeaderEpoch, snapshot_id -> SnapshotId{EndOffset, Epoch},
    position -> Position."""

    cluster_id: str | None
    replica_id: int
    max_bytes: int
    current_leader_epoch: int
    snapshot_id: OffsetAndEpoch
    position: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    """error_code -> ErrorCode, partition_error -> PartitionSnapshot ErrorCode, snapshot_id ->
    SnapshotId, leader_id/leader_epoch -> CurrentLeader, size -> Size, position -> Position,
    data -> UnalignedRecords."""

    error_code: Errors
    partition_error: Errors
    leader_id: int
    leader_epoch: int
    snapshot_id: OffsetAndEpoch | None = None
    size: int = -1
    position: int = -1
    data: bytes = b""


# --- DescribeQuorum (55) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescribeQuorumRequest:
    """DescribeQuorum for the metadata partition (no fields beyond the topic/partition)."""


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    """ReplicaState: replica_id -> ReplicaId, log_end_offset -> LogEndOffset (-1 unknown),
    last_fetch_ms -> LastFetchTimestamp, last_caught_up_ms -> LastCaughtUpTimestamp (-1
    unknown)."""

    replica_id: int
    log_end_offset: int
    last_fetch_ms: int
    last_caught_up_ms: int


@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    """error_code -> ErrorCode, partition_error -> PartitionData ErrorCode, leader_id ->
    LeaderId, leader_epoch -> LeaderEpoch, high_watermark -> HighWatermark, voters ->
    CurrentVoters, observers -> Observers, nodes -> Nodes (v2 only; the transport fills them)."""

    error_code: Errors
    partition_error: Errors
    leader_id: int = NO_ID
    leader_epoch: int = NO_EPOCH
    high_watermark: int = NO_EPOCH
    voters: tuple[ReplicaDescription, ...] = ()
    observers: tuple[ReplicaDescription, ...] = ()
    # (voter id, host, port) of each voter's endpoint, so a tool asking a follower can go on to the
    # leader it names. The core does not know addresses.
    nodes: tuple[tuple[int, str, int], ...] = ()


Request = (
    VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest | FetchSnapshotRequest
    | DescribeQuorumRequest
)
Response = (
    VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse | FetchSnapshotResponse
    | DescribeQuorumResponse
)
REQUEST_TYPES = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    DescribeQuorumRequest,
)


@fast_frozen_init  # made on every commit (raft/types.py)
@dataclass(frozen=True, slots=True)
class Envelope:
    """One message on the wire: who sent it, to whom, and the correlation id that pairs a
    response with its request. ``source`` is NO_ID for requests from outside the quorum
    (an admin's DescribeQuorum)."""

    source: int
    destination: int
    correlation_id: int
    body: Request | Response = field(compare=True)

    @property
    def is_request(self) -> bool:
        return isinstance(self.body, REQUEST_TYPES)


__all__ = [
    "NO_ID",
    "BeginQuorumEpochRequest",
    "BeginQuorumEpochResponse",
    "DescribeQuorumRequest",
    "DescribeQuorumResponse",
    "EndQuorumEpochRequest",
    "EndQuorumEpochResponse",
    "Envelope",
    "FetchRequest",
    "FetchResponse",
    "FetchSnapshotRequest",
    "FetchSnapshotResponse",
    "ReplicaDescription",
    "Request",
    "Response",
    "VoteRequest",
    "VoteResponse",
]
