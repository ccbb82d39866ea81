"""JUnit XML through junit-xml: a testsuite per node, a testcase per check x subject.

CI systems show it natively. Properties carry value, expected and threshold; failures carry the
message and the remediation; errors and skips keep their reasons.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from itertools import groupby

from junit_xml import TestCase, TestSuite, to_xml_report_string

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
    suites = []
    ordered: list[Result] = []
    by_node = sorted(results, key=lambda r: (r.node, r.check, r.subject))
    for node, group in groupby(by_node, key=lambda r: r.node):
        rows = list(group)
        ordered.extend(rows)
        suites.append(TestSuite(node, [_case(r) for r in rows],
                                hostname=node if node != "*" else None))
    return _with_properties(str(to_xml_report_string(suites, encoding="utf-8")), ordered)


def render_stream(results: Results) -> Iterator[str]:
    """The same document in pieces, one testsuite (node) at a time, read in node order from
    the results' own store: a million results never sit in memory at once."""
    c = results.counts()
    yield ('<?xml version="1.0" encoding="utf-8"?>\n'
           f'<testsuites disabled="0" errors="{c["error"]}" failures="{c["fail"]}" '
           f'tests="{len(results)}" time="{results.total_duration():g}">')
    for node, group in groupby(results.by_node(), key=lambda r: r.node):
        rows = list(group)
        try:
            text = _suite(node, rows)
            if not safe.encodable(text):
                raise ValueError("a lone surrogate")
        except safe.WRITE_ERRORS:
            cleaned = safe.results(rows)
            text = _suite(cleaned[0].node, cleaned)
        yield text
    yield "\n</testsuites>"


def _suite(node: str, rows: list[Result]) -> str:
    """One node's testsuite element as text, for the stream."""
    suite = TestSuite(node, [_case(r) for r in rows], hostname=node if node != "*" else None)
    root = ET.fromstring(_with_properties(str(to_xml_report_string([suite])), rows))
    parts = []
    for element in root:
        element.tail = "\n"
        parts.append("\n\t" + ET.tostring(element, encoding="unicode").rstrip("\n"))
    return "".join(parts)


def _with_properties(xml: str, ordered: list[Result]) -> str:
    """junit-xml has properties per suite only; add `<properties>` to each testcase, as pytest
    and most CI parsers (Jenkins, GitLab) read them."""
    root = ET.fromstring(xml)
    for case, r in zip(root.iter("testcase"), ordered, strict=True):
        props = ET.Element("properties")
        for k, v in _props(r).items():
            ET.SubElement(props, "property", name=k, value=v)
        case.insert(0, props)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode")


def _case(r: Result) -> TestCase:
    name = f"{r.check}[{r.id}]"
    case = TestCase(name, classname=f"stetho.{r.check}", elapsed_sec=r.duration_s,
                    stdout=r.evidence or None)
    detail = "\n".join(x for x in (
        f"value: {format_value(r.value, r.unit)}" if r.value is not None else "",
        f"expected: {r.expected}" if r.expected is not None else "",
        f"threshold: {r.threshold}" if r.threshold is not None else "",
        f"remediation: {r.remediation}" if r.remediation else "",
        f"probe: {r.probe}" if r.probe else "",
    ) if x)
    if r.status == "fail":
        case.add_failure_info(message=r.message, output=detail or None, failure_type="fail")
    elif r.status == "error":
        case.add_error_info(message=r.message, output=detail or None, error_type="error")
    elif r.status == "skip":
        case.add_skipped_info(message=r.message)
    elif r.status == "warn":
        case.stderr = f"WARNING: {r.message}"
    if r.override:
        o = r.override
        case.stdout = (f"PASSED WITH OVERRIDE {o.get('id')}: approved by {o.get('approver')}, "
                       f"reason: {o.get('reason')}, expires {o.get('expires_at')}\n"
                       + (r.evidence or ""))
    return case


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
