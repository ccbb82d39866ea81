"""The ingest's fast path (stetho.fleet.lazy, stetho.fleet.ingest_read) through the CLI: a
node's evidence kept as the bytes it sent, yet refused when it names another node in any
spelling; files read by worker processes giving the same verdicts as one process.

The outcomes are a real simulated node's (tests/test_ingest.py's template), re-packed the
way a node packs its evidence (compact JSON), as that fast path sees them from real nodes.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
import time
from pathlib import Path
from typing import Any

import pytest

from stetho import spool as spool_mod
from stetho.evidence.bundle import load
from stetho.fleet import lazy
from stetho.fleet import outcome as outcome_mod
from tests.test_ingest import _ingest, _latest, _rows, sim_outcome

RUN = "20260101T000000Z-fast"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return sim_outcome(tmp_path_factory.mktemp("sim"))


def _evidence(template: dict[str, Any]) -> dict[str, Any]:
    return json.loads(gzip.decompress(base64.b64decode(template["evidence_gz"])))


def _compact(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def _outcome(template: dict[str, Any], node: str, evidence: bytes | None = None
             ) -> dict[str, Any]:
    """The template as `node`'s outcome, its evidence packed as a node packs it (or
    `evidence`, the JSON bytes to pack instead)."""
    doc = copy.deepcopy(template)
    doc["node"] = node
    for r in doc["results"]["results"]:
        r["node"] = node
    doc["summary"]["node"] = node
    raw = evidence if evidence is not None else _compact({**_evidence(template), "node": node})
    doc["evidence_gz"] = base64.b64encode(gzip.compress(raw)).decode()
    return doc


def _write(spool: Path, doc: dict[str, Any], node: str) -> Path:
    """`doc` written into `node`'s folder as a spool file (through the spool's own writer,
    its content as given)."""
    out = outcome_mod.Outcome(node, doc["exit_code"], [], "", None)
    path = spool_mod.write(spool, out, run_id=RUN, kind="health-check", when=time.time())
    body = json.loads(path.read_bytes().partition(b"\n")[0])
    body["outcome"] = doc
    path.write_bytes(_compact(body) + b"\n")
    return path


def test_a_nodes_evidence_is_kept_as_the_bytes_it_sent(template: dict[str, Any],
                                                       tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    sent = _compact({**_evidence(template), "node": "n01"})
    assert lazy.plain(sent, "n01")  # what a node sends takes the fast path
    _write(spool, _outcome(template, "n01"), "n01")
    r = _ingest(spool, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = (tmp_path / "runs").iterdir()
    kept = run / "hosts" / "n01" / "evidence.json"
    assert kept.read_bytes() == sent
    assert load(kept).node == "n01"  # still a bundle every reader loads
    assert json.loads((run / "hosts" / "n01" / "summary.json").read_text())["node"] == "n01"
    assert _rows(tmp_path / "h.db") == {"n01": 1}
    assert {x.status for x in _latest(tmp_path / "h.db", "n01")} <= {"pass", "skip"}


def _spellings(ev: bytes) -> dict[str, bytes]:
    head, tail = ev[:-1], ev[-1:]
    return {
        "a second node key": head + b',"node":"n02"' + tail,
        "a second node key, spaced": head + b',"node" : "n02"' + tail,
        "an escaped key": head + b',"\\u006eode":"n02"' + tail,
        "another node in the head": ev.replace(b'"node":"n01"', b'"node":"n02"', 1),
    }


@pytest.mark.parametrize("how", list(_spellings(b"{}")))
def test_evidence_naming_another_node_in_any_spelling_is_refused(
        template: dict[str, Any], tmp_path: Path, how: str) -> None:
    spool = tmp_path / "spool"
    forged = _spellings(_compact({**_evidence(template), "node": "n01"}))[how]
    assert not lazy.plain(forged, "n01")  # never the fast path: the full parse judges it
    _write(spool, _outcome(template, "n01", forged), "n01")
    r = _ingest(spool, tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    (err,) = _latest(tmp_path / "h.db", "n01")
    assert err.status == "error" and "claims node 'n02'" in err.message
    assert "its evidence is of n02" in err.message
    assert _rows(tmp_path / "h.db") == {"n01": 1}


def test_the_busy_probe_is_read_from_the_kept_bytes(template: dict[str, Any],
                                                    tmp_path: Path) -> None:
    """A node asked what runs on it (a sweep's busy probe): read from the bytes alone, and
    the run lists the node busy as a sweep does."""
    from stetho.evidence.bundle import ProbeRecord

    ev = _evidence(template)
    busy = ProbeRecord("busy", "command", "ok", argv=("squeue", "-h", "-w", "n01", "-o", "%A"),
                       stdout="4242\n").to_json()
    ev["probes"] = {**ev["probes"], "busy": busy}
    sent = _compact({**ev, "node": "n01"})
    assert lazy.plain(sent, "n01")
    assert lazy.busy_record(sent) == busy
    _write(tmp_path / "spool", _outcome(template, "n01", sent), "n01")
    r = _ingest(tmp_path / "spool", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    (run,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert list(summary["busy_nodes"]) == ["n01"] and "4242" in summary["busy_nodes"]["n01"]
    without = {**ev, "node": "n01", "probes": {k: v for k, v in ev["probes"].items()
                                                if k != "busy"}}
    assert lazy.plain(_compact(without), "n01") and lazy.busy_record(_compact(without)) is None
    twice = sent[:-1] + b',"x":{"busy":1}}'  # a second busy token: not settled by bytes
    assert not lazy.plain(twice, "n01")


def test_workers_give_the_verdicts_one_process_gives(template: dict[str, Any],
                                                    tmp_path: Path) -> None:
    """Good nodes, garbage, a file naming another node: read by two worker processes and by
    this one, the same history, the same refusals, the same files moved."""
    seen = {}
    for workers in ("2", "0"):
        tmp = tmp_path / workers
        spool = tmp / "spool"
        for n in ("n01", "n02", "n03", "n04"):
            _write(spool, _outcome(template, n), n)
        _write(spool, _outcome(template, "n02"), "n05")  # n02's, in n05's folder
        (spool / "n06").mkdir()
        (spool / "n06" / f"{RUN}.json").write_bytes(b"{not json")
        r = _ingest(spool, tmp, "--workers", workers)
        assert r.returncode == 3, r.stdout + r.stderr
        assert "2 refused" in r.stdout
        db = tmp / "h.db"
        seen[workers] = (
            _rows(db),
            {n: sorted((x.check, x.subject, x.status, x.message) for x in _latest(db, n))
             for n in _rows(db)},
            sorted(str(p.relative_to(spool)) for p in spool.rglob("*.json*")))
    assert seen["2"] == seen["0"]
    rows, latest, moved = seen["2"]
    assert rows == {f"n0{i}": 1 for i in range(1, 7)}
    assert "claims node 'n02'" in latest["n05"][0][3]
    assert f"n06/bad/{RUN}.json" in moved and f"n01/ingested/{RUN}.json" in moved
