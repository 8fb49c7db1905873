"""Proves raft/types.py fast_frozen_init changes nothing but speed: every class it decorates builds, with any
arguments (positional, by name, defaults left out), the same value the dataclass-generated __init__ builds,
keeps its signature, and stays frozen."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlog.raft import messages, ready
from kraftlog.raft.types import fast_frozen_init

DECORATED = sorted({c for module in (messages, ready) for c in vars(module).values()
                    if isinstance(c, type) and "__dataclass_init__" in c.__dict__}, key=lambda c: c.__name__)
VALUES = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.tuples(st.integers()))


def test_the_commit_path_s_values_are_decorated():
    assert {c.__name__ for c in DECORATED} >= {"FetchRequest", "FetchResponse", "Envelope", "Ready", "CommitRun"}


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(DECORATED), st.data())
def test_a_decorated_class_builds_what_its_dataclass_init_builds(cls, data):
    fields = dataclasses.fields(cls)
    values = data.draw(st.lists(VALUES, min_size=len(fields), max_size=len(fields)))
    required = sum(f.default is dataclasses.MISSING for f in fields)
    n = data.draw(st.integers(required, len(fields)))  # the rest left to their defaults
    by_name = data.draw(st.booleans())
    args, kwargs = (), {}
    if by_name:
        kwargs = {f.name: v for f, v in zip(fields[:n], values, strict=False)}
    else:
        args = tuple(values[:n])
    fast = cls(*args, **kwargs)
    reference = object.__new__(cls)
    cls.__dataclass_init__(reference, *args, **kwargs)
    assert fast == reference and repr(fast) == repr(reference)
    assert [getattr(fast, f.name) for f in fields] == [getattr(reference, f.name) for f in fields]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(fast, fields[0].name, 1)


@pytest.mark.parametrize("cls", DECORATED, ids=lambda c: c.__name__)
def test_a_decorated_class_keeps_its_signature_and_refuses_what_the_dataclass_refuses(cls):
    assert inspect.signature(cls.__init__) == inspect.signature(cls.__dataclass_init__)
    with pytest.raises(TypeError):
        cls(*range(len(dataclasses.fields(cls)) + 1))  # one argument too many
    with pytest.raises(TypeError):
        cls(no_such_field=1)


def test_classes_it_cannot_speak_for_are_refused():
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: list = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(slots=True)
    class NotFrozen:
        a: int

    for cls in (NoSlots, Factory, NotFrozen):
        with pytest.raises(TypeError):
            fast_frozen_init(cls)
