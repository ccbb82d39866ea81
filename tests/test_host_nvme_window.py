"""host_nvme_health over history: media errors and error-log entries judged by their growth
within the counter window, as `stetho check` records and reads it (the nvme-media-errors
fault against the same node read healthy earlier)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from stetho.evidence.bundle import Bundle

pytestmark = pytest.mark.xdist_group("nvmewindow")

H = 3600.0
PROFILE = "h100-sxm-8gpu"


def _collect(root: Path, faults: list[str]) -> Bundle:
    from stetho import profiles
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    build_node(root / "gpu07", "gpu07", faults)
    env, node = collect.sim_environment(str(root / "gpu07"))
    return collect.collect(profiles.load(PROFILE), replace(env, timeout_cap=10.0), node)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Bundle]:
    base = tmp_path_factory.mktemp("nvmewin")
    return {"healthy": _collect(base / "healthy", []),
            "media": _collect(base / "media", ["nvme-media-errors"])}


def _record(db: Path, bundle: Bundle, hours_ago: float) -> None:
    from stetho.checking import run as checkrun
    from stetho.history import recording
    from stetho.history.store import new_run_id

    when = datetime.now(timezone.utc).timestamp() - hours_ago * H
    dated = replace(bundle, collected_at=datetime.fromtimestamp(when, timezone.utc)
                    .isoformat(timespec="seconds"))
    run = checkrun.run([dated], profile=PROFILE)
    recording.after_run("check", new_run_id(), list(run.results), run.summaries, db, when=when)


def _nvme3(bundle: Bundle, db: Path | None):  # type: ignore[no-untyped-def]
    from stetho.checking import run as checkrun

    results = checkrun.run([bundle], profile=PROFILE, select="host_nvme", history=db).results
    return next(r for r in results if r.check == "host_nvme_health" and r.subject == "nvme3")


def _err_log(bundle: Bundle, entries: int) -> Bundle:
    from stetho.sim import nvme

    rec = bundle.probes["nvme_smart:nvme3"]
    text = nvme.edit(rec.stdout, {"num_err_log_entries": entries})
    return replace(bundle, probes={**bundle.probes, "nvme_smart:nvme3": replace(rec, stdout=text)})


def test_media_errors_grow_within_the_window(bundles, tmp_path: Path) -> None:
    plain = _nvme3(bundles["media"], None)
    assert plain.status == "fail" and "media_errors=24 over the drive's life" in plain.message
    db = tmp_path / "h.db"
    _record(db, bundles["healthy"], hours_ago=3)
    grown = _nvme3(bundles["media"], db)
    assert grown.status == "fail" and "media_errors +24 in the" in grown.message


def test_media_errors_read_before_the_window_and_unchanged_pass(bundles, tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    _record(db, bundles["media"], hours_ago=26)
    quiet = _nvme3(bundles["media"], db)
    assert quiet.status == "pass", quiet.message
    assert "media_errors +0 in the last 26 h (media_errors=24 now)" in quiet.message


def test_error_log_growth_warns_only_with_history(bundles, tmp_path: Path) -> None:
    """The healthy drive's 110 error-log entries are no finding; 11 more within the window,
    over host.nvme_err_log_max (10), warn."""
    more = _err_log(bundles["healthy"], 121)
    assert _nvme3(more, None).status == "pass"
    db = tmp_path / "e.db"
    _record(db, bundles["healthy"], hours_ago=2)
    r = _nvme3(more, db)
    assert r.status == "warn" and "num_err_log_entries +11 in the" in r.message
    assert "host.nvme_err_log_max" in r.message


def _all_nvme(bundle: Bundle):  # type: ignore[no-untyped-def]
    from stetho.checking import run as checkrun

    return [r for r in checkrun.run([bundle], profile=PROFILE, select="host_nvme").results
            if r.check == "host_nvme_health"]


def test_nvme_cli_and_smartctl_missing_is_an_error_naming_the_install(bundles) -> None:
    from stetho.evidence.bundle import ProbeRecord

    b = bundles["healthy"]
    probes = {k: v for k, v in b.probes.items() if not k.startswith("nvme_smart")}
    probes["nvme_smart"] = ProbeRecord("nvme_smart", "command", "missing",
                                       argv=("nvme", "smart-log", "/dev/{device}", "-o", "json"),
                                       reason="nvme and smartctl not found on PATH")
    rows = _all_nvme(replace(b, probes=probes))
    assert len(rows) == 8 and {r.status for r in rows} == {"error"}
    assert "install nvme-cli" in rows[0].message


def test_a_node_without_nvme_skips_with_the_reason(bundles) -> None:
    b = bundles["healthy"]
    rec = b.probes["block_queue"]
    files = {p: t for p, t in rec.files.items() if "/nvme" not in p}
    rows = _all_nvme(replace(b, probes={**b.probes, "block_queue": replace(rec, files=files)}))
    assert [r.status for r in rows] == ["skip"] and "no NVMe controller" in rows[0].message
