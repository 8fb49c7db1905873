"""Proves the columnar topics image: random sequences of creates, expansions, partition changes and
deletes give the same partitions through the scalar replay, the bulk (column) replay and a naive
dict model; published images never change; a delta copies only the chunks it touches."""

from __future__ import annotations

import random
import uuid
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog import _accel
from kraftlog.engine.image import index as hindex
from kraftlog.engine.image import index_pure
from kraftlog.engine.image.image import MetadataImage
from kraftlog.engine.image.index import HashIndex
from kraftlog.engine.image.loader import BULK_MIN_RECORDS
from kraftlog.engine.image.table import CHUNK_ROWS, ChunkedTable, Column
from kraftlog.engine.image.topics import (
    LIST_FIELDS,
    MIGRATING_DIRECTORY,
    NO_LEADER_CHANGE,
    UNASSIGNED_DIRECTORY,
    MetadataReplayError,
    TopicsDelta,
    TopicsImage,
    uuid_to_halves,
)
from kraftlog.engine.records import metadata_columns

pytestmark = pytest.mark.twin


def test_the_expected_index_implementation_is_loaded():
    assert ("pure" if _accel.FORCE_PURE else "native") == hindex.IMPLEMENTATION


# -- a naive model: what Kafka's PartitionRegistration.merge does, in dicts ---------------------------
class Model:
    def __init__(self):
        self.topics: dict[str, dict] = {}

    def create(self, name, tid, parts):
        self.topics[name] = {"id": tid, "partitions": {p: dict(v) for p, v in enumerate(parts)}}

    def change(self, name, pid, leader, isr, replicas, lrs):
        p = self.topics[name]["partitions"][pid]
        if isr is not None:
            p["isr"] = tuple(isr)
        if replicas is not None:
            p["replicas"] = tuple(replicas)
        if leader != NO_LEADER_CHANGE:
            p["leader"] = leader
            p["leader_epoch"] += 1
        if lrs != -1:
            p["leader_recovery_state"] = lrs
        p["partition_epoch"] += 1

    def state(self):
        return {(name, pid): dict(p) for name, t in self.topics.items() for pid, p in t["partitions"].items()}


def image_state(image: TopicsImage):
    out = {}
    for name in image.topic_names():
        for reg in image.partitions_of(name):
            out[(name, reg.partition_id)] = {
                "replicas": reg.replicas, "isr": reg.isr, "leader": reg.leader, "leader_epoch": reg.leader_epoch,
                "partition_epoch": reg.partition_epoch, "leader_recovery_state": reg.leader_recovery_state}
    return out


def random_partition(rng, brokers=8):
    replicas = tuple(rng.sample(range(brokers), rng.randint(1, 4)))
    return {"replicas": replicas, "isr": replicas[: rng.randint(1, len(replicas))], "leader": replicas[0],
            "leader_epoch": rng.randint(0, 5), "partition_epoch": rng.randint(0, 5), "leader_recovery_state": 0}


def make_ops(seed, steps):
    rng = random.Random(seed)
    ops, live, counter = [], {}, 0
    for _ in range(steps):
        kind = rng.choice(["create", "create", "change", "change", "change", "delete", "expand"])
        if kind == "create" or not live:
            counter += 1
            name = f"t{counter % 7}-{rng.randint(0, 3)}"
            if name in live:
                continue
            parts = [random_partition(rng) for _ in range(rng.randint(0, 5))]
            live[name] = (uuid.UUID(int=rng.getrandbits(128)), len(parts))
            ops.append(("create", name, live[name][0], parts))
        elif kind == "change":
            name = rng.choice(sorted(live))
            if not live[name][1]:
                continue
            pid = rng.randrange(live[name][1])
            isr = tuple(rng.sample(range(8), rng.randint(0, 3))) if rng.random() < 0.6 else None
            replicas = tuple(rng.sample(range(8), rng.randint(1, 4))) if rng.random() < 0.2 else None
            leader = rng.choice([NO_LEADER_CHANGE, -1, rng.randrange(8)])
            lrs = rng.choice([-1, -1, 0, 1])
            ops.append(("change", name, live[name][0], pid, leader, isr, replicas, lrs))
        elif kind == "delete":
            name = rng.choice(sorted(live))
            ops.append(("delete", name, live.pop(name)[0]))
        else:
            name = rng.choice(sorted(live))
            extra = [random_partition(rng) for _ in range(rng.randint(1, 3))]
            ops.append(("expand", name, live[name][0], live[name][1], extra))
            live[name] = (live[name][0], live[name][1] + len(extra))
    return ops


def apply_model(ops):
    model = Model()
    for op in ops:
        if op[0] == "create":
            model.create(op[1], op[2], op[3])
        elif op[0] == "change":
            model.change(op[1], *op[3:])
        elif op[0] == "delete":
            del model.topics[op[1]]
        else:
            name, start, extra = op[1], op[3], op[4]
            for i, p in enumerate(extra):
                model.topics[name]["partitions"][start + i] = dict(p)
    return model.state()


def replay_scalar(image, ops, deltas_every=3):
    delta = image.delta()
    for i, op in enumerate(ops):
        if op[0] == "create":
            delta.replay_topic(op[2], op[1], topic_epoch=i)
            for pid, p in enumerate(op[3]):
                delta.replay_partition(op[2], pid, **p)
        elif op[0] == "change":
            _, _, tid, pid, leader, isr, replicas, lrs = op
            delta.replay_partition_change(tid, pid, leader=leader, isr=isr, replicas=replicas,
                                          leader_recovery_state=lrs)
        elif op[0] == "delete":
            delta.replay_remove_topic(op[2])
        else:
            for j, p in enumerate(op[4]):
                delta.replay_partition(op[2], op[3] + j, **p, topic_epoch=i)
        if i % deltas_every == 0:
            image = delta.apply()
            delta = image.delta()
    return delta.apply()


def _pad(lists, width):
    out = np.full((len(lists), max(width, 1)), -1, dtype=np.int32)
    for i, values in enumerate(lists):
        out[i, : len(values)] = values
    return out


def change_table(run):
    """The decoder's partition_changes table (kraftlog._metadata) for the change ops of ``run``."""
    isr = [o[5] or () for o in run]
    reps = [o[6] or () for o in run]
    halves = np.array([uuid_to_halves(o[2]) for o in run], dtype=np.int64).reshape(len(run), 2)
    return SimpleNamespace(
        record_index=np.arange(len(run), dtype=np.int32), topic_id=halves.view(np.uint64),
        partition_id=np.array([o[3] for o in run], dtype=np.int32), leader=np.array([o[4] for o in run], np.int32),
        leader_recovery_state=np.array([o[7] for o in run], dtype=np.int8),
        isr=_pad(isr, max(map(len, isr), default=1)),
        isr_count=np.array([-1 if o[5] is None else len(o[5]) for o in run], dtype=np.int16),
        replicas=_pad(reps, max(map(len, reps), default=1)),
        replica_count=np.array([-1 if o[6] is None else len(o[6]) for o in run], dtype=np.int16),
        extras=np.zeros(len(run), dtype=bool),
        **{name: np.empty((len(run), 0), np.int32) for name in LIST_FIELDS[2:]},  # null: no list carries them
        **{name + "_count": np.full(len(run), -1, np.int16) for name in LIST_FIELDS[2:]})


# a region's empty tables of every kind: the change tests put their partition_changes among them
_NO_COLUMNS = metadata_columns.decode_metadata_region(b"", 0, None)


def stream_pass(delta, changes, api_keys: np.ndarray, kind_rows: np.ndarray, order: np.ndarray, start: int) -> int:
    """The native topic-stream pass (TopicsDelta.apply_stream, as the loader calls it on a log
    region) over a region whose only decoded table is ``changes``; returns where it stopped."""
    cols = SimpleNamespace(partition_changes=changes, configs=_NO_COLUMNS.configs,
                           remove_topics=_NO_COLUMNS.remove_topics, topics=_NO_COLUMNS.topics,
                           partitions=_NO_COLUMNS.partitions)
    configs = MetadataImage.empty().delta().configs
    stop, _, configs_changed = delta.apply_stream(
        TopicsDelta.stream_tables(cols), configs, api_keys, kind_rows, order, start,
        offsets=np.arange(len(api_keys), dtype=np.int64), bulk_min_records=BULK_MIN_RECORDS)
    assert not configs_changed and configs.items is None  # changes only: no config written, none copied
    return stop


def pass_changes(delta, run) -> list[int]:
    """The change ops of ``run`` through the native pass (stream_pass); what it hands back is
    replayed on its own on the same delta, as the loader does. Returns the handed-back positions."""
    table, order = change_table(run), np.arange(len(run), dtype=np.int64)
    api_keys = np.full(len(run), 5, dtype=np.int16)  # PartitionChangeRecord
    pos, handed_back = 0, []
    while pos < len(run):
        pos = stream_pass(delta, table, api_keys, order.astype(np.int32), order, pos)
        if pos < len(run):
            _, _, tid, pid, leader, isr, replicas, lrs = run[pos]
            delta.replay_partition_change(tid, pid, leader=leader, isr=isr, replicas=replicas,
                                          leader_recovery_state=lrs)
            handed_back.append(pos)
            pos += 1
    return handed_back


def replay_bulk(image, ops):
    """Creates through bulk_create, runs of changes through the native pass, the rest scalar."""
    delta = image.delta()
    i = 0
    while i < len(ops):
        op = ops[i]
        if op[0] == "change":
            run = []
            while i < len(ops) and ops[i][0] == "change":
                run.append(ops[i])
                i += 1
            pass_changes(delta, run)
            image = delta.apply()
            delta = image.delta()
            continue
        if op[0] == "create":
            hi, lo = uuid_to_halves(op[2])
            parts = op[3]
            ok = delta.bulk_create(
                id_hi=np.array([hi], dtype=np.int64), id_lo=np.array([lo], dtype=np.int64), names=[op[1]],
                name_hashes=np.array([hindex.hash_name(op[1].encode())], dtype=np.uint64),
                topic_epochs=np.array([i], dtype=np.int64),
                partitions={
                    "topic_hi": np.full(len(parts), hi, dtype=np.int64),
                    "topic_lo": np.full(len(parts), lo, dtype=np.int64),
                    "partition_id": np.arange(len(parts), dtype=np.int32),
                    "leader": np.array([p["leader"] for p in parts], dtype=np.int32),
                    "leader_epoch": np.array([p["leader_epoch"] for p in parts], dtype=np.int32),
                    "partition_epoch": np.array([p["partition_epoch"] for p in parts], dtype=np.int32),
                    "leader_recovery_state": np.zeros(len(parts), dtype=np.int8),
                    "replicas": _pad([p["replicas"] for p in parts], 4),
                    "isr": _pad([p["isr"] for p in parts], 4)})
            assert ok
        else:
            image = replay_scalar(delta.apply(), [op])
            delta = image.delta()
        i += 1
    return delta.apply()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 60))
def test_scalar_bulk_and_model_agree(seed, steps):
    """The scalar replay, the column replay (with the native pass of changes and with its twin)
    and the dict model give the same partitions."""
    ops = make_ops(seed, steps)
    expected = apply_model(ops)
    assert image_state(replay_scalar(TopicsImage.empty(), ops)) == expected
    assert image_state(replay_bulk(TopicsImage.empty(), ops)) == expected
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hindex, "apply_topic_stream", index_pure.apply_topic_stream)
        assert image_state(replay_bulk(TopicsImage.empty(), ops)) == expected


@pytest.mark.parametrize("order,accepted", [
    ([(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)], True),  # as snapshots write them
    ([(1, 2), (0, 1), (1, 0), (0, 0), (1, 1)], True),  # any order: sorted first
    ([(0, 0), (0, 1), (1, 0), (1, 0), (1, 2)], False),  # a repeated partition id
    ([(0, 0), (0, 1), (1, 0), (1, 2)], False),  # a missing one
    ([(0, 0), (0, 1), (1, 1), (1, 2)], False),  # not starting at 0
    ([(0, 0), (0, -1), (1, 0)], False),  # a negative one
])
def test_bulk_create_takes_partitions_in_any_order_and_refuses_ids_that_are_not_0_to_n(order, accepted):
    """bulk_create checks the partition ids of each topic are exactly 0..count-1 (on the topics'
    ends, after an in-order check that spares the sort); otherwise it changes nothing and the
    loader replays the records one by one."""
    ids = [uuid.UUID(int=11), uuid.UUID(int=12)]
    halves = np.array([uuid_to_halves(t) for t in ids], dtype=np.int64)
    owner = np.array([o for o, _ in order])
    delta = TopicsImage.empty().delta()
    ok = delta.bulk_create(
        id_hi=halves[:, 0].copy(), id_lo=halves[:, 1].copy(), names=["a", "b"],
        name_hashes=np.array([hindex.hash_name(b"a"), hindex.hash_name(b"b")], dtype=np.uint64),
        topic_epochs=np.array([0, 0], dtype=np.int64),
        partitions={"topic_hi": halves[owner, 0], "topic_lo": halves[owner, 1],
                    "partition_id": np.array([p for _, p in order], dtype=np.int32),
                    "leader": np.array([10 * o + p for o, p in order], dtype=np.int32),
                    "leader_epoch": np.zeros(len(order), np.int32), "partition_epoch": np.zeros(len(order), np.int32),
                    "leader_recovery_state": np.zeros(len(order), np.int8),
                    "replicas": _pad([(1,)] * len(order), 1), "isr": _pad([(1,)] * len(order), 1)})
    assert ok == accepted
    image = delta.apply()
    if accepted:  # each partition landed at its id, with its own fields
        assert [image.partition("b", p).leader for p in range(3)] == [10, 11, 12]
        assert [image.partition("a", p).leader for p in range(2)] == [0, 1]
    else:
        assert image.partition_count == 0 and image.topic_row("a") is None


def test_a_replica_change_without_directories_gives_new_replicas_unassigned():
    """Kafka's createDirectoriesFrom, also from an all-MIGRATING partition (stored as no list):
    kept replicas keep their directory, a new one gets UNASSIGNED; a change that only drops or
    reorders replicas of an all-MIGRATING partition leaves it all MIGRATING. The bulk path refuses
    such a run (the loader then replays it record by record) rather than get it wrong."""
    m, u = MIGRATING_DIRECTORY, UNASSIGNED_DIRECTORY
    tid = uuid.UUID(int=7)
    delta = TopicsImage.empty().delta()
    delta.replay_topic(tid, "t", topic_epoch=0)
    for pid in (0, 1):
        delta.replay_partition(tid, pid, replicas=[1, 2], isr=[1, 2], leader=1, leader_epoch=0, partition_epoch=0)
    image = delta.apply()
    delta = image.delta()
    delta.replay_partition_change(tid, 0, replicas=[2, 1])  # reorder: still all MIGRATING
    delta.replay_partition_change(tid, 1, replicas=[1, 2, 3])  # a new replica
    image = delta.apply()
    assert image.partition("t", 0).directories == ()
    assert image.partition("t", 1).directories == (m, m, u)
    delta = image.delta()
    delta.replay_partition_change(tid, 1, replicas=[3, 4])  # kept 3 keeps UNASSIGNED, 4 is new
    assert delta.apply().partition("t", 1).directories == (u, u)
    for impl in (hindex.apply_topic_stream, index_pure.apply_topic_stream):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(hindex, "apply_topic_stream", impl)
            # the native pass applies a reorder of an all-MIGRATING partition, hands back a new replica
            # (partition 0) and any replica change of a partition with directories (partition 1)
            delta = image.delta()
            run = [("change", "t", tid, 0, NO_LEADER_CHANGE, None, (1, 2), -1),
                   ("change", "t", tid, 0, NO_LEADER_CHANGE, None, (2, 1, 5), -1),
                   ("change", "t", tid, 1, NO_LEADER_CHANGE, None, (3, 4), -1)]
            assert pass_changes(delta, run) == [1, 2]
            after = delta.apply()
            assert after.partition("t", 0).directories == (m, m, u) and after.partition("t", 0).replicas == (2, 1, 5)
            assert after.partition("t", 1).directories == (u, u)


def test_published_images_never_change_and_deltas_copy_only_touched_chunks():
    image = TopicsImage.empty()
    delta = image.delta()
    ids = [uuid.UUID(int=i + 1) for i in range(3 * CHUNK_ROWS // 4)]
    for i, tid in enumerate(ids):
        delta.replay_topic(tid, f"topic-{i}", topic_epoch=i)
        for p in range(4):
            delta.replay_partition(tid, p, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1, leader_epoch=0,
                                   partition_epoch=0)
    first = delta.apply()
    assert first.partition_count == len(ids) * 4 and len(first.partitions.chunks) == 3
    delta = first.delta()
    delta.replay_partition_change(ids[5], 2, leader=2, isr=[2, 3])
    assert delta.partitions.touched_chunks == 1 and delta.topics.touched_chunks == 0
    second = delta.apply()
    assert first.partition("topic-5", 2).isr == (1, 2, 3) and first.partition("topic-5", 2).leader_epoch == 0
    assert second.partition("topic-5", 2).isr == (2, 3) and second.partition("topic-5", 2).leader_epoch == 1
    shared = sum(a is b for a, b in zip(first.partitions.chunks, second.partitions.chunks, strict=True))
    assert shared == 2
    changed = next(i for i, (a, b) in enumerate(zip(first.partitions.chunks, second.partitions.chunks, strict=True))
                   if a is not b)
    # within the changed chunk only the written columns were copied
    same = {n for n, a in first.partitions.chunks[changed].arrays.items()
            if second.partitions.chunks[changed].arrays[n] is a}
    assert {"replicas", "topic_row", "partition_id"} <= same and not same & {"leader", "isr", "leader_epoch"}
    with pytest.raises(ValueError):
        first.partitions.chunks[0].arrays["leader"][0] = 7  # published arrays are read-only


def test_delete_and_recreate_with_the_same_name_gives_a_new_topic_with_a_higher_epoch():
    delta = TopicsImage.empty().delta()
    old, new = uuid.uuid4(), uuid.uuid4()
    delta.replay_topic(old, "orders", topic_epoch=10)
    delta.replay_partition(old, 0, replicas=[1], isr=[1], leader=1, leader_epoch=3, partition_epoch=4)
    image = delta.apply()
    delta = image.delta()
    delta.replay_remove_topic(old)
    delta.replay_topic(new, "orders", topic_epoch=12)
    delta.replay_partition(new, 0, replicas=[2], isr=[2], leader=2, leader_epoch=0, partition_epoch=0)
    after = delta.apply()
    assert after.topic("orders").topic_id == new and after.topic("orders").topic_epoch > image.topic("orders").topic_epoch
    assert after.partition("orders", 0).leader == 2 and after.topic_by_id(old) is None
    assert image.partition("orders", 0).leader == 1  # the old image still answers as it did
    assert delta.changes.deleted_topics == {old: "orders"} and delta.changes.created_topics(after) == {new}
    assert [after.registration(int(r)).topic_id for r in delta.changes.changed_partition_rows(after)] == [new]


def test_replay_errors_name_what_is_wrong():
    delta = TopicsImage.empty().delta()
    with pytest.raises(MetadataReplayError, match="unknown topic id"):
        delta.replay_partition(uuid.uuid4(), 0, replicas=[1], isr=[1], leader=1, leader_epoch=0, partition_epoch=0)
    tid = uuid.uuid4()
    delta.replay_topic(tid, "a", topic_epoch=1)
    with pytest.raises(MetadataReplayError, match="already exists"):
        delta.replay_topic(uuid.uuid4(), "a", topic_epoch=2)
    with pytest.raises(MetadataReplayError, match="unknown partition"):
        delta.replay_partition_change(tid, 3, leader=1)


def test_replaying_the_same_topic_record_again_changes_nothing():
    delta = TopicsImage.empty().delta()
    tid = uuid.uuid4()
    delta.replay_topic(tid, "a", topic_epoch=1)
    image = delta.apply()
    again = image.delta()
    again.replay_topic(tid, "a", topic_epoch=1)
    assert not again.changes


def test_sparse_columns_cost_nothing_until_written():
    spec = [Column("x", np.dtype(np.int32)), Column("s", np.dtype(np.int32), width=2, sparse=True)]
    table = ChunkedTable.from_arrays(spec, {"x": np.arange(3 * CHUNK_ROWS, dtype=np.int32)})
    assert table.nbytes(set()) == 3 * CHUNK_ROWS * 4
    writer = table.writer()
    writer.set_list(5, "s", [7, 8, 9])
    after = writer.freeze()
    assert after.get_list(5, "s") == (7, 8, 9) and after.get_list(6, "s") == () and table.get_list(5, "s") == ()
    # the decoded base array (still shared by every chunk: column "x" was not written, so not copied)
    # + the materialised sparse column of chunk 0
    assert after.nbytes(set()) == 3 * CHUNK_ROWS * 4 + CHUNK_ROWS * 3 * 4


@pytest.mark.parametrize("seed", range(6))
def test_a_table_writer_keeps_every_write_through_appends_widened_lists_and_freezes(seed):
    """Random set_many / set / set_list / append / freeze on a chunked table give what the same
    writes give on plain arrays, and a frozen table never changes afterwards (set_many keeps the
    arrays it wrote by chunk; a widened list, an appended chunk or a freeze must not leave it
    writing into a stale or a published array)."""
    rng = random.Random(seed)
    spec = [Column("x", np.dtype(np.int32)), Column("l", np.dtype(np.int32), width=2),
            Column("s", np.dtype(np.int32), width=1, sparse=True)]
    rows = CHUNK_ROWS * 2 + 5
    model = {"x": np.arange(rows, dtype=np.int32), "l": np.full((rows, 6), -1, np.int32),
             "s": np.full((rows, 6), -1, np.int32)}
    table = ChunkedTable.from_arrays(spec, {"x": model["x"].copy(), "l": model["l"][:, :2].copy()})
    writer, frozen = table.writer(), []
    for _ in range(60):
        op, n = rng.randrange(5), len(model["x"])
        if op == 0:  # set_many, repeated rows included
            picked = np.array([rng.randrange(n) for _ in range(rng.randrange(1, 40))], np.int64)
            name, width = rng.choice([("x", 0), ("l", rng.randrange(1, 4)), ("s", rng.randrange(1, 6))])
            values = np.array([rng.randrange(1000) for _ in range(len(picked) * max(width, 1))], np.int32)
            values = values.reshape((len(picked), width) if width else len(picked))
            writer.set_many(picked, name, values)
            for row, value in zip(picked.tolist(), values, strict=True):
                if width:
                    model[name][row] = -1
                    model[name][row, :width] = value
                else:
                    model[name][row] = value
        elif op == 1:
            row, value = rng.randrange(n), rng.randrange(1000)
            writer.set(row, "x", value)
            model["x"][row] = value
        elif op == 2:  # a list wider than any before in its chunk
            row, values = rng.randrange(n), [rng.randrange(1000) for _ in range(rng.randrange(3, 7))]
            name = rng.choice(["l", "s"])
            writer.set_list(row, name, values)
            model[name][row] = -1
            model[name][row, :len(values)] = values
        elif op == 3:
            count = rng.choice([1, 7, CHUNK_ROWS + 3])
            xs = np.arange(n, n + count, dtype=np.int32)
            writer.append({"x": xs})
            model = {"x": np.concatenate([model["x"], xs]),
                     **{k: np.concatenate([model[k], np.full((count, 6), -1, np.int32)]) for k in ("l", "s")}}
        else:
            frozen.append((writer.freeze(), {k: v.copy() for k, v in model.items()}))
    frozen.append((writer.freeze(), model))
    for table, expected in frozen:
        assert np.array_equal(table.column("x"), expected["x"])
        for name in ("l", "s"):
            got = table.column(name)
            assert np.array_equal(got, expected[name][:, :got.shape[1]]) and (expected[name][:, got.shape[1]:] == -1).all()


@given(st.lists(st.binary(min_size=0, max_size=30), max_size=40))
def test_index_hashes_match_the_twin(names):
    blob = b"".join(names)
    offsets = np.cumsum([0] + [len(n) for n in names]).astype(np.int64)
    assert (hindex.hash_names(blob, offsets) == index_pure.hash_names(blob, offsets)).all()
    for name in names:
        assert hindex.hash_name(name) == index_pure.hash_name(name)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1)), min_size=1,
                max_size=40, unique=True), st.lists(st.integers(0, 60), max_size=30))
def test_id_lookups_match_the_twin_on_strided_queries(ids, picks):
    """lookup_ids finds each known id's row and -1 for others, reading queries given as strided
    views (a column of a decoded [n, 2] table) in place, as the twin does."""
    table = np.array(ids, dtype=np.int64)
    hi, lo = table[:, 0].copy(), table[:, 1].copy()
    index = HashIndex.build(hindex.hash_ids(hi, lo), np.arange(len(ids), dtype=np.int32))
    queries = np.array([ids[k] if k < len(ids) else (k, -k) for k in picks] or [(0, 0)], dtype=np.int64)
    known = {pair: row for row, pair in enumerate(ids)}
    expected = [known.get(tuple(q), -1) for q in queries.tolist()]
    for lookup in (hindex.lookup_ids_raw, index_pure.lookup_ids):
        got = lookup(index.slot_hash, index.slot_row, hi, lo, queries[:, 0], queries[:, 1])
        assert got.tolist() == expected, lookup
    assert index.lookup_ids(hi, lo, queries[:, 0], queries[:, 1]).tolist() == expected


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-128, 127), st.integers(-(2**63), 2**63 - 1),
                          st.lists(st.integers(0, 2**31 - 1), max_size=5)), min_size=1, max_size=30),
       st.booleans())
def test_row_reader_matches_its_twin(rows, shared_default):
    """The native row reader (raw addresses into published chunks) reads what numpy reads."""
    n = len(rows)
    a32 = np.array([r[0] for r in rows], dtype=np.int32)
    a8 = np.array([r[1] for r in rows], dtype=np.int8)
    a64 = np.array([r[2] for r in rows], dtype=np.int64)
    width = max(1, max(len(r[3]) for r in rows))
    lists = np.full((n, width), -1, dtype=np.int32)
    for i, r in enumerate(rows):
        lists[i, : len(r[3])] = r[3]
    default = np.broadcast_to(np.array(-1, dtype=np.int32), (n, 3))
    scalars, list_columns = [a32, a8, a64[::1]], [lists, default if shared_default else lists]
    native_spec = hindex.row_spec(scalars, list_columns)
    pure_spec = index_pure.row_spec(scalars, list_columns)
    for local in range(n):
        expected = (rows[local][0], rows[local][1], rows[local][2], tuple(rows[local][3]),
                    () if shared_default else tuple(rows[local][3]))
        assert hindex.read_row(native_spec, local) == index_pure.read_row(pure_spec, local) == expected


def test_growing_a_topic_that_straddles_chunks_of_different_list_widths_keeps_every_partition():
    """Relocation gathers the topic's rows across chunks whose replica columns differ in width."""
    delta = TopicsImage.empty().delta()
    filler, straddler, last = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    delta.replay_topic(filler, "filler", topic_epoch=1)
    for p in range(CHUNK_ROWS - 2):
        delta.replay_partition(filler, p, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1, leader_epoch=0, partition_epoch=0)
    delta.replay_topic(straddler, "straddler", topic_epoch=2)
    for p in range(4):  # partitions 0-1 in chunk 0, 2-3 in chunk 1
        delta.replay_partition(straddler, p, replicas=[4, 5, 6], isr=[4], leader=4, leader_epoch=p, partition_epoch=p)
    delta.replay_partition_change(straddler, 3, replicas=[1, 2, 3, 4, 5, 6], isr=[1, 2])  # widen chunk 1 only
    delta.replay_topic(last, "last", topic_epoch=3)
    delta.replay_partition(last, 0, replicas=[7], isr=[7], leader=7, leader_epoch=0, partition_epoch=0)
    before = delta.apply()
    grow = before.delta()
    grow.replay_partition(straddler, 4, replicas=[8], isr=[8], leader=8, leader_epoch=0, partition_epoch=0,
                          topic_epoch=9)  # not at the end of the table: the topic moves
    after = grow.apply()
    assert after.partitions_of("straddler")[:4] == [p._replace(topic_epoch=9) for p in before.partitions_of("straddler")]
    assert after.partition("straddler", 3).replicas == (1, 2, 3, 4, 5, 6)
    assert after.partition("straddler", 4).replicas == (8,) and after.topic("straddler").partition_count == 5
    assert after.partition("last", 0).leader == 7 and after.partition_count == CHUNK_ROWS - 2 + 5 + 1


SHIFT = 3  # chunks of 8 rows keep the generated tables small


@st.composite
def chunked_columns(draw):
    """(chunk arrays of one column, rows into them, values for those rows): 1-D of a drawn dtype or
    2-D int32 lists whose width differs from chunk to chunk, some chunks zero-stride broadcasts
    (for gathers), a row list with repeats in any order."""
    lists = draw(st.booleans())
    dtype = np.dtype(np.int32) if lists else np.dtype(draw(st.sampled_from([np.int8, np.int32, np.int64])))
    info = np.iinfo(dtype)
    arrays = []
    for _ in range(draw(st.integers(1, 4))):
        rows = draw(st.integers(1, 1 << SHIFT))
        shape = (rows, draw(st.integers(1, 4))) if lists else (rows,)
        values = draw(st.lists(st.integers(info.min, info.max), min_size=int(np.prod(shape)),
                               max_size=int(np.prod(shape))))
        arrays.append(np.array(values, dtype=dtype).reshape(shape))
    valid = [(k << SHIFT) + local for k, a in enumerate(arrays) for local in range(a.shape[0])]
    rows = np.array(draw(st.lists(st.sampled_from(valid), max_size=20)), dtype=np.int64)
    width = min(a.shape[1] for a in arrays) if lists else 0
    values = np.array(draw(st.lists(st.integers(0, 100), min_size=len(rows) * max(width, 1),
                                    max_size=len(rows) * max(width, 1))), dtype=dtype)
    return arrays, rows, values.reshape((len(rows), width) if lists else (len(rows),))


@settings(max_examples=120, deadline=None)
@given(chunked_columns(), st.booleans())
def test_chunk_gather_and_scatter_match_their_twins(column, broadcast_first):
    """gather_rows / scatter_rows (every chunk in one call) give what the twin's per-chunk numpy
    gives, which is what indexing each chunk by hand gives: narrower list rows -1 padded, of
    repeated rows the last write wins."""
    arrays, rows, values = column
    if broadcast_first:  # an untouched sparse column: a read-only zero-stride view
        arrays[0] = np.broadcast_to(arrays[0][:1], arrays[0].shape)
    lists = values.ndim == 2
    width = max(a.shape[1] for a in arrays) if lists else 0
    got = {}
    for impl in (hindex, index_pure):
        out = np.empty((len(rows), width) if lists else len(rows), dtype=values.dtype)
        impl.gather_rows(arrays, rows, out, SHIFT)
        got[impl] = out
    expected = [np.concatenate([a[r & 7], np.full(width - a.shape[1], -1, a.dtype)]) if lists else a[r & 7]
                for r in rows.tolist() for a in [arrays[r >> SHIFT]]]
    assert np.array_equal(got[hindex], got[index_pure])
    assert np.array_equal(got[hindex], np.array(expected, dtype=values.dtype).reshape(got[hindex].shape))

    written = {}
    for impl in (hindex, index_pure):
        copies = [np.array(a) for a in arrays]  # writable
        impl.scatter_rows(copies, rows, values, SHIFT)
        written[impl] = copies
    by_hand = [np.array(a) for a in arrays]
    for i, r in enumerate(rows.tolist()):
        row = by_hand[r >> SHIFT][r & 7]
        if lists:
            row[:] = -1
            row[: values.shape[1]] = values[i]
        else:
            by_hand[r >> SHIFT][r & 7] = values[i]
    for a, b, c in zip(written[hindex], written[index_pure], by_hand, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a, c)


def _image_of_three_topics() -> tuple[TopicsImage, list[uuid.UUID]]:
    """Topics a (2 partitions, a hole at 1 after an expansion to 3), b (1), c (deleted)."""
    ids = [uuid.UUID(int=21), uuid.UUID(int=22), uuid.UUID(int=23)]
    delta = TopicsImage.empty().delta()
    for tid, name in zip(ids, "abc", strict=True):
        delta.replay_topic(tid, name, topic_epoch=0)
        delta.replay_partition(tid, 0, replicas=[1, 2], isr=[1, 2], leader=1, leader_epoch=0, partition_epoch=0)
    delta.replay_partition(ids[0], 2, replicas=[1, 2], isr=[1], leader=1, leader_epoch=0, partition_epoch=0)
    delta.replay_remove_topic(ids[2])
    return delta.apply(), ids


@pytest.mark.parametrize("impl", [hindex, index_pure], ids=["public", "twin"])
def test_the_change_pass_hands_back_what_it_does_not_apply_whole_and_writes_nothing_of_it(impl):
    """The native pass (and its twin) stops at a record of another type, one the columns hold with
    extras or not at all (its kind_row belongs to another table), an unknown or deleted topic, a
    partition id past the topic's count or in a hole: each is handed back, nothing of it written."""
    image, (a, b, c) = _image_of_three_topics()
    ok = ("change", "a", a, 0, 3, (3,), None, 1)
    bad = [("change", "x", uuid.UUID(int=99), 0, 3, None, None, -1), ("change", "c", c, 0, 3, None, None, -1),
           ("change", "a", a, 3, 3, None, None, -1), ("change", "a", a, 1, 3, None, None, -1),
           ("change", "b", b, -1, 3, None, None, -1)]
    for stopper in [*bad, "extras", "type", "other-table"]:
        run = [ok, stopper if isinstance(stopper, tuple) else ok, ok]
        table, order = change_table(run), np.arange(3, dtype=np.int64)
        api_keys, kind_rows = np.full(3, 5, dtype=np.int16), order.astype(np.int32)
        if stopper == "extras":
            table.extras[1] = True
        elif stopper == "type":
            api_keys[1] = 2  # a TopicRecord
        elif stopper == "other-table":
            table.record_index[1] = 7  # the record's row is in ``other``
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(hindex, "apply_topic_stream", impl.apply_topic_stream)
            delta = image.delta()
            assert stream_pass(delta, table, api_keys, kind_rows, order, 0) == 1, stopper
            assert stream_pass(delta, table, api_keys, kind_rows, order, 2) == 3, stopper
            after = delta.apply()
        assert after.partition("a", 0)._replace(leader=1, leader_epoch=0, partition_epoch=0, isr=(1, 2),
                                                leader_recovery_state=0) == image.partition("a", 0)
        assert (after.partition("a", 0).partition_epoch, after.partition("a", 0).leader_epoch) == (2, 2), stopper
        assert after.partition("b", 0) == image.partition("b", 0) and after.partition("a", 2) == image.partition("a", 2)


@pytest.mark.parametrize("impl", [hindex, index_pure], ids=["public", "twin"])
def test_the_change_pass_copies_only_the_chunks_and_columns_it_writes(impl):
    """Copy on write through the pass's callback: the published image keeps its values, only the
    chunks written are copied, and a leader move copies no ISR array; a list longer than its
    chunk's width widens that chunk."""
    ids = [uuid.UUID(int=i + 1) for i in range(CHUNK_ROWS)]
    delta = TopicsImage.empty().delta()
    for i, tid in enumerate(ids):
        delta.replay_topic(tid, f"t{i}", topic_epoch=i)
        for p in range(2):
            delta.replay_partition(tid, p, replicas=[1, 2], isr=[1, 2], leader=1, leader_epoch=0, partition_epoch=0)
    image = delta.apply()
    assert len(image.partitions.chunks) == 2
    run = [("change", "t5", ids[5], 1, 2, None, None, -1), ("change", "t5", ids[5], 1, NO_LEADER_CHANGE, (2, 1, 4, 5, 6), None, -1)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hindex, "apply_topic_stream", impl.apply_topic_stream)
        delta = image.delta()
        assert pass_changes(delta, run[:1]) == []
        assert delta.partitions.touched_chunks == 1 and delta.topics.touched_chunks == 0
        assert delta.partitions._chunks[0].arrays["isr"] is image.partitions.chunks[0].arrays["isr"]
        assert pass_changes(delta, run[1:]) == []
        after = delta.apply()
    assert image.partition("t5", 1) == image.partition("t5", 0)._replace(partition_id=1)
    assert after.partition("t5", 1).isr == (2, 1, 4, 5, 6) and after.partition("t5", 1).leader == 2
    assert after.partitions.chunks[1] is image.partitions.chunks[1]


@pytest.mark.parametrize("impl", [hindex, index_pure], ids=["public", "twin"])
def test_chunk_gather_and_scatter_refuse_rows_outside_and_read_only_chunks(impl):
    arrays = [np.zeros(8, np.int32), None]
    out = np.empty(1, np.int32)
    with pytest.raises(IndexError, match="row 8"):
        impl.gather_rows(arrays, np.array([8], np.int64), out, SHIFT)
    with pytest.raises(IndexError, match="row 16"):
        impl.gather_rows(arrays, np.array([16], np.int64), out, SHIFT)
    with pytest.raises(ValueError, match="read-only"):
        impl.scatter_rows([np.broadcast_to(np.int32(0), (8,))], np.array([1], np.int64), np.zeros(1, np.int32), SHIFT)
    with pytest.raises(ValueError, match="int64"):
        impl.gather_rows([np.zeros(8, np.int64)], np.array([1], np.int64), out, SHIFT)
    with pytest.raises(ValueError, match="where int32"):  # same kind and size, other byte order
        impl.gather_rows([np.zeros(8, ">i4")], np.array([1], np.int64), out, SHIFT)
    with pytest.raises(ValueError, match="width 3"):
        impl.scatter_rows([np.zeros((8, 2), np.int32)], np.array([1], np.int64), np.zeros((1, 3), np.int32), SHIFT)
