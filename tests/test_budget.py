"""The drain budget's ledger on its own: one SQLite file, many callers (threads and real
processes) at once, never more grants in a window than the limit."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from stetho.gate import budget as B
from stetho.gate.breaker import Circuit

NOW = 1_800_000_000.0
C = Circuit(max_pct=10, min_nodes=2, window_s=3600)


def _ask(b: B.DrainBudget, nodes: list[str], now: float = NOW, who: str = "t",
         recent: tuple[str, ...] = ()) -> B.Ruling:
    return b.request(nodes, scope="c1", scope_size=16, who=who,
                     reasons={n: f"stetho: x: {n}" for n in nodes}, now=now,
                     slurm_recent=recent)


def test_grants_up_to_the_limit_then_refuses_all_or_nothing(tmp_path: Path) -> None:
    b = B.DrainBudget(tmp_path / "l.db", C)
    first = _ask(b, ["n1"])
    assert (first.allowed, first.refused, first.trip, first.room) == (("n1",), (), None, 2)
    two = _ask(b, ["n2", "n3"])  # n1 + 2 > 2: neither
    assert two.allowed == () and two.refused == ("n2", "n3") and two.trip is not None
    assert (two.trip.would, two.trip.limit, two.trip.recent) == (3, 2, ("n1",))
    assert two.alert  # the first refusal in the window alerts...
    assert _ask(b, ["n2"]).allowed == ("n2",)
    late = _ask(b, ["n4"])
    assert late.refused == ("n4",) and not late.alert  # ...later ones stay quiet
    # a new window: n1 and n2 still hold the budget (granted at NOW, the window is 1 h)...
    assert _ask(b, ["n4"], NOW + 1800).alert is False
    # ...and after it, an open breaker alerts again
    _ask(b, ["n5", "n6"], NOW + 3601)
    assert _ask(b, ["n7"], NOW + 3602).alert is True


def test_a_redrain_costs_nothing_and_is_kept_as_a_repeat(tmp_path: Path) -> None:
    b = B.DrainBudget(tmp_path / "l.db", C)
    _ask(b, ["n1", "n2"])
    again = _ask(b, ["n1"])
    assert again.allowed == () and again.already == ("n1",) and again.trip is None
    st = b.status("c1", NOW + 1)
    assert [e.kind for e in st.entries].count("repeat") == 1
    assert st.counted == ("n1", "n2") and st.limit == 2 and st.size == 16


def test_slurms_view_counts_unless_a_reset_forgave_it(tmp_path: Path) -> None:
    b = B.DrainBudget(tmp_path / "l.db", C)
    # two stetho drains the ledger never saw (an older version): the budget is spent
    r = _ask(b, ["n3"], recent=("n1", "n2"))
    assert r.refused == ("n3",) and r.trip is not None and r.trip.recent == ("n1", "n2")
    assert _ask(b, ["n1"], recent=("n1", "n2")).already == ("n1",)
    forgiven = b.reset("c1", who="bob", now=NOW + 10, proof="sig", slurm_recent=("n1", "n2"))
    assert forgiven == ("n1", "n2")
    assert _ask(b, ["n3"], NOW + 11, recent=("n1", "n2")).allowed == ("n3",)
    st = b.status("c1", NOW + 12, ("n1", "n2"))
    assert st.counted == ("n3",) and not st.open
    assert [e.who for e in st.entries if e.kind == "reset"] == ["bob"]


def test_the_window_ends_and_release_frees_a_slot(tmp_path: Path) -> None:
    b = B.DrainBudget(tmp_path / "l.db", C)
    _ask(b, ["n1", "n2"])
    assert _ask(b, ["n3"], NOW + 60).refused == ("n3",)
    assert b.release("n1", NOW + 120) == 1
    assert _ask(b, ["n3"], NOW + 130).allowed == ("n3",)
    assert _ask(b, ["n4"], NOW + 3601).allowed == ("n4",)  # n2's window has ended
    assert _ask(b, ["n5"], NOW + 3602).refused == ("n5",)  # n3 and n4 hold the budget
    assert b.status("c1", NOW + 3602).counted == ("n3", "n4")


def test_preview_writes_nothing_and_a_missing_ledger_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "l.db"
    b = B.DrainBudget(path, C)
    p = b.preview(["n1", "n2", "n3"], scope="c1", scope_size=16, now=NOW)
    assert p.refused == ("n1", "n2", "n3") and p.room == 2 and not path.exists()
    _ask(b, ["n1"])
    p = b.preview(["n2"], scope="c1", scope_size=16, now=NOW)
    assert p.allowed == ("n2",) and p.room == 1
    assert b.status("c1", NOW).counted == ("n1",)  # the preview granted nothing


def test_scopes_are_separate(tmp_path: Path) -> None:
    b = B.DrainBudget(tmp_path / "l.db", C)
    _ask(b, ["n1", "n2"])
    other = b.request(["m1", "m2"], scope="c2", scope_size=4, who="t", reasons={}, now=NOW)
    assert other.allowed == ("m1", "m2")
    assert b.scopes() == ["c1", "c2"]


def test_an_unusable_ledger_is_a_ledger_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    b = B.DrainBudget(tmp_path / "file" / "l.db", C)
    with pytest.raises(B.LedgerError, match="drain ledger"):
        _ask(b, ["n1"])
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(B.LedgerError):
        _ask(B.DrainBudget(garbage, C), ["n1"])


def test_policy_and_environment_name_the_ledger(tmp_path: Path, stetho_env) -> None:
    from stetho import config
    from stetho.gate import policy as gatepolicy

    p = tmp_path / "gates" / "p.yml"
    p.parent.mkdir()
    p.write_text("policy: p\nscheduler:\n  circuit: {ledger: ../shared/ledger.db}\n")
    circuit = gatepolicy.load(str(p)).circuit
    assert circuit.ledger == (tmp_path / "shared" / "ledger.db").absolute()
    assert B.ledger_path(circuit) == circuit.ledger
    stetho_env.setenv(B.ENV, str(tmp_path / "env.db"))
    assert B.ledger_path(circuit) == tmp_path / "env.db"
    assert B.ledger_path(Circuit()) == tmp_path / "env.db"
    with config.using(config.load(env={"STETHO_DB": str(tmp_path / "h" / "h.db")}, files=[])):
        assert B.ledger_path(Circuit()) == tmp_path / "h" / "drain-ledger.db"


def test_threads_at_once_get_exactly_the_budget(tmp_path: Path) -> None:
    b = B.DrainBudget(tmp_path / "l.db", C)
    go = threading.Barrier(16)
    got: list[B.Ruling] = []

    def one(i: int) -> None:
        go.wait()
        got.append(_ask(B.DrainBudget(b.path, C), [f"n{i:02d}"], who=f"w{i}"))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(len(r.allowed) for r in got) == 2
    assert sum(len(r.refused) for r in got) == 14
    assert sum(r.alert for r in got) == 1


_CALLER = """
import json, sys, time
from pathlib import Path
from stetho.gate.budget import DrainBudget
from stetho.gate.breaker import Circuit
path, node, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
while time.time() < start:
    time.sleep(0.001)
b = DrainBudget(Path(path), Circuit(max_pct=10, min_nodes=2, window_s=3600))
r = b.request([node], scope="c1", scope_size=16, who=node, reasons={node: "stetho: t"},
              now=time.time())
print(json.dumps({"allowed": list(r.allowed), "refused": list(r.refused), "alert": r.alert}))
"""


def test_processes_at_once_get_exactly_the_budget(tmp_path: Path) -> None:
    import time

    start = time.time() + 2.0  # every interpreter up before the first asks
    procs = [subprocess.Popen([sys.executable, "-c", _CALLER, str(tmp_path / "l.db"),
                               f"n{i:02d}", str(start)], stdout=subprocess.PIPE, text=True)
             for i in range(16)]
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(len(o["allowed"]) for o in outs) == 2
    assert sum(len(o["refused"]) for o in outs) == 14
    assert sum(o["alert"] for o in outs) == 1
    st = B.DrainBudget(tmp_path / "l.db", C).status("c1", time.time())
    assert len(st.counted) == 2 and sum(e.kind == "refused" for e in st.entries) == 14


_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_ledger_locked_too_long_is_a_ledger_error_not_a_grant(tmp_path: Path) -> None:
    """Another process holds the queue lock (a hung caller, a dead NFS lock server): the
    request gives up after the busy timeout, from the main thread (blocking, SIGALRM) and
    from any other thread (polling), and grants nothing."""
    path = tmp_path / "l.db"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, f"{path}.lock"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        b = B.DrainBudget(path, C, busy_timeout_s=0.3)
        with pytest.raises(B.LedgerError, match="still locked after 0.3 s"):
            _ask(b, ["n1"])
        errors: list[Exception] = []

        def other() -> None:
            try:
                _ask(b, ["n2"])
            except B.LedgerError as exc:
                errors.append(exc)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(errors) == 1 and "still locked" in str(errors[0])
    finally:
        holder.communicate("", timeout=30)
    assert _ask(B.DrainBudget(path, C), ["n3"]).allowed == ("n3",)
    assert B.DrainBudget(path, C).status("c1", NOW).counted == ("n3",)
