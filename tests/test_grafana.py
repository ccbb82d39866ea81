"""The Grafana dashboards against the essentials of Grafana's dashboard schema (the classic
JSON model, kinds/dashboard/dashboard_kind.cue): uid and title, schemaVersion, panels with id,
type, gridPos inside the 24-column grid and targets, a templating list whose datasource
variable every query uses, and queries that name only metrics stetho writes. Their queries run
against a real Prometheus in test_prometheus_live.py."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from stetho.sinks import prometheus as P

REPO = Path(__file__).resolve().parent.parent
FOLDER = REPO / "contrib" / "grafana"
FILES = sorted(FOLDER.glob("*.json"))
#: Panel plugins that ship with Grafana (no plugin install needed to load the dashboards).
CORE_PANELS = {"stat", "table", "timeseries", "bargauge", "status-history", "state-timeline",
               "heatmap", "gauge", "text", "row", "barchart", "piechart"}
VARIABLE_TYPES = {"query", "adhoc", "constant", "datasource", "interval", "textbox", "custom",
                  "system"}
#: What a PromQL query may name besides stetho's metrics: functions, keywords, operators.
PROMQL_WORDS = {"count", "max", "min", "sum", "avg", "by", "without", "or", "and", "unless",
                "ignoring", "on", "bottomk", "topk", "time", "vector", "absent", "bool"}
EMITTED = {"stetho_check_status", "stetho_check_value", "stetho_check_threshold",
           "stetho_run_timestamp_seconds", "stetho_run_duration_seconds", "stetho_build_info",
           "stetho_gate_blocked", "stetho_bench_value"}
LABELS = {"node", "check", "subject", "metric", "unit", "kind", "policy", "command",
          "benchmark", "version", "__name__"}


def generator() -> Any:
    spec = importlib.util.spec_from_file_location("stetho_grafana", FOLDER / "generate.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_three_dashboards_shipped_as_generated():
    mod = generator()
    assert [p.name for p in FILES] == sorted(mod.DASHBOARDS)
    for path in FILES:
        assert path.read_text() == mod.text(mod.DASHBOARDS[path.name]), (
            f"{path.name} differs: python contrib/grafana/generate.py")


def test_the_renderer_emits_what_the_dashboards_assume():
    text = P.render([], run_id="r", started_at=0, duration_s=0, gate={"p": {"n": True}},
                    bench=[("n", "b", "m", "s", 1.0)])
    assert {n for n in EMITTED if n.startswith(("stetho_run", "stetho_build", "stetho_gate",
                                                "stetho_bench"))} <= set(
        re.findall(r"^# TYPE (\S+) gauge", text, re.M))


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_dashboard_schema_essentials(path):
    d = load(path)
    assert isinstance(d["uid"], str) and re.fullmatch(r"[A-Za-z0-9_-]{1,40}", d["uid"])
    assert isinstance(d["title"], str) and d["title"]
    assert isinstance(d["schemaVersion"], int) and 36 <= d["schemaVersion"] < 2 ** 16
    assert isinstance(d["editable"], bool) and d["graphTooltip"] in (0, 1, 2)
    assert set(d["time"]) == {"from", "to"}
    assert isinstance(d["annotations"]["list"], list)
    for link in d["links"]:
        assert link["type"] in ("link", "dashboards") and "title" in link
    variables = d["templating"]["list"]
    assert isinstance(variables, list) and variables
    names = [v["name"] for v in variables]
    assert len(names) == len(set(names))
    for v in variables:
        assert v["type"] in VARIABLE_TYPES and v["hide"] in (0, 1, 2)
    ds = [v for v in variables if v["type"] == "datasource"]
    assert [v["query"] for v in ds] == ["prometheus"], "one Prometheus datasource variable"
    ds_ref = {"type": "prometheus", "uid": "${" + ds[0]["name"] + "}"}
    for v in variables:
        if v["type"] == "query":
            assert v["datasource"] == ds_ref
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)
    boxes = []
    for p in d["panels"]:
        assert p["type"] in CORE_PANELS, p["type"]
        g = p["gridPos"]
        assert set(g) >= {"h", "w", "x", "y"}
        assert g["h"] > 0 and 0 < g["w"] <= 24 and 0 <= g["x"] < 24 and g["y"] >= 0
        assert g["x"] + g["w"] <= 24, (p["title"], g)
        boxes.append((g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"], p["title"]))
        assert p["datasource"] == ds_ref
        assert isinstance(p["fieldConfig"]["defaults"], dict)
        assert isinstance(p["fieldConfig"]["overrides"], list)
        assert isinstance(p["options"], dict) and isinstance(p["transformations"], list)
        refs = [t["refId"] for t in p["targets"]]
        assert p["targets"] and len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["datasource"] == ds_ref and t["expr"].strip()
        if "repeat" in p:
            assert p["repeat"] in names and p["repeatDirection"] in ("h", "v")
        for m in p["fieldConfig"]["defaults"].get("mappings", []):
            assert m["type"] == "value" and all(
                set(r) <= {"text", "color", "icon", "index"} for r in m["options"].values())
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            overlap = a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
            assert not overlap, f"panels {a[4]!r} and {b[4]!r} overlap"


def _names_in(expr: str) -> set[str]:
    """The identifiers a PromQL expression names, label matchers and strings left out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\(([^)]*)\)", r"\1", expr)
    return set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr))


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_queries_name_only_stetho_metrics_and_labels(path):
    d = load(path)
    variables = {v["name"] for v in d["templating"]["list"]}
    for p in d["panels"]:
        for t in p["targets"]:
            expr = t["expr"]
            names = _names_in(expr)
            assert names - PROMQL_WORDS <= EMITTED, (p["title"], names - PROMQL_WORDS)
            assert names & EMITTED, expr
            for label in re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)\s*\"", expr):
                assert label in LABELS, (p["title"], label)
            for grouped in re.findall(r"\b(?:by|ignoring|on)\s*\(([^)]*)\)", expr):
                assert {x.strip() for x in grouped.split(",")} <= LABELS, grouped
            for var in re.findall(r"\$(\w+)", expr):
                assert var in variables, (p["title"], var)
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            metric = re.search(r"label_values\((\w+)", v["definition"])
            assert metric and metric.group(1) in EMITTED


def test_the_three_views_operators_ask_for():
    fleet, node, anomalies = (load(FOLDER / n) for n in (
        "stetho-fleet.json", "stetho-node.json", "stetho-anomalies.json"))
    titles = {p["title"] for p in fleet["panels"]}
    assert {"Nodes × checks: worst status", "Nodes blocked",
            "NCCL busbw against baseline"} <= titles
    heat = next(p for p in fleet["panels"] if p["title"] == "Nodes × checks: worst status")
    assert heat["transformations"][0] == {"id": "groupingToMatrix", "options": {
        "columnField": "check", "rowField": "node", "valueField": "Value"}}
    assert "node" in {v["name"] for v in node["templating"]["list"]}
    repeated = next(p for p in node["panels"] if p.get("repeat") == "check")
    assert {t["expr"].split("{")[0] for t in repeated["targets"]} == {
        "stetho_check_value", "stetho_check_threshold"}
    newest = anomalies["panels"][0]
    sort = next(t for t in newest["transformations"] if t["id"] == "sortBy")
    assert sort["options"]["sort"] == [{"field": "Time (min)", "desc": True}]
