"""The metadata-record and KRaft control-record schemas, in kraftlog's compact notation.

Written by hand from the facts of Kafka's message JSON (../shared/kafka-schemas/metadata and
message/); tests/test_metadata_conformance.py re-reads those JSON files at test time and fails if
any fact below drifts from them. ``kraftlog.engine.records.schema`` parses this text once, at
import, into RecordSchema / FieldSchema values.

Notation (one record per block, blank lines between blocks, ``#`` starts a comment):

    <RecordName> <number> v<valid versions> flex<flexible versions>
      <Field> <type> <versions> [null[<versions>]] [tag<N>[@<versions>]] [=<default>]
        <nested field of a struct or struct-array field, indented two more spaces>
      &<Struct> <versions>          a common struct: array fields of type []<Struct> with no
        <its fields>                nested lines of their own use its fields

- <number> is the apiKey of a metadata record, the control type of a control record.
- versions: "3" (just 3), "0-2" (0 through 2), "1+" (1 and later), "none".
- ``null`` alone: nullable in every version the field exists; ``null2+``: from version 2 on.
- ``tag5`` alone: tagged with tag 5 in every version the field exists; ``tag5@2+``: from 2 on.
- ``=<default>``: the default exactly as Kafka spells it (``=-1``, ``=null``, ``=true``); without
  it the type's implicit default applies (0, false, "", empty, the all-zero UUID).
- types: bool int8 int16 uint16 int32 uint32 int64 float64 string bytes uuid, ``[]<type>`` for an
  array, a capitalised name for a struct.
"""

METADATA_TABLE = """
RegisterBrokerRecord 0 v0-3 flex0+
  BrokerId                int32              0+
  IsMigratingZkBroker     bool               2+              =false
  IncarnationId           uuid               0+
  BrokerEpoch             int64              0+
  EndPoints               []BrokerEndpoint   0+
    Name                  string             0+
    Host                  string             0+
    Port                  uint16             0+
    SecurityProtocol      int16              0+
  Features                []BrokerFeature    0+
    Name                  string             0+
    MinSupportedVersion   int16              0+
    MaxSupportedVersion   int16              0+
  Rack                    string             0+  null
  Fenced                  bool               0+              =true
  InControlledShutdown    bool               1+              =false
  LogDirs                 []uuid             3+  tag0

UnregisterBrokerRecord 1 v0 flex0+
  BrokerId                int32              0+
  BrokerEpoch             int64              0+

TopicRecord 2 v0 flex0+
  Name                    string             0+
  TopicId                 uuid               0+

PartitionRecord 3 v0-2 flex0+
  PartitionId             int32              0+              =-1
  TopicId                 uuid               0+
  Replicas                []int32            0+
  Isr                     []int32            0+
  RemovingReplicas        []int32            0+
  AddingReplicas          []int32            0+
  Leader                  int32              0+              =-1
  LeaderRecoveryState     int8               0+  tag0        =0
  LeaderEpoch             int32              0+              =-1
  PartitionEpoch          int32              0+              =-1
  Directories             []uuid             1+
  EligibleLeaderReplicas  []int32            2+  null tag1   =null
  LastKnownElr            []int32            2+  null tag2   =null

ConfigRecord 4 v0 flex0+
  ResourceType            int8               0+
  ResourceName            string             0+
  Name                    string             0+
  Value                   string             0+  null

PartitionChangeRecord 5 v0-2 flex0+
  PartitionId             int32              0+              =-1
  TopicId                 uuid               0+
  Isr                     []int32            0+  null tag0   =null
  Leader                  int32              0+  tag1        =-2
  Replicas                []int32            0+  null tag2   =null
  RemovingReplicas        []int32            0+  null tag3   =null
  AddingReplicas          []int32            0+  null tag4   =null
  LeaderRecoveryState     int8               0+  tag5        =-1
  Directories             []uuid             1+  null tag8   =null
  EligibleLeaderReplicas  []int32            2+  null tag6   =null
  LastKnownElr            []int32            2+  null tag7   =null

FenceBrokerRecord 7 v0 flex0+
  Id                      int32              0+
  Epoch                   int64              0+

UnfenceBrokerRecord 8 v0 flex0+
  Id                      int32              0+
  Epoch                   int64              0+

RemoveTopicRecord 9 v0 flex0+
  TopicId                 uuid               0+

DelegationTokenRecord 10 v0 flex0+
  Owner                   string             0+
  Requester               string             0+
  Renewers                []string           0+
  IssueTimestamp          int64              0+
  MaxTimestamp            int64              0+
  ExpirationTimestamp     int64              0+
  TokenId                 string             0+

UserScramCredentialRecord 11 v0 flex0+
  Name                    string             0+
  Mechanism               int8               0+
  Salt                    bytes              0+
  StoredKey               bytes              0+
  ServerKey               bytes              0+
  Iterations              int32              0+

FeatureLevelRecord 12 v0 flex0+
  Name                    string             0+
  FeatureLevel            int16              0+

ClientQuotaRecord 14 v0 flex0+
  Entity                  []EntityData       0+
    EntityType            string             0+
    EntityName            string             0+  null
  Key                     string             0+
  Value                   float64            0+
  Remove                  bool               0+

ProducerIdsRecord 15 v0 flex0+
  BrokerId                int32              0+
  BrokerEpoch             int64              0+              =-1
  NextProducerId          int64              0+

BrokerRegistrationChangeRecord 17 v0-2 flex0+
  BrokerId                int32              0+
  BrokerEpoch             int64              0+
  Fenced                  int8               0+  tag0
  InControlledShutdown    int8               1+  tag1
  LogDirs                 []uuid             2+  tag2

AccessControlEntryRecord 18 v0 flex0+
  Id                      uuid               0+
  ResourceType            int8               0+
  ResourceName            string             0+
  PatternType             int8               0+
  Principal               string             0+
  Host                    string             0+
  Operation               int8               0+
  PermissionType          int8               0+

RemoveAccessControlEntryRecord 19 v0 flex0+
  Id                      uuid               0+

NoOpRecord 20 v0 flex0+

ZkMigrationStateRecord 21 v0 flex0+
  ZkMigrationState        int8               0+

RemoveUserScramCredentialRecord 22 v0 flex0+
  Name                    string             0+
  Mechanism               int8               0+

BeginTransactionRecord 23 v0 flex0+
  Name                    string             0+  null tag0   =null

EndTransactionRecord 24 v0 flex0+

AbortTransactionRecord 25 v0 flex0+
  Reason                  string             0+  null tag0   =null

RemoveDelegationTokenRecord 26 v0 flex0+
  TokenId                 string             0+

RegisterControllerRecord 27 v0 flex0+
  ControllerId            int32              0+
  IncarnationId           uuid               0+
  ZkMigrationReady        bool               0+
  EndPoints               []ControllerEndpoint 0+
    Name                  string             0+
    Host                  string             0+
    Port                  uint16             0+
    SecurityProtocol      int16              0+
  Features                []ControllerFeature 0+
    Name                  string             0+
    MinSupportedVersion   int16              0+
    MaxSupportedVersion   int16              0+
"""

# Control records (batches with the control bit set). The number is the control type from the
# record key; every body starts with its own Version int16 field.
CONTROL_TABLE = """
LeaderChangeMessage 2 v0-1 flex0+
  &Voter 0+
    VoterId               int32              0+
    VoterDirectoryId      uuid               1+
  Version                 int16              0+
  LeaderId                int32              0+
  Voters                  []Voter            0+
  GrantingVoters          []Voter            0+

SnapshotHeaderRecord 3 v0 flex0+
  Version                 int16              0+
  LastContainedLogTimestamp int64            0+

SnapshotFooterRecord 4 v0 flex0+
  Version                 int16              0+

KRaftVersionRecord 5 v0 flex0+
  Version                 int16              0+
  KRaftVersion            int16              0+

VotersRecord 6 v0 flex0+
  Version                 int16              0+
  Voters                  []Voter            0+
    VoterId               int32              0+
    VoterDirectoryId      uuid               0+
    Endpoints             []Endpoint         0+
      Name                string             0+
      Host                string             0+
      Port                uint16             0+
    KRaftVersionFeature   KRaftVersionFeature 0+
      MinSupportedVersion int16              0+
      MaxSupportedVersion int16              0+
"""

# Kafka's ControlRecordType names, by control type (what kafka-dump-log prints for them).
CONTROL_TYPE_NAMES = {
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}
