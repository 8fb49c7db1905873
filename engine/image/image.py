"""MetadataImage and MetadataDelta: the state a metadata log describes, and the edit that moves it on.

An image is immutable once published. A delta replays records in log order (``replay``), then
``apply()`` builds the next image, sharing every unchanged part with the old one: the topics image
shares its column chunks (see topics.py); the small sub-images below are immutable mappings that a
delta copies only when a record really changes them. So a delta holds only real changes:
replaying a record that changes nothing (the same config value again, fencing a fenced broker, the
same feature level) leaves ``changed`` empty.

Sub-images and the records that edit them:
    features         FeatureLevelRecord (metadata.version and every other finalized feature)
    cluster          RegisterBrokerRecord, UnregisterBrokerRecord, FenceBrokerRecord,
                     UnfenceBrokerRecord, BrokerRegistrationChangeRecord, RegisterControllerRecord
    topics           TopicRecord, PartitionRecord, PartitionChangeRecord, RemoveTopicRecord
    configs          ConfigRecord (a null value deletes the key); RemoveTopicRecord drops the
                     topic's configs
    client_quotas    ClientQuotaRecord
    producer_ids     ProducerIdsRecord
    acls             AccessControlEntryRecord, RemoveAccessControlEntryRecord
    scram            UserScramCredentialRecord, RemoveUserScramCredentialRecord
    delegation_tokens DelegationTokenRecord, RemoveDelegationTokenRecord
    (no state)       NoOpRecord, ZkMigrationStateRecord (kept), Begin/End/AbortTransactionRecord
                     (the loader holds back a transaction's records until its end)
Records the image carries without interpreting them are kept as their decoded data, so an image
written back out (writer.py) loses nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from kraftlog.engine.image.configs import TOPIC_RESOURCE_TYPE, edited_config
from kraftlog.engine.image.topics import MetadataReplayError, TopicsDelta, TopicsImage

METADATA_VERSION = "metadata.version"
EMPTY: Mapping = MappingProxyType({})

# Kafka's BrokerRegistrationFencingChange / InControlledShutdownChange values.
FENCING_FENCE, FENCING_NONE, FENCING_UNFENCE = 1, 0, -1
CONTROLLED_SHUTDOWN_NONE, CONTROLLED_SHUTDOWN_IN = 0, 1


@dataclass(frozen=True)
class Provenance:
    """Where an image comes from: the last record's offset and epoch, and its batch timestamp."""

    offset: int = -1
    epoch: int = -1
    timestamp_ms: int = -1


@dataclass(frozen=True)
class FeaturesImage:
    metadata_version: int = 0  # 0: not yet set (a log must set it before anything else matters)
    finalized: Mapping[str, int] = field(default_factory=lambda: EMPTY)  # every finalized feature except metadata.version

    def level(self, name: str) -> int:
        return self.metadata_version if name == METADATA_VERSION else self.finalized.get(name, 0)


@dataclass(frozen=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    epoch: int
    incarnation_id: uuid.UUID
    endpoints: tuple[Endpoint, ...]
    supported_features: tuple[tuple[str, int, int], ...]  # (name, min, max)
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    is_migrating_zk_broker: bool = False
    log_dirs: tuple[uuid.UUID, ...] = ()

    def supports(self, feature: str, level: int) -> bool:
        for name, low, high in self.supported_features:
            if name == feature:
                return low <= level <= high
        return level == 0


@dataclass(frozen=True)
class ControllerRegistration:
    controller_id: int
    incarnation_id: uuid.UUID
    zk_migration_ready: bool
    endpoints: tuple[Endpoint, ...]
    supported_features: tuple[tuple[str, int, int], ...]

    def supports(self, feature: str, level: int) -> bool:
        for name, low, high in self.supported_features:
            if name == feature:
                return low <= level <= high
        return level == 0


@dataclass(frozen=True)
class ClusterImage:
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=lambda: EMPTY)
    controllers: Mapping[int, ControllerRegistration] = field(default_factory=lambda: EMPTY)

    def live_brokers(self) -> list[BrokerRegistration]:
        """Brokers that are registered and neither fenced nor shutting down (metadata answers use these)."""
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced and not b.in_controlled_shutdown]


@dataclass(frozen=True)
class ProducerIdsImage:
    next_producer_id: int = -1
    broker_id: int = -1
    broker_epoch: int = -1


def _freeze(value: Any) -> Any:
    """Deep-immutable copy of decoded record data (dicts -> mapping proxies, lists -> tuples)."""
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Back to plain dicts and lists (for encoding)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class MetadataImage:
    provenance: Provenance = Provenance()
    features: FeaturesImage = FeaturesImage()
    cluster: ClusterImage = ClusterImage()
    topics: TopicsImage = field(default_factory=TopicsImage.empty)
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=lambda: EMPTY)
    client_quotas: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]] = field(default_factory=lambda: EMPTY)
    producer_ids: ProducerIdsImage = ProducerIdsImage()
    acls: Mapping[uuid.UUID, Mapping[str, Any]] = field(default_factory=lambda: EMPTY)
    scram: Mapping[tuple[str, int], Mapping[str, Any]] = field(default_factory=lambda: EMPTY)
    delegation_tokens: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: EMPTY)
    zk_migration_state: int | None = None

    @classmethod
    def empty(cls) -> MetadataImage:
        return cls()

    def delta(self) -> MetadataDelta:
        return MetadataDelta(self)

    @property
    def is_empty(self) -> bool:
        return self.provenance.offset < 0 and not self.cluster.brokers and self.topics.live_topics == 0


class _MapDelta:
    """Copy-on-first-write editing of one immutable mapping."""

    def __init__(self, base: Mapping):
        self.base = base
        self.items: dict | None = None

    def get(self, key, default=None):
        return (self.items if self.items is not None else self.base).get(key, default)

    def put(self, key, value) -> bool:
        if self.get(key, _MISSING) == value:
            return False
        self._own()[key] = value
        return True

    def remove(self, key) -> bool:
        if self.get(key, _MISSING) is _MISSING:
            return False
        del self._own()[key]
        return True

    def _own(self) -> dict:
        if self.items is None:
            self.items = dict(self.base)
        return self.items

    def writable(self) -> dict:
        """The mapping as a dict this delta owns (copied from the base on the first call): for a
        native writer (the loader's topic-stream pass), which reads ``items`` / ``base`` itself."""
        return self._own()

    def result(self) -> Mapping:
        return self.base if self.items is None else MappingProxyType(self.items)


_MISSING = object()


class MetadataDelta:
    """Replays records onto an image. Not thread-safe; one delta per loader step."""

    def __init__(self, image: MetadataImage):
        self.image = image
        self._topics: TopicsDelta | None = None
        self.features = _MapDelta(image.features.finalized)
        self.metadata_version = image.features.metadata_version
        self.brokers = _MapDelta(image.cluster.brokers)
        self.controllers = _MapDelta(image.cluster.controllers)
        self.configs = _MapDelta(image.configs)
        self.client_quotas = _MapDelta(image.client_quotas)
        self.acls = _MapDelta(image.acls)
        self.scram = _MapDelta(image.scram)
        self.delegation_tokens = _MapDelta(image.delegation_tokens)
        self.producer_ids = image.producer_ids
        self.zk_migration_state = image.zk_migration_state
        self.changed: set[str] = set()  # names of the sub-images that really changed

    @property
    def topics(self) -> TopicsDelta:
        if self._topics is None:
            self._topics = self.image.topics.delta()
        return self._topics

    # -- replay ---------------------------------------------------------------------------------
    def replay(self, record_type: str, data: Mapping[str, Any], *, topic_epoch: int | None = -1) -> None:
        """Apply one decoded metadata record (``data`` keyed by Kafka's field names).

        ``topic_epoch`` is the KIP-232 epoch a TopicRecord or a new PartitionRecord gives its
        topic: the record's log offset when replaying a log, the snapshot's end offset (or the
        epoch carried in the record's tagged field) when loading a snapshot.
        """
        handler = _HANDLERS.get(record_type)
        if handler is None:
            raise MetadataReplayError(f"cannot replay a {record_type}")
        handler(self, data, topic_epoch)

    def _topic_record(self, d, topic_epoch):
        self.replay_topic(d["TopicId"], d["Name"], topic_epoch)

    def replay_topic(self, topic_id: uuid.UUID, name: str, topic_epoch: int | None) -> None:
        """A TopicRecord given by its fields: what the loader calls with the decoded columns."""
        self.topics.replay_topic(topic_id, name, -1 if topic_epoch is None else topic_epoch)
        self._mark_topics()

    def _partition_record(self, d, topic_epoch):
        self.replay_partition(
            d["TopicId"], d["PartitionId"], topic_epoch, replicas=d["Replicas"], isr=d["Isr"], leader=d["Leader"],
            leader_epoch=d["LeaderEpoch"], partition_epoch=d["PartitionEpoch"],
            leader_recovery_state=d.get("LeaderRecoveryState", 0), removing_replicas=d["RemovingReplicas"],
            adding_replicas=d["AddingReplicas"], directories=d.get("Directories") or (),
            eligible_leader_replicas=d.get("EligibleLeaderReplicas"), last_known_elr=d.get("LastKnownElr"))

    def replay_partition(self, topic_id: uuid.UUID, partition_id: int, topic_epoch: int | None, **fields) -> None:
        """A PartitionRecord given by its fields (TopicsDelta.replay_partition's keywords)."""
        self.topics.replay_partition(topic_id, partition_id, topic_epoch=topic_epoch, **fields)
        self._mark_topics()

    def _partition_change(self, d, topic_epoch):
        self.replay_partition_change(
            d["TopicId"], d["PartitionId"], leader=d.get("Leader", -2), isr=d.get("Isr"),
            replicas=d.get("Replicas"), removing_replicas=d.get("RemovingReplicas"),
            adding_replicas=d.get("AddingReplicas"), leader_recovery_state=d.get("LeaderRecoveryState", -1),
            directories=d.get("Directories"), eligible_leader_replicas=d.get("EligibleLeaderReplicas"),
            last_known_elr=d.get("LastKnownElr"))

    def replay_partition_change(self, topic_id: uuid.UUID, partition_id: int, **fields) -> None:
        """A PartitionChangeRecord given by its fields (TopicsDelta.replay_partition_change's keywords)."""
        self.topics.replay_partition_change(topic_id, partition_id, **fields)
        self._mark_topics()

    def _remove_topic(self, d, topic_epoch):
        self.replay_remove_topic(d["TopicId"])

    def replay_remove_topic(self, topic_id: uuid.UUID) -> None:
        """A RemoveTopicRecord given by its field: what the loader calls with the decoded columns."""
        name = self.topics.replay_remove_topic(topic_id)
        self._mark_topics()
        # Kafka's MetadataDelta replays a RemoveTopicRecord into ConfigurationsDelta too: the
        # topic's configs go with it, so a later topic of the same name starts with none (and a
        # full replay equals snapshot + tail: a snapshot never holds a deleted topic's configs).
        # Kafka looks only at the base image there; we also drop configs set earlier in this delta,
        # which its controller never leaves behind either (deleteTopicConfigs).
        if self.configs.remove((TOPIC_RESOURCE_TYPE, name)):
            self.changed.add("configs")

    def _mark_topics(self):
        if self._topics is not None and self._topics.changes:
            self.changed.add("topics")

    def _feature_level(self, d, topic_epoch):
        self.replay_feature_level(d["Name"], d["FeatureLevel"])

    def replay_feature_level(self, name: str, level: int) -> None:
        """A FeatureLevelRecord given by its fields (level 0 removes a feature)."""
        if name == METADATA_VERSION:
            if level != self.metadata_version:
                self.metadata_version = level
                self.changed.add("features")
            return
        changed = self.features.put(name, level) if level else self.features.remove(name)
        if changed:
            self.changed.add("features")

    def _register_broker(self, d, topic_epoch):
        self.replay_register_broker(d)

    def replay_register_broker(self, fields: Mapping[str, Any]) -> None:
        """A RegisterBrokerRecord given by its fields (the generic codec's, or the loader's from the
        decoded columns: column_fields.register_broker): the registration replaces the broker's
        earlier one whole."""
        registration = BrokerRegistration(
            broker_id=fields["BrokerId"], epoch=fields["BrokerEpoch"], incarnation_id=fields["IncarnationId"],
            endpoints=_endpoints(fields), supported_features=_features(fields), rack=fields["Rack"],
            fenced=fields["Fenced"], in_controlled_shutdown=fields.get("InControlledShutdown", False),
            is_migrating_zk_broker=fields.get("IsMigratingZkBroker", False),
            log_dirs=tuple(fields.get("LogDirs") or ()))
        self.put_broker(registration)

    def put_broker(self, registration: BrokerRegistration) -> None:
        """The broker's registration becomes ``registration`` (the one write of every broker
        record, and of the loader's side-stream pass, which builds it from the columns)."""
        if self.brokers.put(registration.broker_id, registration):
            self.changed.add("cluster")

    def _unregister_broker(self, d, topic_epoch):
        current = self.brokers.get(d["BrokerId"])
        if current is not None and current.epoch == d["BrokerEpoch"] and self.brokers.remove(d["BrokerId"]):
            self.changed.add("cluster")

    def _broker_or_raise(self, broker_id: int, epoch: int, what: str) -> BrokerRegistration:
        current = self.brokers.get(broker_id)
        if current is None:
            raise MetadataReplayError(f"{what} for unregistered broker {broker_id}")
        if current.epoch != epoch:
            raise MetadataReplayError(f"{what} for broker {broker_id} at epoch {epoch}, registered at {current.epoch}")
        return current

    def _fence(self, d, topic_epoch, fenced: bool = True):
        self.replay_fence(d["Id"], d["Epoch"], fenced)

    def replay_fence(self, broker_id: int, broker_epoch: int, fenced: bool) -> None:
        """A FenceBrokerRecord (fenced) or UnfenceBrokerRecord given by its fields."""
        current = self._broker_or_raise(broker_id, broker_epoch, "FenceBrokerRecord" if fenced else "UnfenceBrokerRecord")
        # Kafka's ClusterDelta: a fence is a registration change with FENCE (UNFENCE) and no
        # controlled-shutdown change, merged by the same rule
        self.put_broker(apply_broker_change(current, FENCING_FENCE if fenced else FENCING_UNFENCE,
                                            CONTROLLED_SHUTDOWN_NONE, None))

    def _unfence(self, d, topic_epoch):
        self._fence(d, topic_epoch, fenced=False)

    def _broker_change(self, d, topic_epoch):
        self.replay_broker_change(d["BrokerId"], d["BrokerEpoch"], d.get("Fenced", FENCING_NONE),
                                  d.get("InControlledShutdown", CONTROLLED_SHUTDOWN_NONE), d.get("LogDirs"))

    def replay_broker_change(self, broker_id: int, broker_epoch: int, fencing: int, controlled_shutdown: int,
                             log_dirs=None) -> None:
        """A BrokerRegistrationChangeRecord given by its fields (Kafka's enums: fencing 1 fence,
        0 none, -1 unfence; controlled shutdown 1 in, 0 none): what the loader calls with the
        decoded columns, without a per-record dict."""
        current = self._broker_or_raise(broker_id, broker_epoch, "BrokerRegistrationChangeRecord")
        self.put_broker(apply_broker_change(current, fencing, controlled_shutdown, log_dirs))

    def _register_controller(self, d, topic_epoch):
        registration = ControllerRegistration(
            controller_id=d["ControllerId"], incarnation_id=d["IncarnationId"],
            zk_migration_ready=d["ZkMigrationReady"], endpoints=_endpoints(d), supported_features=_features(d))
        if self.controllers.put(registration.controller_id, registration):
            self.changed.add("cluster")

    def _config(self, d, topic_epoch):
        self.replay_config(d["ResourceType"], d["ResourceName"], d["Name"], d["Value"])

    def replay_config(self, resource_type: int, resource_name: str, name: str, value: str | None) -> None:
        key = (resource_type, resource_name)
        current = self.configs.get(key)
        updated = edited_config(current, name, value)
        if updated is current:
            return
        if updated is None:
            self.configs.remove(key)
        else:
            self.configs.put(key, updated)
        self.changed.add("configs")

    def _client_quota(self, d, topic_epoch):
        self.replay_client_quota([(e["EntityType"], e["EntityName"]) for e in d["Entity"]], d["Key"], d["Value"],
                                 d["Remove"])

    def replay_client_quota(self, entity: list[tuple[str, str | None]], key: str, value: float, remove: bool) -> None:
        """A ClientQuotaRecord given by its fields (entity: its (EntityType, EntityName) pairs)."""
        entity = tuple(sorted(entity))
        current = self.client_quotas.get(entity, EMPTY)
        updated = dict(current)
        if remove:
            if key not in updated:
                return
            del updated[key]
        else:
            if updated.get(key) == value:
                return
            updated[key] = value
        if updated:
            self.client_quotas.put(entity, MappingProxyType(updated))
        else:
            self.client_quotas.remove(entity)
        self.changed.add("client_quotas")

    def _producer_ids(self, d, topic_epoch):
        self.replay_producer_ids(d["NextProducerId"], d["BrokerId"], d["BrokerEpoch"])

    def replay_producer_ids(self, next_producer_id: int, broker_id: int, broker_epoch: int) -> None:
        """A ProducerIdsRecord given by its fields."""
        updated = ProducerIdsImage(next_producer_id, broker_id, broker_epoch)
        if updated != self.producer_ids:
            self.producer_ids = updated
            self.changed.add("producer_ids")

    def _acl(self, d, topic_epoch):
        self.replay_acl(dict(d))

    def replay_acl(self, fields: dict[str, Any]) -> None:
        """An AccessControlEntryRecord given by its fields (Id, ResourceType, ResourceName,
        PatternType, Principal, Host, Operation, PermissionType): the image keeps them all."""
        self.put_acl(fields["Id"], _freeze(fields))

    def put_acl(self, acl_id: uuid.UUID, entry: Mapping[str, Any]) -> None:
        """ACL ``acl_id`` becomes ``entry`` (its record's fields, immutable): replay_acl's write,
        and the loader's side-stream pass's, which builds the entry from the columns."""
        if self.acls.put(acl_id, entry):
            self.changed.add("acls")

    def _remove_acl(self, d, topic_epoch):
        self.replay_remove_acl(d["Id"])

    def replay_remove_acl(self, acl_id: uuid.UUID) -> None:
        """A RemoveAccessControlEntryRecord given by its field."""
        if self.acls.remove(acl_id):
            self.changed.add("acls")

    def _scram(self, d, topic_epoch):
        self.replay_scram(dict(d))

    def replay_scram(self, fields: dict[str, Any]) -> None:
        """A UserScramCredentialRecord given by its fields (Name, Mechanism, Salt, StoredKey,
        ServerKey, Iterations): the image keeps them all, keyed by (Name, Mechanism)."""
        self.put_scram(fields["Name"], fields["Mechanism"], _freeze(fields))

    def put_scram(self, name: str, mechanism: int, entry: Mapping[str, Any]) -> None:
        """The credential of (``name``, ``mechanism``) becomes ``entry`` (its record's fields,
        immutable): replay_scram's write, and the side-stream pass's."""
        if self.scram.put((name, mechanism), entry):
            self.changed.add("scram")

    def _remove_scram(self, d, topic_epoch):
        self.replay_remove_scram(d["Name"], d["Mechanism"])

    def replay_remove_scram(self, name: str, mechanism: int) -> None:
        """A RemoveUserScramCredentialRecord given by its fields."""
        if self.scram.remove((name, mechanism)):
            self.changed.add("scram")

    def _token(self, d, topic_epoch):
        self.replay_token(dict(d))

    def replay_token(self, fields: dict[str, Any]) -> None:
        """A DelegationTokenRecord given by its fields (Owner, Requester, Renewers, IssueTimestamp,
        MaxTimestamp, ExpirationTimestamp, TokenId): the image keeps them all, keyed by TokenId."""
        self.put_token(fields["TokenId"], _freeze(fields))

    def put_token(self, token_id: str, entry: Mapping[str, Any]) -> None:
        """Token ``token_id`` becomes ``entry`` (its record's fields, immutable): replay_token's
        write, and the side-stream pass's."""
        if self.delegation_tokens.put(token_id, entry):
            self.changed.add("delegation_tokens")

    def _remove_token(self, d, topic_epoch):
        self.replay_remove_token(d["TokenId"])

    def replay_remove_token(self, token_id: str) -> None:
        """A RemoveDelegationTokenRecord given by its field."""
        if self.delegation_tokens.remove(token_id):
            self.changed.add("delegation_tokens")

    def _zk_migration(self, d, topic_epoch):
        if d["ZkMigrationState"] != self.zk_migration_state:
            self.zk_migration_state = d["ZkMigrationState"]
            self.changed.add("zk_migration")

    def _nothing(self, d, topic_epoch):
        """NoOpRecord and the transaction markers change no state (the loader handles transactions)."""

    # -- apply ----------------------------------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        return not self.changed

    def apply(self, provenance: Provenance | None = None) -> MetadataImage:
        image = self.image
        features = image.features
        if "features" in self.changed:
            features = FeaturesImage(self.metadata_version, self.features.result())
        cluster = image.cluster
        if "cluster" in self.changed:
            cluster = ClusterImage(self.brokers.result(), self.controllers.result())
        topics = self._topics.apply() if self._topics is not None and "topics" in self.changed else image.topics
        return MetadataImage(
            provenance=provenance or image.provenance,
            features=features,
            cluster=cluster,
            topics=topics,
            configs=self.configs.result(),
            client_quotas=self.client_quotas.result(),
            producer_ids=self.producer_ids,
            acls=self.acls.result(),
            scram=self.scram.result(),
            delegation_tokens=self.delegation_tokens.result(),
            zk_migration_state=self.zk_migration_state,
        )


def _endpoints(d) -> tuple[Endpoint, ...]:
    """EndPoints of a Register{Broker,Controller}Record."""
    return tuple(Endpoint(e["Name"], e["Host"], e["Port"], e["SecurityProtocol"]) for e in d["EndPoints"])


def _features(d) -> tuple[tuple[str, int, int], ...]:
    """Features (name, min, max) of a Register{Broker,Controller}Record."""
    return tuple((f["Name"], f["MinSupportedVersion"], f["MaxSupportedVersion"]) for f in d["Features"])


def apply_broker_change(current: BrokerRegistration, fencing: int, controlled_shutdown: int,
                        log_dirs) -> BrokerRegistration:
    """BrokerRegistrationChangeRecord semantics (Kafka's fencing / controlled-shutdown change enums;
    Fence/UnfenceBrokerRecord too): the one definition, which replay_broker_change and replay_fence
    use, and so the loader's side-stream pass (it calls them)."""
    if fencing not in (FENCING_FENCE, FENCING_NONE, FENCING_UNFENCE):
        raise MetadataReplayError(f"invalid fencing change {fencing} for broker {current.broker_id}")
    if controlled_shutdown not in (CONTROLLED_SHUTDOWN_NONE, CONTROLLED_SHUTDOWN_IN):
        raise MetadataReplayError(f"invalid controlled shutdown change {controlled_shutdown} "
                                  f"for broker {current.broker_id}")
    changes = {}
    if fencing != FENCING_NONE and current.fenced != (fencing == FENCING_FENCE):
        changes["fenced"] = fencing == FENCING_FENCE
    if controlled_shutdown == CONTROLLED_SHUTDOWN_IN and not current.in_controlled_shutdown:
        changes["in_controlled_shutdown"] = True
    if log_dirs and tuple(log_dirs) != current.log_dirs:
        changes["log_dirs"] = tuple(log_dirs)
    # one copy at most (dataclasses.replace is most of a change's cost), none when nothing moves
    return replace(current, **changes) if changes else current


_HANDLERS = {
    "TopicRecord": MetadataDelta._topic_record,
    "PartitionRecord": MetadataDelta._partition_record,
    "PartitionChangeRecord": MetadataDelta._partition_change,
    "RemoveTopicRecord": MetadataDelta._remove_topic,
    "FeatureLevelRecord": MetadataDelta._feature_level,
    "RegisterBrokerRecord": MetadataDelta._register_broker,
    "UnregisterBrokerRecord": MetadataDelta._unregister_broker,
    "FenceBrokerRecord": MetadataDelta._fence,
    "UnfenceBrokerRecord": MetadataDelta._unfence,
    "BrokerRegistrationChangeRecord": MetadataDelta._broker_change,
    "RegisterControllerRecord": MetadataDelta._register_controller,
    "ConfigRecord": MetadataDelta._config,
    "ClientQuotaRecord": MetadataDelta._client_quota,
    "ProducerIdsRecord": MetadataDelta._producer_ids,
    "AccessControlEntryRecord": MetadataDelta._acl,
    "RemoveAccessControlEntryRecord": MetadataDelta._remove_acl,
    "UserScramCredentialRecord": MetadataDelta._scram,
    "RemoveUserScramCredentialRecord": MetadataDelta._remove_scram,
    "DelegationTokenRecord": MetadataDelta._token,
    "RemoveDelegationTokenRecord": MetadataDelta._remove_token,
    "ZkMigrationStateRecord": MetadataDelta._zk_migration,
    "NoOpRecord": MetadataDelta._nothing,
    "BeginTransactionRecord": MetadataDelta._nothing,
    "EndTransactionRecord": MetadataDelta._nothing,
    "AbortTransactionRecord": MetadataDelta._nothing,
}
