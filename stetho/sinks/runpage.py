"""The run page: one static index.html a person opens from a CI artifact or a file share.

A nodes x checks grid coloured by each cell's worst status, failing nodes first, every node
linked to its diagnosis report; the problems with what to do about them; and the busbw of
every node against the baseline as an inline SVG chart. No external asset, no script: it
works offline, from `file://`, and in a mail client's preview.

The markup is templates/run-page.html.j2 (Jinja2, autoescape on): this module only builds the
view model (rows, cells, colours, bar geometry), so every string that came from a node or a
check is escaped by the template engine, never by hand. Report links are percent-encoded
relative paths, so a hostile name can neither inject markup nor a `javascript:` link. A fleet
of a thousand healthy nodes stays readable: past MAX_HEALTHY_ROWS the healthy nodes are one
counted row, the problem nodes are always shown in full.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stetho.core import hostlist
from stetho.core.resources import shipped
from stetho.results import SEVERITY, Result, counts, format_value
from stetho.sinks import safe
from stetho.sinks.pagestyle import COLOURS as COLOURS  # the names pages and tests read here
from stetho.sinks.pagestyle import MAX_PROBLEMS as MAX_PROBLEMS
from stetho.sinks.pagestyle import ORDER as ORDER
from stetho.sinks.pagestyle import href as href

if TYPE_CHECKING:
    from jinja2 import Environment, Template
    from jinja2.bccache import BytecodeCache

    from stetho.sinks.suite import SuiteSummary
#: Healthy nodes (every check pass or skip) shown one row each at most; more are one row that
#: counts and names them, so the problem nodes are not lost among a thousand green rows.
MAX_HEALTHY_ROWS = 64
#: A node's busbw this far under the baseline is drawn in the fail colour.
DEFAULT_TOLERANCE_PCT = 5.0
TEMPLATE = "run-page.html.j2"
HEALTHY = ("skip", "pass")


@dataclass(frozen=True)
class Busbw:
    """Per-node bus bandwidth for one collective and message size, and the baseline."""

    values: Mapping[str, float]
    baseline: float | None = None
    unit: str = "GB/s"
    label: str = ""
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT


def busbw_from(results: Iterable[Result], subject: str | None = None) -> Busbw | None:
    """The nccl_busbw values of a run: one message size (the given subject, else the largest
    one measured), the median of the results' references as the baseline."""
    rows = [r for r in results if r.check == "nccl_busbw" and isinstance(r.value, (int, float))
            and not isinstance(r.value, bool)]
    if not rows:
        return None
    if subject is None:
        subject = max({r.subject for r in rows}, key=_size_of)
    chosen = [r for r in rows if r.subject == subject]
    if not chosen:
        return None
    import statistics

    refs = [r.reference for r in chosen if r.reference]
    return Busbw({r.node: float(r.value) for r in chosen},
                 statistics.median(refs) if refs else None, chosen[0].unit or "GB/s", subject)


def _size_of(subject: str) -> int:
    """'allreduce@64MiB' -> 64 MiB in bytes (0 when unreadable), to pick the largest size."""
    size = subject.rpartition("@")[2]
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10), ("B", 0)):
        if size.endswith(unit) and size[:-len(unit)].isdigit():
            return int(size[:-len(unit)]) << shift
    return 0


def _worst(statuses: Iterable[str]) -> str:
    return min(statuses, key=lambda s: SEVERITY.get(s, 1))  # unknown reads as error


@cache
def environment(folder: str) -> Environment:
    """HTML templates: autoescape on (every value is escaped unless marked safe, and nothing
    is), StrictUndefined so a typo fails the render instead of dropping a section."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(loader=FileSystemLoader(folder), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(href=href)
    env.globals.update(colours=COLOURS, order=ORDER)
    return env


def template(name: str) -> Template:
    """A shipped HTML template (templates/NAME), as the diagnosis report loads its own,
    compiled once per version of its source (a bytecode cache under the user's own cache
    folder): compiling the run page was a tenth of a 64-node gate's CPU, on every run."""
    env = environment(str(shipped("templates")))
    env.bytecode_cache = _bytecode_cache()
    return env.get_template(name)


def _bytecode_cache() -> BytecodeCache | None:
    """Jinja2's file cache in STETHO_CACHE/jinja (0700: compiled code is loaded from it), or
    none where that folder cannot be made: a page is then compiled as before, never lost."""
    from jinja2 import FileSystemBytecodeCache
    from jinja2.bccache import Bucket

    from stetho import config

    class _Quiet(FileSystemBytecodeCache):
        def dump_bytecode(self, bucket: Bucket) -> None:
            with contextlib.suppress(OSError):
                super().dump_bytecode(bucket)

    folder = config.active().cache / "jinja"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = folder.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            return None  # someone else could plant compiled code there
    except OSError:
        return None
    return _Quiet(str(folder))


# -- the view model ------------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    check: str
    status: str  # the worst of the cell's results, "none" when the node has none
    tip: str = ""


@dataclass(frozen=True)
class Row:
    node: str
    worst: str
    report: str | None  # relative path of its diagnosis report
    cells: list[Cell]


@dataclass(frozen=True)
class Collapsed:
    """The healthy nodes past MAX_HEALTHY_ROWS, as one row."""

    count: int
    names: str  # hostlist-compressed
    statuses: dict[str, int]


@dataclass(frozen=True)
class Grid:
    checks: list[str]
    rows: list[Row]
    collapsed: Collapsed | None


def grid(results: list[Result], reports: Mapping[str, str],
         max_healthy: int | None = None) -> Grid:
    """Rows failing nodes first (worst status, then name); healthy nodes past `max_healthy`
    (default MAX_HEALTHY_ROWS) folded into one counted row."""
    max_healthy = MAX_HEALTHY_ROWS if max_healthy is None else max_healthy
    # A 1,024-node replay has ~230,000 results: each node's worst status comes from the few
    # distinct (node, status) pairs, and only the nodes drawn row by row have their cells kept.
    worst: dict[str, int] = {}
    for node, status in {(r.node, r.status) for r in results}:
        sev = SEVERITY.get(status, 1)  # unknown reads as error
        if sev < worst.get(node, 99):
            worst[node] = sev
    check_list = sorted({r.check for r in results})
    name = {sev: status for status, sev in SEVERITY.items()}
    worst_of = {n: name[s] for n, s in worst.items()}
    nodes = sorted(worst, key=lambda n: (worst[n], n))
    healthy = [n for n in nodes if worst_of[n] in HEALTHY]
    collapsed = None
    if len(healthy) > max_healthy:
        nodes = [n for n in nodes if worst_of[n] not in HEALTHY]
        collapsed = Collapsed(len(healthy), hostlist.compress(healthy),
                              {s: sum(worst_of[n] == s for n in healthy) for s in HEALTHY})
    drawn = set(nodes)
    by_cell: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        if r.node in drawn:
            by_cell.setdefault((r.node, r.check), []).append(r)
    rows = []
    for n in nodes:
        row = []
        for ch in check_list:
            rs = by_cell.get((n, ch))
            if not rs:
                row.append(Cell(ch, "none"))
                continue
            w = _worst(r.status for r in rs)
            row.append(Cell(ch, w, _tip(ch, w, rs)))
        rows.append(Row(n, worst_of[n], reports.get(n), row))
    return Grid(check_list, rows, collapsed)


def _tip(check: str, worst: str, rs: list[Result]) -> str:
    n = {s: 0 for s in ORDER}
    for r in rs:
        n[r.status] = n.get(r.status, 0) + 1
    parts = ", ".join(f"{k} {v}" for k, v in n.items() if v)
    tip = f"{check}: {worst} ({parts})"
    if worst != "pass":
        first = next(r for r in rs if r.status == worst)
        tip += f"\n{first.subject or '-'}: {first.message[:200]}"
    return tip


@dataclass(frozen=True)
class Problem:
    result: Result
    report: str | None
    value: str


def problems(results: list[Result], reports: Mapping[str, str],
             limit: int = MAX_PROBLEMS) -> tuple[list[Problem], int]:
    """The first `limit` fails and errors, fails first, each value with what was expected;
    and how many there are in all."""
    probs = sorted((r for r in results if r.status in ("fail", "error")),
                   key=lambda r: (SEVERITY[r.status], r.node, r.check, r.subject))
    out = []
    for r in probs[:limit]:
        value = format_value(r.value, r.unit)
        if r.expected is not None:
            value = f"{value} (expected {r.expected})" if value else f"expected {r.expected}"
        out.append(Problem(r, reports.get(r.node), value))
    return out, len(probs)


def suite_lists(s: SuiteSummary) -> list[tuple[str, str, Mapping[str, tuple[str, ...]]]]:
    """(data attribute, the words, benchmark -> nodes) for the suite's detail list."""
    return [("regressed", "regressed against its baseline on", s.regressed),
            ("failed", "failed by the tool's own verdict on", s.failed),
            ("unjudged", "could not be judged on", s.unjudged)]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def accuracy_view(acc: Mapping[str, Any]) -> dict[str, Any]:
    """How often each rule's diagnosis was what the technician found (resolved reports): the
    figures of `stetho kb accuracy`, formatted. `resolved` is None when they could not be
    read; 0 shows no figure."""
    since = str(acc["since"])[:10] if acc.get("since") else ""
    if acc.get("error"):
        return {"since": since, "resolved": None, "error": str(acc["error"])}
    n = int(acc.get("resolved", 0))
    rules = list(acc.get("rules", ()))
    return {
        "since": since, "resolved": n, "error": "",
        "no_fault_found": int(acc.get("no_fault_found", 0)),
        "no_fault_found_rate": _pct(acc.get("no_fault_found_rate")),
        "rules": [{"rule": r["rule"], "diagnosed": int(r["diagnosed"]), "found": int(r["found"]),
                   "correct": int(r["correct"]), "precision": _pct(r["precision"]),
                   "recall": _pct(r["recall"]), "no_fault_found": int(r["no_fault_found"])}
                  for r in rules if r["diagnosed"] or r["found"]],
        "unmeasured": ", ".join(r["rule"] for r in rules if not (r["diagnosed"] or r["found"])),
        "confusion": [{"diagnosed": c["diagnosed"], "found": c["found"],
                       "count": int(c["count"])} for c in acc.get("confusion", ())],
    }


@dataclass(frozen=True)
class Bar:
    node: str
    value: float
    x: int
    y: float
    height: float
    status: str  # "fail" under the tolerance, else "pass"


@dataclass(frozen=True)
class Chart:
    busbw: Busbw
    width: int
    height: int
    pad: int
    bar: int
    top: float
    low: float
    bars: list[Bar]
    baseline_y: float | None
    floor: float | None
    floor_y: float | None


def chart(b: Busbw, bar: int = 6, gap: int = 1, height: int = 220, pad: int = 48) -> Chart:
    """Bars per node, lowest first, the baseline and its tolerance as lines."""
    items = sorted(b.values.items(), key=lambda kv: (kv[1], kv[0]))
    floor = b.baseline * (1 - b.tolerance_pct / 100) if b.baseline else None
    marks = [v for _, v in items] + ([b.baseline, floor] if b.baseline and floor else [])
    top = max(marks)
    # The axis starts under the lowest bar, not at 0: a 5% drop must be visible.
    low = max(0.0, min(marks) - 0.1 * (top - min(marks) or abs(top) or 1.0))
    span = (top - low) or 1.0
    width = pad + len(items) * (bar + gap) + 10

    def y(v: float) -> float:
        return round(10 + height * (1 - (min(max(v, low), top) - low) / span), 1)

    bars = []
    for i, (node, v) in enumerate(items):
        top_y = y(v)
        bars.append(Bar(node, v, pad + i * (bar + gap), top_y, round(10 + height - top_y, 1),
                        "fail" if floor is not None and v < floor else "pass"))
    return Chart(b, width, height, pad, bar, top, low, bars,
                 y(b.baseline) if b.baseline else None, floor,
                 y(floor) if floor is not None else None)


def render(results: Iterable[Result], *, title: str, reports: Mapping[str, str] | None = None,
           busbw: Busbw | None = None, generated_at: str | None = None,
           suite: SuiteSummary | None = None,
           accuracy: Mapping[str, Any] | None = None,
           reliability: Mapping[str, Any] | None = None,
           replay: Mapping[str, Any] | None = None) -> str:
    """The page; where a result (or the title) holds what a page cannot be written with (a
    lone surrogate, a huge integer), it is rendered through stetho.sinks.safe."""
    rs = list(results)
    args = (reports, busbw, generated_at, suite, accuracy, reliability, replay)
    try:
        out = _render(rs, title, *args)
        if safe.encodable(out):
            return out
    except safe.WRITE_ERRORS:
        pass
    return _render(safe.results(rs), safe.text(title), *args)


def _render(results: list[Result], title: str, reports: Mapping[str, str] | None,
            busbw: Busbw | None, generated_at: str | None, suite: SuiteSummary | None,
            accuracy: Mapping[str, Any] | None, reliability: Mapping[str, Any] | None,
            replay: Mapping[str, Any] | None) -> str:
    """The page for one run. `reports` maps node -> relative path of its diagnosis report;
    `suite`: the benchmark suite's night (a sweep with --bench), shown above the grid;
    `accuracy` is the knowledge base's rule accuracy (stetho.publish.accuracy.measure's data,
    or {"error": why} when it could not be read); `reliability` the fleet's figures as
    `stetho stats` words them ({"header": [...], "lines": [(figure, text)]} or {"error": why});
    `replay`: a gate replay's figures (stetho.sinks.replay_page.view).
    """
    reports = reports or {}
    g = grid(results, reports)
    shown, total = problems(results, reports)
    bad = sum(1 for r in g.rows if r.worst in ("fail", "error"))
    return template(TEMPLATE).render(
        title=title, generated_at=generated_at or "", grid=g, counts=counts(results),
        nodes=len(g.rows) + (g.collapsed.count if g.collapsed else 0), bad_nodes=bad,
        results=len(results), suite=suite, suite_lists=suite_lists(suite) if suite else [],
        chart=chart(busbw) if busbw is not None and busbw.values else None,
        problems=shown, problems_total=total,
        accuracy=accuracy_view(accuracy) if accuracy is not None else None,
        reliability=reliability, replay=replay)


def relative_reports(paths: Mapping[str, str | os.PathLike[str]], folder: str |
                     os.PathLike[str]) -> dict[str, str]:
    """node -> report path relative to the run folder that holds index.html (what `render`
    links), from the paths `stetho.diagnosis.runs.diagnose_results` wrote."""
    return {node: Path(os.path.relpath(p, folder)).as_posix() for node, p in paths.items()}


def write(folder: str | os.PathLike[str], text: str) -> Path:
    """Write `folder/index.html` atomically (a reader never sees half a page)."""
    from stetho.sinks.prometheus import write as atomic_write

    return atomic_write(Path(folder) / "index.html", text)
