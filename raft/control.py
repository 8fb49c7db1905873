"""The LeaderChange control record, in an interim encoding of our own.

A new leader appends one control batch holding one LeaderChange record at the start of its
epoch; once that record is committed the leader knows every earlier entry is committed too,
which is why the high watermark may only advance past the epoch start offset.

Record payload, big-endian (this slice; the driver slice switches to Kafka's control batch,
key ``version i16, type i16 = 2`` and the LeaderChangeMessage value, via
kraftlog.engine.records):

    offset  size    field
    0       2       type i16              always 2 (LEADER_CHANGE, as in Kafka's key)
    2       2       version i16           0
    4       4       leader_id i32
    8       4       voter_count i32       n
    12      4*n     voter ids i32         ascending
    ..      4       granting_count i32    m
    ..      4*m     granting voter ids    ascending
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kraftlog.errors import CorruptRecordError

LEADER_CHANGE_TYPE = 2
LEADER_CHANGE_VERSION = 0
_HEAD = struct.Struct(">hhii")
_COUNT = struct.Struct(">i")


class LeaderChange(NamedTuple):
    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]


def encode_leader_change(leader_id: int, voters, granting_voters) -> bytes:
    voters, granting = sorted(voters), sorted(granting_voters)
    return b"".join(
        (
            _HEAD.pack(LEADER_CHANGE_TYPE, LEADER_CHANGE_VERSION, leader_id, len(voters)),
            struct.pack(f">{len(voters)}i", *voters),
            _COUNT.pack(len(granting)),
            struct.pack(f">{len(granting)}i", *granting),
        )
    )


def decode_leader_change(payload: bytes) -> LeaderChange:
    """Inverse of encode_leader_change; raises CorruptRecordError naming the byte position."""
    if len(payload) < _HEAD.size:
        raise CorruptRecordError("LeaderChange record shorter than its header", position=len(payload))
    kind, version, leader_id, n = _HEAD.unpack_from(payload, 0)
    if kind != LEADER_CHANGE_TYPE or version != LEADER_CHANGE_VERSION:
        raise CorruptRecordError(f"not a LeaderChange v0 record (type {kind}, version {version})", position=0)
    pos = _HEAD.size
    if n < 0 or len(payload) < pos + 4 * n + 4:
        raise CorruptRecordError(f"LeaderChange voter count {n} overruns the record", position=8)
    voters = struct.unpack_from(f">{n}i", payload, pos)
    pos += 4 * n
    (m,) = _COUNT.unpack_from(payload, pos)
    if m < 0 or len(payload) != pos + 4 + 4 * m:
        raise CorruptRecordError(f"LeaderChange granting count {m} does not match the record size", position=pos)
    granting = struct.unpack_from(f">{m}i", payload, pos + 4)
    return LeaderChange(leader_id, tuple(voters), tuple(granting))
