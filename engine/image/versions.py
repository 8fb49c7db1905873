"""metadata.version: the feature levels we know, and which record versions each level writes.

Levels follow Kafka's MetadataVersion numbering (the `metadata.version` feature level). What a
level enables, as far as records go:
    3.3-IV0  (4)   first level a KRaft cluster can bootstrap at
    3.3-IV3  (7)   InControlledShutdown: RegisterBrokerRecord v1, BrokerRegistrationChangeRecord v1
    3.4-IV0  (8)   ZK migration: RegisterBrokerRecord v2 (IsMigratingZkBroker)
    3.6-IV1  (13)  metadata transactions (Begin/End/AbortTransactionRecord)
    3.7-IV0  (15)  controller registration (RegisterControllerRecord); the floor for downgrade
    3.7-IV2  (17)  directory assignment: PartitionRecord / PartitionChangeRecord v1 (Directories),
                   RegisterBrokerRecord v3 and BrokerRegistrationChangeRecord v2 (LogDirs)
    4.0-IV1  (23)  eligible leader replicas: PartitionRecord / PartitionChangeRecord v2
    4.1-IV0  (26)  the first level whose nodes support downgrading metadata.version (KIP-1155)
"""

from __future__ import annotations

from kraftlog.errors import KraftlogError

LEVELS: dict[str, int] = {
    "3.0-IV1": 1, "3.1-IV0": 2, "3.2-IV0": 3, "3.3-IV0": 4, "3.3-IV1": 5, "3.3-IV2": 6, "3.3-IV3": 7,
    "3.4-IV0": 8, "3.5-IV0": 9, "3.5-IV1": 10, "3.5-IV2": 11, "3.6-IV0": 12, "3.6-IV1": 13, "3.6-IV2": 14,
    "3.7-IV0": 15, "3.7-IV1": 16, "3.7-IV2": 17, "3.7-IV3": 18, "3.7-IV4": 19, "3.8-IV0": 20,
    "3.9-IV0": 21, "4.0-IV0": 22, "4.0-IV1": 23, "4.0-IV2": 24, "4.0-IV3": 25, "4.1-IV0": 26,
}
NAMES: dict[int, str] = {level: name for name, level in LEVELS.items()}

MINIMUM_BOOTSTRAP = LEVELS["3.3-IV0"]
IN_CONTROLLED_SHUTDOWN = LEVELS["3.3-IV3"]
ZK_MIGRATION = LEVELS["3.4-IV0"]
METADATA_TRANSACTIONS = LEVELS["3.6-IV1"]
CONTROLLER_REGISTRATION = LEVELS["3.7-IV0"]
DOWNGRADE_FLOOR = LEVELS["3.7-IV0"]
DIRECTORY_ASSIGNMENT = LEVELS["3.7-IV2"]
ELIGIBLE_LEADER_REPLICAS = LEVELS["4.0-IV1"]
DOWNGRADE_SUPPORTED = LEVELS["4.1-IV0"]
LATEST = max(LEVELS.values())


class UnknownMetadataVersionError(KraftlogError):
    """A metadata.version name or level this build does not know."""


def parse(value: str | int) -> int:
    """A level from a name ("3.7-IV0", also "3.7" for its latest IV) or a number."""
    if isinstance(value, int) or str(value).isdigit():
        level = int(value)
        if level not in NAMES:
            raise UnknownMetadataVersionError(f"unknown metadata.version level {level} (known: 1..{LATEST})")
        return level
    if value in LEVELS:
        return LEVELS[value]
    release = [level for name, level in LEVELS.items() if name.split("-")[0] == value]
    if release:
        return max(release)
    raise UnknownMetadataVersionError(f"unknown metadata.version {value!r} (e.g. 3.7-IV0, 4.1-IV0)")


def name(level: int) -> str:
    return NAMES.get(level, f"level {level}")


def partition_record_version(level: int) -> int:
    return 2 if level >= ELIGIBLE_LEADER_REPLICAS else 1 if level >= DIRECTORY_ASSIGNMENT else 0


def partition_change_record_version(level: int) -> int:
    return partition_record_version(level)


def register_broker_record_version(level: int) -> int:
    if level >= DIRECTORY_ASSIGNMENT:
        return 3
    if level >= ZK_MIGRATION:
        return 2
    return 1 if level >= IN_CONTROLLED_SHUTDOWN else 0


def broker_registration_change_record_version(level: int) -> int:
    return 2 if level >= DIRECTORY_ASSIGNMENT else 1 if level >= IN_CONTROLLED_SHUTDOWN else 0
