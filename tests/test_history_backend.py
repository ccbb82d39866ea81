"""The narrow history interface (stetho.history.backend): the gate, its pins and the
recorders reach the store only through it. Proven on the real SQLite backend seen through
nothing but the interface's names (any other attribute raises), not on a fake."""

from __future__ import annotations

import shutil
import time

import pytest

from stetho.gate import decision, pinning
from stetho.gate.policy import load as load_policy
from stetho.history import backend, recording
from stetho.history.backend import HistoryBackend, open_history
from stetho.history.errors import HistoryError
from stetho.history.store import History
from stetho.results import Result

#: what a backend must implement: the Protocol's own names
NAMES = frozenset(n for n in vars(HistoryBackend) if not n.startswith("_")) | {
    "__enter__", "__exit__"}


class OnlyTheInterface:
    """The SQLite backend with every attribute outside HistoryBackend hidden; counts calls."""

    def __init__(self, inner: History) -> None:
        self._inner = inner
        self.used: list[str] = []

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        if name not in NAMES:
            raise AttributeError(f"{name!r} is not part of HistoryBackend")
        self.used.append(name)
        return getattr(self._inner, name)

    def __enter__(self) -> OnlyTheInterface:
        return self

    def __exit__(self, *exc: object) -> None:
        self._inner.close()


@pytest.fixture
def narrow(monkeypatch):
    opened: list[OnlyTheInterface] = []

    def open_narrow(db):  # type: ignore[no-untyped-def]
        h = OnlyTheInterface(History(db))
        opened.append(h)
        return h

    monkeypatch.setattr(backend, "open_history", open_narrow)
    return opened


def test_sqlite_is_a_history_backend(tmp_path):
    with open_history(tmp_path / "h.db") as h:
        assert isinstance(h, HistoryBackend)


def test_a_url_names_the_backend_this_stetho_lacks(tmp_path):
    with pytest.raises(HistoryError, match="no 'postgresql' history backend"):
        open_history("postgresql://ctl/stetho")


def test_recording_and_the_gate_go_through_the_interface(tmp_path, narrow):
    db = tmp_path / "h.db"
    now = time.time()
    summaries = {n: {"profile": "h100-sxm-8gpu", "metrics": []} for n in ("n1", "n2")}
    recording.after_run("sweep", "r1", [
        Result("n1", "gpu_count", "", "pass", "8 GPUs"),
        Result("n2", "gpu_count", "", "fail", "7 GPUs", 7, "", 8)], summaries, db,
        when=now - 60)
    assert "record" in narrow[-1].used
    policy = tmp_path / "ops.yml"
    policy.write_text("policy: ops\nchecks: [gpu_count]\nblock_on: [fail]\nfreshness: 6h\n")
    pol = load_policy(str(policy))
    got = decision.from_history(db, ["n1", "n2", "n3"], pol, now=now)
    assert narrow[-1].used == ["latest_per_check"]
    assert got.unavailable is None and not got.distrusted
    assert {n: [r.status for r in rs] for n, rs in got.results.items()} == {
        "n1": ["pass"], "n2": ["fail"]}
    verdict = decision.decide(pol, [r for rs in got.results.values() for r in rs])
    assert verdict.blocked_nodes == ["n2"] and verdict.go_nodes == {"n1"}
    pins, problem = pinning.pins_for(["n1", "n2"], db, None)
    assert problem is None and narrow[-1].used == ["pinned_profiles"]
    assert pins.pins["n1"].profile == "h100-sxm-8gpu"


def test_ingest_records_each_run_once_through_the_interface(tmp_path, narrow):
    """stetho ingest's ledger (exactly once) and its recording go through the interface: a
    second ingest of the same spool file records nothing."""
    from stetho import spool
    from stetho.fleet.ingest import IngestOptions, ingest
    from stetho.fleet.outcome import Outcome

    box, db = tmp_path / "spool", tmp_path / "h.db"
    out = Outcome.of([Result("n1", "gpu_count", "", "pass", "8 GPUs")], None, None)
    path = spool.write(box, out, run_id="hc-1", kind="health-check", when=time.time() - 5)
    shutil.copy(path, tmp_path / "again.json")
    first = ingest(IngestOptions(box, tmp_path / "runs", db=db, reports=False))
    assert [r.status for r in first.results if r.node == "n1"] == ["pass"]
    shutil.copy(tmp_path / "again.json", path)  # the same file dropped again
    ingest(IngestOptions(box, tmp_path / "runs", db=db, reports=False))
    used = [name for h in narrow for name in h.used]
    assert used.count("record") == 1 and "ledger_known" in used
    with History(db) as h:
        assert h.conn.execute("SELECT count(*) FROM node_runs").fetchone()[0] == 1
