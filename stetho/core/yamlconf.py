"""YAML configuration with line numbers, so a bad profile or policy names its file and line.

`load(path)` returns a `Doc`: plain Python data plus the line of every mapping key and sequence
item. `Section` walks it with typed getters that raise ConfigError("file:line: ...").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from stetho.core import yamlcache
from stetho.core.record import record
from stetho.errors import ConfigError

if TYPE_CHECKING:
    import yaml

T = TypeVar("T")
Path_ = tuple[str | int, ...]


@record(frozen=False)
class Doc:
    file: str
    data: Any
    lines: dict[Path_, int]
    files: dict[Path_, str] | None = None  # per-path file, for documents merged from several

    def line(self, path: Path_) -> int:
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path, 1)

    def where(self, path: Path_) -> str:
        while path and path not in self.lines:
            path = path[:-1]
        file = (self.files or {}).get(path, self.file)
        return f"{file}:{self.lines.get(path, 1)}"


def merge(docs: list[Doc], sections: tuple[str, ...]) -> Doc:
    """Merge documents section by section (later documents override keys of earlier ones),
    keeping for every key the file and line it came from."""
    data: dict[str, Any] = {}
    lines: dict[Path_, int] = {}
    files: dict[Path_, str] = {}
    for doc in docs:
        for key, value in doc.data.items():
            if key in sections and isinstance(value, dict):
                data.setdefault(key, {}).update(value)
            else:
                data[key] = value
        for path, line in doc.lines.items():
            if path and (path[0] not in sections or len(path) > 1):
                lines[path] = line
                files[path] = doc.file
            elif path and path not in lines:
                lines[path] = line
                files[path] = doc.file
    return Doc(docs[-1].file, data, lines, files)


#: Largest configuration file read (a profile or policy is a few KiB): more is refused, never
#: read into memory.
MAX_BYTES = 4 * 2**20
#: Most values one document may expand to, aliases counted each time they are used: a
#: billion-laughs alias bomb is a few hundred bytes that expand to billions.
MAX_VALUES = 200_000
#: Deepest nesting of mappings and sequences.
MAX_DEPTH = 64


def _read_bounded(path: Path, refused: str) -> bytes:
    """The file's bytes, or ConfigError when it cannot be read or is over MAX_BYTES (read no
    further than that: a huge file is never loaded into memory)."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_BYTES // 2**20} MiB; {refused}")
    return raw


def load(path: Path) -> Doc:
    """A configuration file (a profile, a policy, rules) as a Doc. A text parsed before comes
    from the parse cache (stetho.core.yamlcache: no PyYAML import on a node's check)."""
    raw = _read_bounded(path, "not read as configuration")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    version = _VERSION or _version()
    hit, kept = yamlcache.get("yamlconf", version, text)
    if hit and isinstance(kept, list) and len(kept) == 2 and isinstance(kept[1], list):
        try:
            return Doc(str(path), kept[0], {tuple(p): int(n) for p, n in kept[1]})
        except (TypeError, ValueError):
            pass  # not an entry this module wrote: parsed below
    doc = loads(text, str(path))
    yamlcache.put("yamlconf", version, text, [doc.data, [[list(p), n] for p, n in
                                                         doc.lines.items()]])
    return doc


def loads(text: str, file: str) -> Doc:
    """Parse YAML text into a Doc, or ConfigError naming `file` (and the line where there is
    one): invalid YAML, too large, nested too deep, or expanding to too many values."""
    if len(text) > MAX_BYTES:
        raise ConfigError(f"{file}: larger than {MAX_BYTES // 2**20} MiB; not read as "
                          "configuration")
    return _parse(text, file)


_VERSION = ""


def _version() -> str:
    """This module's and PyYAML's identity in the parse cache's keys: an edited converter or
    an upgraded PyYAML is a new key (PyYAML is found, not imported)."""
    import importlib.util

    global _VERSION
    spec = importlib.util.find_spec("yaml")
    _VERSION = (f"{yamlcache.source_version(__file__)}/"
                f"{yamlcache.source_version(spec.origin if spec and spec.origin else '')}")
    return _VERSION


def _loader() -> Any:
    import yaml

    try:  # the C loader is ~10x faster; fall back where PyYAML was built without libyaml
        return yaml.CSafeLoader
    except AttributeError:  # pragma: no cover
        return yaml.SafeLoader


def _parse(text: str, file: str) -> Doc:
    global yaml  # imported here, once: _convert (recursive, per value) reads the module's name
    import yaml

    try:
        node = yaml.compose(text, Loader=_loader())
    except RecursionError:
        raise ConfigError(f"{file}: nested deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "context_mark", None) or getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        end = getattr(exc, "problem_mark", None)
        where = f" (at line {end.line + 1})" if end is not None and end.line + 1 != line else ""
        raise ConfigError(f"{file}:{line}: invalid YAML: "
                          f"{context + ': ' if context else ''}{problem}{where}") from None
    lines: dict[Path_, int] = {}
    budget = [MAX_VALUES]
    data = (_convert(node, (), lines, file, yaml.SafeLoader(""), budget)
            if node is not None else {})
    return Doc(file, data, lines)


def load_plain(text: str, kind: str) -> Any:
    """yaml.safe_load (libyaml's loader) of a table stetho ships (the Xid and SXid catalogs),
    through the parse cache; ValueError with PyYAML's message where it is no YAML."""
    version = _VERSION or _version()
    hit, kept = yamlcache.get(f"plain:{kind}", version, text)
    if hit:
        return kept
    import yaml

    try:
        data = yaml.load(text, Loader=_loader())
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from None
    yamlcache.put(f"plain:{kind}", version, text, data)
    return data


def check_bounds(path: Path) -> None:
    """ConfigError where a YAML file another tool reads (an Ansible inventory) is over
    MAX_BYTES, nested over MAX_DEPTH or expands past MAX_VALUES: composed only, so its own
    tags (`!vault`) stay the other tool's business."""
    import yaml

    raw = _read_bounded(path, "not read")
    try:
        root = yaml.compose(raw.decode("utf-8", "replace"), Loader=_loader())
    except RecursionError:
        raise ConfigError(f"{path}: nested deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError:
        return  # not YAML (an INI inventory): the tool says what it makes of it
    todo: list[tuple[yaml.Node, int]] = [(root, 0)] if root is not None else []
    budget = MAX_VALUES
    while todo:
        node, depth = todo.pop()
        budget -= 1
        if budget < 0:
            raise ConfigError(f"{path}: expands to more than {MAX_VALUES} values (aliases "
                              "repeating aliases?); not read")
        if depth > MAX_DEPTH:
            raise ConfigError(f"{path}:{node.start_mark.line + 1}: nested deeper than "
                              f"{MAX_DEPTH} levels")
        if isinstance(node, yaml.MappingNode):
            todo.extend((n, depth + 1) for kv in node.value for n in kv)
        elif isinstance(node, yaml.SequenceNode):
            todo.extend((n, depth + 1) for n in node.value)


def safe_load(text: str, file: str) -> Any:
    """yaml.safe_load with this module's bounds (size, depth, alias expansion): for YAML
    from outside (a report's front matter from a repository), as plain data."""
    return loads(text, file).data if text.strip() else None


def _convert(node: yaml.Node, path: Path_, lines: dict[Path_, int], file: str,
             ctor: yaml.SafeLoader, budget: list[int]) -> Any:
    """Plain data from a composed node; `budget` counts the values left to expand (an alias
    is expanded at every use, so it counts every time). Called by _parse, which imports
    PyYAML as this module's `yaml`."""
    budget[0] -= 1
    if budget[0] < 0:
        raise ConfigError(f"{file}: expands to more than {MAX_VALUES} values (aliases "
                          "repeating aliases?); not read as configuration")
    if len(path) > MAX_DEPTH:
        raise ConfigError(f"{file}:{node.start_mark.line + 1}: nested deeper than "
                          f"{MAX_DEPTH} levels")
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise ConfigError(f"{file}:{k.start_mark.line + 1}: a key must be a plain "
                                  "value, not a mapping or list")
            try:
                key = str(ctor.construct_object(k, deep=True))
            except (yaml.YAMLError, ValueError) as exc:
                raise ConfigError(f"{file}:{k.start_mark.line + 1}: invalid key: {exc}"
                                  ) from None
            if key in out:
                raise ConfigError(f"{file}:{k.start_mark.line + 1}: duplicate key {key!r}")
            lines[path + (key,)] = k.start_mark.line + 1
            out[key] = _convert(v, path + (key,), lines, file, ctor, budget)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(v, path + (i,), lines, file, ctor, budget)
                for i, v in enumerate(node.value)]
    try:
        return ctor.construct_object(node, deep=True)
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an int of 4300+ digits
        raise ConfigError(f"{file}:{node.start_mark.line + 1}: invalid value: {exc}") from None


class Section:
    """A mapping inside a Doc, with getters that check types and name file:line on error."""

    def __init__(self, doc: Doc, path: Path_ = (), data: Any = None) -> None:
        self.doc = doc
        self.path = path
        self.data = doc.data if data is None and not path else data
        if self.data is None:
            self.data = {}
        if not isinstance(self.data, dict):
            self.fail(f"expected a mapping, got {type(self.data).__name__}")
        self._used: set[str] = set()

    def where(self, key: str | None = None) -> str:
        path = self.path + ((key,) if key is not None else ())
        return self.doc.where(path)

    def fail(self, msg: str, key: str | None = None) -> None:
        raise ConfigError(f"{self.where(key)}: {msg}")

    def has(self, key: str) -> bool:
        return key in self.data

    def get(self, key: str, kind: type[T] | tuple[type, ...], default: Any = None, *,
            within: tuple[float | None, float | None] | None = None,
            above: float | None = None) -> Any:
        """The value, of `kind`. `within=(lo, hi)`: a number in [lo, hi] (None: open);
        `above`: a number strictly greater. Out of range names file:line and the range."""
        value = self._get(key, kind, default)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return value
        lo, hi = within or (None, None)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            span = (f"between {lo:g} and {hi:g}" if lo is not None and hi is not None
                    else f"at least {lo:g}" if lo is not None else f"at most {hi:g}")
            self.fail(f"{self._name(key)} must be {span}, not {value:g}", key)
        if above is not None and value <= above:
            self.fail(f"{self._name(key)} must be more than {above:g}, not {value:g}", key)
        return value

    def _get(self, key: str, kind: type[T] | tuple[type, ...], default: Any = None) -> Any:
        self._used.add(key)
        if key not in self.data or self.data[key] is None:
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and bool not in kinds:
            self.fail(f"{self._name(key)} must be {_kind_name(kinds)}, got {value!r}", key)
        if not isinstance(value, kinds):
            self.fail(f"{self._name(key)} must be {_kind_name(kinds)}, got {value!r}", key)
        return value

    def require(self, key: str, kind: type[T] | tuple[type, ...]) -> Any:
        if key not in self.data or self.data[key] is None:
            self.fail(f"missing required key {self._name(key)}")
        return self.get(key, kind)

    def section(self, key: str) -> Section:
        self._used.add(key)
        return Section(self.doc, self.path + (key,), self.data.get(key) or {})

    def str_list(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        value = self.get(key, (list, str), None)
        if value is None:
            return default
        if isinstance(value, str):
            return (value,)
        for i, item in enumerate(value):
            if not isinstance(item, (str, int, float)) or isinstance(item, bool):
                raise ConfigError(f"{self.doc.where(self.path + (key, i))}: "
                                  f"{self._name(key)}[{i}] must be a string, got {item!r}")
        return tuple(str(v) for v in value)

    def check_unknown(self, allowed: set[str] | None = None) -> None:
        """Unknown keys are errors: a typo in a threshold must not silently disable it."""
        known = allowed if allowed is not None else self._used
        for key in self.data:
            if key not in known:
                self.fail(f"unknown key {self._name(key)} (known: {', '.join(sorted(known))})",
                          key)

    def _name(self, key: str) -> str:
        return ".".join(str(p) for p in self.path + (key,))


def _kind_name(kinds: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false",
             list: "a list", dict: "a mapping"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def find_named(name: str, dirs: list[Path], what: str, hint: str = "") -> Path:
    """A YAML file by path (`x.yml`, `dir/x`), or by name in the first folder of `dirs` that
    has `<name>.yml` (or `.yaml`): site folders come before the shipped one. An unknown name
    is a ConfigError listing the known ones."""
    if name.endswith((".yml", ".yaml")) or os.sep in name:
        path = Path(name)
        if not path.is_file():
            raise ConfigError(f"{what} file {name} does not exist")
        return path
    for d in dirs:
        for ext in (".yml", ".yaml"):
            p = d / f"{name}{ext}"
            if p.is_file():
                return p
    known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.y*ml")})
    raise ConfigError(f"unknown {what} {name!r} (known: {', '.join(known) or 'none'})"
                      + (f"; {hint}" if hint else ""))
