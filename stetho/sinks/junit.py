"""JUnit XML: a testsuite per node, a testcase per check x subject (junit-xml's elements).

CI systems show it natively. Properties carry value, expected and threshold; failures carry the
message and the remediation; errors and skips keep their reasons.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import groupby
from xml.sax.saxutils import escape

from stetho.results import Result, format_value
from stetho.sinks import safe
from stetho.sinks.spool import Results


def render(results: list[Result]) -> str:
    """The JUnit XML document; a result XML cannot hold (a control character, a lone
    surrogate, a huge integer) is written through stetho.sinks.safe, the others as they are."""
    try:
        out = _render(results)
        if safe.encodable(out):
            return out
    except safe.WRITE_ERRORS:
        pass
    return _render(safe.results(results))


def _render(results: list[Result]) -> str:
    by_node = sorted(results, key=lambda r: (r.node, r.check, r.subject))
    suites = [_suite_text(node, list(group))
              for node, group in groupby(by_node, key=lambda r: r.node)]
    return (_head(len(results), sum(r.status == "error" for r in results),
                  sum(r.status == "fail" for r in results),
                  sum(r.duration_s or 0.0 for r in results))
            + "".join(suites) + "\n</testsuites>\n")


def render_stream(results: Results) -> Iterator[str]:
    """The same document in pieces, one testsuite (node) at a time, read in node order from
    the results' own store: a million results never sit in memory at once."""
    c = results.counts()
    yield _head(len(results), c["error"], c["fail"], results.total_duration())
    for node, group in groupby(results.by_node(), key=lambda r: r.node):
        rows = list(group)
        try:
            text = _suite_text(node, rows)
            if not safe.encodable(text):
                raise ValueError("a lone surrogate")
        except safe.WRITE_ERRORS:
            cleaned = safe.results(rows)
            text = _suite_text(cleaned[0].node, cleaned)
        yield text
    yield "\n</testsuites>\n"


def _head(tests: int, errors: int, failures: int, time: float) -> str:
    return ('<?xml version="1.0" encoding="utf-8"?>\n'
            f'<testsuites disabled="0" errors="{errors}" failures="{failures}" tests="{tests}" '
            f'time="{float(time)}">')


#: What XML 1.0 cannot hold (junit-xml's own list): removed, as junit-xml did.
_ILLEGAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufdd0-\ufddf"
                      "\ufffe\uffff]")
_ATTR = {"\n": "&#10;", "\r": "&#13;", "\t": "&#09;", '"': "&quot;"}


def _a(value: object) -> str:
    """An attribute value, quoted and escaped (newlines kept as character references)."""
    return '"' + escape(_ILLEGAL.sub("", str(value)), _ATTR) + '"'


def _t(value: object) -> str:
    return escape(_ILLEGAL.sub("", str(value)))


def _suite_text(node: str, rows: list[Result]) -> str:
    """One node's testsuite as text, written directly: junit-xml's DOM, its pretty-printing
    and the re-parse to add each testcase's properties were most of a fleet ingest's time
    (the same elements and attributes as junit-xml writes)."""
    cases = [_case(r) for r in rows]
    counts = {"errors": 0, "failures": 0, "skipped": 0}
    for r in rows:
        key = {"error": "errors", "fail": "failures", "skip": "skipped"}.get(r.status)
        if key:
            counts[key] += 1
    elapsed = [r.duration_s for r in rows if r.duration_s]
    attrs = (f'disabled="0" errors="{counts["errors"]}" failures="{counts["failures"]}" '
             f'name={_a(node)} skipped="{counts["skipped"]}" tests="{len(rows)}" '
             f'time="{sum(elapsed) if elapsed else 0}"'
             + (f" hostname={_a(node)}" if node != "*" else ""))
    return f"\n\t<testsuite {attrs}>" + "".join(cases) + "\n\t</testsuite>"


def _case(r: Result) -> str:
    name = f"{r.check}[{r.id}]"
    attrs = f"name={_a(name)}"
    if r.duration_s:
        attrs += f' time="{r.duration_s:f}"'
    attrs += f" classname={_a('stetho.' + r.check)}"
    out = [f"\n\t\t<testcase {attrs}>", "\n\t\t\t<properties>"]
    out += [f"\n\t\t\t\t<property name={_a(k)} value={_a(v)}/>" for k, v in _props(r).items()]
    out.append("\n\t\t\t</properties>")
    detail = "\n".join(x for x in (
        f"value: {format_value(r.value, r.unit)}" if r.value is not None else "",
        f"expected: {r.expected}" if r.expected is not None else "",
        f"threshold: {r.threshold}" if r.threshold is not None else "",
        f"remediation: {r.remediation}" if r.remediation else "",
        f"probe: {r.probe}" if r.probe else "",
    ) if x)
    stdout, stderr = r.evidence or None, None
    if r.status in ("fail", "error"):  # always: junit-xml dropped one with no message,
        # so a failing result without text read as a pass in CI
        tag, kind = ("failure", "fail") if r.status == "fail" else ("error", "error")
        msg = f" message={_a(r.message)}" if r.message else ""
        body = f">{_t(detail)}</{tag}>" if detail else "/>"
        out.append(f'\n\t\t\t<{tag} type="{kind}"{msg}{body}')
    elif r.status == "skip":
        msg = f" message={_a(r.message)}" if r.message else ""
        out.append(f'\n\t\t\t<skipped type="skipped"{msg}/>')
    elif r.status == "warn":
        stderr = f"WARNING: {r.message}"
    if r.override:
        o = r.override
        stdout = (f"PASSED WITH OVERRIDE {o.get('id')}: approved by {o.get('approver')}, "
                  f"reason: {o.get('reason')}, expires {o.get('expires_at')}\n"
                  + (r.evidence or ""))
    if stdout:
        out.append(f"\n\t\t\t<system-out>{_t(stdout)}</system-out>")
    if stderr:
        out.append(f"\n\t\t\t<system-err>{_t(stderr)}</system-err>")
    out.append("\n\t\t</testcase>")
    return "".join(out)


def _props(r: Result) -> dict[str, str]:
    props = {"status": r.display_status, "node": r.node, "subject": r.subject}
    if r.override:
        for k in ("id", "approver", "requester", "reason", "expires_at"):
            props[f"override_{k}"] = str(r.override.get(k, ""))
    for key in ("value", "unit", "expected", "threshold", "limit", "limit_op", "reference",
                "remediation", "probe"):
        v = getattr(r, key)
        if v is not None:
            props[key] = str(v)
    return props
