"""/proc/self/limits and nr_hugepages parsers on every real recording (fixtures/recorded/*/)
and on garbage."""

from __future__ import annotations

import pytest

from stetho.parsers import ParseError, limits
from tests.conftest import REPO, mutation_outcomes

RECORDED = REPO / "fixtures" / "recorded"
LIMITS = sorted(RECORDED.glob("*/limits"))
HUGEPAGES = sorted(RECORDED.glob("*/nr_hugepages"))


def test_recordings_found():
    assert LIMITS and HUGEPAGES


@pytest.mark.parametrize("path", LIMITS, ids=lambda p: p.parent.name)
def test_limits_real(path):
    got = limits.parse_limits(path.read_text())
    lock = got["Max locked memory"]
    assert (lock.soft, lock.hard, lock.unit) == (8388608, 8388608, "bytes")
    assert got["Max cpu time"].soft is None  # unlimited
    assert got["Max nice priority"].unit == ""  # a row without units
    assert len(got) == 16


@pytest.mark.parametrize("path", HUGEPAGES, ids=lambda p: p.parent.name)
def test_hugepages_real(path):
    assert limits.parse_count(path.read_text(), "nr_hugepages") == 0


@pytest.mark.parametrize("text", ["", "\x00\x01", "garbage\n", "Limit Soft Limit\n",
                                  "Filesystem 1-blocks Used Available Capacity Mounted on\n"])
def test_limits_garbage(text):
    with pytest.raises(ParseError):
        limits.parse_limits(text)


def test_limits_truncated_before_memlock():
    text = LIMITS[0].read_text()
    with pytest.raises(ParseError, match="Max locked memory"):
        limits.parse_limits(text.split("Max locked memory")[0])


@pytest.mark.parametrize("text", ["", "-1", "lots", "1 2", "\x00"])
def test_count_garbage(text):
    with pytest.raises(ParseError):
        limits.parse_count(text, "/proc/sys/vm/nr_hugepages")


def test_mutations_parse_or_raise_parse_error():
    def memlock(text: str) -> object:
        return limits.parse_limits(text)["Max locked memory"]

    assert mutation_outcomes(memlock, LIMITS[0].read_text(),
                             "/proc/self/limits") == {"parsed", "error"}
