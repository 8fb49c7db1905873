"""``meta.properties`` in Kafka's format, and Kafka's uuid strings.

File (a Java properties file, as Kafka's MetaProperties writes it; version 1 is KRaft's)::

    #
    #<date written>
    version=1
    cluster.id=<22-character base64url uuid>
    node.id=<int>
    directory.id=<22-character base64url uuid>

Lines starting with ``#`` or ``!`` are comments; a key ends at the first ``=`` or ``:``. The file is
written to ``meta.properties.tmp``, fsynced and renamed, then the directory is fsynced, so a crash
leaves the old file or the new one.

Uuids: Kafka's ``Uuid.toString`` is the unpadded base64url of the 16 bytes. ``random_uuid`` follows
``Uuid.randomUuid``: a random version-4 uuid, drawn again while it is a reserved id (the first
100 ids with all-zero high bits: ZERO, the metadata topic id, the directory markers) or its
string starts with "-" (it would read as a command-line flag).
"""

from __future__ import annotations

import os
import re
import time
import uuid

from kraftlog.durable import write_atomically
from kraftlog.engine.layout import META_PROPERTIES
from kraftlog.engine.records.schema import uuid_from_kafka, uuid_to_kafka
from kraftlog.errors import KraftlogError

VERSION = 1
RESERVED_UUIDS_BELOW = 100  # Kafka reserves Uuid(0, n) for n < 100 (DirectoryId.reserved and friends)
_UUID_TEXT = re.compile(r"^[A-Za-z0-9_-]{22}$")


class MetaPropertiesError(KraftlogError):
    """meta.properties is missing a key, unreadable, of another version, or holds a bad value."""


def random_uuid() -> uuid.UUID:
    while True:
        value = uuid.uuid4()
        if (value.int >> 64 == 0 and value.int & ((1 << 64) - 1) < RESERVED_UUIDS_BELOW) \
                or uuid_to_kafka(value).startswith("-"):
            continue
        return value


def parse_uuid(text: str, what: str) -> uuid.UUID:
    """A Kafka uuid string (22 base64url characters) or a MetaPropertiesError naming ``what``."""
    if not _UUID_TEXT.match(text or ""):
        raise MetaPropertiesError(f"{what} {text!r} is not a Kafka uuid (22 base64url characters, as printed by "
                        "kraftlog storage random-uuid)")
    try:
        return uuid_from_kafka(text)
    except ValueError:
        raise MetaPropertiesError(f"{what} {text!r} does not decode to 16 bytes") from None


def read(directory: str) -> dict[str, str] | None:
    """The properties of ``directory``/meta.properties, or None when there is no such file."""
    path = os.path.join(directory, META_PROPERTIES)
    props: dict[str, str] = {}
    # open, not os.path.exists: a file this user may not read raises PermissionError here instead
    # of reading as "not formatted", whose advice (format it) would destroy the node's data
    try:
        f = open(path, encoding="latin-1")  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        return None
    with f:
        for number, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line[0] in "#!":
                continue
            cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
            if cut < 0:
                raise MetaPropertiesError(f"{path}: line {number} is not key=value: {line!r}")
            props[line[:cut].strip()] = line[cut + 1:].strip()
    return props


def check(directory: str, props: dict[str, str]) -> None:
    """Raise MetaPropertiesError unless ``props`` is a KRaft (version 1) meta.properties."""
    path = os.path.join(directory, META_PROPERTIES)
    version = props.get("version")
    if version != str(VERSION):
        raise MetaPropertiesError(f"{path}: version {version!r} is not 1 (version 0 is a ZooKeeper-mode broker's)")
    for key in ("cluster.id", "node.id"):
        if key not in props:
            raise MetaPropertiesError(f"{path}: {key} is missing")
    if not props["node.id"].lstrip("-").isdigit() or int(props["node.id"]) < 0:
        raise MetaPropertiesError(f"{path}: node.id {props['node.id']!r} is not a non-negative integer")


def write(directory: str, *, cluster_id: str, node_id: int, directory_id: str) -> str:
    path = os.path.join(directory, META_PROPERTIES)
    lines = ["#", "#" + time.strftime("%a %b %d %H:%M:%S %Z %Y"), f"version={VERSION}", f"cluster.id={cluster_id}",
             f"node.id={node_id}", f"directory.id={directory_id}"]
    write_atomically(path, ("\n".join(lines) + "\n").encode("latin-1"))
    return path
