"""What makes an incident a new event (issue 25): the leading cause's evidence by its identity,
with a counter's value (a DBE count that grew is new) but never a gauge's reading (busbw
301.2 or 299.8 GB/s is the same drop measured again). Repeats count new events only, read back
from real report files."""

from __future__ import annotations

from pathlib import Path

from stetho.diagnosis import engine, report, runs
from stetho.diagnosis.model import QUANTITIES, Diagnosis
from stetho.diagnosis.signals import SIGNALS, NodeContext
from stetho.publish import kb
from stetho.results import Result


def _busbw_drop(busbw: float, run: str) -> Diagnosis:
    rows = [Result("n1", "nccl_busbw", "allreduce@8GiB", "fail", "busbw under its baseline",
                   value=busbw, unit="GB/s", expected=380.0, reference=380.0),
            Result("n1", "pcie_link", "gpu3", "fail", "link trained at x8", value="Gen5 x8",
                   expected="Gen5 x16")]
    return engine.diagnose(NodeContext("n1", rows), run=run)


def _dbe(count: int, run: str) -> Diagnosis:
    rows = [Result("n1", "gpu_ecc", "gpu3", "fail", f"{count} uncorrectable ECC errors",
                   value=count, unit="uncorrectable ECC errors since the last reset",
                   expected=0)]
    return engine.diagnose(NodeContext("n1", rows), run=run)


def test_a_jittery_measurement_is_the_same_event_and_a_grown_counter_a_new_one():
    a, b = _busbw_drop(301.2, "20251201T030000Z-a"), _busbw_drop(299.8, "20251202T030000Z-b")
    assert a.cause == b.cause == "riser-pcie-slot"
    busbw = [e for e in a.top.evidence if e.signal.startswith("busbw_drop")]
    assert busbw and {e.quantity for e in busbw} == {"gauge"}
    assert a.event and a.event == b.event
    # a different part is a different event, whatever the reading
    other = [Result("n1", "pcie_link", "gpu5", "fail", "x8", value="Gen5 x8",
                    expected="Gen5 x16")]
    assert engine.diagnose(NodeContext("n1", other), run="x").event != a.event
    two, four = _dbe(2, "20251201T030000Z-a"), _dbe(4, "20251202T030000Z-b")
    assert two.cause == four.cause == "gpu-memory-failing"
    assert [e.quantity for e in two.top.evidence] == ["counter"]
    assert two.event != four.event
    assert _dbe(2, "20251203T030000Z-c").event == two.event


def test_every_signal_declares_a_known_quantity():
    rows = [Result("n1", "nccl_busbw", "allreduce@8GiB", "fail", "low", value=1.0, unit="GB/s"),
            Result("n1", "gpu_ecc", "gpu3", "fail", "dbe", value=2),
            Result("n1", "gpu_temperature", "gpu1", "fail", "hot", value=91.0, unit="C")]
    ctx = NodeContext("n1", rows)
    seen = [e for f in SIGNALS.values() for e in f(ctx)]
    assert seen and all(e.quantity in QUANTITIES for e in seen)
    assert {e.signal: e.quantity for e in seen}["gpu_hot"] == "gauge"


def test_repeats_count_new_events_only_from_report_files(tmp_path: Path):
    """Three nightly reports of one busbw drop with jittering readings are one event (no
    repeat); a DBE count that grew each night is a new event each night."""
    def repeats(make, values) -> int:
        out = tmp_path / make.__name__
        metas = []
        for day, v in enumerate(values, start=1):
            d = make(v, f"202512{day:02d}T030000Z-r{day}")
            metas.append(kb.read_report(report.write(d, out)))
        *earlier, me = metas
        return len(runs.new_events(earlier, me, []))

    assert repeats(_busbw_drop, [301.2, 299.8, 300.5]) == 0
    assert repeats(_dbe, [2, 4, 6]) == 2
