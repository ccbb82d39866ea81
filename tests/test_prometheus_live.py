"""End to end with the real services: stetho writes its textfiles, Debian's node_exporter
serves them, Debian's Prometheus scrapes them every second with the shipped alert rules
loaded, and its HTTP API answers: node02's cpu_governor is 2 (fail) and the generated alert is
pending or firing. Every Grafana dashboard query runs against that Prometheus too."""

from __future__ import annotations

import importlib.util
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stetho.sinks import prometheus as P
from tests import services
from tests.services import Service, alerts, poll, query, sim_results

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "contrib" / "prometheus" / "stetho.rules.yml"
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("prometheus-live")]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    reason = services.missing("prometheus", "node_exporter")
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("promlive")
    results = sim_results(root / "sim")
    textfiles = root / "textfile"
    textfiles.mkdir()
    P.write(textfiles / "stetho-sweep.prom", P.render(
        results, run_id="sweep-1", started_at=time.time(), duration_s=12.0,
        command="sweep"))
    P.write(textfiles / "stetho-gate.prom", P.render(
        [], run_id="gate-1", started_at=time.time(), duration_s=0.5,
        command="gate", gate={"pre-job": {"node01": False, "node02": True, "node03": True}}))
    started: list[Service] = []
    try:
        exporter = services.start_node_exporter(root / "ne", textfiles)
        started.append(exporter)
        prom = services.start_prometheus(root / "prom", exporter.url.removeprefix("http://"),
                                         rules=RULES)
        started.append(prom)
        poll("the first scrape of stetho metrics",
             lambda: query(prom, "stetho_run_timestamp_seconds"), service=prom)
        yield {"prom": prom, "exporter": exporter, "results": results}
    finally:
        for svc in reversed(started):
            svc.stop()


def test_prometheus_sees_node02_cpu_governor_failing(stack):
    prom = stack["prom"]
    got = poll("node02 cpu_governor == 2", lambda: query(
        prom, 'stetho_check_status{node="node02",check="cpu_governor"} == 2'), service=prom)
    assert len(got) == 1 and got[0]["value"][1] == "2"
    assert got[0]["metric"]["command"] == "sweep" and got[0]["metric"]["job"] == "stetho"
    healthy = query(prom, 'stetho_check_status{node="node01",check="cpu_governor"}')
    assert [s["value"][1] for s in healthy] == ["0"]


def test_the_generated_alerts_are_pending_or_firing(stack):
    prom = stack["prom"]

    def ours() -> list[dict[str, Any]]:
        return [a for a in alerts(prom) if a["labels"]["alertname"] == "StethoCheckFailing"
                and a["labels"].get("node") == "node02"
                and a["labels"].get("check") == "cpu_governor"]

    # each policy's group is evaluated on its own: wait for all three
    got = poll("StethoCheckFailing for node02 cpu_governor in every policy",
               lambda: (a := ours()) and len({x["labels"]["policy"] for x in a}) == 3 and a,
               service=prom)
    assert {a["state"] for a in got} <= {"pending", "firing"}
    assert {a["labels"]["policy"] for a in got} == {"nightly", "pre-job", "release"}
    blocked = poll("StethoNodeBlocked for both blocked nodes", lambda: (b := [
        a for a in alerts(prom) if a["labels"]["alertname"] == "StethoNodeBlocked"])
        and len(b) == 2 and b, service=prom)
    assert sorted(a["labels"]["node"] for a in blocked) == ["node02", "node03"]
    names = {a["labels"]["alertname"] for a in alerts(prom)}
    assert "StethoResultsStale" not in names  # just written: fresh


def test_two_commands_files_share_a_folder_without_collisions(stack):
    """node_exporter drops a series two files both carry and logs an error; the command label
    keeps the sweep's and the gate's run metrics apart."""
    prom, exporter = stack["prom"], stack["exporter"]
    runs = query(prom, "stetho_run_timestamp_seconds")
    assert sorted(s["metric"]["command"] for s in runs) == ["gate", "sweep"]
    assert [s["value"][1] for s in query(prom, "node_textfile_scrape_error")] == ["0"]
    status, body = services.http_get(exporter.url + "/metrics")
    assert status == 200 and b'stetho_gate_blocked{command="gate",node="node02"' in body
    assert "collected before" not in exporter.log.read_text()


def test_every_busbw_value_reaches_prometheus_in_bytes_per_second(stack):
    prom = stack["prom"]
    want = {(r.node, r.subject): r.value * 1e9 for r in stack["results"]
            if r.check == "nccl_busbw" and isinstance(r.value, float)}
    got = {(s["metric"]["node"], s["metric"]["subject"]): float(s["value"][1])
           for s in query(prom, 'stetho_check_value{check="nccl_busbw"}')}
    assert got.keys() == want.keys() and want
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12)


# -- the Grafana dashboards' queries, against this Prometheus ------------------------------------

def _dashboards() -> dict[str, dict[str, Any]]:
    spec = importlib.util.spec_from_file_location("stetho_grafana",
                                                  REPO / "contrib" / "grafana" / "generate.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {name: json.loads(mod.text(build)) for name, build in mod.DASHBOARDS.items()}


VARIABLES = {"$node": "node02", "$check": "nccl_busbw", "$policy": ".*"}


def _exprs() -> list[tuple[str, str, str]]:
    out = []
    for name, dash in _dashboards().items():
        for p in dash["panels"]:
            for t in p.get("targets", []):
                expr = t["expr"]
                for var, value in VARIABLES.items():
                    expr = expr.replace(var, value)
                assert "$" not in expr, expr
                out.append((name, p["title"], expr))
    return out


def test_every_dashboard_query_runs_and_returns_data(stack):
    prom = stack["prom"]
    poll("the gate's metrics", lambda: query(prom, "stetho_gate_blocked"), service=prom)
    empty = []
    for name, title, expr in _exprs():
        if not query(prom, expr):
            empty.append(f"{name}: {title}: {expr}")
    # Drift checks have no history in one run, so the drift panel alone may be empty.
    assert [e for e in empty if ": Drift warnings per check: " not in e] == []


def _one(prom: Service, expr: str) -> dict[tuple[str, ...], float]:
    return {tuple(sorted(s["metric"].items())): float(s["value"][1]) for s in query(prom, expr)}


def test_heatmap_query_ranks_the_worst_status_per_node_and_check(stack):
    prom = stack["prom"]
    fleet = _dashboards()["stetho-fleet.json"]
    heat = next(p for p in fleet["panels"] if p["title"].startswith("Nodes × checks"))
    got = {(dict(k)["node"], dict(k)["check"]): v
           for k, v in _one(prom, heat["targets"][0]["expr"]).items()}
    assert got[("node02", "cpu_governor")] == 4  # fail
    assert got[("node02", "nccl_busbw")] == 4
    assert got[("node03", "gpu_count")] == 3     # error
    assert got[("node01", "cpu_governor")] == 0  # pass
    expected = {}
    rank = {"pass": 0, "skip": 1, "warn": 2, "error": 3, "fail": 4}
    for r in stack["results"]:
        key = (r.node, r.check)
        expected[key] = max(expected.get(key, 0), rank[r.status])
    assert got == expected
    stats = {p["title"]: p["targets"][0]["expr"] for p in fleet["panels"] if p["type"] == "stat"}
    blocked = stats["Nodes blocked"].replace("$policy", ".*")
    assert [float(s["value"][1]) for s in query(prom, blocked)] == [2.0]


def test_dashboards_query_only_emitted_metrics(stack):
    """Every stetho_* name in a query is a family the running exporter serves."""
    prom = stack["prom"]
    served = {s["metric"]["__name__"] for s in
              query(prom, 'count by (__name__) ({__name__=~"stetho_.+"})')}
    used = {m for _, _, e in _exprs() for m in re.findall(r"\bstetho_[a-z_]+", e)}
    assert used and used <= served, used - served
