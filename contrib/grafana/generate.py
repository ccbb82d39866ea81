"""Build the three stetho Grafana dashboards (fleet overview, node detail, anomalies) as JSON.

The shipped `*.json` beside this file are its output; a test checks they are equal, that they
hold Grafana's dashboard schema essentials, and runs every query against a real Prometheus
scraping stetho's textfile. Edit this file, then:

    python contrib/grafana/generate.py          # rewrites contrib/grafana/*.json

The dashboards query only the metrics `stetho.sinks.prometheus` writes. The datasource is a
templating variable (`datasource`, type datasource), so the files import or provision
unmodified into any Grafana with a Prometheus datasource.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}
#: stetho_check_status codes (0 pass, 1 warn, 2 fail, 3 error, 4 skip) re-ranked worst-high,
#: so that max() over a node's subjects is its worst status: 4 fail, 3 error, 2 warn, 1 skip,
#: 0 pass. Each series passes exactly one filter, so `or` never drops one.
S = "stetho_check_status{SEL}"
RANK = ("(" + S + " == 2) * 2 or (" + S + " == 3) or (" + S + " == 1) * 2 or (" + S
        + " == 4) / 4 or (" + S + " == 0)")
RANK_MAP = [(0, "pass", "green"), (1, "skip", "#c7c7c7"), (2, "warn", "yellow"),
            (3, "error", "purple"), (4, "fail", "red")]
STATUS_MAP = [(0, "pass", "green"), (1, "warn", "yellow"), (2, "fail", "red"),
              (3, "error", "purple"), (4, "skip", "#c7c7c7")]


def rank(selector: str = "") -> str:
    return RANK.replace("{SEL}", "{" + selector + "}" if selector else "")


def mappings(table: list[tuple[int, str, str]]) -> list[dict[str, Any]]:
    return [{"type": "value", "options": {
        str(v): {"text": text, "color": colour, "index": i}
        for i, (v, text, colour) in enumerate(table)}}]


def target(expr: str, ref: str = "A", legend: str = "", instant: bool = False,
           table: bool = False) -> dict[str, Any]:
    t: dict[str, Any] = {"refId": ref, "datasource": DS, "expr": expr, "range": not instant,
                         "instant": instant, "legendFormat": legend or "__auto"}
    if table:
        t["format"] = "table"
    return t


class Layout:
    """Hands out panel ids and grid positions left to right, top to bottom (24 columns)."""

    def __init__(self) -> None:
        self.next_id, self.x, self.y, self.row_h = 1, 0, 0, 0

    def place(self, w: int, h: int) -> tuple[int, dict[str, int]]:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        pid = self.next_id
        self.next_id += 1
        return pid, pos


def panel(layout: Layout, kind: str, title: str, targets: list[dict[str, Any]], w: int, h: int,
          *, description: str = "", unit: str | None = None,
          maps: list[dict[str, Any]] | None = None, custom: dict[str, Any] | None = None,
          options: dict[str, Any] | None = None, transformations: list[dict[str, Any]] | None
          = None, thresholds: list[tuple[float | None, str]] | None = None,
          overrides: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    pid, pos = layout.place(w, h)
    defaults: dict[str, Any] = {}
    if unit:
        defaults["unit"] = unit
    if maps:
        defaults["mappings"] = maps
        defaults["color"] = {"mode": "thresholds"}
    if custom:
        defaults["custom"] = custom
    steps = thresholds or [(None, "green")]
    defaults["thresholds"] = {"mode": "absolute",
                              "steps": [{"value": v, "color": c} for v, c in steps]}
    return {"id": pid, "type": kind, "title": title, "description": description,
            "datasource": DS, "gridPos": pos, "targets": targets,
            "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
            "options": options or {}, "transformations": transformations or [], **extra}


def datasource_var() -> dict[str, Any]:
    return {"name": "datasource", "label": "Prometheus", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": "",
            "options": [], "skipUrlSync": False}


def query_var(name: str, label: str, definition: str, multi: bool = False) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "definition": definition, "query": {"query": definition, "refId": f"{name}-var"},
            "refresh": 2, "sort": 1, "hide": 0, "multi": multi, "includeAll": multi,
            "current": {}, "options": [], "regex": "", "skipUrlSync": False}


def dashboard(uid: str, title: str, description: str, panels: list[dict[str, Any]],
              variables: list[dict[str, Any]], time_from: str = "now-24h") -> dict[str, Any]:
    return {
        "uid": uid, "title": title, "description": description, "tags": ["stetho", "gpu"],
        "editable": True, "graphTooltip": 1, "timezone": "browser",
        "time": {"from": time_from, "to": "now"}, "refresh": "1m",
        "schemaVersion": SCHEMA_VERSION, "version": 1, "links": [
            {"title": "stetho", "type": "dashboards", "tags": ["stetho"], "asDropdown": True,
             "icon": "external link", "tooltip": "", "url": "", "includeVars": True,
             "keepTime": True, "targetBlank": False}],
        "annotations": {"list": []}, "templating": {"list": variables}, "panels": panels,
    }


def fleet() -> dict[str, Any]:
    lay = Layout()
    cell = {"cellOptions": {"type": "color-background", "mode": "basic"}, "align": "center",
            "inspect": False}
    panels = [
        panel(lay, "stat", "Nodes blocked", [target(
            'count(max by (node) (stetho_gate_blocked{policy=~"$policy"}) == 1) or vector(0)',
            instant=True)], 6, 4, thresholds=[(None, "green"), (1, "red")],
            description="Nodes a gate policy blocks now (stetho_gate_blocked)."),
        panel(lay, "stat", "Nodes failing a check", [target(
            "count(count by (node) (stetho_check_status == 2)) or vector(0)", instant=True)],
            6, 4, thresholds=[(None, "green"), (1, "red")]),
        panel(lay, "stat", "Nodes not evaluated (error)", [target(
            "count(count by (node) (stetho_check_status == 3)) or vector(0)", instant=True)],
            6, 4, thresholds=[(None, "green"), (1, "purple")]),
        panel(lay, "stat", "Age of the newest results", [target(
            'time() - max(stetho_run_timestamp_seconds{command=~"check|sweep"})',
            instant=True)], 6, 4, unit="s",
            thresholds=[(None, "green"), (93600, "orange")],
            description="No value: no stetho results at all, which is not healthy."),
        panel(lay, "table", "Nodes × checks: worst status", [target(
            f"max by (node, check) ({rank()})", instant=True, table=True)], 24, 14,
            maps=mappings(RANK_MAP), custom=cell,
            transformations=[{"id": "groupingToMatrix", "options": {
                "columnField": "check", "rowField": "node", "valueField": "Value"}}],
            options={"showHeader": True, "cellHeight": "sm"},
            description="Each cell is the worst status over the check's subjects on the node "
                        "(fail > error > warn > skip > pass)."),
        panel(lay, "table", "Blocked nodes", [target(
            'max by (node, policy) (stetho_gate_blocked{policy=~"$policy"}) == 1',
            instant=True, table=True)], 8, 10, options={"showHeader": True},
            transformations=[{"id": "organize", "options": {
                "excludeByName": {"Time": True, "Value": True}}}]),
        panel(lay, "timeseries", "NCCL busbw against baseline", [target(
            'stetho_check_value{check="nccl_busbw"} / ignoring(kind) '
            'stetho_check_threshold{check="nccl_busbw",kind="reference"}',
            legend="{{node}} {{subject}}")], 16, 10, unit="percentunit",
            thresholds=[(None, "red"), (0.95, "green")],
            custom={"thresholdsStyle": {"mode": "dashed"}, "lineWidth": 1,
                    "showPoints": "always"},
            description="busbw as a fraction of each message size's baseline; under the "
                        "dashed line (95%) the release policy blocks."),
        panel(lay, "bargauge", "Lowest busbw / baseline (20 nodes)", [target(
            'bottomk(20, min by (node) (stetho_check_value{check="nccl_busbw"} / '
            'ignoring(kind) stetho_check_threshold{check="nccl_busbw",kind="reference"}))',
            instant=True, legend="{{node}}")], 24, 10, unit="percentunit",
            thresholds=[(None, "red"), (0.95, "green")],
            options={"orientation": "horizontal", "displayMode": "basic",
                     "reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                       "values": False}}),
    ]
    return dashboard("stetho-fleet", "stetho: fleet overview",
                     "Health of every node stetho checked: blocked nodes, nodes x checks, "
                     "NCCL busbw against baseline.", panels,
                     [datasource_var(), query_var(
                         "policy", "Gate policy", "label_values(stetho_gate_blocked, policy)",
                         multi=True)])


def node_detail() -> dict[str, Any]:
    lay = Layout()
    panels = [
        panel(lay, "table", "Checks on $node now", [target(
            'stetho_check_status{node="$node"}', instant=True, table=True)], 12, 12,
            maps=mappings(STATUS_MAP),
            custom={"cellOptions": {"type": "color-text"}, "align": "auto",
                    "inspect": False},
            transformations=[{"id": "organize", "options": {
                "excludeByName": {"Time": True, "__name__": True, "job": True,
                                  "instance": True, "node": True}}}],
            options={"showHeader": True, "sortBy": [{"displayName": "Value",
                                                     "desc": False}]}),
        panel(lay, "status-history", "Status over time", [target(
            f'max by (check) ({rank("node=" + chr(34) + "$node" + chr(34))})',
            legend="{{check}}")], 12, 12, maps=mappings(RANK_MAP),
            options={"showValue": "never", "rowHeight": 0.9}),
        panel(lay, "timeseries", "$check: value and thresholds", [
            target('stetho_check_value{node="$node",check="$check"}',
                   legend="{{subject}} {{metric}} ({{unit}})"),
            target('stetho_check_threshold{node="$node",check="$check"}', ref="B",
                   legend="{{subject}} {{kind}}")], 12, 9,
            custom={"lineWidth": 1, "showPoints": "auto"},
            overrides=[{"matcher": {"id": "byFrameRefID", "options": "B"}, "properties": [
                {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                {"id": "color", "value": {"mode": "fixed", "fixedColor": "orange"}}]}],
            repeat="check", repeatDirection="h", maxPerRow=2,
            description="What the check measured, in base units, with the numbers it judged "
                        "the value against (reference baseline, expected, threshold)."),
    ]
    return dashboard("stetho-node", "stetho: node detail",
                     "Every check on one node: its status now and over time, each value "
                     "over time with its thresholds.", panels,
                     [datasource_var(),
                      query_var("node", "Node", "label_values(stetho_check_status, node)"),
                      query_var("check", "Check",
                                'label_values(stetho_check_value{node="$node"}, check)',
                                multi=True)], time_from="now-7d")


def anomalies() -> dict[str, Any]:
    lay = Layout()
    anomalous = ("stetho_check_status == 2 or stetho_check_status == 3 or "
                 'stetho_check_status{check=~"drift_.*"} == 1')
    panels = [
        panel(lay, "table", "Failing and drifting checks, newest first", [target(
            anomalous, table=True)], 24, 14, maps=mappings(STATUS_MAP),
            custom={"cellOptions": {"type": "color-text"}, "align": "auto",
                    "inspect": False},
            transformations=[
                {"id": "groupBy", "options": {"fields": {
                    "node": {"aggregations": [], "operation": "groupby"},
                    "check": {"aggregations": [], "operation": "groupby"},
                    "subject": {"aggregations": [], "operation": "groupby"},
                    "Time": {"aggregations": ["min", "max"], "operation": "aggregate"},
                    "Value": {"aggregations": ["last"], "operation": "aggregate"}}}},
                {"id": "sortBy", "options": {"fields": {}, "sort": [
                    {"field": "Time (min)", "desc": True}]}},
                {"id": "organize", "options": {"renameByName": {
                    "Time (min)": "first seen", "Time (max)": "last seen",
                    "Value (last)": "status"}}}],
            options={"showHeader": True},
            description="fail (2), error (3), and drift warnings (drift_* at 1) in the "
                        "dashboard's time range; the newest anomaly on top."),
        panel(lay, "timeseries", "Failing subjects per check", [target(
            "count by (check) (stetho_check_status == 2)", legend="{{check}}")], 12, 9,
            custom={"drawStyle": "line", "lineWidth": 1}),
        panel(lay, "timeseries", "Drift warnings per check", [target(
            'count by (check, node) (stetho_check_status{check=~"drift_.*"} == 1)',
            legend="{{node}} {{check}}")], 12, 9, custom={"drawStyle": "line",
                                                         "lineWidth": 1}),
    ]
    return dashboard("stetho-anomalies", "stetho: anomalies",
                     "Failing and drifting checks across the fleet, newest first.", panels,
                     [datasource_var()], time_from="now-7d")


DASHBOARDS = {"stetho-fleet.json": fleet, "stetho-node.json": node_detail,
              "stetho-anomalies.json": anomalies}


def text(build: Any) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    for name, build in DASHBOARDS.items():
        (HERE / name).write_text(text(build))
        print(f"wrote {HERE / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
