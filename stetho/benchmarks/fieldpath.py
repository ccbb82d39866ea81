"""Metric field paths over a parser's result: parse them, check them against types, read them.

A path is attributes and method calls with literal arguments (`row(8).oop_time_us`). It is
checked at load time against the parser's type hints (dataclass fields, properties, methods and
their signatures), so a typo in a benchmark file is an error naming the file and line, not a
None on every node; at run time `extract` walks the same steps over the parsed object.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import types
import typing
from dataclasses import dataclass, fields, is_dataclass
from functools import cache
from typing import Any

import stetho.parsers


@dataclass(frozen=True)
class Step:
    """One step of a metric field path: an attribute, or a call when `args` is not None."""

    name: str
    args: tuple[int | float | str, ...] | None = None


def extract(steps: tuple[Step, ...], parsed: object) -> object:
    """Walk the steps over a parsed result; None as soon as a step gives None."""
    obj: Any = parsed
    for step in steps:
        if obj is None:
            return None
        obj = getattr(obj, step.name)
        if step.args is not None:
            obj = obj(*step.args)
    return obj


def parser_names() -> tuple[str, ...]:
    return tuple(sorted(m.name for m in pkgutil.iter_modules(stetho.parsers.__path__)
                        if not m.name.startswith("_")))


@cache
def parser_module(name: str) -> types.ModuleType:
    if name not in parser_names():
        raise KeyError(name)
    return importlib.import_module(f"stetho.parsers.{name}")


def output_type(parser: str) -> type:
    """The dataclass a parser's `parse` returns (KeyError: no such parser; TypeError: not one
    typed result)."""
    module = parser_module(parser)
    fn = getattr(module, "parse", None)
    try:
        out = typing.get_type_hints(fn).get("return") if callable(fn) else None
    except (NameError, TypeError):  # annotations that do not resolve at run time
        out = None
    if not (isinstance(out, type) and is_dataclass(out)):
        raise TypeError(f"parser {parser!r} has no parse(text) returning one typed result")
    return out


def parse_path(text: str) -> tuple[Step, ...]:
    """`row(8).oop_time_us` -> (Step("row", (8,)), Step("oop_time_us"))."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ValueError("not a field path (name, name.name, name(1).name, ...)") from None
    steps: list[Step] = []
    while True:
        call: tuple[int | float | str, ...] | None = None
        target = node
        if isinstance(node, ast.Call):
            call, target = _literal_args(node), node.func
        if isinstance(target, ast.Attribute):
            steps.append(Step(target.attr, call))
            node = target.value
        elif isinstance(target, ast.Name):
            steps.append(Step(target.id, call))
            return tuple(reversed(steps))
        else:
            raise ValueError("only attributes and calls with literal arguments are allowed")


def _literal_args(node: ast.Call) -> tuple[int | float | str, ...]:
    out: list[int | float | str] = []
    for arg in node.args:
        value = arg.value if isinstance(arg, ast.Constant) else None
        if node.keywords or isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError("call arguments must be literal numbers or strings")
        out.append(value)
    return tuple(out)


def check_path(root: type, steps: tuple[Step, ...]) -> None:
    current: Any = root
    for i, step in enumerate(steps):
        if not (isinstance(current, type) and is_dataclass(current)):
            raise ValueError(f"{'.'.join(s.name for s in steps[:i])} is "
                             f"{_type_name(current)}, which has no fields")
        current = _optional_free(_member_type(current, step))
    if current not in (int, float):
        raise ValueError(f"gives {_type_name(current)}, not a number")


def _member_type(cls: type, step: Step) -> Any:
    names = {f.name for f in fields(cls)}
    if step.name in names:
        if step.args is not None:
            raise ValueError(f"{cls.__name__}.{step.name} is a field, not a method")
        return typing.get_type_hints(cls)[step.name]
    attr = inspect.getattr_static(cls, step.name, None)
    if isinstance(attr, property) and attr.fget is not None:
        if step.args is not None:
            raise ValueError(f"{cls.__name__}.{step.name} is a property, not a method")
        return typing.get_type_hints(attr.fget).get("return")
    if inspect.isfunction(attr):
        if step.args is None:
            raise ValueError(f"{cls.__name__}.{step.name} is a method: call it, e.g. "
                             f"{step.name}(...)")
        hints = typing.get_type_hints(attr)
        try:
            bound = inspect.signature(attr).bind(None, *step.args)
        except TypeError as exc:
            raise ValueError(f"{cls.__name__}.{step.name}{step.args}: {exc}") from None
        for pname, value in list(bound.arguments.items())[1:]:
            want = _optional_free(hints.get(pname, Any))
            if want is float and isinstance(value, int):
                continue
            if want in (int, float, str) and not isinstance(value, want):
                raise ValueError(f"{cls.__name__}.{step.name}: {pname} must be "
                                 f"{want.__name__}, got {value!r}")
        return hints.get("return")
    public = sorted(n for n in names | {n for n, v in vars(cls).items()
                                        if isinstance(v, property) or inspect.isfunction(v)}
                    if not n.startswith("_"))
    raise ValueError(f"{cls.__name__} has no field {step.name!r} (has: {', '.join(public)})")


def _optional_free(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
        if set(args) == {int, float}:
            return float
    return tp


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp)
