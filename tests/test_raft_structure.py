"""Proves the raft package's structural promises: the core modules import no I/O (os, socket,
time, threading, asyncio) and nothing of kraftlog.engine but records; every message field's
documented Kafka name exists in kio's generated type for that API (so a driver can map them
1:1); our error codes equal Kafka's; the LeaderChange encoding round-trips and rejects damage;
and the in-memory log used by the simulator answers end_offset_for_epoch as the protocol says.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import re
import typing
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from raft_sim.storage import MemLog

from kraftlog.errors import CorruptRecordError
from kraftlog.raft import messages
from kraftlog.raft.control import decode_leader_change, encode_leader_change
from kraftlog.raft.types import Errors, OffsetAndEpoch

RAFT = Path(__file__).resolve().parent.parent / "raft"
FORBIDDEN = {"os", "socket", "time", "threading", "asyncio", "subprocess", "selectors"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(RAFT.glob("*.py")), ids=lambda p: p.name)
def test_core_modules_do_no_io_and_reach_engine_only_through_records(path):
    names = _imports(path)
    assert not {n.split(".")[0] for n in names} & FORBIDDEN, names
    engine = [n for n in names if n.startswith("kraftlog.engine")]
    assert all(n.startswith("kraftlog.engine.records") for n in engine), engine


def _kio_fields(cls, seen=None) -> set[str]:
    """Every field name of a kio message and of the nested entities it holds."""
    seen = seen if seen is not None else set()
    if cls in seen or not dataclasses.is_dataclass(cls):
        return set()
    seen.add(cls)
    out = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        out.add(f.name)
        for arg in [hints.get(f.name)] + list(typing.get_args(hints.get(f.name))):
            for inner in [arg] + list(typing.get_args(arg)):
                if isinstance(inner, type):
                    out |= _kio_fields(inner, seen)
    return out


KIO = {
    "VoteRequest": "kio.schema.vote.v2.request", "VoteResponse": "kio.schema.vote.v2.response",
    "BeginQuorumEpochRequest": "kio.schema.begin_quorum_epoch.v1.request",
    "BeginQuorumEpochResponse": "kio.schema.begin_quorum_epoch.v1.response",
    "EndQuorumEpochRequest": "kio.schema.end_quorum_epoch.v1.request",
    "EndQuorumEpochResponse": "kio.schema.end_quorum_epoch.v1.response",
    "FetchRequest": "kio.schema.fetch.v17.request", "FetchResponse": "kio.schema.fetch.v17.response",
    "FetchSnapshotRequest": "kio.schema.fetch_snapshot.v1.request",
    "FetchSnapshotResponse": "kio.schema.fetch_snapshot.v1.response",
    "DescribeQuorumResponse": "kio.schema.describe_quorum.v2.response",
}
_EXTRA = {"ReplicaDescription": "kio.schema.describe_quorum.v2.response"}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@pytest.mark.parametrize("name", sorted(KIO | _EXTRA))
def test_every_documented_kafka_field_exists_in_kio(name):
    """Each ``our_field -> KafkaField`` in a message docstring names a real field of that API."""
    ours = getattr(messages, name)
    module = importlib.import_module(KIO.get(name) or _EXTRA[name])
    top = name if name in KIO else "DescribeQuorumResponse"
    kio_names = _kio_fields(getattr(module, top))
    # the oldest version too: a few fields exist only there (EndQuorumEpoch v0 PreferredSuccessors)
    package = importlib.import_module(module.__name__.rsplit(".", 2)[0])
    oldest = min((m.name for m in pkgutil.iter_modules(package.__path__)), key=lambda v: int(v[1:]))
    v0 = importlib.import_module(f"{package.__name__}.{oldest}.{module.__name__.rsplit('.', 1)[1]}")
    kio_names |= _kio_fields(getattr(v0, top))
    entities = {_snake(n) for m in (module, v0) for n, obj in vars(m).items() if isinstance(obj, type)}
    segments = re.findall(r"-> ([^,;]+)", ours.__doc__)
    assert segments, f"{name} documents no mapping"
    for segment in segments:
        for kafka_name in re.findall(r"\b[A-Z][a-z]+(?:[A-Z][a-z]+)*\b", segment):
            snake = _snake(kafka_name)
            snake = snake.removesuffix("_ms") if snake.removesuffix("_ms") in kio_names else snake  # kio: timedelta
            assert snake in kio_names | entities, \
                f"{name}: {kafka_name} is not a field of {module.__name__}"
    # and every field of ours is documented (except the two that never go on the wire)
    documented = {"pre_vote"}
    for left in re.findall(r"([\w/]+)\s+->", ours.__doc__):
        documented.update(left.split("/"))
    for f in dataclasses.fields(ours):
        assert f.name in documented, f"{name}.{f.name} has no Kafka mapping"


def test_error_codes_are_kafkas():
    for e in Errors:
        assert ErrorCode[e.name.lower()].value == e.value


@given(st.integers(-(2**31), 2**31 - 1), st.sets(st.integers(0, 2**31 - 1), max_size=9),
       st.sets(st.integers(0, 2**31 - 1), max_size=9))
def test_leader_change_round_trips(leader, voters, granting):
    decoded = decode_leader_change(encode_leader_change(leader, voters, granting))
    assert decoded.leader_id == leader
    assert decoded.voters == tuple(sorted(voters)) and decoded.granting_voters == tuple(sorted(granting))


def test_leader_change_rejects_truncated_and_foreign_records():
    good = encode_leader_change(1, {1, 2, 3}, {1, 2})
    for bad in (good[:5], good[:-1], good + b"\0", b"\0\3" + good[2:]):
        with pytest.raises(CorruptRecordError):
            decode_leader_change(bad)


def test_memlog_end_offset_for_epoch_follows_the_protocol():
    """Epochs 1 (offsets 0-2), 3 (3-4), 4 (5): each answer is (start of the next larger
    epoch or the end, the largest known epoch <= the asked one)."""
    log = MemLog()
    for epoch, n in ((1, 3), (3, 2), (4, 1)):
        for _ in range(n):
            log.append_as_leader([b"x"], epoch)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(3, 1)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(3, 1)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(5, 3)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(6, 4)
    log.delete_before(4, 3)
    assert log.start_offset() == 4 and log.end_offset_for_epoch(2) == OffsetAndEpoch(4, 3)
    log.truncate_to(5)
    assert log.end_offset() == 5 and log.last_fetched_epoch() == 3


def test_memlog_loses_unflushed_data_on_a_crash_but_never_flushed_data():
    import random

    log = MemLog()
    log.append_as_leader([b"a"], 1)
    log.flush()
    log.append_as_leader([b"b"], 1)
    log.crash(random.Random(0), torn_tail=False)
    assert log.end_offset() == 1
    log.truncate_to(0)
    log.crash(random.Random(0), torn_tail=True)  # a truncation was never flushed: it is undone
    assert log.end_offset() == 1
