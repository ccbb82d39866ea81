"""The circuit breaker on `gate --act`: a mass failure drains nothing more, says so, alerts and
exits 3; drains within the window count, read from Slurm's own reason stamps.

The gate runs end to end (history file, policy file, scontrol) against the recording
stand-in everywhere, and against a real slurmctld where one starts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stetho import gate
from stetho.errors import ConfigError
from stetho.gate import breaker
from stetho.gate import policy as gatepolicy
from stetho.gate.slurm import NodeInfo, Slurm, drain_reason
from stetho.history.store import History, NodeRun
from stetho.results import Result
from tests import slurm_testbed as testbed

slurm_testbed = testbed.slurm_testbed


def test_limit_is_the_larger_of_min_nodes_and_the_share() -> None:
    c = breaker.Circuit()
    assert [c.limit(n) for n in (1, 4, 20, 64, 1024)] == [2, 2, 2, 6, 102]
    assert breaker.Circuit(max_pct=50, min_nodes=0).limit(5) == 2


def _drained(name: str, when: float | None) -> NodeInfo:
    return NodeInfo(name, "IDLE+DRAIN", "stetho: x: y", True, when)


def test_recent_stetho_drains_count_old_ones_and_peoples_do_not() -> None:
    now = 1_800_000_000.0
    c = breaker.Circuit(window_s=3600)
    scope = [f"n{i}" for i in range(20)]  # limit 2
    state = {"n1": _drained("n1", now - 60), "n2": _drained("n2", now - 7200),
             "n3": NodeInfo("n3", "IDLE+DRAIN", "RMA 12", True, now - 60)}
    assert breaker.check(c, scope, ["n4"], state, now) is None  # n1 + n4 = 2
    trip = breaker.check(c, scope, ["n4", "n5"], state, now)
    assert trip is not None and (trip.would, trip.limit, trip.recent) == (3, 2, ("n1",))
    assert trip.message().startswith("circuit open: 3 of 20 nodes would be drained (limit 2)")
    # a stamp Slurm did not print counts as recent: unknown never keeps the breaker shut
    assert breaker.check(c, scope, ["n4"], {**state, "n2": _drained("n2", None)}, now)
    # re-draining a node stetho drained already is not a new drain
    assert breaker.check(c, scope, ["n1", "n4"], state, now) is None


def test_policy_circuit_settings_are_validated(tmp_path: Path) -> None:
    ok = tmp_path / "ok.yml"
    ok.write_text("policy: ok\nscheduler:\n  circuit: {max_pct: 25, min_nodes: 1, window: 30m}\n")
    assert gatepolicy.load(str(ok)).circuit == breaker.Circuit(25.0, 1, 1800.0)
    assert gatepolicy.load("nightly").circuit == breaker.Circuit()
    bad = tmp_path / "bad.yml"
    bad.write_text("policy: bad\nscheduler:\n  circuit:\n    max_pct: 150\n")
    with pytest.raises(ConfigError, match=r"bad\.yml:4: max_pct must be more than 0"):
        gatepolicy.load(str(bad))


# -- end to end ------------------------------------------------------------------------------


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.bodies.append(json.loads(body))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def webhook(stetho_env, tmp_path: Path) -> Iterator[list[dict[str, object]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    server.bodies = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    stetho_env.setenv("STETHO_WEBHOOK_URL", f"http://127.0.0.1:{server.server_address[1]}/hook")
    stetho_env.setenv("STETHO_NOTIFY_STATE", str(tmp_path / "notify.db"))
    yield server.bodies  # type: ignore[attr-defined]
    server.shutdown()
    server.server_close()


def _history(path: Path, nodes: list[str], failing: set[str]) -> Path:
    runs = []
    for n in nodes:
        rows = [Result(n, "gpu_clocks", "gpu0", "pass", "clocks locked")]
        if n in failing:
            rows.append(Result(n, "cpu_governor", "", "fail", "governor is powersave"))
        runs.append(NodeRun(n, "p", rows, []))
    with History(path) as h:
        h.record("r-now", "sweep", runs, when=time.time() - 60)
    return path


def _policy(tmp_path: Path, circuit: str = "") -> str:
    p = tmp_path / "act.yml"
    p.write_text("policy: act\nfreshness: 6h\nchecks: [gpu_clocks, cpu_governor]\n"
                 "block_on: [fail]\nscheduler:\n  drain: true\n"
                 + (f"  circuit: {circuit}\n" if circuit else ""))
    return str(p)


def _updates(fake: testbed.FakeScontrol) -> list[list[str]]:
    return [c for c in fake.calls() if c[:1] == ["update"]]


def test_mass_failure_drains_nothing_alerts_and_exits_3(tmp_path, monkeypatch, webhook) -> None:
    nodes = [f"n{i:03d}" for i in range(1, 65)]
    failing = set(nodes[:14])
    db = _history(tmp_path / "h.db", nodes, failing)
    fake = testbed.fake_scontrol(tmp_path / "fake", {n: "IDLE" for n in nodes})
    monkeypatch.setenv("PATH", fake.env["PATH"])
    out = gate.run(gate.GateRequest(policy=_policy(tmp_path), nodes="n[001-064]", act=True,
                                    reports=False, out=tmp_path / "runs"), db=db)
    assert out.exit_code == 3
    assert "circuit open: 14 of 64 nodes would be drained (limit 6)" in out.summary()
    assert _updates(fake) == []  # nothing drained, nothing resumed (nothing was stetho's)
    assert all(fake.nodes()[n]["state"] == "IDLE" for n in nodes)
    skipped = [a for a in out.actions if a.node in failing]
    assert len(skipped) == 14 and all(a.failed and "circuit open" in a.message for a in skipped)
    assert out.to_json()["circuit"]["planned"] == sorted(failing)  # type: ignore[index]
    (alert,) = webhook
    assert "circuit open: 14 of 64" in json.dumps(alert)
    # the breaker stays open: a second run is refused too, and alerts no more in this window
    again = gate.run(gate.GateRequest(policy=_policy(tmp_path), nodes="n[001-064]", act=True,
                                      reports=False, out=tmp_path / "runs"), db=db)
    assert again.exit_code == 3 and len(webhook) == 1


def test_under_the_limit_drains_and_a_dry_run_never_trips(tmp_path, monkeypatch) -> None:
    nodes = [f"n{i:03d}" for i in range(1, 65)]
    db = _history(tmp_path / "h.db", nodes, {"n001", "n002", "n003"})
    fake = testbed.fake_scontrol(tmp_path / "fake", {n: "IDLE" for n in nodes})
    monkeypatch.setenv("PATH", fake.env["PATH"])
    req = gate.GateRequest(policy=_policy(tmp_path), nodes="n[001-064]", act=True,
                           reports=False, out=tmp_path / "runs")
    out = gate.run(req, db=db)
    assert out.exit_code == 1 and out.circuit is None
    assert sorted(c[1] for c in _updates(fake)) == ["NodeName=n001", "NodeName=n002",
                                                     "NodeName=n003"]
    # a stricter policy trips on the same run; without --act it only plans (exit 1)
    strict = _policy(tmp_path, "{max_pct: 1, min_nodes: 2}")
    dry = gate.run(gate.GateRequest(policy=strict, nodes="n[001-064]", reports=False,
                                    out=tmp_path / "runs"), db=db)
    assert dry.exit_code == 1 and dry.circuit is None


@pytest.mark.xdist_group("slurm")
def test_real_slurm_recent_drains_count_across_runs(slurm_testbed, tmp_path, monkeypatch
                                                     ) -> None:
    """Two nodes stetho drained minutes ago (real reason stamps) plus one new failure exceed
    the limit of 2 on four nodes: the third is not drained."""
    monkeypatch.setenv("SLURM_CONF", slurm_testbed.env["SLURM_CONF"])
    sl = Slurm(act=True, env=slurm_testbed.env)
    nodes = testbed.FAKE_NODES
    try:
        assert all(a.done for a in sl.drain({n: drain_reason("x", "earlier")
                                             for n in nodes[:2]}))
        db = _history(tmp_path / "h.db", nodes, {nodes[0], nodes[1], nodes[2]})
        out = gate.run(gate.GateRequest(policy=_policy(tmp_path), nodes="gpu[01-04]", act=True,
                                        reports=False, out=tmp_path / "runs"), db=db)
        assert out.exit_code == 3 and out.circuit is not None
        assert out.circuit.recent == (nodes[0], nodes[1]) and out.circuit.planned == (nodes[2],)
        assert not sl.show([nodes[2]])[nodes[2]].drained
    finally:
        sl.resume(nodes)


def test_a_dry_run_says_what_the_breaker_would_allow(tmp_path) -> None:
    """`gate` without --act asks the budget read-only: it plans, changes nothing, exit 1."""
    import os
    import subprocess
    import sys

    nodes = [f"n{i:03d}" for i in range(1, 21)]  # 20 nodes: limit 2
    db = _history(tmp_path / "h.db", nodes, set(nodes[:9]))
    fake = testbed.fake_scontrol(tmp_path / "fake", {n: "IDLE" for n in nodes})
    env = {**os.environ, "PATH": fake.env["PATH"]}
    r = subprocess.run([sys.executable, "-m", "stetho", "gate", "--policy", _policy(tmp_path),
                        "--nodes", "n[001-020]", "--db", str(db), "--no-reports", "--quiet"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "would drain 9, breaker allows 2 (--act would drain none of them" in r.stdout
    assert _updates(fake) == [] and not (tmp_path / "drain-ledger.db").exists()


def test_an_unusable_ledger_drains_nothing(tmp_path, monkeypatch, stetho_env) -> None:
    """The budget cannot be asked: nothing is drained, and each node says why."""
    nodes = [f"n{i:03d}" for i in range(1, 21)]
    db = _history(tmp_path / "h.db", nodes, {"n001"})
    fake = testbed.fake_scontrol(tmp_path / "fake", {n: "IDLE" for n in nodes})
    monkeypatch.setenv("PATH", fake.env["PATH"])
    (tmp_path / "file").write_text("")
    stetho_env.setenv("STETHO_DRAIN_LEDGER", str(tmp_path / "file" / "ledger.db"))
    out = gate.run(gate.GateRequest(policy=_policy(tmp_path), nodes="n[001-020]", act=True,
                                    reports=False, out=tmp_path / "runs"), db=db)
    assert _updates(fake) == []
    (a,) = [a for a in out.actions if a.node == "n001"]
    assert a.failed and not a.done and "drain ledger" in a.message
