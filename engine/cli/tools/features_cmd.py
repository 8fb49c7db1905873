"""`kraftlog features describe | upgrade | downgrade | disable`: Kafka's kafka-features against a live quorum.

    describe   ApiVersions v4 to the first address that answers; its feature fields (KIP-584)
               printed as Kafka's tool prints them, one line per supported feature:
               Feature: <name>\\tSupportedMinVersion: <min>\\tSupportedMaxVersion: <max>\\t
               FinalizedVersionLevel: <level>\\tEpoch: <epoch or ->
               (metadata.version levels by name: 3.7-IV0; others as numbers).
    upgrade    UpdateFeatures v1 (UPGRADE) to the addresses in turn until the active controller
    downgrade  answers (NOT_CONTROLLER moves on); SAFE_DOWNGRADE, or UNSAFE_DOWNGRADE with --unsafe
    disable    level 0, SAFE_DOWNGRADE (UNSAFE_DOWNGRADE with --unsafe)

Update output, Kafka's words: per feature, sorted by name, "<feature> was upgraded to <level>." or
"Could not upgrade <feature> to <level>. <controller's message>" ("can be" / "Can not" with
--dry-run; "was disabled." / "Could not disable <feature>." for disable); then, if any failed,
"N out of M operation(s) failed." as the one error line on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from kraftlog.engine.cli.tools.common import ToolError, add_command, add_commands, pipe_safe
from kraftlog.engine.cli.tools.quorum_cmd import parse_addresses
from kraftlog.engine.image import versions
from kraftlog.engine.node import tls

METADATA_VERSION = "metadata.version"  # as engine/image/image.py names it
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3  # UpdateFeatures UpgradeType (features.py)
API_API_VERSIONS, API_UPDATE_FEATURES = 18, 57
APIVERSIONS_VERSION, UPDATE_FEATURES_VERSION = 4, 1  # v4 lists features whose minimum is 0 (v3 omits them)
MAX_FEATURE_LEVEL = 0x7FFF  # levels are int16 on the wire
NOT_CONTROLLER = 41

DESCRIBE_EXAMPLE = "example: kraftlog features describe --bootstrap-controller 127.0.0.1:9093,127.0.0.1:9094"
UPGRADE_EXAMPLE = """examples:
  kraftlog features upgrade --metadata 4.1-IV0 --bootstrap-controller 127.0.0.1:9093
  kraftlog features upgrade --feature metadata.version=26 --dry-run --bootstrap-controller 127.0.0.1:9093"""
DOWNGRADE_EXAMPLE = """examples:
  kraftlog features downgrade --metadata 3.7-IV0 --bootstrap-controller 127.0.0.1:9093
  kraftlog features downgrade --metadata 3.7-IV0 --unsafe --bootstrap-controller 127.0.0.1:9093

A safe downgrade is refused if writing the metadata at the lower level would drop any field
(the error names them); --unsafe drops them."""
DISABLE_EXAMPLE = "example: kraftlog features disable --feature group.version --bootstrap-controller 127.0.0.1:9093"


class FeaturesError(ToolError):
    """No address answered, or the cluster refused some of the operations."""


# ---- arguments -------------------------------------------------------------------------------------


def metadata_level(text: str) -> int:
    """argparse type: a metadata.version name (3.7-IV0, or 3.7 for its latest IV) or level number."""
    try:
        return versions.parse(text)
    except versions.UnknownMetadataVersionError:
        known = [name for name, level in versions.LEVELS.items() if level >= versions.MINIMUM_BOOTSTRAP]
        raise argparse.ArgumentTypeError(f"unknown metadata.version {text!r}; known: {', '.join(known)}") from None


def feature_level(text: str) -> tuple[str, int]:
    """argparse type: FEATURE=LEVEL with LEVEL an int16 >= 0."""
    name, sep, level = text.partition("=")
    name, level = name.strip(), level.strip()
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not FEATURE=LEVEL (e.g. metadata.version=26)")
    if not level.isdigit() or int(level) > MAX_FEATURE_LEVEL:
        raise argparse.ArgumentTypeError(f"level {level!r} in {text!r} is not a number in 0..{MAX_FEATURE_LEVEL}")
    return name, int(level)


def feature_name(text: str) -> str:
    if not text.strip() or "=" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a feature name (e.g. group.version)")
    return text.strip()


def build_updates(op: str, *, metadata: int | None = None, features: Sequence[tuple[str, int]] = (),
                  unsafe: bool = False) -> dict[str, tuple[int, int]]:
    """feature -> (level, upgrade type) for ``op`` (upgrade, downgrade, disable); ValueError with
    the usage problem (nothing to do, a feature named twice)."""
    kind = UPGRADE if op == "upgrade" else UNSAFE_DOWNGRADE if unsafe else SAFE_DOWNGRADE
    updates: dict[str, tuple[int, int]] = {}
    if metadata is not None:
        updates[METADATA_VERSION] = (metadata, kind)
    for name, level in features:
        if name in updates:
            raise ValueError(f"feature {name} is given more than once")
        updates[name] = (level, kind)
    if not updates:
        what = "--feature" if op == "disable" else "--metadata, --release-version or --feature"
        raise ValueError(f"nothing to {op}: give {what}")
    return updates


def _add_bootstrap(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-controller", metavar="HOST:PORT[,...]", help="controller addresses (the quorum)")
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="any node's address")
    parser.add_argument("--timeout-ms", type=int, default=10_000, help="give up after this long (default 10000)")
    tls.add_tls_arguments(parser)


def _add_update_args(parser: argparse.ArgumentParser, op: str) -> None:
    _add_bootstrap(parser)
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--metadata", "--metadata-version", dest="metadata", type=metadata_level, metavar="VERSION",
                        help=f"the metadata.version to {op} to, by name (3.7-IV0) or level (15)")
    target.add_argument("--release-version", dest="metadata", type=metadata_level, metavar="VERSION",
                        help="the release to match (sets metadata.version; this build has no other "
                        "release-dependent feature)")
    parser.add_argument("--feature", action="append", type=feature_level, default=[], metavar="FEATURE=LEVEL",
                        help="a feature level to set, repeatable (e.g. metadata.version=26)")
    parser.add_argument("--dry-run", action="store_true", help=f"validate the {op} on the controller, change nothing")


def register(parser: argparse.ArgumentParser) -> None:
    sub = add_commands(parser, "features_command")
    parser.epilog = DESCRIBE_EXAMPLE
    describe = add_command(sub, "describe", "the supported and finalized features (kafka-features describe)",
                           DESCRIBE_EXAMPLE, pipe_safe(run_describe))
    _add_bootstrap(describe)
    upgrade = add_command(sub, "upgrade", "raise metadata.version or other features", UPGRADE_EXAMPLE, run_update)
    _add_update_args(upgrade, "upgrade")
    downgrade = add_command(sub, "downgrade", "lower metadata.version or other features (refused if it would "
                            "lose metadata, unless --unsafe)", DOWNGRADE_EXAMPLE, run_update)
    _add_update_args(downgrade, "downgrade")
    downgrade.add_argument("--unsafe", action="store_true", help="downgrade even if metadata is lost (the "
                           "controller logs what it drops)")
    disable = add_command(sub, "disable", "set features to level 0", DISABLE_EXAMPLE, run_update)
    _add_bootstrap(disable)
    disable.add_argument("--feature", action="append", type=feature_name, default=[], metavar="FEATURE",
                         help="a feature to disable, repeatable")
    disable.add_argument("--unsafe", action="store_true", help="disable even if metadata is lost")
    disable.add_argument("--dry-run", action="store_true", help="validate on the controller, change nothing")
    for command in (upgrade, downgrade, disable):
        command.set_defaults(_parser=command)


# ---- output (pure) -------------------------------------------------------------------------------------


def level_string(feature: str, level: int) -> str:
    """Kafka's levelToString: metadata.version levels by name ("UNKNOWN n" if unknown), others as numbers."""
    if feature == METADATA_VERSION:
        return versions.NAMES.get(level, f"UNKNOWN {level}")
    return str(level)


def describe_lines(supported: Sequence[tuple[str, int, int]], finalized: dict[str, int], epoch: int) -> list[str]:
    """One line per supported feature, by name; an epoch below 0 (unknown) prints as '-'."""
    epoch_text = str(epoch) if epoch >= 0 else "-"
    return [f"Feature: {name}\tSupportedMinVersion: {level_string(name, low)}\t"
            f"SupportedMaxVersion: {level_string(name, high)}\t"
            f"FinalizedVersionLevel: {level_string(name, finalized.get(name, 0))}\tEpoch: {epoch_text}"
            for name, low, high in sorted(supported)]


def features_of(resp) -> tuple[list[tuple[str, int, int]], dict[str, int], int]:
    """(supported, finalized max levels, epoch) of a kio ApiVersions v3/v4 response."""
    supported = [(k.name, int(k.min_version), int(k.max_version)) for k in resp.supported_features]
    finalized = {k.name: int(k.max_version_level) for k in resp.finalized_features}
    return supported, finalized, int(resp.finalized_features_epoch)


def update_lines(op: str, updates: dict[str, tuple[int, int]], errors: dict[str, str | None],
                 dry_run: bool) -> tuple[list[str], int]:
    """Kafka's per-feature lines (sorted by feature) and the number of failures; ``errors`` maps a
    feature to its error message, None when it succeeded."""
    lines, failures = [], 0
    for feature in sorted(updates):
        level = updates[feature][0]
        message = errors.get(feature, "the controller did not answer for this feature")
        if message is not None:
            failures += 1
            target = f"disable {feature}" if op == "disable" else f"{op} {feature} to {level}"
            lines.append(f"{'Can not' if dry_run else 'Could not'} {target}. {message}")
        else:
            done = "disabled." if op == "disable" else f"{op}d to {level}."
            lines.append(f"{feature} {'can be' if dry_run else 'was'} {done}")
    return lines, failures


def result_errors(resp) -> dict[str, str | None]:
    """feature -> error message (the code's name if the controller sent none), None if it succeeded."""
    out: dict[str, str | None] = {}
    for r in resp.results:
        ok = int(r.error_code) == 0
        out[r.feature] = None if ok else (r.error_message or f"{r.error_code.name.upper()} (error {int(r.error_code)})")
    return out


# ---- the network -------------------------------------------------------------------------------------


async def _ask(addresses: list[tuple[str, int]], api_key: int, version: int, body, response_type, *,
               header_v0: bool, timeout_ms: int, accept, ssl_context=None) -> object:
    """Send the request to each address in turn; the first response ``accept(resp)`` takes (returns
    None) is returned, else its reason is noted and the next address tried."""
    from kraftlog.engine.protocol.connection import ClientConnection

    tried = []
    for host, port in addresses:
        conn = ClientConnection(host, port, ssl_context=ssl_context)
        try:
            await asyncio.wait_for(conn.open(), timeout_ms / 1000)
            resp = await asyncio.wait_for(conn.request(api_key, version, body, response_type, header_v0=header_v0),
                                          timeout_ms / 1000)
        except Exception as exc:  # unreachable, refused, closed, timed out: reported with the others
            tried.append(f"{host}:{port} ({type(exc).__name__}{': ' + str(exc) if str(exc) else ''})")
            continue
        finally:
            await conn.close()
        reason = accept(resp)
        if reason is None:
            return resp
        tried.append(f"{host}:{port} ({reason})")
    raise FeaturesError(f"no node answered; tried {', '.join(tried)}")


async def fetch_features(addresses: list[tuple[str, int]], timeout_ms: int, ssl_context=None):
    from kio.schema.api_versions.v4.request import ApiVersionsRequest
    from kio.schema.api_versions.v4.response import ApiVersionsResponse

    from kraftlog import __version__

    body = ApiVersionsRequest(client_software_name="kraftlog-features", client_software_version=__version__)
    return await _ask(addresses, API_API_VERSIONS, APIVERSIONS_VERSION, body, ApiVersionsResponse, header_v0=True,
                      timeout_ms=timeout_ms, ssl_context=ssl_context,
                      accept=lambda r: None if int(r.error_code) == 0 else f"error {r.error_code.name}")


async def send_updates(addresses: list[tuple[str, int]], updates: dict[str, tuple[int, int]], dry_run: bool,
                       timeout_ms: int, ssl_context=None):
    import datetime

    from kio.schema.update_features.v1 import request as kreq
    from kio.schema.update_features.v1 import response as kresp
    from kio.static.primitive import i8, i16

    body = kreq.UpdateFeaturesRequest(
        timeout=datetime.timedelta(milliseconds=timeout_ms), validate_only=dry_run,
        feature_updates=tuple(kreq.FeatureUpdateKey(feature=name, max_version_level=i16(level), upgrade_type=i8(kind))
                              for name, (level, kind) in updates.items()))

    def accept(resp) -> str | None:
        if int(resp.error_code) == NOT_CONTROLLER:
            return "not the active controller"
        return None

    return await _ask(addresses, API_UPDATE_FEATURES, UPDATE_FEATURES_VERSION, body, kresp.UpdateFeaturesResponse,
                      header_v0=False, timeout_ms=timeout_ms, accept=accept, ssl_context=ssl_context)


# ---- commands ------------------------------------------------------------------------------------------


def _addresses(args: argparse.Namespace) -> list[tuple[str, int]]:
    return parse_addresses(args.bootstrap_controller or args.bootstrap_server)


def run_describe(args: argparse.Namespace) -> int:
    resp = asyncio.run(fetch_features(_addresses(args), args.timeout_ms, tls.client_context(args)))
    supported, finalized, epoch = features_of(resp)
    if not supported:
        raise FeaturesError("the node answered ApiVersions without any supported feature (is it a node that "
                            "does not report features yet?)")
    print("\n".join(describe_lines(supported, finalized, epoch)))
    return 0


def run_update(args: argparse.Namespace) -> int:
    op = args.features_command
    try:
        if op == "disable":
            updates = build_updates(op, features=[(name, 0) for name in args.feature], unsafe=args.unsafe)
        else:
            updates = build_updates(op, metadata=args.metadata, features=args.feature,
                                    unsafe=getattr(args, "unsafe", False))
    except ValueError as exc:
        args._parser.error(str(exc))  # one line, exit 2
    resp = asyncio.run(send_updates(_addresses(args), updates, args.dry_run, args.timeout_ms,
                                    tls.client_context(args)))
    errors = result_errors(resp)
    if int(resp.error_code) != 0 and not resp.results:
        message = resp.error_message or resp.error_code.name.upper()
        errors = {name: message for name in updates}
    lines, failures = update_lines(op, updates, errors, args.dry_run)
    print("\n".join(lines), flush=True)
    if failures:
        raise FeaturesError(f"{failures} out of {len(updates)} operation(s) failed.")
    return 0
