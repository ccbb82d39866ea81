"""`stetho stats --slurm`: Slurm's own drain/resume stamps beside the drain ledger.

The parsers on `sinfo -R` recorded on the multi-node testbed and on a `sacctmgr show event`
fixture written from its documented -P format (fixtures/recorded/slurm-events/README.md),
and on garbage. Then the CLI on the real testbed (tests/slurm_cluster.py): a node drained by
hand with scontrol is listed as an open drain and kept out of MTTR. This testbed has no
slurmdbd, so the real sacctmgr says accounting is not available; a stand-in `sacctmgr` on
PATH (a script in the test's tmp dir printing the written fixture) stands for a cluster with
slurmdbd, and MTTR is checked against arithmetic done here by hand."""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stetho.gate.breaker import Circuit
from stetho.gate.budget import DrainBudget
from stetho.history.store import History, NodeRun
from stetho.jobs import node_events
from stetho.results import Result
from tests import slurm_cluster as sc

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "recorded" / "slurm-events"
H = 3600
DAY = 86400


def utc(text: str) -> int:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


@pytest.fixture
def in_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Slurm prints local time: the fixtures were taken (and written) in UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# -- the parsers ------------------------------------------------------------------------------

def test_sinfo_recorded_on_the_testbed_gives_each_drained_node_open_since_its_reason(
        in_utc: None) -> None:
    evs = node_events.parse_sinfo((FIX / "sinfo-R-drained.txt").read_text())
    assert [(e.node, e.state, e.user, e.end, e.source) for e in evs] == [
        ("n02", "drained", "root", None, "slurm-current"),
        ("n03", "down", "root", None, "slurm-current")]
    assert evs[0].start == evs[1].start == utc("2026-12-06T19:25:31")
    assert evs[0].reason == "gpu_xid on gpu3 | stetho test"  # the | stays in the reason
    assert node_events.parse_sinfo((FIX / "sinfo-R-resumed.txt").read_text()) == []


def test_sacctmgr_fixture_gives_closed_and_open_node_events(in_utc: None) -> None:
    evs = node_events.parse_sacctmgr((FIX / "sacctmgr-show-event.WRITTEN.txt").read_text())
    got = [(e.node, e.start, e.end, e.state, e.user) for e in evs]
    assert got == [
        ("n05", utc("2026-11-02T08:15:00"), utc("2026-11-02T14:45:00"), "DRAIN", "root"),
        ("n06", utc("2026-11-04T03:00:00"), utc("2026-11-05T03:00:00"), "DOWN*", "slurm"),
        ("n07", utc("2026-11-10T00:00:00"), utc("2026-11-10T02:00:00"), "IDLE+DRAIN", "root"),
        ("n06", utc("2026-11-20T10:00:00"), None, "DRAIN", "alice")]
    assert evs[2].reason == "kernel upgrade | planned"
    assert {e.source for e in evs} == {"slurm-events"}


@pytest.mark.parametrize(("parse", "text", "match"), [
    (node_events.parse_sinfo, "hello world\n", r"sinfo -R line 1: 'hello world' is not 5"),
    (node_events.parse_sinfo, "n01|yesterday|root|drained|x\n", r"sinfo -R line 1: 'yesterday'"),
    (node_events.parse_sinfo, "n01|2026-12-06T19:25:31|root|<html>|x\n", "state '<html>'"),
    (node_events.parse_sinfo, "\x00\x01\x02", "binary"),
    (node_events.parse_sacctmgr, "n01|2026-11-02T08:15:00|DRAIN\n", "sacctmgr line 1"),
    (node_events.parse_sacctmgr, "\nn01|2026-11-02T08:15:00|2026-11-01T08:15:00|DRAIN|r|x\n",
     r"sacctmgr line 2: ends \(2026-11-01T08:15:00\) before it starts"),
    (node_events.parse_sacctmgr, "|2026-11-02T08:15:00|Unknown|DRAIN|r|x\n",
     "starting with a node name"),
])
def test_garbage_is_one_named_error(parse: object, text: str, match: str) -> None:
    with pytest.raises(node_events.NodeEventsError, match=match):
        parse(text)  # type: ignore[operator]


# -- the CLI ----------------------------------------------------------------------------------

NODES = ["n03", "n05", "n06", "n07"]
#: (node, day of November 2026) failing gpu_xid; every other node-day passes
FAILS = {("n05", 2), ("n05", 12), ("n06", 4), ("n06", 20), ("n07", 15)}


def run_at(day: int) -> int:
    return utc(f"2026-11-{day:02d}T02:30:00")


def _history(tmp: Path, now: int) -> tuple[Path, Path]:
    """Daily runs 1-25 November; n03 (the testbed node drained by hand) fails 30 min ago.
    The ledger: stetho drained n05 twice (the first also in Slurm's events, 30 s apart)."""
    db = tmp / "history.db"
    with History(db) as h:
        for day in range(1, 26):
            h.record(f"run-{day:02d}", "sweep", [NodeRun(n, "h100", [Result(
                n, "gpu_xid", "gpu0", "fail" if (n, day) in FAILS else "pass", "")], [])
                for n in NODES], when=run_at(day))
        h.record("run-now", "sweep", [NodeRun("n03", "h100", [Result(
            "n03", "gpu_xid", "gpu0", "fail", "")], [])], when=now - 1800)
    ledger = tmp / "drain-ledger.db"
    budget = DrainBudget(ledger, Circuit(window_s=DAY))
    for at, released in ((utc("2026-11-02T08:15:30"), utc("2026-11-02T14:00:00")),
                         (utc("2026-11-12T02:40:00"), utc("2026-11-12T20:40:00"))):
        budget.request(["n05"], scope="c", scope_size=4, who="gate",
                       reasons={"n05": "gpu_xid"}, now=at)
        budget.release("n05", now=released)
    return db, ledger


def _stats(env: dict[str, str], db: Path, ledger: Path, now: int, *args: str
           ) -> subprocess.CompletedProcess[str]:
    days = (now - utc("2026-11-01T00:00:00")) // DAY + 2
    env = {k: v for k, v in env.items() if not k.startswith("STETHO_")}
    return subprocess.run([sys.executable, "-m", "stetho", "stats", "--db", str(db),
                           "--ledger", str(ledger), "--since", f"{days}d", *args],
                          text=True, capture_output=True, env={**env, "TZ": "UTC"}, timeout=120)


def _stand_in(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(exist_ok=True)
    p = folder / name
    p.write_text(f"#!/bin/sh\n{body}\n")
    p.chmod(0o755)
    return folder


@pytest.mark.xdist_group("slurm-cluster")
def test_a_hand_drain_is_an_open_drain_out_of_mttr_and_sacctmgr_events_give_mttr(
        slurm_cluster: sc.Cluster, tmp_path: Path) -> None:
    c = slurm_cluster
    c.reset()
    now = int(time.time())
    db, ledger = _history(tmp_path, now)
    c.scontrol("update", "NodeName=n03", "State=DRAIN", "Reason=gpu_xid by hand")
    try:
        # a user's own time format must not change what stats reads
        env = c.full_env({"SLURM_TIME_FORMAT": "relative"})
        # the testbed's own sacctmgr: no slurmdbd, said; the open drain comes from sinfo -R
        p = _stats(env, db, ledger, now, "--slurm", "--json")
        assert p.returncode == 0, p.stdout + p.stderr
        f = json.loads(p.stdout)
        assert "not available" in f["sources"]["slurm"]["note"]
        assert any("sacctmgr" in n and "not available" in n for n in f["notes"])
        [hand] = [d for d in f["drains"]["intervals"] if d["node"] == "n03"]
        assert hand["open"] and hand["sources"] == ["slurm-current"]
        assert hand["reason"] == "gpu_xid by hand"
        assert now - 5 <= hand["start"] <= time.time() + 5
        # MTTR: n05's two ledger drains (08:15:30 -> 14:00 = 20670 s; 02:40 -> 20:40 =
        # 64800 s), n06 and n07 fail -> next pass, a day each (3 x 86400); n03 ongoing
        m = f["mttr_hours"]
        assert (m["n"], m["from_drains"], m["from_passes"], m["drain_still_open"]) == (
            5, 2, 3, 1)
        assert m["mean"] == pytest.approx((20670 + 64800 + 3 * 86400) / 5 / H)
        assert f["drains"]["open"] == 1

        # with slurmdbd (the stand-in prints the written fixture): n05's first drain is one
        # interval told by both (Slurm's resume, 14:45, is its end); n06's events are drains
        bindir = _stand_in(tmp_path / "bin", "sacctmgr",
                           f"cat {FIX / 'sacctmgr-show-event.WRITTEN.txt'}")
        env2 = {**env, "PATH": f"{bindir}{os.pathsep}{env['PATH']}"}
        p = _stats(env2, db, ledger, now, "--slurm", "--json")
        assert p.returncode == 0, p.stdout + p.stderr
        f = json.loads(p.stdout)
        assert f["sources"]["slurm"]["note"] is None
        m = f["mttr_hours"]
        # n05 2 Nov: 08:15 -> 14:45 = 23400 s (slurm-events); n06 4 Nov: 03:00 -> 03:00 next
        # day = 86400 s (slurm-events); n05 12 Nov: 64800 s (ledger); n07 15 Nov: fail ->
        # pass 86400 s. n06 20 Nov: drained 10:00, never resumed: ongoing, though its history
        # passed the next day; n03: ongoing.
        assert m["mean"] == pytest.approx((23400 + 86400 + 64800 + 86400) / 4 / H)  # 18.125
        assert (m["n"], m["from_drains"], m["from_passes"], m["drain_still_open"]) == (
            4, 3, 1, 2)
        assert m["drains_by_source"] == {"ledger": 1, "slurm-events": 2}
        got = {(d["node"], d["start_utc"]): (sorted(d["sources"]), d["open"])
               for d in f["drains"]["intervals"]}
        assert got == {
            ("n05", "2026-11-02T08:15:00Z"): (["ledger", "slurm-events"], False),
            ("n05", "2026-11-12T02:40:00Z"): (["ledger"], False),
            ("n06", "2026-11-04T03:00:00Z"): (["slurm-events"], False),
            ("n07", "2026-11-10T00:00:00Z"): (["slurm-events"], False),
            ("n06", "2026-11-20T10:00:00Z"): (["slurm-events"], True),
            ("n03", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(hand["start"]))):
                (["slurm-current"], True)}
        assert (f["drains"]["open"], f["drains"]["oldest_open_since"]) == (
            2, utc("2026-11-20T10:00:00"))
        # the table says the same, and which source each interval came from
        t = _stats(env2, db, ledger, now, "--slurm")
        assert t.returncode == 0, t.stderr
        assert "2 drains still open, oldest since 2026-11-20 10:00 UTC" in t.stdout
        assert "3 drain -> resume from 1 ledger, 2 slurm-events, 1 fail -> pass" in t.stdout
        row = next(ln.split() for ln in t.stdout.splitlines()
                   if ln.startswith("n05 ") and "2026-11-02" in ln)
        assert row[:8] == ["n05", "2026-11-02", "08:15", "2026-11-02", "14:45", "6.5", "h",
                           "slurm-events+ledger"], t.stdout
        # and the textfile: the repair time in seconds, the open drains
        prom = tmp_path / "stats.prom"
        assert _stats(env2, db, ledger, now, "--slurm", "--textfile", str(prom)).returncode == 0
        text = prom.read_text()
        assert "stetho_mttr_seconds 65250\n" in text and "stetho_drains_open 2\n" in text
    finally:
        c.scontrol("update", "NodeName=n03", "State=RESUME", check=False)


def test_without_slurm_it_says_slurm_was_not_asked(tmp_path: Path) -> None:
    now = int(time.time())
    db, ledger = _history(tmp_path, now)
    p = _stats(dict(os.environ), db, ledger, now)
    assert p.returncode == 0, p.stderr
    assert "Slurm not asked" in p.stdout
    f = json.loads(_stats(dict(os.environ), db, ledger, now, "--json").stdout)
    assert f["sources"]["slurm"]["absent"].startswith("Slurm not asked")
    assert [(d["sources"], d["reason"], d["hours"]) for d in f["drains"]["intervals"]] == [
        (["ledger"], "gpu_xid", pytest.approx(
            (utc("2026-11-02T14:00:00") - utc("2026-11-02T08:15:30")) / H, abs=1e-6)),
        (["ledger"], "gpu_xid", 18.0)]


@pytest.mark.parametrize(("sinfo", "sacctmgr", "said"), [
    ("echo 'slurm_load_node: Unable to contact slurm controller (connect failure)' >&2; "
     "exit 1", None, "sinfo -R exited 1: slurm_load_node: Unable to contact slurm controller"),
    (None, None, "sinfo: not on PATH"),
    ("exit 0", "echo 'Database is busy or waiting for lock from other user.'",
     "sacctmgr line 1: 'Database is busy"),
])
def test_slurm_asked_but_unreachable_or_garbled_exits_3_naming_it(
        tmp_path: Path, sinfo: str | None, sacctmgr: str | None, said: str) -> None:
    now = int(time.time())
    db, ledger = _history(tmp_path, now)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("sinfo", sinfo), ("sacctmgr", sacctmgr)):
        if body is not None:
            _stand_in(bindir, name, body)
    p = _stats({**os.environ, "PATH": str(bindir)}, db, ledger, now, "--slurm")
    assert p.returncode == 3, p.stdout + p.stderr
    assert said in p.stdout and "Traceback" not in p.stderr
    f = json.loads(_stats({**os.environ, "PATH": str(bindir)}, db, ledger, now, "--slurm",
                          "--json").stdout)
    assert f["mttr_hours"]["mean"] is None and f["drains"]["known"] is False


def test_sacctmgr_without_slurmdbd_is_said_not_available_and_not_an_error(
        tmp_path: Path) -> None:
    """The testbed's sacctmgr answer (recorded: accounting off) replayed by a stand-in: the
    open drains from sinfo are still read; the past events are said to be not available."""
    now = int(time.time())
    db, ledger = _history(tmp_path, now)
    rc = (FIX / "sacctmgr-no-slurmdbd.rc").read_text().strip()
    bindir = _stand_in(tmp_path / "bin", "sacctmgr",
                       f"cat {FIX / 'sacctmgr-no-slurmdbd.stderr'} >&2; exit {rc}")
    _stand_in(bindir, "sinfo", f"cat {FIX / 'sinfo-R-drained.txt'}")
    p = _stats({**os.environ, "PATH": f"{bindir}{os.pathsep}/usr/bin:/bin"}, db, ledger, now,
               "--slurm", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    f = json.loads(p.stdout)
    note = f["sources"]["slurm"]["note"]
    assert "not running a supported accounting_storage plugin" in note
    assert "not available" in note
    assert sorted((d["node"], d["sources"][0], d["open"]) for d in f["drains"]["intervals"]
                  if d["sources"] != ["ledger"]) == [("n02", "slurm-current", True),
                                                     ("n03", "slurm-current", True)]


def test_a_drain_slurm_has_no_time_for_confirms_or_is_named_never_fails_the_source(
        tmp_path: Path) -> None:
    """sinfo -R prints `Unknown` for a reason with no stamp (a node down since a slurmctld
    restart). The listing is still read: n06's Unknown line confirms its open drain from
    slurmdbd's events (Slurm seen, still out); n08's has nothing to confirm, so it is named
    as out with its start unknown and is in no repair-time figure."""
    now = int(time.time())
    db, ledger = _history(tmp_path, now)
    listing = tmp_path / "sinfo.txt"
    listing.write_text((FIX / "sinfo-R-drained.txt").read_text()
                       + "n06|Unknown|slurm|drained|Kill task failed\n"
                       + "n08|Unknown|slurm|down*|Not responding\n")
    bindir = _stand_in(tmp_path / "bin", "sinfo", f"cat {listing}")
    _stand_in(bindir, "sacctmgr", f"cat {FIX / 'sacctmgr-show-event.WRITTEN.txt'}")
    p = _stats({**os.environ, "PATH": f"{bindir}{os.pathsep}/usr/bin:/bin"}, db, ledger, now,
               "--slurm", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    f = json.loads(p.stdout)
    assert f["sources"]["slurm"]["error"] is None
    [n06] = [d for d in f["drains"]["intervals"] if d["node"] == "n06" and d["open"]]
    assert set(n06["sources"]) == {"slurm-events", "slurm-current"}
    assert not [d for d in f["drains"]["intervals"] if d["node"] == "n08"]
    [said] = [n for n in f["notes"] if "no time in Slurm" in n]
    assert "n08 (down*: Not responding)" in said and "n06" not in said
    assert {d["node"] for d in f["drains"]["intervals"] if d["open"]} >= {"n02", "n03", "n06"}
