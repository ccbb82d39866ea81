"""The evidence file a node keeps while it collects (stetho.check.partial): each probe is
encoded once, the file is replaced at most once a second, yet every state reaches the file
(a timer saves what arrived in between) and closing saves the last one. Real files."""

from __future__ import annotations

import time

from stetho.check.partial import PartialFile
from stetho.evidence import bundle as B


def _bundle(n: int, pending: int = 0) -> B.Bundle:
    probes = {f"p{i}": B.ProbeRecord(f"p{i}", "command", "ok", argv=("tool", str(i)), rc=0,
                                     stdout="out " * 50 + str(i), duration_s=0.1)
              for i in range(n)}
    probes.update({f"q{i}": B.ProbeRecord(f"q{i}", "command", "timeout", reason="unfinished")
                   for i in range(pending)})
    return B.Bundle(node="node01", collected_at="2026-12-07T00:00:00+00:00",
                    stetho_version="0", profile="generic", probes=probes)


def test_cached_lines_write_the_same_bytes_as_a_plain_save(tmp_path):
    lines: dict = {}
    first, grown = _bundle(3, pending=2), None
    first.save(tmp_path / "a.json", lines)
    # the same records again, one more, and fresh pending ones: a cached line is reused only
    # for the very record it was made from
    grown = B.Bundle(node="node01", collected_at="2026-12-07T00:00:01+00:00",
                     stetho_version="0", profile="generic",
                     probes={**{k: v for k, v in first.probes.items() if k.startswith("p")},
                             "p3": _bundle(4).probes["p3"],
                             "q1": B.ProbeRecord("q1", "command", "ok", rc=0, stdout="done")})
    grown.save(tmp_path / "cached.json", lines)
    grown.save(tmp_path / "plain.json")
    assert (tmp_path / "cached.json").read_bytes() == (tmp_path / "plain.json").read_bytes()
    assert B.load(tmp_path / "cached.json").probes["q1"].status == "ok"
    assert B.load(tmp_path / "cached.json") == grown


def test_states_within_the_interval_are_one_save(tmp_path):
    path = tmp_path / "ev.json"
    sink = PartialFile(path, every_s=60)
    sink(_bundle(1, pending=3))  # the first state is saved at once
    assert B.load(path).probes["q0"].status == "timeout"
    for n in range(2, 12):  # many probes finishing at once: not a save each
        sink(_bundle(n))
    assert sink.saves == 1
    assert len(B.load(path).probes) == 4  # the newest state waits for the interval's end
    sink.close()
    assert len(B.load(path).probes) == 11 and sink.saves == 2


def test_a_state_reaches_the_file_without_another_probe_finishing(tmp_path):
    """The trailing save: the last probe before a hang is on disk within the interval, so a
    node killed during the hang still hands back what it finished."""
    path = tmp_path / "ev.json"
    sink = PartialFile(path, every_s=0.2)
    sink(_bundle(1))
    sink(_bundle(11))  # within the interval (or, on a slow machine, a save of its own)
    for _ in range(200):  # polls: the timer's save, never another call
        if len(B.load(path).probes) == 11:
            break
        time.sleep(0.05)
    assert len(B.load(path).probes) == 11
    assert sink.saves == 2
    sink.close()
    assert sink.saves == 2  # nothing newer to save


def test_close_saves_the_last_state_at_once(tmp_path):
    path = tmp_path / "ev.json"
    sink = PartialFile(path, every_s=60)
    sink(_bundle(1))
    sink(_bundle(5))
    sink.close()
    assert len(B.load(path).probes) == 5
    sink(_bundle(9))  # closed: the collection is over, the final save is the outputs'
    time.sleep(0.1)
    assert len(B.load(path).probes) == 5 and sink.saves == 2


def test_a_failed_write_stops_saving_and_never_raises(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    sink = PartialFile(blocker / "ev.json", every_s=0)
    sink(_bundle(1))
    sink(_bundle(2))
    sink.close()
    assert sink.saves == 0
