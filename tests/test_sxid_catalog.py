"""The SXid table is data with a source on every row, and every SXid in the real recorded
kernel logs has a row (a code without one is an error in nvswitch_sxid)."""

from __future__ import annotations

from stetho.facts.fabric import sxid_catalog
from stetho.parsers import kernel_log
from tests.conftest import REAL


def test_every_row_is_cited_and_named() -> None:
    rows = sxid_catalog()
    assert rows
    for code, row in rows.items():
        assert code == row.code > 0
        assert row.name and row.meaning and len(row.source) > 20


def test_every_recorded_sxid_has_a_row() -> None:
    seen = set()
    for path in sorted((REAL / "05-kernel-log").glob("*sxid*")):
        seen |= {e.code for e in kernel_log.parse(path.read_text()).sxids}
    assert seen == {20034, 22013}
    assert seen <= set(sxid_catalog())


def test_every_row_says_how_the_guide_classes_it() -> None:
    assert {r.documented for r in sxid_catalog().values()} == {"non-fatal", "fatal",
                                                               "always fatal"}


def test_listed_codes_map_as_documented() -> None:
    """Rows as the Fabric Manager User Guide's appendix lists them (via gpud's table)."""
    rows = sxid_catalog()
    assert (rows[11004].name, rows[11004].documented) == ("Ingress invalid ACL", "non-fatal")
    assert (rows[20001].name, rows[20001].documented) == ("TX Replay Error", "non-fatal")
    assert (rows[12001].name, rows[12001].documented) == ("egress crossbar overflow", "fatal")
    assert (rows[22003].name, rows[22003].documented) == ("Minion Halt", "always fatal")
    assert rows[20034].documented == "fatal" and rows[22013].documented == "non-fatal"
    assert "D.6 Always Fatal" in rows[12020].source and "1a0b79cb" in rows[12020].source


def test_recorded_severity_agrees_with_the_guide() -> None:
    """The driver's own word on each recorded line matches the guide's class of its code."""
    for path in sorted((REAL / "05-kernel-log").glob("*sxid*")):
        for e in kernel_log.parse(path.read_text()).sxids:
            assert e.fatal == (sxid_catalog()[e.code].documented != "non-fatal")
