"""Results as node_exporter textfile metrics, so the fleet's health sits beside dcgm-exporter.

`render()` is pure (results -> text); `write()` puts the text where node_exporter's textfile
collector reads it, atomically, so a scrape never sees half a file. The metric names and labels
are what `stetho.gate.promrules` and `contrib/grafana/` query:

- `stetho_check_status{command,node,check,subject}`: 0 pass, 1 warn, 2 fail, 3 error, 4 skip.
- `stetho_check_value{command,node,check,subject,metric,unit}`: the numeric measured value, in
  base units (GB/s -> bytes_per_second, MHz -> hertz, % -> ratio, C -> celsius); counts keep
  their number and name the counted thing in `metric` with an empty `unit`.
- `stetho_check_threshold{...,kind}`: the numbers the value is judged against: `reference` (the
  baseline), `expected`, `threshold`, in the value's units.
- `stetho_run_timestamp_seconds`, `stetho_run_duration_seconds`, `stetho_build_info{version}`.
- `stetho_gate_blocked{command,policy,mode,node}`: 1 blocked, 0 go; `mode` is `enforce`, or
  `shadow` for a policy evaluated beside the gate and never acted on (stetho.gate.shadow).
- `stetho_bench_value{command,node,benchmark,metric,unit}`: benchmark figures, in base units.
- `stetho kb accuracy` (`render_accuracy`): `stetho_kb_rule_precision{command,rule}`,
  `stetho_kb_rule_recall`, `stetho_kb_rule_diagnosed`, `stetho_kb_rule_found`,
  `stetho_kb_confusion{command,diagnosed,found}`, `stetho_kb_no_fault_found_ratio`,
  `stetho_kb_resolved_reports`, `stetho_kb_accuracy_since_seconds`.

Label values come from the check code, the profile or the node's name, never from messages or
run ids, so the number of series stays bounded. `command` (check, sweep, gate, bench) keeps
the files of two commands in one textfile folder apart: node_exporter drops a series that two
files both carry ("collected before with the same name and label values").
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from stetho import __version__
from stetho.results import SEVERITY, Result
from stetho.sinks import safe

#: The value of stetho_check_status for each status. Anything else is reported as error.
STATUS_CODES = {"pass": 0, "warn": 1, "fail": 2, "error": 3, "skip": 4}
_STATUS_TEXT = {status: str(code) for status, code in STATUS_CODES.items()}
BenchMetric = tuple[str, str, str, str | None, float]  # node, benchmark, metric, unit, value

_HELP = {
    "stetho_check_status": ("Outcome of a stetho check on one subject: 0 pass, 1 warn, 2 fail, "
                            "3 error (could not evaluate), 4 skip (not applicable)."),
    "stetho_check_value": ("Numeric value a stetho check measured, in the base unit named by "
                           "the unit label (empty for counts)."),
    "stetho_check_threshold": ("Number a stetho check judged its value against (kind: "
                               "reference baseline, expected, threshold), in the value's unit."),
    "stetho_run_timestamp_seconds": "Unix time the stetho run that wrote this file started.",
    "stetho_run_duration_seconds": "Wall time of the stetho run that wrote this file.",
    "stetho_build_info": "The stetho version that wrote this file (always 1).",
    "stetho_gate_blocked": "Whether a stetho gate policy blocks the node: 1 blocked, 0 go.",
    "stetho_bench_value": "A stetho benchmark figure, in the base unit named by the unit label.",
    "stetho_kb_resolved_reports": ("Resolved diagnosis reports in the knowledge base dated in "
                                   "the accuracy window."),
    "stetho_kb_accuracy_since_seconds": "Unix time the accuracy window starts (0: all reports).",
    "stetho_kb_no_fault_found_ratio": ("Share of resolved reports where the technician found "
                                       "no fault."),
    "stetho_kb_rule_precision": ("Of the resolved reports diagnosed as the rule's cause, the "
                                 "share whose technician found that cause."),
    "stetho_kb_rule_recall": ("Of the resolved reports where the technician found the rule's "
                              "cause, the share diagnosed as it."),
    "stetho_kb_rule_diagnosed": "Resolved reports diagnosed as the rule's cause.",
    "stetho_kb_rule_found": "Resolved reports where the technician found the rule's cause.",
    "stetho_kb_confusion": ("Resolved reports diagnosed as one cause where the technician "
                            "found another (or no-fault-found)."),
}

#: A physical unit -> (base unit label, factor to the base unit, the quantity it measures).
_UNITS: dict[str, tuple[str, float, str]] = {
    "C": ("celsius", 1.0, "temperature"), "°C": ("celsius", 1.0, "temperature"),
    "celsius": ("celsius", 1.0, "temperature"),
    "Hz": ("hertz", 1.0, "frequency"), "kHz": ("hertz", 1e3, "frequency"),
    "MHz": ("hertz", 1e6, "frequency"), "GHz": ("hertz", 1e9, "frequency"),
    "B/s": ("bytes_per_second", 1.0, "bandwidth"),
    "KB/s": ("bytes_per_second", 1e3, "bandwidth"),
    "MB/s": ("bytes_per_second", 1e6, "bandwidth"),
    "GB/s": ("bytes_per_second", 1e9, "bandwidth"),
    "KiB/s": ("bytes_per_second", 1024.0, "bandwidth"),
    "MiB/s": ("bytes_per_second", 1024.0 ** 2, "bandwidth"),
    "GiB/s": ("bytes_per_second", 1024.0 ** 3, "bandwidth"),
    "Mb/s": ("bytes_per_second", 1e6 / 8, "bandwidth"),
    "Gb/s": ("bytes_per_second", 1e9 / 8, "bandwidth"),
    "Mbit/s": ("bytes_per_second", 1e6 / 8, "bandwidth"),
    "Gbit/s": ("bytes_per_second", 1e9 / 8, "bandwidth"),
    "B": ("bytes", 1.0, "size"), "KiB": ("bytes", 1024.0, "size"),
    "MiB": ("bytes", 1024.0 ** 2, "size"), "GiB": ("bytes", 1024.0 ** 3, "size"),
    "s": ("seconds", 1.0, "duration"), "ms": ("seconds", 1e-3, "duration"),
    "us": ("seconds", 1e-6, "duration"), "µs": ("seconds", 1e-6, "duration"),
    "ns": ("seconds", 1e-9, "duration"),
    "%": ("ratio", 0.01, "percent"), "BER": ("ratio", 1.0, "bit_error_ratio"),
    "W": ("watts", 1.0, "power"), "V": ("volts", 1.0, "voltage"), "J": ("joules", 1.0, "energy"),
    "per day": ("per_second", 1 / 86400, "rate"), "/day": ("per_second", 1 / 86400, "rate"),
}
#: "fail at 87 C", ">= 378.1 GB/s (-5%)", "< 1e-07", "398 GB/s (baseline)": a number in text.
_NUMBER_TEXT = re.compile(
    r"\s*(?:fail at|warn at|<=|>=|≤|≥|<|>|=|~)?\s*"
    r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^()]*?)\s*(?:\(.*\))?\s*")


class Unit:
    """What a result's unit text means in Prometheus terms (cached per distinct text)."""

    __slots__ = ("label", "scale", "metric", "physical", "labels")

    def __init__(self, label: str, scale: float, metric: str, physical: str) -> None:
        self.label, self.scale, self.metric, self.physical = label, scale, metric, physical
        self.labels = f',metric="{metric}",unit="{label}"'  # as render() writes them


@lru_cache(maxsize=4096)
def unit_of(text: str | None) -> Unit:
    """'GB/s avg busbw' -> bytes_per_second x 1e9, metric avg_busbw; 'links up' -> a count:
    metric links_up, unit ''; None -> metric value."""
    if not text or not text.strip():
        return Unit("", 1.0, "value", "")
    text = text.strip()
    if text in _UNITS:
        label, scale, quantity = _UNITS[text]
        return Unit(label, scale, quantity, text)
    head, _, rest = text.partition(" ")
    if head in _UNITS:
        label, scale, quantity = _UNITS[head]
        return Unit(label, scale, snake(rest) or quantity, head)
    return Unit("", 1.0, snake(text) or "value", "")


@lru_cache(maxsize=4096)
def snake(text: str) -> str:
    """A label value safe to read and to aggregate on: lower_snake_case, at most 64 chars."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:64]


@lru_cache(maxsize=65536)
def escape(value: str) -> str:
    """A label value in the text format: backslash, double quote and newline escaped."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a mis-decoded name: keep the file valid
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def number(value: Any) -> float | int | None:
    """A measured value as a number, or None when it is not one (N/A stays unknown)."""
    t = type(value)
    if t is int or t is float:
        return value  # type: ignore[no-any-return]
    if t is bool:
        return int(value)
    if isinstance(value, (int, float)):  # subclasses, e.g. numpy.float64
        return float(value)
    return None


_INF = float("inf")


def _fmt(x: float | int) -> str:
    """A sample value: ints as ints, floats as the shortest text that reads back the same."""
    if type(x) is int:
        # beyond 64 bits as a float, which readers parse (float() overflows past ~1e308: the
        # render then goes through stetho.sinks.safe)
        return str(x) if -(2 ** 63) <= x < 2 ** 63 else _fmt(float(x))
    if x != x:
        return "NaN"
    if x == _INF or x == -_INF:
        return "+Inf" if x > 0 else "-Inf"
    if float(x).is_integer() and -1e15 < x < 1e15:
        return str(int(x))
    return f"{x:.15g}"  # 15 digits: 321.3 GB/s * 1e9 reads 321300000000, not ...99994


def number_in(value: Any, unit: Unit) -> float | int | None:
    """A numeric expectation or threshold: a number, or text that holds one number in the
    value's own unit (else None: '±15 MHz' or 'SymbolErrorCounter<=10' are not one number)."""
    n = number(value)
    if n is not None or type(value) is not str:
        return n
    return _number_text(value, unit.physical)


@lru_cache(maxsize=16384)
def _number_text(text: str, physical: str) -> float | None:
    m = _NUMBER_TEXT.fullmatch(text)
    if m is None or (m.group(2) and m.group(2) != physical):
        return None
    return float(m.group(1))


def _started(started_at: float | datetime) -> float:
    return started_at.timestamp() if isinstance(started_at, datetime) else float(started_at)


def _limit_ends(ref: Any, exp: Any, thr: Any, u: Unit) -> list[str]:
    """The end of each stetho_check_threshold line for a result's limits: the kind label and
    the number in the value's base unit. A fleet shares its profile's limits, so render()
    computes these once per distinct limits, not once per node."""
    out = []
    for kind, raw in (("reference", ref), ("expected", exp), ("threshold", thr)):
        if raw is None:
            continue
        t = number_in(raw, u)
        if t is not None:
            out.append(f',kind="{kind}"}} {_fmt(t if u.scale == 1.0 else t * u.scale)}')
    return out


def render(results: Iterable[Result], *, run_id: str, started_at: float | datetime,
           duration_s: float, gate: Mapping[str, Mapping[str, bool]] | None = None,
           bench: Sequence[BenchMetric] | None = None, command: str = "check",
           gate_modes: Mapping[str, str] | None = None) -> str:
    """The textfile for one run. `gate` maps policy -> {node: blocked} (`gate_modes`: policy
    -> enforce|shadow, enforce where absent); `bench` lists (node, benchmark, metric, unit,
    value). Two results for one node, check and subject keep
    the worse (node_exporter refuses a series twice); an unknown status reads as error. A
    result the text format cannot hold (an integer no float holds, a value that cannot be
    printed) is written through stetho.sinks.safe, the others as they are."""
    rs = results if isinstance(results, list) else list(results)
    try:
        out = _render(rs, run_id, started_at, duration_s, gate, bench, command, gate_modes)
        if safe.encodable(out):
            return out
    except safe.WRITE_ERRORS:
        pass
    return _render(safe.results(rs), run_id, started_at, duration_s, gate, bench, command,
                   gate_modes)


def _render(rs: list[Result], run_id: str, started_at: float | datetime, duration_s: float,
            gate: Mapping[str, Mapping[str, bool]] | None, bench: Sequence[BenchMetric] | None,
            command: str, gate_modes: Mapping[str, str] | None) -> str:
    cmd = f'command="{escape(command)}"'
    status_lines: list[str] = []
    value_lines: list[str] = []
    limit_lines: list[str] = []
    worst = {(r.node, r.check, r.subject): r for r in rs}
    if len(worst) != len(rs):  # a node, check and subject twice: keep the worse
        worst, rank = {}, SEVERITY.get
        for r in rs:
            seen = worst.setdefault((r.node, r.check, r.subject), r)
            if seen is not r and rank(r.status, -1) < rank(seen.status, -1):
                worst[(r.node, r.check, r.subject)] = r
    # A fleet repeats its nodes and its (check, subject) pairs: their label text is built once
    # each, and so are the threshold lines' ends for each distinct set of limits.
    node_text: dict[str, str] = {}
    pair_text: dict[tuple[str, str], str] = {}
    limits: dict[tuple[Any, Any, Any, Unit], list[str]] = {}
    code = _STATUS_TEXT.get
    for (node, check, subject), r in worst.items():
        head = node_text.get(node)
        if head is None:
            head = node_text[node] = f'{cmd},node="{escape(node)}",'
        tail = pair_text.get((check, subject))
        if tail is None:
            tail = pair_text[(check, subject)] = (f'check="{escape(check)}",'
                                                  f'subject="{escape(subject)}"')
        status_lines.append(f"stetho_check_status{{{head}{tail}}} {code(r.status, '3')}")
        v = r.value
        if type(v) is not float and type(v) is not int:
            v = number(v)
            if v is None:
                continue
        u = unit_of(r.unit)
        labels = f"{head}{tail}{u.labels}"
        scale = u.scale
        value_lines.append(
            f"stetho_check_value{{{labels}}} {_fmt(v if scale == 1.0 else v * scale)}")
        ref, exp, thr = r.reference, r.expected, r.threshold
        if ref is None and exp is None and thr is None:
            continue
        try:
            ends = limits[(ref, exp, thr, u)]
        except KeyError:
            ends = limits[(ref, exp, thr, u)] = _limit_ends(ref, exp, thr, u)
        except TypeError:  # an unhashable expectation (a list): not one number
            ends = _limit_ends(ref, exp, thr, u)
        for end in ends:
            limit_lines.append(f"stetho_check_threshold{{{labels}{end}")
    run = [f"stetho_run_timestamp_seconds{{{cmd}}} {_fmt(_started(started_at))}"]
    took = [f"stetho_run_duration_seconds{{{cmd}}} {_fmt(float(duration_s))}"]
    info = [f'stetho_build_info{{{cmd},version="{escape(__version__)}"}} 1']
    modes = gate_modes or {}
    blocked = [f'stetho_gate_blocked{{{cmd},policy="{escape(policy)}",'
               f'mode="{escape(modes.get(policy, "enforce"))}",node="{escape(node)}"}} '
               f"{1 if is_blocked else 0}"
               for policy, nodes in sorted((gate or {}).items())
               for node, is_blocked in sorted(nodes.items())]
    bench_lines = []
    for node, benchmark, metric, unit, value in bench or ():
        u = unit_of(unit)
        unit_label = u.label if u.physical or not unit else snake(unit)
        bench_lines.append(
            f'stetho_bench_value{{{cmd},node="{escape(node)}",benchmark="{escape(benchmark)}",'
            f'metric="{escape(metric)}",unit="{unit_label}"}} {_fmt(float(value) * u.scale)}')
    out = [f"# stetho {escape(__version__)} run {escape(run_id)}"]
    for name, lines in (("stetho_run_timestamp_seconds", run),
                        ("stetho_run_duration_seconds", took), ("stetho_build_info", info),
                        ("stetho_check_status", status_lines), ("stetho_check_value", value_lines),
                        ("stetho_check_threshold", limit_lines),
                        ("stetho_gate_blocked", blocked), ("stetho_bench_value", bench_lines)):
        if lines:
            out.append(f"# HELP {name} {_HELP[name]}")
            out.append(f"# TYPE {name} gauge")
            out.extend(lines)
    return "\n".join(out) + "\n"


def render_accuracy(acc: Mapping[str, Any], *, command: str = "kb-accuracy") -> str:
    """The textfile for `stetho kb accuracy` (stetho.publish.accuracy.measure's data). A
    figure that is None (no report under it) has no sample: an absent series, never a 0 an
    alert would read as "always wrong"; with no resolved report only the count (0) is
    written. `rule`, `diagnosed` and `found` are cause ids of the rule catalogue (bounded)."""
    cmd = f'command="{escape(command)}"'
    since = acc.get("since")
    start = datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp() if since else 0
    families: dict[str, list[str]] = {
        "stetho_kb_resolved_reports": [f"stetho_kb_resolved_reports{{{cmd}}} "
                                       f"{int(acc['resolved'])}"],
        "stetho_kb_accuracy_since_seconds": [f"stetho_kb_accuracy_since_seconds{{{cmd}}} "
                                             f"{_fmt(start)}"],
        "stetho_kb_no_fault_found_ratio": [], "stetho_kb_rule_precision": [],
        "stetho_kb_rule_recall": [], "stetho_kb_rule_diagnosed": [], "stetho_kb_rule_found": [],
        "stetho_kb_confusion": []}
    if acc.get("no_fault_found_rate") is not None:
        families["stetho_kb_no_fault_found_ratio"].append(
            f"stetho_kb_no_fault_found_ratio{{{cmd}}} {_fmt(acc['no_fault_found_rate'])}")
    for row in acc.get("rules", ()):
        labels = f'{cmd},rule="{escape(row["rule"])}"'
        for key in ("precision", "recall", "diagnosed", "found"):
            if row[key] is not None:
                families[f"stetho_kb_rule_{key}"].append(
                    f"stetho_kb_rule_{key}{{{labels}}} {_fmt(row[key])}")
    for pair in acc.get("confusion", ()):
        families["stetho_kb_confusion"].append(
            f'stetho_kb_confusion{{{cmd},diagnosed="{escape(pair["diagnosed"])}",'
            f'found="{escape(pair["found"])}"}} {int(pair["count"])}')
    out = [f"# stetho {escape(__version__)} kb accuracy"]
    for name, lines in families.items():
        if lines:
            out += [f"# HELP {name} {_HELP[name]}", f"# TYPE {name} gauge", *lines]
    return "\n".join(out) + "\n"


def write(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to `path` as node_exporter must see it: whole or not at all. A temp file
    in the same folder (its name does not end in .prom, so the collector skips it), fsync,
    rename over the target, fsync the folder. World-readable: node_exporter runs as its own
    user."""
    target = Path(path)
    folder = target.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return target
    try:
        os.fsync(dfd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename itself is done
    finally:
        os.close(dfd)
    return target
