"""EDAC sysfs parser: the counts as the kernel writes them (one decimal per file, newline),
incomplete controllers and garbage. No real EDAC tree is recorded yet (the development VM
exposes none): the simulator's node writes the same one-number files."""

from __future__ import annotations

import pytest

from stetho.parsers import ParseError, edac

MC = "/sys/devices/system/edac/mc"


def test_counts_per_controller_in_numeric_order():
    files = {f"{MC}/mc10/ce_count": "3\n", f"{MC}/mc10/ue_count": "0\n",
             f"{MC}/mc2/ce_count": "0\n", f"{MC}/mc2/ue_count": "1\n"}
    got = edac.parse_edac(files)
    assert [(m.name, m.ce, m.ue) for m in got] == [("mc2", 0, 1), ("mc10", 3, 0)]


def test_a_controller_without_ue_count():
    with pytest.raises(ParseError, match="mc0 has no ue_count"):
        edac.parse_edac({f"{MC}/mc0/ce_count": "0\n"})


@pytest.mark.parametrize("text", ["", "-1", "lots\n", "\x00\x01", "1 2"])
def test_garbage(text):
    with pytest.raises(ParseError) as exc:
        edac.parse_edac({f"{MC}/mc0/ce_count": text, f"{MC}/mc0/ue_count": "0"})
    assert exc.value.tool == "sysfs edac"


def test_wrong_path():
    with pytest.raises(ParseError, match="unexpected path"):
        edac.parse_edac({"/proc/meminfo": "0"})
