"""Slurm hostlist expressions, both ways, and names that must be refused."""

from __future__ import annotations

import pytest

from stetho.core import hostlist
from stetho.errors import ConfigError


@pytest.mark.parametrize("expr, names", [
    ("gpu[001-003]", ["gpu001", "gpu002", "gpu003"]),
    ("gpu[001-002,100]", ["gpu001", "gpu002", "gpu100"]),
    ("gpu[8-11]", ["gpu8", "gpu9", "gpu10", "gpu11"]),
    ("node07", ["node07"]),
    ("a[1-2]-b[1-2]", ["a1-b1", "a1-b2", "a2-b1", "a2-b2"]),
    ("gpu[01-02],login1,gpu01", ["gpu01", "gpu02", "login1"]),
    ("rack1.gpu[1,3]", ["rack1.gpu1", "rack1.gpu3"]),
])
def test_expand(expr, names):
    assert hostlist.expand(expr) == names


def test_expand_064():
    names = hostlist.expand("gpu[001-064,100]")
    assert len(names) == 65 and names[0] == "gpu001" and names[63] == "gpu064"


@pytest.mark.parametrize("expr", [
    "gpu[1-", "gpu]1[", "gpu[a-b]", "gpu[3-1]", "gpu;rm -rf /", "gpu[1-2]$(reboot)",
    "node`id`", "a b", "gpu[1-2]|x", "-node", "node&", "gpu[0-99999999]",
])
def test_refused(expr):
    with pytest.raises(ConfigError):
        hostlist.expand(expr)


@pytest.mark.parametrize("names, expr", [
    (["gpu001", "gpu002", "gpu003", "gpu010"], "gpu[001-003,010]"),
    (["n1", "n2", "n4", "login"], "n[1-2,4],login"),
    (["node07"], "node07"),
])
def test_compress_round_trip(names, expr):
    assert hostlist.compress(names) == expr
    assert hostlist.expand(expr) == names


@pytest.mark.parametrize("name", ["gpu01\n", "gpu01\nreboot", "", "a" * 300, "gpu 01"])
def test_validate_refuses_the_whole_string(name):
    with pytest.raises(ConfigError):
        hostlist.validate(name)
