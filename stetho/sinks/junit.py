"""JUnit XML: a testsuite per node, a testcase per check x subject (junit-xml's elements).

CI systems show it natively. Properties carry value, expected and threshold; failures carry the
message and the remediation; errors and skips keep their reasons.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import groupby

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
    tails: dict[tuple[object, ...], str] = {}
    suites = [_suite_text(node, list(group), tails)
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
    tails: dict[tuple[object, ...], str] = {}
    for node, group in groupby(results.by_node(), key=lambda r: r.node):
        rows = list(group)
        if len(tails) > TAILS_KEPT:
            tails.clear()
        try:
            text = _suite_text(node, rows, tails)
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
#: Anything escaping could change: most strings (check names, statuses, numbers) hold none,
#: and one search skipping them was most of the speed-up over escaping every string (a
#: fleet's JUnit escaped ~17 strings per result: 975,488 escape() calls for 256 nodes).
_SPECIAL = re.compile("[&<>\"\x00-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufddf\ufffe\uffff]")
_special = _SPECIAL.search


def escape(s: str, entities: dict[str, str] | None = None) -> str:
    """xml.sax.saxutils.escape, the same three replacements and then `entities`: importing
    xml.sax.saxutils pulls in urllib.request, http.client and ssl, a tenth of a node's
    `stetho check --outcome -` start-up (what every host of a sweep runs) for this alone."""
    s = s.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;")
    for key, value in (entities or {}).items():
        s = s.replace(key, value)
    return s


def _a(value: object) -> str:
    """An attribute value, quoted and escaped (newlines kept as character references)."""
    s = value if type(value) is str else str(value)
    if _special(s) is None:
        return f'"{s}"'
    return '"' + escape(_ILLEGAL.sub("", s), _ATTR) + '"'


def _t(value: object) -> str:
    s = value if type(value) is str else str(value)
    if _special(s) is None:
        return s
    return escape(_ILLEGAL.sub("", s))


def _suite_text(node: str, rows: list[Result],
                tails: dict[tuple[object, ...], str] | None = None) -> str:
    """One node's testsuite as text, written directly: junit-xml's DOM, its pretty-printing
    and the re-parse to add each testcase's properties were most of a fleet ingest's time
    (the same elements and attributes as junit-xml writes). The node's quoted name and each
    check's classname are escaped once per suite, not once per result."""
    node_attr = _a(node)
    classnames: dict[str, str] = {}
    cases = [_case(r, node_attr, classnames, tails) for r in rows]
    errors = failures = skipped = 0
    elapsed = 0.0
    any_time = False
    for r in rows:
        status = r.status
        if status == "fail":
            failures += 1
        elif status == "error":
            errors += 1
        elif status == "skip":
            skipped += 1
        if r.duration_s:
            elapsed += r.duration_s
            any_time = True
    attrs = (f'disabled="0" errors="{errors}" failures="{failures}" '
             f'name={node_attr} skipped="{skipped}" tests="{len(rows)}" '
             f'time="{elapsed if any_time else 0}"'
             + (f" hostname={node_attr}" if node != "*" else ""))
    return f"\n\t<testsuite {attrs}>" + "".join(cases) + "\n\t</testsuite>"


_PROP = '\n\t\t\t\t<property name="%s" value=%s/>'
_OVERRIDE_KEYS = ("id", "approver", "requester", "reason", "expires_at")
_MEASURE_KEYS = ("value", "unit", "expected", "threshold", "limit", "limit_op", "reference",
                 "remediation", "probe")


#: At most this many distinct testcase tails are remembered while a document streams.
TAILS_KEPT = 100_000
_PLAIN = (str, int, float, bool, type(None))
_BY_TEXT = ("value", "expected", "threshold", "reference", "limit")
_BY_SELF = ("check", "subject", "status", "message", "unit", "limit_op", "remediation",
            "evidence", "probe")


def _case(r: Result, node_attr: str | None = None, classnames: dict[str, str] | None = None,
          tails: dict[tuple[object, ...], str] | None = None) -> str:
    """One testcase: its head (name, time, classname, status and node) and its tail (the
    rest: nothing in it names the node). Most results of a fleet repeat another node's in all
    but the node (a check that passed with the same value and message), so `tails` keeps
    each distinct tail once, keyed by what it is written from."""
    d = r.__dict__
    check, status = d["check"], d["status"]
    subject = d["subject"]
    name = f"{check}[{d['node']}/{subject}]" if subject else f"{check}[{d['node']}]"
    attrs = f"name={_a(name)}"
    if d["duration_s"]:
        attrs += f' time="{d["duration_s"]:f}"'
    cls = classnames.get(check) if classnames is not None else None
    if cls is None:
        cls = _a("stetho." + check)
        if classnames is not None:
            classnames[check] = cls
    head = (f"\n\t\t<testcase {attrs} classname={cls}>\n\t\t\t<properties>"
            + _PROP % ("status", '"passed-with-override"' if d["override"] else _a(status))
            + _PROP % ("node", node_attr if node_attr is not None else _a(d["node"])))
    key = _tail_key(d) if tails is not None else None
    if key is None:
        return head + _tail(r)
    assert tails is not None
    tail = tails.get(key)
    if tail is None:
        tail = tails[key] = _tail(r)
    return head + tail


def _tail_key(d: dict[str, object]) -> tuple[object, ...] | None:
    """What a testcase's tail is written from, or None (an override, a field that is not a
    plain scalar): numbers by type and text, as 1, 1.0, -0.0 and True write differently."""
    if d["override"]:
        return None
    texts = [d[k] for k in _BY_SELF]
    for v in texts:
        if type(v) is not str and v is not None and type(v) not in _PLAIN:
            return None
    for k in _BY_TEXT:
        v = d[k]
        if v is None or type(v) is str:
            texts.append(v)
        elif type(v) in _PLAIN:
            texts += (type(v), str(v))
        else:
            return None
    return tuple(texts)


def _tail(r: Result) -> str:
    d = r.__dict__
    status, override = d["status"], d["override"]
    out = [_PROP % ("subject", _a(d["subject"]))]
    if override:
        out += [_PROP % (f"override_{k}", _a(str(override.get(k, ""))))
                for k in _OVERRIDE_KEYS]
    out += [_PROP % (k, _a(d[k])) for k in _MEASURE_KEYS if d[k] is not None]
    out.append("\n\t\t\t</properties>")
    stdout, stderr = d["evidence"] or None, None
    if status in ("fail", "error"):  # always: junit-xml dropped one with no message,
        # so a failing result without text read as a pass in CI
        tag, kind = ("failure", "fail") if status == "fail" else ("error", "error")
        msg = f" message={_a(r.message)}" if r.message else ""
        detail = _detail(r)
        body = f">{_t(detail)}</{tag}>" if detail else "/>"
        out.append(f'\n\t\t\t<{tag} type="{kind}"{msg}{body}')
    elif status == "skip":
        msg = f" message={_a(r.message)}" if r.message else ""
        out.append(f'\n\t\t\t<skipped type="skipped"{msg}/>')
    elif status == "warn":
        stderr = f"WARNING: {r.message}"
    if override:
        o = override
        stdout = (f"PASSED WITH OVERRIDE {o.get('id')}: approved by {o.get('approver')}, "
                  f"reason: {o.get('reason')}, expires {o.get('expires_at')}\n"
                  + (r.evidence or ""))
    if stdout:
        out.append(f"\n\t\t\t<system-out>{_t(stdout)}</system-out>")
    if stderr:
        out.append(f"\n\t\t\t<system-err>{_t(stderr)}</system-err>")
    out.append("\n\t\t</testcase>")
    return "".join(out)


def _detail(r: Result) -> str:
    """A failure's or error's text: what was measured against what, and what to do."""
    return "\n".join(x for x in (
        f"value: {format_value(r.value, r.unit)}" if r.value is not None else "",
        f"expected: {r.expected}" if r.expected is not None else "",
        f"threshold: {r.threshold}" if r.threshold is not None else "",
        f"remediation: {r.remediation}" if r.remediation else "",
        f"probe: {r.probe}" if r.probe else "",
    ) if x)
