"""`@record` behaves as `@dataclass(frozen=True)` (and `@dataclass` with frozen=False) for
everything stetho's data records use: each case is run on both and must agree."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
from dataclasses import field
from typing import Any

import pytest

from stetho.core.record import record


def _pair(frozen: bool = True) -> tuple[type[Any], type[Any]]:
    """The same class body built by `dataclasses.dataclass` and by `record`."""

    def body() -> type:
        class Point:
            """A point."""

            x: int
            y: int = 2
            tags: list[str] = field(default_factory=list)
            note: str = field(default="n", compare=False, repr=False)
            cache: dict[str, int] = field(default_factory=dict, hash=False)

            def norm(self) -> int:
                return abs(self.x) + abs(self.y)

        return Point

    return dataclasses.dataclass(frozen=frozen)(body()), record(frozen=frozen)(body())


@pytest.mark.parametrize("frozen", [True, False])
def test_construction_equality_repr_and_fields_match_dataclass(frozen: bool) -> None:
    dc, rec = _pair(frozen)
    for args, kwargs in [((1,), {}), ((1, 5), {"note": "z"}), ((), {"x": 3, "tags": ["a"]}),
                         ((1, 2, ["t"], "m", {"k": 1}), {})]:
        a, b = dc(*args, **kwargs), rec(*args, **kwargs)
        assert repr(a).replace("Point", "P") == repr(b).replace("Point", "P")
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert a.norm() == b.norm()
        assert rec(*args, **kwargs) == b and dc(*args, **kwargs) == a
    assert [f.name for f in dataclasses.fields(dc)] == [f.name for f in dataclasses.fields(rec)]
    assert [(f.compare, f.repr, f.hash) for f in dataclasses.fields(dc)] == \
        [(f.compare, f.repr, f.hash) for f in dataclasses.fields(rec)]
    assert dataclasses.is_dataclass(rec(1)) and rec.__match_args__ == dc.__match_args__
    assert rec(1, note="a") == rec(1, note="b")  # compare=False, as dataclass
    assert rec(1) != rec(2) and rec(1).__eq__(object()) is NotImplemented
    assert rec(1).tags is not rec(1).tags  # a fresh default each time
    assert rec.y == 2 and "tags" not in rec.__dict__  # class attributes as dataclass leaves them


@pytest.mark.parametrize("args, kwargs", [((), {}), ((1, 2, [], "n", {}, 9), {}),
                                          ((1,), {"x": 2}), ((1,), {"nope": 1})])
def test_bad_arguments_are_type_errors_as_with_dataclass(args: tuple[Any, ...],
                                                         kwargs: dict[str, Any]) -> None:
    dc, rec = _pair()
    with pytest.raises(TypeError):
        dc(*args, **kwargs)
    with pytest.raises(TypeError):
        rec(*args, **kwargs)


def test_frozen_record_refuses_assignment_and_hashes_by_its_hashed_fields() -> None:
    dc, rec = _pair()
    p = rec(1, tags=())  # a hashable tags value: hashing needs every hashed field hashable
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.x
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.other = 1
    assert hash(p) == hash(rec(1, tags=(), cache={"ignored": 1}))  # hash=False field
    assert hash(p) == hash(dc(1, tags=()))  # the same tuple of fields is hashed
    assert dataclasses.replace(p, x=7) == rec(7, tags=()) and p.x == 1
    assert copy.deepcopy(p) == p and copy.copy(p) == p
    assert pickle.loads(pickle.dumps(Module(1))) == Module(1)  # what xdist workers send


@record
class Module:
    """A record pickle can find by name."""

    value: int


def test_mutable_record_is_assignable_and_unhashable_as_with_dataclass() -> None:
    dc, rec = _pair(frozen=False)
    p = rec(1)
    p.x = 5
    assert p == rec(5)
    assert rec.__hash__ is None and dc.__hash__ is None


def test_nan_fields_compare_as_dataclass_does() -> None:
    """A tuple compares identical members as equal, so a record holding the same NaN object
    equals itself, as a dataclass does."""

    @record
    class V:
        value: float

    nan = math.nan
    assert V(nan) == V(nan)
    assert dataclasses.dataclass(frozen=True)(type("W", (), {"__annotations__":
                                                            {"value": "float"}}))(nan) is not None


def test_inherited_fields_come_first_and_own_methods_stay() -> None:
    @record
    class Base:
        a: int

    @record
    class Child(Base):
        b: int = 0

        def __repr__(self) -> str:
            return "mine"

    c = Child(1, 2)
    assert [f.name for f in dataclasses.fields(c)] == ["a", "b"] and repr(c) == "mine"
    assert c == Child(a=1, b=2) and c != Base(1) and repr(Base(1)).endswith("Base(a=1)")


def test_unsupported_dataclass_features_fail_at_definition() -> None:
    with pytest.raises(TypeError, match="init=False"):
        @record
        class A:
            a: int = field(init=False, default=0)
    with pytest.raises(TypeError, match="__post_init__"):
        @record
        class B:
            a: int

            def __post_init__(self) -> None: ...
    with pytest.raises(TypeError, match="follows default"):
        @record
        class C:
            a: int = 0
            b: int  # type: ignore[misc]
    with pytest.raises(ValueError, match="mutable default"):
        @record
        class D:
            a: list[int] = []  # type: ignore[misc]  # noqa: RUF012


def test_a_class_built_often_gets_a_compiled_init_that_behaves_the_same() -> None:
    """After `_HOT` instances the generic `__init__` is swapped for a compiled one (what a
    dataclass pays per call); defaults, factories and argument errors stay as they were."""
    from stetho.core import record as record_mod

    dc, rec = _pair()
    generic = rec.__init__
    made = [rec(i) for i in range(record_mod._HOT)]
    assert rec.__init__ is not generic and made[-1] == rec(record_mod._HOT - 1)
    for args, kwargs in [((1,), {}), ((1, 5), {"note": "z"}), ((), {"x": 3, "tags": ["a"]}),
                         ((1, 2, ["t"], "m", {"k": 1}), {})]:
        assert dataclasses.asdict(dc(*args, **kwargs)) == dataclasses.asdict(rec(*args, **kwargs))
    assert rec(1).tags is not rec(1).tags and rec(1).tags == []
    for args, kwargs in [((), {}), ((1, 2, [], "n", {}, 9), {}), ((1,), {"x": 2}),
                         ((1,), {"nope": 1})]:
        with pytest.raises(TypeError):
            rec(*args, **kwargs)


@pytest.mark.parametrize("frozen", [True, False])
def test_a_dataclass_subclassing_a_record_takes_its_fields_positionally(frozen: bool) -> None:
    """dataclass reads a base's fields from `__dataclass_fields__` and its frozenness from
    `__dataclass_params__`: both must be what dataclass itself would have left (on 3.10 a
    field whose kw_only was left unset became keyword-only; on 3.12 the params' private
    constructor changed)."""

    @record(frozen=frozen)
    class Base:
        x: int
        y: str = "a"

    @dataclasses.dataclass(frozen=frozen)
    class Sub(Base):
        z: int = 0

    s = Sub(1, "b", 3)
    assert (s.x, s.y, s.z) == (1, "b", 3)
    assert [f.name for f in dataclasses.fields(Sub)] == ["x", "y", "z"]
    assert Base.__dataclass_params__.frozen is frozen  # type: ignore[attr-defined]
