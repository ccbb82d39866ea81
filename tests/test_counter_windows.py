"""Counters with a time base (issue 23): error counters are judged by their growth within the
profile's window, from the node's own history in a real SQLite file; a reset or a reboot
starts a new epoch; without history the absolute count is judged and the result says so.

The nodes are simulated ones (real recorded outputs, faults injected); the history is written
the way `stetho check` writes it (recording.after_run), from bundles dated when they were
collected, so a reading "25 h ago" is a bundle collected 25 h ago.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from stetho.evidence.bundle import Bundle
from stetho.facts.window import Reading, growth

pytestmark = pytest.mark.xdist_group("counterwindows")

H = 3600.0
PROFILE = "h100-sxm-8gpu"


# -- the arithmetic, on plain numbers ---------------------------------------------------------

def test_no_earlier_reading_has_no_growth() -> None:
    assert growth([], 4096, now=100 * H, window_s=24 * H) is None


def test_growth_from_the_reading_at_the_window_start() -> None:
    g = growth([Reading(70 * H, 4000), Reading(75 * H, 4090), Reading(90 * H, 4093)], 4096,
               now=100 * H, window_s=24 * H)
    assert g is not None
    assert (g.delta, g.since, g.full, g.resets) == (6, 75 * H, True, 0)
    assert g.span() == "in the last 25 h"


def test_a_short_history_says_how_short() -> None:
    g = growth([Reading(94 * H, 0)], 4096, now=100 * H, window_s=24 * H)
    assert g is not None and not g.full and g.delta == 4096
    assert "since the node's first reading in history" in g.span()


def test_a_drop_is_a_new_epoch_never_a_negative_rate() -> None:
    g = growth([Reading(90 * H, 5000)], 40, now=100 * H, window_s=24 * H)
    assert g is not None and g.delta == 40 and g.resets == 1
    assert "1 counter reset or reboot" in g.span()


def test_a_reboot_is_a_new_epoch_even_when_the_count_is_higher() -> None:
    """5000 before a reboot and 5100 after it: 5100 were counted since the boot, not 100."""
    boots = [Reading(90 * H, 1.0)]
    g = growth([Reading(90 * H, 5000)], 5100, now=100 * H, window_s=24 * H, boots=boots,
               boot_now=2.0)
    assert g is not None and g.delta == 5100 and g.resets == 1
    same = growth([Reading(90 * H, 5000)], 5100, now=100 * H, window_s=24 * H, boots=boots,
                  boot_now=1.0)
    assert same is not None and same.delta == 100 and same.resets == 0


def test_readings_after_now_are_not_history() -> None:
    assert growth([Reading(101 * H, 0)], 4096, now=100 * H, window_s=24 * H) is None


# -- through the checks, with a real history file ---------------------------------------------

def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def _collect(root: Path, faults: list[str]) -> Bundle:
    from stetho import profiles
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    build_node(root / "gpu07", "gpu07", faults)
    env, node = collect.sim_environment(str(root / "gpu07"))
    return collect.collect(profiles.load(PROFILE), replace(env, timeout_cap=10.0), node)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Bundle]:
    """One simulated node, gpu07, as it reads healthy, with each counter fault, rebooted."""
    base = tmp_path_factory.mktemp("windows")
    out = {"healthy": _collect(base / "healthy", [])}
    for name, faults in (("symbols", ["ib-symbol-errors=mlx5_5"]),
                         ("nvlink", ["nvlink-errors=gpu2"]),
                         ("aer", ["riser=gpu4"]),
                         ("symbols-rebooted", ["ib-symbol-errors=mlx5_5", "reboot"])):
        out[name] = _collect(base / name, faults)
    return out


def _record(db: Path, bundle: Bundle, hours_ago: float) -> None:
    """The bundle as `stetho check` records it, collected (and recorded) `hours_ago`."""
    from stetho.checking import run as checkrun
    from stetho.history import recording
    from stetho.history.store import new_run_id

    when = datetime.now(timezone.utc).timestamp() - hours_ago * H
    dated = replace(bundle, collected_at=_iso(when))
    run = checkrun.run([dated], profile=PROFILE)
    recording.after_run("check", new_run_id(), list(run.results), run.summaries, db, when=when)


def _check(bundle: Bundle, db: Path | None, select: str) -> list:
    from stetho.checking import run as checkrun

    return list(checkrun.run([bundle], profile=PROFILE, select=select, history=db).results)


def _one(results: list, check: str, subject: str):  # type: ignore[no-untyped-def]
    return next(r for r in results if r.check == check and r.subject == subject)


def _symbols_at(bundle: Bundle, value: int) -> Bundle:
    """The bundle with mlx5_5's symbol error count read as `value`, by sysfs and by perfquery
    -x alike (what the node would say: the check judges the higher of the two)."""
    import re

    rec = bundle.probes["ib_sysfs"]
    path = "/sys/class/infiniband/mlx5_5/ports/1/counters/symbol_error"
    assert path in rec.files
    probes = {**bundle.probes, "ib_sysfs": replace(rec, files={**rec.files, path: f"{value}\n"})}
    pq = bundle.probes["perfquery:mlx5_5"]
    text, n = re.subn(r"^(SymbolErrorCounter:\.*)\d+$", rf"\g<1>{value}", pq.stdout,
                      flags=re.M)
    assert n == 1
    probes["perfquery:mlx5_5"] = replace(pq, stdout=text)
    return replace(bundle, probes=probes)


def test_without_history_the_count_since_reset_is_judged_and_said(bundles) -> None:
    r = _one(_check(bundles["symbols"], None, "ib_counters"), "ib_counters", "mlx5_5:1")
    assert r.status == "fail"
    assert "SymbolErrorCounter=4096 since boot or its last reset" in r.message
    assert "reads no history" in r.message


def test_a_burst_within_the_window_fails(bundles, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _record(db, bundles["healthy"], hours_ago=2)
    r = _one(_check(bundles["symbols"], db, "ib_counters"), "ib_counters", "mlx5_5:1")
    assert r.status == "fail"
    assert "SymbolErrorCounter +4096 in the" in r.message and "2 h" in r.message
    assert "judged on growth within 24 h" in r.message


def test_the_same_total_spread_over_a_year_passes(bundles, tmp_path: Path) -> None:
    """4096 symbol errors on a port that already read 4090 a day ago: 6 in the window."""
    db = tmp_path / "h.db"
    for days in (300, 200, 100):  # the count crept up over the year
        _record(db, _symbols_at(bundles["symbols"], 4096 - days), hours_ago=days * 24)
    _record(db, _symbols_at(bundles["symbols"], 4090), hours_ago=25)
    r = _one(_check(bundles["symbols"], db, "ib_counters"), "ib_counters", "mlx5_5:1")
    assert r.status == "pass", r.message
    assert "judged on growth within 24 h" in r.message


def test_a_counter_cleared_since_the_last_reading_is_a_new_epoch(bundles, tmp_path: Path
                                                                   ) -> None:
    """9000 yesterday, 4096 now: a clear in between, and 4096 since it, never -4904."""
    db = tmp_path / "h.db"
    _record(db, _symbols_at(bundles["symbols"], 9000), hours_ago=20)
    r = _one(_check(bundles["symbols"], db, "ib_counters"), "ib_counters", "mlx5_5:1")
    assert r.status == "fail"
    assert "+4096" in r.message and "counter reset or reboot in between" in r.message


def test_a_reboot_starts_a_new_epoch(bundles, tmp_path: Path) -> None:
    """4000 before a reboot, 4096 after it: the 4096 were all counted since the boot."""
    db = tmp_path / "h.db"
    _record(db, _symbols_at(bundles["symbols"], 4000), hours_ago=6)
    same_boot = _one(_check(bundles["symbols"], db, "ib_counters"), "ib_counters", "mlx5_5:1")
    assert same_boot.status == "fail" and "+96" in same_boot.message
    rebooted = _one(_check(bundles["symbols-rebooted"], db, "ib_counters"), "ib_counters",
                    "mlx5_5:1")
    assert rebooted.status == "fail" and "+4096" in rebooted.message
    assert "counter reset or reboot in between" in rebooted.message


def test_an_old_count_that_stopped_growing_passes(bundles, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _record(db, bundles["symbols"], hours_ago=30)
    r = _one(_check(bundles["symbols"], db, "ib_counters"), "ib_counters", "mlx5_5:1")
    assert r.status == "pass" and "+0" not in r.message


def test_nvlink_counters_windowed(bundles, tmp_path: Path) -> None:
    plain = _one(_check(bundles["nvlink"], None, "gpu_nvlink"), "gpu_nvlink", "gpu2")
    assert plain.status == "fail" and "link 3 Replay Errors=2400 since the driver" in plain.message
    db = tmp_path / "h.db"
    _record(db, bundles["healthy"], hours_ago=3)
    burst = _one(_check(bundles["nvlink"], db, "gpu_nvlink"), "gpu_nvlink", "gpu2")
    assert burst.status == "fail" and "Replay Errors +2400 in the" in burst.message
    # the burst stays in view for the whole window ...
    _record(db, bundles["nvlink"], hours_ago=1)
    still = _one(_check(bundles["nvlink"], db, "gpu_nvlink"), "gpu_nvlink", "gpu2")
    assert still.status == "fail" and "+2400" in still.message
    # ... and once the same counts were read before the window's start, nothing grew since
    old = tmp_path / "old.db"
    _record(old, bundles["nvlink"], hours_ago=26)
    quiet = _one(_check(bundles["nvlink"], old, "gpu_nvlink"), "gpu_nvlink", "gpu2")
    assert quiet.status == "pass", quiet.message


def test_corrected_aer_windowed(bundles, tmp_path: Path) -> None:
    """The riser fault's 6 corrected AER lines, against a site profile allowing 5 a day."""
    from stetho.checking import run as checkrun

    prof = tmp_path / "strict-aer.yml"
    prof.write_text("profile: strict-aer\nextends: h100-sxm-8gpu\n"
                    "counters: {aer_corrected_max: 5}\n")

    def aer(db: Path | None):  # type: ignore[no-untyped-def]
        return _one(list(checkrun.run([bundles["aer"]], profile=str(prof), select="pcie_aer",
                                      history=db).results), "pcie_aer", "")

    plain = aer(None)
    assert plain.status == "warn"
    assert "corrected PCIe errors=6 since boot or its last reset (max 5)" in plain.message
    db = tmp_path / "h.db"
    _record(db, bundles["healthy"], hours_ago=2)
    burst = aer(db)
    assert burst.status == "warn" and "+6 in the" in burst.message
    old = tmp_path / "old.db"
    _record(old, bundles["aer"], hours_ago=26)
    quiet = aer(old)
    assert quiet.status == "pass" and "+0 in the last 26 h" in quiet.message


def test_history_window_is_one_query_per_node(bundles, tmp_path: Path) -> None:
    """Every windowed check of a node reads its window from one load."""
    from stetho import profiles
    from stetho.checking import counter_history as window
    from stetho.checking.nodes import node_facts

    db = tmp_path / "h.db"
    _record(db, bundles["healthy"], hours_ago=2)
    facts = node_facts(bundles["symbols"], profiles.load(PROFILE))
    calls = []
    inner = window.loader(db, 24)

    def counting(f):  # type: ignore[no-untyped-def]
        calls.append(f.name)
        return inner(f)

    facts.window_loader = counting
    for _ in range(3):
        assert facts.windows().window is not None
    assert calls == ["gpu07"]


def test_sweep_judges_windows_where_the_history_is(bundles, tmp_path: Path) -> None:
    """A node's own sweep run has no history: the controller judges its counters again over
    the evidence it sent, and those results replace the node's (results.json too)."""
    import json

    from stetho.checking import run as checkrun
    from stetho.fleet.finish import HostState, judge_windows

    db = tmp_path / "h.db"
    _record(db, _symbols_at(bundles["symbols"], 4090), hours_ago=25)
    run_dir = tmp_path / "run"
    folder = run_dir / "hosts" / "gpu07"
    folder.mkdir(parents=True)
    bundles["symbols"].save(folder / "evidence.json")
    node_side = list(checkrun.run([bundles["symbols"]], profile=PROFILE).results)
    assert _one(node_side, "ib_counters", "mlx5_5:1").status == "fail"  # no history there
    st = HostState("gpu07", done=True, results=node_side)
    judge_windows(run_dir, {"gpu07": st}, db)
    judged = _one(st.results, "ib_counters", "mlx5_5:1")
    assert judged.status == "pass" and "judged on growth within 24 h" in judged.message
    assert sorted((r.check, r.subject) for r in st.results) == \
        sorted((r.check, r.subject) for r in node_side)  # replaced, nothing added or lost
    saved = json.loads((folder / "results.json").read_text())["results"]
    assert any(r["check"] == "ib_counters" and r["subject"] == "mlx5_5:1"
               and r["status"] == "pass" for r in saved)


def test_correctable_ecc_windowed(tmp_path_factory: pytest.TempPathFactory, bundles,
                                  tmp_path: Path) -> None:
    """The ecc-sbe fault's 1312 lifetime correctable errors: a burst if yesterday read 0,
    history if they were there before the window."""
    sbe = _collect(tmp_path_factory.mktemp("sbe"), ["ecc-sbe=gpu3"])
    plain = _one(_check(sbe, None, "gpu_ecc_correctable"), "gpu_ecc_correctable", "gpu3")
    assert plain.status == "warn"
    assert "correctable ECC errors=1312 since boot or its last reset" in plain.message
    db = tmp_path / "h.db"
    _record(db, bundles["healthy"], hours_ago=5)
    burst = _one(_check(sbe, db, "gpu_ecc_correctable"), "gpu_ecc_correctable", "gpu3")
    assert burst.status == "warn" and "+1312 in the" in burst.message
    old = tmp_path / "old.db"
    _record(old, sbe, hours_ago=40)
    quiet = _one(_check(sbe, old, "gpu_ecc_correctable"), "gpu_ecc_correctable", "gpu3")
    assert quiet.status == "pass" and "+0 in the last 40 h" in quiet.message


REAL_XML = Path(__file__).resolve().parents[1] / "fixtures/real/01-nvidia-smi-xml" \
    / "rtx4000-sff-ada-drv595-v13-appclocks-deprecated.xml"
HW_THERM = "<clocks_event_reasons_counters_hw_therm_slowdown>{} us" \
    "</clocks_event_reasons_counters_hw_therm_slowdown>"


def _smi(bundle: Bundle, hw_therm_us: int) -> Bundle:
    """The bundle with the real 595-driver XML (it prints the clock event counters) as its
    nvidia-smi output, its HW thermal slowdown counter at `hw_therm_us` (recorded: 0)."""
    xml = REAL_XML.read_text()
    assert HW_THERM.format(0) in xml
    xml = xml.replace(HW_THERM.format(0), HW_THERM.format(hw_therm_us))
    rec = bundle.probes["nvidia_smi"]
    return replace(bundle, probes={**bundle.probes, "nvidia_smi": replace(rec, stdout=xml)})


def test_throttle_counters_windowed(bundles, tmp_path: Path) -> None:
    """An idle GPU is rarely throttled at the instant of a check: the counter says it was.
    5 s of HW thermal slowdown since the driver loaded, with no reason active now."""
    from stetho.checking import run as checkrun

    hot = _smi(bundles["healthy"], 5_000_000)

    def throttle(bundle: Bundle, db: Path | None):  # type: ignore[no-untyped-def]
        return _one(list(checkrun.run([bundle], profile="generic", select="gpu_throttle",
                                      history=db).results), "gpu_throttle", "gpu0")

    plain = throttle(hot, None)
    assert plain.status == "warn"
    assert "HW thermal slowdown held the clocks back for 5 s since the driver" in plain.message
    db = tmp_path / "h.db"
    earlier = _smi(bundles["healthy"], 0)
    when = datetime.now(timezone.utc).timestamp() - 3 * H
    from stetho.history import recording
    from stetho.history.store import new_run_id

    for bundle, t in ((earlier, when),):
        dated = replace(bundle, collected_at=_iso(t))
        run = checkrun.run([dated], profile="generic")
        recording.after_run("check", new_run_id(), list(run.results), run.summaries, db, when=t)
    burst = throttle(hot, db)
    assert burst.status == "fail" and "for 5 s in the" in burst.message
    assert throttle(earlier, db).status == "pass"


def _flaps_at(bundle: Bundle, value: int) -> Bundle:
    """The bundle with mlx5_1's LinkDownedCounter read as `value` by sysfs and perfquery -x."""
    import re

    rec = bundle.probes["ib_sysfs"]
    path = "/sys/class/infiniband/mlx5_1/ports/1/counters/link_downed"
    assert path in rec.files
    probes = {**bundle.probes, "ib_sysfs": replace(rec, files={**rec.files, path: f"{value}\n"})}
    pq = bundle.probes["perfquery:mlx5_1"]
    text, n = re.subn(r"^(LinkDownedCounter:\.*)\d+$", rf"\g<1>{value}", pq.stdout, flags=re.M)
    assert n == 1
    probes["perfquery:mlx5_1"] = replace(pq, stdout=text)
    return replace(bundle, probes=probes)


def test_a_flap_within_the_window_is_named_a_flap(bundles, tmp_path: Path) -> None:
    """LinkDownedCounter 5 a day and a half ago, 7 six hours ago, 9 now: the span starts at
    the reading at or before the window's start (36 h), 4 flaps in it, named as flaps
    (ib_counters leaves the counter to ib_link_flaps)."""
    db = tmp_path / "h.db"
    _record(db, _flaps_at(bundles["healthy"], 5), hours_ago=36)
    _record(db, _flaps_at(bundles["healthy"], 7), hours_ago=6)
    results = _check(_flaps_at(bundles["healthy"], 9), db, "ib_link_flaps or ib_counters")
    r = _one(results, "ib_link_flaps", "mlx5_1:1")
    assert r.status == "fail" and r.value == 4, r.message
    assert "link flapped 4 times in the last 36 h" in r.message and "max 0" in r.message
    assert "cable/transceiver of mlx5_1:1" in r.remediation
    assert _one(results, "ib_counters", "mlx5_1:1").status == "pass"


def test_flaps_long_ago_pass(bundles, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _record(db, _flaps_at(bundles["healthy"], 9), hours_ago=30)
    r = _one(_check(_flaps_at(bundles["healthy"], 9), db, "ib_link_flaps"), "ib_link_flaps",
             "mlx5_1:1")
    assert r.status == "pass" and "no link flaps in the last 30 h" in r.message, r.message


def test_stetho_check_records_and_reads_the_window(tmp_path: Path) -> None:
    """As the README says: `stetho check` keeps its history (`--db`) and the next check of the
    node judges its counters against it; `--no-history` judges the count since reset."""
    import json
    import subprocess
    import sys

    from stetho.sim.builder import build_node

    db, out = tmp_path / "history.db", tmp_path / "r.json"

    def check(node: Path, *extra: str) -> dict:
        proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--sim", str(node),
                               "--profile", PROFILE, "-k", "ib_counters", "--json", str(out),
                               "-q", *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode in (0, 1), proc.stderr
        return next(r for r in json.loads(out.read_text())["results"]
                    if r["subject"] == "mlx5_5:1")

    healthy = build_node(tmp_path / "a" / "gpu07", "gpu07", [])
    assert check(healthy, "--db", str(db))["status"] == "pass"
    faulty = build_node(tmp_path / "b" / "gpu07", "gpu07", ["ib-symbol-errors=mlx5_5"])
    r = check(faulty, "--db", str(db))
    assert r["status"] == "fail" and "SymbolErrorCounter +4096 in the" in r["message"]
    assert f"history {db}" in r["message"]
    plain = check(faulty, "--no-history")
    assert plain["status"] == "fail" and "reads no history" in plain["message"]


def test_stetho_check_refuses_a_window_from_an_edited_history(tmp_path: Path) -> None:
    """As the README says, through the command: a node's history recorded by `stetho check`,
    then its earlier symbol error reading raised to what the faulty node reads now (+0 if
    believed). The next `stetho check` refuses the window, judges the count since boot (a
    fail) and names the database; drift names the edit too."""
    import json
    import sqlite3
    import subprocess
    import sys

    from stetho.sim.builder import build_node

    db, out = tmp_path / "history.db", tmp_path / "r.json"

    def check(node: Path) -> tuple[int, list[dict]]:
        proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--sim", str(node),
                               "--profile", PROFILE, "-k", "ib_counters", "--json", str(out),
                               "-q", "--db", str(db)], capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode in (0, 1, 3), proc.stderr  # 3: could not evaluate (drift)
        return proc.returncode, list(json.loads(out.read_text())["results"])

    healthy = build_node(tmp_path / "a" / "gpu07", "gpu07", [])
    assert check(healthy)[0] == 0
    with sqlite3.connect(db) as conn:
        edited = conn.execute(
            "UPDATE metrics SET value = 4096 WHERE series_id IN (SELECT id FROM series WHERE "
            "subject = 'mlx5_5:1' AND metric = 'SymbolErrorCounter')").rowcount
    assert edited == 1
    faulty = build_node(tmp_path / "b" / "gpu07", "gpu07", ["ib-symbol-errors=mlx5_5"])
    code, results = check(faulty)
    assert code == 1  # a failing check: the node is not GO
    r = next(r for r in results if r["check"] == "ib_counters" and r["subject"] == "mlx5_5:1")
    assert r["status"] == "fail"
    assert "SymbolErrorCounter=4096 since boot or its last reset" in r["message"]
    assert f"history {db} cannot be believed" in r["message"]
    drift = [r for r in results if r["check"] == "drift_shift" and r["status"] == "error"]
    assert drift and "integrity check" in drift[0]["message"]


def test_the_controller_judges_again_only_nodes_the_history_has_readings_of(
        bundles, tmp_path: Path) -> None:
    """A node with no reading in the history would be judged on the same counts it judged
    itself: its results stay as it sent them (the ingest's fresh history costs nothing);
    a node with readings is judged again over its window."""
    from stetho.checking import run as checkrun
    from stetho.fleet.finish import HostState, judge_windows, with_readings

    db = tmp_path / "h.db"
    assert with_readings(db, {"gpu07"}) == set()  # no history yet: nobody has a past
    _record(db, _symbols_at(bundles["symbols"], 4090), hours_ago=25)
    assert with_readings(db, {"gpu07", "gpu08"}) == {"gpu07"}
    run_dir = tmp_path / "run"
    for name in ("gpu07", "gpu08"):
        (run_dir / "hosts" / name).mkdir(parents=True)
        bundles["symbols"].save(run_dir / "hosts" / name / "evidence.json")
    node_side = list(checkrun.run([bundles["symbols"]], profile=PROFILE).results)
    hosts = {"gpu07": HostState("gpu07", done=True, results=list(node_side)),
             "gpu08": HostState("gpu08", done=True, results=list(node_side))}
    before = hosts["gpu08"].results
    judge_windows(run_dir, hosts, db)
    assert hosts["gpu08"].results is before  # not judged again: nothing to window
    assert _one(hosts["gpu08"].results, "ib_counters", "mlx5_5:1").status == "fail"
    judged = _one(hosts["gpu07"].results, "ib_counters", "mlx5_5:1")
    assert judged.status == "pass" and "judged on growth within 24 h" in judged.message


@pytest.mark.parametrize("steps", [0, 1, 4])
def test_the_window_load_reads_only_what_growth_uses(bundles, tmp_path: Path, steps: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The history load returns, of each counter, the newest reading at or before the window's
    start and those after it (and the boot id's over the whole lookback): every counter's
    growth must come out as from every reading of the lookback, across a counter clear and a
    reboot, for windows that start before, between and after the recorded runs; whether the
    starting readings are found run by run back from the start (`steps` runs) or, for the
    series still without one, in one scan of the rest of the lookback."""
    import sqlite3

    from stetho.checking import counter_history as window
    from stetho.facts.window import BOOT_METRIC, boot_number

    monkeypatch.setattr(window, "_STEPS", steps)

    db = tmp_path / "h.db"
    for hours_ago, which, symbols in ((190, "symbols", 10), (150, "symbols", 500),
                                      (100, "symbols", 40), (50, "symbols-rebooted", 60),
                                      (30, "symbols-rebooted", 900), (23, "symbols", 950),
                                      (7, "symbols", 20), (2, "symbols", 4000)):
        _record(db, _symbols_at(bundles[which], symbols), hours_ago=hours_ago)
    # after the reboot, a run whose IB tools all failed: no IB reading, but a boot id, 26 h
    # ago (a 24 h window's counters then start 30 h ago, at a boot id read only then)
    rec = bundles["symbols"]
    _record(db, replace(rec, probes={n: p for n, p in rec.probes.items()
                                     if not n.startswith(("ib", "perfquery", "mlxlink"))}),
            hours_ago=26)
    now = datetime.now(timezone.utc).timestamp()
    boot_now = boot_number(
        bundles["symbols"].probes["kernel_release"].files["/proc/sys/kernel/random/boot_id"])
    with sqlite3.connect(db) as conn:
        every = conn.execute(
            "SELECT s.check_name, s.subject, s.metric, m.time, m.value FROM metrics m "
            "JOIN series s ON s.id = m.series_id WHERE m.time >= ? AND m.value IS NOT NULL "
            "ORDER BY m.time", (int(now - 200 * H - window.LOOKBACK_S),)).fetchall()
    # windows that start before, between and after the runs, and exactly at each run
    nows = [(now, h * H) for h in (1, 6, 24, 40, 120, 200)]
    nows += [(t + 24 * H, 24 * H) for t in sorted({row[3] for row in every})]
    for at, span in nows:
        full: dict[tuple[str, str, str], list[Reading]] = {}
        for check, subject, metric, t, value in every:
            if int(at - span - window.LOOKBACK_S) <= t <= int(at):
                full.setdefault((check, subject, metric), []).append(Reading(t, value))
        loaded = window.load(db, "gpu07", at, span, boot_now)
        assert set(loaded.readings) == set(full)
        assert sum(map(len, loaded.readings.values())) <= sum(map(len, full.values()))
        for key, readings in full.items():
            expected = growth(readings, 5000.0, at, span, full.get(BOOT_METRIC, ()), boot_now)
            assert loaded.growth(key, 5000.0) == expected, (at - now, span, key)
    symbols = ("ib", "mlx5_5:1", "SymbolErrorCounter")
    assert [v for *key, _t, v in every if tuple(key) == symbols] == [
        10, 500, 40, 60, 900, 950, 20, 4000]
    g = window.load(db, "gpu07", now, 24 * H, boot_now).growth(symbols, 5000.0)
    # from 900 (30 h ago): the boot changed before 950 (all 950 new), the clear before 20
    assert g is not None and g.full and g.resets == 2 and g.readings == 4
    assert g.delta == 950 + 20 + (4000 - 20) + (5000 - 4000)


# -- a window believes only what stetho wrote ---------------------------------------------------

def _symbol_rows(db: Path) -> list[tuple[int, int, float]]:
    """(time, run key, value) of mlx5_5's recorded SymbolErrorCounter readings."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT m.time, m.run_key, m.value FROM metrics m JOIN series s ON s.id = "
            "m.series_id WHERE s.subject = 'mlx5_5:1' AND s.metric = 'SymbolErrorCounter' "
            "ORDER BY m.time").fetchall()


def _refused(now: Bundle, db: Path, why: str) -> None:
    """The 4,096 symbol errors `now` holds judged on their count since boot (a fail), the
    window refused with the history named, `why`, and what to do."""
    r = _one(_check(now, db, "ib_counters"), "ib_counters", "mlx5_5:1")
    assert r.status == "fail"
    assert "SymbolErrorCounter=4096 since boot or its last reset" in r.message
    assert f"history {db} cannot be believed" in r.message and why in r.message
    assert "restore" in r.message


def test_an_edited_reading_is_no_window_and_the_count_since_boot_is_judged(
        bundles, tmp_path: Path) -> None:
    """A burst of 4,096 symbol errors in the last 2 h; someone raises the reading of 2 h ago to
    4,096 so the growth reads 0. The window must not believe it: the counter is judged on its
    count since boot (it fails), and the message names the history and what to do."""
    import sqlite3

    db = tmp_path / "h.db"
    _record(db, bundles["healthy"], hours_ago=2)
    (t, run_key, before), = _symbol_rows(db)
    assert before < 4096
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE metrics SET value = 4096 WHERE time = ? AND run_key = ? AND "
                     "value = ?", (t, run_key, before))
    _refused(bundles["symbols"], db, "integrity check")


def test_a_deleted_run_is_no_window(bundles, tmp_path: Path) -> None:
    """10 symbol errors 30 h ago, 4,090 20 h ago, 4,096 now: 4,086 within the 24 h window.
    Someone deletes the run of 30 h ago with its readings, so the window would start at 4,090
    (+6, a pass). The chain is broken: the window is refused, the count since boot judged."""
    import sqlite3

    db = tmp_path / "h.db"
    _record(db, _symbols_at(bundles["symbols"], 10), hours_ago=30)
    _record(db, _symbols_at(bundles["symbols"], 4090), hours_ago=20)
    (t, run_key, _), _newer = _symbol_rows(db)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM metrics WHERE time = ? AND run_key = ?", (t, run_key))
        conn.execute("DELETE FROM node_runs WHERE time = ? AND run_key = ?", (t, run_key))
    _refused(bundles["symbols"], db, "rows missing")


def test_a_run_whose_readings_were_all_deleted_is_no_window(bundles, tmp_path: Path) -> None:
    """4,090 symbol errors 30 h ago, cleared to 0 20 h ago, 4,096 now: 4,096 within the window
    (a new epoch). Someone deletes every reading of the run of 20 h ago (its row stays), so
    the growth would read 4,096 - 4,090 = +6. That run is inside the window: its digest
    fails, the window is refused and the count since boot judged."""
    import sqlite3

    db = tmp_path / "h.db"
    _record(db, _symbols_at(bundles["symbols"], 4090), hours_ago=30)
    _record(db, _symbols_at(bundles["symbols"], 0), hours_ago=20)
    _older, (t, run_key, value) = _symbol_rows(db)
    assert value == 0
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM metrics WHERE time = ? AND run_key = ?", (t, run_key))
    _refused(bundles["symbols"], db, "integrity check")


def test_a_verified_history_still_gives_the_window(bundles, tmp_path: Path) -> None:
    """The same history untouched: growth within the window, from the verified readings."""
    db = tmp_path / "h.db"
    _record(db, _symbols_at(bundles["symbols"], 4090), hours_ago=20)
    r = _one(_check(bundles["symbols"], db, "ib_counters"), "ib_counters", "mlx5_5:1")
    assert r.status == "pass" and "judged on growth within 24 h" in r.message
    assert "cannot be believed" not in r.message


def test_the_window_reads_only_the_runs_it_verifies(bundles, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reading is verified by its run (metrics digest and all), so the window reads no
    run it does not use: those inside it and the one its counters start from, not every run
    of the week's lookback (the boot id is read only at the starting readings' times)."""
    import sqlite3

    from stetho.checking import counter_history as window
    from stetho.facts.window import BOOT_METRIC
    from stetho.history import window_trust

    db = tmp_path / "h.db"
    for hours_ago in (150, 100, 50, 30, 20, 2):
        _record(db, _symbols_at(bundles["symbols"], 10), hours_ago=hours_ago)
    now = int(datetime.now(timezone.utc).timestamp())
    spans = []
    verified = window_trust.verified

    def spy(conn, db, node, since, until):  # type: ignore[no-untyped-def]
        spans.append((since, until))
        return verified(conn, db, node, since, until)

    monkeypatch.setattr(window_trust, "verified", spy)
    with sqlite3.connect(db) as conn:
        times = [t for (t,) in conn.execute("SELECT time FROM node_runs ORDER BY time")]
        rows = window.read(conn, db, "gpu07", now, now - 24 * 3600,
                           now - 24 * 3600 - int(window.LOOKBACK_S))
    assert len(times) == 6
    assert spans == [(times[-3], now)]  # from 30 h ago (the start): 20 h and 2 h ago too
    assert {t for _key, t, _v in rows} == set(times[-3:])
    assert any(key == BOOT_METRIC and t == times[-3] for key, t, _v in rows)


def test_the_controllers_rejudge_summarises_no_node(bundles, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-judgement keeps the nodes' own summaries, so it makes none (a node's summary
    parses all of it: its versions, its busbw, every metric); its results are those of a run
    that does."""
    from stetho.checking import nodes
    from stetho.checking import run as checkrun
    from stetho.fleet.finish import HostState, judge_windows

    db = tmp_path / "h.db"
    _record(db, _symbols_at(bundles["symbols"], 4090), hours_ago=25)
    whole = checkrun.run([bundles["symbols"]], profile=PROFILE, select="ib_counters",
                         history=db)
    bare = checkrun.run([bundles["symbols"]], profile=PROFILE, select="ib_counters",
                        history=db, summaries=False)
    assert list(whole.summaries) == ["gpu07"] and bare.summaries == {}
    def judged(run: checkrun.CheckRun) -> list[dict[str, object]]:
        return [{k: v for k, v in r.to_json().items() if k != "duration_s"}
                for r in run.results]

    assert judged(bare) == judged(whole)

    def counted(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("the re-judgement summarised a node")

    folder = tmp_path / "run" / "hosts" / "gpu07"
    folder.mkdir(parents=True)
    bundles["symbols"].save(folder / "evidence.json")
    node_side = list(checkrun.run([bundles["symbols"]], profile=PROFILE).results)
    assert _one(node_side, "ib_counters", "mlx5_5:1").status == "fail"  # no history there
    st = HostState("gpu07", done=True, results=node_side)
    monkeypatch.setattr(nodes, "summary", counted)
    judge_windows(tmp_path / "run", {"gpu07": st}, db)
    assert _one(st.results, "ib_counters", "mlx5_5:1").status == "pass"


def test_a_big_rejudgement_is_spread_over_the_cores_with_the_same_verdicts(
        bundles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From JUDGE_IN_POOL nodes the re-judgement runs on pytest-xdist's workers (one a
    core): the node's counters are judged over their window all the same."""
    from stetho import check
    from stetho.checking import run as checkrun
    from stetho.fleet import finish

    db = tmp_path / "h.db"
    _record(db, _symbols_at(bundles["symbols"], 4090), hours_ago=25)
    folder = tmp_path / "run" / "hosts" / "gpu07"
    folder.mkdir(parents=True)
    bundles["symbols"].save(folder / "evidence.json")
    node_side = list(checkrun.run([bundles["symbols"]], profile=PROFILE).results)
    asked: list[object] = []
    real = check.run

    def spy(request):  # type: ignore[no-untyped-def]
        asked.append(request.workers)
        return real(request)

    monkeypatch.setattr(check, "run", spy)
    monkeypatch.setattr(finish, "JUDGE_IN_POOL", 1)
    monkeypatch.setattr(finish, "cores", lambda: 2)
    st = finish.HostState("gpu07", done=True, results=node_side)
    finish.judge_windows(tmp_path / "run", {"gpu07": st}, db)
    assert asked == [2]
    judged = _one(st.results, "ib_counters", "mlx5_5:1")
    assert judged.status == "pass" and "judged on growth within 24 h" in judged.message
    assert sorted((r.check, r.subject) for r in st.results) == \
        sorted((r.check, r.subject) for r in node_side)
