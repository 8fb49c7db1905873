"""The Kafka APIs a node serves beyond Raft's, defined once: the api key, the one version served,
and kio's request / response types of that version. Raft's own (Produce, Fetch, ApiVersions,
Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum, FetchSnapshot) are in raft/wire.py, which
must not import engine. Older versions of these are converted to the served one
(engine/protocol/older_versions.py).

Who serves what (engine/node/node.py builds the tables):
    every role     Metadata, OffsetsForLeaderEpoch (on __cluster_metadata-0)
    controllers    CreateTopics, DeleteTopics, CreatePartitions, AlterPartition, ElectLeaders, UpdateFeatures,
                   BrokerRegistration, BrokerHeartbeat, ControllerRegistration
    brokers        forward CreateTopics, DeleteTopics, CreatePartitions, UpdateFeatures, ElectLeaders
                   (KIP-590)
"""

from __future__ import annotations

from kio.schema.alter_partition.v3 import request as kalter_req
from kio.schema.alter_partition.v3 import response as kalter_resp
from kio.schema.broker_heartbeat.v1 import request as kheartbeat_req
from kio.schema.broker_heartbeat.v1 import response as kheartbeat_resp
from kio.schema.broker_registration.v4 import request as kregister_req
from kio.schema.broker_registration.v4 import response as kregister_resp
from kio.schema.controller_registration.v0 import request as kreg_req
from kio.schema.controller_registration.v0 import response as kreg_resp
from kio.schema.create_partitions.v3 import request as kpartitions_req
from kio.schema.create_partitions.v3 import response as kpartitions_resp
from kio.schema.create_topics.v7 import request as kcreate_req
from kio.schema.create_topics.v7 import response as kcreate_resp
from kio.schema.delete_topics.v6 import request as kdelete_req
from kio.schema.delete_topics.v6 import response as kdelete_resp
from kio.schema.elect_leaders.v2 import request as kelect_req
from kio.schema.elect_leaders.v2 import response as kelect_resp
from kio.schema.metadata.v12 import request as kmetadata_req
from kio.schema.metadata.v12 import response as kmetadata_resp
from kio.schema.offset_for_leader_epoch.v4 import request as kepoch_req
from kio.schema.offset_for_leader_epoch.v4 import response as kepoch_resp
from kio.schema.update_features.v1 import request as kupdate_req
from kio.schema.update_features.v1 import response as kupdate_resp

API_METADATA = 3
API_CREATE_TOPICS = 19
API_DELETE_TOPICS = 20
API_OFFSETS_FOR_LEADER_EPOCH = 23
API_CREATE_PARTITIONS = 37
API_ELECT_LEADERS = 43
API_ALTER_PARTITION = 56
API_UPDATE_FEATURES = 57
API_BROKER_REGISTRATION = 62
API_BROKER_HEARTBEAT = 63
API_CONTROLLER_REGISTRATION = 70

# api key -> (version, kio request type, kio response type): the one version each is served at
CONTROLLER_APIS: dict[int, tuple[int, type, type]] = {
    API_METADATA: (12, kmetadata_req.MetadataRequest, kmetadata_resp.MetadataResponse),
    API_CREATE_TOPICS: (7, kcreate_req.CreateTopicsRequest, kcreate_resp.CreateTopicsResponse),
    API_BROKER_REGISTRATION: (4, kregister_req.BrokerRegistrationRequest, kregister_resp.BrokerRegistrationResponse),
    API_BROKER_HEARTBEAT: (1, kheartbeat_req.BrokerHeartbeatRequest, kheartbeat_resp.BrokerHeartbeatResponse),
    API_DELETE_TOPICS: (6, kdelete_req.DeleteTopicsRequest, kdelete_resp.DeleteTopicsResponse),
    API_CREATE_PARTITIONS: (3, kpartitions_req.CreatePartitionsRequest, kpartitions_resp.CreatePartitionsResponse),
    API_ALTER_PARTITION: (3, kalter_req.AlterPartitionRequest, kalter_resp.AlterPartitionResponse),
    API_ELECT_LEADERS: (2, kelect_req.ElectLeadersRequest, kelect_resp.ElectLeadersResponse),
}
# v1 is the last version with per-feature results (v2 answers with one top-level error only) and
# the first with UpgradeType and ValidateOnly
UPDATE_FEATURES_API: tuple[int, type, type] = (1, kupdate_req.UpdateFeaturesRequest, kupdate_resp.UpdateFeaturesResponse)
CONTROLLER_REGISTRATION_API = (0, kreg_req.ControllerRegistrationRequest, kreg_resp.ControllerRegistrationResponse)
OFFSETS_FOR_LEADER_EPOCH_API = (4, kepoch_req.OffsetForLeaderEpochRequest, kepoch_resp.OffsetForLeaderEpochResponse)
