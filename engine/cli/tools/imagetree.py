"""The metadata image as a tree of nodes, laid out like kafka-metadata-shell's ``/image``.

    /image/provenance                          offset, epoch and timestamp of the last record
    /image/features/metadataVersion            e.g. 4.1-IV0
    /image/features/finalized_<feature>        finalized level of every other feature
    /image/cluster/brokers/<id>                BrokerRegistration(...)
    /image/cluster/controllers/<id>            ControllerRegistration(...)
    /image/topics/byName/<name>/{name,id,epoch,<partition>}
    /image/topics/byId/<topic id>/...          the same topic nodes, by Kafka's base64url topic id
    /image/configs/<RESOURCE_TYPE>/<name>/<key>   (<default> for the default resource)
    /image/clientQuotas/<entity>/<key>         entity as user=alice,client-id=<default>
    /image/producerIds/{nextProducerId,brokerId,brokerEpoch}
    /image/acls/byId/<acl id>
    /image/scram/<mechanism>/<user>            secrets redacted, as Kafka's shell does
    /image/delegationToken/<token id>          secrets redacted

Nodes are built on demand (a million partitions are never materialised unless a command walks
them); directories list their children sorted (numerically for ids and partitions). Leaf text is
the Kafka toString shape; ``data()`` gives the same facts as JSON-able values for --json.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from kraftlog.engine.image import versions
from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.image.topics import MIGRATING_DIRECTORY, halves_to_uuid
from kraftlog.engine.records.schema import uuid_from_kafka, uuid_to_kafka

DEFAULT_NAME = "<default>"
RESOURCE_TYPES = {0: "UNKNOWN", 2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}
SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
LEADER_RECOVERY_STATES = {0: "RECOVERED", 1: "RECOVERING"}
REDACTED = "[redacted]"
SECRET_FIELDS = {"Salt", "SaltedPassword", "StoredKey", "ServerKey", "Hmac"}


class Leaf:
    """A value: ``text()`` for cat, ``data()`` for JSON."""

    def __init__(self, text: Callable[[], str], data: Callable[[], Any] | None = None):
        self._text = text
        self._data = data

    def text(self) -> str:
        return self._text()

    def data(self) -> Any:
        return self._data() if self._data is not None else self._text()


class Dir:
    """A directory: ``names()`` lists children in display order, ``child(name)`` builds one."""

    def __init__(self, names: Callable[[], Iterable[str]], child: Callable[[str], Dir | Leaf | None]):
        self._names = names
        self._child = child

    def names(self) -> list[str]:
        return list(self._names())

    def child(self, name: str) -> Dir | Leaf | None:
        try:
            return self._child(name)
        except (KeyError, ValueError, IndexError):
            return None


def static_dir(children: Mapping[str, Callable[[], Dir | Leaf]]) -> Dir:
    return Dir(lambda: list(children), lambda name: children[name]())


def root(image: MetadataImage) -> Dir:
    """The tree's root: one child, ``image``."""
    return static_dir({"image": lambda: image_node(image)})


def image_node(image: MetadataImage) -> Dir:
    return static_dir({
        "provenance": lambda: _provenance(image),
        "features": lambda: _features(image),
        "cluster": lambda: _cluster(image),
        "topics": lambda: _topics(image),
        "configs": lambda: _configs(image),
        "clientQuotas": lambda: _client_quotas(image),
        "producerIds": lambda: _producer_ids(image),
        "acls": lambda: static_dir({"byId": lambda: _acls(image)}),
        "scram": lambda: _scram(image),
        "delegationToken": lambda: _tokens(image),
    })


def _int_names(keys: Iterable[int]) -> list[str]:
    return [str(k) for k in sorted(keys)]


def _provenance(image: MetadataImage) -> Leaf:
    p = image.provenance
    data = {"lastContainedOffset": p.offset, "lastContainedEpoch": p.epoch, "lastContainedLogTimeMs": p.timestamp_ms}
    return Leaf(lambda: "MetadataProvenance(" + ", ".join(f"{k}={v}" for k, v in data.items()) + ")", lambda: data)


def _features(image: MetadataImage) -> Dir:
    f = image.features

    def names():
        out = ["metadataVersion"] + [f"finalized_{n}" for n in sorted(f.finalized)]
        return out + (["zkMigrationState"] if image.zk_migration_state is not None else [])

    def child(name: str):
        if name == "metadataVersion":
            level = f.metadata_version
            return Leaf(lambda: versions.name(level) if level else "(not set)", lambda: level)
        if name == "zkMigrationState" and image.zk_migration_state is not None:
            return Leaf(lambda: str(image.zk_migration_state), lambda: image.zk_migration_state)
        if name.startswith("finalized_") and name[len("finalized_"):] in f.finalized:
            level = f.finalized[name[len("finalized_"):]]
            return Leaf(lambda: str(level), lambda: level)
        return None

    return Dir(names, child)


# -- cluster ------------------------------------------------------------------------------------


def _endpoints(endpoints) -> str:
    return "[" + ", ".join(f"Endpoint(listenerName='{e.name}', securityProtocol="
                           f"{SECURITY_PROTOCOLS.get(e.security_protocol, e.security_protocol)}, host='{e.host}', "
                           f"port={e.port})" for e in endpoints) + "]"


def _features_text(features) -> str:
    return "{" + ", ".join(f"{n}: {lo}-{hi}" for n, lo, hi in features) + "}"


def _broker_data(b) -> dict:
    return {"id": b.broker_id, "epoch": b.epoch, "incarnationId": uuid_to_kafka(b.incarnation_id),
            "listeners": [{"name": e.name, "host": e.host, "port": e.port,
                           "securityProtocol": SECURITY_PROTOCOLS.get(e.security_protocol, e.security_protocol)}
                          for e in b.endpoints],
            "supportedFeatures": {n: [lo, hi] for n, lo, hi in b.supported_features}, "rack": b.rack,
            "fenced": b.fenced, "inControlledShutdown": b.in_controlled_shutdown,
            "isMigratingZkBroker": b.is_migrating_zk_broker, "directories": [uuid_to_kafka(d) for d in b.log_dirs]}


def _broker_text(b) -> str:
    rack = f"Optional[{b.rack}]" if b.rack is not None else "Optional.empty"
    return (f"BrokerRegistration(id={b.broker_id}, epoch={b.epoch}, incarnationId={uuid_to_kafka(b.incarnation_id)}, "
            f"listeners={_endpoints(b.endpoints)}, supportedFeatures={_features_text(b.supported_features)}, "
            f"rack={rack}, fenced={_bool(b.fenced)}, inControlledShutdown={_bool(b.in_controlled_shutdown)}, "
            f"isMigratingZkBroker={_bool(b.is_migrating_zk_broker)}, "
            f"directories=[{', '.join(uuid_to_kafka(d) for d in b.log_dirs)}])")


def _controller_text(c) -> str:
    return (f"ControllerRegistration(id={c.controller_id}, incarnationId={uuid_to_kafka(c.incarnation_id)}, "
            f"zkMigrationReady={_bool(c.zk_migration_ready)}, listeners={_endpoints(c.endpoints)}, "
            f"supportedFeatures={_features_text(c.supported_features)})")


def _controller_data(c) -> dict:
    return {"id": c.controller_id, "incarnationId": uuid_to_kafka(c.incarnation_id),
            "zkMigrationReady": c.zk_migration_ready,
            "listeners": [{"name": e.name, "host": e.host, "port": e.port} for e in c.endpoints],
            "supportedFeatures": {n: [lo, hi] for n, lo, hi in c.supported_features}}


def _bool(value) -> str:
    return "true" if value else "false"


def _cluster(image: MetadataImage) -> Dir:
    brokers, controllers = image.cluster.brokers, image.cluster.controllers
    return static_dir({
        "brokers": lambda: Dir(lambda: _int_names(brokers),
                               lambda n: _registration_leaf(brokers[int(n)], _broker_text, _broker_data)),
        "controllers": lambda: Dir(lambda: _int_names(controllers),
                                   lambda n: _registration_leaf(controllers[int(n)], _controller_text,
                                                                _controller_data)),
    })


def _registration_leaf(reg, text, data) -> Leaf:
    return Leaf(lambda: text(reg), lambda: data(reg))


# -- topics -------------------------------------------------------------------------------------


def _topics(image: MetadataImage) -> Dir:
    topics = image.topics

    def by_name_names():
        return sorted(topics.topic_names())

    def by_id_names():
        live = topics.topics.column("live")
        rows = np.flatnonzero(live)
        hi, lo = topics.topics.column("id_hi")[rows], topics.topics.column("id_lo")[rows]
        return sorted(uuid_to_kafka(halves_to_uuid(int(h), int(low))) for h, low in zip(hi, lo, strict=True))

    def by_name(name: str):
        view = topics.topic(name)
        return None if view is None else _topic_node(image, view)

    def by_id(text: str):
        view = topics.topic_by_id(uuid_from_kafka(text))
        return None if view is None else _topic_node(image, view)

    return static_dir({"byName": lambda: Dir(by_name_names, by_name), "byId": lambda: Dir(by_id_names, by_id)})


def _topic_node(image: MetadataImage, view) -> Dir:
    fixed = {"name": lambda: Leaf(lambda: view.name),
             "id": lambda: Leaf(lambda: uuid_to_kafka(view.topic_id)),
             "epoch": lambda: Leaf(lambda: str(view.topic_epoch), lambda: view.topic_epoch)}

    def names():
        return list(fixed) + [str(p) for p in range(view.partition_count)]

    def child(name: str):
        if name in fixed:
            return fixed[name]()
        reg = image.topics.partition(view.name, int(name))
        return None if reg is None else Leaf(lambda: partition_text(reg), lambda: partition_data(reg))

    return Dir(names, child)


def _directories(reg) -> list[str]:
    dirs = reg.directories or (MIGRATING_DIRECTORY,) * len(reg.replicas)
    return [uuid_to_kafka(d) for d in dirs]


def _ints(values) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def partition_text(reg) -> str:
    """Kafka's PartitionRegistration.toString."""
    return (f"PartitionRegistration(replicas={_ints(reg.replicas)}, directories=[{', '.join(_directories(reg))}], "
            f"isr={_ints(reg.isr)}, removingReplicas={_ints(reg.removing_replicas)}, "
            f"addingReplicas={_ints(reg.adding_replicas)}, elr={_ints(reg.eligible_leader_replicas)}, "
            f"lastKnownElr={_ints(reg.last_known_elr)}, leader={reg.leader}, "
            f"leaderRecoveryState={LEADER_RECOVERY_STATES.get(reg.leader_recovery_state, reg.leader_recovery_state)}, "
            f"leaderEpoch={reg.leader_epoch}, partitionEpoch={reg.partition_epoch})")


def partition_data(reg) -> dict:
    return {"replicas": list(reg.replicas), "directories": _directories(reg), "isr": list(reg.isr),
            "removingReplicas": list(reg.removing_replicas), "addingReplicas": list(reg.adding_replicas),
            "elr": list(reg.eligible_leader_replicas), "lastKnownElr": list(reg.last_known_elr),
            "leader": reg.leader, "leaderRecoveryState": reg.leader_recovery_state,
            "leaderEpoch": reg.leader_epoch, "partitionEpoch": reg.partition_epoch}


# -- configs, quotas, producer ids, ACLs, SCRAM, tokens -----------------------------------------


def _value_dir(values: Mapping[str, Any]) -> Dir:
    return Dir(lambda: sorted(values), lambda k: Leaf(lambda: str(values[k]), lambda: values[k]))


def _configs(image: MetadataImage) -> Dir:
    configs = image.configs

    def type_names():
        return sorted({RESOURCE_TYPES.get(t, str(t)) for t, _ in configs})

    def type_dir(type_name: str):
        codes = [c for c, n in RESOURCE_TYPES.items() if n == type_name] or [int(type_name)]
        keys = {(name or DEFAULT_NAME): (t, name) for t, name in configs if t == codes[0]}
        if not keys:
            return None
        return Dir(lambda: sorted(keys), lambda n: _value_dir(configs[keys[n]]))

    return Dir(type_names, type_dir)


def _entity_name(entity) -> str:
    return ",".join(f"{t}={DEFAULT_NAME if n is None else n}" for t, n in entity)


def _client_quotas(image: MetadataImage) -> Dir:
    quotas = image.client_quotas
    names = {_entity_name(e): e for e in quotas}
    return Dir(lambda: sorted(names), lambda n: _value_dir(quotas[names[n]]))


def _producer_ids(image: MetadataImage) -> Dir:
    p = image.producer_ids
    return _value_dir({"nextProducerId": p.next_producer_id, "brokerId": p.broker_id, "brokerEpoch": p.broker_epoch})


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: (REDACTED if k in SECRET_FIELDS else _jsonable(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "bytes") and hasattr(value, "int"):  # uuid.UUID
        return uuid_to_kafka(value)
    return value


def _record_leaf(value: Mapping) -> Leaf:
    data = _jsonable(value)
    return Leaf(lambda: json.dumps(data, separators=(",", ":")), lambda: data)


def _acls(image: MetadataImage) -> Dir:
    acls = image.acls
    names = {uuid_to_kafka(k): k for k in acls}
    return Dir(lambda: sorted(names), lambda n: _record_leaf(acls[names[n]]))


def _scram(image: MetadataImage) -> Dir:
    scram = image.scram
    mechanisms = sorted({SCRAM_MECHANISMS.get(m, str(m)) for _, m in scram})

    def mechanism(name: str):
        code = next((c for c, n in SCRAM_MECHANISMS.items() if n == name), None)
        code = int(name) if code is None else code
        users = {u: (u, m) for u, m in scram if m == code}
        return Dir(lambda: sorted(users), lambda u: _record_leaf(scram[users[u]])) if users else None

    return Dir(lambda: mechanisms, mechanism)


def _tokens(image: MetadataImage) -> Dir:
    tokens = image.delegation_tokens
    return Dir(lambda: sorted(tokens), lambda n: _record_leaf(tokens[n]))


# -- paths --------------------------------------------------------------------------------------


def split(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def normalise(cwd: list[str], path: str) -> list[str]:
    """Absolute path components of ``path`` seen from ``cwd`` ('.' and '..' resolved)."""
    parts = [] if path.startswith("/") else list(cwd)
    for p in split(path):
        if p == ".":
            continue
        if p == "..":
            if parts:
                parts.pop()
            continue
        parts.append(p)
    return parts


def lookup(tree: Dir, parts: list[str]) -> Dir | Leaf | None:
    node: Dir | Leaf | None = tree
    for p in parts:
        if not isinstance(node, Dir):
            return None
        node = node.child(p)
    return node


def to_data(node: Dir | Leaf, depth: int | None) -> Any:
    """The subtree as nested dicts (leaves as their data), cut at ``depth`` levels (None: all)."""
    if isinstance(node, Leaf):
        return node.data()
    if depth is not None and depth <= 0:
        return {name: "..." for name in node.names()}
    out = {}
    for name in node.names():
        child = node.child(name)
        if child is not None:
            out[name] = to_data(child, None if depth is None else depth - 1)
    return out
