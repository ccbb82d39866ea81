"""`systemctl is-active` / `pgrep -l -x` as the fabric_manager probe prints them. The outputs
are one word (man systemctl, is-active) or `PID NAME` lines (man pgrep, -l): the forms are
spelled out here rather than recorded."""

from __future__ import annotations

import pytest

from stetho.parsers import ParseError
from stetho.parsers.service_state import STATES, parse


@pytest.mark.parametrize("state", STATES)
def test_every_systemd_state(state: str) -> None:
    s = parse(f"{state}\n")
    assert s.state == state and s.source == "systemctl"
    assert s.active == (state in ("active", "reloading"))


def test_pgrep_listing_means_running() -> None:
    s = parse("2481 nv-fabricmanager\n")
    assert s.active and s.source == "pgrep" and s.pids == (2481,)


@pytest.mark.parametrize("text", ["", "\n", b"\x00\xff\xfe", "Active: active (running)\n",
                                  "System has not been booted with systemd\n",
                                  "active\ninactive\n", "nvidia-smi -q\n"])
def test_garbage_is_a_parse_error(text: str | bytes) -> None:
    with pytest.raises(ParseError):
        parse(text)
