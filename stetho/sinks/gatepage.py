"""The gate's run page: index.html in OUT/gate-<id>/, what a person opens from a prolog's log
or a CI step to see why a job was (not) let through.

One row per node (`data-node`, `data-worst`), worst first, its report linked, its results
counted per status and every check that did not pass named; then the problems (fails and
errors) with what to do about them. A GO node's passing results are counted, not drawn one by
one: the sweep's grid (stetho.sinks.runpage) drew a 64-node gate's 8,000 results as cells
through Jinja2, most of the gate's time. Written without a template engine, so every value
that came from a node or a check goes through `_e` (what html.escape does, quotes included,
without importing html's entity tables) and every report link through `href` (no scheme
survives); tests/test_gatepage.py holds both to hostile names and messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from stetho.results import SEVERITY, Result, counts, format_value
from stetho.sinks.pagestyle import COLOURS, MAX_PROBLEMS, ORDER, href

_STYLE = (
    "body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222}"
    "h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:20px 0 6px}"
    ".sum span{margin-right:12px}.key{display:inline-block;width:12px;height:12px;"
    "vertical-align:middle;margin-right:4px;border:1px solid #888}"
    "table{border-collapse:collapse;font-size:13px}td,th{border-bottom:1px solid #ddd;"
    "padding:2px 8px;text-align:left;vertical-align:top}th.n{font-family:monospace;"
    "font-weight:normal;white-space:nowrap}"
    + "".join(f".s-{s}{{background:{c}}}" for s, c in COLOURS.items()))


def _e(value: object) -> str:
    return (str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#x27;"))


def render(results: Iterable[Result], *, title: str, reports: Mapping[str, str] | None = None,
           generated_at: str = "") -> str:
    """The page. `reports`: node -> its diagnosis report's path relative to the page. Where a
    result (or the title) holds what a page cannot be written with (a lone surrogate), it is
    rendered through stetho.sinks.safe, as the sweep's page is."""
    rs = list(results)
    out = _render(rs, title, reports or {}, generated_at)
    if out.isascii():
        return out
    try:
        out.encode("utf-8")
        return out
    except UnicodeEncodeError:
        from stetho.sinks import safe

        return _render(safe.results(rs), safe.text(title), reports or {}, generated_at)


def _render(results: list[Result], title: str, reports: Mapping[str, str],
            generated_at: str) -> str:
    per_node: dict[str, dict[str, int]] = {}
    off: dict[str, dict[str, list[Result]]] = {}  # node -> check -> its results not passing
    for r in results:
        tally = per_node.setdefault(r.node, {})
        tally[r.status] = tally.get(r.status, 0) + 1
        if r.status != "pass":
            off.setdefault(r.node, {}).setdefault(r.check, []).append(r)
    worst = {node: min(c, key=_severity) for node, c in per_node.items()}
    nodes = sorted(per_node, key=lambda n: (_severity(worst[n]), n))
    total = counts(results)
    bad = sum(1 for w in worst.values() if w in ("fail", "error") or w not in SEVERITY)
    out = [f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
           f'<meta name="viewport" content="width=device-width">\n<title>{_e(title)}</title>'
           f"<style>{_STYLE}</style></head><body>\n<h1>{_e(title)}</h1>\n"
           f'<p class="sum">{len(nodes)} nodes, {bad} failing or not evaluated, '
           f"{len(results)} results"
           + (f" &middot; {_e(generated_at)}" if generated_at else "") + "<br>"
           + "".join(f'<span data-count="{s}"><i class="key s-{s}"></i>{total.get(s, 0)} {s}'
                     "</span>" for s in ORDER) + "</p>\n"
           '<h2>Nodes (worst first; every check that did not pass named)</h2>\n'
           '<table id="nodes"><thead><tr><th>node</th><th>results</th><th>not passing</th>'
           "</tr></thead><tbody>\n"]
    for n in nodes:
        c = per_node[n]
        shown = ", ".join(f"{c[k]} {k}" for k in (*ORDER, *sorted(set(c) - set(ORDER)))
                          if c.get(k))
        out.append(f'<tr data-node="{_e(n)}" data-worst="{_e(worst[n])}">'
                   f'<th class="n"><i class="key s-{_e(worst[n])}"></i>{_link(n, reports)}</th>'
                   f"<td>{_e(shown)}</td><td>{_checks(off.get(n, {}))}</td></tr>\n")
    out.append("</tbody></table>\n")
    out.append(_problems(results, reports))
    out.append("</body></html>\n")
    return "".join(out)


def _severity(status: str) -> int:
    return SEVERITY.get(status, 1)  # unknown reads as error


def _link(node: str, reports: Mapping[str, str]) -> str:
    report = reports.get(node)
    return _e(node) if report is None else f'<a href="{_e(href(report))}">{_e(node)}</a>'


def _checks(by_check: Mapping[str, list[Result]]) -> str:
    """Each check that did not pass: its worst status and, for that status, how many subjects
    and the first one's message (the problems table and the report have the rest)."""
    parts = []
    for check in sorted(by_check, key=lambda ch: (min(_severity(r.status)
                                                      for r in by_check[ch]), ch)):
        rs = by_check[check]
        w = min((r.status for r in rs), key=_severity)
        first = next(r for r in rs if r.status == w)
        many = sum(1 for r in rs if r.status == w)
        parts.append(f'<span data-check="{_e(check)}" data-status="{_e(w)}" '
                     f'title="{_e((first.subject or "-") + ": " + first.message[:200])}">'
                     f'<i class="key s-{_e(w)}"></i>{_e(check)} {_e(w)}'
                     + (f" x{many}" if many > 1 else "") + "</span>")
    return "; ".join(parts)


def _problems(results: list[Result], reports: Mapping[str, str]) -> str:
    probs = sorted((r for r in results if r.status in ("fail", "error")),
                   key=lambda r: (SEVERITY[r.status], r.node, r.check, r.subject))
    if not probs:
        return "<h2>Problems</h2><p>No check failed and none could not be evaluated.</p>\n"
    out = [f"<h2>Problems ({len(probs)})</h2>\n<table id=\"problems\"><thead><tr><th>node</th>"
           "<th>check</th><th>subject</th><th>status</th><th>value</th><th>message</th>"
           "<th>remediation</th></tr></thead><tbody>\n"]
    for r in probs[:MAX_PROBLEMS]:
        value = format_value(r.value, r.unit)
        if r.expected is not None:
            value = f"{value} (expected {r.expected})" if value else f"expected {r.expected}"
        out.append(f'<tr data-status="{r.status}"><td>{_link(r.node, reports)}</td>'
                   f"<td>{_e(r.check)}</td><td>{_e(r.subject or '-')}</td>"
                   f'<td><i class="key s-{r.status}"></i>{r.status}</td><td>{_e(value)}</td>'
                   f"<td>{_e(r.message)}</td><td>{_e(r.remediation or '')}</td></tr>\n")
    out.append("</tbody></table>\n")
    if len(probs) > MAX_PROBLEMS:
        out.append(f"<p>{len(probs) - MAX_PROBLEMS} more in the nodes' reports.</p>\n")
    return "".join(out)


def write(folder: Path, results: list[Result], *, title: str,
          reports: Mapping[str, Path], generated_at: str) -> Path:
    """Write `folder/index.html` atomically (a reader never sees half a page), each report
    linked relative to the folder."""
    import os

    from stetho.core import atomic

    links = {node: Path(os.path.relpath(p, folder)).as_posix() for node, p in reports.items()}
    return atomic.write(folder / "index.html",
                        render(results, title=title, reports=links, generated_at=generated_at))
