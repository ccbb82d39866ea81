"""Every output writer takes whatever a check put into a result (issue 28): seeded malformed
values (lone surrogates, control characters, NaN and infinities, integers no float or text
holds, deep nesting, markup) through the JSON, JUnit, textfile, run page, table, spool, history
and diagnosis-report writers. Each output is valid in its own format, keeps every result, and
nothing raises: one node's odd output never costs the run its outputs."""

from __future__ import annotations

import json
import math
import random
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from stetho.diagnosis.runs import diagnose_results
from stetho.history.store import History, NodeRun
from stetho.results import STATUSES, Result
from stetho.sinks import json_out, junit, prometheus, runpage, safe, spool, table


def _deep(n: int) -> list:
    x: list = []
    for _ in range(n):
        x = [x]
    return x


TEXTS = ["", "\x00", "\x1b[2J\x1b[31mall clear", "a\nb", 'q"uote', "{{ 7*7 }}", "{% raw %}",
         "</script><script>alert(1)</script>", "\ud800", "x\udc80y", "\u202egnp.exe",
         "\ufeff", "\x9b31m", "\x7f", "\uffff", "\U0001F600", "\\", "a\rb", "\t", "é" * 3,
         "x" * 20000, "]]>", "<![CDATA[", "&amp;", "\x0b\x0c"]
VALUES = [float("nan"), float("inf"), -float("inf"), -0.0, 1e308, 10 ** 5000, -10 ** 400,
          2 ** 64, True, _deep(3000), {"a": {"b": [1, float("nan")]}}, "12 GB/s", None,
          ["\ud800", 10 ** 5000], 3.5]
HOSTS = ["gpu01", "gpu02", "n-3.rack1"]  # node names are validated where they enter


def _text(rnd: random.Random) -> str:
    if rnd.random() < 0.6:
        return rnd.choice(TEXTS)
    return "".join(rnd.choice(TEXTS) for _ in range(3))[:300]


def _result(rnd: random.Random, node: str | None = None) -> Result:
    return Result(
        node=node or (rnd.choice(HOSTS) if rnd.random() < 0.7 else _text(rnd) or "n0"),
        check=_text(rnd) or "gpu_clocks", subject=_text(rnd),
        status=rnd.choice(STATUSES), message=_text(rnd), value=rnd.choice(VALUES),
        unit=rnd.choice([None, "GB/s", "MHz", _text(rnd)]), expected=rnd.choice(VALUES),
        threshold=rnd.choice(VALUES), remediation=rnd.choice([None, _text(rnd)]),
        evidence=rnd.choice([None, _text(rnd)]), probe=rnd.choice([None, _text(rnd)]),
        duration_s=rnd.choice([0.1, float("nan"), float("inf"), -1.0]),
        reference=rnd.choice([None, float("nan"), 2.0]),
        limit=rnd.choice([None, float("nan"), float("inf"), 3.0, 10 ** 5000]),
        limit_op=rnd.choice([None, "<", ">=", "??"]))


def _batches(seed: int, n: int = 25, size: int = 6, node: str | None = None):
    rnd = random.Random(seed)
    return [[_result(rnd, node) for _ in range(size)] for _ in range(n)]


def _no_constant(word: str) -> float:
    raise AssertionError(f"JSON holds {word}, which strict JSON readers refuse")


_LONE = re.compile(r"(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
                   r"|\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])")


def _strict_json(text: str) -> object:
    assert not _LONE.search(text.replace("\\\\", "")), "a lone surrogate escape"
    return json.loads(text, parse_constant=_no_constant)


@pytest.mark.parametrize("seed", range(4))
def test_results_json_is_strict_json_with_every_result(seed):
    for rs in _batches(seed):
        doc = _strict_json(json_out.render(rs, run_id="r1"))
        assert len(doc["results"]) == len(rs)
        assert [d["status"] for d in doc["results"]] == [r.status for r in rs]
        text = json_out.render(rs, run_id="r1")
        assert text.encode("utf-8")


@pytest.mark.parametrize("seed", range(4))
def test_streamed_json_and_junit_from_a_spilled_store(seed):
    for rs in _batches(seed, n=8, size=12):
        store = spool.Results(rs, spill_at=5)
        assert store.spilled
        doc = _strict_json("".join(json_out.render_stream(store, run_id="r1")))
        assert len(doc["results"]) == len(rs)
        root = ET.fromstring("".join(junit.render_stream(store)).encode("utf-8"))
        assert len(list(root.iter("testcase"))) == len(rs)


@pytest.mark.parametrize("seed", range(4))
def test_junit_is_well_formed_xml_with_every_result(seed):
    for rs in _batches(seed):
        text = junit.render(rs)
        root = ET.fromstring(text.encode("utf-8"))
        cases = list(root.iter("testcase"))
        assert len(cases) == len(rs)
        assert sum(1 for c in cases if c.find("failure") is not None) == sum(
            1 for r in rs if r.status == "fail")


@pytest.mark.parametrize("seed", range(4))
def test_textfile_is_valid_exposition_text(seed, tmp_path):
    promtool = shutil.which("promtool")
    for i, rs in enumerate(_batches(seed)):
        text = prometheus.render(rs, run_id="r1", started_at=0.0, duration_s=1.0)
        data = text.encode("utf-8")
        lines = text.split("\n")  # the format's only line break: a raw \r is label text
        status_lines = [ln for ln in lines if ln.startswith("stetho_check_status{")]
        # one status series per distinct (node, check, subject), every one of them written
        assert len(status_lines) == len({(r.node, r.check, r.subject) for r in rs})
        for line in lines:
            if line and not line.startswith("#"):
                sample = line.rsplit(" ", 1)[1]
                assert sample in ("NaN", "+Inf", "-Inf") or math.isfinite(float(sample)), line
        if promtool and i % 5 == 0:
            proc = subprocess.run([promtool, "check", "metrics"], input=data,
                                  capture_output=True, timeout=60)
            # promtool lints names too (exit 3 for lint only); a parse error is exit 1
            assert b"error while linting" not in proc.stderr + proc.stdout, proc.stderr[:500]
            assert proc.returncode in (0, 3), proc.stderr[:500]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        self.scripts += tag == "script"


@pytest.mark.parametrize("seed", range(4))
def test_run_page_is_writable_html_with_no_injected_markup(seed, tmp_path):
    clean = runpage.render([Result("gpu01", "gpu_clocks", "gpu0", "pass")], title="t")
    baseline = _Tags()
    baseline.feed(clean)
    for rs in _batches(seed):
        text = runpage.render(rs, title=rs[0].message)
        path = runpage.write(tmp_path, text)
        assert path.read_bytes().decode("utf-8") == text
        tags = _Tags()
        tags.feed(text)
        assert tags.scripts == baseline.scripts  # no value opened a script of its own
        assert "alert(1)</script>" not in text


@pytest.mark.parametrize("seed", range(4))
def test_terminal_table_holds_no_control_characters(seed):
    for rs in _batches(seed):
        for color in (False, True):
            text = table.render(rs, width=100, color=color)
            plain = re.sub(r"\x1b\[[0-9;]*m", "", text) if color else text  # rich's colours
            bad = [c for c in plain if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) <= 0x9f
                   or 0xd800 <= ord(c) <= 0xdfff]
            assert not bad, [hex(ord(c)) for c in bad[:5]]
            assert text.encode("utf-8")


@pytest.mark.parametrize("seed", range(3))
def test_history_records_and_reads_back_every_result(seed, tmp_path):
    db = tmp_path / "h.db"
    for i, rs in enumerate(_batches(seed, n=6, node="gpu01")):
        when = 1_700_000_000 + i
        with History(db) as h:
            h.record(f"run{i}", "check", [NodeRun("gpu01", "generic", rs, [])], when=when)
        with History(db) as h:
            t, run, back = h.latest_results(["gpu01"], max_age_s=60, now=when)["gpu01"]
        assert (t, run) == (when, f"run{i}")
        assert [r.status for r in back] == [r.status for r in rs]
        for got, r in zip(back, rs, strict=True):  # as written, or as stetho.sinks.safe wrote it
            assert got.message in (r.message, safe.text(r.message))


@pytest.mark.parametrize("seed", range(3))
def test_diagnosis_reports_are_written_for_failing_nodes(seed, tmp_path):
    for i, rs in enumerate(_batches(seed, n=6)):
        failing = [Result(**{**r.to_json(), "node": "gpu01", "status": "fail"}) for r in rs]
        written = diagnose_results(failing, run_dir=None, run=f"r{i}", out=tmp_path / str(i),
                                   alert=False)
        assert [d.node for d, _ in written] == ["gpu01"]
        assert written[0][1].read_text(encoding="utf-8").startswith("---")


def test_a_healthy_result_is_written_unchanged():
    """The fallback runs only for results that need it: a plain result is written as it is."""
    r = Result("gpu01", "gpu_clocks", "gpu0", "fail", "SM clock 1410 MHz", value=1410.0,
               unit="MHz", expected=1980, limit=1980.0, limit_op=">=")
    assert safe.clean(r) == r
    doc = json.loads(json_out.render([r]))
    assert doc["results"][0] == r.to_json()
    bad = Result("gpu01", "gpu_clocks", "gpu0", "fail", "a\udc80b", value=float("nan"))
    fixed = json.loads(json_out.render([r, bad]))["results"]
    assert fixed[0] == r.to_json()  # the good result beside it is untouched
    assert fixed[1]["message"] == "a\ufffdb" and fixed[1]["value"] == "NaN"
