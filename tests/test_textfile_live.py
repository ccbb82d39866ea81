"""The textfile a real `stetho check --local --textfile DIR` (a subprocess, as cron or a systemd
timer runs it) leaves, read by Debian's node_exporter from DIR, scraped by Debian's
Prometheus, and answered by its HTTP API: every result of the run is a series, none dropped."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import services
from tests.services import Service, poll, query

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("textfile-live")]
NODE = "livenode"


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    reason = services.missing("prometheus", "node_exporter")
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("textfilelive")
    textfiles = root / "textfile"
    out = root / "results.json"
    proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--local", "--node", NODE,
                           "--no-history", "-q", "--json", str(out), "--textfile",
                           str(textfiles)], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1, 3), proc.stdout + proc.stderr
    assert [p.name for p in textfiles.iterdir()] == ["stetho-check.prom"]  # no temp file left
    started: list[Service] = []
    try:
        exporter = services.start_node_exporter(root / "ne", textfiles)
        started.append(exporter)
        prom = services.start_prometheus(root / "prom", exporter.url.removeprefix("http://"))
        started.append(prom)
        poll("the first scrape of stetho metrics",
             lambda: query(prom, 'stetho_run_timestamp_seconds{command="check"}'), service=prom)
        yield {"prom": prom, "exporter": exporter,
               "results": json.loads(out.read_text())["results"]}
    finally:
        for svc in reversed(started):
            svc.stop()


def test_every_result_of_the_local_check_is_a_series(scraped):
    """One series per check and subject, carrying the worst status of its results (an empty
    subject is a label Prometheus leaves out)."""
    from stetho.results import SEVERITY
    from stetho.sinks.prometheus import STATUS_CODES

    prom = scraped["prom"]
    worst: dict[tuple[str, str], str] = {}
    for r in scraped["results"]:
        key = (r["check"], r["subject"])
        if key not in worst or SEVERITY[r["status"]] < SEVERITY[worst[key]]:
            worst[key] = r["status"]
    got = query(prom, f'stetho_check_status{{command="check",node="{NODE}"}}')
    seen = {(s["metric"]["check"], s["metric"].get("subject", "")): s["value"][1] for s in got}
    assert seen == {k: str(STATUS_CODES[v]) for k, v in worst.items()} and seen


def test_node_exporter_read_the_folder_without_error(scraped):
    prom, exporter = scraped["prom"], scraped["exporter"]
    assert [s["value"][1] for s in query(prom, "node_textfile_scrape_error")] == ["0"]
    (mtime,) = query(prom, "node_textfile_mtime_seconds")
    assert Path(mtime["metric"]["file"]).name == "stetho-check.prom"
    assert "collected before" not in exporter.log.read_text()
    (info,) = query(prom, 'stetho_build_info{command="check"}')
    assert info["value"][1] == "1"
