"""Proves the loader against the generic per-record replay (``MetadataDelta.replay``, the oracle) on
Hypothesis-generated mixed logs over every metadata record type: topic creates with configs,
deletes and re-creates of one name, partition additions, sequences of PartitionChangeRecords on one
partition (leader, ISR, replicas, adding / removing, ELR, directories, recovery state), brokers
registering (0-3 endpoints, features, log dirs, a rack or none), fencing, changing and leaving,
controllers, features, quotas, producer ids, ACLs, SCRAM, tokens, ZK migration state, NoOps,
committed / aborted / still-open transactions, all cut into batches and regions at arbitrary records
(inside a topic's creation too). The loader on the native decoder, the loader on the pure twin
decoder and the generic replay give equal images, field by field (broker registrations with their
values' types too), for a whole-log replay, a replay in regions, and a snapshot (the oracle's image
written at a cut) plus the tail."""

from __future__ import annotations

import copy
import functools
import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from image_summary import full_summary

from kraftlog.engine.image import versions
from kraftlog.engine.image.image import MetadataImage, Provenance
from kraftlog.engine.image.loader import Loader, MetadataLoadError
from kraftlog.engine.image.topics import MetadataReplayError
from kraftlog.engine.image.writer import write_image
from kraftlog.engine.records import batch, layout, metadata_columns, metadata_columns_pure
from kraftlog.engine.records import metadata as codec

pytestmark = pytest.mark.twin

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])  # decoder: one choice per test
TOPIC_CONFIG, BROKER_CONFIG = 2, 4
NAMES = ["a", "b", "c", "d", "e"]  # few names, so deletes are often followed by a re-create
BROKERS = list(range(1, 6))
DIRS = [uuid.UUID(int=1), *(uuid.UUID(int=0x100 + k) for k in range(3))]  # UNASSIGNED and three real ones
SNAPSHOT_TIMESTAMP_MS = 77
MIGRATING = uuid.UUID(int=0)


# ---- the model the generator keeps, so every record applies -------------------------------------

@dataclass
class Model:
    brokers: dict[int, int] = field(default_factory=dict)  # id -> epoch
    topics: dict[str, tuple[uuid.UUID, set[int]]] = field(default_factory=dict)  # name -> (id, partition ids)
    replicas: dict[tuple[str, int], int] = field(default_factory=dict)  # (name, partition) -> replica count
    acls: list[uuid.UUID] = field(default_factory=list)
    scram: list[tuple[str, int]] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    next_epoch: int = 10


small_ids = st.lists(st.sampled_from(BROKERS), max_size=4, unique=True)
maybe_ids = st.one_of(st.none(), small_ids)


def _partition_record(draw, tid: uuid.UUID, pid: int) -> tuple:
    version = draw(st.integers(0, 2))
    replicas = draw(st.lists(st.sampled_from(BROKERS), min_size=1, max_size=4, unique=True))
    data = {"TopicId": tid, "PartitionId": pid, "Replicas": replicas,
            "Isr": draw(st.lists(st.sampled_from(replicas), max_size=len(replicas), unique=True)),
            "RemovingReplicas": draw(st.one_of(st.just([]), small_ids)),
            "AddingReplicas": draw(st.one_of(st.just([]), small_ids)),
            "Leader": draw(st.sampled_from([-1, *replicas])), "LeaderEpoch": draw(st.integers(0, 5)),
            "PartitionEpoch": draw(st.integers(0, 5)), "LeaderRecoveryState": draw(st.sampled_from([0, 0, 1]))}
    if version >= 1:
        # MIGRATING (the zero id) too: all MIGRATING is stored as no directories, on every path
        data["Directories"] = draw(st.one_of(st.just([]), st.lists(st.sampled_from([MIGRATING, *DIRS]),
                                                                   min_size=len(replicas), max_size=len(replicas))))
    if version >= 2:
        data["EligibleLeaderReplicas"] = draw(maybe_ids)
        data["LastKnownElr"] = draw(maybe_ids)
    return "PartitionRecord", version, data, len(replicas)


def create_topic(draw, m: Model) -> list[tuple]:
    free = [n for n in NAMES if n not in m.topics]
    if not free:
        return []
    name, tid = draw(st.sampled_from(free)), uuid.UUID(int=draw(st.integers(1, 1 << 64)))
    if any(t == tid for t, _ in m.topics.values()):
        return []
    count = draw(st.integers(1, 4))
    pids = list(range(count)) if draw(st.integers(0, 4)) else sorted(draw(st.sets(st.integers(0, 5), min_size=1)))
    out = [("TopicRecord", 0, {"Name": name, "TopicId": tid})]
    for pid in pids:
        *record, n = _partition_record(draw, tid, pid)
        out.append(tuple(record))
        m.replicas[(name, pid)] = n
    for key in draw(st.lists(st.sampled_from(["cleanup.policy", "retention.ms"]), max_size=2, unique=True)):
        out.append(("ConfigRecord", 0, {"ResourceType": TOPIC_CONFIG, "ResourceName": name, "Name": key,
                                        "Value": draw(st.sampled_from(["compact", "delete", "1000"]))}))
    m.topics[name] = (tid, set(pids))
    return out


def remove_topic(draw, m: Model) -> list[tuple]:
    if not m.topics:
        return []
    name = draw(st.sampled_from(sorted(m.topics)))
    tid, pids = m.topics.pop(name)
    for pid in pids:
        m.replicas.pop((name, pid), None)
    return [("RemoveTopicRecord", 0, {"TopicId": tid})]


def add_partitions(draw, m: Model) -> list[tuple]:
    """CreatePartitions (new ids past the last), or a PartitionRecord over an existing partition."""
    if not m.topics:
        return []
    name = draw(st.sampled_from(sorted(m.topics)))
    tid, pids = m.topics[name]
    new = draw(st.lists(st.integers(0, max(pids) + 2), min_size=1, max_size=3, unique=True))
    out = []
    for pid in new:
        *record, n = _partition_record(draw, tid, pid)
        out.append(tuple(record))
        m.replicas[(name, pid)] = n
        pids.add(pid)
    return out


def partition_changes(draw, m: Model) -> list[tuple]:
    """One to twelve PartitionChangeRecords, often on one partition (the merge rules compose)."""
    if not m.topics:
        return []
    out = []
    same = draw(st.booleans())
    target = None
    for _ in range(draw(st.integers(1, 12))):  # past BULK_MIN_RECORDS: the loader's bulk path
        if target is None or not same:
            name = draw(st.sampled_from(sorted(m.topics)))
            tid, pids = m.topics[name]
            target = (name, tid, draw(st.sampled_from(sorted(pids))))
        name, tid, pid = target
        out.append(_partition_change(draw, m, name, tid, pid))
    return out


def _partition_change(draw, m: Model, name: str, tid: uuid.UUID, pid: int) -> tuple:
    version = draw(st.integers(0, 2))
    data = {"TopicId": tid, "PartitionId": pid, "Leader": draw(st.sampled_from([-2, -2, -1, *BROKERS]))}
    replicas = draw(st.one_of(st.none(), st.none(), st.lists(st.sampled_from(BROKERS), min_size=1, max_size=4,
                                                             unique=True)))
    if replicas is not None:
        data["Replicas"] = replicas
        m.replicas[(name, pid)] = len(replicas)
    for key in ("Isr", "RemovingReplicas", "AddingReplicas"):
        value = draw(st.one_of(st.none(), st.none(), small_ids))
        if value is not None:
            data[key] = value
    recovery = draw(st.sampled_from([-1, -1, 0, 1]))
    if recovery != -1:
        data["LeaderRecoveryState"] = recovery
    if version >= 1 and draw(st.integers(0, 3)) == 0:
        n = m.replicas[(name, pid)]
        data["Directories"] = draw(st.lists(st.sampled_from(DIRS), min_size=n, max_size=n))
    if version >= 2:
        for key in ("EligibleLeaderReplicas", "LastKnownElr"):
            value = draw(st.one_of(st.none(), st.none(), small_ids))
            if value is not None:
                data[key] = value
    return "PartitionChangeRecord", version, data


def register_broker(draw, m: Model) -> list[tuple]:
    broker_id, version = draw(st.sampled_from(BROKERS)), draw(st.integers(0, 3))
    m.next_epoch += draw(st.integers(1, 3))
    m.brokers[broker_id] = m.next_epoch
    data = {"BrokerId": broker_id, "IncarnationId": uuid.UUID(int=draw(st.integers(1, 1 << 20))),
            "BrokerEpoch": m.next_epoch,
            "EndPoints": draw(st.lists(st.fixed_dictionaries({
                "Name": st.sampled_from(["PLAINTEXT", "SSL", "INTERNAL"]), "Host": st.sampled_from([f"h{broker_id}", ""]),
                "Port": st.sampled_from([0, 9092 + broker_id, 65535]), "SecurityProtocol": st.integers(0, 3)}),
                max_size=3, unique_by=lambda e: e["Name"])),
            "Features": draw(st.lists(st.fixed_dictionaries({"Name": st.sampled_from(["metadata.version", "kraft.version"]),
                                                             "MinSupportedVersion": st.integers(0, 3),
                                                             "MaxSupportedVersion": st.integers(3, 30)}),
                                      max_size=2, unique_by=lambda f: f["Name"])),
            "Rack": draw(st.one_of(st.none(), st.sampled_from(["r1", "r2"]))), "Fenced": draw(st.booleans())}
    if version >= 1:
        data["InControlledShutdown"] = draw(st.booleans())
    if version >= 2:
        data["IsMigratingZkBroker"] = draw(st.booleans())
    if version >= 3:
        data["LogDirs"] = draw(st.lists(st.sampled_from(DIRS[1:]), max_size=2, unique=True))
    return [("RegisterBrokerRecord", version, data)]


def broker_state(draw, m: Model) -> list[tuple]:
    """Fence / unfence, a registration change, or an unregistration of a registered broker."""
    if not m.brokers:
        return []
    broker_id = draw(st.sampled_from(sorted(m.brokers)))
    epoch = m.brokers[broker_id]
    kind = draw(st.sampled_from(["fence", "unfence", "change", "change", "unregister"]))
    if kind in ("fence", "unfence"):
        return [(f"{kind.capitalize()}BrokerRecord", 0, {"Id": broker_id, "Epoch": epoch})]
    if kind == "unregister":
        del m.brokers[broker_id]
        return [("UnregisterBrokerRecord", 0, {"BrokerId": broker_id, "BrokerEpoch": epoch})]
    version = draw(st.integers(0, 2))
    data = {"BrokerId": broker_id, "BrokerEpoch": epoch, "Fenced": draw(st.sampled_from([-1, 0, 1]))}
    if version >= 1:
        data["InControlledShutdown"] = draw(st.sampled_from([0, 1]))
    if version >= 2:
        data["LogDirs"] = draw(st.lists(st.sampled_from(DIRS[1:]), max_size=2, unique=True))
    return [("BrokerRegistrationChangeRecord", version, data)]


def register_controller(draw, m: Model) -> list[tuple]:
    return [("RegisterControllerRecord", 0, {
        "ControllerId": draw(st.integers(100, 102)), "IncarnationId": uuid.UUID(int=draw(st.integers(1, 99))),
        "ZkMigrationReady": draw(st.booleans()),
        "EndPoints": [{"Name": "CONTROLLER", "Host": "c", "Port": draw(st.integers(1, 3)), "SecurityProtocol": 0}],
        "Features": [{"Name": "kraft.version", "MinSupportedVersion": 0, "MaxSupportedVersion": 1}]})]


def config(draw, m: Model) -> list[tuple]:
    """A topic config (of a live, deleted or never-created name) or a broker config, set or deleted."""
    resource_type = draw(st.sampled_from([TOPIC_CONFIG, TOPIC_CONFIG, BROKER_CONFIG]))
    name = draw(st.sampled_from(NAMES if resource_type == TOPIC_CONFIG else ["", "1", "2"]))
    return [("ConfigRecord", 0, {"ResourceType": resource_type, "ResourceName": name,
                                 "Name": draw(st.sampled_from(["cleanup.policy", "retention.ms"])),
                                 "Value": draw(st.one_of(st.none(), st.sampled_from(["compact", "5"])))})]


def feature(draw, m: Model) -> list[tuple]:
    """Another feature set or removed (level 0), or metadata.version written again at its level
    (a lower one would make the snapshot writer drop fields on purpose)."""
    name = draw(st.sampled_from(["metadata.version", "kraft.version", "group.version", "transaction.version"]))
    level = versions.LATEST if name == "metadata.version" else draw(st.integers(0, 2))
    return [("FeatureLevelRecord", 0, {"Name": name, "FeatureLevel": level})]


def client_quota(draw, m: Model) -> list[tuple]:
    entity = draw(st.lists(st.fixed_dictionaries({"EntityType": st.sampled_from(["user", "client-id"]),
                                                  "EntityName": st.sampled_from(["u", "v", None])}),
                           min_size=1, max_size=2, unique_by=lambda e: e["EntityType"]))
    return [("ClientQuotaRecord", 0, {"Entity": entity, "Key": draw(st.sampled_from(["producer_byte_rate", "x"])),
                                      "Value": draw(st.sampled_from([1.0, 2.5])), "Remove": draw(st.booleans())})]


def producer_ids(draw, m: Model) -> list[tuple]:
    return [("ProducerIdsRecord", 0, {"BrokerId": draw(st.sampled_from(BROKERS)), "BrokerEpoch": draw(st.integers(0, 9)),
                                      "NextProducerId": draw(st.integers(0, 1 << 20))})]


def acl(draw, m: Model) -> list[tuple]:
    if m.acls and draw(st.booleans()):
        return [("RemoveAccessControlEntryRecord", 0, {"Id": m.acls.pop(draw(st.integers(0, len(m.acls) - 1)))})]
    acl_id = uuid.UUID(int=draw(st.integers(1, 50)))
    m.acls.append(acl_id)
    return [("AccessControlEntryRecord", 0, {
        "Id": acl_id, "ResourceType": 2, "ResourceName": draw(st.sampled_from(NAMES)), "PatternType": 3,
        "Principal": "User:u", "Host": "*", "Operation": draw(st.integers(2, 4)), "PermissionType": 3})]


def scram(draw, m: Model) -> list[tuple]:
    if m.scram and draw(st.booleans()):
        name, mechanism = m.scram.pop(draw(st.integers(0, len(m.scram) - 1)))
        return [("RemoveUserScramCredentialRecord", 0, {"Name": name, "Mechanism": mechanism})]
    key = (draw(st.sampled_from(["u", "v"])), draw(st.sampled_from([1, 2])))
    m.scram.append(key)
    return [("UserScramCredentialRecord", 0, {"Name": key[0], "Mechanism": key[1], "Salt": draw(st.binary(max_size=4)),
                                              "StoredKey": b"s", "ServerKey": b"k", "Iterations": 4096})]


def token(draw, m: Model) -> list[tuple]:
    if m.tokens and draw(st.booleans()):
        return [("RemoveDelegationTokenRecord", 0, {"TokenId": m.tokens.pop(draw(st.integers(0, len(m.tokens) - 1)))})]
    token_id = draw(st.sampled_from(["t1", "t2", "t3"]))
    m.tokens.append(token_id)
    return [("DelegationTokenRecord", 0, {"Owner": "User:u", "Requester": "User:u",
                                          "Renewers": draw(st.lists(st.sampled_from(["User:v", "User:w"]), max_size=2)),
                                          "IssueTimestamp": 1, "MaxTimestamp": 9, "ExpirationTimestamp": draw(st.integers(2, 8)),
                                          "TokenId": token_id})]


def zk_migration(draw, m: Model) -> list[tuple]:
    return [("ZkMigrationStateRecord", 0, {"ZkMigrationState": draw(st.integers(0, 3))})]


def noops(draw, m: Model) -> list[tuple]:
    return [("NoOpRecord", 0, {})] * draw(st.integers(1, 5))


EVENTS = [create_topic, create_topic, remove_topic, add_partitions, partition_changes, partition_changes,
          register_broker, broker_state, broker_state, register_controller, config, feature, client_quota,
          producer_ids, acl, scram, token, zk_migration, noops, noops]


# ---- logs: events -> records -> batches -> regions ----------------------------------------------

@dataclass
class Log:
    values: list[bytes]  # every record, markers included, at offsets 0..n-1
    applied: list[int]  # offsets the oracle applies (not aborted, not in a still-open transaction)
    batch_sizes: list[int]
    codecs: list[int]  # per batch
    region_starts: list[int]  # batch indexes where a new region starts (replay_regions)
    snapshot_cut: int  # an event boundary outside transactions: the snapshot ends here, the tail starts
    tail_sizes: list[int]  # the batches of the tail after the snapshot
    pending_offset: int | None  # the Begin of a transaction still open at the end


def _encode(record: tuple) -> bytes:
    return codec.encode_record(*record)


@st.composite
def mixed_logs(draw, max_events: int = 30) -> Log:
    m = Model()
    records = [("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": versions.LATEST})]
    applied, event_ends, pending = [0], [1], None
    for _ in range(draw(st.integers(1, max_events))):
        mode = draw(st.sampled_from(["plain"] * 6 + ["commit", "abort"]))
        saved = copy.deepcopy(m) if mode == "abort" else None
        body = [r for _ in range(1 if mode == "plain" else draw(st.integers(1, 3)))
                for r in draw(st.sampled_from(EVENTS))(draw, m)]
        if mode == "plain":
            applied += range(len(records), len(records) + len(body))
            records += body
        else:
            begin = len(records)
            records += [("BeginTransactionRecord", 0, {"Name": "t"}), *body,
                        ("EndTransactionRecord" if mode == "commit" else "AbortTransactionRecord", 0, {})]
            if mode == "commit":
                applied += range(begin, len(records))
            else:
                m = saved
        event_ends.append(len(records))
    if draw(st.integers(0, 4)) == 0:  # a transaction still open where the log ends: held back
        pending = len(records)
        records += [("BeginTransactionRecord", 0, {"Name": "open"}),
                    *draw(st.sampled_from([create_topic, config, register_broker]))(draw, m)]
    values = [_encode(r) for r in records]
    sizes = _sizes(draw, len(values))
    codecs = draw(st.lists(st.sampled_from([layout.CODEC_NONE] * 3 + [layout.CODEC_ZSTD]),
                           min_size=len(sizes), max_size=len(sizes)))
    starts = sorted(draw(st.sets(st.integers(1, max(1, len(sizes) - 1)), max_size=6)) - {len(sizes)})
    cut = draw(st.sampled_from(event_ends))
    return Log(values, applied, sizes, codecs, starts, cut, _sizes(draw, len(values) - cut), pending)


def _sizes(draw, n: int) -> list[int]:
    """Batch sizes: anything from one record per batch to everything in one."""
    sizes, left = [], n
    while left:
        sizes.append(min(left, draw(st.sampled_from([1, 1, 2, 3, 5, 40]))))
        left -= sizes[-1]
    return sizes


def to_batches(values: list[bytes], sizes: list[int], first_offset: int = 0, codecs: list[int] | None = None) -> list[bytes]:
    out, offset = [], first_offset
    for k, size in enumerate(sizes):
        out.append(batch.build_batch_from_values(values[offset - first_offset:offset - first_offset + size],
                                                 base_offset=offset, partition_leader_epoch=4,
                                                 timestamp_ms=1000 + offset,
                                                 codec=codecs[k] if codecs else layout.CODEC_NONE))
        offset += size
    return out


# ---- the three appliers ----------------------------------------------------------------------------

def generic_replay(values: list[bytes], offsets, image: MetadataImage | None = None) -> MetadataImage:
    """The oracle: every applied record through the generic codec and MetadataDelta.replay."""
    delta = (image or MetadataImage.empty()).delta()
    for offset in offsets:
        record = codec.decode_record(values[offset])
        delta.replay(record.record_type, record.data, topic_epoch=offset)
    return delta.apply()


@pytest.fixture(params=["native", "twin"])
def decoder(request, monkeypatch):
    """The loader on the public decoder (native unless the twins are forced), or on the pure twin."""
    if request.param == "twin":
        monkeypatch.setattr(metadata_columns, "decode_metadata_region",
                            functools.partial(metadata_columns.decode_region_with, metadata_columns_pure))
    return request.param


@pytest.fixture(params=["native-pass", "twin-pass", "bulk-from-2"])
def topic_pass(request, monkeypatch):
    """How the loader applies the topic stream: the native pass (creations shorter than
    BULK_MIN_RECORDS in it), its pure twin, or the native pass with every creation of two records
    or more left to bulk_create (what snapshots and large CreateTopics take)."""
    from kraftlog.engine.image import index, index_pure
    from kraftlog.engine.image import loader as loader_module

    if request.param == "twin-pass":
        monkeypatch.setattr(index, "apply_topic_stream", index_pure.apply_topic_stream)
    elif request.param == "bulk-from-2":
        monkeypatch.setattr(loader_module, "BULK_MIN_RECORDS", 2)
    return request.param


def _check_loaded(image: MetadataImage, manifest, log: Log, expected: MetadataImage) -> None:
    assert full_summary(image) == full_summary(expected)
    assert _brokers_typed(image) == _brokers_typed(expected)
    assert manifest.pending_transaction_offset == log.pending_offset
    last = len(log.values) - 1
    if log.pending_offset is None:
        assert image.provenance == Provenance(last, 4, 1000 + last - log.batch_sizes[-1] + 1)
    else:  # everything before the open transaction's Begin is in the image
        assert image.provenance.offset == log.pending_offset - 1


def _brokers_typed(image: MetadataImage) -> str:
    """The registrations with their values' types: a numpy int or a 0/1 for a bool from the
    columns would pass ==, not this."""
    return repr(sorted(image.cluster.brokers.items()))


# ---- properties --------------------------------------------------------------------------------------

def _records(*records: tuple) -> list[bytes]:
    return [_encode(r) for r in records]


METADATA_VERSION = ("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": versions.LATEST})
# Found by this test: a committed transaction cut by a region boundary (load_log_dir reads 4 MiB
# regions) stopped replay_regions at its Begin, and everything after it was never applied.
TRANSACTION_ACROSS_REGIONS = Log(
    _records(METADATA_VERSION, ("BeginTransactionRecord", 0, {"Name": "t"}), ("EndTransactionRecord", 0, {}),
             ("ProducerIdsRecord", 0, {"BrokerId": 1, "BrokerEpoch": 0, "NextProducerId": 0})),
    applied=[0, 1, 2, 3], batch_sizes=[1, 1, 1, 1], codecs=[0] * 4, region_starts=[2], snapshot_cut=1,
    tail_sizes=[3], pending_offset=None)
# Found by this test: the image writer left out the ZK migration state, so a snapshot lost it.
ZK_MIGRATION_STATE_IN_A_SNAPSHOT = Log(
    _records(METADATA_VERSION, ("ZkMigrationStateRecord", 0, {"ZkMigrationState": 0})),
    applied=[0, 1], batch_sizes=[2], codecs=[0], region_starts=[], snapshot_cut=2, tail_sizes=[],
    pending_offset=None)

# Found by this test: a PartitionRecord filling the hole a higher partition id left (ids out of
# order within a creation) did not move the topic epoch record by record; the bulk path did.
_TOPIC_A = uuid.UUID(int=1)


def _plain_partition(partition_id: int) -> tuple:
    return ("PartitionRecord", 0, {"TopicId": _TOPIC_A, "PartitionId": partition_id, "Replicas": [1], "Isr": [],
                                   "RemovingReplicas": [], "AddingReplicas": [], "Leader": -1, "LeaderEpoch": 0,
                                   "PartitionEpoch": 0})


PARTITIONS_OUT_OF_ORDER = Log(
    _records(METADATA_VERSION, ("TopicRecord", 0, {"Name": "a", "TopicId": _TOPIC_A}), *map(_plain_partition, [1, 0]),
             ("TopicRecord", 0, {"Name": "b", "TopicId": uuid.UUID(int=2)}),
             *(("PartitionRecord", 0, {**_plain_partition(p)[2], "TopicId": uuid.UUID(int=2)}) for p in range(4))),
    applied=list(range(9)), batch_sizes=[9], codecs=[0], region_starts=[], snapshot_cut=1, tail_sizes=[1] * 8,
    pending_offset=None)

# Found by this test: the snapshot writer sliced each partition's directory codes to its replica
# count, which failed when the directories column was narrower than a partition with more replicas
# and no directories (all MIGRATING) written in the same group.
WIDE_REPLICAS_NARROW_DIRECTORIES = Log(
    _records(METADATA_VERSION, ("TopicRecord", 0, {"Name": "a", "TopicId": _TOPIC_A}),
             ("PartitionRecord", 0, {**_plain_partition(0)[2], "Replicas": [1, 2, 3, 4], "Isr": [1]}),
             ("PartitionRecord", 1, {**_plain_partition(1)[2], "Replicas": [1, 2, 3], "Isr": [1],
                                     "Directories": DIRS[1:]}),
             ("PartitionRecord", 0, {**_plain_partition(2)[2], "Replicas": [1, 2, 3, 4], "Isr": [1]})),
    applied=list(range(5)), batch_sizes=[5], codecs=[0], region_starts=[], snapshot_cut=5, tail_sizes=[],
    pending_offset=None)


@SETTINGS
@given(log=mixed_logs())
@example(log=TRANSACTION_ACROSS_REGIONS)
@example(log=PARTITIONS_OUT_OF_ORDER)
def test_whole_log_and_regions_replay_like_the_generic_path(decoder, topic_pass, log):
    """One region, then the same batches cut into regions anywhere (inside a topic's creation and
    inside transactions too), some zstd-compressed: the loader's image equals the oracle's, field by field."""
    expected = generic_replay(log.values, log.applied)
    batches = to_batches(log.values, log.batch_sizes, codecs=log.codecs)
    manifests = []
    loader = Loader(publishers=[lambda d, i, m: manifests.append(m)])
    _check_loaded(loader.replay(b"".join(batches)), manifests[-1], log, expected)

    bounds = [0, *log.region_starts, len(batches)]
    regions = [b"".join(batches[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    split = Loader(publishers=[lambda d, i, m: manifests.append(m)])
    _check_loaded(split.replay_regions(regions), manifests[-1], log, expected)


@SETTINGS
@given(log=mixed_logs())
@example(log=ZK_MIGRATION_STATE_IN_A_SNAPSHOT)
@example(log=WIDE_REPLICAS_NARROW_DIRECTORIES)
@example(log=TRANSACTION_ACROSS_REGIONS)
def test_snapshot_plus_tail_replays_like_the_generic_path(decoder, topic_pass, log):
    """The oracle's image at a cut between events, written as a snapshot and loaded, then the rest
    of the log replayed on it: the image of the whole log (configs of a deleted topic, re-created
    names, held-back transactions and all)."""
    cut = log.snapshot_cut
    prefix = [o for o in log.applied if o < cut]
    snapshot_values = write_image(generic_replay(log.values, prefix)).values
    header = batch.build_control_batch(3, codec.encode_control(3, 0, {"Version": 0,
                                                                     "LastContainedLogTimestamp": SNAPSHOT_TIMESTAMP_MS})[1])
    body = to_batches(snapshot_values, [len(snapshot_values)], first_offset=1) if snapshot_values else []
    loader = Loader()
    snapshot = loader.load_snapshot(b"".join([header, *body]), end_offset=cut, epoch=4)
    assert full_summary(snapshot) == full_summary(generic_replay(log.values, prefix))
    assert _brokers_typed(snapshot) == _brokers_typed(generic_replay(log.values, prefix))
    assert snapshot.provenance == Provenance(cut - 1, 4, SNAPSHOT_TIMESTAMP_MS)
    if cut == len(log.values):
        return
    manifests = []
    loader.publishers.append(lambda d, i, m: manifests.append(m))
    image = loader.replay(b"".join(to_batches(log.values[cut:], log.tail_sizes, first_offset=cut)))
    assert full_summary(image) == full_summary(generic_replay(log.values, log.applied))
    assert _brokers_typed(image) == _brokers_typed(generic_replay(log.values, log.applied))
    assert manifests[-1].pending_transaction_offset == log.pending_offset


# Every kind of topic-stream record on one partition, in one log: changes the native pass applies
# (leader, ISR, recovery, ELR and last-known ELR set and cleared, adding / removing, a replica
# change that drops a replica of an all-MIGRATING partition), ones it hands back (a new replica:
# UNASSIGNED directory; a replica change of a partition with directories), one with directories
# (generic codec), configs, NoOps and side records between; and on a second name, a delete and a
# re-create with changes on both incarnations.
_TOPIC_B, _TOPIC_C = uuid.UUID(int=2), uuid.UUID(int=3)


def _change(version: int, topic_id: uuid.UUID = _TOPIC_A, **fields) -> tuple:
    return ("PartitionChangeRecord", version, {"TopicId": topic_id, "PartitionId": 0, **fields})


def _create(name: str, topic_id: uuid.UUID, replicas: list[int]) -> list[tuple]:
    return [("TopicRecord", 0, {"Name": name, "TopicId": topic_id}),
            ("PartitionRecord", 0, {**_plain_partition(0)[2], "TopicId": topic_id, "Replicas": replicas,
                                    "Isr": replicas, "Leader": replicas[0]})]


_ONE_PARTITION_RECORDS = _records(
    METADATA_VERSION, *_create("a", _TOPIC_A, [1, 2, 3]),
    ("ConfigRecord", 0, {"ResourceType": TOPIC_CONFIG, "ResourceName": "a", "Name": "cleanup.policy",
                         "Value": "compact"}),
    _change(0, Leader=2, Isr=[2, 3]), ("NoOpRecord", 0, {}),
    _change(2, Isr=[2], EligibleLeaderReplicas=[3], LastKnownElr=[1]),
    _change(2, EligibleLeaderReplicas=[], LastKnownElr=[]),
    _change(0, Replicas=[1, 2, 3, 4], AddingReplicas=[4]),  # a new replica: handed back
    *_create("b", _TOPIC_B, [1, 2]),
    _change(0, _TOPIC_B, Leader=2, Isr=[2], RemovingReplicas=[1]),
    _change(0, Replicas=[2, 3, 4], AddingReplicas=[], RemovingReplicas=[2]),  # directories now: handed back
    _change(1, Directories=DIRS[1:]),  # extras: the generic codec
    ("ProducerIdsRecord", 0, {"BrokerId": 1, "BrokerEpoch": 0, "NextProducerId": 0}),
    _change(0, Leader=-1, LeaderRecoveryState=1),
    ("RemoveTopicRecord", 0, {"TopicId": _TOPIC_B}),
    *_create("b", _TOPIC_C, [1, 2]),
    _change(0, _TOPIC_C, Leader=2, Isr=[2], AddingReplicas=[3], RemovingReplicas=[1]),
    _change(2, EligibleLeaderReplicas=[4], LastKnownElr=[2, 3], LeaderRecoveryState=0),
    _change(0, _TOPIC_C, Replicas=[2], AddingReplicas=[]),  # fewer replicas, all MIGRATING: applied natively
    _change(2, _TOPIC_C, EligibleLeaderReplicas=[2]))
EVERY_KIND_ON_ONE_PARTITION = [
    Log(_ONE_PARTITION_RECORDS, applied=list(range(len(_ONE_PARTITION_RECORDS))), batch_sizes=sizes,
        codecs=[0] * len(sizes), region_starts=starts, snapshot_cut=1, tail_sizes=[], pending_offset=None)
    for sizes, starts in (([len(_ONE_PARTITION_RECORDS)], []), ([1] * len(_ONE_PARTITION_RECORDS), [5, 9, 15]))]


@pytest.mark.parametrize("apply", ["native", "twin"])
@pytest.mark.parametrize("log", EVERY_KIND_ON_ONE_PARTITION, ids=["one-batch", "batch-per-record"])
def test_every_kind_on_one_partition_applies_like_the_generic_path(decoder, apply, log, monkeypatch):
    """The native change pass and its twin (each on both decoders), in one region and in several,
    give the oracle's image; only the change with directories goes through the generic codec."""
    from kraftlog.engine.image import index, index_pure

    if apply == "twin":
        monkeypatch.setattr(index, "apply_topic_stream", index_pure.apply_topic_stream)
    expected = generic_replay(log.values, log.applied)
    a, b = expected.topics.partition("a", 0), expected.topics.partition("b", 0)
    assert (a.eligible_leader_replicas, a.last_known_elr, a.removing_replicas, a.replicas) == ((4,), (2, 3), (2,), (2, 3, 4))
    assert (b.replicas, b.adding_replicas, b.removing_replicas, b.eligible_leader_replicas) == ((2,), (), (1,), (2,))
    batches = to_batches(log.values, log.batch_sizes)
    manifests = []
    loader = Loader(publishers=[lambda d, i, m: manifests.append(m)])
    _check_loaded(loader.replay(b"".join(batches)), manifests[-1], log, expected)
    assert manifests[-1].generic_types == {"PartitionChangeRecord": 1}
    bounds = [0, *log.region_starts, len(batches)]
    regions = [b"".join(batches[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    _check_loaded(Loader().replay_regions(regions), manifests[-1], log, expected)


# What the native pass applies besides changes, in one log: configs set, overwritten, deleted (a
# resource left empty goes) and written again unchanged, around a delete and two re-creates of one
# name (its configs go with each delete; a config of the deleted name in between stays until the
# next delete); broker configs; short creations interleaved with changes and configs; the same
# TopicRecord twice (no change); CreatePartitions of the topic whose rows end the table (applied in
# the pass) and of one whose rows would move (handed back); a partition id skipped and then filled
# (the fill is handed back); a PartitionRecord replacing a partition (handed back).
_TOPIC_D, _TOPIC_E = uuid.UUID(int=4), uuid.UUID(int=5)


def _topic_config(name: str, key: str, value: str | None, resource_type: int = TOPIC_CONFIG) -> tuple:
    return ("ConfigRecord", 0, {"ResourceType": resource_type, "ResourceName": name, "Name": key, "Value": value})


def _partition(topic_id: uuid.UUID, partition_id: int, replicas: list[int]) -> tuple:
    return ("PartitionRecord", 0, {**_plain_partition(partition_id)[2], "TopicId": topic_id, "Replicas": replicas,
                                   "Isr": replicas[:1], "Leader": replicas[0]})


_STREAM_RECORDS = _records(
    METADATA_VERSION, *_create("a", _TOPIC_A, [1, 2]), _topic_config("a", "retention.ms", "5"),
    _topic_config("a", "cleanup.policy", "compact"), _topic_config("a", "retention.ms", "6"),
    _topic_config("a", "retention.ms", None), _topic_config("a", "retention.ms", None),  # deleting twice
    _topic_config("1", "log.retention.ms", "1"), _topic_config("1", "log.retention.ms", None, BROKER_CONFIG),
    _topic_config("2", "x", "y", BROKER_CONFIG), _topic_config("2", "x", None, BROKER_CONFIG),  # left empty: goes
    _change(0, Leader=2, Isr=[2]),
    ("RemoveTopicRecord", 0, {"TopicId": _TOPIC_A}),
    _topic_config("a", "cleanup.policy", "delete"),  # of a deleted name: kept until a delete drops it
    *_create("a", _TOPIC_B, [3]), _topic_config("a", "retention.ms", "7"),
    ("TopicRecord", 0, {"Name": "a", "TopicId": _TOPIC_B}),  # the same topic again: no change
    _change(0, _TOPIC_B, Leader=-1), _topic_config("a", "retention.ms", "7"),  # the same value again
    *_create("b", _TOPIC_C, [1, 2, 3]), _partition(_TOPIC_C, 1, [2, 3]),  # CreatePartitions of the last topic
    _partition(_TOPIC_B, 1, [1]),  # CreatePartitions of a topic whose rows would move: handed back
    ("TopicRecord", 0, {"Name": "c", "TopicId": _TOPIC_D}), _partition(_TOPIC_D, 2, [1]),  # ids 0, 1 skipped
    _change(0, _TOPIC_C, Isr=[1, 2]),
    _partition(_TOPIC_D, 0, [2]),  # a hole filled: handed back
    _partition(_TOPIC_C, 0, [3, 2]),  # a partition replaced: handed back
    ("RemoveTopicRecord", 0, {"TopicId": _TOPIC_B}),
    *_create("a", _TOPIC_E, [2]), _topic_config("a", "retention.ms", "8"),
    ("RemoveTopicRecord", 0, {"TopicId": _TOPIC_D}))
# replayed on their own: what the pass hands back: the relocation, the hole fill, the replacement
# (metadata.version, not a topic record, is the side pass's: LoadManifest.side_records)
_HANDED_BACK = {"PartitionRecord": 3}
STREAM_LOGS = [
    Log(_STREAM_RECORDS, applied=list(range(len(_STREAM_RECORDS))), batch_sizes=sizes, codecs=[0] * len(sizes),
        region_starts=starts, snapshot_cut=cut, tail_sizes=[len(_STREAM_RECORDS) - cut], pending_offset=None)
    # one region; a batch a record with regions cut inside creations (after a TopicRecord, between
    # PartitionRecords)
    for sizes, starts, cut in (([len(_STREAM_RECORDS)], [], 1), ([1] * len(_STREAM_RECORDS), [2, 22, 23, 26], 12))]


@pytest.mark.parametrize("apply", ["native", "twin"])
@pytest.mark.parametrize("log", STREAM_LOGS, ids=["one-batch", "batch-per-record"])
def test_configs_deletes_and_short_creations_apply_in_the_pass_like_the_generic_path(decoder, apply, log,
                                                                                      monkeypatch):
    """The native pass and its twin give the oracle's image (configs of a name across its deletes
    and re-creates, short creations among changes and configs, regions cut inside creations), and
    Python replays on its own only what the pass hands back."""
    from kraftlog.engine.image import index, index_pure

    if apply == "twin":
        monkeypatch.setattr(index, "apply_topic_stream", index_pure.apply_topic_stream)
    expected = generic_replay(log.values, log.applied)
    assert dict(expected.configs) == {(TOPIC_CONFIG, "a"): {"retention.ms": "8"},
                                      (TOPIC_CONFIG, "1"): {"log.retention.ms": "1"}}
    assert expected.topics.partition("b", 1).replicas == (2, 3) and expected.topics.partition("b", 0).replicas == (3, 2)
    assert expected.topics.topic("c") is None and expected.topics.topic("a").topic_id == _TOPIC_E
    manifests = []
    loader = Loader(publishers=[lambda d, i, m: manifests.append(m)])
    _check_loaded(loader.replay(b"".join(to_batches(log.values, log.batch_sizes))), manifests[-1], log, expected)
    assert manifests[-1].single_types == _HANDED_BACK and manifests[-1].generic_records == 0
    assert manifests[-1].side_records == 1
    batches = to_batches(log.values, log.batch_sizes)
    bounds = [0, *log.region_starts, len(batches)]
    regions = [b"".join(batches[a:b]) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    _check_loaded(Loader().replay_regions(regions), manifests[-1], log, expected)


def _generic_skipping(values: list[bytes]) -> tuple[MetadataImage, list[tuple[int, str, str]]]:
    """The oracle, skipping (and listing) the records it cannot replay."""
    delta, skipped = MetadataImage.empty().delta(), []
    for offset, value in enumerate(values):
        record = codec.decode_record(value)
        try:
            delta.replay(record.record_type, record.data, topic_epoch=offset)
        except MetadataReplayError as exc:
            skipped.append((offset, record.record_type, str(exc)))
    return delta.apply(), skipped


_BAD_RECORDS = _records(
    METADATA_VERSION, *_create("a", _TOPIC_A, [1, 2]), _topic_config("a", "retention.ms", "5"),
    ("RemoveTopicRecord", 0, {"TopicId": _TOPIC_E}),  # an unknown topic
    _change(0, Leader=2),
    ("TopicRecord", 0, {"Name": "a", "TopicId": _TOPIC_B}),  # a name taken by another id
    _partition(_TOPIC_D, 0, [1]),  # a partition of an unknown topic
    _topic_config("a", "cleanup.policy", "compact"), *_create("b", _TOPIC_C, [3]),
    ("TopicRecord", 0, {"Name": "c", "TopicId": _TOPIC_A}),  # an id taken under another name
    _change(0, _TOPIC_D),  # a change of an unknown topic
    ("RemoveTopicRecord", 0, {"TopicId": _TOPIC_A}), _topic_config("b", "retention.ms", "1"))


@pytest.mark.parametrize("apply", ["native", "twin"])
def test_bad_records_in_the_pass_fail_or_are_skipped_like_the_generic_path(decoder, apply, monkeypatch):
    """A record that cannot apply in the middle of the pass: without skip_errors the load fails at
    the first one with the generic path's typed error and words (offset, type, message); with it,
    each is skipped and listed as the oracle lists it, and the rest of the pass applies."""
    from kraftlog.engine.image import index, index_pure

    if apply == "twin":
        monkeypatch.setattr(index, "apply_topic_stream", index_pure.apply_topic_stream)
    expected, skipped = _generic_skipping(_BAD_RECORDS)
    assert [s[1] for s in skipped] == ["RemoveTopicRecord", "TopicRecord", "PartitionRecord", "TopicRecord",
                                       "PartitionChangeRecord"]
    data = b"".join(to_batches(_BAD_RECORDS, [len(_BAD_RECORDS)]))
    with pytest.raises(MetadataLoadError) as info:
        Loader().replay(data)
    first = skipped[0]
    assert str(info.value) == f"offset {first[0]}: {first[1]}: {first[2]}"
    assert isinstance(info.value.__cause__, MetadataReplayError)
    manifests = []
    image = Loader(skip_errors=True, publishers=[lambda d, i, m: manifests.append(m)]).replay(data)
    assert full_summary(image) == full_summary(expected)
    assert manifests[-1].skipped == skipped and manifests[-1].skipped_records == len(skipped)
