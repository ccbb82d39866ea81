"""The gate's run page (stetho.sinks.gatepage), written without a template engine: one row per
node with `data-node`, every check that did not pass named, the problems listed, and every
value from a node escaped, every report link kept relative, whatever the node sent."""

from __future__ import annotations

from html.parser import HTMLParser

from stetho.results import Result
from stetho.sinks import gatepage

HOSTILE = '<script>alert(1)</script>"\'&'


class _Page(HTMLParser):
    """Tags with their attributes, and the text, as a browser would read them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    p.close()
    return p


def test_one_row_per_node_worst_first_problems_listed_passes_counted() -> None:
    results = [Result("gpu01", "gpu_count", "", "pass", "8 GPUs"),
               Result("gpu01", "gpu_ecc", "gpu0", "pass", "ok"),
               Result("gpu02", "gpu_count", "", "pass", "8 GPUs"),
               Result("gpu02", "gpu_ecc", "gpu3", "fail", "12 uncorrectable", value=12,
                      expected=0, remediation="replace the GPU"),
               Result("gpu03", "gate", "", "error", "no results younger than 6 h"),
               Result("gpu03", "cpu_governor", "", "warn", "ondemand")]
    page = _parse(gatepage.render(results, title="gate", reports={"gpu02": "reports/gpu02.md"}))
    rows = [a for t, a in page.tags if t == "tr" and "data-node" in a]
    assert [(a["data-node"], a["data-worst"]) for a in rows] == [
        ("gpu02", "fail"), ("gpu03", "error"), ("gpu01", "pass")]
    named = [(a["data-check"], a["data-status"]) for t, a in page.tags
             if t == "span" and "data-check" in a]
    assert named == [("gpu_ecc", "fail"), ("gate", "error"), ("cpu_governor", "warn")]
    problems = [a["data-status"] for t, a in page.tags if t == "tr" and "data-status" in a]
    assert problems == ["fail", "error"]
    assert ("a", {"href": "reports/gpu02.md"}) in page.tags
    text = "".join(page.text)
    assert "12 (expected 0)" in text and "replace the GPU" in text
    assert "2 pass" in text  # gpu01's passing results counted, not drawn one by one


def test_hostile_names_messages_and_links_stay_text() -> None:
    results = [Result(HOSTILE, HOSTILE, HOSTILE, "fail", HOSTILE, remediation=HOSTILE),
               Result("n02", "gpu_count", "", "error", "lone surrogate \ud800 here")]
    page = gatepage.render(results, title=HOSTILE,
                           reports={HOSTILE: "javascript:alert(1)", "n02": "//evil/x"})
    page.encode("utf-8")  # the lone surrogate did not cost the page
    parsed = _parse(page)
    assert not [t for t, _ in parsed.tags if t in ("script", "img")]
    hrefs = [a["href"] for t, a in parsed.tags if t == "a"]
    assert hrefs and all(h and not h.startswith(("javascript:", "//")) for h in hrefs)
    assert [a["data-node"] for t, a in parsed.tags if t == "tr" and "data-node" in a] == [
        HOSTILE, "n02"]
    assert HOSTILE in "".join(parsed.text)  # shown as the text it is
