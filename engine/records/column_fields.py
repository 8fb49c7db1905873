"""One row of a decoded side-stream table as the generic codec's field dict, without decoding the
record's bytes again.

The dicts have Kafka's field names and the generic codec's value types (int, bool, float, str,
bytes, uuid.UUID, lists of dicts for struct arrays), so ``metadata.to_json`` prints them as it
prints a decoded record (the Spark rows' json) and MetadataDelta.replay_acl / replay_scram /
replay_token take them as they are (the side pass's
pure twin, engine/image/side_pure.py). A row with ``extras`` carries something its
table does not hold (unknown tags): callers give those records to the generic codec instead.
Tables and their columns: metadata_columns.MetadataColumns.

Each function returns (record type, fields) for row ``row`` of its table; a table that holds a
record and its removal (``removed``) names which.
"""

from __future__ import annotations

import uuid

import numpy as np


def text(blob: bytes, offsets: np.ndarray, row: int) -> str:
    """String ``row`` of a decoded blob (the decoders checked it is UTF-8)."""
    return blob[int(offsets[row]):int(offsets[row + 1])].decode()


def entries(ends: np.ndarray, row: int) -> range:
    """The entries of ``row`` in a table's flat list: ends[row - 1] (0 for row 0) .. ends[row]."""
    return range(int(ends[row - 1]) if row else 0, int(ends[row]))


def uuid_of(halves: np.ndarray) -> uuid.UUID:
    """A uint64[2] (most, least significant half) id."""
    hi, lo = halves.tolist()
    return uuid.UUID(int=(hi << 64) | lo)


def producer_ids(t, row: int) -> tuple[str, dict]:
    return "ProducerIdsRecord", {"BrokerId": int(t.broker_id[row]), "BrokerEpoch": int(t.broker_epoch[row]),
                                 "NextProducerId": int(t.next_producer_id[row])}


def acl(t, row: int) -> tuple[str, dict]:
    acl_id = uuid_of(t.acl_id[row])
    if bool(t.removed[row]):
        return "RemoveAccessControlEntryRecord", {"Id": acl_id}
    blob = t.acl_blob
    return "AccessControlEntryRecord", {
        "Id": acl_id, "ResourceType": int(t.resource_type[row]), "ResourceName": text(blob, t.resource_name_offsets, row),
        "PatternType": int(t.pattern_type[row]), "Principal": text(blob, t.principal_offsets, row),
        "Host": text(blob, t.host_offsets, row), "Operation": int(t.operation[row]),
        "PermissionType": int(t.permission_type[row])}


def client_quota(t, row: int) -> tuple[str, dict]:
    blob, null = t.entity_blob, t.entity_name_null
    entity = [{"EntityType": text(blob, t.entity_type_offsets, e),
               "EntityName": None if null[e] else text(blob, t.entity_name_offsets, e)} for e in entries(t.entity_end, row)]
    return "ClientQuotaRecord", {"Entity": entity, "Key": text(t.key_blob, t.key_offsets, row),
                                 "Value": float(t.value[row]), "Remove": bool(t.remove[row])}


def scram(t, row: int) -> tuple[str, dict]:
    blob = t.scram_blob
    fields = {"Name": text(blob, t.name_offsets, row), "Mechanism": int(t.mechanism[row])}
    if bool(t.removed[row]):
        return "RemoveUserScramCredentialRecord", fields
    for name, offsets in (("Salt", t.salt_offsets), ("StoredKey", t.stored_key_offsets),
                          ("ServerKey", t.server_key_offsets)):
        fields[name] = blob[int(offsets[row]):int(offsets[row + 1])]  # bytes, not text
    fields["Iterations"] = int(t.iterations[row])
    return "UserScramCredentialRecord", fields


def token(t, row: int) -> tuple[str, dict]:
    blob = t.token_blob
    token_id = text(blob, t.token_id_offsets, row)
    if bool(t.removed[row]):
        return "RemoveDelegationTokenRecord", {"TokenId": token_id}
    return "DelegationTokenRecord", {
        "Owner": text(blob, t.owner_offsets, row), "Requester": text(blob, t.requester_offsets, row),
        "Renewers": [text(blob, t.renewer_offsets, r) for r in entries(t.renewer_end, row)],
        "IssueTimestamp": int(t.issue_timestamp_ms[row]), "MaxTimestamp": int(t.max_timestamp_ms[row]),
        "ExpirationTimestamp": int(t.expiration_timestamp_ms[row]), "TokenId": token_id}


def register_broker(t, row: int) -> tuple[str, dict]:
    """Every field of every version (the defaults where the record's version lacks one, as the
    generic codec fills them)."""
    blob = t.broker_blob
    return "RegisterBrokerRecord", {
        "BrokerId": int(t.broker_id[row]), "IsMigratingZkBroker": bool(t.is_migrating_zk_broker[row]),
        "IncarnationId": uuid_of(t.incarnation_id[row]), "BrokerEpoch": int(t.broker_epoch[row]),
        "EndPoints": [{"Name": text(blob, t.endpoint_name_offsets, e), "Host": text(blob, t.endpoint_host_offsets, e),
                       "Port": int(t.endpoint_port[e]), "SecurityProtocol": int(t.endpoint_security_protocol[e])}
                      for e in entries(t.endpoint_end, row)],
        "Features": [{"Name": text(blob, t.feature_name_offsets, f), "MinSupportedVersion": int(t.feature_min_version[f]),
                      "MaxSupportedVersion": int(t.feature_max_version[f])} for f in entries(t.feature_end, row)],
        "Rack": None if bool(t.rack_null[row]) else text(blob, t.rack_offsets, row),
        "Fenced": bool(t.fenced[row]), "InControlledShutdown": bool(t.in_controlled_shutdown[row]),
        "LogDirs": [uuid_of(t.log_dirs[d]) for d in entries(t.log_dir_end, row)]}


# table name -> its function
BY_TABLE = {"producer_ids": producer_ids, "acls": acl, "client_quotas": client_quota, "scram": scram,
            "delegation_tokens": token, "broker_registrations": register_broker}

__all__ = ["BY_TABLE", "acl", "client_quota", "entries", "producer_ids", "register_broker", "scram", "text", "token",
           "uuid_of"]
