"""Load and validate benchmark definitions (`benchmarks/*.yml`), one benchmark per file.

Every mistake is a ConfigError naming the file and line: an unknown key, an unknown parser, a
direction other than higher/lower, a metric field the parser's output type does not have, a
command that is not an argv list, an unknown suite, need or placeholder. Metric fields are
checked against the parser's *types* at load time (so a typo fails before any node runs the
benchmark) and read from the parsed result at run time with `Metric.extract`.

A field is a path over the parser's result: attributes and method calls with literal arguments,
e.g. `read_iops`, `busbw(8589934592)`, `row(8).oop_time_us`, `testcase("host_to_device_memcpy_ce")
.sum`. The value must be a number in the parser's unit; `scale` converts it to the metric's
`unit` (GB/s to B/s is 1.0e9). A None on the way (size not run, N/A) gives None, never 0.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from functools import cache
from pathlib import Path

from stetho.benchmarks.fieldpath import (
    Step,
    check_path,
    extract,
    output_type,
    parse_path,
    parser_module,
    parser_names,
)
from stetho.core import yamlconf
from stetho.errors import ConfigError

SUITES = ("quick", "nightly", "acceptance")  # acceptance runs every benchmark
DIRECTIONS = ("higher", "lower")
PER = ("node", "hca", "gpu")
NEEDS = ("gpu", "ib", "idle", "root", "peer")  # plus "tool:<executable>"
UNITS = ("B/s", "bit/s", "s", "op/s", "flop/s", "count", "B", "ratio")
PLACEHOLDERS = {
    "tmpdir": "a fresh empty directory on the node, shared by the repeats, removed after them",
    "runtime_s": "how long a timed benchmark runs, in seconds",
    "peer": "address of the other node (the server side of a client/server benchmark)",
    "port": "a free TCP port for the server side",
    "device": "the subject of one run: the HCA name (per: hca) or GPU index (per: gpu)",
    "gpus": "number of GPUs on the node",
}
KEYS = {"name", "description", "command", "server", "parser", "metrics", "repeats", "timeout_s",
        "needs", "invasive", "suites", "per", "defaults"}
METRIC_KEYS = {"name", "field", "unit", "direction", "scale", "description"}
_NAME_CHARS = set(string.ascii_lowercase + string.digits + "_-.")
_PKG = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Metric:
    name: str
    field: str  # the path as written
    unit: str
    direction: str  # "higher" or "lower" is better
    scale: float = 1.0
    description: str = ""
    steps: tuple[Step, ...] = ()

    def extract(self, parsed: object) -> float | None:
        """The metric's value in `unit` from a parser's result; None where the path meets None."""
        obj = extract(self.steps, parsed)
        if obj is None:
            return None
        if isinstance(obj, bool) or not isinstance(obj, (int, float)):
            raise TypeError(f"metric {self.name}: {self.field} gave {type(obj).__name__}, "
                            "not a number")
        return float(obj) * self.scale


@dataclass(frozen=True)
class Benchmark:
    """One benchmark definition, as loaded from `source`."""

    name: str
    description: str
    command: tuple[str, ...]
    parser: str
    metrics: tuple[Metric, ...]
    repeats: int
    timeout_s: float
    needs: tuple[str, ...]
    invasive: bool
    suites: tuple[str, ...]
    per: str = "node"
    server: tuple[str, ...] | None = None
    defaults: tuple[tuple[str, str], ...] = ()
    source: str = ""
    placeholders: frozenset[str] = dc_field(default_factory=frozenset)

    def in_suite(self, suite: str) -> bool:
        return suite == "acceptance" or suite in self.suites

    @property
    def tools(self) -> tuple[str, ...]:
        """Executables the node must have (from `tool:` needs)."""
        return tuple(n.split(":", 1)[1] for n in self.needs if n.startswith("tool:"))

    def metric(self, name: str) -> Metric:
        return next(m for m in self.metrics if m.name == name)

    def argv(self, values: Mapping[str, object] | None = None) -> tuple[str, ...]:
        """The command with its placeholders filled from `values`, then `defaults`."""
        return self._render(self.command, values or {})

    def server_argv(self, values: Mapping[str, object] | None = None) -> tuple[str, ...] | None:
        return None if self.server is None else self._render(self.server, values or {})

    def parse(self, text: str | bytes) -> object:
        """Run this benchmark's parser over a tool's output (ParseError on unreadable text)."""
        return parser_module(self.parser).parse(text)

    def measure(self, parsed: object) -> dict[str, float | None]:
        return {m.name: m.extract(parsed) for m in self.metrics}

    def _render(self, argv: tuple[str, ...], values: Mapping[str, object]) -> tuple[str, ...]:
        merged: dict[str, object] = dict(self.defaults)
        merged.update(values)
        wanted = {name for item in argv for _, name, _, _ in string.Formatter().parse(item) if name}
        missing = sorted(wanted - merged.keys())
        if missing:
            raise ConfigError(f"{self.source}: benchmark {self.name} needs a value for "
                              f"{', '.join('{' + m + '}' for m in missing)}")
        return tuple(item.format_map(merged) for item in argv)


# -- loading ------------------------------------------------------------------------------------


def shipped_dir() -> Path:
    """The benchmarks stetho ships: in the wheel, or at the top of a checkout."""
    for candidate in (_PKG / "_bundled" / "benchmarks", _PKG.parent / "benchmarks"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"stetho is installed without its benchmarks/ folder "
                            f"(looked in {_PKG / '_bundled'} and {_PKG.parent})")


def load_all(extra_dirs: Iterable[Path] = (), include_shipped: bool = True
             ) -> dict[str, Benchmark]:
    """Shipped benchmarks plus every `*.yml` in the folders a site names. Names are unique."""
    dirs = ([shipped_dir()] if include_shipped else []) + [Path(d) for d in extra_dirs]
    out: dict[str, Benchmark] = {}
    for d in dirs:
        if not d.is_dir():
            raise ConfigError(f"{d}: benchmark folder does not exist")
        for bench in load_dir(d):
            if bench.name in out:
                raise ConfigError(f"{bench.source}: benchmark {bench.name!r} is already defined "
                                  f"in {out[bench.name].source}")
            out[bench.name] = bench
    return out


@cache
def load_all_cached(extra_dirs: tuple[Path, ...] = ()) -> dict[str, Benchmark]:
    """`load_all` once per process and set of folders: the runner and the checks of one run
    read the same definitions without parsing and type-checking them twice."""
    return load_all(extra_dirs)


def load_dir(folder: Path) -> tuple[Benchmark, ...]:
    return tuple(load_file(p) for p in sorted(folder.glob("*.yml")) + sorted(folder.glob("*.yaml")))


def select(benchmarks: Iterable[Benchmark], suite: str) -> tuple[Benchmark, ...]:
    if suite not in SUITES:
        raise ConfigError(f"unknown suite {suite!r} (known: {', '.join(SUITES)})")
    return tuple(b for b in benchmarks if b.in_suite(suite))


def load_file(path: Path) -> Benchmark:
    return _build(yamlconf.load(path))


def loads(text: str, file: str = "<benchmark>") -> Benchmark:
    return _build(yamlconf.loads(text, file))


def _build(doc: yamlconf.Doc) -> Benchmark:
    if not isinstance(doc.data, dict):
        raise ConfigError(f"{doc.file}:1: a benchmark file must be a mapping")
    sec = yamlconf.Section(doc)
    sec.check_unknown(KEYS)
    name = sec.require("name", str)
    if not set(name) <= _NAME_CHARS or not name[:1].isalnum():
        sec.fail(f"name {name!r} must be lowercase letters, digits, '-', '_' or '.'", "name")
    parser = sec.require("parser", str)
    try:
        out_type = output_type(parser)
    except KeyError:
        raise ConfigError(f"{sec.where('parser')}: unknown parser {parser!r} "
                          f"(known: {', '.join(parser_names())})") from None
    except TypeError as exc:
        raise ConfigError(f"{sec.where('parser')}: {exc}") from None
    command = _argv(sec, "command", required=True) or ()
    server = _argv(sec, "server", required=False)
    used = _placeholders(sec, "command", command) | _placeholders(sec, "server", server or ())
    metrics = _metrics(sec, out_type)
    repeats = sec.require("repeats", int)
    if repeats < 1:
        sec.fail(f"repeats must be at least 1, got {repeats}", "repeats")
    timeout = sec.require("timeout_s", float)
    if timeout <= 0:
        sec.fail(f"timeout_s must be positive, got {timeout}", "timeout_s")
    needs = sec.str_list("needs")
    for i, need in enumerate(needs):
        if need not in NEEDS and not (need.startswith("tool:") and len(need) > 5):
            raise ConfigError(f"{doc.where(('needs', i))}: unknown need {need!r} (known: "
                              f"{', '.join(NEEDS)}, tool:<executable>)")
    invasive = sec.require("invasive", bool)
    suites = sec.str_list("suites")
    if not suites:
        sec.fail("suites must name at least one of " + ", ".join(SUITES), "suites")
    for i, suite in enumerate(suites):
        if suite not in SUITES:
            raise ConfigError(f"{doc.where(('suites', i))}: unknown suite {suite!r} (known: "
                              f"{', '.join(SUITES)})")
    per = sec.get("per", str, "node")
    if per not in PER:
        sec.fail(f"per must be one of {', '.join(PER)}, got {per!r}", "per")
    defaults = _defaults(sec, used)
    bench = Benchmark(
        name=name, description=sec.get("description", str, ""), command=command,
        parser=parser, metrics=metrics, repeats=repeats, timeout_s=timeout, needs=needs,
        invasive=invasive, suites=suites, per=per, server=server, defaults=defaults,
        source=doc.file, placeholders=frozenset(used),
    )
    _consistent(bench, sec)
    return bench


def _consistent(b: Benchmark, sec: yamlconf.Section) -> None:
    """Rules that keep a definition safe to run: see benchmarks/README.md."""
    if b.invasive and "idle" not in b.needs:
        sec.fail("an invasive benchmark must need 'idle' (it would disturb a running job)",
                 "invasive")
    if "quick" in b.suites and (b.invasive or "idle" in b.needs):
        sec.fail("the quick suite runs beside jobs: an invasive or idle-only benchmark cannot "
                 "be in it", "suites")
    if b.per != "node" and "device" not in b.placeholders:
        sec.fail(f"per: {b.per} runs once per {b.per}: the command must use {{device}}", "per")
    if b.per == "hca" and "ib" not in b.needs:
        sec.fail("per: hca needs 'ib'", "needs")
    if b.per == "gpu" and "gpu" not in b.needs:
        sec.fail("per: gpu needs 'gpu'", "needs")
    if ("peer" in b.placeholders or b.server is not None) and "peer" not in b.needs:
        sec.fail("a benchmark with a server or a {peer} must need 'peer'", "needs")
    if b.server is not None and "peer" not in b.placeholders:
        sec.fail("with a server, the command must connect to {peer}", "server")
    exe = b.command[0].rsplit("/", 1)[-1]
    if exe not in b.tools:
        sec.fail(f"needs must list 'tool:{exe}' (the command runs {exe})", "needs")


def _argv(sec: yamlconf.Section, key: str, required: bool) -> tuple[str, ...] | None:
    if not sec.has(key) and not required:
        return None
    raw = sec.require(key, list) if required else sec.get(key, list)
    if not raw:
        sec.fail(f"{key} must be a non-empty argv list", key)
    for i, item in enumerate(raw):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise ConfigError(f"{sec.doc.where((key, i))}: {key}[{i}] must be a string "
                              f"(one argv element, no shell), got {item!r}")
    argv = tuple(str(item) for item in raw)
    if not argv[0].strip() or " " in argv[0]:
        sec.fail(f"{key}[0] must be the executable alone, got {argv[0]!r} (argv, no shell)", key)
    return argv


def _placeholders(sec: yamlconf.Section, key: str, argv: tuple[str, ...]) -> set[str]:
    used: set[str] = set()
    for i, item in enumerate(argv):
        where = sec.doc.where((key, i))
        try:
            parts = list(string.Formatter().parse(item))
        except ValueError as exc:
            raise ConfigError(f"{where}: bad braces in {item!r}: {exc} (write {{{{ for a "
                              "literal brace)") from None
        for _, name, spec, conv in parts:
            if name is None:
                continue
            if name not in PLACEHOLDERS or spec or conv:
                raise ConfigError(f"{where}: unknown placeholder {{{name}}} in {item!r} "
                                  f"(known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)})")
            used.add(name)
    return used


def _defaults(sec: yamlconf.Section, used: set[str]) -> tuple[tuple[str, str], ...]:
    if not sec.has("defaults"):
        return ()
    d = sec.section("defaults")
    out = []
    for key, value in d.data.items():
        if key not in used:
            d.fail(f"default for {{{key}}}, which the command does not use", key)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            d.fail(f"default for {{{key}}} must be a string or number, got {value!r}", key)
        out.append((key, str(value)))
    return tuple(out)


def _metrics(sec: yamlconf.Section, out_type: type) -> tuple[Metric, ...]:
    raw = sec.require("metrics", list)
    if not raw:
        sec.fail("metrics must list at least one metric", "metrics")
    out: list[Metric] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ConfigError(f"{sec.doc.where(('metrics', i))}: metrics[{i}] must be a mapping")
        m = yamlconf.Section(sec.doc, ("metrics", i), item)
        m.check_unknown(METRIC_KEYS)
        name = m.require("name", str)
        if not name.isidentifier() or name != name.lower():
            m.fail(f"metric name {name!r} must be a lowercase identifier", "name")
        if any(x.name == name for x in out):
            m.fail(f"duplicate metric name {name!r}", "name")
        direction = m.require("direction", str)
        if direction not in DIRECTIONS:
            m.fail(f"direction must be 'higher' or 'lower' (which is better), got {direction!r}",
                   "direction")
        unit = m.require("unit", str)
        if unit not in UNITS:
            m.fail(f"unknown unit {unit!r} (known: {', '.join(UNITS)})", "unit")
        scale = _number(m, "scale", 1.0)
        if scale <= 0:
            m.fail(f"scale must be positive, got {scale}", "scale")
        path = m.require("field", str)
        try:
            steps = parse_path(path)
            check_path(out_type, steps)
        except ValueError as exc:
            raise ConfigError(f"{m.where('field')}: metric {name}: field {path!r}: {exc}") from None
        out.append(Metric(name=name, field=path, unit=unit, direction=direction, scale=scale,
                          description=m.get("description", str, ""), steps=steps))
    return tuple(out)


def _number(m: yamlconf.Section, key: str, default: float) -> float:
    """A number; also "1.0e9", which YAML 1.1 reads as a string (it wants "1.0e+9")."""
    value = m.get(key, (float, str), default)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            m.fail(f"{key} must be a number, got {value!r}", key)
    return float(value)
