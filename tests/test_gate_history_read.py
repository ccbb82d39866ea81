"""The gate reads from history only the checks its policy (and its shadows) count, and the
pseudo-checks: what that leaves out must never change a verdict."""

from __future__ import annotations

import time
from pathlib import Path

from stetho.gate import decision
from stetho.gate.policy import load as load_policy
from stetho.history.store import History, NodeRun
from stetho.results import Result


def _record(db: Path, run: str, when: float, results: list[Result]) -> None:
    with History(db) as h:
        h.record(run, "sweep", [NodeRun("n01", "h100-sxm-8gpu", results, [])], when=when)


def test_only_counted_checks_are_read_and_an_older_could_not_check_stays_old(
        tmp_path: Path) -> None:
    """n01's newest run holds only a check pre-job does not count (a site check); the run
    before it could not check the node at all (`sweep` error) and the one before that passed
    gpu_count. The newest run is still the node's newest: the older `sweep` error is not
    taken from the run after it (as it was when "newest" meant "first with kept results"),
    and the uncounted check's result is not decoded."""
    db = tmp_path / "h.db"
    now = time.time()
    _record(db, "r1", now - 300, [Result("n01", "gpu_count", "", "pass", "8 GPUs")])
    _record(db, "r2", now - 200, [Result("n01", "sweep", "", "error", "unreachable")])
    _record(db, "r3", now - 100, [Result("n01", "site_motd", "", "pass", "ok")])
    got = decision.from_history(db, ["n01"], load_policy("pre-job"), now=now)
    checks = {r.check for r in got.results["n01"]}
    assert "site_motd" not in checks
    assert "sweep" not in checks, got.results["n01"]
    assert "gpu_count" in checks


def test_the_newest_runs_could_not_check_is_kept(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    now = time.time()
    _record(db, "r1", now - 300, [Result("n01", "gpu_count", "", "pass", "8 GPUs")])
    _record(db, "r2", now - 100, [Result("n01", "sweep", "", "error", "unreachable")])
    got = decision.from_history(db, ["n01"], load_policy("pre-job"), now=now)
    assert [r.status for r in got.results["n01"] if r.check == "sweep"] == ["error"]


def test_a_decoded_result_is_what_from_json_reads_whatever_wrote_it() -> None:
    """stetho.results.adopt, how the read builds results: this version's dicts become the
    result's own, another version's (keys reordered, a field added) go through from_json,
    and an unknown status is an error either way."""
    from stetho.results import adopt

    r = Result("n01", "gpu_ecc", "gpu0", "pass", "ok", value=[1, 2], unit="count")
    assert adopt(r.to_json()) == r and adopt(r.to_json()).to_json() == r.to_json()
    assert adopt(dict(reversed(list(r.to_json().items())))) == r
    assert adopt({**r.to_json(), "added_later": 1}) == r
    rest = {k: v for k, v in r.to_json().items() if k != "status"}
    for d in ({**r.to_json(), "status": "fine"}, {"status": "fine", **rest}):  # in order, not
        got = adopt(d)
        assert got.status == "error" and "unknown status" in got.message
