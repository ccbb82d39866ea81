"""End to end with the real services: stetho writes its textfiles, Debian's node_exporter
serves them, Debian's Prometheus scrapes them every second with the generated alert rules
loaded (holds at 0 s, otherwise as shipped) and sends its alerts to Debian's Alertmanager with
the shipped inhibit rules. Twelve of forty simulated nodes fail cpu_governor: Prometheus's HTTP
API shows one firing StethoCheckFailing per node and check and one fleet alert, Alertmanager
suppresses the per-node pages and its webhook receiver gets the fleet page alone. Every Grafana
dashboard query runs against that Prometheus too."""

from __future__ import annotations

import http.server
import importlib.util
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from stetho.gate import promrules
from stetho.results import Result
from stetho.sinks import prometheus as P
from tests import services
from tests.services import Service, alerts, poll, query, sim_results

REPO = Path(__file__).resolve().parent.parent
CONTRIB = REPO / "contrib" / "prometheus"
DCGM = REPO / "fixtures" / "real" / "08-dcgm" / "dcgm-exporter-metrics-tesla-t4-drv460.prom"
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("prometheus-live")]
#: With node02 (simulated with a powersave governor), 12 nodes fail cpu_governor: a fleet event.
FAILING = [f"gpu{i:02d}" for i in range(1, 12)]
HEALTHY = [f"gpu{i:02d}" for i in range(12, 38)]


#: The replicas carry these checks only (the fleet event's and one more): forty nodes' full
#: results are 2 MB, more than node_exporter serves within this test's 1 s scrape on 2 cores.
REPLICATED = ("cpu_governor", "gpu_count")


def fleet(results: list[Result]) -> list[Result]:
    """The three simulated nodes and 37 more from their real results: node01's, with node02's
    failing cpu_governor results on the FAILING ones."""
    def renamed(rs: list[Result], node: str) -> list[Result]:
        return [Result.from_json({**r.to_json(), "node": node}) for r in rs]

    healthy = [r for r in results if r.node == "node01" and r.check in REPLICATED]
    governor = [r for r in results if r.node == "node02" and r.check == "cpu_governor"]
    out = list(results)
    for node in FAILING:
        out += renamed([r for r in healthy if r.check != "cpu_governor"] + governor, node)
    for node in HEALTHY:
        out += renamed(healthy, node)
    return out


class Webhook(http.server.ThreadingHTTPServer):
    """Alertmanager's webhook receiver: every notification's alerts, as received."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.received += json.loads(body)["alerts"]
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def alertmanager_config(folder: Path, webhook: Webhook) -> Path:
    """The shipped inhibit rules, with a webhook receiver and a short group wait."""
    doc = yaml.safe_load((CONTRIB / "alertmanager.yml").read_text())
    doc["route"].update({"group_wait": "2s", "group_interval": "5m", "repeat_interval": "4h"})
    doc["receivers"] = [{"name": doc["route"]["receiver"], "webhook_configs": [{
        "url": f"http://127.0.0.1:{webhook.server_address[1]}/", "send_resolved": False}]}]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "alertmanager.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    reason = services.missing("prometheus", "node_exporter")
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("promlive")
    results = fleet(sim_results(root / "sim"))
    textfiles = root / "textfile"
    textfiles.mkdir()
    P.write(textfiles / "stetho-sweep.prom", P.render(
        results, run_id="sweep-1", started_at=time.time(), duration_s=12.0,
        command="sweep"))
    P.write(textfiles / "stetho-gate.prom", P.render(
        [], run_id="gate-1", started_at=time.time(), duration_s=0.5,
        command="gate", gate={"pre-job": {"node01": False, "node02": True, "node03": True}}))
    # node02's GPU as dcgm-exporter reports it: a real scrape, its Hostname set to the node
    P.write(textfiles / "dcgm.prom", re.sub(r'Hostname="[^"]*"', 'Hostname="node02"',
                                            DCGM.read_text()))
    rules = root / "stetho.rules.yml"
    rules.write_text(promrules.generate(promrules.load_policies(REPO / "gates"),
                                        promrules.Options(node_for_s=0, fleet_for_s=0)))
    started: list[Service] = []
    webhook = Webhook()
    try:
        manager = None
        if services.missing("alertmanager") is None:
            manager = services.start_alertmanager(
                root / "am", alertmanager_config(root / "am", webhook))
            started.append(manager)
        exporter = services.start_node_exporter(root / "ne", textfiles)
        started.append(exporter)
        prom = services.start_prometheus(
            root / "prom", exporter.url.removeprefix("http://"), rules=rules,
            alertmanager=manager.url.removeprefix("http://") if manager else None)
        started.append(prom)
        poll("the first scrape of stetho metrics",
             lambda: query(prom, "stetho_run_timestamp_seconds"), service=prom)
        yield {"prom": prom, "exporter": exporter, "results": results, "am": manager,
               "webhook": webhook}
    finally:
        for svc in reversed(started):
            svc.stop()
        webhook.shutdown()
        webhook.server_close()


def test_prometheus_sees_node02_cpu_governor_failing(stack):
    prom = stack["prom"]
    got = poll("node02 cpu_governor == 2", lambda: query(
        prom, 'stetho_check_status{node="node02",check="cpu_governor"} == 2'), service=prom)
    assert len(got) == 1 and got[0]["value"][1] == "2"
    assert got[0]["metric"]["command"] == "sweep" and got[0]["metric"]["job"] == "stetho"
    healthy = query(prom, 'stetho_check_status{node="node01",check="cpu_governor"}')
    assert [s["value"][1] for s in healthy] == ["0"]


def _firing(prom: Service, name: str) -> list[dict[str, Any]]:
    return [a for a in alerts(prom) if a["labels"]["alertname"] == name
            and a["state"] == "firing"]


def test_a_fleet_wide_failure_fires_once_per_node_and_check_and_one_fleet_alert(stack):
    prom, results = stack["prom"], stack["results"]
    want = {(r.node, r.check) for r in results if r.status == "fail"}
    assert {n for n, c in want if c == "cpu_governor"} == {"node02", *FAILING}
    got = poll("a firing StethoCheckFailing for every failing node and check", lambda: (
        a := _firing(prom, "StethoCheckFailing")) and len(a) >= len(want) and a, service=prom)
    keys = [(a["labels"]["node"], a["labels"]["check"]) for a in got]
    assert sorted(keys) == sorted(want)  # one each: not one per policy
    assert {a["labels"]["policies"] for a in got if a["labels"]["check"] == "cpu_governor"} \
        == {"nightly,pre-job,release"}
    fleet_alerts = poll("the fleet alert", lambda: _firing(prom, "StethoFleetCheckFailing"),
                        service=prom)
    assert [(a["labels"]["check"], a["value"]) for a in fleet_alerts] == [
        ("cpu_governor", "1.2e+01")]
    busbw = poll("the busbw alert", lambda: _firing(prom, "StethoBusbwUnderBaseline"),
                 service=prom)
    subjects = {r.subject for r in results if r.node == "node02" and r.check == "nccl_busbw"
                and r.status == "fail"}
    assert len(subjects) > 1 and [a["labels"]["node"] for a in busbw] == ["node02"]
    blocked = poll("StethoNodeBlocked for both blocked nodes", lambda: (
        b := _firing(prom, "StethoNodeBlocked")) and len(b) == 2 and b, service=prom)
    assert sorted(a["labels"]["node"] for a in blocked) == ["node02", "node03"]
    assert "pre-job" in blocked[0]["annotations"]["summary"]
    poll("no StethoResultsStale once results are there", lambda: not [
        a for a in alerts(prom) if a["labels"]["alertname"] == "StethoResultsStale"],
        service=prom)


def test_alertmanager_inhibits_the_per_node_pages_of_a_fleet_event(stack):
    manager, webhook = stack["am"], stack["webhook"]
    if manager is None:
        pytest.skip(services.missing("alertmanager"))

    def am_alerts() -> list[dict[str, Any]]:
        status, body = services.http_get(manager.url + "/api/v2/alerts")
        assert status == 200, body[:300]
        return list(json.loads(body))

    def settled() -> dict[str, list[dict[str, Any]]]:
        """Alertmanager's alerts by name, once the fleet alert and all it inhibits are in."""
        by_name: dict[str, list[dict[str, Any]]] = {}
        for a in am_alerts():
            by_name.setdefault(a["labels"]["alertname"], []).append(a)
        governor = [a for a in by_name.get("StethoCheckFailing", [])
                    if a["labels"]["check"] == "cpu_governor"]
        ready = (len(governor) == 12 and len(by_name.get("StethoNodeBlocked", [])) == 2
                 and by_name.get("StethoFleetCheckFailing"))
        return by_name if ready else {}

    by_name = poll("the fleet alert and the per-node alerts in Alertmanager", settled,
                   service=manager)
    per_node = [a for a in by_name["StethoCheckFailing"]
                if a["labels"]["check"] == "cpu_governor"]
    assert {a["status"]["state"] for a in per_node} == {"suppressed"}
    assert all(a["status"]["inhibitedBy"] for a in per_node)
    assert [a["status"]["state"] for a in by_name["StethoFleetCheckFailing"]] == ["active"]
    assert {a["status"]["state"] for a in by_name["StethoNodeBlocked"]} == {"suppressed"}
    busbw = [a for a in by_name["StethoCheckFailing"] if a["labels"]["check"] == "nccl_busbw"]
    assert [a["status"]["state"] for a in busbw] == ["active"]  # one node: pages

    def paged() -> set[tuple[str, str, str]]:
        return {(a["labels"]["alertname"], a["labels"].get("node", ""), a["labels"]["check"])
                if "check" in a["labels"] else (a["labels"]["alertname"], "", "")
                for a in webhook.received}

    poll("the fleet page and node02's busbw pages", lambda: {
        ("StethoFleetCheckFailing", "", "cpu_governor"),
        ("StethoCheckFailing", "node02", "nccl_busbw"),
        ("StethoBusbwUnderBaseline", "node02", "nccl_busbw")} <= paged(), service=manager)
    governor = [p for p in paged() if p[2] == "cpu_governor"]
    assert governor == [("StethoFleetCheckFailing", "", "cpu_governor")]  # paged once
    assert not [p for p in paged() if p[0] == "StethoNodeBlocked"]


def test_the_readme_dcgm_join_finds_the_failing_nodes_gpu(stack):
    readme = (CONTRIB / "README.md").read_text()
    join = next(b for b in re.findall(r"^```promql\n(.*?)^```", readme, re.M | re.S)
                if "DCGM_FI_DEV_GPU_TEMP" in b)
    got = poll("the join", lambda: query(stack["prom"], join), service=stack["prom"])
    assert [(s["metric"]["Hostname"], s["metric"]["gpu"], s["value"][1]) for s in got] == [
        ("node02", "0", "25")]


def test_two_commands_files_share_a_folder_without_collisions(stack):
    """node_exporter drops a series two files both carry and logs an error; the command label
    keeps the sweep's and the gate's run metrics apart."""
    prom, exporter = stack["prom"], stack["exporter"]
    runs = query(prom, "stetho_run_timestamp_seconds")
    assert sorted(s["metric"]["command"] for s in runs) == ["gate", "sweep"]
    assert [s["value"][1] for s in query(prom, "node_textfile_scrape_error")] == ["0"]
    status, body = services.http_get(exporter.url + "/metrics")
    assert status == 200 and b'stetho_gate_blocked{command="gate",mode="enforce",node="node02"' \
        in body
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
