"""diagnosis-report.md and its trend SVG: the content a reader needs, in order, and nothing a
node can smuggle in. The report's text comes from the node being diagnosed, so most of these
tests render the Markdown to HTML (CommonMark plus tables, as a git web UI would) and look at
what came out: no live HTML, no links or headings that the data made, log lines still code."""

from __future__ import annotations

import html
import math
import os
import random
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from markdown_it import MarkdownIt

from stetho.diagnosis.model import (
    BenchmarkRow,
    Diagnosis,
    Evidence,
    Hypothesis,
    Similar,
    Trend,
)
from stetho.diagnosis.report import (
    fence,
    file_stem,
    md,
    md_block,
    render_markdown,
    write,
    yaml_value,
)
from stetho.diagnosis.svg import render_trend
from stetho.results import Result

SVG = "{http://www.w3.org/2000/svg}"
DAY = 86400.0
T0 = 1748736000.0  # 2025-06-01T00:00:00Z

#: Top-down: what to do and why first (the first screen), then what was ruled out, then the
#: details, full tables and history.
SECTIONS = ["What to do", "Strongest evidence", "Ruled out by evidence", "Not supported",
            "Also found", "Evidence chain",
            "Reproduce", "Logs", "Trend", "Failing checks", "Benchmark against baseline",
            "Phenomenon", "Root cause", "Fix", "Prevention", "Earlier reports of this node",
            "Similar incidents on other nodes", "Ticket"]
FRONT_KEYS = ["id", "date", "node", "cause", "cause_title", "status", "disposition", "severity",
              "run", "signature", "event", "checks", "assets"]

AER_LOGS = (
    "[81234.112233] pcieport 0000:3a:00.0: AER: Corrected error received: 0000:3b:00.0",
    "[81234.112250] nvidia 0000:3b:00.0: PCIe Bus Error: severity=Corrected, "
    "type=Physical Layer, (Receiver ID)",
    "[81234.112262] nvidia 0000:3b:00.0:   device [10de:2330] error status/mask=00000001/0000e000",
    "[81234.112270] nvidia 0000:3b:00.0:    [ 0] RxErr                  (First)",
)


def _renderer() -> MarkdownIt:
    return MarkdownIt("commonmark").enable("table")


class Html(HTMLParser):
    """What a rendered report holds: headings, tables, code blocks, links and images."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.headings: list[tuple[int, str]] = []
        self.pres: list[str] = []
        self.tables: list[list[list[str]]] = []
        self.links: list[tuple[str | None, str]] = []
        self._text: list[str] | None = None
        self._stack: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._stack.append(tag)
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6", "pre", "td", "th", "a"):
            self._text = []
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag == "a":
            self._href = dict(attrs).get("href")

    def handle_endtag(self, tag: str) -> None:
        if self._stack and self._stack[-1] == tag:
            self._stack.pop()
        text = "".join(self._text or [])
        if tag[:1] == "h" and tag[1:].isdigit():
            self.headings.append((int(tag[1:]), text))
        elif tag == "pre":
            self.pres.append(text)
        elif tag in ("td", "th"):
            self.tables[-1][-1].append(text)
        elif tag == "a":
            self.links.append((self._href, text))
            return
        else:
            return
        self._text = None

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)

    def names(self) -> list[str]:
        return [t for t, _ in self.tags]


def front_matter(text: str) -> tuple[list[str], dict[str, object]]:
    m = re.match(r"\A---\n(.*?)^---\n", text, re.S | re.M)
    assert m, text[:200]
    head = m.group(1)
    data = yaml.safe_load(head)
    assert isinstance(data, dict)
    return [line.split(":", 1)[0] for line in head.splitlines()], data


def body(text: str) -> str:
    return re.sub(r"\A---\n.*?^---\n", "", text, count=1, flags=re.S | re.M)


def rendered(text: str) -> Html:
    return Html(_renderer().render(body(text)))


# -- diagnoses built by hand ---------------------------------------------------------------------

def riser() -> Diagnosis:
    """A riser card going bad: AER corrected errors, the link trained down, busbw drop, and a
    hot GPU beside it (a rival hypothesis that scores lower)."""
    node = "gpu-a17"
    failing = (
        Result(node, "pcie_aer", "0000:3b:00.0", "fail",
               "corrected AER errors rising on the GPU's upstream port", 1840, "errors/h", 0,
               threshold=10, remediation="Reseat the riser card of slot 3"),
        Result(node, "pcie_link", "0000:3b:00.0", "fail", "link trained at x8, expected x16",
               "x8", None, "x16", remediation="Reseat the riser; replace it if still x8"),
        Result(node, "nccl_busbw", "allreduce@8GiB", "fail", "busbw 25% under baseline",
               142.3, "GB/s", 190.0, remediation="See the PCIe checks first"),
        Result(node, "gpu_temperature", "GPU3", "warn", "GPU3 at 87 C under load", 87, "C",
               None, threshold=85, remediation="Check the chassis fans and airflow"),
    )
    top = Hypothesis(
        cause="riser-pcie-slot", title="Riser card / PCIe slot", score=0.86,
        evidence=(
            Evidence("aer_corrected", "1840 corrected AER errors per hour on 0000:3b:00.0",
                     0.4, check="pcie_aer", subject="0000:3b:00.0", value="1840 errors/h",
                     expected="0 errors/h", log_line=AER_LOGS[0],
                     command="journalctl -k --since -1h | grep -c 'AER: Corrected'"),
            Evidence("pcie_link_degraded", "the GPU's link trained at x8 instead of x16", 0.35,
                     check="pcie_link", subject="0000:3b:00.0", value="x8", expected="x16",
                     log_line="LnkSta: Speed 16GT/s (ok), Width x8 (downgraded)",
                     command="lspci -vv -s 3b:00.0 | grep LnkSta"),
            Evidence("busbw_drop", "allreduce bus bandwidth 25% below the baseline", 0.11,
                     check="nccl_busbw", subject="allreduce@8GiB", value="142.3 GB/s",
                     expected="190 GB/s", command="stetho check --only nccl_busbw"),
        ),
        action="Drain gpu-a17. Reseat the riser card of PCIe slot 3 (GPU3).\n"
               "Replace the riser if the link still trains at x8.",
        ticket="gpu-a17: reseat/replace riser of PCIe slot 3 (GPU3, 0000:3b:00.0).\n"
               "AER corrected errors 1840/h, link x8 instead of x16, busbw -25%.",
    )
    thermal = Hypothesis(
        cause="gpu-thermal", title="GPU overheating", score=0.35,
        evidence=(Evidence("gpu_temp_high", "GPU3 above 85 C under load", 0.35,
                           check="gpu_temperature", subject="GPU3", value="87 C",
                           expected="85 C"),),
        action="Check fans.", ticket="gpu-a17: GPU3 hot")
    nvlink = Hypothesis(
        cause="nvlink-degraded", title="NVLink degraded", score=0.0, evidence=(),
        action="Reseat the NVLink bridge.", ticket="nvlink",
        falsified=("NVLink CRC and replay counters are zero",
                   "busbw within one NVLink island is at baseline"), basis="evidence",
        ruled_out_by=(Evidence("nvlink_clean", "NVLink CRC and replay counters 0 on 18 links",
                               0.0, status="pass"),))
    return Diagnosis(
        id="rpt-20250601T0312Z-gpu-a17-4c1d", node=node, run="20250601T0310Z-7f2a",
        date="2025-06-01T03:12:44Z", profile="h100-sxm", verdict="fail",
        gate="blocked by pre-job: 3 failing checks",
        phenomenon="allreduce bus bandwidth on gpu-a17 fell 25% below the baseline while "
                   "corrected PCIe errors climbed on GPU3.",
        failing=failing, hypotheses=(top, thermal), falsified=(nvlink,),
        benchmarks=(BenchmarkRow("allreduce busbw @ 8 GiB", "190.0 GB/s", "142.3 GB/s", -25.1,
                                 "fail"),
                    BenchmarkRow("h2d bandwidth GPU3", "25.1 GB/s", "12.4 GB/s", -50.6, "fail"),
                    BenchmarkRow("GEMM bf16 GPU3", "989 TFLOPS", "975 TFLOPS", None, "pass")),
        logs=AER_LOGS,
        reproduce=("stetho check --only pcie_aer,pcie_link,nccl_busbw",
                   "lspci -vv -s 3b:00.0 | grep -E 'LnkCap|LnkSta'"),
        prevention=("Torque-check riser screws at every chassis service",
                    "Alert on corrected AER errors above 10 per hour"),
        trend=Trend("pcie_aer corrected errors", "errors/h",
                    tuple((T0 - (29 - i) * DAY, float(i * i * 2)) for i in range(30)),
                    threshold=10.0, baseline=0.0),
        similar=(Similar("rpt-20250412T0310Z-gpu-a17-9f3e", "2025-04-12", "gpu-a17",
                         "riser-pcie-slot",
                         "../../04/12/gpu-a17-riser-pcie-slot-rpt-20250412T0310Z-gpu-a17-9f3e.md",
                         0.92),),
    )


def undiagnosed() -> Diagnosis:
    return Diagnosis(
        id="rpt-20250602T0100Z-gpu-b03-77aa", node="gpu-b03", run="20250602T0058Z-1b2c",
        date="2025-06-02T01:00:05Z", profile="generic", verdict="error",
        gate="blocked by nightly: 1 check could not run",
        phenomenon="The NCCL test did not finish.",
        failing=(Result("gpu-b03", "nccl_allreduce", "all", "error", "timed out after 300 s"),),
        hypotheses=(), falsified=())


# -- content --------------------------------------------------------------------------------------

def test_front_matter_has_the_exact_fields_and_values() -> None:
    d = riser()
    stem = file_stem(d)
    text = render_markdown(d, f"{stem}-trend.svg")
    keys, data = front_matter(text)
    assert keys == FRONT_KEYS
    assert data == {
        "id": "rpt-20250601T0312Z-gpu-a17-4c1d",
        "date": "2025-06-01T03:12:44Z",
        "node": "gpu-a17",
        "cause": "riser-pcie-slot",
        "cause_title": "Riser card / PCIe slot",
        "status": "open",
        "disposition": "drain",
        "severity": "medium",
        "run": "20250601T0310Z-7f2a",
        "signature": ["aer_corrected", "busbw_drop", "gpu_temperature", "nccl_busbw",
                      "pcie_aer", "pcie_link", "pcie_link_degraded"],
        "event": d.event,
        "checks": ["gpu_temperature", "nccl_busbw", "pcie_aer", "pcie_link"],
        "assets": ["gpu-a17-riser-pcie-slot-rpt-20250601T0312Z-gpu-a17-4c1d-trend.svg"],
    }
    assert data["signature"] == list(d.signature)
    assert len(d.event) == 12 and d.event == riser().event  # same evidence, same event
    # Plain where YAML reads it back unchanged, as the knowledge base's examples are written.
    assert "\nnode: gpu-a17\n" in text and "\ncause: riser-pcie-slot\n" in text


def test_undiagnosed_front_matter_and_sections() -> None:
    d = undiagnosed()
    text = render_markdown(d, None)
    keys, data = front_matter(text)
    assert keys == FRONT_KEYS
    assert data == {"id": d.id, "date": "2025-06-02T01:00:05Z", "node": "gpu-b03",
                    "cause": "undiagnosed", "cause_title": "Undiagnosed", "status": "open",
                    "disposition": "drain", "severity": "unknown",
                    "run": "20250602T0058Z-1b2c", "signature": ["nccl_allreduce"],
                    "event": "", "checks": ["nccl_allreduce"], "assets": []}
    doc = rendered(text)
    assert [h for lvl, h in doc.headings if lvl == 2] == SECTIONS
    b = body(text)
    assert "No benchmark was run" in b
    assert "No history" in b and "![" not in b
    assert "the node is undiagnosed" in b
    assert "Undiagnosed: no known cause" in b
    similar = b.split("## Similar incidents on other nodes", 1)[1].split("##", 1)[0]
    assert similar.strip() == "None."
    assert doc.tables == [[["Check", "Subject", "Status", "Message", "Value vs expected",
                            "Remediation"],
                           ["nccl_allreduce", "all", "error", "timed out after 300 s", "", ""]]]
    assert "nccl_allreduce" in doc.pres[-1]  # the ticket says what failed


def test_sections_are_present_in_order() -> None:
    d = riser()
    doc = rendered(render_markdown(d, "chart.svg"))
    assert [h for lvl, h in doc.headings if lvl == 1] == [
        "Diagnosis report: gpu-a17, Riser card / PCIe slot"]
    assert [h for lvl, h in doc.headings if lvl == 2] == SECTIONS
    assert [h for lvl, h in doc.headings if lvl == 3] == [
        "Evidence 1: aer_corrected (weight 0.40)",
        "Evidence 2: pcie_link_degraded (weight 0.35)",
        "Evidence 3: busbw_drop (weight 0.11)",
        "Other hypotheses ranked"]


def test_tables_hold_the_failing_checks_and_benchmarks() -> None:
    doc = rendered(render_markdown(riser(), None))
    strongest, failing, bench = doc.tables
    assert strongest[0] == ["Evidence", "Seen", "Expected"]
    assert strongest[1] == ["1840 corrected AER errors per hour on 0000:3b:00.0",
                            "1840 errors/h", "0 errors/h"]
    assert failing[0] == ["Check", "Subject", "Status", "Message", "Value vs expected",
                          "Remediation"]
    assert failing[1] == ["pcie_aer", "0000:3b:00.0", "fail",
                          "corrected AER errors rising on the GPU's upstream port",
                          "1840 errors/h vs 0 errors/h", "Reseat the riser card of slot 3"]
    assert failing[2][4] == "x8 vs x16"
    assert failing[3][4] == "142.3 GB/s vs 190 GB/s"
    assert failing[4][:3] == ["gpu_temperature", "GPU3", "warn"]
    assert failing[4][4] == "87 C vs threshold 85 C"
    assert bench == [["Metric", "Baseline", "Current", "Delta", "Status"],
                     ["allreduce busbw @ 8 GiB", "190.0 GB/s", "142.3 GB/s", "-25.1 %", "fail"],
                     ["h2d bandwidth GPU3", "25.1 GB/s", "12.4 GB/s", "-50.6 %", "fail"],
                     ["GEMM bf16 GPU3", "989 TFLOPS", "975 TFLOPS", "n/a", "pass"]]


def test_evidence_chain_logs_reproduce_fix_and_ticket() -> None:
    d = riser()
    text = render_markdown(d, "c.svg")
    doc = rendered(text)
    b = body(text)
    chain = b.split("## Evidence chain", 1)[1].split("## Reproduce", 1)[0]
    # Evidence in order, each with its log line and command as code.
    assert chain.index("aer\\_corrected") < chain.index("pcie\\_link\\_degraded") \
        < chain.index("busbw\\_drop")
    assert AER_LOGS[0] + "\n" in doc.pres
    assert "journalctl -k --since -1h | grep -c 'AER: Corrected'\n" in doc.pres
    assert "lspci -vv -s 3b:00.0 | grep LnkSta\n" in doc.pres
    assert "Value vs expected: x8 vs x16" in html.unescape(_renderer().render(chain))
    assert "**GPU overheating** (gpu\\-thermal), score 0.35" in chain
    falsified = b.split("## Ruled out by evidence", 1)[1].split("##", 1)[0]
    assert "NVLink degraded" in falsified and "CRC and replay counters are zero" in falsified
    assert "measured: NVLink CRC and replay counters 0 on 18 links" in falsified
    assert "\n".join(AER_LOGS) + "\n" in doc.pres  # the Logs section, every line
    assert "\n".join(d.reproduce) + "\n" in doc.pres
    assert doc.pres[-1] == d.top.ticket + "\n" if d.top else False
    root = b.split("## Root cause", 1)[1].split("##", 1)[0]
    assert "**Riser card / PCIe slot** (riser\\-pcie\\-slot), score 0.86" in root
    fix = html.unescape(_renderer().render(b.split("## Fix", 1)[1].split("##", 1)[0]))
    assert "Reseat the riser card of PCIe slot 3 (GPU3).<br />\nReplace the riser" in fix
    prevention = b.split("## Prevention", 1)[1].split("##", 1)[0]
    assert prevention.strip().splitlines() == [
        "- Torque\\-check riser screws at every chassis service",
        "- Alert on corrected AER errors above 10 per hour"]
    assert "![pcie\\_aer corrected errors over the last 30 days](c.svg)" in b
    assert ("rpt-20250412T0310Z-gpu-a17-9f3e",
            "rpt-20250412T0310Z-gpu-a17-9f3e") in [(t, t) for _, t in doc.links]
    assert doc.links == [("../../04/12/gpu-a17-riser-pcie-slot-rpt-20250412T0310Z-gpu-a17-9f3e.md",
                          "rpt-20250412T0310Z-gpu-a17-9f3e")]


def test_write_puts_report_and_chart_side_by_side(tmp_path: Path) -> None:
    d = riser()
    out = tmp_path / "reports"
    path = write(d, out)
    stem = "gpu-a17-riser-pcie-slot-rpt-20250601T0312Z-gpu-a17-4c1d"
    assert path == out / f"{stem}.md"
    assert sorted(p.name for p in out.iterdir()) == [f"{stem}-trend.svg", f"{stem}.md"]
    text = path.read_text(encoding="utf-8")
    assert text == render_markdown(d, f"{stem}-trend.svg")
    assert f"]({stem}-trend.svg)" in text
    ET.fromstring((out / f"{stem}-trend.svg").read_text(encoding="utf-8"))
    umask = os.umask(0o022)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # readable as the umask allows
    # Rewriting replaces both files in place, leaving no temp files behind.
    write(d, out)
    assert len(list(out.iterdir())) == 2


def test_write_without_trend_writes_only_the_report(tmp_path: Path) -> None:
    d = undiagnosed()
    path = write(d, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    assert path.name == "gpu-b03-undiagnosed-rpt-20250602T0100Z-gpu-b03-77aa.md"


def test_written_report_is_readable_by_the_knowledge_base(tmp_path: Path) -> None:
    from stetho.publish.kb import read_report

    d = riser()
    meta = read_report(write(d, tmp_path))
    assert (meta.id, meta.node, meta.cause, meta.cause_title) == (
        d.id, d.node, "riser-pcie-slot", "Riser card / PCIe slot")
    assert meta.checks == ("gpu_temperature", "nccl_busbw", "pcie_aer", "pcie_link")
    assert meta.assets == (f"{file_stem(d)}-trend.svg",)
    assert meta.date.isoformat() == "2025-06-01T03:12:44+00:00"


@pytest.mark.parametrize("node, expected", [
    ("../../etc/passwd", "_._.._etc_passwd-undiagnosed-rpt-1"),
    (".hidden", "_hidden-undiagnosed-rpt-1"),
    ("gpu 01/a:b", "gpu_01_a_b-undiagnosed-rpt-1"),
])
def test_file_stem_is_a_plain_file_name(node: str, expected: str) -> None:
    d = Diagnosis(id="rpt-1", node=node, run="r", date="2025-01-01T00:00:00Z", profile="p",
                  verdict="fail", gate="g", phenomenon="p", failing=(), hypotheses=(),
                  falsified=())
    assert file_stem(d) == expected


def test_file_stem_of_a_huge_node_name_stays_short_and_distinct() -> None:
    def stem(node: str) -> str:
        return file_stem(Diagnosis(id="x", node=node, run="r", date="d", profile="p",
                                   verdict="fail", gate="g", phenomenon="p", failing=(),
                                   hypotheses=(), falsified=()))
    a, b = stem("n" * 400 + "a"), stem("n" * 400 + "b")
    assert len(a) <= 200 and len(b) <= 200 and a != b
    assert re.fullmatch(r"[A-Za-z0-9._-]+", a)


# -- the SVG ---------------------------------------------------------------------------------------

def _svg(trend: Trend) -> tuple[str, ET.Element]:
    text = render_trend(trend)
    return text, ET.fromstring(text)


def test_svg_plots_every_point_with_threshold_and_baseline() -> None:
    trend = riser().trend
    assert trend is not None
    text, root = _svg(trend)
    assert root.tag == f"{SVG}svg"
    (line,) = root.iter(f"{SVG}polyline")
    coords = line.get("points", "").split()
    assert len(coords) == len(trend.points) == 30
    assert len(list(root.iter(f"{SVG}circle"))) == 30
    xs = [float(c.split(",")[0]) for c in coords]
    assert xs == sorted(xs) and len(set(xs)) == 30
    lines = {ln.get("class"): ln for ln in root.iter(f"{SVG}line")}
    assert lines["threshold"].get("stroke-dasharray") == "6 4"
    assert lines["baseline"].get("stroke-dasharray") == "2 3"
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "threshold 10 errors/h" in texts and "baseline 0 errors/h" in texts
    assert "errors/h" in texts  # the y axis' unit
    dates = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "xtick"]
    assert 2 <= len(dates) <= 7 and all(re.fullmatch(r"2025-0[56]-\d\d", d or "") for d in dates)
    assert len([t for t in root.iter(f"{SVG}text") if t.get("class") == "ytick"]) >= 3
    # Standalone: nothing to fetch, nothing to run.
    assert "<script" not in text and "href" not in text and "<style" not in text
    assert "<foreignObject" not in text


def test_svg_escapes_text_from_data() -> None:
    metric = 'busbw <b>"allreduce"</b> & co\x1b[31m'
    text, root = _svg(Trend(metric, "GB/s<x>", ((T0, 1.0), (T0 + DAY, 2.0)), threshold=1.5))
    assert "<b>" not in text and "&lt;b&gt;" in text and "&amp; co" in text
    assert "\x1b" not in text
    title = root.find(f"{SVG}title")
    assert title is not None and title.text is not None
    assert title.text.startswith('busbw <b>"allreduce"</b> & co\ufffd[31m (GB/s<x>)')


@pytest.mark.parametrize("points", [
    (),
    ((T0, 5.0),),
    ((T0, 5.0), (T0 + DAY, 5.0), (T0 + 2 * DAY, 5.0)),  # flat
    ((T0, 0.0), (T0, 0.0)),  # one instant, twice
    ((T0, 3.0), (T0 + 3600, float("nan")), (T0 + 7200, 4.0)),
])
def test_svg_handles_degenerate_series(points: tuple[tuple[float, float], ...]) -> None:
    text, root = _svg(Trend("m", "u", points, threshold=5.0))
    polylines = list(root.iter(f"{SVG}polyline"))
    finite = [p for p in points if p[1] == p[1]]
    if finite:
        assert len(polylines[0].get("points", "").split()) == len(finite)
    else:
        assert polylines == [] and "no data" in text
    for el in root.iter():
        for name in ("x", "y", "x1", "y1", "x2", "y2", "cx", "cy"):
            if el.get(name) is not None:
                assert math.isfinite(float(el.get(name, ""))), (el.tag, name, el.get(name))
        for pair in el.get("points", "").split():
            assert all(math.isfinite(float(c)) for c in pair.split(","))


# -- hostile input ---------------------------------------------------------------------------------

HOSTILE = [
    "# heading",
    "**bold** and _under_ ~~strike~~",
    "[link](http://evil)",
    "| pipe | cell |",
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "x ``` y",
    "```` four",
    "1. ordered",
    "=====",
    "- item",
    "> quote",
    "<http://evil>",
    "see http://evil and www.evil.example and root@evil.example",
    "&lt;script&gt; &amp; &#60;",
    "![img](http://evil/x.png)",
    "trailing backslash \\",
    "$x^2$ math",
    "[ref]: http://evil",
]


def hostile() -> Diagnosis:
    """Every field a node can influence carries Markdown, HTML or fence breakers."""
    h = "\n".join(HOSTILE)
    logs = ("before the run", "```", "still code after three backticks", "````",
            "still code after four", "<script>alert(1)</script>",
            "<img src=x onerror=alert(1)>", "# heading", "[link](http://evil)",
            "\x1b[2J\x1b[31mterminal escape", "last line")
    evidence = Evidence("sig_<script>", h, 0.5, check="c|1", subject="s <img src=x>",
                        value="**1** | 2", expected="<b>3</b>", log_line="```\n# not a heading",
                        command="echo ```` && echo <script>alert(1)</script>")
    top = Hypothesis("riser-pcie-slot", "Riser <script>alert(1)</script> | # x", 0.9,
                     (evidence,), action=h, ticket="ticket ``` with\n# a heading\n~~~")
    other = Hypothesis("other", "[link](http://evil)", 0.2, (evidence,), "a", "t")
    ruled = Hypothesis("ruled", "<img src=x onerror=alert(1)>", 0.0, (), "a", "t",
                       falsified=tuple(HOSTILE))
    return Diagnosis(
        id="rpt-1-gpu-x-00", node="gpu-x", run='r: 1 "q" [b] {c} #d\n---\nid: evil',
        date="2025-06-01T00:00:00Z", profile="<script>alert(1)</script>", verdict="fail",
        gate=h, phenomenon=h,
        failing=tuple(Result("gpu-x", f"check{i}", s, "fail", s, s, None, s, remediation=s)
                      for i, s in enumerate(HOSTILE)),
        hypotheses=(top, other), falsified=(ruled,),
        benchmarks=tuple(BenchmarkRow(s, s, s, -1.0, s) for s in HOSTILE),
        logs=logs, reproduce=("echo ``` &&", "# heading", "<script>alert(1)</script>"),
        prevention=tuple(HOSTILE), status='open: "maybe" [x]',
        trend=Trend("<script>alert(1)</script> & [x](http://evil)", "u<>", ((T0, 1.0),)),
        similar=(Similar("[x](http://evil)", "d", "n", "c", "javascript:alert(1)", 0.5),
                 Similar("ok", "d", "n", "c", "JaVa\tScRiPt:alert(1)", 0.5),
                 Similar("ok2", "d", "n", "c", "&#106;avascript:alert(1)", 0.5),
                 Similar("ok3", "d", "n", "c", "../x (1).md", 0.5),
                 Similar("ok4", "d", "n", "c", "https://kb.example/r?a=1&b=2", 0.5)),
    )


def test_hostile_input_renders_inert() -> None:
    d = hostile()
    text = render_markdown(d, "gpu-x-trend.svg")
    out = _renderer().render(body(text))
    doc = Html(out)
    assert "<script" not in out
    assert "<img src=x" not in out
    assert not [k for _, attrs in doc.tags for k in attrs if k.startswith("on")]
    assert [a for t, a in doc.tags if t == "img"] == [
        {"src": "gpu-x-trend.svg",
         "alt": "<script>alert(1)</script> & [x](http://evil) over the last 30 days"}]
    hrefs = [href for href, _ in doc.links]
    assert hrefs == ["../x%20%281%29.md", "https://kb.example/r?a=1&b=2"]
    assert '<a href="http://evil' not in out and "javascript" not in " ".join(hrefs).lower()
    # The only headings are the report's own.
    assert [h for lvl, h in doc.headings if lvl == 1] == [
        "Diagnosis report: gpu-x, Riser <script>alert(1)</script> | # x"]
    assert [h for lvl, h in doc.headings if lvl == 2] == SECTIONS
    assert [h for lvl, h in doc.headings if lvl == 3] == [
        "Evidence 1: sig_<script> (weight 0.50)", "Other hypotheses ranked"]
    assert set(doc.names()) <= {"h1", "h2", "h3", "p", "strong", "table", "thead", "tbody",
                                "tr", "th", "td", "ul", "li", "pre", "code", "a", "img", "br"}
    # The hostile text is still there, as text.
    visible = html.unescape(out)
    for s in ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "**bold**",
              "[link](http://evil)", "| pipe | cell |", "# heading", "x ``` y"):
        assert s in visible
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    # Each failing check is one table row of six cells, whatever its text holds.
    failing = doc.tables[1]
    assert len(failing) == 1 + len(HOSTILE) and all(len(row) == 6 for row in failing)
    assert [row[1] for row in failing[1:]] == [s.strip() for s in HOSTILE]
    bench = doc.tables[2]
    assert [row[0] for row in bench[1:]] == [s.strip() for s in HOSTILE]


def test_backtick_runs_do_not_close_the_fence() -> None:
    d = hostile()
    doc = rendered(render_markdown(d, None))
    logs = [p for p in doc.pres if p.startswith("before the run")]
    assert logs == ["before the run\n```\nstill code after three backticks\n````\n"
                    "still code after four\n<script>alert(1)</script>\n"
                    "<img src=x onerror=alert(1)>\n# heading\n[link](http://evil)\n"
                    "\u241b[2J\u241b[31mterminal escape\nlast line\n"]
    assert "```\n# not a heading\n" in doc.pres
    assert "echo ```` && echo <script>alert(1)</script>\n" in doc.pres
    assert "echo ``` &&\n# heading\n<script>alert(1)</script>\n" in doc.pres
    assert doc.pres[-1] == "ticket ``` with\n# a heading\n~~~\n"


def test_hostile_front_matter_stays_yaml() -> None:
    d = hostile()
    text = render_markdown(d, None)
    keys, data = front_matter(text)
    assert keys == FRONT_KEYS
    assert data["run"] == d.run and data["status"] == d.status
    assert data["cause_title"] == "Riser <script>alert(1)</script> | # x"
    assert data["id"] == "rpt-1-gpu-x-00"
    assert data["assets"] == []
    assert "\x1b" not in text


def test_no_image_at_all_without_a_chart() -> None:
    out = _renderer().render(body(render_markdown(hostile(), None)))
    assert "<img" not in out and "<script" not in out


# -- the filters, on arbitrary text ----------------------------------------------------------------

_ALPHABET = list("\\`*_[]()#+-!|<>&~$:@=.!\"'{}/ \tabc1290\n") + ["www.", "http://", "```",
                                                                    "&amp;", "<a>", "\u00e9"]


def _random_texts(n: int) -> list[str]:
    rng = random.Random(20250601)
    return HOSTILE + ["".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 24)))
                      for _ in range(n)]


def _plain(s: str) -> str:
    return re.sub(r"\r\n|[\r\n]", " ", s).strip()


@pytest.mark.parametrize("context", ["{}", "- {}", "| h |\n|---|\n| {} |", "# {}"])
def test_md_renders_any_text_literally(context: str) -> None:
    r = _renderer()
    for s in _random_texts(400):
        out = r.render(context.format(md(s)))
        tags = set(re.findall(r"</?([a-z0-9]+)", out))
        assert tags <= {"p", "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "h1"}, (
            s, out)
        text = re.sub(r"<[^>]*>", "", out)
        if context.startswith("|"):
            text = text.replace("\nh\n", "", 1)
        assert html.unescape(text).strip() == _plain(s), (s, out)


def test_md_block_keeps_lines_and_renders_them_literally() -> None:
    r = _renderer()
    texts = _random_texts(300)
    for i in range(0, len(texts), 4):
        s = "\n".join(texts[i:i + 4])
        out = r.render(md_block(s))
        assert set(re.findall(r"</?([a-z0-9]+)", out)) <= {"p", "br"}, (s, out)
        shown = [html.unescape(part).strip()
                 for part in re.split(r"<br />|</?p>", out) if part.strip()]
        assert shown == [ln.strip() for ln in re.split(r"\r\n|[\r\n]", s) if ln.strip()], (
            s, out)


def test_fence_holds_any_lines_verbatim() -> None:
    r = _renderer()
    texts = _random_texts(300)
    for i in range(0, len(texts), 3):
        lines = [t.replace("\t", " ") for t in texts[i:i + 3]]
        out = r.render(fence(lines, "text") + "\n\nafter")
        assert out.count("<pre>") == 1 and out.endswith("<p>after</p>\n"), (lines, out)
        code = re.fullmatch(r'<pre><code class="language-text">(.*)</code></pre>\n<p>after</p>\n',
                            out, re.S)
        assert code, out
        assert html.unescape(code.group(1)) == "\n".join(
            ln for t in lines for ln in re.split(r"\r\n|[\r\n]", t)) + "\n"


def test_yaml_value_reads_back_exactly() -> None:
    for s in _random_texts(300) + ["yes", "null", "1.5", "2025-01-01", "~", "a\u2028b",
                                   "\ufeffbom", "tab\there", "\x85nel", "\U0001f600"]:
        assert yaml.safe_load(f"k: {yaml_value(s)}\n") == {"k": s}, s
    assert yaml_value("gpu-a17") == "gpu-a17"
    assert yaml_value(["a", "b: c", "[d]"]) == '[a, "b: c", "[d]"]'
    assert yaml.safe_load(f"k: {yaml_value(['a', 'b: c', '[d]'])}") == {"k": ["a", "b: c", "[d]"]}
