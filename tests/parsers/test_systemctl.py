"""`systemctl is-active` parser: the one-state-per-line format, the recorded output of a
machine without systemd (nothing on stdout), and garbage."""

from __future__ import annotations

import pytest

from stetho.parsers import ParseError, systemctl
from tests.conftest import REPO

RECORDED = sorted((REPO / "fixtures" / "recorded").glob("*/systemctl-is-active*.txt"))
UNITS = ("slurmd", "munge", "nvidia-persistenced")


def test_states_in_order():
    got = systemctl.parse_is_active("active\nfailed\ninactive\n", UNITS)
    assert got == {"slurmd": "active", "munge": "failed", "nvidia-persistenced": "inactive"}


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_without_systemd(path):
    """Recorded with stderr folded in: the messages are not unit states, so not parsed as
    such; on stdout alone (empty) the count is wrong. Both are a ParseError, never a pass."""
    text = path.read_text()
    assert "not been booted with systemd" in text
    with pytest.raises(ParseError):
        systemctl.parse_is_active(text, ("ssh", "cron", "dbus"))
    with pytest.raises(ParseError, match="0 state lines for 3 units"):
        systemctl.parse_is_active("", ("ssh", "cron", "dbus"))


@pytest.mark.parametrize("text", ["", "active\n", "active\nactive\nrunning\n", "\x00\x01\x02",
                                  "active\nactive\nactive\nactive\n",
                                  "Failed to connect to bus: Host is down\n"])
def test_garbage(text):
    with pytest.raises(ParseError) as exc:
        systemctl.parse_is_active(text, UNITS)
    assert exc.value.tool == "systemctl is-active"
