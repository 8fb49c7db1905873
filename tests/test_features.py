"""Proves the metadata.version / feature rules of UpdateFeatures (engine/controller/features.py) on
hand-built images, the feature fields of ApiVersions through kio's wire encoding, the handler's
locking/writing/NOT_CONTROLLER behaviour, and `kraftlog features`' output lines (Kafka's phrases)
and argument errors.

Images are built by replaying encoded records (encode -> decode -> MetadataDelta.replay), so every
field carries the codec's defaults exactly as a log would give them. Expected values come from
the versions table (Kafka's level numbers), from the fields the tests put in, and from Kafka's
kafka-features output format; never from the output of the code under test.
"""

from __future__ import annotations

import asyncio
import datetime
import io
import logging
import subprocess
import sys
import uuid

import pytest
from cli_contract import assert_one_line_error
from kio.schema.api_versions.v3 import response as kav3
from kio.schema.api_versions.v4 import response as kav4
from kio.schema.errors import ErrorCode
from kio.schema.update_features.v1 import request as kreq
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16

from kraftlog.engine.cli.tools import features_cmd as cmd
from kraftlog.engine.controller import features as F
from kraftlog.engine.controller.writes import NotActiveError, WriteExecutor
from kraftlog.engine.image import versions
from kraftlog.engine.image.image import MetadataImage, Provenance
from kraftlog.engine.records import metadata as codec

MV = "metadata.version"
L = versions.LEVELS
TOPIC = uuid.UUID(int=0x1234)


# ---- building images ------------------------------------------------------------------------------


def feature(name, level):
    return "FeatureLevelRecord", 0, {"Name": name, "FeatureLevel": level}


def broker(broker_id, mv_max=versions.LATEST, extra=()):
    feats = [{"Name": MV, "MinSupportedVersion": L["3.3-IV0"], "MaxSupportedVersion": mv_max}]
    feats += [{"Name": n, "MinSupportedVersion": lo, "MaxSupportedVersion": hi} for n, lo, hi in extra]
    return "RegisterBrokerRecord", 3, {
        "BrokerId": broker_id, "IncarnationId": uuid.UUID(int=broker_id + 1), "BrokerEpoch": 10 + broker_id,
        "EndPoints": [{"Name": "PLAINTEXT", "Host": "h", "Port": 9092, "SecurityProtocol": 0}],
        "Features": feats, "Rack": None, "Fenced": False}


def controller(controller_id, mv_max=versions.LATEST):
    return "RegisterControllerRecord", 0, {
        "ControllerId": controller_id, "IncarnationId": uuid.UUID(int=100 + controller_id), "ZkMigrationReady": False,
        "EndPoints": [{"Name": "CONTROLLER", "Host": "h", "Port": 9093, "SecurityProtocol": 0}],
        "Features": [{"Name": MV, "MinSupportedVersion": L["3.3-IV0"], "MaxSupportedVersion": mv_max}]}


def partition(pid, *, directories=False, elr=False):
    data = {"PartitionId": pid, "TopicId": TOPIC, "Replicas": [0, 1, 2], "Isr": [0, 1, 2], "Leader": 0,
            "LeaderEpoch": 0, "PartitionEpoch": 0,
            "Directories": [uuid.UUID(int=0xD0 + i) if directories else uuid.UUID(int=0) for i in range(3)]}
    if elr:
        data["EligibleLeaderReplicas"] = [1]
        data["LastKnownElr"] = [2]
    return "PartitionRecord", 2, data


def topic(*partitions):
    return [("TopicRecord", 0, {"Name": "t", "TopicId": TOPIC}), *partitions]


def build(records, base: MetadataImage | None = None) -> MetadataImage:
    """Replay records (given as (type, version, data)) through the codec onto ``base``."""
    delta = (base or MetadataImage.empty()).delta()
    start = (base.provenance.offset + 1) if base is not None else 0
    for i, (name, version, data) in enumerate(records):
        decoded = codec.decode_record(codec.encode_record(name, version, data))
        delta.replay(decoded.record_type, decoded.data, topic_epoch=start + i)
    return delta.apply(Provenance(start + len(records) - 1, 1, 0))


def replay_values(image: MetadataImage, values: list[bytes]) -> MetadataImage:
    decoded = [codec.decode_record(v) for v in values]
    return build([(r.record_type, r.version, r.data) for r in decoded], image)


def written(values: list[bytes]) -> list[tuple[str, int]]:
    out = []
    for value in values:
        record = codec.decode_record(value)
        assert record.record_type == "FeatureLevelRecord"
        out.append((record.data["Name"], record.data["FeatureLevel"]))
    return out


def cluster(level, *extra, brokers=(0, 1, 2), controllers=(2, 3)):
    return build([feature(MV, level), *(broker(b) for b in brokers), *(controller(c) for c in controllers), *extra])


def plan(image, *updates, validate_only=False, **kwargs):
    return F.plan_update(image, [F.FeatureUpdate(*u) for u in updates], validate_only=validate_only,
                         local_id=1, **kwargs)


# ---- supported features ---------------------------------------------------------------------------------


def test_supported_features_span_the_writable_levels_and_can_play_an_old_node():
    """metadata.version from 3.3-IV0 (4, the lowest level the writer writes) to 4.1-IV0 (26);
    kraft.version 0 only (static quorum); eligible.leader.replicas.version 0..1 where the range
    reaches 4.0-IV1 (ELR's level); a lower maximum simulates a node without 4.1-IV0."""
    assert ("metadata.version", 4, 26) in F.supported_features()
    assert ("kraft.version", 0, 0) in F.supported_features()
    assert ("eligible.leader.replicas.version", 0, 1) in F.supported_features()
    assert ("eligible.leader.replicas.version", 0, 0) in F.supported_features(max_metadata_version=L["3.9-IV0"])
    assert ("metadata.version", 4, 25) in F.supported_features(max_metadata_version=L["4.0-IV3"])
    with pytest.raises(ValueError, match="max_metadata_version"):
        F.supported_features(max_metadata_version=versions.LATEST + 1)


# ---- upgrades --------------------------------------------------------------------------------------------


def test_upgrade_supported_everywhere_writes_one_feature_level_record():
    """Every node supports 4.1-IV0: the upgrade from 3.9-IV0 succeeds with one record, which
    replayed moves the image to 26."""
    image = cluster(L["3.9-IV0"])
    results, records = plan(image, (MV, 26, F.UPGRADE))
    assert [(r.feature, r.error_code) for r in results] == [(MV, ErrorCode.none)]
    assert written(records) == [(MV, 26)]
    assert replay_values(image, records).features.metadata_version == 26


def test_an_unregistered_quorum_controller_blocks_every_update_from_3_7_iv0():
    """Quorum 1-4, local controller 1, controllers 2 and 3 registered: controller 4's support is
    unknown, so every update is refused naming it and nothing is written; once 4 registers the
    same update passes. Below 3.7-IV0 (no registrations exist) the quorum is not consulted."""
    image = cluster(L["3.9-IV0"])
    results, records = plan(image, (MV, 26, F.UPGRADE), ("group.version", 0, F.UPGRADE), quorum=(1, 2, 3, 4))
    assert [r.error_code for r in results] == [ErrorCode.invalid_update_version] * 2 and records == []
    assert all("controller(s) 4 of the quorum have not registered" in r.message for r in results)
    results, records = plan(build([controller(4)], image), (MV, 26, F.UPGRADE), quorum=(1, 2, 3, 4))
    assert results[0].error_code == ErrorCode.none and written(records) == [(MV, 26)]
    old = cluster(L["3.6-IV2"], controllers=())
    results, _ = plan(old, (MV, L["3.7-IV0"], F.UPGRADE), quorum=(1, 2, 3, 4))
    assert results[0].error_code == ErrorCode.none


@pytest.mark.parametrize("old, label", [(broker(2, mv_max=L["4.0-IV3"]), "broker 2"),
                                        (controller(3, mv_max=L["4.0-IV3"]), "controller 3")])
def test_upgrade_beyond_a_registered_node_is_refused_naming_it(old, label):
    """A broker or controller whose software stops at 4.0-IV3 blocks the upgrade to 26:
    INVALID_UPDATE_VERSION naming that node, nothing written."""
    image = cluster(L["3.9-IV0"], old)
    results, records = plan(image, (MV, 26, F.UPGRADE))
    assert results[0].error_code == ErrorCode.invalid_update_version and records == []
    assert label in results[0].message and "26" in results[0].message


def test_the_local_controller_itself_must_support_the_level():
    """An old local controller (max 4.0-IV3) refuses the upgrade to 26 and names itself."""
    results, records = plan(cluster(L["3.9-IV0"]), (MV, 26, F.UPGRADE),
                            local_supported=F.supported_features(max_metadata_version=L["4.0-IV3"]))
    assert results[0].error_code == ErrorCode.invalid_update_version and records == []
    assert "local controller 1" in results[0].message


def test_the_local_controller_is_not_judged_by_its_own_registration():
    """The local controller's registration (id 1, old) is skipped: its software's range counts."""
    image = build([feature(MV, L["3.9-IV0"]), broker(0), controller(1, mv_max=L["3.9-IV0"])])
    results, _ = plan(image, (MV, 26, F.UPGRADE))
    assert results[0].ok


def test_direction_must_match_the_upgrade_type():
    """Going down with UPGRADE, or up with a downgrade type, is INVALID_UPDATE_VERSION."""
    image = cluster(L["4.0-IV3"])
    down, _ = plan(image, (MV, L["3.9-IV0"], F.UPGRADE))
    assert down[0].error_code == ErrorCode.invalid_update_version and "SAFE_DOWNGRADE" in down[0].message
    for kind in (F.SAFE_DOWNGRADE, F.UNSAFE_DOWNGRADE):
        up, records = plan(image, (MV, 26, kind))
        assert up[0].error_code == ErrorCode.invalid_update_version and records == []


@pytest.mark.parametrize("update, needle", [((MV, 26, 7), "upgrade type 7"), (("group.version", -1, 1), "below 0"),
                                            ((MV, 0, F.SAFE_DOWNGRADE), "metadata.version")])
def test_malformed_updates_are_refused(update, needle):
    """An unknown upgrade type, a negative level, and disabling metadata.version are refused."""
    results, records = plan(cluster(L["4.1-IV0"]), update)
    assert results[0].error_code == ErrorCode.invalid_update_version and records == []
    assert needle in results[0].message


def test_a_feature_named_twice_or_unnamed_is_an_invalid_request():
    results, records = plan(cluster(L["3.9-IV0"]), (MV, 26, 1), (MV, 25, 1), ("", 1, 1))
    assert [r.error_code for r in results] == [ErrorCode.invalid_request] * 3 and records == []


def test_validate_only_judges_but_writes_nothing():
    results, records = plan(cluster(L["3.9-IV0"]), (MV, 26, F.UPGRADE), validate_only=True)
    assert results[0].ok and records == []


def test_unsupported_feature_is_refused_but_disabling_it_is_allowed():
    """group.version is not supported by this build: level 1 is refused; level 0 (disable) is the
    level every node supports for a feature it does not list."""
    image = cluster(L["4.1-IV0"])
    up, _ = plan(image, ("group.version", 1, F.UPGRADE))
    assert up[0].error_code == ErrorCode.invalid_update_version and "local controller 1" in up[0].message
    off, records = plan(image, ("group.version", 0, F.SAFE_DOWNGRADE))
    assert off[0].ok and written(records) == [("group.version", 0)]


# ---- downgrades -----------------------------------------------------------------------------------------------


def lossy_image():
    """4.1-IV0 with one partition whose directories are assigned and one with ELR values."""
    return cluster(L["4.1-IV0"], *topic(partition(0, directories=True), partition(1, elr=True), partition(2)))


def test_safe_downgrade_that_would_lose_fields_is_refused_naming_them():
    """Directories (PartitionRecord v1+) and ELR (v2+) do not exist at 3.7-IV0 (v0): the safe
    downgrade fails naming the record type and fields, and nothing is written."""
    image = lossy_image()
    results, records = plan(image, (MV, L["3.7-IV0"], F.SAFE_DOWNGRADE))
    r = results[0]
    assert r.error_code == ErrorCode.invalid_update_version and records == []
    for field in ("PartitionRecord.Directories", "PartitionRecord.EligibleLeaderReplicas",
                  "PartitionRecord.LastKnownElr"):
        assert field in r.message
    assert "t-0" in r.message and "t-1" in r.message
    assert {(loss.record_type, loss.entity) for loss in r.losses} == {("PartitionRecord", "partition t-0"),
                                                                     ("PartitionRecord", "partition t-1")}


def test_safe_downgrade_without_losses_succeeds():
    """Directories all MIGRATING and no ELR: nothing is lost, so 4.1-IV0 -> 3.7-IV0 is safe."""
    image = cluster(L["4.1-IV0"], *topic(partition(0), partition(1)))
    results, records = plan(image, (MV, L["3.7-IV0"], F.SAFE_DOWNGRADE))
    assert results[0].ok and results[0].losses == ()
    assert written(records) == [(MV, 15)]


def test_unsafe_downgrade_proceeds_reporting_losses_and_upgrading_back_works(caplog):
    """UNSAFE_DOWNGRADE writes the record despite the losses (returned for the log); replayed,
    the image is at 3.7-IV0; upgrading back to 4.1-IV0 then succeeds."""
    image = lossy_image()
    results, records = plan(image, (MV, L["3.7-IV0"], F.UNSAFE_DOWNGRADE))
    assert results[0].ok and len(results[0].losses) == 2
    assert written(records) == [(MV, 15)]
    with caplog.at_level(logging.WARNING, logger="kraftlog.features"):
        F.log_unsafe_losses(15, results[0].losses)
    assert sum("partition t-0" in m for m in caplog.messages) >= 1
    assert any("PartitionRecord.LastKnownElr" in m for m in caplog.messages)
    down = replay_values(image, records)
    assert down.features.metadata_version == 15
    back, again = plan(down, (MV, 26, F.UPGRADE))
    assert back[0].ok and written(again) == [(MV, 26)]
    assert replay_values(down, again).features.metadata_version == 26


@pytest.mark.parametrize("kind", [F.SAFE_DOWNGRADE, F.UNSAFE_DOWNGRADE])
def test_downgrade_below_3_7_iv0_is_refused(kind):
    """3.6-IV2 (14) is below the floor 3.7-IV0 (15), safe or not."""
    results, records = plan(cluster(L["4.1-IV0"]), (MV, L["3.6-IV2"], kind))
    assert results[0].error_code == ErrorCode.invalid_update_version and records == []
    assert "3.7-IV0" in results[0].message


def test_a_node_without_4_1_iv0_support_blocks_any_downgrade_naming_it():
    """At 4.0-IV3 with broker 2's software stopping there, a downgrade to 3.9-IV0 is refused
    (broker 2 does not support 4.1-IV0), although broker 2 supports 3.9-IV0 itself; likewise an
    old local controller."""
    image = cluster(L["4.0-IV3"], broker(2, mv_max=L["4.0-IV3"]))
    results, records = plan(image, (MV, L["3.9-IV0"], F.UNSAFE_DOWNGRADE))
    assert results[0].error_code == ErrorCode.invalid_update_version and records == []
    assert "broker 2" in results[0].message and "4.1-IV0" in results[0].message
    local_old = F.supported_features(max_metadata_version=L["4.0-IV3"])
    results, _ = plan(cluster(L["4.0-IV3"]), (MV, L["3.9-IV0"], F.SAFE_DOWNGRADE), local_supported=local_old)
    assert results[0].error_code == ErrorCode.invalid_update_version and "local controller 1" in results[0].message


def elr_cluster():
    """4.1-IV0 with eligible.leader.replicas.version 1 finalized; every node supports ELR 0..1."""
    extra = (("eligible.leader.replicas.version", 0, 1),)
    image = build([feature(MV, L["4.1-IV0"]), feature("eligible.leader.replicas.version", 1),
                   *(broker(b, extra=extra) for b in (0, 1))])
    return image, [*F.supported_features(), *extra]


def test_downgrade_must_stay_compatible_with_the_other_finalized_features():
    """ELR version 1 needs PartitionRecord v2 (4.0-IV1): metadata.version cannot go to 3.9-IV0
    while it stays finalized."""
    image, local = elr_cluster()
    results, records = plan(image, (MV, L["3.9-IV0"], F.SAFE_DOWNGRADE), local_supported=local)
    assert results[0].error_code == ErrorCode.invalid_update_version and records == []
    assert "eligible.leader.replicas.version" in results[0].message and "4.0-IV1" in results[0].message


def test_several_features_in_one_request_write_metadata_version_last():
    """Disabling ELR in the same request makes the downgrade compatible; metadata.version's record
    comes last although it was asked first, and the replayed image has both changes."""
    image, local = elr_cluster()
    results, records = plan(image, (MV, L["3.9-IV0"], F.SAFE_DOWNGRADE),
                            ("eligible.leader.replicas.version", 0, F.SAFE_DOWNGRADE), local_supported=local)
    assert [r.ok for r in results] == [True, True]
    assert written(records) == [("eligible.leader.replicas.version", 0), (MV, 21)]
    after = replay_values(image, records)
    assert after.features.metadata_version == 21 and "eligible.leader.replicas.version" not in after.features.finalized


def test_a_feature_level_dependency_is_judged_against_the_requested_metadata_version():
    """ELR 1 at 3.9-IV0 is refused; asked together with an upgrade to 4.1-IV0 it is allowed."""
    extra = (("eligible.leader.replicas.version", 0, 1),)
    image = build([feature(MV, L["3.9-IV0"]), *(broker(b, extra=extra) for b in (0, 1))])
    local = [*F.supported_features(), *extra]
    alone, _ = plan(image, ("eligible.leader.replicas.version", 1, F.UPGRADE), local_supported=local)
    assert alone[0].error_code == ErrorCode.invalid_update_version and "4.0-IV1" in alone[0].message
    both, records = plan(image, ("eligible.leader.replicas.version", 1, F.UPGRADE), (MV, 26, F.UPGRADE),
                         local_supported=local)
    assert [r.ok for r in both] == [True, True]
    assert written(records) == [("eligible.leader.replicas.version", 1), (MV, 26)]


def test_metadata_version_cannot_change_during_a_zk_migration():
    image = cluster(L["3.9-IV0"], ("ZkMigrationStateRecord", 0, {"ZkMigrationState": 1}))
    results, _ = plan(image, (MV, 26, F.UPGRADE))
    assert results[0].error_code == ErrorCode.invalid_update_version and "migration" in results[0].message


# ---- ApiVersions feature fields ------------------------------------------------------------------------------


def roundtrip(resp, kio_type):
    buf = io.BytesIO()
    entity_writer(kio_type)(buf, resp)
    decoded, size = entity_reader(kio_type)(buf.getvalue(), 0)
    assert size == len(buf.getvalue())
    return decoded


@pytest.mark.parametrize("version, module", [(3, kav3), (4, kav4)])
def test_api_versions_feature_fields_survive_the_wire(version, module):
    """The fields splat into a kio ApiVersions response, encode as tagged fields and decode back:
    finalized = metadata.version + the other finalized features (min = max = level), epoch = the
    image's last offset; v3 omits kraft.version and eligible.leader.replicas.version (minimum 0,
    KAFKA-17011), v4 keeps them."""
    image = build([feature(MV, L["3.9-IV0"]), feature("group.version", 1), broker(0)])
    fields = F.api_versions_feature_fields(image, F.supported_features(), version=version)
    resp = module.ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0), **fields)
    back = roundtrip(resp, module.ApiVersionsResponse)
    supported, finalized, epoch = cmd.features_of(back)
    expected = [("metadata.version", 4, 26)] + ([("kraft.version", 0, 0), ("eligible.leader.replicas.version", 0, 1)]
                                                if version >= 4 else [])
    assert sorted(supported) == sorted(expected)
    assert finalized == {MV: 21, "group.version": 1} and epoch == 2
    assert all(k.min_version_level == k.max_version_level for k in back.finalized_features)


def test_an_image_without_metadata_version_has_no_finalized_features():
    fields = F.api_versions_feature_fields(MetadataImage.empty(), F.supported_features())
    assert fields["finalized_features"] == () and fields["finalized_features_epoch"] == -1
    assert F.api_versions_feature_fields(cluster(21), F.supported_features(), 7)["finalized_features_epoch"] == 7


# ---- the handler -----------------------------------------------------------------------------------------------


class Publisher:
    def __init__(self, image):
        self.image = image


class StubController:
    """The Controller surface the handler uses: its real write executor, proposing by replaying
    into the image (no network here: the end-to-end test runs against real node processes)."""

    def __init__(self, image, active=True):
        self.node_id, self.is_active, self.publisher = 1, active, Publisher(image)
        self.proposals: list[list[bytes]] = []
        self.lose_leadership = False
        self.executor = _ReplayingExecutor(self)


class _ReplayingExecutor(WriteExecutor):
    def __init__(self, controller: StubController):
        super().__init__(None, controller.publisher, is_active=lambda: controller.is_active, write_timeout_ms=10_000,
                         max_records_per_batch=10_000)
        self.controller = controller

    async def write_proposals(self, proposals):
        assert self.lock.locked(), "writes must run under the write lock"
        if self.controller.lose_leadership:
            raise NotActiveError()
        for records in proposals:
            self.controller.proposals.append(list(records))
            self.publisher.image = replay_values(self.publisher.image, records)
        return 0, 0


def request(*updates, validate_only=False):
    return kreq.UpdateFeaturesRequest(validate_only=validate_only, feature_updates=tuple(
        kreq.FeatureUpdateKey(feature=n, max_version_level=i16(level), upgrade_type=i8(kind))
        for n, level, kind in updates))


def test_handler_writes_one_proposal_and_answers_per_feature():
    """Two features, one refused: one proposal with the other's record; results per feature."""
    c = StubController(cluster(L["3.9-IV0"]))
    resp = asyncio.run(F.handle_update_features(c, request((MV, 26, 1), ("group.version", 1, 1))))
    assert resp.error_code == ErrorCode.none
    codes = {r.feature: r.error_code for r in resp.results}
    assert codes == {MV: ErrorCode.none, "group.version": ErrorCode.invalid_update_version}
    assert [written(p) for p in c.proposals] == [[(MV, 26)]]
    assert c.publisher.image.features.metadata_version == 26


def test_handler_dry_run_and_refusals_write_nothing():
    c = StubController(lossy_image())
    dry = asyncio.run(F.handle_update_features(c, request((MV, 15, F.UNSAFE_DOWNGRADE), validate_only=True)))
    safe = asyncio.run(F.handle_update_features(c, request((MV, 15, F.SAFE_DOWNGRADE))))
    assert dry.results[0].error_code == ErrorCode.none
    assert safe.results[0].error_code == ErrorCode.invalid_update_version
    assert "PartitionRecord.Directories" in safe.results[0].error_message
    assert c.proposals == [] and c.publisher.image.features.metadata_version == 26


def test_handler_answers_not_controller_when_inactive_or_when_leadership_is_lost():
    inactive = asyncio.run(F.handle_update_features(StubController(cluster(21), active=False), request((MV, 26, 1))))
    assert inactive.error_code == ErrorCode.not_controller
    assert [r.error_code for r in inactive.results] == [ErrorCode.not_controller]
    c = StubController(cluster(21))
    c.lose_leadership = True
    lost = asyncio.run(F.handle_update_features(c, request((MV, 26, 1))))
    assert lost.error_code == ErrorCode.not_controller and c.publisher.image.features.metadata_version == 21
    empty = asyncio.run(F.handle_update_features(StubController(cluster(21)), request()))
    assert empty.error_code == ErrorCode.invalid_request


def test_handler_logs_each_loss_of_an_unsafe_downgrade(caplog):
    c = StubController(lossy_image())
    with caplog.at_level(logging.WARNING, logger="kraftlog.features"):
        resp = asyncio.run(F.handle_update_features(c, request((MV, 15, F.UNSAFE_DOWNGRADE))))
    assert resp.results[0].error_code == ErrorCode.none and c.publisher.image.features.metadata_version == 15
    assert any("partition t-0" in m and "Directories" in m for m in caplog.messages)
    assert any("partition t-1" in m and "EligibleLeaderReplicas" in m for m in caplog.messages)


# ---- the CLI's output and arguments ---------------------------------------------------------------------------


def test_describe_lines_match_kafka_features_describe():
    """Kafka's line format: tab-separated fields, metadata.version levels by name, '-' for an
    unknown epoch, 'UNKNOWN n' for a level with no name."""
    lines = cmd.describe_lines([("metadata.version", 7, 26), ("kraft.version", 0, 1)],
                               {"metadata.version": 21}, 12)
    assert lines == [
        "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 0\tEpoch: 12",
        "Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.1-IV0\t"
        "FinalizedVersionLevel: 3.9-IV0\tEpoch: 12"]
    (line,) = cmd.describe_lines([("metadata.version", 7, 99)], {}, -1)
    assert line.endswith("SupportedMaxVersion: UNKNOWN 99\tFinalizedVersionLevel: UNKNOWN 0\tEpoch: -")


def test_update_lines_use_kafkas_phrases():
    """One line per feature sorted by name; the failure count for the final line."""
    updates = {"metadata.version": (26, 1), "group.version": (1, 1)}
    lines, failures = cmd.update_lines("upgrade", updates, {"metadata.version": None, "group.version": "nope"}, False)
    assert lines == ["Could not upgrade group.version to 1. nope", "metadata.version was upgraded to 26."]
    assert failures == 1
    lines, _ = cmd.update_lines("downgrade", {"metadata.version": (15, 2)}, {"metadata.version": None}, True)
    assert lines == ["metadata.version can be downgraded to 15."]
    lines, failures = cmd.update_lines("disable", {"a": (0, 2), "b": (0, 2)}, {"a": None, "b": "no"}, True)
    assert lines == ["a can be disabled.", "Can not disable b. no"] and failures == 1
    lines, failures = cmd.update_lines("disable", {"a": (0, 2)}, {}, False)
    assert lines[0].startswith("Could not disable a.") and failures == 1


def test_build_updates_picks_the_upgrade_type_and_refuses_duplicates():
    assert cmd.build_updates("upgrade", metadata=26) == {MV: (26, F.UPGRADE)}
    assert cmd.build_updates("downgrade", metadata=15, features=[("x", 0)]) == {
        MV: (15, F.SAFE_DOWNGRADE), "x": (0, F.SAFE_DOWNGRADE)}
    assert cmd.build_updates("disable", features=[("x", 0)], unsafe=True) == {"x": (0, F.UNSAFE_DOWNGRADE)}
    with pytest.raises(ValueError, match="more than once"):
        cmd.build_updates("upgrade", metadata=26, features=[(MV, 25)])
    with pytest.raises(ValueError, match="nothing to downgrade"):
        cmd.build_updates("downgrade")


def test_response_errors_fall_back_to_the_code_name():
    from kio.schema.update_features.v1 import response as kresp

    resp = kresp.UpdateFeaturesResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, error_message=None, results=(
        kresp.UpdatableFeatureResult(feature="a", error_code=ErrorCode.none, error_message=None),
        kresp.UpdatableFeatureResult(feature="b", error_code=ErrorCode.invalid_update_version, error_message=None)))
    errors = cmd.result_errors(resp)
    assert errors["a"] is None and "INVALID_UPDATE_VERSION" in errors["b"]


def kraftlog(*args):
    return subprocess.run([sys.executable, "-m", "kraftlog.engine.cli.main", *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("args, needles", [
    (["upgrade", "--metadata", "9.9-IV9"], ["unknown metadata.version '9.9-IV9'", "4.1-IV0"]),
    (["upgrade", "--feature", "metadata.version"], ["not FEATURE=LEVEL"]),
    (["downgrade", "--feature", "group.version=x"], ["'x'"]),
    (["downgrade"], ["nothing to downgrade"]),
    (["upgrade", "--metadata", "4.1-IV0", "--feature", "metadata.version=26"], ["more than once"]),
    (["describe"], ["--bootstrap-controller"]),
])
def test_argument_errors_are_one_line_exit_2(args, needles):
    proc = kraftlog("features", *args, *([] if args == ["describe"] else ["--bootstrap-controller", "127.0.0.1:1"]))
    assert_one_line_error(proc, 2, *needles)


def test_an_unreachable_node_is_one_line_exit_1(unused_tcp_port):
    """Nothing listens: one line naming the address tried."""
    proc = kraftlog("features", "describe", "--bootstrap-server", f"127.0.0.1:{unused_tcp_port}")
    assert_one_line_error(proc, 1, f"127.0.0.1:{unused_tcp_port}", "no node answered")


@pytest.fixture
def unused_tcp_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
