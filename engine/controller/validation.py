"""The controller never proposes a record it could not replay itself.

Before the active controller proposes records (controller.py, ``_write_proposals``), they are
decoded and replayed onto a delta of its current image, exactly as every node will replay them once
committed, and checked for what replay accepts but a Kafka node would refuse:

    TopicRecord                 a legal topic name (Kafka's Topic.validate: ``topic_name_problem``)
    PartitionRecord             replicas and ISR name registered brokers (registered before, or by
                                a RegisterBrokerRecord earlier in the same write); ISR within the
                                replicas; the leader -1 or one of the replicas
    PartitionChangeRecord       the same for the replicas, ISR and leader it sets

Any failure raises ``InvalidRecordsError`` naming the record: the write is refused, nothing reaches
the log (a committed record that a node cannot apply is a fault on every node that reads it). The
handlers answer it with UNKNOWN_SERVER_ERROR, as Kafka's controller answers an exception thrown
while it replays the records of a write. The checks are vectorised over the decoder's columns, so a
CreateTopics of thousands of partitions costs one extra decode and replay, no per-record Python.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kraftlog.engine.image.image import MetadataDelta, MetadataImage
from kraftlog.engine.image.loader import LoadManifest, MetadataLoadError, apply_columns
from kraftlog.engine.image.loader import decode as loader_decode
from kraftlog.engine.records import batch
from kraftlog.engine.records import metadata as codec
from kraftlog.errors import CorruptRecordError, KraftlogError

MAX_TOPIC_NAME_CHARS = 249  # Kafka's Topic.MAX_NAME_LENGTH
_LEGAL_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
_NO_LEADER = -1
API_FEATURE_LEVEL = codec.RECORD_TYPES["FeatureLevelRecord"].api_key  # a metadata record, not an RPC


@dataclass(frozen=True, slots=True)
class Checked:
    """The replay ``check_records`` made: the delta of its image and what the load counted."""

    delta: MetadataDelta
    manifest: LoadManifest
    feature_levels: bool  # a FeatureLevelRecord among them (its commit may reload the image)


class InvalidRecordsError(KraftlogError):
    """Records the controller was about to propose that it could not replay, or that break a rule
    every Kafka node relies on; the message names the first one."""


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's Topic.validate), or None."""
    if not name:
        return "the topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME_CHARS:
        return f"topic name is {len(name)} characters, above the maximum {MAX_TOPIC_NAME_CHARS}"
    if not _LEGAL_TOPIC_NAME.match(name):
        return f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def check_records(image: MetadataImage, values: Sequence[bytes], *, base_offset: int) -> Checked | None:
    """Raise InvalidRecordsError unless ``values`` (framed metadata record values, in the order
    they would be committed from ``base_offset``) replay cleanly onto ``image`` and pass the
    module docstring's checks. Returns the replay (None for no values): with the offsets the
    records will have, it is what the commit's replay would give (writes.py speculates on it)."""
    if not values:
        return None
    try:
        columns = loader_decode(batch.build_batch_from_values(list(values), base_offset=base_offset,
                                                              timestamp_ms=0))
    except CorruptRecordError as exc:
        raise InvalidRecordsError(f"records that do not decode: {exc}") from None
    _check_topic_names(columns)
    brokers = np.union1d(np.fromiter(image.cluster.brokers, dtype=np.int64, count=len(image.cluster.brokers)),
                         columns.broker_registrations.broker_id.astype(np.int64))
    _check_partitions(columns, brokers)
    _check_changes(columns, brokers)
    delta, manifest = image.delta(), LoadManifest("log")
    try:
        apply_columns(delta, columns, manifest, snapshot_end_offset=None)
    except MetadataLoadError as exc:
        raise InvalidRecordsError(f"a record this controller cannot replay: {exc}") from None
    return Checked(delta, manifest, bool((columns.api_keys == API_FEATURE_LEVEL).any()))


def _offset(columns, table, row: int) -> int:
    return int(columns.offsets[int(table.record_index[row])])


def _check_topic_names(columns) -> None:
    t = columns.topics
    for row in range(len(t)):
        lo, hi = int(t.name_offsets[row]), int(t.name_offsets[row + 1])
        name = bytes(t.name_blob[lo:hi]).decode("utf-8", "replace")
        problem = topic_name_problem(name)
        if problem is not None:
            raise InvalidRecordsError(f"TopicRecord at offset {_offset(columns, t, row)}: {problem}")


def _unknown(ids: np.ndarray, brokers: np.ndarray) -> np.ndarray:
    """Rows of ``ids`` (-1 padded broker lists) naming a broker not in ``brokers``."""
    return ((ids >= 0) & ~np.isin(ids, brokers)).any(axis=1)


def _outside(members: np.ndarray, within: np.ndarray) -> np.ndarray:
    """Rows where a member (>= 0) of ``members`` is not in the same row of ``within``."""
    found = (members[:, :, None] == within[:, None, :]).any(axis=2)
    return ((members >= 0) & ~found).any(axis=1)


def _refuse(columns, table, rows: np.ndarray, record_type: str, what: str) -> None:
    hits = np.flatnonzero(rows)
    if len(hits):
        row = int(hits[0])
        raise InvalidRecordsError(f"{record_type} at offset {_offset(columns, table, row)} "
                                  f"(partition {int(table.partition_id[row])}): {what}")


def _check_partitions(columns, brokers: np.ndarray) -> None:
    p = columns.partitions
    if not len(p):
        return
    replicas, isr, leader = p.replicas, p.isr, p.leader.astype(np.int64)
    _refuse(columns, p, _unknown(replicas, brokers) | _unknown(isr, brokers), "PartitionRecord",
            "names a replica that is not a registered broker")
    _refuse(columns, p, _outside(isr, replicas), "PartitionRecord", "its ISR holds a broker outside its replicas")
    bad_leader = (leader != _NO_LEADER) & ~(replicas == leader[:, None]).any(axis=1)
    _refuse(columns, p, bad_leader, "PartitionRecord", "its leader is not one of its replicas")


def _check_changes(columns, brokers: np.ndarray) -> None:
    c = columns.partition_changes
    if not len(c):
        return
    leader = c.leader.astype(np.int64)
    bad = _unknown(c.isr, brokers) | _unknown(c.replicas, brokers) | ((leader >= 0) & ~np.isin(leader, brokers))
    _refuse(columns, c, bad, "PartitionChangeRecord", "names a broker that is not registered")
