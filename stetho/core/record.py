"""`@record`: a dataclass without the cost of building one at import.

`dataclasses.dataclass` writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__` and,
frozen, `__setattr__`/`__delattr__` as source text and compiles it with exec() when the module
is imported: six compilations a class, ~125 classes on a node's `stetho check`, a fifth of its
CPU before one probe ran. `record` builds the same class from shared methods, so nothing is
compiled at import (only the `__init__` of a class built many times in a run, once, when it
is: see `_HOT`); what a caller sees is a dataclass: `dataclasses.fields`, `replace`, `asdict` and
`is_dataclass` work (the class carries `__dataclass_fields__`), equality, hashing, `repr` and
frozenness behave as `@dataclass(frozen=True)` (or `@dataclass` with `frozen=False`), and type
checkers read it as one (`dataclass_transform`). Fields take `dataclasses.field(...)`.

It covers what stetho's data records use: defaults, `default_factory`, `compare`, `hash`,
`repr`, and inheriting fields from another record or dataclass. Not `init=False`, `kw_only`,
`InitVar` or `__post_init__` (they raise TypeError at import), nor `order` or `slots`: a
class that needs one uses `dataclasses.dataclass`.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:  # typing has it from 3.11; a type checker always knows typing_extensions
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_: object) -> Callable[[Any], Any]:
        """Only a type checker reads it."""
        return lambda f: f

_T = TypeVar("_T", bound=type)
_MISSING = dataclasses.MISSING
#: The marker `dataclasses.fields()` keeps a Field by (it drops ClassVar and InitVar pseudo-fields).
_FIELD_MARK = dataclasses._FIELD  # type: ignore[attr-defined]
#: The parameters `dataclasses` itself keeps on a class (a dataclass subclassing a record checks
#: the base's `frozen` there), taken from two empty dataclasses: `_DataclassParams`'s own
#: constructor is private and grew four arguments in Python 3.12.
_PARAMS: dict[bool, Any] = {frozen: vars(dataclasses.dataclass(frozen=frozen)(
    type("_P", (), {})))["__dataclass_params__"] for frozen in (True, False)}


@overload
def record(cls: _T, /) -> _T: ...


@overload
def record(*, frozen: bool = True) -> Callable[[_T], _T]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: Any = None, /, *, frozen: bool = True) -> Any:
    """`@record` (frozen) or `@record(frozen=False)`: the class as `@dataclass` would make it."""
    if cls is None:
        return lambda c: _build(c, frozen)
    return _build(cls, frozen)


def _fields_of(cls: type) -> dict[str, dataclasses.Field[Any]]:
    """The class's fields in dataclass order (the bases' first), each a real `Field`."""
    out: dict[str, dataclasses.Field[Any]] = {}
    for base in reversed(cls.__mro__[1:]):
        out.update(base.__dict__.get("__dataclass_fields__", {}))
    for name, kind in cls.__dict__.get("__annotations__", {}).items():
        text = kind if isinstance(kind, str) else getattr(kind, "__name__", "")
        if text.startswith(("ClassVar", "typing.ClassVar", "InitVar", "dataclasses.InitVar")):
            raise TypeError(f"{cls.__qualname__}.{name}: @record has no ClassVar/InitVar; "
                            "use dataclasses.dataclass")
        value = cls.__dict__.get(name, _MISSING)
        if isinstance(value, dataclasses.Field):
            f = value
            if not f.init or f.kw_only is True:
                raise TypeError(f"{cls.__qualname__}.{name}: @record has no init=False or "
                                "kw_only; use dataclasses.dataclass")
            if f.default is _MISSING:
                delattr(cls, name)  # as dataclass: a factory's field leaves no class attribute
            else:
                setattr(cls, name, f.default)
        else:
            f = dataclasses.field(default=value)
        if f.default is not _MISSING and f.default.__class__.__hash__ is None:
            raise ValueError(f"mutable default {type(f.default)} for field {name} is not "
                             "allowed: use default_factory")
        f.name, f.type, f._field_type = name, kind, _FIELD_MARK  # type: ignore[attr-defined]
        f.kw_only = False  # dataclass fills it in; the MISSING it starts with is truthy
        out[name] = f
    return out


#: Instances of a class after which its `__init__` is compiled: a class built thousands of times
#: a run (a history's readings) then pays what a dataclass pays a call, and one built a few times
#: (most) never pays for a compilation.
_HOT = 64


def _compiled_init(cls: type, names: tuple[str, ...], defaults: dict[str, Any],
                   factories: dict[str, Callable[[], Any]]) -> Callable[..., None]:
    """The `__init__` dataclass would write, with each field's parameter, compiled once: the
    instance's fields set as one dict."""
    scope: dict[str, Any] = {"__rec_missing__": _MISSING}
    params, body = [], []
    for i, n in enumerate(names):
        if n in defaults:
            scope[f"__rec_default_{i}__"] = defaults[n]
            params.append(f"{n}=__rec_default_{i}__")
        elif n in factories:
            scope[f"__rec_factory_{i}__"] = factories[n]
            params.append(f"{n}=__rec_missing__")
            body.append(f" if {n} is __rec_missing__: {n} = __rec_factory_{i}__()")
        else:
            params.append(n)
    fill = ", ".join(f"{n!r}: {n}" for n in names)
    source = (f"def __init__(__rec_self__, {', '.join(params)}):\n" + "\n".join(body)
              + f"\n __rec_self__.__dict__.update({{{fill}}})\n")
    exec(source, scope)  # noqa: S102  # names are the class's own annotated identifiers
    init: Callable[..., None] = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The named attributes as a tuple, which is what dataclass compares and hashes (a tuple
    compares identical members as equal, NaN included)."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:
        only = names[0]
        return lambda obj: (getattr(obj, only),)
    return lambda obj: ()


def _build(cls: _T, frozen: bool) -> _T:
    """Attach the fields and the shared methods; nothing compiled."""
    for hook in ("__post_init__",):
        if hook in cls.__dict__:
            raise TypeError(f"{cls.__qualname__}: @record has no {hook}; use "
                            "dataclasses.dataclass")
    fields = _fields_of(cls)
    names = tuple(fields)
    required = frozenset(n for n, f in fields.items()
                         if f.default is _MISSING and f.default_factory is _MISSING)
    seen_default = False
    for n in names:  # dataclass's rule: the order is the signature's
        if n in required and seen_default:
            raise TypeError(f"non-default argument {n!r} follows default argument")
        seen_default = seen_default or n not in required
    defaults = {n: f.default for n, f in fields.items() if f.default is not _MISSING}
    factories = {n: f.default_factory for n, f in fields.items()
                 if f.default_factory is not _MISSING}
    compared = _getter(tuple(n for n, f in fields.items() if f.compare))
    hashed = _getter(tuple(n for n, f in fields.items()
                           if (f.compare if f.hash is None else f.hash)))
    shown = tuple(n for n, f in fields.items() if f.repr)
    nameset = frozenset(names)
    count = len(names)
    positional = [frozenset(names[:k]) for k in range(count + 1)]  # the names k args fill
    klass: type[Any] = cls

    calls = 0

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == _HOT and cls.__dict__.get("__init__") is __init__:
            cls.__init__ = _compiled_init(cls, names, defaults, factories)  # type: ignore[misc]
        values = self.__dict__  # a fresh instance's: filled in place, each check in C
        values.update(defaults)
        if args:
            if len(args) > count:
                raise TypeError(f"{cls.__qualname__}() takes {count} positional arguments "
                                f"but {len(args)} were given")
            values.update(zip(names, args, strict=False))  # fewer args than fields
        if kwargs:
            if not nameset.issuperset(kwargs):
                raise TypeError(f"{cls.__qualname__}() got an unexpected keyword argument "
                                f"{sorted(kwargs.keys() - nameset)[0]!r}")
            if args and not positional[len(args)].isdisjoint(kwargs):
                raise TypeError(f"{cls.__qualname__}() got multiple values for argument "
                                f"{sorted(positional[len(args)] & kwargs.keys())[0]!r}")
            values.update(kwargs)
        if factories:
            for n, make in factories.items():
                if n not in values:
                    values[n] = make()
        if len(values) < count:
            missing = [n for n in names if n not in values]
            raise TypeError(f"{cls.__qualname__}() missing required argument(s): "
                            f"{', '.join(map(repr, missing))}")

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in shown)
        return f"{type(self).__qualname__}({inner})"

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return bool(compared(self) == compared(other))

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

    def __setattr__(self: Any, name: str, value: object) -> None:
        if type(self) is cls or name in nameset:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(klass, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in nameset:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(klass, self).__delattr__(name)

    methods: dict[str, Any] = {"__init__": __init__, "__repr__": reprlib.recursive_repr()(
        __repr__), "__eq__": __eq__}
    if frozen:
        methods.update(__hash__=__hash__, __setattr__=__setattr__, __delattr__=__delattr__)
    else:
        methods["__hash__"] = None  # as dataclass: eq without frozen is unhashable
    own_hash = cls.__dict__.get("__hash__", _MISSING)
    if own_hash is not _MISSING and not (own_hash is None and "__eq__" in cls.__dict__):
        del methods["__hash__"]  # a class's own __hash__ stays, as with dataclass
    for name, method in methods.items():
        if name in cls.__dict__ and name != "__hash__":
            continue  # the class's own method stays, as with dataclass
        if method is not None:
            method.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, method)
    cls.__dataclass_fields__ = fields  # type: ignore[attr-defined]
    cls.__dataclass_params__ = _PARAMS[frozen]  # type: ignore[attr-defined]
    cls.__match_args__ = names  # type: ignore[attr-defined,misc]
    return cls
