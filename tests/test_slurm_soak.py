"""Soak: 500 health-check runs over 8 nodes of the multi-node Slurm, failures at random
(seeded), the nodes' checks running concurrently.

Each run is the health check's own path after its probes: `act_on_own_node` (read Slurm, ask
the shared drain ledger, drain, or resume and release) against the real slurmctld, and its
verdict spooled for `stetho history ingest`. The probes are evaluated once per hardware state
(a real `gate --local` on the healthy and the failing simulated node), not 500 times: that
keeps 500 runs to seconds. Checked, by sampling both again and again while the runs go on:
Slurm never shows more stetho drains than the budget, the ledger never counts more drains in
its window than the limit; and every run's verdict is in the history once. (The ledger's rows
alone cannot show the first two: each run stamps the time it started, so rows of concurrent
runs are stamped out of the order they were committed in.)
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from stetho.gate import policy as policies
from stetho.gate.budget import DrainBudget
from stetho.gate.decision import Decision, decide
from stetho.gate.evaluate import GateOutcome
from stetho.gate.slurm import Slurm
from stetho.gate.slurm_hooks import act_on_own_node, spool_verdict
from stetho.history.store import History
from stetho.results import Result
from tests import slurm_cluster as sc

pytestmark = pytest.mark.xdist_group("slurm-cluster")

RUNS = 500
NODES = 8
FAIL_P = 0.3
LIMIT = 2  # max(2 nodes, 10% of the cluster's 16)


def _results(c: sc.Cluster, kind: str, tmp_path: Path) -> list[Result]:
    """The pre-job gate's results on one simulated node, from a real `gate --local`."""
    root = c.folder / "sim" / kind
    out = tmp_path / f"{kind}.json"
    r = subprocess.run([sys.executable, "-m", "stetho", "gate", "--local", "--policy",
                        "pre-job", "--node", kind, "--json", str(out), "--no-reports", "-q",
                        "--db", str(tmp_path / f"{kind}.db")],
                       env={**c.full_env(), "STETHO_SYSROOT": str(root / "sysroot"),
                            "PATH": f"{root / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
                            "STETHO_PROFILE": "h100-sxm-8gpu"},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == (1 if kind == "failing" else 0), r.stdout + r.stderr
    return [Result.from_json(d) for d in json.loads(out.read_text())["results"]]


def test_500_health_checks_with_random_failures_never_pass_the_budget(
        slurm_cluster: sc.Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = slurm_cluster
    c.reset()
    monkeypatch.setenv("SLURM_CONF", c.env["SLURM_CONF"])
    policy = policies.load("pre-job")
    circuit = replace(policy.circuit, ledger=c.ledger)
    nodes = c.nodes[:NODES]
    states = {kind: _results(c, kind, tmp_path) for kind in ("healthy", "failing")}
    decisions: dict[tuple[str, bool], Decision] = {
        (n, failing): decide(policy, [replace(r, node=n) for r in
                                      states["failing" if failing else "healthy"]],
                             [], {n: "live (local)"}, [])
        for n in nodes for failing in (False, True)}

    rng = random.Random(26)
    plan = [(rng.choice(nodes), rng.random() < FAIL_P) for _ in range(RUNS)]
    per_node = {n: [f for m, f in plan if m == n] for n in nodes}
    errors: list[BaseException] = []
    most_drained = 0
    done = threading.Event()

    most_counted = 0
    samples = 0
    scope = Slurm(act=False).cluster_name()
    ledger = DrainBudget(c.ledger, circuit)

    def sample() -> None:  # Slurm's view and the ledger's, again and again while it runs
        nonlocal most_drained, most_counted, samples
        watcher = Slurm(act=False)
        while not done.is_set():
            state = watcher.show(nodes)
            most_drained = max(most_drained, sum(i.drained_by_stetho for i in state.values()))
            if c.ledger.exists():
                most_counted = max(most_counted, len(ledger.status(scope, time.time()).counted))
            samples += 1

    def node_checks(node: str) -> None:
        try:
            for failing in per_node[node]:
                now = time.time()
                decision = decisions[(node, failing)]
                actions, trip = act_on_own_node(node, decision, circuit, now)
                outcome = GateOutcome(policy, decision, [node], actions, circuit=trip)
                spool_verdict(c.results, outcome.to_json(), node, "health-check",
                              policy.name, outcome.summary(), now)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    sampler = threading.Thread(target=sample)
    sampler.start()
    workers = [threading.Thread(target=node_checks, args=(n,)) for n in nodes]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    done.set()
    sampler.join()
    assert not errors, errors

    assert samples > 10 and most_drained <= LIMIT and most_counted <= LIMIT, (
        samples, most_drained, most_counted)
    with sqlite3.connect(c.ledger) as con:  # the budget was exercised, not idle
        grants = con.execute("SELECT count(*) FROM grants").fetchone()[0]
        refusals = con.execute("SELECT count(*) FROM refusals").fetchone()[0]
    assert grants > LIMIT and refusals > 0, (grants, refusals)

    db = tmp_path / "controller.db"
    r = subprocess.run([sys.executable, "-m", "stetho", "history", "ingest", str(c.results),
                        "--db", str(db), "--out", str(tmp_path / "runs"), "-q"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1 and f"ingested {RUNS} spool files" in r.stdout, (  # some fail
        r.stdout + r.stderr)
    with History(db) as h:
        rows = h.conn.execute(
            "SELECT n.name, count(*) FROM runs r JOIN node_runs nr ON nr.run_key = r.key "
            "JOIN nodes n ON n.id = nr.node_id WHERE r.kind = 'gate-health-check' "
            "GROUP BY n.name").fetchall()
    assert dict(rows) == {n: len(fs) for n, fs in per_node.items() if fs}
