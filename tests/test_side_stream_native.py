"""Proves the side stream's one-pass apply (kraftlog._side, twin side_pure; the loader's
_apply_side_stream): on Hypothesis-generated logs of broker registrations (endpoints, features,
log dirs, re-registrations at new epochs), registration changes, fences and unfences (stale epochs
and unknown brokers too), unregistrations, producer-id blocks, feature levels (level 0 removes),
quotas set and removed, ACLs, SCRAM credentials and tokens added and removed, mixed with topic
creates, configs and partition changes, the loader with the native pass, the loader with the twin
pass and the generic per-record replay (the oracle) give equal images field by field, values'
types included, and skip the same bad records with the same words; the native module really
loaded; a bad record stops the load naming its offset and type (or is skipped and counted) and
the pass goes on after it; the manifest counts what the pass applied."""

from __future__ import annotations

import uuid
from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from image_summary import full_summary
from test_image_differential import (
    DIRS,
    Model,
    acl,
    broker_state,
    client_quota,
    config,
    create_topic,
    feature,
    partition_changes,
    producer_ids,
    register_broker,
    remove_topic,
    scram,
    to_batches,
    token,
)

from kraftlog import _accel
from kraftlog.engine.image import side, side_pure, versions
from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.image.loader import Loader, MetadataLoadError, decode
from kraftlog.engine.image.topics import MetadataReplayError
from kraftlog.engine.records import metadata as codec

pytestmark = pytest.mark.twin

SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
METADATA_VERSION = ("FeatureLevelRecord", 0, {"Name": "metadata.version", "FeatureLevel": versions.LATEST})


def test_the_expected_side_pass_is_loaded():
    """The side pass the loader calls is the native module unless the twins are forced (a build
    that silently lost kraftlog._side fails here, not only in conftest's session check)."""
    expected = "pure" if _accel.FORCE_PURE else "native"
    assert expected == side.IMPLEMENTATION
    assert _accel.choices()["kraftlog._side"].startswith(expected)
    assert side.apply_side_stream is not side_pure.apply_side_stream or _accel.FORCE_PURE


# ---- generated side-stream logs ---------------------------------------------------------------------

def broker_change(draw, m: Model) -> list[tuple]:
    """A fence, unfence, registration change (log dirs too: extras, handed back) or unregistration
    (not a side-pass type) of a registered broker at its epoch (broker_state), or one of them at a
    stale epoch or for a broker never registered (an error)."""
    out = broker_state(draw, m)
    if not out or draw(st.integers(0, 2)):
        return out
    (name, version, data), = out
    broker, epoch = ("Id", "Epoch") if "Id" in data else ("BrokerId", "BrokerEpoch")
    wrong = {broker: 99} if draw(st.booleans()) else {epoch: data[epoch] - draw(st.integers(1, 2))}
    return [(name, version, {**data, **wrong})]


def removals_of_unknowns(draw, m: Model) -> list[tuple]:
    """Removals of an ACL, a credential or a token that does not exist: no change, no error."""
    return [draw(st.sampled_from([
        ("RemoveAccessControlEntryRecord", 0, {"Id": uuid.UUID(int=999)}),
        ("RemoveUserScramCredentialRecord", 0, {"Name": "nobody", "Mechanism": 1}),
        ("RemoveDelegationTokenRecord", 0, {"TokenId": "none"})]))]


def quota_removal(draw, m: Model) -> list[tuple]:
    """A quota set, then maybe removed again (the entity goes when its last key does)."""
    (_, version, data), = client_quota(draw, m)
    out = [("ClientQuotaRecord", version, {**data, "Remove": False})]
    if draw(st.booleans()):
        out.append(("ClientQuotaRecord", version, {**data, "Remove": True}))
    return out


SIDE_EVENTS = [register_broker, register_broker, broker_change, broker_change, broker_change, producer_ids,
               feature, quota_removal, client_quota, acl, scram, token, removals_of_unknowns]
TOPIC_EVENTS = [create_topic, remove_topic, config, partition_changes]


@st.composite
def side_logs(draw, max_events: int = 40) -> tuple[list[bytes], list[int]]:
    """(record values at offsets 0.., batch sizes): metadata.version, brokers registered, then side
    and topic events in any order."""
    m = Model()
    records = [METADATA_VERSION, *register_broker(draw, m), *register_broker(draw, m)]
    for _ in range(draw(st.integers(1, max_events))):
        events = SIDE_EVENTS if draw(st.integers(0, 3)) else TOPIC_EVENTS
        records += draw(st.sampled_from(events))(draw, m)
    values = [codec.encode_record(*r) for r in records]
    sizes, left = [], len(values)
    while left:
        sizes.append(min(left, draw(st.sampled_from([1, 2, 3, 7, 50]))))
        left -= sizes[-1]
    return values, sizes


def generic_skipping(values: list[bytes], image: MetadataImage | None = None, first_offset: int = 0):
    """The oracle: every record through the generic codec and MetadataDelta.replay, skipping (and
    listing) those it cannot replay."""
    delta, skipped = (image or MetadataImage.empty()).delta(), []
    for k, value in enumerate(values):
        record = codec.decode_record(value)
        try:
            delta.replay(record.record_type, record.data, topic_epoch=first_offset + k)
        except MetadataReplayError as exc:
            skipped.append((first_offset + k, record.record_type, str(exc)))
    return delta.apply(), skipped


def _typed(value):
    """``value`` with every leaf's type beside it: a numpy int, or 0/1 for a bool, from the columns
    would pass ==, not this."""
    if isinstance(value, MappingProxyType | dict):
        return sorted((repr(k), _typed(v)) for k, v in value.items())
    if isinstance(value, tuple | list):
        return (type(value).__name__, [_typed(v) for v in value])
    return type(value).__name__, repr(value)


def side_state(image: MetadataImage) -> list:
    """The side stream's sub-images with their values' types."""
    return _typed({"brokers": dict(image.cluster.brokers), "features": dict(image.features.finalized),
                   "metadata.version": image.features.metadata_version, "quotas": dict(image.client_quotas),
                   "producer_ids": image.producer_ids.__dict__, "acls": dict(image.acls), "scram": dict(image.scram),
                   "tokens": dict(image.delegation_tokens)}) + [repr(sorted(image.cluster.brokers.items()))]


@pytest.fixture(params=["native-pass", "twin-pass"])
def side_pass(request, monkeypatch):
    """The loader's side stream through the native pass (the twin when the twins are forced) or
    through the pure twin."""
    if request.param == "twin-pass":
        monkeypatch.setattr(side, "apply_side_stream", side_pure.apply_side_stream)
    return request.param


@SETTINGS
@given(log=side_logs())
def test_the_side_pass_and_its_twin_give_the_generic_replays_image(side_pass, log):
    """Whole log, in regions, and per-record batches: the loader's image and skipped records equal
    the oracle's, field by field with types; everything the oracle applies of the side stream,
    save what the pass must hand back, is the pass's."""
    values, sizes = log
    expected, skipped = generic_skipping(values)
    batches = to_batches(values, sizes)
    manifests = []
    loader = Loader(skip_errors=True, publishers=[lambda d, i, m: manifests.append(m)])
    image = loader.replay(b"".join(batches))
    assert full_summary(image) == full_summary(expected)
    assert side_state(image) == side_state(expected)
    assert sorted(manifests[-1].skipped) == sorted(skipped)
    assert manifests[-1].skipped_records == len(skipped)
    # what the pass hands back: extras (a change with log dirs), types it does not apply
    # (unregistrations), records that fail; nothing else of the side stream is replayed on its own
    handed = {"BrokerRegistrationChangeRecord", "FenceBrokerRecord", "UnfenceBrokerRecord", "UnregisterBrokerRecord"}
    assert set(manifests[-1].single_types) - handed <= {"PartitionRecord", "PartitionChangeRecord", "TopicRecord",
                                                        "ConfigRecord", "RemoveTopicRecord"}
    regions = Loader(skip_errors=True)
    regions_image = regions.replay_regions([b"".join(batches[:len(batches) // 2]), b"".join(batches[len(batches) // 2:])])
    assert side_state(regions_image) == side_state(expected)
    assert full_summary(regions_image) == full_summary(expected)


@SETTINGS
@given(log=side_logs(max_events=25))
def test_the_native_pass_and_the_twin_stop_at_the_same_records_with_the_same_state(log):
    """apply_side_stream itself: from every start, the native pass and the twin stop at the same
    record and leave equal deltas (the twin being the native one when the twins are forced)."""
    values, sizes = log
    cols = decode(b"".join(to_batches(values, sizes)))
    tables = side.side_tables(cols)
    base = Loader().replay(b"".join(to_batches(values[:3], [3])))  # metadata.version and two brokers
    order = np.arange(3, len(values), dtype=np.int64)
    deltas, stops = [], []
    for impl in (side.apply_side_stream, side_pure.apply_side_stream):
        delta, pos, stopped = base.delta(), 0, []
        while pos < len(order):
            pos = impl(delta, tables, side.RULES, cols.api_keys, cols.kind_rows, order, pos)
            stopped.append(pos)
            pos += 1
        deltas.append(delta.apply())
        stops.append(stopped)
    assert stops[0] == stops[1]
    assert side_state(deltas[0]) == side_state(deltas[1])


# ---- errors and the manifest ---------------------------------------------------------------------------

def _registration(broker_id: int, epoch: int) -> tuple:
    return ("RegisterBrokerRecord", 3, {
        "BrokerId": broker_id, "IncarnationId": uuid.UUID(int=broker_id), "BrokerEpoch": epoch,
        "EndPoints": [{"Name": "PLAINTEXT", "Host": f"h{broker_id}", "Port": 9092, "SecurityProtocol": 0}],
        "Features": [{"Name": "metadata.version", "MinSupportedVersion": 1, "MaxSupportedVersion": 30}],
        "Rack": "r1", "Fenced": True, "InControlledShutdown": False, "IsMigratingZkBroker": False,
        "LogDirs": [DIRS[1]]})


_GOOD = [METADATA_VERSION, _registration(1, 10), _registration(2, 11),
         ("BrokerRegistrationChangeRecord", 1, {"BrokerId": 1, "BrokerEpoch": 10, "Fenced": -1,  # UNFENCE
                                                "InControlledShutdown": 0}),
         ("ProducerIdsRecord", 0, {"BrokerId": 1, "BrokerEpoch": 10, "NextProducerId": 5000}),
         ("FeatureLevelRecord", 0, {"Name": "group.version", "FeatureLevel": 1}),
         ("AccessControlEntryRecord", 0, {"Id": uuid.UUID(int=3), "ResourceType": 2, "ResourceName": "a",
                                          "PatternType": 3, "Principal": "User:u", "Host": "*", "Operation": 2,
                                          "PermissionType": 3}),
         ("UserScramCredentialRecord", 0, {"Name": "u", "Mechanism": 1, "Salt": b"\x00s", "StoredKey": b"k",
                                           "ServerKey": b"v", "Iterations": 4096}),
         ("DelegationTokenRecord", 0, {"Owner": "User:u", "Requester": "User:u", "Renewers": ["User:v"],
                                       "IssueTimestamp": 1, "MaxTimestamp": 9, "ExpirationTimestamp": 5,
                                       "TokenId": "t"}),
         ("ClientQuotaRecord", 0, {"Entity": [{"EntityType": "user", "EntityName": None}], "Key": "k", "Value": 1.5,
                                   "Remove": False}),
         ("FenceBrokerRecord", 0, {"Id": 2, "Epoch": 11}), ("UnfenceBrokerRecord", 0, {"Id": 2, "Epoch": 11})]
_UNKNOWN_BROKER = ("BrokerRegistrationChangeRecord", 1, {"BrokerId": 42, "BrokerEpoch": 1, "Fenced": 1,
                                                         "InControlledShutdown": 0})
_STALE_FENCE = ("FenceBrokerRecord", 0, {"Id": 1, "Epoch": 9})
_AFTER = [("ProducerIdsRecord", 0, {"BrokerId": 2, "BrokerEpoch": 11, "NextProducerId": 6000}),
          ("FeatureLevelRecord", 0, {"Name": "group.version", "FeatureLevel": 0})]  # level 0: removed


def _values(records) -> list[bytes]:
    return [codec.encode_record(*r) for r in records]


def test_the_manifest_counts_the_side_records_the_pass_applied(side_pass):
    """A log of every side-stream type: all of it applied by the pass (side_records), nothing on its
    own and nothing through the generic codec, to the oracle's image."""
    values = _values(_GOOD + _AFTER)
    manifests = []
    image = Loader(publishers=[lambda d, i, m: manifests.append(m)]).replay(b"".join(to_batches(values, [5, 9])))
    expected, skipped = generic_skipping(values)
    assert skipped == []
    assert side_state(image) == side_state(expected)
    manifest = manifests[-1]
    assert manifest.side_records == len(values)
    assert (manifest.single_records, manifest.single_types, manifest.generic_records) == (0, {}, 0)
    assert "group.version" not in image.features.finalized and image.producer_ids.next_producer_id == 6000
    assert not image.cluster.brokers[1].fenced and not image.cluster.brokers[2].fenced


@pytest.mark.parametrize("bad,message", [
    (_UNKNOWN_BROKER, "BrokerRegistrationChangeRecord for unregistered broker 42"),
    (_STALE_FENCE, "FenceBrokerRecord for broker 1 at epoch 9, registered at 10")])
def test_a_bad_side_record_is_named_or_skipped_and_the_pass_goes_on(side_pass, bad, message):
    """A change for an unknown broker, a fence at a stale epoch: the load fails naming the offset
    and record type with the generic replay's words; with skip_errors it is counted and listed,
    replayed on its own from its row (not the generic codec), and the records after it are still
    the pass's."""
    values = _values([*_GOOD, bad, *_AFTER])
    at = len(_GOOD)
    buf = b"".join(to_batches(values, [len(values)]))
    with pytest.raises(MetadataLoadError) as info:
        Loader().replay(buf)
    assert info.value.offset == at and info.value.record_type == bad[0]
    assert str(info.value) == f"offset {at}: {bad[0]}: {message}"
    expected, skipped = generic_skipping(values)
    assert skipped == [(at, bad[0], message)]
    manifests = []
    image = Loader(skip_errors=True, publishers=[lambda d, i, m: manifests.append(m)]).replay(buf)
    manifest = manifests[-1]
    assert manifest.skipped == skipped and manifest.skipped_records == 1
    assert manifest.single_types == {bad[0]: 1} and manifest.generic_records == 0
    assert manifest.side_records == len(values) - 1
    assert side_state(image) == side_state(expected)


def test_the_pass_hands_back_what_it_does_not_apply(side_pass):
    """An unregistration (not a type of the pass), a change with log dirs (extras) and a
    RegisterControllerRecord go on their own through the generic codec, between records the pass
    applies, to the oracle's image."""
    handed = [("UnregisterBrokerRecord", 0, {"BrokerId": 2, "BrokerEpoch": 11}),
              ("BrokerRegistrationChangeRecord", 2, {"BrokerId": 1, "BrokerEpoch": 10, "Fenced": 1,
                                                     "InControlledShutdown": 1, "LogDirs": [DIRS[2]]}),
              ("RegisterControllerRecord", 0, {
                  "ControllerId": 100, "IncarnationId": uuid.UUID(int=5), "ZkMigrationReady": False,
                  "EndPoints": [{"Name": "CONTROLLER", "Host": "c", "Port": 1, "SecurityProtocol": 0}],
                  "Features": [{"Name": "kraft.version", "MinSupportedVersion": 0, "MaxSupportedVersion": 1}]})]
    records = [*_GOOD[:4], handed[0], _GOOD[4], handed[1], handed[2], *_AFTER]
    values = _values(records)
    manifests = []
    image = Loader(publishers=[lambda d, i, m: manifests.append(m)]).replay(b"".join(to_batches(values, [len(values)])))
    expected, skipped = generic_skipping(values)
    assert skipped == []
    assert side_state(image) == side_state(expected) and image.cluster.controllers == expected.cluster.controllers
    assert image.cluster.brokers[1].log_dirs == (DIRS[2],) and 2 not in image.cluster.brokers
    manifest = manifests[-1]
    assert manifest.generic_types == {r[0]: 1 for r in handed} and manifest.side_records == len(values) - 3


def test_the_pass_refuses_arguments_that_do_not_fit():
    """Both implementations check their arguments the same way (a programmer error fails loudly)."""
    cols = decode(b"".join(to_batches(_values(_GOOD), [len(_GOOD)])))
    tables = side.side_tables(cols)
    order = np.arange(len(_GOOD), dtype=np.int64)
    delta = MetadataImage.empty().delta()
    for impl in (side.apply_side_stream, side_pure.apply_side_stream):
        with pytest.raises(ValueError, match="outside"):
            impl(delta, tables, side.RULES, cols.api_keys, cols.kind_rows, order, len(order) + 1)
        with pytest.raises(ValueError, match="9 tables"):
            impl(delta, tables[:-1], side.RULES, cols.api_keys, cols.kind_rows, order, 0)
        assert impl(delta, tables, side.RULES, cols.api_keys, cols.kind_rows, order, len(order)) == len(order)
