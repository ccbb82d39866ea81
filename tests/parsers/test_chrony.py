"""`chronyc tracking` parser on every real sample (fixtures/real/14-host/chronyc-tracking*),
the simulator's unsynchronised copy of it, and garbage."""

from __future__ import annotations

import pytest

from stetho.parsers import ParseError, chrony
from tests.conftest import mutation_outcomes, real_files, real_ids

SAMPLES = real_files("14-host", "chronyc-tracking*")


def test_samples_found():
    assert SAMPLES


@pytest.mark.parametrize("path", SAMPLES, ids=real_ids(SAMPLES))
def test_real(path):
    t = chrony.parse_tracking(path.read_text())
    assert t.synchronised and t.leap_status == "Normal" and t.stratum > 0
    assert abs(t.offset_s) < 0.1 and t.last_offset_s is not None


def test_recorded_synced_values():
    t = chrony.parse_tracking(SAMPLES[0].read_text())
    assert (t.reference_id, t.reference_name, t.stratum) == ("C0A80073", "192.168.0.115", 3)
    assert t.offset_s == pytest.approx(3.4e-8) and t.last_offset_s == pytest.approx(-3.1117e-5)


def test_unsynced_copy_and_slow_sign():
    """The clock-unsynced fault's edit of the real sample (the only attribute it touches)."""
    from types import SimpleNamespace

    from stetho.sim.faults_host import clock_unsynced

    d = SimpleNamespace(chrony_tracking=SAMPLES[0].read_text())
    clock_unsynced(d, None)  # type: ignore[arg-type]
    t = chrony.parse_tracking(d.chrony_tracking)
    assert not t.synchronised and t.stratum == 0 and t.offset_s == pytest.approx(-2.5)


@pytest.mark.parametrize("text", [
    "", "\x00\x01\x02\x03", "506 Cannot talk to daemon\n", "garbage\n",
    "Reference ID    : C0A80073 (x)\nStratum         : 3\n",  # truncated
    "NVRM: Xid (PCI:0000:4c:00): 79, GPU has fallen off the bus\n"])
def test_garbage(text):
    with pytest.raises(ParseError) as exc:
        chrony.parse_tracking(text)
    assert exc.value.tool == "chronyc tracking"


def test_mutations_parse_or_raise_parse_error():
    assert mutation_outcomes(chrony.parse_tracking, SAMPLES[0].read_text(),
                             "chronyc tracking") == {"parsed", "error"}
