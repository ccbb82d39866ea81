"""A passing node's trends (stetho.diagnosis.runs.trending_nodes) read its last runs, not its
whole history: a nightly sweep asks every node, and a year of a node's readings told the
signals nothing its last runs do not. The node found is diagnosed on its whole history."""

from __future__ import annotations

import json

from stetho.diagnosis import runs, trends
from stetho.history.store import History, NodeRun
from stetho.results import Result

DAY = 86400
NOW = 1_780_000_000
RUN = "20260528T000000Z-now"


def _metrics(sbe: float) -> list[list[object]]:
    return [["gpu", "gpu3", "ecc_correctable", sbe, ""], ["gpu", "gpu0", "ecc_correctable", 5, ""]]


def _history(tmp_path, nights: dict[int, float], prolog_at: tuple[int, ...] = ()
             ) -> History:
    """n01's history: one sweep a night (nights ago -> its gpu3 SBE count), a prolog gate
    without readings at each time in `prolog_at`, and this run's readings (SBE 900)."""
    h = History(tmp_path / "h.db")
    for k, sbe in sorted(nights.items(), reverse=True):
        h.record(f"night{k:03d}", "sweep", [NodeRun("n01", "p", [], _metrics(sbe))],
                 when=NOW - k * DAY)
    for t in prolog_at:
        h.record(f"prolog{t}", "gate", [NodeRun("n01", "p", [
            Result("n01", "gpu_count", "", "pass", "8 GPUs")], [])], when=t)
    h.record(RUN, "sweep", [NodeRun("n01", "p", [], _metrics(900))], when=NOW)
    return h


def _trending(tmp_path, h: History) -> list[str]:
    host = tmp_path / "run" / "hosts" / "n01"
    host.mkdir(parents=True, exist_ok=True)
    (host / "summary.json").write_text(json.dumps({"metrics": _metrics(900)}))
    passing = [Result("n01", "gpu_ecc", "gpu3", "pass", "under the limit")]
    return runs.trending_nodes(tmp_path / "run", passing, h, RUN, skip=set())


def test_recent_window_counts_runs_with_readings_and_leaves_this_run_out(tmp_path):
    h = _history(tmp_path, {5: 100, 4: 200, 3: 300, 2: 400, 1: 500},
                 prolog_at=(NOW - DAY // 2, NOW - DAY // 3))
    # the prologs have no readings; this run is not its own past
    assert h.recent_window("n01", 3, RUN) == (NOW - 3 * DAY, NOW - DAY)
    assert h.recent_window("n01", 1, RUN) == (NOW - DAY, NOW - DAY)
    assert h.recent_window("n01", 9, RUN) == (NOW - 5 * DAY, NOW - DAY)  # fewer: the oldest
    assert h.recent_window("n01", 3) == (NOW - 2 * DAY, NOW)  # counted when not left out
    assert h.recent_window("nobody", 3, RUN) is None
    # an older run looks back from its own time: what came after it is not its past
    assert h.recent_window("n01", 2, "night003") == (NOW - 5 * DAY, NOW - 4 * DAY)
    assert h.recent_window("n01", 2, "night005") is None
    h.close()
    only = History(tmp_path / "only.db")
    only.record(RUN, "sweep", [NodeRun("n01", "p", [], _metrics(900))], when=NOW)
    assert only.recent_window("n01", 3, RUN) is None
    only.close()


def test_a_rise_in_the_last_runs_is_found_reading_only_them(tmp_path, monkeypatch):
    """A year of flat nights, then growth 100 a night: n01 is trending, and the read that
    found it went from its third-newest earlier run to its newest, with prologs between."""
    nights = {k: 100.0 for k in range(365, 3, -1)} | {3: 200, 2: 300, 1: 400}
    h = _history(tmp_path, nights, prolog_at=(NOW - DAY // 2,))
    seen: list[tuple[float, float | None]] = []
    real = History.samples

    def spy(self, node, series_ids, since, until=None):  # type: ignore[no-untyped-def]
        seen.append((since, until))
        return real(self, node, series_ids, since, until)

    monkeypatch.setattr(History, "samples", spy)
    assert _trending(tmp_path, h) == ["n01"]
    assert seen == [(NOW - trends.TREND_RUNS * DAY, NOW - DAY)]  # this run's own: not read
    h.close()


def test_a_flat_recent_history_is_not_a_trend_whatever_came_before(tmp_path):
    """Growth long ago, flat for the last runs: nothing rising now."""
    nights = {k: 10.0 * (400 - k) for k in range(365, 3, -1)} | {3: 900, 2: 900, 1: 900}
    h = _history(tmp_path, nights)
    assert _trending(tmp_path, h) == []
    h.close()


def test_a_node_without_earlier_readings_reads_nothing(tmp_path, monkeypatch):
    h = _history(tmp_path, {}, prolog_at=(NOW - DAY,))

    def fail(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("read samples for a node with no earlier readings")

    monkeypatch.setattr(History, "samples", fail)
    assert _trending(tmp_path, h) == []
    h.close()
