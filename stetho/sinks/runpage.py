"""The run page: one static index.html a person opens from a CI artifact or a file share.

A nodes x checks grid coloured by each cell's worst status, failing nodes first, every node
linked to its diagnosis report; the problems with what to do about them; and the busbw of
every node against the baseline as an inline SVG chart. No external asset, no script: it
works offline, from `file://`, and in a mail client's preview. Every string that came from a
node or a check (names, messages, report paths) is HTML-escaped; report links are
percent-encoded relative paths, so a hostile name can neither inject markup nor a `javascript:`
link.
"""

from __future__ import annotations

import html
import os
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from stetho.results import SEVERITY, Result, counts, format_value
from stetho.sinks.suite import SuiteSummary

#: The colour of each status (the grid, the legend and the chart use the same).
COLOURS = {"fail": "#d62728", "error": "#9467bd", "warn": "#f2b705", "skip": "#c7c7c7",
           "pass": "#2ca02c"}
ORDER = ("fail", "error", "warn", "skip", "pass")
#: Problem rows listed under the grid at most (the grid and the reports have the rest).
MAX_PROBLEMS = 500
#: A node's busbw this far under the baseline is drawn in the fail colour.
DEFAULT_TOLERANCE_PCT = 5.0


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


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _worst(statuses: Iterable[str]) -> str:
    return min(statuses, key=lambda s: SEVERITY.get(s, 1))  # unknown reads as error


def _href(path: str) -> str:
    """A relative link that stays a relative link: no scheme survives quoting ':', and a
    leading '/' (absolute or protocol-relative '//host') is made relative with './'."""
    link = quote(path, safe="/#")
    return _e("./" + link if link.startswith("/") else link)


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:20px 0 6px}
.sum span{margin-right:12px}.key{display:inline-block;width:12px;height:12px;
vertical-align:middle;margin-right:4px;border:1px solid #888}
table.grid{border-collapse:collapse}table.grid td,table.grid th{border:1px solid #fff;
padding:0}table.grid td.c{width:14px;height:14px;min-width:14px}
table.grid th.c{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;
font-size:12px;padding:2px;text-align:left}table.grid th.n{text-align:left;font-weight:normal;
padding-right:8px;white-space:nowrap;font-family:monospace}
td.none{background:#fff;outline:1px solid #eee}
table.probs{border-collapse:collapse;font-size:13px}table.probs td,table.probs th{
border-bottom:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top}
.chart{overflow-x:auto;border:1px solid #ddd}
""" + "".join(f".s-{s}{{background:{c}}}" for s, c in COLOURS.items())


def render(results: Iterable[Result], *, title: str, reports: Mapping[str, str] | None = None,
           busbw: Busbw | None = None, generated_at: str | None = None,
           suite: SuiteSummary | None = None,
           accuracy: Mapping[str, Any] | None = None) -> str:
    """The page for one run. `reports` maps node -> relative path of its diagnosis report;
    `suite`: the benchmark suite's night (a sweep with --bench), shown above the grid;
    `accuracy` is the knowledge base's rule accuracy (stetho.publish.accuracy.measure's data,
    or {"error": why} when it could not be read)."""
    results = list(results)
    reports = reports or {}
    cells: dict[str, dict[str, list[Result]]] = {}
    checks: dict[str, None] = {}
    for r in results:
        cells.setdefault(r.node, {}).setdefault(r.check, []).append(r)
        checks.setdefault(r.check, None)
    check_list = sorted(checks)
    worst_of = {n: _worst(r.status for rs in by.values() for r in rs) for n, by in cells.items()}
    nodes = sorted(cells, key=lambda n: (SEVERITY.get(worst_of[n], 1), n))
    c = counts(results)
    bad_nodes = sum(1 for n in nodes if worst_of[n] in ("fail", "error"))
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width">',
           f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{_e(title)}</h1>"]
    meta = f"{len(nodes)} nodes, {bad_nodes} failing or not evaluated, {len(results)} results"
    if generated_at:
        meta += f" &middot; {_e(generated_at)}"
    out.append(f'<p class="sum">{meta}<br>' + "".join(
        f'<span data-count="{s}"><i class="key s-{s}"></i>{c.get(s, 0)} {s}</span>'
        for s in ORDER) + "</p>")
    if suite is not None:
        out.extend(_suite(suite))
    out.append("<h2>Nodes &times; checks (worst status per cell; failing nodes first)</h2>")
    out.append('<table class="grid" id="grid"><thead><tr><th></th>')
    out.extend(f'<th class="c" scope="col">{_e(ch)}</th>' for ch in check_list)
    out.append("</tr></thead><tbody>")
    for n in nodes:
        en = _e(n)
        name = f'<a href="{_href(reports[n])}">{en}</a>' if n in reports else en
        row = [f'<tr data-node="{en}" data-worst="{worst_of[n]}"><th class="n" scope="row">'
               f"{name}</th>"]
        by = cells[n]
        for ch in check_list:
            rs = by.get(ch)
            if not rs:
                row.append('<td class="c none" data-status="none"></td>')
                continue
            w = _worst(r.status for r in rs)
            row.append(f'<td class="c s-{w}" data-check="{_e(ch)}" data-status="{w}" '
                       f'title="{_e(_tip(ch, w, rs))}"></td>')
        row.append("</tr>")
        out.append("".join(row))
    out.append("</tbody></table>")
    if busbw is not None and busbw.values:
        out.extend(_chart(busbw))
    out.extend(_problems(results, reports))
    if accuracy is not None:
        out.extend(_accuracy(accuracy))
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _suite(s: SuiteSummary) -> list[str]:
    """The suite's line, then who was busy and which benchmarks regressed or failed."""
    out = [f"<h2>{_e(s.suite.capitalize())} benchmark suite</h2>",
           f'<p id="suite" data-ran="{len(s.ran)}" data-busy="{len(s.busy)}" '
           f'data-hosts="{len(s.hosts)}">{_e(s.line())}</p>', '<ul id="suite-details">']
    out.extend(f'<li data-busy="{_e(n)}">{_e(n)}: {_e(why)}</li>' for n, why in s.busy.items())
    for kind, words, found in (
            ("regressed", "regressed against its baseline on", s.regressed),
            ("failed", "failed by the tool's own verdict on", s.failed),
            ("unjudged", "could not be judged on", s.unjudged)):
        out.extend(f'<li data-{kind}="{_e(k)}">{_e(k)} {words} {_e(", ".join(nodes))}</li>'
                   for k, nodes in found.items())
    out.append("</ul>")
    return out


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


def _problems(results: list[Result], reports: Mapping[str, str]) -> list[str]:
    probs = sorted((r for r in results if r.status in ("fail", "error")),
                   key=lambda r: (SEVERITY[r.status], r.node, r.check, r.subject))
    if not probs:
        return ["<h2>Problems</h2><p>No check failed and none could not be evaluated.</p>"]
    out = [f"<h2>Problems ({len(probs)})</h2>", '<table class="probs" id="problems"><thead><tr>'
           "<th>node</th><th>check</th><th>subject</th><th>status</th><th>value</th>"
           "<th>message</th><th>remediation</th></tr></thead><tbody>"]
    for r in probs[:MAX_PROBLEMS]:
        node = (f'<a href="{_href(reports[r.node])}">{_e(r.node)}</a>' if r.node in reports
                else _e(r.node))
        value = format_value(r.value, r.unit)
        if r.expected is not None:
            value = f"{value} (expected {r.expected})" if value else f"expected {r.expected}"
        out.append(f'<tr data-status="{_e(r.status)}"><td>{node}</td><td>{_e(r.check)}</td>'
                   f"<td>{_e(r.subject or '-')}</td><td><i class=\"key s-{_e(r.status)}\"></i>"
                   f"{_e(r.status)}</td><td>{_e(value)}</td><td>{_e(r.message)}</td>"
                   f"<td>{_e(r.remediation or '')}</td></tr>")
    out.append("</tbody></table>")
    if len(probs) > MAX_PROBLEMS:
        out.append(f"<p>{len(probs) - MAX_PROBLEMS} more in the nodes' reports.</p>")
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _accuracy(acc: Mapping[str, Any]) -> list[str]:
    """How often each rule's diagnosis was what the technician found (resolved reports): the
    figures of `stetho kb accuracy`. No resolved report: it says so, and shows no figure."""
    since = f" since {_e(str(acc['since'])[:10])}" if acc.get("since") else ""
    out = [f"<h2>Rule accuracy on resolved reports{since}</h2>"]
    if acc.get("error"):
        return out + [f'<p id="accuracy" data-resolved="unknown">Not available: '
                      f"{_e(acc['error'])}</p>"]
    n = int(acc.get("resolved", 0))
    if not n:
        return out + [f'<p id="accuracy" data-resolved="0">No resolved reports{since}: no '
                      "precision or recall yet (record repairs with <code>stetho kb resolve"
                      "</code>).</p>"]
    out.append(f'<p id="accuracy" data-resolved="{n}">{n} resolved reports; no fault found in '
               f"{int(acc['no_fault_found'])} ({_pct(acc['no_fault_found_rate'])}).</p>")
    rows = [r for r in acc.get("rules", ()) if r["diagnosed"] or r["found"]]
    out.append('<table class="probs" id="rule-accuracy"><thead><tr><th>rule</th>'
               "<th>diagnosed</th><th>found</th><th>confirmed</th><th>precision</th>"
               "<th>recall</th><th>no fault found</th></tr></thead><tbody>")
    for r in rows:
        out.append(f'<tr data-rule="{_e(r["rule"])}"><td>{_e(r["rule"])}</td>'
                   f"<td>{int(r['diagnosed'])}</td><td>{int(r['found'])}</td>"
                   f"<td>{int(r['correct'])}</td><td>{_pct(r['precision'])}</td>"
                   f"<td>{_pct(r['recall'])}</td><td>{int(r['no_fault_found'])}</td></tr>")
    out.append("</tbody></table>")
    unmeasured = [r["rule"] for r in acc.get("rules", ()) if not (r["diagnosed"] or r["found"])]
    if unmeasured:
        out.append(f"<p>Not measured (no resolved report): {_e(', '.join(unmeasured))}.</p>")
    if acc.get("confusion"):
        out.append('<table class="probs" id="confusion"><thead><tr><th>diagnosed</th>'
                   "<th>found</th><th>reports</th></tr></thead><tbody>")
        out.extend(f'<tr><td>{_e(c["diagnosed"])}</td><td>{_e(c["found"])}</td>'
                   f"<td>{int(c['count'])}</td></tr>" for c in acc["confusion"])
        out.append("</tbody></table>")
    return out


def _chart(b: Busbw) -> list[str]:
    """Bars per node, lowest first, the baseline and its tolerance as lines."""
    items = sorted(b.values.items(), key=lambda kv: (kv[1], kv[0]))
    floor = b.baseline * (1 - b.tolerance_pct / 100) if b.baseline else None
    marks = [v for _, v in items] + ([b.baseline, floor] if b.baseline and floor else [])
    top = max(marks)
    # The axis starts under the lowest bar, not at 0: a 5% drop must be visible.
    low = max(0.0, min(marks) - 0.1 * (top - min(marks) or abs(top) or 1.0))
    span = (top - low) or 1.0
    bar, gap, height, pad = 6, 1, 220, 48
    width = pad + len(items) * (bar + gap) + 10

    def y(v: float) -> float:
        return 10 + height * (1 - (min(max(v, low), top) - low) / span)

    label = f" at {_e(b.label)}" if b.label else ""
    base = (f"baseline {b.baseline:g} {_e(b.unit)}, tolerance {b.tolerance_pct:g}%"
            if b.baseline else "no baseline")
    out = [f"<h2>NCCL busbw{label} per node ({base})</h2>",
           f'<div class="chart"><svg id="busbw" xmlns="http://www.w3.org/2000/svg" '
           f'width="{width}" height="{height + 30}" role="img" '
           f'aria-label="busbw per node against the baseline">',
           f'<text x="2" y="14" font-size="11">{top:.4g}</text>'
           f'<text x="2" y="{height + 10}" font-size="11">{low:.4g}</text>'
           f'<text x="2" y="{height + 24}" font-size="11">{_e(b.unit)}</text>']
    for i, (node, v) in enumerate(items):
        under = floor is not None and v < floor
        x = pad + i * (bar + gap)
        top_y = y(v)
        out.append(f'<rect x="{x}" y="{top_y:.1f}" width="{bar}" '
                   f'height="{10 + height - top_y:.1f}" class="s-{"fail" if under else "pass"}"'
                   f' data-node="{_e(node)}" fill="{COLOURS["fail" if under else "pass"]}">'
                   f"<title>{_e(node)}: {v:g} {_e(b.unit)}</title></rect>")
    if b.baseline:
        out.append(f'<line x1="{pad}" x2="{width}" y1="{y(b.baseline):.1f}" '
                   f'y2="{y(b.baseline):.1f}" stroke="#000" stroke-width="1.5" id="baseline">'
                   f"<title>baseline {b.baseline:g} {_e(b.unit)}</title></line>")
    if floor is not None:
        out.append(f'<line x1="{pad}" x2="{width}" y1="{y(floor):.1f}" y2="{y(floor):.1f}" '
                   'stroke="#000" stroke-dasharray="4 3">'
                   f"<title>-{b.tolerance_pct:g}%: {floor:g} {_e(b.unit)}</title></line>")
    out.append("</svg></div>")
    return out


def relative_reports(paths: Mapping[str, str | os.PathLike[str]], folder: str |
                     os.PathLike[str]) -> dict[str, str]:
    """node -> report path relative to the run folder that holds index.html (what `render`
    links), from the paths `stetho.diagnosis.runs.diagnose_results` wrote."""
    return {node: Path(os.path.relpath(p, folder)).as_posix() for node, p in paths.items()}


def write(folder: str | os.PathLike[str], text: str) -> Path:
    """Write `folder/index.html` atomically (a reader never sees half a page)."""
    from stetho.sinks.prometheus import write as atomic_write

    return atomic_write(Path(folder) / "index.html", text)
