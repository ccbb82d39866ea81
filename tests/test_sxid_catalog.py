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
