"""sim.model.direct_init: the plan IR's cheaper __init__ makes the same values as a dataclass's own."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from sim.model.direct_init import direct_init
from sim.model.plan import BufferRef, Tile, Transfer, buffer_ref, c_strides, parse_buffer_ref


@dataclasses.dataclass(frozen=True)
class _Plain:
    a: int
    b: tuple[int, ...]
    c: str | None = None


@direct_init
@dataclasses.dataclass(frozen=True)
class _Direct:
    a: int
    b: tuple[int, ...]
    c: str | None = None


def test_same_values_as_the_dataclass_init() -> None:
    for args, kwargs in (((1, (2,)), {}), ((1, (2,), "x"), {}), ((), {"a": 3, "b": (), "c": None}),
                         ((4,), {"b": (5, 6)})):
        plain, direct = _Plain(*args, **kwargs), _Direct(*args, **kwargs)
        assert dataclasses.astuple(plain) == dataclasses.astuple(direct)
        assert repr(direct) == repr(plain).replace("_Plain", "_Direct")
    assert _Direct(1, (2,)) == _Direct(1, (2,)) and hash(_Direct(1, (2,))) == hash(_Direct(1, (2,)))
    assert _Direct(1, (2,)) != _Direct(1, (3,))


def test_missing_and_extra_arguments_are_refused_as_before() -> None:
    with pytest.raises(TypeError):
        _Direct(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Direct(1, (2,), "x", 4)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Direct(1, (2,), d=4)  # type: ignore[call-arg]


def test_still_frozen_replaceable_and_picklable() -> None:
    t = Transfer(0x1000, 0x2000, (3, 4), 4, (64, 4), (16, 4))
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.src = 0  # type: ignore[misc]
    moved = dataclasses.replace(t, src=0x1100)
    assert moved.src == 0x1100 and moved.shape == (3, 4) and moved.sync is None
    assert pickle.loads(pickle.dumps(t)) == t
    assert Tile(0, (), None, ()) == Tile(0, (), None, (), 0, (), ())


def test_classes_it_would_change_are_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Post:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True)
    class Factory:
        a: list = dataclasses.field(default_factory=list)

    @dataclasses.dataclass
    class Mutable:
        a: int

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class KwOnly:
        a: int

    for cls in (Post, Factory, Mutable, KwOnly):
        with pytest.raises(TypeError, match="direct_init"):
            direct_init(cls)


def test_block_strides_and_buffer_refs() -> None:
    # The 2-D shortcut of c_strides gives what the general rule gives (a 0-wide row still steps one element).
    for shape, itemsize in (((3, 4), 4), ((3, 0), 4), ((1, 7), 2), ((2, 3, 4), 2), ((5,), 1)):
        rule, step = [], itemsize
        for n in reversed(shape):
            rule.append(step)
            step *= max(n, 1)
        assert c_strides(shape, itemsize) == tuple(reversed(rule))
    assert Transfer.block(0, 64, (2, 3), 4, (48, 4)) == Transfer(0, 64, (2, 3), 4, (48, 4), (12, 4))
    assert parse_buffer_ref(buffer_ref("am.b0.1", 3)) == ("am.b0.1", 3) == parse_buffer_ref("am.b0.1@3")
    with pytest.raises(ValueError):
        parse_buffer_ref(BufferRef("", 2))  # a malformed typed reference: its string form says why
    with pytest.raises(ValueError):
        parse_buffer_ref(BufferRef("x", -1))
