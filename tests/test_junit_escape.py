"""JUnit escapes only strings that need it (stetho.sinks.junit's fast path): hostile text from
a node (markup, quotes, `]]>`, control characters, a lone surrogate) still gives valid XML
whose attributes and texts read back as the node's words, and the streamed document is the
same document."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from stetho.results import Result
from stetho.sinks import junit
from stetho.sinks.spool import Results

HOSTILE = [
    'a "quoted" \'single\' <tag> & amp',
    "]]> end of CDATA <![CDATA[ x ]]>",
    "bell\x07 nul\x00 esc\x1b del\x7f c1\x85\x9f",
    "tab\tnewline\ncarriage\r",
    "lone surrogate \ud800 here",
    "non-characters \ufffe\uffff\ufdd0",
]


def _results(texts: list[str] = HOSTILE) -> list[Result]:
    out = [Result("n1", "gpu_count", "", "pass", "8 GPUs", 8, None, 8)]
    for i, text in enumerate(texts):
        out.append(Result(f"n{i}-{text}", f"check{i}", text, "fail", text, text, text, text,
                          text, remediation=text, evidence=text, probe=text))
        out.append(Result("n2", f"warned{i}", text, "warn", text))
        out.append(Result("n2", f"skipped{i}", "", "skip", text))
        out.append(Result("n3", f"overridden{i}", "", "pass", text, override={
            "id": text, "approver": text, "requester": "r", "reason": text,
            "expires_at": "2027-01-01"}))
    return out


def _readable(text: str) -> str:
    """What JUnit keeps of `text`: the characters XML 1.0 forbids are removed (and, as
    junit-xml did, a carriage return)."""
    return "".join(c for c in text if c in "\t\n" or (
        " " <= c and not "\x7f" <= c <= "\x84" and not "\x86" <= c <= "\x9f"
        and not "\ud800" <= c <= "\udfff" and not "\ufdd0" <= c <= "\ufddf"
        and c not in "\ufffe\uffff"))


def test_hostile_strings_give_valid_xml_that_reads_back():
    texts = [t for t in HOSTILE if "\ud800" not in t]
    doc = junit.render(_results(texts))
    root = ET.fromstring(doc.encode("utf-8"))
    cases = list(root.iter("testcase"))
    assert len(cases) == len(_results(texts))
    failures = [c.find("failure") for c in cases if c.find("failure") is not None]
    assert len(failures) == len(texts)
    # attributes keep newlines and tabs as character references, so they read back as sent
    assert {f.get("message") for f in failures} == {_readable(t) for t in texts}
    for f in failures:
        assert f.text and "remediation: " in f.text
    assert any("]]>" in (c.findtext("system-out") or "") for c in cases)
    props = [p.get("value") for p in root.iter("property") if p.get("name") == "subject"]
    assert 'a "quoted" \'single\' <tag> & amp' in props


def test_clean_strings_are_written_as_they_are():
    """The common case skips escaping: a clean string comes out exactly as it went in."""
    doc = junit.render([Result("node-7", "gpu_clocks", "gpu0", "pass", "ok", 1980, "MHz")])
    assert '<property name="node" value="node-7"/>' in doc
    assert '<property name="value" value="1980"/>' in doc
    assert 'classname="stetho.gpu_clocks"' in doc


def test_a_lone_surrogate_still_gives_valid_xml():
    """A document UTF-8 cannot encode goes through stetho.sinks.safe: still every case."""
    doc = junit.render(_results())
    root = ET.fromstring(doc.encode("utf-8"))
    assert len(list(root.iter("testcase"))) == len(_results())
    assert any("lone surrogate" in (f.get("message") or "") for f in root.iter("failure"))


@pytest.mark.parametrize("text", HOSTILE)
def test_streamed_document_equals_whole_one(text: str):
    rows = [r for r in _results() if text in (r.message, r.subject) or r.node == "n1"]
    whole = junit.render(rows)
    streamed = "".join(junit.render_stream(Results(rows, spill_at=len(rows) + 1)))
    ET.fromstring(streamed.encode("utf-8"))
    assert streamed == whole


def test_repeated_results_on_many_nodes_keep_each_nodes_own_text():
    """Each node's testcase is its own result's, also where its tail is shared with another
    node's: values that compare equal but write differently (1, 1.0, True, -0.0, 0.0, "1")
    are never confused, and each case names its own node."""
    values: list[object] = [1, 1.0, True, "1", -0.0, 0.0, None, [1], (1.0,), {"a": 1}]
    rows = [Result(f"n{i:02d}", "gpu_count", "", status, "same message", v, "GPUs", v, v,
                   evidence="same evidence")
            for i, v in enumerate(values * 2) for status in ("pass", "fail")]
    root = ET.fromstring(junit.render(rows).encode())
    for suite in root.iter("testsuite"):
        node = suite.get("name")
        alone = ET.fromstring(junit.render([r for r in rows if r.node == node]).encode())
        own = alone.find("testsuite")
        assert own is not None
        own.tail = suite.tail = None  # the whitespace after it, not the suite
        assert ET.tostring(own) == ET.tostring(suite)
        assert {p.get("value") for p in suite.iter("property") if p.get("name") == "node"} \
            == {node}
    values_written = [p.get("value") for p in root.iter("property") if p.get("name") == "value"]
    assert {"1", "1.0", "True", "-0.0", "0.0", "[1]", "(1.0,)"} <= set(values_written)
