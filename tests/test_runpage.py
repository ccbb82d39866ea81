"""The run page: one static index.html, failing nodes first, linked reports, the busbw chart,
hostile names escaped, no external asset; and loaded for real in headless Chromium."""

from __future__ import annotations

import dataclasses
from html.parser import HTMLParser
from pathlib import Path

import pytest

from stetho.results import Result
from stetho.sinks import runpage
from tests import services
from tests.services import sim_results

HOSTILE = ['<script>alert("x")</script>', '"><img src=x onerror=alert(1)>', "a&b'c",
           "</table><b>bold</b>"]
FAIL_RGB = tuple(int(runpage.COLOURS["fail"][i:i + 2], 16) for i in (1, 3, 5))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[Result]:
    return sim_results(tmp_path_factory.mktemp("pagesim"))


class Page(HTMLParser):
    """The elements of a page: (tag, attributes) in order, and its text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag
                and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


def test_grid_puts_failing_nodes_first_and_colours_cells(results):
    page = Page(runpage.render(results, title="sweep 1",
                               reports={"node02": "node02/diagnosis-report.md"}))
    rows = page.find("tr")
    order = [r["data-node"] for r in rows if "data-node" in r]
    assert order == ["node02", "node03", "node01"]  # fail, error, skip (not applicable)
    assert [r["data-worst"] for r in rows if "data-node" in r] == ["fail", "error", "skip"]
    cell = page.find("td", data_check="cpu_governor", data_status="fail")
    assert len(cell) == 1 and "s-fail" in cell[0]["class"]
    assert page.find("a", href="node02/diagnosis-report.md")
    checks = {r.check for r in results}
    assert len(page.find("th", **{"class": "c", "scope": "col"})) == len(checks)
    problems = [r for r in page.find("tr") if r.get("data-status") in ("fail", "error")]
    assert len(problems) == sum(r.status in ("fail", "error") for r in results)


def test_busbw_chart_against_baseline(results):
    busbw = runpage.busbw_from(results)
    assert busbw is not None and busbw.label == "allreduce@8GiB"
    # node03's nvidia-smi prints garbage: whether a job holds its GPUs cannot be told, so its
    # live nccl-tests (invasive) did not run and it has no bar (stetho.evidence.busy).
    assert set(busbw.values) == {"node01", "node02"} and busbw.baseline == 479.0
    page = Page(runpage.render(results, title="t", busbw=busbw))
    bars = {r["data-node"]: r for r in page.find("rect")}
    assert set(bars) == {"node01", "node02"}
    assert bars["node02"]["fill"] == runpage.COLOURS["fail"]   # 19% under baseline
    assert bars["node01"]["fill"] == runpage.COLOURS["pass"]
    assert page.find("line", id="baseline")
    assert runpage.busbw_from([r for r in results if r.check != "nccl_busbw"]) is None


def test_node_supplied_strings_are_escaped(results):
    evil = [dataclasses.replace(r, node=name, message=f"{name} {r.message}")
            for name in HOSTILE for r in results if r.node == "node02"]
    text = runpage.render(evil, title='<title>"x"', reports={n: f"{n}/report.md" for n in HOSTILE},
                          busbw=runpage.busbw_from(evil))
    page = Page(text)
    tags = {t for t, _ in page.elements}
    assert not tags & {"script", "img", "b", "iframe"}
    assert {r["data-node"] for r in page.find("tr") if "data-node" in r} == set(HOSTILE)
    for _, attrs in page.elements:
        assert not any(k.startswith("on") for k in attrs)
    assert any(HOSTILE[0] in t for t in page.text)


def test_links_stay_relative_and_nothing_is_fetched(results):
    text = runpage.render(results, title="t", reports={
        "node02": "javascript:alert(1)", "node01": "//evil.example/x", "node03": "n 3/r.md"},
        busbw=runpage.busbw_from(results))
    page = Page(text)
    hrefs = [a["href"] for t, a in page.elements if "href" in a]
    assert set(hrefs) == {"javascript%3Aalert%281%29", ".///evil.example/x", "n%203/r.md"}
    for tag, attrs in page.elements:
        assert tag not in ("script", "link", "img", "iframe", "object", "embed"), tag
        assert "src" not in attrs
    assert "@import" not in text and "url(" not in text
    assert "http:" not in text and "https:" not in text  # not even an SVG namespace


def test_an_unknown_status_reads_as_not_evaluated(results):
    """Fail closed: a status the page does not know ranks and colours its node as an error,
    never as healthy (and never folds it away with the healthy nodes)."""
    odd = [dataclasses.replace(r, status="bogus") for r in results if r.node == "node01"][:1]
    rest = [r for r in results if r.node == "node01"][1:]
    g = runpage.grid(odd + rest, {}, max_healthy=0)
    assert [(r.node, r.worst) for r in g.rows] == [("node01", "error")]
    assert g.collapsed is None


def test_no_results_is_a_page_too():
    page = Page(runpage.render([], title="empty"))
    assert page.find("table", id="grid") and not page.find("rect")


# -- in headless Chromium ------------------------------------------------------------------------

def _long_runs(path: Path, rgb: tuple[int, ...], min_run: int) -> int:
    """Horizontal runs of at least `min_run` pixels of exactly this colour: a grid cell (14
    px) shows as one; the legend's 12 px keys and 6 px chart bars do not."""
    _, bpp, rows = services.png_rows(path)
    target, runs = bytes(rgb), 0
    for row in rows:
        run = 0
        for x in range(0, len(row), bpp):
            if row[x:x + 3] == target:
                run += 1
                if run == min_run:
                    runs += 1
            else:
                run = 0
    return runs


@pytest.mark.slow
def test_chromium_shows_the_failing_node_in_the_fail_colour(results, tmp_path):
    reason = services.missing("chromium")
    if reason:
        pytest.skip(reason)
    evil = [dataclasses.replace(r, node=HOSTILE[0]) for r in results if r.node == "node01"]
    page = tmp_path / "index.html"
    page.write_text(runpage.render(results + evil, title="sweep run-1",
                                   reports={"node02": "node02/diagnosis-report.md"},
                                   busbw=runpage.busbw_from(results)))
    dom = Page(services.dump_dom(page, tmp_path / "chromium"))
    first = next(r for r in dom.find("tr") if "data-node" in r)
    assert first["data-node"] == "node02" and first["data-worst"] == "fail"
    cell = dom.find("td", data_check="cpu_governor", data_status="fail")
    assert len(cell) == 1 and "s-fail" in cell[0]["class"].split()
    assert not dom.find("script"), "a hostile node name became a script element"
    assert {r["data-node"] for r in dom.find("tr") if "data-node" in r} == {
        "node01", "node02", "node03", HOSTILE[0]}
    shot = services.screenshot(page, services.artifacts() / "run-page.png", tmp_path / "chromium",
                               size="1000,700")
    print(f"run page screenshot: {shot}")
    assert _long_runs(shot, FAIL_RGB, 13) >= 1, "no grid cell in the fail colour"

    healthy = tmp_path / "healthy.html"
    healthy.write_text(runpage.render([r for r in results if r.node == "node01"], title="ok"))
    calm = services.screenshot(healthy, services.artifacts() / "run-page-healthy.png",
                               tmp_path / "chromium",
                               size="1000,700")
    print(f"healthy page screenshot: {calm}")
    assert _long_runs(calm, FAIL_RGB, 13) == 0
    assert services.colour_count(calm, tuple(int(runpage.COLOURS["pass"][i:i + 2], 16)
                                             for i in (1, 3, 5))) > 1000


def test_reports_are_linked_relative_to_the_run_folder(tmp_path, results):
    run = tmp_path / "runs" / "r1"
    paths = {"node02": run / "reports" / "node02" / "diagnosis-report.md"}
    links = runpage.relative_reports(paths, run)
    assert links == {"node02": "reports/node02/diagnosis-report.md"}
    run.mkdir(parents=True)
    page = runpage.write(run, runpage.render(results, title="r1", reports=links))
    assert page == run / "index.html" and [p.name for p in run.iterdir()] == ["index.html"]
    assert Page(page.read_text()).find("a", href="reports/node02/diagnosis-report.md")


def test_a_thousand_healthy_nodes_are_one_counted_row_and_problem_nodes_stay_whole(results):
    """Past MAX_HEALTHY_ROWS healthy nodes the grid names them in one row (hostlist), so the
    failing and unevaluated nodes lead a readable page; under it every node has its row."""
    healthy = [r for r in results if r.node == "node01"]
    fleet = [dataclasses.replace(r, node=f"gpu{i:04d}") for i in range(1000) for r in healthy]
    fleet += [r for r in results if r.node != "node01"]
    page = Page(runpage.render(fleet, title="fleet"))
    rows = [r for r in page.find("tr") if "data-node" in r]
    assert [r["data-node"] for r in rows] == ["node02", "node03"]
    (folded,) = page.find("tr", data_collapsed="1000")
    assert "gpu[0000-0999]" in "".join(page.text)
    assert "1002 nodes, 2 failing or not evaluated" in "".join(page.text)
    few = Page(runpage.render(fleet[:len(healthy) * runpage.MAX_HEALTHY_ROWS], title="few"))
    assert len([r for r in few.find("tr") if "data-node" in r]) == runpage.MAX_HEALTHY_ROWS
    assert not few.find("tr", data_collapsed=str(runpage.MAX_HEALTHY_ROWS))
