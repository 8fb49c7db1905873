"""distinct_ids (engine/image/topics.py): the directory ids of a bulk creation interned without a
sort while they are few, by a sort past FEW_DISTINCT_IDS; either way the same answer as
np.unique over 16-byte rows, in order of first appearance."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.engine.image.topics import FEW_DISTINCT_IDS, distinct_ids


def _check(ids: np.ndarray) -> None:
    distinct, which = distinct_ids(ids)
    assert distinct.dtype == np.uint8 and distinct.shape[1:] == (16,)
    assert which.shape == (len(ids),)
    assert (distinct[which] == ids).all()  # every row maps to its own value
    keys = {bytes(row) for row in ids}
    assert len(distinct) == len(keys) == len({bytes(row) for row in distinct})  # each value once
    if len(keys) <= FEW_DISTINCT_IDS:  # the comparing path keeps first appearance order
        firsts = list(dict.fromkeys(bytes(row) for row in ids))
        assert [bytes(row) for row in distinct] == firsts


@settings(max_examples=200, deadline=None)
@given(pool=st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=3 * FEW_DISTINCT_IDS, unique=True),
       picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=400))
def test_distinct_ids_equal_a_sorting_unique(pool, picks):
    ids = np.frombuffer(b"".join(pool[k % len(pool)] for k in picks), np.uint8).reshape(-1, 16).copy()
    _check(ids)


def test_ids_that_differ_in_one_half_only_are_told_apart():
    """Two ids sharing their first (or last) 8 bytes are different ids."""
    a, b, c = bytes(16), bytes(8) + b"\x01" + bytes(7), b"\x01" + bytes(15)
    ids = np.frombuffer(a + b + c + a + c + b, np.uint8).reshape(-1, 16).copy()
    distinct, which = distinct_ids(ids)
    assert [bytes(r) for r in distinct] == [a, b, c] and which.tolist() == [0, 1, 2, 0, 2, 1]


def test_many_distinct_ids_take_the_sort():
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 256, size=(FEW_DISTINCT_IDS * 4, 16), dtype=np.uint8)
    _check(np.concatenate([ids, ids[::-1]]))
