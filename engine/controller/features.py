"""Finalized features and metadata.version changes: UpdateFeatures (API 57) on the active controller,
and the feature fields of ApiVersions (what `kafka-features describe` reads).

Pure rules first (``supported_features``, ``plan_update``, ``api_versions_feature_fields``), then
one async handler that runs them under the controller's write lock.

UpdateFeatures v1 semantics (Kafka's FeatureControlManager, plus KIP-1155 metadata.version
downgrades), checked per feature in this order; a failed feature writes nothing, the others still
do (Kafka's partial success: the CLI reports "N out of M operation(s) failed"). Before any of it:
from 3.7-IV0, a quorum controller that has not registered refuses the whole request.
    1. the upgrade type is 1 UPGRADE, 2 SAFE_DOWNGRADE or 3 UNSAFE_DOWNGRADE; the level is >= 0
       (0 disables a feature; metadata.version cannot be disabled);
    2. the local controller, every registered broker and every other registered controller
       supports the level (a node that does not list the feature supports only level 0);
    3. a lower level needs a downgrade type, a higher one the UPGRADE type;
    4. metadata.version: no ZK migration in progress, a level this build knows, >= 3.3-IV0; and
       for a downgrade: target >= 3.7-IV0, every node (local included) supports 4.1-IV0 (the first
       level whose software can downgrade), every other finalized feature (as the request leaves
       them) still allowed at the target, and the image written at the target loses nothing
       (SAFE_DOWNGRADE) or its losses are accepted and logged (UNSAFE_DOWNGRADE);
    5. any other feature: a level >= 1 needs metadata.version >= 3.3-IV0, plus the feature's own
       metadata.version dependencies (DEPENDENCIES), judged against the request's metadata.version.
Records: one FeatureLevelRecord per successful feature, in request order, with metadata.version's
LAST, so the features that depend on it are already at their new levels when it changes.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kio.schema.api_versions.v3 import response as kav3
from kio.schema.api_versions.v4 import response as kav4
from kio.schema.errors import ErrorCode
from kio.schema.update_features.v1 import request as kupdate_req
from kio.schema.update_features.v1 import response as kupdate_resp
from kio.static.primitive import i16, i64

from kraftlog.engine.controller.writes import ControllerResult
from kraftlog.engine.image import versions
from kraftlog.engine.image.image import METADATA_VERSION, MetadataImage
from kraftlog.engine.records import metadata as codec

log = logging.getLogger("kraftlog.features")


UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3  # UpdateFeatures v1 UpgradeType
UPGRADE_TYPE_NAMES = {UPGRADE: "UPGRADE", SAFE_DOWNGRADE: "SAFE_DOWNGRADE", UNSAFE_DOWNGRADE: "UNSAFE_DOWNGRADE"}

KRAFT_VERSION = "kraft.version"
ELR_VERSION = "eligible.leader.replicas.version"  # KIP-966
# Our Raft has a static voter set: kraft.version 0 only (level 1 is KIP-853's dynamic quorum,
# finalized through KRaftVersionRecord control records, which this build does not write).
KRAFT_VERSION_MAX = 0

# Feature levels that need a minimum metadata.version (beyond Kafka's "every level >= 1 needs
# 3.3-IV0"). eligible.leader.replicas.version 1 puts ELR fields in PartitionRecord /
# PartitionChangeRecord, which only their v2 (4.0-IV1) carries.
DEPENDENCIES: dict[tuple[str, int], int] = {
    (ELR_VERSION, 1): versions.ELIGIBLE_LEADER_REPLICAS,
}

# ZkMigrationStateRecord values whose migration is in progress (Kafka's ZkMigrationState
# MIGRATION = 1, PRE_MIGRATION = 2): metadata.version cannot change then.
ZK_MIGRATION_IN_PROGRESS = (1, 2)
MAX_LOGGED_LOSSES = 100  # an unsafe downgrade of a big image logs this many losses one by one, then a summary

Supported = Sequence[tuple[str, int, int]]  # (feature, min level, max level)


def supported_features(max_metadata_version: int | None = None) -> list[tuple[str, int, int]]:
    """The features this build supports, as (name, min, max), sorted by name: metadata.version from
    the lowest level the image writer can write (3.3-IV0) to ``max_metadata_version`` (default: the
    latest level we know; tests pass a lower one to play an old node), kraft.version 0, and
    eligible.leader.replicas.version 0..1 (the controller keeps ELR by KIP-966's rules,
    engine/controller/replication.py) where the metadata.version range reaches 4.0-IV1, its first level."""
    high = versions.LATEST if max_metadata_version is None else max_metadata_version
    if not versions.MINIMUM_BOOTSTRAP <= high <= versions.LATEST:
        raise ValueError(f"max_metadata_version {high} is outside {versions.MINIMUM_BOOTSTRAP}..{versions.LATEST}")
    elr_max = 1 if high >= versions.ELIGIBLE_LEADER_REPLICAS else 0
    return [(ELR_VERSION, 0, elr_max), (KRAFT_VERSION, 0, KRAFT_VERSION_MAX),
            (METADATA_VERSION, versions.MINIMUM_BOOTSTRAP, high)]


# ---- planning an update ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: int = UPGRADE


@dataclass(frozen=True)
class FeatureResult:
    """The outcome of one requested update. ``losses`` (writer.Loss values) is what writing the
    image at the target metadata.version drops: the reason a SAFE downgrade failed, or what an
    UNSAFE one accepted."""

    feature: str
    error_code: ErrorCode
    message: str | None = None
    losses: tuple = ()

    @property
    def ok(self) -> bool:
        return self.error_code == ErrorCode.none


class _Refused(Exception):
    """One feature's update is refused (carries its message; the code is INVALID_UPDATE_VERSION)."""


def level_text(feature: str, level: int) -> str:
    """A level for messages: metadata.version levels with their name ("15 (3.7-IV0)")."""
    if feature == METADATA_VERSION and level in versions.NAMES:
        return f"{level} ({versions.NAMES[level]})"
    return str(level)


def _range_text(feature: str, supported: Supported) -> str:
    for name, low, high in supported:
        if name == feature:
            return f"levels {level_text(feature, low)} to {level_text(feature, high)}"
    return "no level of it (only 0, disabled)"


def _supports(supported: Supported, feature: str, level: int) -> bool:
    """A node supports a level of a feature it lists if min <= level <= max; of a feature it does
    not list, only level 0 (Kafka's QuorumFeatures.DISABLED)."""
    for name, low, high in supported:
        if name == feature:
            return low <= level <= high
    return level == 0


def _nodes(image: MetadataImage, local_id: int | None, local_supported: Supported):
    """(label, supported features) of every node whose support counts: this controller first,
    then the registered brokers and the other registered controllers, by id."""
    yield (f"local controller {local_id}" if local_id is not None else "the local controller"), local_supported
    for broker_id, b in sorted(image.cluster.brokers.items()):
        yield f"broker {broker_id}", b.supported_features
    for controller_id, c in sorted(image.cluster.controllers.items()):
        if controller_id != local_id:
            yield f"controller {controller_id}", c.supported_features


def plan_update(image: MetadataImage, updates: Iterable[FeatureUpdate], *, validate_only: bool,
                local_supported: Supported | None = None, local_id: int | None = None,
                quorum: Iterable[int] = ()) -> tuple[list[FeatureResult], list[bytes]]:
    """Judge ``updates`` against ``image`` (see the module docstring for the rules): one result per
    update, in request order, and the encoded FeatureLevelRecords to write (none when
    ``validate_only``). ``local_supported`` is what this controller's software supports (default:
    ``supported_features()``); ``local_id`` names it in messages. ``quorum``: the controllers'
    ids; from 3.7-IV0 (controller registrations) every one but this controller must have
    registered, or nothing can be judged for it and every update is refused (Kafka's rule)."""
    updates = list(updates)
    missing = _unregistered_controllers(image, quorum, local_id)
    if missing:
        why = (f"controller(s) {', '.join(map(str, missing))} of the quorum have not registered yet, so their "
               "supported feature levels are unknown; retry once they have")
        return [FeatureResult(u.feature, ErrorCode.invalid_update_version, why) for u in updates], []
    local_supported = supported_features() if local_supported is None else local_supported
    counts: dict[str, int] = {}
    for u in updates:
        counts[u.feature] = counts.get(u.feature, 0) + 1
    # The finalized levels as the whole request would leave them: dependencies are judged on these
    proposed = dict(image.features.finalized)
    proposed[METADATA_VERSION] = image.features.metadata_version
    for u in updates:
        if counts[u.feature] == 1 and u.upgrade_type in UPGRADE_TYPE_NAMES and u.level >= 0:
            proposed[u.feature] = u.level
    results: list[FeatureResult] = []
    ordered: list[tuple[bool, bytes]] = []  # (is metadata.version, record): metadata.version sorts last
    for u in updates:
        if not u.feature or counts[u.feature] > 1:
            why = "the feature name is empty" if not u.feature else f"{u.feature} appears {counts[u.feature]} times"
            results.append(FeatureResult(u.feature, ErrorCode.invalid_request, f"{why} in the request"))
            continue
        try:
            losses = _check(image, u, proposed, local_supported, local_id)
        except _Refused as exc:
            losses = exc.args[1] if len(exc.args) > 1 else ()
            results.append(FeatureResult(u.feature, ErrorCode.invalid_update_version, exc.args[0], losses))
            continue
        results.append(FeatureResult(u.feature, ErrorCode.none, None, losses))
        ordered.append((u.feature == METADATA_VERSION, codec.encode_record(
            "FeatureLevelRecord", 0, {"Name": u.feature, "FeatureLevel": u.level})))
    if validate_only:
        return results, []
    return results, [record for _, record in sorted(ordered, key=lambda item: item[0])]


def _unregistered_controllers(image: MetadataImage, quorum: Iterable[int], local_id: int | None) -> list[int]:
    if image.features.metadata_version < versions.CONTROLLER_REGISTRATION:
        return []  # no controller registrations below 3.7-IV0: only the local controller is known
    return sorted(c for c in quorum if c != local_id and c not in image.cluster.controllers)


def _check(image: MetadataImage, u: FeatureUpdate, proposed: dict[str, int], local_supported: Supported,
           local_id: int | None) -> tuple:
    """Raise _Refused(message[, losses]) if ``u`` may not be applied; else return the losses an
    unsafe metadata.version downgrade accepts (empty otherwise)."""
    feature, level = u.feature, u.level
    if u.upgrade_type not in UPGRADE_TYPE_NAMES:
        raise _Refused(f"unknown upgrade type {u.upgrade_type} (1 UPGRADE, 2 SAFE_DOWNGRADE, 3 UNSAFE_DOWNGRADE)")
    if level < 0:
        raise _Refused(f"{feature} level {level} is below 0")
    for label, supported in _nodes(image, local_id, local_supported):
        if not _supports(supported, feature, level):
            raise _Refused(f"{label} cannot run {feature} at {level_text(feature, level)}: it supports "
                           f"{_range_text(feature, supported)}")
    current = image.features.level(feature)
    if level < current and u.upgrade_type == UPGRADE:
        raise _Refused(f"{feature} is at {level_text(feature, current)}; going down to {level_text(feature, level)} "
                       "needs the SAFE_DOWNGRADE or UNSAFE_DOWNGRADE upgrade type")
    if level > current and u.upgrade_type != UPGRADE:
        raise _Refused(f"{feature} is at {level_text(feature, current)}; a "
                       f"{UPGRADE_TYPE_NAMES[u.upgrade_type]} cannot raise it to {level_text(feature, level)}")
    if feature == METADATA_VERSION:
        return _check_metadata_version(image, u, proposed, local_supported, local_id)
    _check_dependencies(feature, level, proposed.get(METADATA_VERSION, 0))
    return ()


def _check_dependencies(feature: str, level: int, metadata_version: int) -> None:
    """Kafka's Feature.validateVersion for a non-metadata.version feature, against the
    metadata.version the request leaves."""
    if level >= 1 and metadata_version < versions.MINIMUM_BOOTSTRAP:
        raise _Refused(f"{feature} {level} needs metadata.version {level_text(METADATA_VERSION, versions.MINIMUM_BOOTSTRAP)} "
                       "or later (the first level with FeatureLevelRecord)")
    needed = DEPENDENCIES.get((feature, level))
    if needed is not None and metadata_version < needed:
        raise _Refused(f"{feature} {level} needs metadata.version {level_text(METADATA_VERSION, needed)} or later; "
                       f"the request leaves it at {level_text(METADATA_VERSION, metadata_version)}")


def _check_metadata_version(image: MetadataImage, u: FeatureUpdate, proposed: dict[str, int],
                            local_supported: Supported, local_id: int | None) -> tuple:
    level, current = u.level, image.features.metadata_version
    if image.zk_migration_state in ZK_MIGRATION_IN_PROGRESS:
        raise _Refused("metadata.version cannot change while a ZooKeeper migration is in progress")
    if level not in versions.NAMES:
        raise _Refused(f"metadata.version level {level} is unknown to this controller (known: 1..{versions.LATEST})")
    if level < versions.MINIMUM_BOOTSTRAP:
        raise _Refused(f"metadata.version cannot be set below {level_text(METADATA_VERSION, versions.MINIMUM_BOOTSTRAP)}")
    if level >= current:
        return ()
    if level < versions.DOWNGRADE_FLOOR:
        raise _Refused(f"metadata.version {level_text(METADATA_VERSION, level)} is below "
                       f"{level_text(METADATA_VERSION, versions.DOWNGRADE_FLOOR)}, the lowest level a downgrade may reach")
    for label, supported in _nodes(image, local_id, local_supported):
        if not _supports(supported, METADATA_VERSION, versions.DOWNGRADE_SUPPORTED):
            raise _Refused(f"{label} does not support metadata.version downgrades: it supports "
                           f"{_range_text(METADATA_VERSION, supported)}, and downgrading needs every node to support "
                           f"{level_text(METADATA_VERSION, versions.DOWNGRADE_SUPPORTED)}")
    for feature, feature_level in sorted(proposed.items()):
        if feature != METADATA_VERSION:
            try:
                _check_dependencies(feature, feature_level, level)
            except _Refused as exc:
                raise _Refused(f"downgrading metadata.version to {level_text(METADATA_VERSION, level)} would break "
                               f"{feature}: {exc.args[0]}") from None
    losses = tuple(_image_losses(image, level))
    if losses and u.upgrade_type == SAFE_DOWNGRADE:
        raise _Refused(f"a safe downgrade to {level_text(METADATA_VERSION, level)} would lose metadata: "
                       f"{summarize_losses(losses)}; use UNSAFE_DOWNGRADE to drop it", losses)
    return losses


def _image_losses(image: MetadataImage, level: int) -> list:
    """What writing ``image`` at ``level`` drops (the writer's loss report, computed in memory)."""
    from kraftlog.engine.image.writer import write_image

    return write_image(image, level).losses


_INDEX = re.compile(r"\[\d+\]")


def summarize_losses(losses: Sequence, *, max_groups: int = 10) -> str:
    """Losses grouped by record type and field ("PartitionRecord.Directories in 3 records, e.g.
    partition t-0"), the largest groups first."""
    groups: dict[str, list] = {}
    for loss in losses:
        for field in loss.fields:
            key = f"{loss.record_type}.{_INDEX.sub('[]', field)}"
            groups.setdefault(key, []).append(loss.entity)
    parts = [f"{key} in {len(entities)} record(s), e.g. {entities[0]}"
             for key, entities in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]
    if len(parts) > max_groups:
        parts = parts[:max_groups] + [f"and {len(parts) - max_groups} more field(s)"]
    return "; ".join(parts)


def log_unsafe_losses(level: int, losses: Sequence, *, max_logged: int = MAX_LOGGED_LOSSES) -> None:
    """An accepted unsafe downgrade: each loss (up to ``max_logged``), then the summary."""
    for loss in losses[:max_logged]:
        log.warning("unsafe downgrade to metadata.version %s drops %s", level_text(METADATA_VERSION, level), loss)
    if len(losses) > max_logged:
        log.warning("... and %d more record(s) with lost fields", len(losses) - max_logged)
    log.warning("unsafe downgrade to metadata.version %s loses: %s", level_text(METADATA_VERSION, level),
                summarize_losses(losses))


# ---- ApiVersions feature fields --------------------------------------------------------------------


def finalized_levels(image: MetadataImage) -> dict[str, int]:
    """Every finalized feature with its level, metadata.version included (when set)."""
    out = dict(image.features.finalized)
    if image.features.metadata_version:
        out[METADATA_VERSION] = image.features.metadata_version
    return out


def api_versions_feature_fields(image: MetadataImage, supported: Supported, epoch: int | None = None, *,
                                version: int = 3) -> dict:
    """The tagged feature fields of an ApiVersions v3/v4 response, as kio keyword arguments:
    ``resp_type(error_code=..., api_keys=..., throttle_time=..., **fields)``.

    FinalizedFeaturesEpoch is the offset of the image's last record (Kafka's
    ``image.highestOffsetAndEpoch().offset()``), unless ``epoch`` is given; with no
    metadata.version yet it is -1 and nothing is finalized. Finalized levels go out as min = max =
    level. v3 leaves out supported features whose minimum is 0 (KAFKA-17011: older clients reject
    them); v4 carries them.
    """
    module = {3: kav3, 4: kav4}[version]
    rows = [(n, lo, hi) for n, lo, hi in supported if version >= 4 or lo > 0]
    finalized = finalized_levels(image)
    if epoch is None:
        epoch = image.provenance.offset if finalized else -1
    return {
        "supported_features": tuple(module.SupportedFeatureKey(name=n, min_version=i16(lo), max_version=i16(hi))
                                    for n, lo, hi in sorted(rows)),
        "finalized_features_epoch": i64(epoch),
        "finalized_features": tuple(module.FinalizedFeatureKey(name=n, max_version_level=i16(level),
                                                               min_version_level=i16(level))
                                    for n, level in sorted(finalized.items())),
        "zk_migration_ready": False,
    }


# ---- the handler ---------------------------------------------------------------------------------


def _response(results: Sequence[FeatureResult], code: ErrorCode = ErrorCode.none,
              message: str | None = None) -> kupdate_resp.UpdateFeaturesResponse:
    return kupdate_resp.UpdateFeaturesResponse(
        throttle_time=datetime.timedelta(0), error_code=code, error_message=message,
        results=tuple(kupdate_resp.UpdatableFeatureResult(feature=r.feature, error_code=r.error_code,
                                                          error_message=r.message) for r in results))


def _all_failed(updates: Sequence[FeatureUpdate], code: ErrorCode, message: str) -> kupdate_resp.UpdateFeaturesResponse:
    """A top-level error, repeated on every feature (a client may read either)."""
    return _response([FeatureResult(u.feature, code, message) for u in updates], code, message)


def _updates(req: kupdate_req.UpdateFeaturesRequest) -> list[FeatureUpdate]:
    return [FeatureUpdate(u.feature, int(u.max_version_level), int(u.upgrade_type)) for u in req.feature_updates]


async def handle_update_features(controller, req: kupdate_req.UpdateFeaturesRequest) -> kupdate_resp.UpdateFeaturesResponse:
    """UpdateFeatures v1 on ``controller`` (engine/controller/controller.py's Controller): planned by
    ``plan_update`` against the current image and written as one proposal by the controller's write
    executor (writes.py), answered per feature."""
    updates = _updates(req)
    if not updates:
        return _response([], ErrorCode.invalid_request, "the request names no feature to update")

    async def plan(image) -> ControllerResult:
        # The image is immutable and the executor's lock holds writers off: plan in a thread so a
        # safe downgrade's in-memory image write does not stall heartbeats on the loop.
        results, records = await asyncio.to_thread(
            plan_update, image, updates, validate_only=bool(req.validate_only),
            local_supported=getattr(controller, "supported_features", None) or supported_features(),
            local_id=controller.node_id, quorum=_quorum_of(controller))
        mv = next((r for r in results if r.feature == METADATA_VERSION and r.ok), None)
        if records and mv is not None and mv.losses:
            log_unsafe_losses(next(u.level for u in updates if u.feature == METADATA_VERSION), mv.losses)

        def updated(_image) -> kupdate_resp.UpdateFeaturesResponse:
            for u, r in zip(updates, results, strict=True):
                if records and r.ok:
                    log.info("%s set to %s", u.feature, level_text(u.feature, u.level))
            return _response(results)

        return ControllerResult(records, after=updated)

    return await controller.executor.run(plan, refuse=lambda code, why: _all_failed(updates, code, why),
                                         what="feature updates")


def _quorum_of(controller) -> tuple[int, ...]:
    """The voter ids of ``controller``'s Raft quorum (none known: nothing to wait for)."""
    core = getattr(getattr(controller, "driver", None), "core", None)
    return tuple(sorted(getattr(core, "voters", ()) or ()))
