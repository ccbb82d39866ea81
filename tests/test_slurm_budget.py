"""The drain budget against a real slurmctld (tests/slurm_testbed.py, 17 nodes: limit 2): many
callers at once, real processes, each draining through the one ledger, never more than the
budget; a re-drain keeps the first reason; a breaker reset needs a key the policy trusts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stetho import gate
from stetho.gate.slurm import Slurm, drain_reason
from stetho.history.store import History, NodeRun
from stetho.results import Result
from tests import signing
from tests import slurm_testbed as testbed

slurm_testbed = testbed.slurm_testbed
NODES = testbed.ALL_FAKE_NODES

pytestmark = pytest.mark.xdist_group("slurm")


@pytest.fixture
def slurm_env(slurm_testbed, tmp_path, monkeypatch, stetho_env) -> Iterator[dict[str, str]]:
    """SLURM_CONF and a ledger of this test's own; every fake node resumed afterwards."""
    monkeypatch.setenv("SLURM_CONF", slurm_testbed.env["SLURM_CONF"])
    stetho_env.setenv("STETHO_DRAIN_LEDGER", str(tmp_path / "ledger.db"))
    env = {**os.environ, "SLURM_CONF": slurm_testbed.env["SLURM_CONF"],
           "STETHO_DRAIN_LEDGER": str(tmp_path / "ledger.db")}
    try:
        yield env
    finally:  # every drain undone, a person's (the tests write some) too
        for n in _drained(env):
            subprocess.run(["scontrol", "update", f"NodeName={n}", "State=RESUME"], env=env,
                           capture_output=True, timeout=30)


def _drained(env: dict[str, str]) -> dict[str, str]:
    state = Slurm(act=False, env=env).show(NODES)
    return {n: i.reason for n, i in state.items() if i.drained}


#: A library caller reads the configuration the edge made active (as the CLI does at start):
#: without this, STETHO_DRAIN_LEDGER would not reach it.
_ACTIVATE = "from stetho import config; config.activate(config.load())\n"

_HOOK = _ACTIVATE + """
import sys, time
from stetho.gate.breaker import Circuit
from stetho.gate.slurm_hooks import drain_through_budget
node, start = sys.argv[1], float(sys.argv[2])
while time.time() < start:
    time.sleep(0.002)
actions, trip = drain_through_budget(node, "stetho: gpu_clocks: clocks not locked",
                                     "health-check@" + node, circuit=Circuit())
print(("refused " if trip else "drained ") + actions[0].message)
"""


def test_sixteen_health_checks_at_once_drain_exactly_the_budget(slurm_env, tmp_path) -> None:
    start = time.time() + 3.0  # every interpreter is up before the first one asks
    procs = [subprocess.Popen([sys.executable, "-c", _HOOK, n, str(start)], env=slurm_env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for n in NODES]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    drained = _drained(slurm_env)
    assert len(drained) == 2, (drained, outs)
    assert sum(o.startswith("drained ") for o in outs) == 2
    refused = [o for o in outs if o.startswith("refused ")]
    assert len(refused) == 14 and all("circuit open: 3 of 17 nodes" in o for o in refused)
    assert all(r.startswith("stetho: gpu_clocks:") for r in drained.values())
    from stetho.gate import budget as B
    from stetho.gate.breaker import Circuit

    st = B.DrainBudget(Path(slurm_env["STETHO_DRAIN_LEDGER"]), Circuit()).status(
        "stethotest", time.time())
    assert sorted(st.counted) == sorted(drained)
    assert sum(e.kind == "refused" for e in st.entries) == 14


def _history(path: Path, nodes: list[str]) -> Path:
    runs = [NodeRun(n, "p", [Result(n, "cpu_governor", "", "fail", "governor is powersave")],
                    []) for n in nodes]
    with History(path) as h:
        h.record("r-now", "sweep", runs, when=time.time() - 60)
    return path


def _policy(tmp_path: Path) -> str:
    p = tmp_path / "act.yml"
    p.write_text("policy: act\nfreshness: 6h\nchecks: [cpu_governor]\nblock_on: [fail]\n"
                 "scheduler:\n  drain: true\n")
    return str(p)


def test_ten_small_act_runs_stay_within_the_budget(slurm_env, tmp_path) -> None:
    db = _history(tmp_path / "h.db", NODES)
    pairs = [f"gpu[{i:02d}-{i + 1:02d}]" for i in range(1, 17, 2)] + ["gpu[01-02]",
                                                                       "gpu[03-04]"]
    outs = [gate.run(gate.GateRequest(policy=_policy(tmp_path), nodes=pair, act=True,
                                      reports=False, out=tmp_path / "runs"), db=db)
            for pair in pairs]
    assert len(_drained(slurm_env)) == 2
    assert outs[0].circuit is None and outs[0].exit_code == 1
    assert all(o.exit_code == 3 and o.circuit is not None for o in outs[1:8])
    # the last two ask for nodes already drained (no budget) and nodes refused before
    assert outs[8].circuit is None and outs[9].circuit is not None


def test_a_watchdog_storm_drains_within_the_budget(slurm_env, fault_cluster, tmp_path) -> None:
    """Eight health checks whose nvidia-smi hangs: each watchdog asks the budget; two drain."""
    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 120\n")
    (hang / "nvidia-smi").chmod(0o755)
    sim = fault_cluster / "healthy"
    env = {**slurm_env, "STETHO_SYSROOT": str(sim / "sysroot"),
           "PATH": f"{hang}:{sim / 'bin'}:{os.environ['PATH']}",
           "STETHO_DB": str(tmp_path / "h.db"),
           "STETHO_PROFILE": "h100-sxm-8gpu", "STETHO_HEALTH_TIMEOUT": "4"}
    stetho = str(Path(sys.executable).parent / "stetho")
    procs = [subprocess.Popen([stetho, "gate", "--local", "--slurm", "health-check", "--policy",
                               "pre-job", "--node", n, "--quiet", "--no-reports"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for n in NODES[:8]]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 3 for p in procs), outs
    drained = _drained(slurm_env)
    assert len(drained) == 2, (drained, outs)
    assert all("did not finish in 4 s" in r for r in drained.values())
    assert sum("circuit open" in o for o, _ in outs) == 6


def test_a_redrain_keeps_the_first_reason_and_a_persons_is_never_touched(slurm_env) -> None:
    from stetho.gate.breaker import Circuit
    from stetho.gate.slurm_hooks import drain_through_budget

    sl = Slurm(act=True)
    first = drain_reason("gpu_clocks", "first failure")
    (a,), _ = drain_through_budget("gpu05", first, "t", circuit=Circuit())
    assert a.done
    before = sl.show(["gpu05"])["gpu05"]
    time.sleep(1.1)  # a rewritten reason would carry a later stamp
    (b,), trip = drain_through_budget("gpu05", drain_reason("xid", "second"), "t",
                                      circuit=Circuit())
    assert trip is None and b.kind == "skip" and "first reason kept" in b.message
    after = sl.show(["gpu05"])["gpu05"]
    assert (after.reason, after.reason_time) == (first, before.reason_time)
    subprocess.run(["scontrol", "update", "NodeName=gpu06", "State=DRAIN", "Reason=RMA 4711"],
                   env=slurm_env, check=True, timeout=30)
    (c,), _ = drain_through_budget("gpu06", drain_reason("xid", "79"), "t", circuit=Circuit())
    assert c.kind == "skip" and "someone else" in c.message
    assert sl.show(["gpu06"])["gpu06"].reason == "RMA 4711"
    from stetho.gate import budget as B

    st = B.DrainBudget(Path(slurm_env["STETHO_DRAIN_LEDGER"]), Circuit()).status(
        "stethotest", time.time())
    assert [e.kind for e in st.entries] == ["grant", "repeat"]  # the person's drain: no row


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_breaker_status_and_a_signed_reset(slurm_env, tmp_path) -> None:
    from stetho.gate.breaker import Circuit
    from stetho.gate.slurm_hooks import drain_through_budget

    people = signing.make_people(tmp_path / "people")
    env = {**slurm_env, "STETHO_GATES": str(people.gates)}
    for n in NODES[:3]:
        drain_through_budget(n, drain_reason("xid", "79"), f"health-check@{n}", circuit=Circuit())
    st = _cli("breaker", "status", "--json", env=env)
    assert st.returncode == 0, st.stderr
    (doc,) = json.loads(st.stdout)["breakers"]
    assert doc["scope"] == "stethotest" and doc["limit"] == 2 and doc["open"]
    assert doc["counted"] == ["gpu01", "gpu02"]
    text = _cli("breaker", "status", env=env).stdout
    assert "breaker stethotest: OPEN, 2 drained of limit 2" in text
    assert "waiting (refused, not drained): gpu03" in text

    bad = _cli("breaker", "reset", "--scope", "stethotest", "--key", str(people.key("mallory")),
               env=env)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert "breaker reset refused: your key" in bad.stderr
    assert "not accepted by the allowed signers file" in bad.stderr
    assert _cli("breaker", "status", "--json", env=env).stdout.count('"open": true') == 1
    # a key the file lists, but not under an approver of the policy
    dave = _cli("breaker", "reset", "--scope", "stethotest", "--key", str(people.key("dave")),
                env=env)
    assert dave.returncode == 2 and "not an approver" in dave.stderr, dave.stderr

    ok = _cli("breaker", "reset", "--scope", "stethotest", "--key", str(people.key("bob")),
              env=env)
    assert ok.returncode == 0, ok.stderr
    assert "reset by bob" in ok.stdout and "gpu01, gpu02" in ok.stdout
    (a,), trip = drain_through_budget("gpu03", drain_reason("xid", "79"), "t", circuit=Circuit())
    assert trip is None and a.done  # the budget is free again


_SOAK = _ACTIVATE + """
import json, random, sys, time
from stetho.gate import drains
from stetho.gate.breaker import Circuit
from stetho.gate.slurm import Slurm
from stetho.gate.slurm_hooks import drain_through_budget
node, runs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng, circuit, sl = random.Random(seed), Circuit(), Slurm(act=True)
budget = drains.budget_for(circuit)
asked, unread = 0, []
for i in range(runs):
    if rng.random() < 0.6:  # the check fails: drain through the budget
        (a,), _ = drain_through_budget(node, "stetho: soak: run %d" % i, "soak@" + node,
                                       circuit=circuit)
        if a.done or "circuit open" in a.message or "already drained by stetho" in a.message:
            asked += 1  # the budget decided: a grant, a refusal or a repeat
        else:  # Slurm did not answer, or marked the node itself: no decision to make
            unread.append(a.message)
    else:  # it passes: resume stetho's drain, freeing the slot
        drains.release(budget, sl.resume([node]), time.time())
print(json.dumps({"asked": asked, "unread": unread}))
"""


def test_soak_500_health_checks_never_hold_more_than_the_budget(slurm_env) -> None:
    """8 nodes, 63 health checks each with random failures and passes, all at once: at no
    moment do more grants hold the budget than the limit, every drain Slurm shows holds one,
    and every drain that reached the budget left a row (grant, repeat or refusal)."""
    import sqlite3

    procs = [subprocess.Popen([sys.executable, "-c", _SOAK, n, "63", str(i)], env=slurm_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, n in enumerate(NODES[:8])]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    done = [json.loads(o) for o, _ in outs]
    asked = sum(d["asked"] for d in done)
    unread = [m for d in done for m in d["unread"]]
    # slurmctld marks a resumed fake node DOWN "Not responding" (no slurmd behind it): a
    # reason of someone else's, which stetho leaves alone; nothing else may skip the budget
    assert all("Not responding" in m for m in unread), unread
    with sqlite3.connect(slurm_env["STETHO_DRAIN_LEDGER"]) as con:
        grants = con.execute("SELECT node, id, released_after FROM grants").fetchall()
        rows = sum(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                   for t in ("grants", "repeats", "refusals"))
    assert rows == asked and len(grants) > 2
    # replayed in the order the transactions committed: a grant at its id, a release just
    # after the last grant before it
    events = sorted([(gid, 1) for _, gid, _ in grants]
                    + [(after + 0.5, -1) for _, _, after in grants if after is not None])
    held = peak = 0
    for _, step in events:
        held += step
        peak = max(peak, held)
    assert peak == 2
    live = {n for n, _, after in grants if after is None}
    assert set(_drained(slurm_env)) <= live
