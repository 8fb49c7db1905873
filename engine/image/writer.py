"""ImageWriter: an image back out as metadata records at a chosen metadata.version, with a loss report.

The order is the one Kafka's image writer uses, so a snapshot loads the same way anywhere:
features (metadata.version first), cluster (brokers, then controllers), topics (each TopicRecord
followed by its PartitionRecords), configs, client quotas, producer ids, ACLs, SCRAM credentials,
delegation tokens. Record versions come from versions.py for the target level.

Loss: writing at a lower metadata.version drops fields the lower record versions lack. Every
dropped field that held a non-default value is reported (record type, entity, field names) —
the KIP-1155 SAFE_DOWNGRADE refuses when the report is not empty; UNSAFE_DOWNGRADE writes anyway
and logs it. Kafka's own rule for directories is kept: directories that are all MIGRATING are
the default and lose nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kraftlog.engine.image import versions
from kraftlog.engine.image.image import METADATA_VERSION, MetadataImage, thaw
from kraftlog.engine.image.topics import MIGRATING_DIRECTORY, TOPIC_EPOCH_TAG, TopicsImage
from kraftlog.engine.records import metadata as codec

API_KEYS = {name: schema.api_key for name, schema in codec.RECORD_TYPES.items()}


@dataclass(frozen=True)
class Loss:
    record_type: str
    entity: str
    fields: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.record_type} {self.entity}: {', '.join(self.fields)}"


@dataclass
class ImageWrite:
    metadata_version: int
    records: list[tuple[int, int, bytes]] = field(default_factory=list)  # (api key, version, framed value)
    losses: list[Loss] = field(default_factory=list)

    @property
    def values(self) -> list[bytes]:
        return [value for _, _, value in self.records]


def write_image(image: MetadataImage, metadata_version: int | None = None, *,
                with_topic_epochs: bool = True) -> ImageWrite:
    """Every record of ``image`` at ``metadata_version`` (default: the image's own)."""
    level = image.features.metadata_version if metadata_version is None else metadata_version
    if level < versions.MINIMUM_BOOTSTRAP:
        raise versions.UnknownMetadataVersionError(
            f"cannot write an image at metadata.version {level}: below {versions.name(versions.MINIMUM_BOOTSTRAP)}")
    out = ImageWrite(level)
    for name, version, entity, data in _records(image, level, with_topic_epochs):
        lost = codec.fields_lost(name, data, version)
        if lost:
            out.losses.append(Loss(name, entity, tuple(lost)))
        out.records.append((API_KEYS[name], version, codec.encode_record(name, version, data, allow_loss=True)))
    return out


def _records(image: MetadataImage, level: int, with_topic_epochs: bool) -> Iterator[tuple[str, int, str, dict]]:
    yield "FeatureLevelRecord", 0, METADATA_VERSION, {"Name": METADATA_VERSION, "FeatureLevel": level}
    for name, feature_level in sorted(image.features.finalized.items()):
        yield "FeatureLevelRecord", 0, name, {"Name": name, "FeatureLevel": feature_level}
    yield from _cluster(image, level)
    yield from _topics(image.topics, level, with_topic_epochs)
    for (resource_type, resource_name), configs in sorted(image.configs.items()):
        for key, value in sorted(configs.items()):
            yield "ConfigRecord", 0, f"{resource_type}:{resource_name}", {
                "ResourceType": resource_type, "ResourceName": resource_name, "Name": key, "Value": value}
    for entity, quotas in sorted(image.client_quotas.items(), key=lambda kv: str(kv[0])):
        for key, value in sorted(quotas.items()):
            yield "ClientQuotaRecord", 0, str(entity), {
                "Entity": [{"EntityType": t, "EntityName": n} for t, n in entity], "Key": key, "Value": value,
                "Remove": False}
    p = image.producer_ids
    if p.next_producer_id >= 0:
        yield "ProducerIdsRecord", 0, "producer ids", {
            "BrokerId": p.broker_id, "BrokerEpoch": p.broker_epoch, "NextProducerId": p.next_producer_id}
    for acl_id, data in sorted(image.acls.items(), key=lambda kv: str(kv[0])):
        yield "AccessControlEntryRecord", 0, str(acl_id), thaw(data)
    for key, data in sorted(image.scram.items()):
        yield "UserScramCredentialRecord", 0, f"{key[0]}/{key[1]}", thaw(data)
    for token_id, data in sorted(image.delegation_tokens.items()):
        yield "DelegationTokenRecord", 0, token_id, thaw(data)


def _cluster(image: MetadataImage, level: int):
    broker_version = versions.register_broker_record_version(level)
    for broker_id, b in sorted(image.cluster.brokers.items()):
        yield "RegisterBrokerRecord", broker_version, f"broker {broker_id}", {
            "BrokerId": b.broker_id, "IsMigratingZkBroker": b.is_migrating_zk_broker,
            "IncarnationId": b.incarnation_id, "BrokerEpoch": b.epoch,
            "EndPoints": [{"Name": e.name, "Host": e.host, "Port": e.port, "SecurityProtocol": e.security_protocol}
                          for e in b.endpoints],
            "Features": [{"Name": n, "MinSupportedVersion": lo, "MaxSupportedVersion": hi}
                         for n, lo, hi in b.supported_features],
            "Rack": b.rack, "Fenced": b.fenced, "InControlledShutdown": b.in_controlled_shutdown,
            "LogDirs": list(b.log_dirs)}
    for controller_id, c in sorted(image.cluster.controllers.items()):
        data = {"ControllerId": c.controller_id, "IncarnationId": c.incarnation_id,
                "ZkMigrationReady": c.zk_migration_ready,
                "EndPoints": [{"Name": e.name, "Host": e.host, "Port": e.port, "SecurityProtocol": e.security_protocol}
                              for e in c.endpoints],
                "Features": [{"Name": n, "MinSupportedVersion": lo, "MaxSupportedVersion": hi}
                             for n, lo, hi in c.supported_features]}
        if level >= versions.CONTROLLER_REGISTRATION:
            yield "RegisterControllerRecord", 0, f"controller {controller_id}", data


def _topics(topics: TopicsImage, level: int, with_topic_epochs: bool):
    version = versions.partition_record_version(level)
    for name in topics.topic_names():
        topic = topics.topic(name)
        data = {"Name": name, "TopicId": topic.topic_id}
        if with_topic_epochs and topic.topic_epoch >= 0:
            data[codec.UNKNOWN_TAGS] = {TOPIC_EPOCH_TAG: topic.topic_epoch.to_bytes(8, "big", signed=True)}
        yield "TopicRecord", 0, f"topic {name}", data
        for reg in topics.partitions_of(name):
            yield "PartitionRecord", version, f"partition {name}-{reg.partition_id}", _partition_data(reg, version)


def _partition_data(reg, version: int) -> dict:
    data = {
        "PartitionId": reg.partition_id, "TopicId": reg.topic_id, "Replicas": list(reg.replicas),
        "Isr": list(reg.isr), "RemovingReplicas": list(reg.removing_replicas),
        "AddingReplicas": list(reg.adding_replicas), "Leader": reg.leader,
        "LeaderRecoveryState": reg.leader_recovery_state, "LeaderEpoch": reg.leader_epoch,
        "PartitionEpoch": reg.partition_epoch,
    }
    directories = list(reg.directories)
    if version >= 1:
        data["Directories"] = directories or [MIGRATING_DIRECTORY] * len(reg.replicas)
    elif any(d != MIGRATING_DIRECTORY for d in directories):
        data["Directories"] = directories  # reported as lost by fields_lost
    # ELR fields are tagged and written only when non-empty, as Kafka does.
    if reg.eligible_leader_replicas:
        data["EligibleLeaderReplicas"] = list(reg.eligible_leader_replicas)
    if reg.last_known_elr:
        data["LastKnownElr"] = list(reg.last_known_elr)
    return data
